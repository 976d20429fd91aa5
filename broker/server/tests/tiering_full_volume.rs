//! A full volume while the bucket is down (docs/tiering.md, "A full volume"): with local
//! retention on, the local copies of uploaded segments go first, oldest first, whatever the
//! retention bounds; a segment not yet uploaded is never deleted, not even by protective
//! eviction (turned on here, with no grace): publishing is throttled (`E_THROTTLED`) until
//! the bucket is back and uploads have caught up. Nothing acknowledged is lost.
//!
//! A real 32 MiB tmpfs (a full volume is a real ENOSPC) and a real versitygw, SIGKILLed for
//! the outage. Runs as root (it mounts the tmpfs).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::tmpfs::Tmpfs;
use common::{Broker, Client, metric};
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_protocol::Frame;
use rustqueue_tier::test_server::{self, TestServer};

/// The volume.
const VOLUME_MIB: u64 = 32;
/// Each message: 64 KiB, its index repeated.
const BODY: usize = 64 << 10;
/// Messages per MPUB (512 KiB).
const BATCH: u64 = 8;

fn body(i: u64) -> Vec<u8> {
    i.to_le_bytes().repeat(BODY / 8)
}

fn mpub(from: u64) -> Vec<u8> {
    let mut v = (BATCH as u32).to_be_bytes().to_vec();
    for i in from..from + BATCH {
        v.extend_from_slice(&(BODY as u32).to_be_bytes());
        v.extend_from_slice(&body(i));
    }
    v
}

