//! The benchmark tool proved against the real peer, official nsqd v1.3.0 (installed by
//! `scripts/deps.sh nsqd`, a prerequisite of `make test`; a missing nsqd fails, never skips).

use std::path::PathBuf;
use std::process::Command;

use rustqueue_bench::broker::{self, Binaries, Broker, Profile};
use rustqueue_bench::compare::{self, Settings};
use rustqueue_bench::report;
use rustqueue_bench::run::{self, RunConfig};
use rustqueue_bench::sweep;

fn nsqd() -> PathBuf {
    let path = std::env::var_os("NSQD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("RUSTQUEUE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/rustqueue")
                });
            cache.join("nsqd-v1.3.0/bin/nsqd")
        });
    assert!(
        path.is_file(),
        "nsqd not found at {} — run `scripts/deps.sh nsqd` (make test does)",
        path.display()
    );
    path
}

fn bins() -> Binaries {
    Binaries {
        nsqd: nsqd(),
        rustqueued: None,
        versitygw: None,
    }
}

/// Runs `rustqueue-bench` as `cmd` describes; fails the test with its stderr unless it exits
/// zero. Its stdout.
fn bench_succeeds(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn profile(name: &str) -> Profile {
    broker::profiles()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

fn load(address: &str, pid: u32) -> RunConfig {
    RunConfig {
        address: address.to_owned(),
        topic_prefix: "test".to_owned(),
        producers: 4,
        consumers: 4,
        consume_after_publish: false,
        batch_size: 1,
        message_bytes: 1024,
        rate: None,
        warmup_seconds: 0.5,
        duration_seconds: Some(2.0),
        messages: 0,
        drain_timeout_seconds: 60.0,
        identify: true,
        broker_pid: Some(pid),
        topics: 1,
        spread_producers: false,
        producer_addresses: vec![],
        consumer_addresses: vec![],
        extra_pids: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_fin_for_two_seconds_against_nsqd_drains_with_nothing_missing() {
    let broker = Broker::start(&profile("nsqd-default"), &bins()).unwrap();
    let report = run::run(load(&broker.tcp, broker.pid())).await.unwrap();
    assert!(report.complete, "{report:#?}");
    assert_eq!(report.ledger.missing, 0);
    assert_eq!(report.ledger.received_unique, report.ledger.acknowledged);
    assert!(report.published > 100, "{report:#?}");
    assert!(report.received_in_window > 100, "{report:#?}");
    // One command in flight per producer: at most that many straddle each window edge.
    assert!(
        report.latency.count.abs_diff(report.published) <= 8,
        "{report:#?}"
    );
    assert!(report.latency.p50_us > 0 && report.latency.p99_us >= report.latency.p50_us);
    let usage = report.broker.expect("pid was given");
    assert!(
        usage.peak_rss_bytes > 1 << 20 && usage.cpu_seconds > 0.0,
        "{usage:?}"
    );
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpub_count_mode_past_the_memory_queue_delivers_exactly_the_count_after_publishing() {
    // 20,003 messages overflow nsqd's 10,000-message memory queue into its disk queue.
    let broker = Broker::start(&profile("nsqd-sync-every-2500"), &bins()).unwrap();
    let config = RunConfig {
        batch_size: 64,
        consume_after_publish: true,
        duration_seconds: None,
        messages: 20_003,
        message_bytes: 100,
        ..load(&broker.tcp, broker.pid())
    };
    let report = run::run(config).await.unwrap();
    assert!(report.complete, "{report:#?}");
    assert_eq!(report.ledger.acknowledged, 20_003);
    assert_eq!(report.ledger.received_unique, 20_003);
    assert_eq!(
        report.received_in_window, 0,
        "consumers must wait for the publish to end"
    );
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_rate_is_held_and_latency_is_recorded_per_publish() {
    let broker = Broker::start(&profile("nsqd-default"), &bins()).unwrap();
    let config = RunConfig {
        rate: Some(500.0),
        warmup_seconds: 0.0,
        ..load(&broker.tcp, broker.pid())
    };
    let report = run::run(config).await.unwrap();
    assert!(report.complete, "{report:#?}");
    // 500 msg/s for 2 s: allow timer slack, but a saturating run would be far above.
    assert!(
        (800..=1100).contains(&report.published),
        "published {}",
        report.published
    );
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_spread_over_topics_reaches_each_and_drains_every_one() {
    let broker = Broker::start(&profile("nsqd-default"), &bins()).unwrap();
    let config = RunConfig {
        topics: 3,
        producers: 4,
        consumers: 2,
        rate: Some(600.0),
        spread_producers: true,
        warmup_seconds: 0.0,
        duration_seconds: Some(1.0),
        ..load(&broker.tcp, broker.pid())
    };
    let report = run::run(config).await.unwrap();
    assert!(report.complete, "{report:#?}");
    assert!(report.published >= 400, "published {}", report.published);
    let stats = rustqueue_bench::http::get(&broker.http, "/stats?format=json").unwrap();
    let json: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    let topics = json["topics"].as_array().unwrap();
    assert_eq!(topics.len(), 3, "{json}");
    for t in topics {
        // Producers 0 and 3 share topic 0; each topic's own reader drained it.
        assert!(t["message_count"].as_u64().unwrap() > 0, "{t}");
        assert_eq!(t["channels"][0]["depth"], 0, "{t}");
    }
    broker.stop();
}

#[test]
fn the_run_command_prints_json_and_exits_zero_on_a_clean_ledger() {
    let broker = Broker::start(&profile("nsqd-default"), &bins()).unwrap();
    let stdout = bench_succeeds(
        Command::new(env!("CARGO_BIN_EXE_rustqueue-bench"))
            .args(["run", "--address", &broker.tcp, "--json"])
            .args(["--messages", "5000", "--producers", "2", "--consumers", "2"])
            .args(["--message-bytes", "200"]),
    );
    let json: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(json["ledger"]["acknowledged"], 5000);
    assert_eq!(json["ledger"]["missing"], 0);
    assert_eq!(json["complete"], true);
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_runs_profiles_in_turn_and_renders_a_table_with_ratios() {
    let settings = Settings {
        duration_seconds: 1.0,
        warmup_seconds: 0.0,
        rounds: 1,
        backlog_messages: 5_000,
        drain_timeout_seconds: 60.0,
        cases: vec![
            "pub_fin".into(),
            "backlog".into(),
            "drain_200b".into(),
            "mixed".into(),
        ],
        profiles: vec!["nsqd-default".into(), "nsqd-sync-every-2500".into()],
        restart_messages: 1_000,
        idle_topics: 1,
        drain_messages: 5_000,
        tiered_messages: 1_000,
        sweeps: false,
    };
    let mut lines = Vec::new();
    let results = compare::compare(settings, bins(), |l| lines.push(l.to_owned())).await;
    let order: Vec<(&str, &str)> = results
        .runs
        .iter()
        .map(|r| (r.case.as_str(), r.profile.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("pub_fin", "nsqd-default"),
            ("pub_fin", "nsqd-sync-every-2500"),
            ("backlog", "nsqd-default"),
            ("backlog", "nsqd-sync-every-2500"),
            ("drain_200b", "nsqd-default"),
            ("drain_200b", "nsqd-sync-every-2500"),
            ("mixed", "nsqd-default"),
            ("mixed", "nsqd-sync-every-2500"),
        ]
    );
    // The drain headline is messages over drain time, in the Receive column.
    let drain = &results.runs[4].report.as_ref().unwrap();
    assert_eq!(drain.ledger.acknowledged, 5_000);
    assert!(report::drain_rate(drain) > 0.0, "{drain:?}");
    assert!(lines.iter().all(|l| l.contains("complete")), "{lines:#?}");
    let md = report::render(&results, Some("## Notes\nhand-written"));
    assert!(md.contains("| `nsqd-default` | 1/1 |"), "{md}");
    assert!(md.contains("1.00x"), "{md}");
    assert!(md.contains("hand-written"));
    assert!(md.contains("share its cores"));
}

/// The disk, restart and idle-topics cases against real nsqd (RustQueue's side runs in
/// `make bench`): each produces its figures, the restart finds every message on every channel
/// after both restarts, and the table shows them with the skipped profiles' reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_restart_and_idle_cases_measure_nsqd() {
    let settings = Settings {
        duration_seconds: 1.0,
        warmup_seconds: 0.0,
        rounds: 1,
        backlog_messages: 1_000,
        drain_timeout_seconds: 60.0,
        cases: vec!["disk".into(), "restart".into(), "idle_topics".into()],
        profiles: vec!["nsqd-default".into(), "nsqd-sync-every-2500".into()],
        restart_messages: 20_000,
        idle_topics: 20,
        drain_messages: 1_000,
        tiered_messages: 1_000,
        sweeps: false,
    };
    let mut lines = Vec::new();
    let results = compare::compare(settings, bins(), |l| lines.push(l.to_owned())).await;
    let order: Vec<(&str, &str)> = results
        .runs
        .iter()
        .map(|r| (r.case.as_str(), r.profile.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("disk", "disk"),
            ("restart", "nsqd-default"),
            ("idle_topics", "nsqd-default"),
        ],
        "{lines:#?}"
    );
    assert!(results.runs.iter().all(|r| r.counts()), "{lines:#?}");
    let disk = results.runs[0].disk.as_ref().unwrap();
    assert_eq!(disk.writes.len(), 7);
    assert!(disk.writes.iter().all(|w| w.count > 0 && w.p50_us > 0));
    assert!(disk.bandwidth_mib_per_sec > 0.0);
    let pipe = disk.pipelined.as_ref().expect("the bare pipeline measured");
    assert!(pipe.mib_per_sec > 0.0 && pipe.syncs > 0, "{pipe:?}");
    assert_eq!((pipe.write_bytes, pipe.window_bytes), (64 * 1024, 1 << 20));
    let restart = results.runs[1].restart.as_ref().unwrap();
    assert_eq!(
        (restart.published, restart.min_depth_after),
        (20_000, 20_000)
    );
    assert!(restart.min_depth_after_kill <= 20_000);
    assert!(restart.clean_ready_ms > 0.0 && restart.kill_ready_ms > 0.0);
    let idle = results.runs[2].idle.as_ref().unwrap();
    assert_eq!(idle.published, 1000);
    assert!(idle.rss_idle_bytes > 0);
    let md = report::render(&results, None);
    assert!(md.contains("## `disk`"), "{md}");
    assert!(md.contains("fdatasync"), "{md}");
    assert!(md.contains("A bare durable pipeline"), "{md}");
    assert!(md.contains("## `restart`"), "{md}");
    assert!(md.contains("one profile per server"), "{md}");
    assert!(md.contains("## `idle_topics`"), "{md}");
}

/// Two points of the clients curve against real nsqd, drawn as an SVG chart and embedded in
/// the markdown with the figures of each point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_points_become_a_chart_and_a_table() {
    let settings = Settings {
        duration_seconds: 0.5,
        warmup_seconds: 0.0,
        rounds: 1,
        backlog_messages: 1_000,
        drain_timeout_seconds: 60.0,
        cases: vec!["sweep_clients_1".into(), "sweep_clients_4".into()],
        profiles: vec!["nsqd-default".into()],
        restart_messages: 1_000,
        idle_topics: 1,
        drain_messages: 1_000,
        tiered_messages: 1_000,
        sweeps: false,
    };
    let results = compare::compare(settings, bins(), |_| {}).await;
    assert_eq!(results.runs.len(), 2);
    assert!(
        results.runs.iter().all(|r| r.counts()),
        "{:#?}",
        results.runs
    );
    let dir = tempfile::tempdir().unwrap();
    let charts = sweep::write_charts(&results, dir.path(), "r").unwrap();
    let names: Vec<String> = charts
        .iter()
        .map(|c| c.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["r-clients-throughput.svg", "r-clients-p99.svg"]);
    let svg = std::fs::read_to_string(&charts[0].path).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("nsqd-default"),
        "{svg}"
    );
    assert!(
        svg.contains("<polyline"),
        "a line through the points: {svg}"
    );
    let md = report::render_with(
        &results,
        None,
        &sweep::section(&results, &charts, dir.path()),
    );
    assert!(md.contains("## Curves"), "{md}");
    assert!(md.contains("](r-clients-throughput.svg)"), "{md}");
    assert!(
        md.contains("| producers = consumers | `nsqd-default` |"),
        "{md}"
    );
    assert!(
        !md.contains("## `sweep_clients_1`"),
        "sweep points have no table of their own: {md}"
    );
}

/// rustqueued, rustqueue-gateway and rustqueue-discovery from this build's target directory
/// (`make test` builds every binary before the test stages run).
fn rustqueue_bins() -> Binaries {
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf();
    for name in ["rustqueued", "rustqueue-gateway", "rustqueue-discovery"] {
        assert!(
            dir.join(name).is_file(),
            "{name} not built in {} — run `cargo build -p rustqueue-server -p rustqueue-gateway \
             -p rustqueue-discovery` (make test does)",
            dir.display()
        );
    }
    Binaries {
        nsqd: nsqd(),
        rustqueued: Some(dir.join("rustqueued")),
        versitygw: Some(rustqueue_tier::test_server::versitygw_bin()),
    }
}

/// Messages a server holds or has delivered for `topic` (nsqd's `/stats` format, which
/// rustqueued answers too).
fn topic_messages(http: &str, topic: &str) -> u64 {
    let r = rustqueue_bench::http::get(http, "/stats?format=json").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["topics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["topic_name"]
                .as_str()
                .is_some_and(|n| n.starts_with(topic))
        })
        .map(|t| t["message_count"].as_u64().unwrap_or(0))
        .sum()
}

/// The brokers curve's clusters: three rustqueued behind the gateway (producers through it,
/// consumers on each broker) and three nsqd (producers and consumers dealt to each). Every
/// server takes part, and the runs drain with nothing missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_run_reaches_every_server_and_drains() {
    use rustqueue_bench::cluster::{Cluster, ClusterConfig};
    let bins = rustqueue_bins();
    for name in ["rustqueue-nsq_relaxed", "nsqd-default"] {
        let (p, b) = (profile(name), bins.clone());
        let cluster = tokio::task::spawn_blocking(move || {
            Cluster::start(&p, &b, ClusterConfig { brokers: 3 })
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let pids = cluster.pids();
        assert_eq!(pids.len(), if name == "nsqd-default" { 3 } else { 5 });
        let topic = format!("cluster-{}", &name[..5]);
        let config = RunConfig {
            address: cluster.producer_addresses[0].clone(),
            producer_addresses: cluster.producer_addresses.clone(),
            consumer_addresses: cluster.consumer_addresses.clone(),
            broker_pid: Some(pids[0]),
            extra_pids: pids[1..].to_vec(),
            producers: 6,
            consumers: 3,
            topic_prefix: topic.clone(),
            ..load("", 0)
        };
        let report = run::run(config).await.unwrap();
        assert!(report.complete, "{name}: {report:#?}");
        assert!(report.published > 0 && report.ledger.missing == 0);
        for http in cluster.http_addresses() {
            let n = topic_messages(&http, &topic);
            assert!(n > 0, "{name}: the server at {http} took no messages");
        }
        let cpu = report.broker.as_ref().unwrap().cpu_seconds;
        assert!(cpu > 0.0, "{name}: CPU of every server process: {cpu}");
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .unwrap();
    }
}

/// The tiered cases against a real versitygw: the local run reads its volume only, the
/// read-through run has every sealed segment uploaded and its local copy removed before the
/// drain, and reads them back from the bucket; both drain with nothing missing, and the
/// markdown says what each read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tiered_cases_drain_from_the_volume_and_from_the_bucket() {
    let settings = Settings {
        duration_seconds: 1.0,
        warmup_seconds: 0.0,
        rounds: 1,
        backlog_messages: 1_000,
        drain_timeout_seconds: 120.0,
        cases: vec!["tiered_local".into(), "tiered_read_through".into()],
        profiles: vec!["rustqueue-durable".into()],
        restart_messages: 1_000,
        idle_topics: 1,
        drain_messages: 1_000,
        // About 60 MiB: three sealed 16 MiB segments and an active one.
        tiered_messages: 60_000,
        sweeps: false,
    };
    let results = compare::compare(settings, rustqueue_bins(), |_| {}).await;
    // The results name the broker binary they measured by its own version line (the test
    // build's is not stamped with a commit), not the checkout the bench ran in.
    let measured = results.rustqueue_revision.as_deref().unwrap_or_default();
    assert!(
        measured.starts_with(&format!(
            "rustqueued {} (revision ",
            env!("CARGO_PKG_VERSION")
        )),
        "{measured:?}"
    );
    assert_eq!(results.runs.len(), 2, "{:#?}", results.runs);
    for run in &results.runs {
        assert!(run.counts(), "{run:#?}");
        let report = run.report.as_ref().unwrap();
        assert_eq!(report.ledger.missing, 0, "{run:#?}");
        let tiered = run.tiered.as_ref().expect("a tiered report");
        assert!(tiered.uploaded_segments >= 3, "{run:#?}");
        if run.case == "tiered_local" {
            assert_eq!((tiered.evicted_segments, tiered.read_through_bytes), (0, 0));
        } else {
            assert_eq!(
                tiered.evicted_segments, tiered.uploaded_segments,
                "{run:#?}"
            );
            assert!(
                tiered.read_through_bytes >= tiered.evicted_segments * 15 * 1024 * 1024,
                "every evicted segment read back from the bucket: {run:#?}"
            );
        }
    }
    let md = report::render_with(&results, None, "");
    assert!(md.contains("## `tiered_read_through`"), "{md}");
    assert!(
        md.contains("MiB read from the bucket during the drain"),
        "{md}"
    );
}

/// The floor profiles run only where named, beside nsqd, in load cases only, and drain clean.
#[test]
fn compare_runs_the_floor_beside_nsqd_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("floor.json");
    bench_succeeds(
        Command::new(env!("CARGO_BIN_EXE_rustqueue-bench"))
            .args(["compare", "--rounds", "1", "--duration-seconds", "1"])
            .args(["--warmup-seconds", "0", "--restart-messages", "1000"])
            .args(["--cases", "pub_fin,restart"])
            .args([
                "--profiles",
                "nsqd-default,floor,floor-append,floor-durable",
            ])
            .arg("--nsqd")
            .arg(nsqd())
            .arg("--output")
            .arg(&output),
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let runs: Vec<(&str, &str)> = results["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["case"].as_str().unwrap(), r["profile"].as_str().unwrap()))
        .collect();
    // The restart case is not a load: the floor does not run it.
    assert_eq!(
        runs,
        [
            ("pub_fin", "nsqd-default"),
            ("pub_fin", "floor"),
            ("pub_fin", "floor-append"),
            ("pub_fin", "floor-durable"),
            ("restart", "nsqd-default"),
        ]
    );
    for run in &results["runs"].as_array().unwrap()[1..4] {
        let report = &run["report"];
        assert_eq!(report["complete"], true, "{run}");
        assert_eq!(report["ledger"]["missing"], 0, "{run}");
        assert!(
            report["ledger"]["acknowledged"].as_u64().unwrap() > 0,
            "{run}"
        );
        assert!(
            report["broker"]["cpu_cores"].as_f64().unwrap() > 0.0,
            "{run}"
        );
    }
}
