//! The bucket down under load (docs/tiering.md): versitygw SIGKILLed, then SIGSTOPped, while
//! messages are published and consumed. Publishing and delivery go on, nothing is lost, the
//! uploader keeps the sealed segments queued through its failures, and once the bucket is back
//! every sealed segment is uploaded and recorded with the CRC of its local file. Segments GC
//! deletes while the bucket is down are dropped from the queue, never recorded.

mod common;

use std::time::Duration;

use common::tiering::{bucket, checksum, impatient, record, sealed_bases, segment_paths, tiered};
use common::wait_for;
use rustqueue_engine::{Bytes, Consumer, ConsumerOptions, Engine, EngineConfig, TieringStatus};
use rustqueue_tier::ObjectKey;
use rustqueue_tier::test_server::TestServer;

fn status(e: &Engine) -> TieringStatus {
    e.tiering_status().expect("tiering is on")
}

async fn publish(e: &Engine, from: u32, to: u32) {
    for i in from..to {
        let body = format!("{i:06}").repeat(170).into_bytes();
        e.publish("t", vec![Bytes::from(body)], None)
            .await
            .unwrap_or_else(|err| panic!("publish {i} while the bucket is down: {err}"));
    }
}

/// Receives and finishes messages `from..to`, in order.
async fn consume(c: &mut Consumer, from: u32, to: u32) {
    for i in from..to {
        let d = tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} delivered while the bucket is down"))
            .unwrap();
        assert_eq!(&d.body[..6], format!("{i:06}").as_bytes(), "in order");
        c.finish(d.id).await.unwrap();
    }
}

async fn check_recorded_objects_are_whole(server: &TestServer, dir: &std::path::Path) {
    let bucket = bucket(server);
    for seg in record(dir).segments {
        for (object, path) in seg.objects.iter().zip(segment_paths(dir, seg.base)) {
            let verified = bucket
                .verify(&ObjectKey::new(object.key.clone()).unwrap())
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", object.key));
            let local = checksum(&path);
            assert_eq!(verified.checksum, local, "{}", object.key);
            assert_eq!((object.size, object.crc32c), (local.size, local.crc32c));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_and_delivery_go_on_while_the_bucket_is_down_and_uploads_catch_up() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), impatient(&server)))
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    publish(&e, 0, 20).await;
    consume(&mut c, 0, 20).await;
    wait_for(60, "a first upload", || status(&e).uploaded_segments >= 1).await;

    // Killed: connections refused.
    server.kill();
    let failed = status(&e).failed_uploads;
    publish(&e, 20, 60).await;
    consume(&mut c, 20, 60).await;
    wait_for(60, "the uploader failing and trying again", || {
        status(&e).failed_uploads >= failed + 2
    })
    .await;
    assert!(
        status(&e).backlog_segments > 0,
        "sealed segments stay queued"
    );
    assert!(status(&e).backlog_bytes > 0);

    // Back, then stopped: connections accepted, never answered.
    server.restart();
    server.pause();
    let (failed, requests) = (status(&e).failed_uploads, status(&e).failed_requests);
    publish(&e, 60, 80).await;
    consume(&mut c, 60, 80).await;
    wait_for(60, "requests to the stopped bucket timing out", || {
        status(&e).failed_requests > requests && status(&e).failed_uploads > failed
    })
    .await;
    server.resume();

    wait_for(60, "every sealed segment uploaded after the outage", || {
        let recorded: Vec<u64> = record(dir.path()).segments.iter().map(|s| s.base).collect();
        status(&e).backlog_segments == 0 && recorded == sealed_bases(dir.path())
    })
    .await;
    assert!(
        status(&e).failed_uploads >= failed,
        "failures are counted, never undone"
    );
    assert!(
        sealed_bases(dir.path()).len() >= 20,
        "80 KiB in 4 KiB segments"
    );
    check_recorded_objects_are_whole(&server, dir.path()).await;
    // Nothing lost, nothing more: the channel is empty.
    let stats = e.stats(Some("t"), Some("c"));
    assert_eq!(stats.topics[0].message_count, 80);
    assert_eq!(stats.topics[0].channels[0].depth, 0);
    assert_eq!(stats.topics[0].channels[0].in_flight_count, 0);
    drop(c);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_gc_deletes_while_the_bucket_is_down_are_dropped_never_recorded() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        bootstrap_retention: Duration::ZERO,
        gc_interval: Duration::from_millis(50),
        ..tiered(dir.path(), impatient(&server))
    };
    let e = Engine::open(cfg).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    server.kill();
    publish(&e, 0, 40).await;
    wait_for(60, "segments queued while the bucket is down", || {
        status(&e).backlog_segments >= 8
    })
    .await;
    // Every message finished: GC deletes the sealed segments, uploaded or not.
    consume(&mut c, 0, 40).await;
    wait_for(60, "GC deleting the finished segments", || {
        sealed_bases(dir.path()).is_empty()
    })
    .await;
    wait_for(60, "the deleted segments leaving the queue", || {
        status(&e).backlog_segments == 0
    })
    .await;
    assert_eq!(status(&e).uploaded_segments, 0);
    // Back: what is sealed now (and not yet consumed, so GC keeps it) is uploaded.
    server.restart();
    publish(&e, 40, 60).await;
    wait_for(60, "the segments sealed after the outage uploaded", || {
        status(&e).uploaded_segments >= 1 && status(&e).backlog_segments == 0
    })
    .await;
    // The record names only objects that are in the bucket, whole: each recorded segment's
    // objects verify against the CRC-32C recorded for them.
    let bucket = bucket(&server);
    let rec = record(dir.path());
    assert!(!rec.segments.is_empty());
    for seg in &rec.segments {
        for object in &seg.objects {
            let verified = bucket
                .verify(&ObjectKey::new(object.key.clone()).unwrap())
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", object.key));
            assert_eq!(
                (verified.checksum.size, verified.checksum.crc32c),
                (object.size, object.crc32c)
            );
        }
    }
    drop(c);
    e.shutdown().await;
}
