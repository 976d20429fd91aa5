//! The checkpoint-age gauge (docs/tiering.md, "Checkpoints and the catalog"):
//! `rustqueue_tiering_last_checkpoint_upload_timestamp_seconds` is the start at first, moves
//! on with every round that leaves the checkpoints and the catalog up to date, stands still
//! while the bucket is down (failures counted), and moves on again once it is back.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::tiering::{impatient, tiered};
use common::wait_for;
use rustqueue_engine::{Bytes, Counter, Engine};
use rustqueue_tier::test_server::TestServer;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn last(e: &Engine) -> u64 {
    e.metrics().get(Counter::TieringLastCheckpointUpload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_checkpoint_upload_time_stands_still_while_the_bucket_is_down() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiered(dir.path(), impatient(&server));
    if let Some(t) = cfg.tiering.as_mut() {
        t.checkpoint_interval = Duration::from_millis(100);
    }
    let started = now();
    let e = Engine::open(cfg).await.unwrap();
    wait_for(10, "the start counted", || last(&e) >= started).await;
    e.publish("t", vec![Bytes::from_static(b"one")], None)
        .await
        .unwrap();
    wait_for(30, "a checkpoint uploaded", || {
        e.tiering_status().unwrap().checkpoint_uploads >= 2
    })
    .await;

    server.kill();
    let failures = e.tiering_status().unwrap().checkpoint_failures;
    e.publish("t", vec![Bytes::from_static(b"two")], None)
        .await
        .unwrap();
    wait_for(60, "checkpoint uploads failing", || {
        e.tiering_status().unwrap().checkpoint_failures >= failures + 2
    })
    .await;
    let stale = last(&e);
    // Two seconds of failures later, it has not moved.
    let failing = now();
    wait_for(60, "more failures, two seconds on", || {
        now() >= failing + 2 && e.tiering_status().unwrap().checkpoint_failures >= failures + 3
    })
    .await;
    assert_eq!(
        last(&e),
        stale,
        "no round succeeded while the bucket was down"
    );
    assert!(now() > stale + 1);

    server.restart();
    wait_for(60, "a round up to date again", || last(&e) > stale).await;
    assert!(last(&e) >= failing);
    e.shutdown().await;
}
