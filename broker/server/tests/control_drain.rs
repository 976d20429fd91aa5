//! Drain with frozen deliveries, and disk pressure driven by a test-set `min_free_bytes`,
//! over real TCP and HTTP.

mod common;

use common::{Broker, eventually};
use reqwest::StatusCode;
use rustqueue_api::contract::{DrainStatus, Health, NotReadyReason, RegistryHead};

async fn drain_status(b: &Broker) -> DrainStatus {
    b.get_json("/v1/drain").await
}

async fn health(b: &Broker) -> (StatusCode, Health) {
    let r = rustqueue_api::http_client::get(b.url("/v1/health"))
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

async fn http_pub(b: &Broker, topic: &str, body: &'static str) -> reqwest::Response {
    rustqueue_api::http_client::client()
        .post(b.url(&format!("/pub?topic={topic}")))
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_drain_reaches_quiesced_while_a_backlog_remains() {
    let b = Broker::start().await;
    let mut consumer = b.client().await;
    consumer.subscribe("jobs", "workers", 1).await;
    let mut producer = b.client().await;
    for i in 0..5 {
        producer
            .publish("jobs", format!("job-{i}").as_bytes())
            .await;
    }
    let (id, _, _) = consumer.expect_message().await;

    let r = rustqueue_api::http_client::client()
        .post(b.url("/v1/drain"))
        .body(r#"{"freeze_deliveries":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let s: DrainStatus = r.json().await.unwrap();
    assert!(s.draining && s.delivery_frozen);
    assert!(!s.quiesced, "one message is still in flight: {s:?}");
    assert_eq!(s.in_flight, 1);

    let (status, h) = health(&b).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(matches!(
        h,
        Health::NotReady {
            reason: NotReadyReason::Draining,
            ..
        }
    ));

    // Publishes are refused on both protocols; the TCP connection stays usable.
    producer.cmd_body("PUB jobs", b"late").await;
    producer.expect_error("E_DRAINING").await;
    let r = http_pub(&b, "jobs", "late").await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);

    consumer.fin(&id).await;
    eventually(async || drain_status(&b).await.quiesced).await;
    let s = drain_status(&b).await;
    assert_eq!((s.in_flight, s.depth, s.stored_messages), (0, 4, 4));
    assert!(!s.empty && !s.drained);
    assert_eq!(
        (s.publish_inflight_bytes, s.delivery_inflight_bytes),
        (0, 0)
    );
    let head: RegistryHead = b.get_json("/v1/registry/head").await;
    assert!(!head.publish_ready && !head.consume_ready && !head.ready);

    // Frozen: the consumer's RDY 1 gets nothing more. Resuming delivers the next message.
    let r = rustqueue_api::http_client::client()
        .post(b.url("/v1/drain"))
        .body(r#"{"enabled":false}"#)
        .send()
        .await
        .unwrap();
    let s: DrainStatus = r.json().await.unwrap();
    assert!(!s.draining && !s.delivery_frozen && !s.quiesced);
    let (_, _, body) = consumer.expect_message().await;
    assert_eq!(body, b"job-1");
    assert_eq!(health(&b).await.0, StatusCode::OK);
    producer.publish("jobs", b"after").await;
    b.stop().await;
}

fn available(path: &std::path::Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(path).unwrap();
    st.blocks_available() as u64 * st.fragment_size() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_pressure_throttles_publishes_keeps_fin_and_clears_when_space_returns() {
    const GIB: u64 = 1 << 30;
    // The filler lives next to the data dir, on the same file system.
    let scratch = tempfile::tempdir().unwrap();
    let free = available(scratch.path());
    assert!(free > 4 * GIB, "the test needs 4 GiB free, has {free}");
    let b = Broker::start_with(move |cfg| {
        cfg.storage.min_free_bytes = free - GIB;
    })
    .await;
    let mut consumer = b.client().await;
    consumer.subscribe("t", "c", 1).await;
    let mut producer = b.client().await;
    producer.publish("t", b"before").await;
    let (id, _, _) = consumer.expect_message().await;

    let filler_path = scratch.path().join("filler");
    let filler = std::fs::File::create(&filler_path).unwrap();
    nix::fcntl::posix_fallocate(&filler, 0, (2 * GIB) as i64).unwrap();
    eventually(async || health(&b).await.0 == StatusCode::SERVICE_UNAVAILABLE).await;
    let (_, h) = health(&b).await;
    assert!(
        matches!(
            h,
            Health::NotReady {
                reason: NotReadyReason::DiskPressure,
                ..
            }
        ),
        "{h:?}"
    );

    producer.cmd_body("PUB t", b"refused").await;
    producer.expect_error("E_THROTTLED").await;
    producer.cmd_body("PUB t", b"refused again").await;
    producer.expect_error("E_THROTTLED").await;
    let r = http_pub(&b, "t", "refused").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "1");
    let text = b.metrics().await;
    assert!(text.lines().any(|l| l == "rustqueue_disk_pressure 1"));

    consumer.fin(&id).await;
    eventually(async || drain_status(&b).await.in_flight == 0).await;

    drop(filler);
    std::fs::remove_file(&filler_path).unwrap();
    eventually(async || health(&b).await.0 == StatusCode::OK).await;
    producer.publish("t", b"after").await;
    let (_, _, body) = consumer.expect_message().await;
    assert_eq!(body, b"after");
    b.stop().await;
}
