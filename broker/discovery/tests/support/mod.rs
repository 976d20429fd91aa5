//! Test helpers: a fake broker serving `/v1/registry/head` and `/v1/registry` (counting the
//! full fetches), and the discovery service started in-process on a free port.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use rustqueue_discovery::{PollerConfig, Shared, View, poll_brokers, router};
use serde_json::{Value, json};
use tokio::sync::watch;

/// What a fake broker reports.
#[derive(Debug)]
pub struct FakeState {
    pub node_id: u32,
    pub revision: u64,
    pub publish_ready: bool,
    pub consume_ready: bool,
    pub topics: Vec<(String, Vec<String>)>,
    pub tcp_port: u16,
    pub broadcast: String,
    pub heads: u64,
    pub fetches: u64,
    /// When set, requests without `Authorization: Bearer <token>` get 401.
    pub token: Option<String>,
}

/// A running fake broker.
#[derive(Clone)]
pub struct FakeBroker {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<FakeState>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl FakeBroker {
    /// Serve on `bind` (port 0 for any) as node `node_id` holding `topics` (each with channel
    /// `c`).
    pub async fn start(bind: &str, node_id: u32, topics: &[&str]) -> FakeBroker {
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(FakeState {
            node_id,
            revision: 1,
            publish_ready: true,
            consume_ready: true,
            topics: topics
                .iter()
                .map(|t| (t.to_string(), vec!["c".to_string()]))
                .collect(),
            tcp_port: 4150,
            broadcast: addr.ip().to_string(),
            heads: 0,
            fetches: 0,
            token: None,
        }));
        let app = Router::new()
            .route("/v1/registry/head", get(head))
            .route("/v1/registry", get(full))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeBroker {
            addr,
            state,
            task: Arc::new(task),
        }
    }

    /// Stop serving (connections are refused afterwards).
    pub fn stop(&self) {
        self.task.abort();
    }

    /// Change the topics (bumps the revision, as a broker does).
    pub fn set_topics(&self, topics: &[&str]) {
        let mut s = self.state.lock().unwrap();
        s.topics = topics
            .iter()
            .map(|t| (t.to_string(), vec!["c".to_string()]))
            .collect();
        s.revision += 1;
    }

    pub fn fetches(&self) -> u64 {
        self.state.lock().unwrap().fetches
    }

    pub fn heads(&self) -> u64 {
        self.state.lock().unwrap().heads
    }
}

fn head_json(s: &FakeState) -> Value {
    json!({
        "format": 7, "revision": s.revision, "node_id": s.node_id,
        "ready": s.consume_ready, "publish_ready": s.publish_ready,
        "consume_ready": s.consume_ready,
    })
}

fn authorized(s: &FakeState, headers: &HeaderMap) -> bool {
    let Some(t) = &s.token else { return true };
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {t}"))
}

async fn head(
    State(s): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, StatusCode> {
    let mut s = s.lock().unwrap();
    if !authorized(&s, &headers) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    s.heads += 1;
    Ok(axum::Json(head_json(&s)))
}

async fn full(
    State(s): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, StatusCode> {
    let mut s = s.lock().unwrap();
    if !authorized(&s, &headers) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    s.fetches += 1;
    let mut v = head_json(&s);
    let topics: Vec<Value> = s
        .topics
        .iter()
        .map(|(n, cs)| json!({"name": n, "paused": false, "channels": cs, "stored_messages": 0}))
        .collect();
    let extra = json!({
        "broadcast_address": s.broadcast, "tcp_port": s.tcp_port, "http_port": 4151,
        "stored_messages": 0, "depth": 0, "in_flight": 0, "topics": topics,
        "compatibility": {
            "binary": {"binary_version": "9.9.9", "data_format": 7,
                "minimum_reader_feature_level": 1, "maximum_reader_feature_level": 2,
                "maximum_writer_feature_level": 2},
            "storage": {"data_format": 7, "active_writer_feature_level": 1,
                "minimum_reader_feature_level": 1, "generation": 1}
        }
    });
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    Ok(axum::Json(v))
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The discovery service, in-process.
pub struct Discovery {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Discovery {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Start the poller on `rx` (plus any extra task feeding it) and the HTTP API.
pub async fn start_discovery(
    rx: watch::Receiver<View>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> Discovery {
    start_discovery_with(rx, shared, tasks, PollerConfig::default()).await
}

/// [`start_discovery`] with poller settings.
pub async fn start_discovery_with(
    rx: watch::Receiver<View>,
    shared: Arc<Shared>,
    mut tasks: Vec<tokio::task::JoinHandle<()>>,
    cfg: PollerConfig,
) -> Discovery {
    tasks.push(tokio::spawn(poll_brokers(rx, cfg, shared.clone())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(shared.clone());
    tasks.push(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }));
    Discovery {
        addr,
        shared,
        tasks,
    }
}

impl Discovery {
    /// `GET path`: (status, JSON body or Null).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = rustqueue_api::http_client::get(format!("http://{}{path}", self.addr))
            .await
            .unwrap();
        let code = r.status().as_u16();
        let body = r.text().await.unwrap();
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// Node ids of the `/lookup?topic=` producers (`None` on 404).
    pub async fn lookup_nodes(&self, topic: &str) -> Option<Vec<u64>> {
        let (code, v) = self.get(&format!("/lookup?topic={topic}")).await;
        if code == 404 {
            return None;
        }
        assert_eq!(code, 200, "/lookup?topic={topic}: {v}");
        let mut ids: Vec<u64> = v["producers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["node_id"].as_u64().unwrap())
            .collect();
        ids.sort();
        Some(ids)
    }

    /// Wait until `/lookup?topic=` lists exactly `want` node ids; returns how long it took.
    pub async fn wait_lookup(
        &self,
        topic: &str,
        want: Option<Vec<u64>>,
        limit: Duration,
    ) -> Duration {
        let start = Instant::now();
        loop {
            // 503 before the first successful refresh: not an answer yet.
            let ready = self.get("/v1/health").await.0 == 200;
            let got = if ready {
                self.lookup_nodes(topic).await
            } else {
                Some(vec![u64::MAX])
            };
            if ready && got == want {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "/lookup?topic={topic} lists {got:?}, want {want:?} within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
