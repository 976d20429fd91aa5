//! rustqueued's spans at a real OpenTelemetry Collector (docs/observability.md): each test
//! starts the collector of the tool cache (OTLP receiver and file exporter, built by
//! `scripts/deps.sh otelcol`) on loopback ports and spawned `rustqueued` processes that send
//! to it, then reads what the collector wrote until the spans arrive.
//!
//! The collector is `$RUSTQUEUE_CACHE/otelcol-<OTELCOL_VERSION>/bin/otelcol`; a missing one
//! fails the test with the command that builds it: these tests never skip.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::spawn::{PORT_ATTEMPTS, PortTaken};
use common::{KillOnDrop, connect, free_port};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// How long spans may take to arrive on a loaded machine (the broker exports every 100 ms,
/// the collector writes every 100 ms).
const ARRIVAL: Duration = Duration::from_secs(60);

/// The pinned collector version, from scripts/versions.env.
fn otelcol_version() -> &'static str {
    include_str!("../../../scripts/versions.env")
        .lines()
        .find_map(|line| line.strip_prefix("OTELCOL_VERSION="))
        .expect("scripts/versions.env pins OTELCOL_VERSION")
}

fn otelcol_bin() -> PathBuf {
    let cache = std::env::var_os("RUSTQUEUE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/rustqueue")
        });
    let bin = cache
        .join(format!("otelcol-{}", otelcol_version()))
        .join("bin/otelcol");
    assert!(
        bin.is_file(),
        "the OpenTelemetry Collector is not at {}: run `make deps-otelcol`",
        bin.display()
    );
    bin
}

/// One collector on a free loopback port, writing every span it receives to a file.
struct Collector {
    child: KillOnDrop,
    dir: tempfile::TempDir,
    port: u16,
}

impl Collector {
    /// Starts a collector and waits until it is ready. Its port is found free, then bound by
    /// the collector: a process of a suite running beside this one may take it in between.
    /// Then it is started again on another, up to [`PORT_ATTEMPTS`] times; any other early
    /// exit fails the test with the collector's log.
    fn start() -> Collector {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::try_start() {
                Ok(c) => return c,
                Err(PortTaken) => assert!(
                    attempts < PORT_ATTEMPTS,
                    "the collector's port taken {attempts} times in a row"
                ),
            }
        }
    }

    /// One start of [`Collector::start`]: `Err` when its port was taken.
    fn try_start() -> Result<Collector, PortTaken> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("otelcol.yaml");
        // No metrics server of its own (it would take port 8888 in every test at once).
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n",
                dir.path().join("spans.jsonl").display()
            ),
        )
        .unwrap();
        let child = Command::new(otelcol_bin())
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("otelcol.log")).unwrap())
            .spawn()
            .unwrap();
        let mut collector = Collector {
            child: KillOnDrop(child),
            dir,
            port,
        };
        let deadline = std::time::Instant::now() + ARRIVAL;
        loop {
            // The exit first: a port someone else holds accepts connections too.
            if let Some(status) = collector.child.try_wait().unwrap() {
                let log = collector.log();
                if log.contains("address already in use") {
                    eprintln!("the collector found port {port} taken; retrying on another");
                    return Err(PortTaken);
                }
                panic!("the collector exited at startup: {status}\n{log}");
            }
            // It logs this once its receiver listens, so the listener is its own.
            if collector.log().contains("Everything is ready")
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                return Ok(collector);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the collector did not listen on {port}: {}",
                collector.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("otelcol.log")).unwrap_or_default()
    }

    /// Every span written so far.
    fn spans(&self) -> Vec<Span> {
        let text = std::fs::read_to_string(self.dir.path().join("spans.jsonl")).unwrap_or_default();
        // A line still being written is left for the next read.
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .flat_map(|export| spans_of(&export))
            .collect()
    }

    /// Reads the spans until `done` holds for them; fails after [`ARRIVAL`].
    async fn spans_until(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + ARRIVAL;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} did not arrive within {ARRIVAL:?}; spans so far: {spans:#?}\ncollector: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A span as the collector wrote it, with its resource's service name.
#[derive(Clone, Debug)]
struct Span {
    service: String,
    resource: HashMap<String, String>,
    trace: String,
    id: String,
    parent: String,
    name: String,
    start_ns: u64,
    end_ns: u64,
    attrs: HashMap<String, String>,
    error: bool,
}

impl Span {
    fn attr(&self, key: &str) -> &str {
        self.attrs.get(key).map_or("", String::as_str)
    }
}

/// OTLP JSON attributes as strings (ints are strings in OTLP JSON already).
fn attributes(list: &Value) -> HashMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| {
            let v = &kv["value"];
            let s = v["stringValue"]
                .as_str()
                .map(str::to_string)
                .or_else(|| v["intValue"].as_str().map(str::to_string))
                .or_else(|| v["intValue"].as_i64().map(|i| i.to_string()))
                .or_else(|| v["boolValue"].as_bool().map(|b| b.to_string()))
                .or_else(|| v["doubleValue"].as_f64().map(|d| d.to_string()))?;
            Some((kv["key"].as_str()?.to_string(), s))
        })
        .collect()
}

