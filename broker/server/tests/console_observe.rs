//! The console's read side over real HTTP and TCP: `/v1/observe/head`, `/v1/observe`,
//! `/v1/stats` and `POST /v1/storage/scrub` in the contract's shapes, the console token's
//! boundaries, and no message body anywhere.

mod common;

use common::Broker;
use reqwest::StatusCode;
use rustqueue_api::contract::{Observation, ObserveHead, ScrubReport, Stats, paths};

const BODY: &str = "payload-7f3a9c-never-in-an-observation";

struct Tokens {
    _dir: tempfile::TempDir,
    cfg: [std::path::PathBuf; 3],
}

/// Admin, registry and console token files.
fn tokens() -> Tokens {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ["admin", "registry", "console"].map(|n| {
        let p = dir.path().join(n);
        std::fs::write(&p, format!("{n}-secret\n")).unwrap();
        p
    });
    Tokens { _dir: dir, cfg }
}

async fn broker(t: &Tokens) -> Broker {
    let [a, r, c] = t.cfg.clone();
    Broker::start_with(move |cfg| {
        cfg.security.admin_token_file = Some(a);
        cfg.security.registry_token_file = Some(r);
        cfg.security.console_token_file = Some(c);
    })
    .await
}

async fn get(b: &Broker, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req = rustqueue_api::http_client::client().get(b.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn post(b: &Broker, path: &str, token: &str, body: &str) -> (StatusCode, String) {
    let r = rustqueue_api::http_client::client()
        .post(b.url(path))
        .bearer_auth(token)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// Every object key anywhere in `v`.
fn keys(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                keys(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

fn assert_no_body(text: &str) {
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut k = Vec::new();
    keys(&v, &mut k);
    assert!(!k.iter().any(|k| k == "body"), "a key named body: {k:?}");
    assert!(!text.contains(BODY), "a published payload leaked: {text}");
}

/// A topic with a consumed channel and an idle one, one message in flight.
async fn traffic(b: &Broker) -> common::Client<tokio::net::TcpStream> {
    let mut p = b.client().await;
    let mut c = b.client().await;
    c.subscribe("orders", "work", 1).await;
    p.publish("orders", BODY.as_bytes()).await;
    p.publish("orders", b"second").await;
    let (id, _, body) = c.expect_message().await;
    assert_eq!(body, BODY.as_bytes());
    c.fin(&id).await;
    let _ = c.expect_message().await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observe_head_is_small_and_carries_no_body() {
    let t = tokens();
    let b = broker(&t).await;
    let _consumer = traffic(&b).await;
    let (status, text) = get(&b, paths::OBSERVE_HEAD, Some("console-secret")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_no_body(&text);
    let head: ObserveHead = serde_json::from_str(&text).unwrap();
    assert_eq!(head.schema_version, 1);
    assert_eq!(head.node.data_format, 7);
    assert!(head.readiness.publish_ready && head.readiness.consume_ready);
    assert!(head.readiness.management_fences_ready, "management off");
    assert!(!head.management.enabled);
    assert!(head.disk.total_bytes > 0);
    assert_eq!(head.runtime.publish_messages_total, 2);
    assert_eq!(head.runtime.publish_bytes_total, (BODY.len() + 6) as u64);
    assert_eq!(head.runtime.delivered_messages_total, 2);
    assert!(head.runtime.tcp_connections >= 1);
    assert_eq!(head.limits.publish_ack_mode, "durable");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("queue").is_none() && v.get("storage").is_none());
    // The head is the registry's revision.
    let reg: serde_json::Value = rustqueue_api::http_client::client()
        .get(b.url(paths::REGISTRY_HEAD))
        .bearer_auth("registry-secret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reg["revision"].as_u64(), Some(head.registry_revision));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_observation_has_catalog_storage_and_histograms_and_no_body() {
    let t = tokens();
    let b = broker(&t).await;
    let _consumer = traffic(&b).await;
    let (status, text) = get(&b, paths::OBSERVE, Some("console-secret")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_no_body(&text);
    let o: Observation = serde_json::from_str(&text).unwrap();
    assert_eq!(o.head.schema_version, 1);
    assert!(o.catalog_collected_at_ms >= o.head.collected_at_ms);
    assert_eq!(o.storage.segment_count, 1);
    assert!(o.storage.segment_bytes > (BODY.len() + 6) as u64);
    let topic = &o.queue.topics[0];
    assert_eq!((topic.name.as_str(), topic.published_count), ("orders", 2));
    assert_eq!(topic.segment_bytes, o.storage.segment_bytes);
    let work = &topic.channels[0];
    assert_eq!((work.name.as_str(), work.in_flight_count), ("work", 1));
    assert_eq!(
        (work.ack_cursor, work.ack_gap, work.ephemeral),
        (1, 0, false)
    );
    let a = &o.queue.aggregates;
    assert_eq!((a.topics, a.channels, a.in_flight), (1, 1, 1));
    assert!(o.queue.group_commit.publish_group_commits_total >= 1);
    let h = &o.queue.histograms.publish_ack;
    assert_eq!(h.bounds.len(), 16);
    assert_eq!(h.counts.len(), 17);
    assert_eq!(h.count, 2);
    assert_eq!(h.counts.iter().sum::<u64>(), 2);
    assert!(o.queue.histograms.storage_fsync.count >= 1);
    // The same histogram as /metrics renders.
    let m = b.metrics().await;
    assert_eq!(
        common::metric(&m, "rustqueue_publish_ack_duration_seconds_count"),
        Some(2.0)
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_console_token_observes_and_it_cannot_drain() {
    let t = tokens();
    let b = broker(&t).await;
    for path in [paths::OBSERVE_HEAD, paths::OBSERVE] {
        assert_eq!(get(&b, path, Some("console-secret")).await.0, 200);
        let (s, text) = get(&b, path, Some("registry-secret")).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}: {text}");
        assert!(text.contains("E_UNAUTHORIZED"));
        assert_eq!(get(&b, path, Some("admin-secret")).await.0, 401);
        assert_eq!(get(&b, path, None).await.0, 401);
    }
    let (s, _) = post(&b, paths::DRAIN, "console-secret", "{}").await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "the console token cannot drain"
    );
    let (s, _) = post(&b, paths::STORAGE_SCRUB, "console-secret", "").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_routes_do_not_exist_while_management_is_off() {
    let t = tokens();
    let b = broker(&t).await;
    let body = r#"{"operation_id":"op-0123456789abcdef","topic":"t","expected_revision":0}"#;
    for path in [
        "/v1/manage/topics/create",
        "/v1/manage/channels/create",
        paths::FENCES_SYNC,
    ] {
        let (s, _) = post(&b, path, "console-secret", body).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
    }
    let (s, text) = get(&b, paths::HEALTH, None).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_scrub_answer_the_contract_types() {
    let t = tokens();
    let b = broker(&t).await;
    let _consumer = traffic(&b).await;
    let (s, text) = get(&b, "/v1/stats?topic=orders", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_no_body(&text);
    let stats: Stats = serde_json::from_str(&text).unwrap();
    assert!(stats.complete);
    let topic = &stats.topics[0];
    assert_eq!(topic.segment_count, 1);
    assert!(topic.segment_bytes > 0);
    assert_eq!(topic.sync_lag_ms, 0, "durable mode: all synced");
    let c = &topic.channels[0];
    assert_eq!((c.ack_cursor, c.ack_gap, c.ephemeral), (1, 0, false));
    let (s, text) = post(&b, paths::STORAGE_SCRUB, "admin-secret", "").await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let r: ScrubReport = serde_json::from_str(&text).unwrap();
    assert_eq!(r.status, "ok");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_times_out_is_counted_where_metrics_count_it() {
    let t = tokens();
    let b = broker(&t).await;
    let mut p = b.client().await;
    p.publish("t", b"m").await;
    let mut c = b.client().await;
    c.send_identify(r#"{"msg_timeout":1000}"#).await;
    c.expect_ok().await;
    c.subscribe("t", "c", 1).await;
    let (_, attempts, _) = c.expect_message().await;
    assert_eq!(attempts, 1);
    // Not FINed: after the 1 s timeout it is delivered again.
    let (_, attempts, _) = c.expect_message().await;
    assert_eq!(attempts, 2);
    let (_, text) = get(&b, paths::OBSERVE_HEAD, Some("console-secret")).await;
    let head: ObserveHead = serde_json::from_str(&text).unwrap();
    assert_eq!(head.runtime.timed_out_messages_total, 1);
    let m = b.metrics().await;
    assert_eq!(
        common::metric(&m, "rustqueue_timed_out_messages_total"),
        Some(1.0)
    );
    b.stop().await;
}