fn write_keys(dir: &Path) {
    std::fs::write(dir.join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(dir.join("secret"), test_server::SECRET_KEY).unwrap();
}

/// Publishes the next batch after `acked`; returns whether it was acknowledged (false:
/// throttled, nothing stored).
async fn publish(p: &mut Client, acked: u64) -> bool {
    p.cmd_body("MPUB t", &mpub(acked)).await;
    match p.answer().await {
        Some(Frame::Response(r)) if &r[..] == b"OK" => true,
        Some(Frame::Error(e)) if e.starts_with(b"E_THROTTLED") => false,
        other => panic!("MPUB at message {acked}: {other:?}"),
    }
}

/// Waits until the broker reports no disk pressure; false if it lasted `patience`.
async fn pressure_eases(b: &Broker, patience: Duration) -> bool {
    let since = Instant::now();
    while since.elapsed() < patience {
        if metric(&b.metrics().await, "rustqueue_disk_pressure") == Some(0.0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A broker on `volume` uploading to `server`, with a retention bound far above the volume and
/// protective eviction on at once.
async fn start(volume: &Tmpfs, server: &TestServer, keys: &Path) -> Broker {
    write_keys(keys);
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: server.endpoint(),
        prefix: Some("full-volume".into()),
        allow_http: true,
        access_key_file: Some(keys.join("access")),
        secret_key_file: Some(keys.join("secret")),
        // Far above the volume: only disk pressure makes room.
        local_retention_bytes: Some(1 << 30),
        ..TieringConfig::default()
    };
    let data = tempfile::TempDir::new_in(volume.path()).unwrap();
    Broker::start_in(data, move |cfg| {
        cfg.tiering = Some(tiering);
        // Local retention needs the level that fences out releases that cannot read evicted
        // segments (docs/tiering.md).
        cfg.storage.feature_level = rustqueue_engine::LOCAL_RETENTION_LEVEL;
        cfg.storage.max_segment_bytes = 2 << 20;
        cfg.limits.max_body_bytes = 1 << 20;
        cfg.queue.max_message_bytes = 1 << 20;
        cfg.storage.disk_high_watermark_percent = 60;
        cfg.storage.disk_low_watermark_percent = 50;
        cfg.storage.min_free_bytes = 2 << 20;
        // Protective eviction at once: with tiering it must still delete no message.
        cfg.storage.protective_eviction_enabled = true;
        cfg.storage.disk_pressure_grace_seconds = 0;
    })
    .await
}

/// A channel created before the first message gets every acknowledged one, once, in order,
/// byte for byte.
async fn drain(b: &Broker, acked: u64) {
    let mut consumer = b.client().await.with_patience(Duration::from_secs(120));
    consumer.subscribe("t", "c", 32).await;
    for want in 0..acked {
        match consumer.answer().await {
            Some(Frame::Message { id, body: got, .. }) => {
                assert!(got[..] == body(want)[..], "message {want} in order, intact");
                consumer.fin(&id).await;
            }
            other => panic!("message {want} of {acked}: {other:?}"),
        }
    }
    consumer.expect_no_message(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_with_the_bucket_down_throttles_and_loses_nothing() {
    let volume = Tmpfs::mount(VOLUME_MIB);
    let keys = tempfile::tempdir().unwrap();
    let mut server = TestServer::start();
    let b = start(&volume, &server, keys.path()).await;
    let mut first = b.client().await;
    first.subscribe("t", "c", 0).await;
    drop(first);
    // Not paced: the disk guard counts what is appended between its samples.
    let mut p = b.client().await;

    // 8 MiB with the bucket up: uploaded, and kept local (far under the retention bound).
    let mut acked = 0;
    while acked < 128 {
        assert!(publish(&mut p, acked).await, "no pressure yet");
        acked += BATCH;
    }
    // 8 MiB in 2 MiB segments: three sealed, all uploaded.
    let since = Instant::now();
    loop {
        let text = b.metrics().await;
        if metric(&text, "rustqueue_tiering_uploads_total").unwrap_or(0.0) >= 3.0
            && metric(&text, "rustqueue_tiering_upload_backlog_segments") == Some(0.0)
        {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "uploads caught up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let uploaded = metric(&b.metrics().await, "rustqueue_tiering_uploads_total").unwrap();
    assert_eq!(
        metric(&b.metrics().await, "rustqueue_tiering_evicted_bytes_total"),
        Some(0.0)
    );

    // The bucket goes down; publish until the volume is full of segments not uploaded.
    server.kill();
    let mut throttled = 0u64;
    loop {
        if publish(&mut p, acked).await {
            acked += BATCH;
            continue;
        }
        throttled += 1;
        // Uploaded copies make room for a while; then nothing can go.
        if !pressure_eases(&b, Duration::from_secs(5)).await {
            break;
        }
        assert!(
            acked < 1024,
            "the volume never filled ({} bytes used)",
            volume.used()
        );
    }
    let text = b.metrics().await;
    let evicted = metric(&text, "rustqueue_tiering_evicted_bytes_total").unwrap();
    assert!(evicted > 0.0, "the uploaded copies went first");
    assert_eq!(
        metric(&text, "rustqueue_protective_evictions_total"),
        Some(0.0)
    );
    assert_eq!(metric(&text, "rustqueue_storage_errors_total"), Some(0.0));
    assert!(
        !publish(&mut p, acked).await,
        "still throttled while nothing can go"
    );
    let stuck_used = volume.used();

    // The bucket comes back: uploads catch up, their copies go, publishing resumes.
    server.restart();
    assert!(
        pressure_eases(&b, Duration::from_secs(120)).await,
        "disk pressure never eased after the bucket came back"
    );
    let resumed_at = acked;
    while acked < resumed_at + 16 {
        if publish(&mut p, acked).await {
            acked += BATCH;
        } else {
            assert!(pressure_eases(&b, Duration::from_secs(60)).await);
        }
    }
    let text = b.metrics().await;
    assert!(metric(&text, "rustqueue_tiering_uploads_total").unwrap() > uploaded);
    assert_eq!(
        metric(&text, "rustqueue_protective_evictions_total"),
        Some(0.0)
    );

    drain(&b, acked).await;
    let text = b.metrics().await;
    assert_eq!(metric(&text, "rustqueue_storage_errors_total"), Some(0.0));
    assert_eq!(
        metric(&text, "rustqueue_storage_quarantined_messages_total"),
        Some(0.0)
    );
    eprintln!(
        "{acked} messages acknowledged on a {VOLUME_MIB} MiB volume, {throttled} MPUBs \
         throttled, {} MiB used while stuck, {} MiB of uploaded copies evicted",
        stuck_used >> 20,
        evicted as u64 >> 20
    );
    b.stop().await;
}