fn spans_of(export: &Value) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in export["resourceSpans"].as_array().into_iter().flatten() {
        let resource = attributes(&rs["resource"]["attributes"]);
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                let ns = |k: &str| s[k].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
                out.push(Span {
                    service: service.clone(),
                    resource: resource.clone(),
                    trace: s["traceId"].as_str().unwrap_or_default().to_string(),
                    id: s["spanId"].as_str().unwrap_or_default().to_string(),
                    parent: s["parentSpanId"].as_str().unwrap_or_default().to_string(),
                    name: s["name"].as_str().unwrap_or_default().to_string(),
                    start_ns: ns("startTimeUnixNano"),
                    end_ns: ns("endTimeUnixNano"),
                    attrs: attributes(&s["attributes"]),
                    error: s["status"]["code"].as_i64() == Some(2)
                        || s["status"]["code"].as_str() == Some("STATUS_CODE_ERROR"),
                });
            }
        }
    }
    out
}

/// A spawned rustqueued sending its spans to `collector`, with `env` added.
struct Broker {
    b: common::Spawned,
    _dir: tempfile::TempDir,
}

impl Broker {
    async fn spawn(collector: &Collector, env: &[(&str, &str)]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
        cmd.env("RUSTQUEUE_DATA_PATH", dir.path().join("data"))
            .env("RUST_LOG", "warn")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            // the batch processor's export interval: spans arrive within a test's patience
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::null());
        for k in [
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_SERVICE_NAME",
            "OTEL_RESOURCE_ATTRIBUTES",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let guard = dir.path().join("disk-guard.toml");
        std::fs::write(&guard, common::DISK_GUARD_TOML).unwrap();
        cmd.env("RUSTQUEUE_CONFIG", guard);
        Broker {
            b: common::spawn_broker(&mut cmd, "/ping", ARRIVAL).await,
            _dir: dir,
        }
    }

    /// SIGTERM, and wait for the graceful exit (which exports the spans still buffered).
    fn stop(mut self) {
        kill(Pid::from_raw(self.b.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = self.b.child.wait().unwrap();
        assert!(status.success(), "rustqueued exited with {status}");
    }
}

/// Publishes `body` to `topic` and consumes it with FIN.
async fn publish_and_finish(tcp: std::net::SocketAddr, topic: &str, body: &[u8]) {
    let mut p = connect(tcp).await;
    p.publish(topic, body).await;
    let mut c = connect(tcp).await;
    c.subscribe(topic, "ch", 1).await;
    let (id, _, got) = c.expect_message().await;
    assert_eq!(got, body);
    c.fin(&id).await;
    c.cmd("NOP").await;
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.trace == parent.trace && s.parent == parent.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario: publish, FIN, REQ, timeout, then every span checked"
)]
async fn a_publish_and_its_deliveries_arrive_at_the_collector_with_their_steps() {
    let collector = Collector::start();
    let broker = Broker::spawn(
        &collector,
        &[
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_SERVICE_NAME", "broker-under-test"),
        ],
    )
    .await;
    let bodies: Vec<String> = (0..3)
        .map(|i| format!("secret body {i} {}", std::process::id()))
        .collect();
    let mut producer = connect(broker.b.tcp).await;
    for b in &bodies {
        producer.publish("traced", b.as_bytes()).await;
    }
    let mut consumer = connect(broker.b.tcp).await;
    consumer
        .send_identify(r#"{"msg_timeout":1000,"heartbeat_interval":1000}"#)
        .await;
    consumer.expect_response().await;
    consumer.subscribe("traced", "workers", 3).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (id, attempts, _) = consumer.expect_message().await;
        assert_eq!(attempts, 1);
        ids.push(id);
    }
    consumer.fin(&ids[0]).await;
    let mut req = b"REQ ".to_vec();
    req.extend_from_slice(&ids[1]);
    req.extend_from_slice(b" 600000\n");
    consumer.send(&req).await;
    // ids[2] is left alone: it times out after 1 s and is delivered again.
    let (again, attempts, _) = consumer.expect_message().await;
    assert_eq!(
        (again, attempts),
        (ids[2], 2),
        "the unfinished message came back"
    );
    consumer.fin(&again).await;
    consumer.cmd("NOP").await;

    let id_of = |i: usize| String::from_utf8_lossy(&ids[i]).into_owned();
    let spans = collector
        .spans_until("three publishes and four deliveries", |spans| {
            let publishes = spans.iter().filter(|s| s.name == "publish").count();
            let outcomes: Vec<&str> = spans
                .iter()
                .filter(|s| s.name == "deliver")
                .map(|s| s.attr("rustqueue.delivery.outcome"))
                .collect();
            publishes >= 3
                && spans.iter().filter(|s| s.name == "ack").count() >= 3
                && outcomes.iter().filter(|o| **o == "FIN").count() >= 2
                && outcomes.contains(&"REQ")
                && outcomes.contains(&"timeout")
        })
        .await;

    for s in &spans {
        assert_eq!(s.service, "broker-under-test", "{s:?}");
        for (k, v) in &s.attrs {
            for b in &bodies {
                assert!(!v.contains(b.as_str()), "attribute {k} holds a body: {s:?}");
            }
        }
    }
    for publish in spans.iter().filter(|s| s.name == "publish") {
        assert_eq!(publish.parent, "", "a publish is a root span: {publish:?}");
        assert_eq!(publish.attr("messaging.system"), "nsq");
        assert_eq!(publish.attr("messaging.operation.name"), "PUB");
        assert_eq!(publish.attr("messaging.destination.name"), "traced");
        assert_eq!(publish.attr("messaging.batch.message_count"), "1");
        assert_eq!(publish.attr("rustqueue.ack_mode"), "durable");
        assert!(!publish.error, "{publish:?}");
        let group: u64 = publish.attr("rustqueue.group.size").parse().unwrap();
        assert!(group >= 1, "{publish:?}");
        let steps = children(&spans, publish);
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ["ack", "append", "fsync", "read"], "{publish:?}");
        let step = |n: &str| *steps.iter().find(|s| s.name == n).unwrap();
        let (read, append, fsync, ack) = (step("read"), step("append"), step("fsync"), step("ack"));
        assert_eq!(fsync.attr("rustqueue.group.size"), group.to_string());
        assert!(
            append
                .attr("rustqueue.append.group.size")
                .parse::<u64>()
                .unwrap()
                >= 1
        );
        // The steps follow one another inside the publish.
        assert!(publish.start_ns <= read.start_ns, "{publish:?} {read:?}");
        assert!(read.end_ns <= append.start_ns, "{read:?} {append:?}");
        assert!(append.end_ns <= fsync.start_ns, "{append:?} {fsync:?}");
        assert!(fsync.end_ns <= ack.start_ns, "{fsync:?} {ack:?}");
        assert!(ack.end_ns <= publish.end_ns, "{ack:?} {publish:?}");
        for s in [read, append, fsync, ack] {
            assert!(s.start_ns <= s.end_ns, "{s:?}");
        }
    }

