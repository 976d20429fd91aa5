//! Retention GC, unrouted boundary and fail-closed storage, seen through the engine.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{segment_files, wait_for};
use rustqueue_engine::{Bytes, ConsumerOptions, Engine, EngineConfig, PublishError, Timer};
use rustqueue_storage::simfs::SimFs;

fn cfg(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        max_segment_bytes: 4_096,
        bootstrap_retention: Duration::ZERO,
        gc_interval: Duration::from_millis(50),
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

#[tokio::test]
async fn messages_without_a_channel_survive_gc_and_finished_segments_are_collected() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    for i in 0..40 {
        e.publish("t", vec![Bytes::from(vec![i as u8; 1024])], None)
            .await
            .unwrap();
    }
    let before = segment_files(dir.path()).len();
    assert!(before >= 8);
    // Two more completed GC passes: at least one ran wholly after the last publish.
    let passes = e.metrics().histogram(Timer::Gc).count;
    wait_for(10, "two GC passes after the publishes", || {
        e.metrics().histogram(Timer::Gc).count >= passes + 2
    })
    .await;
    assert_eq!(
        segment_files(dir.path()).len(),
        before,
        "no durable channel: the unrouted boundary keeps everything"
    );
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    for i in 0..40u8 {
        let d = tokio::time::timeout(Duration::from_secs(5), c.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            d.body[0], i,
            "the first channel starts at the unrouted boundary"
        );
        c.finish(d.id).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while segment_files(dir.path()).len() > 2 {
        assert!(
            Instant::now() < deadline,
            "GC collects finished sealed segments"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(c);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.publish("t", vec![Bytes::from_static(b"after")], None)
        .await
        .unwrap();
    assert_eq!(
        e.stats(Some("t"), None).topics[0].message_count,
        41,
        "positions continue after GC"
    );
}

#[tokio::test]
async fn a_failed_write_isolates_storage_and_reports_unhealthy() {
    let fs = SimFs::new();
    // The simulated disk holds the data; the real temp dir only answers the disk-space probe.
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open_with_fs(
        EngineConfig {
            data_path: dir.path().to_path_buf(),
            // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
            disk_high_watermark_percent: 100,
            disk_low_watermark_percent: 99,
            min_free_bytes: 0,
            ..EngineConfig::default()
        },
        Arc::new(fs.clone()),
    )
    .await
    .unwrap();
    e.publish("t", vec![Bytes::from_static(b"ok")], None)
        .await
        .unwrap();
    fs.fail_after(0);
    let err = e
        .publish("t", vec![Bytes::from_static(b"lost")], None)
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::StorageFault(_)), "{err:?}");
    fs.fail_after(u64::MAX);
    assert!(matches!(
        e.publish("t", vec![Bytes::from_static(b"x")], None).await,
        Err(PublishError::StorageFault(_))
    ));
    assert!(e.health().storage_fault.is_some());
    assert_ne!(e.stats(None, None).health, "OK");
}

#[tokio::test]
async fn disk_pressure_throttles_publishes_but_not_consumption() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        data_path: dir.path().to_path_buf(),
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![Bytes::from_static(b"before")], None)
        .await
        .unwrap();
    e.shutdown().await;
    let tight = EngineConfig {
        data_path: dir.path().to_path_buf(),
        min_free_bytes: u64::MAX,
        ..EngineConfig::default()
    };
    let e = Engine::open(tight).await.unwrap();
    assert_eq!(
        e.publish("t", vec![Bytes::from_static(b"x")], None).await,
        Err(PublishError::Throttled)
    );
    assert!(e.health().disk_pressure.is_some());
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let d = tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .unwrap()
        .unwrap();
    c.finish(d.id).await.unwrap();
}

#[tokio::test]
async fn later_durable_channels_start_at_the_bootstrap_window() {
    for (window, expect_old) in [(Duration::from_secs(90), true), (Duration::ZERO, false)] {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig {
            data_path: dir.path().to_path_buf(),
            bootstrap_retention: window,
            // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
            disk_high_watermark_percent: 100,
            disk_low_watermark_percent: 99,
            min_free_bytes: 0,
            ..EngineConfig::default()
        })
        .await
        .unwrap();
        e.create_channel("t", "first").unwrap();
        e.publish("t", vec![Bytes::from_static(b"old")], None)
            .await
            .unwrap();
        let mut c = e
            .subscribe("t", "second", ConsumerOptions::default())
            .unwrap();
        c.set_ready(1);
        e.publish("t", vec![Bytes::from_static(b"new")], None)
            .await
            .unwrap();
        let d = tokio::time::timeout(Duration::from_secs(5), c.next())
            .await
            .unwrap()
            .unwrap();
        let want: &[u8] = if expect_old { b"old" } else { b"new" };
        assert_eq!(d.body.as_ref(), want, "bootstrap window {window:?}");
    }
}
