//! Kodo mode against three real brokers (rustqueued's server, in-process on loopback, node ids
//! 1..3) in static mode, beside a direct-mode replica over the same brokers: `/nodes` is the
//! three gateway identities (direct: the brokers), `/lookup` and `/v1/*` the real brokers,
//! `lookup_ready` needs all three shards (a stopped broker clears it until it is back, while
//! direct mode stays ready), and `POST /channel/delete` is refused in both modes.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustqueue_discovery::Mode;
use rustqueue_discovery::{Shared, static_view};
use rustqueue_server::Config;
use serde_json::{Value, json};
use support::{Discovery, start_discovery};
use tokio::sync::watch;

const GATEWAY: &str = "127.0.17.9";

/// One broker with fixed addresses, so a restart comes back where discovery polls.
struct Broker {
    node_id: u32,
    tcp: String,
    http: String,
    dir: tempfile::TempDir,
    running: Option<rustqueue_server::Running>,
}

impl Broker {
    /// The first start binds ports of the kernel's choosing (port 0), so none can be taken
    /// between finding them free and binding them; a restart binds the same ones again.
    async fn start(node_id: u32) -> Broker {
        let mut b = Broker {
            node_id,
            tcp: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            dir: tempfile::tempdir().unwrap(),
            running: None,
        };
        b.restart().await;
        let running = b.running.as_ref().unwrap();
        b.tcp = running.tcp_addr().to_string();
        b.http = running.http_addr().to_string();
        b
    }

    async fn restart(&mut self) {
        let mut cfg = Config::default();
        cfg.node.id = self.node_id;
        cfg.node.broadcast_address = "127.0.0.1".into();
        cfg.network.tcp_address = self.tcp.clone();
        cfg.network.http_address = self.http.clone();
        cfg.storage.data_path = self.dir.path().to_path_buf();
        // Never throttled by the host's disk use.
        cfg.storage.disk_high_watermark_percent = 100;
        cfg.storage.disk_low_watermark_percent = 99;
        cfg.storage.min_free_bytes = 1;
        cfg.shutdown.grace_seconds = 2;
        self.running = Some(rustqueue_server::start(cfg).await.unwrap());
    }