    let deliveries: Vec<&Span> = spans.iter().filter(|s| s.name == "deliver").collect();
    let delivery = |id: &str, attempts: &str| {
        deliveries
            .iter()
            .find(|s| {
                s.attr("messaging.message.id") == id
                    && s.attr("messaging.message.delivery_attempts") == attempts
            })
            .unwrap_or_else(|| panic!("no delivery of {id} attempt {attempts}: {deliveries:#?}"))
    };
    let fin = delivery(&id_of(0), "1");
    let requeued = delivery(&id_of(1), "1");
    let timed_out = delivery(&id_of(2), "1");
    let redelivered = delivery(&id_of(2), "2");
    for (span, outcome) in [
        (fin, "FIN"),
        (requeued, "REQ"),
        (timed_out, "timeout"),
        (redelivered, "FIN"),
    ] {
        assert_eq!(span.attr("rustqueue.delivery.outcome"), outcome, "{span:?}");
        assert_eq!(span.attr("messaging.system"), "nsq");
        assert_eq!(span.attr("messaging.destination.name"), "traced");
        assert_eq!(span.attr("messaging.consumer.group.name"), "workers");
        assert_eq!(span.parent, "", "a delivery is a root span: {span:?}");
    }
    let timeout_ms = (timed_out.end_ns - timed_out.start_ns) / 1_000_000;
    assert!(
        (990..1100).contains(&timeout_ms),
        "a timed-out delivery ends at its 1 s deadline, not when noticed: {timeout_ms} ms"
    );
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_variables_decide_what_is_exported() {
    let collector = Collector::start();
    for (service, sampler, arg) in [
        ("ratio-zero", "traceidratio", "0"),
        ("parent-off", "parentbased_always_off", ""),
    ] {
        let broker = Broker::spawn(
            &collector,
            &[
                ("OTEL_TRACES_SAMPLER", sampler),
                ("OTEL_TRACES_SAMPLER_ARG", arg),
                ("OTEL_SERVICE_NAME", service),
            ],
        )
        .await;
        publish_and_finish(broker.b.tcp, "unsampled", b"not traced").await;
        // Its graceful exit exports whatever it still holds.
        broker.stop();
    }
    // A broker sampling everything, started after the others exited: once its spans are
    // written, anything the others had sent would have been written before them.
    let control = Broker::spawn(
        &collector,
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=control,deployment.environment.name=test",
            ),
        ],
    )
    .await;
    publish_and_finish(control.b.tcp, "sampled", b"traced").await;
    let spans = collector
        .spans_until("the control broker's publish and delivery", |spans| {
            spans.iter().any(|s| s.name == "publish")
                && spans
                    .iter()
                    .any(|s| s.name == "deliver" && s.attr("rustqueue.delivery.outcome") == "FIN")
        })
        .await;
    for s in &spans {
        assert_eq!(
            s.service, "control",
            "only the sampling broker exports: {s:?}"
        );
        assert_eq!(
            s.resource
                .get("deployment.environment.name")
                .map(String::as_str),
            Some("test"),
            "OTEL_RESOURCE_ATTRIBUTES reach the resource: {s:?}"
        );
    }
    control.stop();
}
