//! `/metrics` moves with real traffic: PUB, MPUB, DPUB, consume, FIN, REQ (until a dead
//! letter), a throttled MPUB, a refused token, a scrub, a topic deletion, a sealed segment
//! uploaded to a real versitygw (`[tiering]`) and a corrupt segment found by scrub; then one
//! scrape must show every fed series above zero and every fed histogram with observations. The tables below name every series, so one that is added to
//! the engine but never fed (or forgotten here) fails.

mod common;

use std::time::Duration;

use common::{Broker, eventually, metric};
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_engine::{Counter, Timer};
use rustqueue_tier::test_server::{self, TestServer};

/// Series that legitimately read 0 in this scenario, with the reason (never "no source").
const MAY_BE_ZERO: [(&str, &str); 27] = [
    (
        "rustqueue_timed_out_messages_total",
        "needs an in-flight timeout; tests/console_observe.rs",
    ),
    (
        "rustqueue_protective_evictions_total",
        "needs disk pressure; tests/protective_eviction.rs",
    ),
    (
        "rustqueue_protective_evicted_messages_total",
        "needs disk pressure; tests/protective_eviction.rs",
    ),
    (
        "rustqueue_delivery_budget_waiters",
        "instantaneous: deliveries waiting right now",
    ),
    (
        "rustqueue_delivery_budget_waits_total",
        "needs reads beyond the node delivery budget",
    ),
    (
        "rustqueue_publish_inflight_bytes",
        "instantaneous: publishes in progress right now",
    ),
    (
        "rustqueue_delivery_inflight_bytes",
        "instantaneous: body reads in progress right now",
    ),
    (
        "rustqueue_publish_inline_appends_total",
        "relaxed ack modes only (this broker is durable); broker/engine/tests/publish_group.rs",
    ),
    (
        "rustqueue_publish_sync_holds_total",
        "needs publishers that send again within 400 µs of their ack; broker/engine/tests/publish_group.rs",
    ),
    (
        "rustqueue_publish_unsynced_messages",
        "always synced before the reply in durable mode",
    ),
    (
        "rustqueue_publish_unsynced_bytes",
        "always synced before the reply in durable mode",
    ),
    (
        "rustqueue_publish_sync_lag_seconds",
        "always synced before the reply in durable mode",
    ),
    (
        "rustqueue_disk_pressure",
        "no pressure here; tests/control_drain.rs",
    ),
    (
        "rustqueue_protocol_errors_total",
        "declared but never incremented (docs/api.md)",
    ),
    (
        "rustqueue_retention_expired_messages_total",
        "reserved: no source yet",
    ),
    (
        "rustqueue_tiering_upload_backlog_segments",
        "instantaneous: every sealed segment is uploaded before the scrape",
    ),
    (
        "rustqueue_tiering_upload_backlog_bytes",
        "instantaneous: every sealed segment is uploaded before the scrape",
    ),
    (
        "rustqueue_tiering_upload_failures_total",
        "needs the bucket down; broker/engine/tests/tiering_outage.rs",
    ),
    (
        "rustqueue_tiering_bucket_request_failures_total",
        "needs the bucket down; broker/engine/tests/tiering_outage.rs",
    ),
    (
        "rustqueue_tiering_evicted_segments_total",
        "needs local retention; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_evicted_bytes_total",
        "needs local retention; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_read_through_bytes_total",
        "needs local retention and a channel behind; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_remote_read_failures_total",
        "needs the bucket down under read-through; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_remote_deleted_segments_total",
        "needs GC of uploaded segments after a checkpoint; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_remote_delete_failures_total",
        "needs the bucket failing a delete; broker/engine/tests/tiering_read_through.rs",
    ),
    (
        "rustqueue_tiering_last_checkpoint_upload_timestamp_seconds",
        "needs [tiering]; broker/engine/tests/tiering_checkpoint_age.rs",
    ),
    (
        "rustqueue_tiering_remote_deleted_topics_total",
        "needs a deleted topic's objects deleted; broker/engine/tests/tiering_deleted_topic.rs",
    ),
];

/// Series this crate computes or feeds itself (the engine's come from `Counter::ALL`).
const SERVER_SERIES: [&str; 17] = [
    "rustqueue_tcp_connections",
    "rustqueue_auth_failures_total",
    "rustqueue_publish_inflight_bytes",
    "rustqueue_delivery_inflight_bytes",
    "rustqueue_disk_total_bytes",
    "rustqueue_disk_available_bytes",
    "rustqueue_disk_used_ratio",
    "rustqueue_topics",
    "rustqueue_channels",
    "rustqueue_topics_published_messages",
    "rustqueue_channels_depth",
    "rustqueue_channels_in_flight",
    "rustqueue_channels_deferred",
    "rustqueue_channels_ack_gap",
    "rustqueue_publish_unsynced_messages",
    "rustqueue_publish_unsynced_bytes",
    "rustqueue_publish_sync_lag_seconds",
];