    async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    async fn post(&self, path: &str) {
        let r = rustqueue_api::http_client::client()
            .post(format!("http://{}{path}", self.http))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
}

async fn wait_for(d: &Discovery, what: &str, limit: Duration, ok: impl Fn(u16, &Value) -> bool) {
    let start = Instant::now();
    loop {
        let (code, v) = d.get(what).await;
        if ok(code, &v) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what} still answers {code} {v} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lookup_ready_gauge(d: &Discovery) -> String {
    let text = rustqueue_api::http_client::get(format!("http://{}/metrics", d.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with("rustqueue_discovery_lookup_ready "))
        .unwrap_or("missing")
        .to_string()
}

fn node_ids(v: &Value) -> Vec<u64> {
    v["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["node_id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kodo_mode_advertises_gateways_and_needs_every_shard() {
    let mut brokers = Vec::new();
    for id in 1..=3 {
        let b = Broker::start(id).await;
        b.post("/topic/create?topic=orders").await;
        b.post("/channel/create?topic=orders&channel=billing").await;
        brokers.push(b);
    }
    let http: Vec<String> = brokers.iter().map(|b| b.http.clone()).collect();
    let (_t1, r1) = watch::channel(static_view(&http));
    let (_t2, r2) = watch::channel(static_view(&http));
    let kodo = start_discovery(
        r1,
        Arc::new(Shared::with_mode(Mode::Kodo {
            gateway_address: GATEWAY.into(),
        })),
        vec![],
    )
    .await;
    let direct = start_discovery(r2, Arc::new(Shared::default()), vec![]).await;
    let bound = Duration::from_secs(8);
    let ready = |c: u16, v: &Value| c == 200 && v["lookup_ready"] == true;
    wait_for(&kodo, "/v1/health", bound, ready).await;
    wait_for(&direct, "/v1/health", bound, ready).await;
    assert_eq!(
        lookup_ready_gauge(&kodo).await,
        "rustqueue_discovery_lookup_ready 1"
    );

    // /nodes: the gateway identities in Kodo mode, the brokers in direct mode.
    let nodes = nodes_are_the_gateway_identities(&kodo).await;
    let (_, dnodes) = direct.get("/nodes").await;
    assert_eq!(node_ids(&dnodes), vec![1, 2, 3]);
    assert_eq!(dnodes["producers"][0]["topics"], json!(["orders"]));

    // Everything else lists the real brokers, identically in both modes.
    for path in [
        "/lookup?topic=orders",
        "/v1/publishers",
        "/v1/brokers",
        "/topics",
    ] {
        let (kc, kv) = kodo.get(path).await;
        let (dc, dv) = direct.get(path).await;
        assert_eq!((kc, &kv), (dc, &dv), "{path}");
    }
    let (_, lookup) = kodo.get("/lookup?topic=orders").await;
    assert_eq!(node_ids(&lookup), vec![1, 2, 3]);
    assert_eq!(lookup["channels"], json!(["billing"]));
    let tcp_ports: Vec<String> = lookup["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("127.0.0.1:{}", p["tcp_port"]))
        .collect();
    let want: Vec<String> = brokers.iter().map(|b| b.tcp.clone()).collect();
    assert_eq!(tcp_ports, want);

    // Cleanup compatibility is off in both modes.
    cleanup_is_refused(&[&kodo, &direct]).await;
    let (_, still) = direct.get("/channels?topic=orders").await;
    assert_eq!(still["channels"], json!(["billing"]));

    // Shard 2 (node 3) gone: Kodo mode is no longer lookup-ready, direct mode still is, and
    // /nodes keeps advertising the gateways (never a fallback to brokers).
    brokers[2].stop().await;
    let not_ready = |c: u16, v: &Value| c == 200 && v["lookup_ready"] == false;
    wait_for(&kodo, "/v1/health", bound, not_ready).await;
    wait_for(&kodo, "/lookup?topic=orders", bound, |c, v| {
        c == 200 && node_ids(v) == vec![1, 2]
    })
    .await;
    let (code, h) = direct.get("/v1/health").await;
    assert_eq!((code, &h["lookup_ready"]), (200, &json!(true)), "{h}");
    let (_, nodes_now) = kodo.get("/nodes").await;
    assert_eq!(nodes_now, nodes);
    // The gauge follows at the next refresh.
    let start = Instant::now();
    while lookup_ready_gauge(&kodo).await != "rustqueue_discovery_lookup_ready 0" {
        assert!(start.elapsed() < bound, "gauge still 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Back: every shard is served again.
    brokers[2].restart().await;
    wait_for(&kodo, "/v1/health", bound, ready).await;
    for b in &mut brokers {
        b.stop().await;
    }
}

/// Kodo mode's `/nodes`: the three gateway identities, nothing else. Returns the answer.
async fn nodes_are_the_gateway_identities(kodo: &Discovery) -> Value {
    let (code, nodes) = kodo.get("/nodes").await;
    assert_eq!(code, 200);
    let got: Vec<Value> = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            json!([
                p["remote_address"],
                p["broadcast_address"],
                p["hostname"],
                p["tcp_port"],
                p["http_port"],
                p["node_id"]
            ])
        })
        .collect();
    assert_eq!(
        got,
        vec![
            json!([
                format!("{GATEWAY}:4150"),
                GATEWAY,
                GATEWAY,
                4150,
                4151,
                1_000_000
            ]),
            json!([
                format!("{GATEWAY}:4152"),
                GATEWAY,
                GATEWAY,
                4152,
                4154,
                1_000_001
            ]),
            json!([
                format!("{GATEWAY}:4153"),
                GATEWAY,
                GATEWAY,
                4153,
                4155,
                1_000_002
            ]),
        ]
    );
    nodes
}

/// `POST /channel/delete` is discovery's cleanup 404 (the Kodo gateways answer the same).
async fn cleanup_is_refused(ds: &[&Discovery]) {
    for d in ds {
        let r = rustqueue_api::http_client::client()
            .post(format!(
                "http://{}/channel/delete?topic=orders&channel=billing",
                d.addr
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"message": "E_NOT_FOUND Kodo cleanup compatibility is disabled"})
        );
    }
}