fn mpub_body(count: usize, size: usize) -> Vec<u8> {
    let mut v = (count as u32).to_be_bytes().to_vec();
    for i in 0..count {
        v.extend_from_slice(&(size as u32).to_be_bytes());
        v.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, size));
    }
    v
}

async fn post(url: String, token: Option<&str>) -> reqwest::StatusCode {
    let mut r = rustqueue_api::http_client::client().post(url).body("x");
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
async fn real_traffic_moves_every_fed_series_and_histogram() {
    let tokens = tempfile::tempdir().unwrap();
    let admin = tokens.path().join("admin");
    std::fs::write(&admin, "admin-secret\n").unwrap();
    let bucket = TestServer::start();
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: bucket.endpoint(),
        prefix: Some("metrics-fed".into()),
        allow_http: true,
        access_key_file: Some(tokens.path().join("access")),
        secret_key_file: Some(tokens.path().join("secret")),
        ..TieringConfig::default()
    };
    std::fs::write(tokens.path().join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(tokens.path().join("secret"), test_server::SECRET_KEY).unwrap();
    let b = Broker::start_with(move |cfg| {
        cfg.security.admin_token_file = Some(admin);
        cfg.tiering = Some(tiering);
        // Small publish budget so one MPUB is throttled; small segments so scrub has work.
        cfg.limits.max_body_bytes = 64 << 10;
        cfg.queue.max_message_bytes = 64 << 10;
        cfg.limits.connection_publish_inflight_bytes = 64 << 10;
        cfg.limits.node_publish_inflight_bytes = 64 << 10;
        cfg.storage.max_segment_bytes = (64 << 10) + 64;
        cfg.queue.max_delivery_attempts = 2;
    })
    .await;

    // A second channel nobody consumes keeps a ready backlog for the depth gauge.
    assert_eq!(
        post(
            b.url("/channel/create?topic=t&channel=idle"),
            Some("admin-secret")
        )
        .await,
        200
    );
    // Publishes: PUB, MPUB (large enough to seal a segment), DPUB (deferred at scrape time).
    let mut p = b.client().await;
    p.publish("t", b"one").await;
    p.publish("t", b"two").await;
    p.publish("t", b"three").await;
    for _ in 0..2 {
        p.cmd_body("MPUB t", &mpub_body(2, 20_000)).await;
        p.expect_ok().await;
    }
    p.cmd_body("DPUB t 3600000", b"later").await;
    p.expect_ok().await;
    // 100 x 600 B: body + 52 + 128 per message exceeds the 64 KiB node budget.
    p.cmd_body("MPUB t", &mpub_body(100, 600)).await;
    p.expect_error("E_THROTTLED").await;
    // The sealed segment goes to the bucket (before the damage below touches it).
    eventually(async || {
        let text = b.metrics().await;
        metric(&text, "rustqueue_tiering_uploads_total") >= Some(1.0)
            && metric(&text, "rustqueue_tiering_upload_backlog_segments") == Some(0.0)
    })
    .await;

    // Consume: FIN the second message (out of order: an ack gap), keep the first in flight,
    // REQ the third so its next take dead-letters it (max_delivery_attempts = 2).
    let mut c = b.client().await;
    c.subscribe("t", "c", 10).await;
    let (id1, _, body1) = c.expect_message().await;
    let (id2, _, body2) = c.expect_message().await;
    let (id3, _, body3) = c.expect_message().await;
    assert_eq!(
        (&body1[..], &body2[..], &body3[..]),
        (&b"one"[..], &b"two"[..], &b"three"[..])
    );
    c.fin(&id2).await;
    c.cmd(&format!("REQ {} 0", std::str::from_utf8(&id3).unwrap()))
        .await;
    let _ = id1;

    // A refused token, a scrub, and a deleted topic (its workers retire).
    let url = b.url("/v1/storage/scrub");
    assert_eq!(post(url.clone(), Some("wrong")).await, 401);
    assert_eq!(post(url.clone(), Some("admin-secret")).await, 200);
    assert_eq!(
        post(
            b.url("/channel/create?topic=gone&channel=c"),
            Some("admin-secret")
        )
        .await,
        200
    );
    assert_eq!(
        post(b.url("/topic/delete?topic=gone"), Some("admin-secret")).await,
        200
    );
    eventually(async || {
        metric(&b.metrics().await, "rustqueue_dead_letter_messages_total") >= Some(1.0)
    })
    .await;

    // Retention GC runs on its own 5 s timer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while metric(
        &b.metrics().await,
        "rustqueue_storage_gc_duration_seconds_count",
    ) < Some(1.0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no GC pass within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Finally damage at rest and a failed write. A flipped byte in a sealed segment's last
    // body is quarantined by the scrub (the broker stays up); a sealed segment that grew
    // fails the scrub and counts a storage error.
    let seg_dir = b
        .dir
        .path()
        .join("topics")
        .join(rustqueue_storage::testing::hex("t"))
        .join("segments");
    let mut sealed: Vec<_> = std::fs::read_dir(&seg_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rqlog"))
        .collect();
    sealed.sort();
    assert!(sealed.len() >= 2, "MPUBs sealed a segment: {sealed:?}");
    let mut bytes = std::fs::read(&sealed[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&sealed[0], &bytes).unwrap();
    assert_eq!(post(url.clone(), Some("admin-secret")).await, 200);
    let text = b.metrics().await;
    assert_eq!(
        metric(&text, "rustqueue_storage_quarantined_messages_total"),
        Some(1.0)
    );

    bytes.extend_from_slice(b"grown");
    std::fs::write(&sealed[0], bytes).unwrap();
    assert_eq!(post(url, Some("admin-secret")).await, 503);
    let after = b.metrics().await;
    assert!(metric(&after, "rustqueue_storage_errors_total") >= Some(1.0));

    let mut zero = Vec::new();
    let names = Counter::ALL
        .iter()
        .map(|c| c.name())
        .filter(|n| *n != "rustqueue_storage_errors_total")
        .chain(SERVER_SERIES);
    for name in names {
        let v = metric(&text, name).unwrap_or_else(|| panic!("{name} missing from /metrics"));
        if v <= 0.0 && !MAY_BE_ZERO.iter().any(|(n, _)| *n == name) {
            zero.push(name);
        }
    }
    for t in Timer::ALL {
        let count = metric(&text, &format!("{}_count", t.name()));
        if count.unwrap_or(0.0) <= 0.0 {
            zero.push(t.name());
        }
    }
    assert!(zero.is_empty(), "fed series still at 0: {zero:?}\n{text}");
    for (name, _) in MAY_BE_ZERO {
        assert!(
            metric(&text, name).is_some(),
            "{name} missing from /metrics"
        );
    }
    assert_eq!(metric(&text, "rustqueue_protocol_errors_total"), Some(0.0));
    assert_eq!(
        metric(&text, "rustqueue_publish_throttled_requests_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "rustqueue_publish_throttled_bytes_total"),
        Some(60_000.0)
    );
    assert_eq!(metric(&text, "rustqueue_auth_failures_total"), Some(1.0));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detailed_queue_metrics_label_each_topic_and_channel_within_the_budget() {
    let b = Broker::start_with(|cfg| {
        cfg.metrics.detailed_queue_metrics = true;
        cfg.metrics.max_detailed_series = 9;
    })
    .await;
    let mut p = b.client().await;
    let mut c = b.client().await;
    c.subscribe("t", "c", 0).await;
    p.publish("t", b"1").await;
    p.publish("t", b"2").await;
    p.publish("u", b"3").await;
    let line = |text: &str, name: &str, labels: &[&str]| -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .find(|l| labels.iter().all(|x| l.contains(x)))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let text = b.metrics().await;
    let (t, ch) = (r#"topic="t""#, r#"channel="c""#);
    assert_eq!(
        line(&text, "rustqueue_channel_depth", &[t, ch]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(line(&text, "rustqueue_topic_messages", &[t]), Some(2.0));
    assert_eq!(
        line(&text, "rustqueue_topic_last_durable_position", &[t]),
        Some(2.0)
    );
    // Topic t (5) and its channel (4) fill the budget of 9; topic u's 5 are omitted.
    assert_eq!(
        line(&text, "rustqueue_topic_messages", &[r#"topic="u""#]),
        None
    );
    assert_eq!(
        metric(&text, "rustqueue_detailed_queue_metric_series"),
        Some(9.0)
    );
    assert_eq!(
        metric(&text, "rustqueue_detailed_queue_metric_series_omitted"),
        Some(5.0)
    );
    b.stop().await;
}
