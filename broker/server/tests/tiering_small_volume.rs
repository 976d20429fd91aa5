//! The acceptance case of local retention (docs/tiering.md, "Local retention and
//! read-through"): a broker whose data directory is a real 64 MiB tmpfs (so a full volume is a
//! real ENOSPC) holds and delivers a backlog sixteen times larger, through a real versitygw.
//! Nothing is lost, storage is never isolated, and every message comes back in order, byte
//! for byte, most of them read through the bucket.
//!
//! The producer is not paced: it fills the volume between two of the disk guard's samples,
//! and the guard's count of what publishes append since the last one throttles it before
//! ENOSPC. A throttled publish (`E_THROTTLED`) is sent again once the broker reports no disk
//! pressure (`rustqueue_disk_pressure` 0).
//!
//! Runs as root (it mounts the tmpfs).

mod common;

use std::path::Path;
use std::time::Duration;

use common::tmpfs::Tmpfs;
use common::{Broker, metric};
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_protocol::Frame;
use rustqueue_tier::test_server::{self, TestServer};

/// The volume.
const VOLUME_MIB: u64 = 64;
/// The backlog: 1 GiB.
const BACKLOG_MIB: u64 = 1024;
/// Each message: 64 KiB, its index repeated.
const BODY: usize = 64 << 10;
/// Messages per MPUB (512 KiB).
const BATCH: usize = 8;

fn body(i: u64) -> Vec<u8> {
    i.to_le_bytes().repeat(BODY / 8)
}

fn mpub(from: u64) -> Vec<u8> {
    let mut v = (BATCH as u32).to_be_bytes().to_vec();
    for i in from..from + BATCH as u64 {
        v.extend_from_slice(&(BODY as u32).to_be_bytes());
        v.extend_from_slice(&body(i));
    }
    v
}

fn write_keys(dir: &Path) {
    std::fs::write(dir.join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(dir.join("secret"), test_server::SECRET_KEY).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_a_64_mib_volume_holds_and_delivers_a_1_gib_backlog() {
    let volume = Tmpfs::mount(VOLUME_MIB);
    let keys = tempfile::tempdir().unwrap();
    write_keys(keys.path());
    let server = TestServer::start();
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: server.endpoint(),
        prefix: Some("small-volume".into()),
        allow_http: true,
        access_key_file: Some(keys.path().join("access")),
        secret_key_file: Some(keys.path().join("secret")),
        // A quarter of the volume for sealed segments; the rest is the active segment, the
        // indexes, the channel's files and what waits for upload.
        local_retention_bytes: Some(16 << 20),
        ..TieringConfig::default()
    };
    let data = tempfile::TempDir::new_in(volume.path()).unwrap();
    let b = Broker::start_in(data, move |cfg| {
        cfg.tiering = Some(tiering);
        // Local retention needs the level that fences its evictions from older releases.
        cfg.storage.feature_level = rustqueue_engine::LOCAL_RETENTION_LEVEL;
        cfg.storage.max_segment_bytes = 4 << 20;
        cfg.limits.max_body_bytes = 1 << 20;
        cfg.queue.max_message_bytes = 1 << 20;
        // Real disk pressure on the small volume: publishes are throttled above 60 %.
        cfg.storage.disk_high_watermark_percent = 60;
        cfg.storage.disk_low_watermark_percent = 50;
        cfg.storage.min_free_bytes = 4 << 20;
    })
    .await;

    // The channel exists before the first message, so it must deliver all of them.
    let mut first = b.client().await;
    first.subscribe("t", "c", 0).await;
    drop(first);

    let messages = (BACKLOG_MIB << 20) / BODY as u64;
    let mut p = b.client().await;
    p = p.with_patience(Duration::from_secs(120));
    let (mut throttled, mut max_used) = (0u64, 0u64);
    let mut i = 0;
    while i < messages {
        p.cmd_body("MPUB t", &mpub(i)).await;
        match p.answer().await {
            Some(Frame::Response(r)) if &r[..] == b"OK" => i += BATCH as u64,
            Some(Frame::Error(e)) if e.starts_with(b"E_THROTTLED") => {
                throttled += 1;
                // Publish again once the broker says the pressure is over (evictions freed
                // the volume), not after a guessed pause.
                let pressed = std::time::Instant::now();
                while metric(&b.metrics().await, "rustqueue_disk_pressure") != Some(0.0) {
                    assert!(
                        pressed.elapsed() < Duration::from_secs(120),
                        "disk pressure never eased at message {i} ({} bytes used)",
                        volume.used()
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            other => panic!("MPUB at message {i}: {other:?}"),
        }
        max_used = max_used.max(volume.used());
    }
    let text = b.metrics().await;
    let evicted = metric(&text, "rustqueue_tiering_evicted_bytes_total").unwrap_or(0.0);
    assert!(
        evicted >= ((BACKLOG_MIB - VOLUME_MIB) << 20) as f64,
        "{evicted} bytes evicted"
    );

    // Drain: every message once, in order, byte for byte, most of them read through.
    let mut consumer = b.client().await.with_patience(Duration::from_secs(120));
    consumer.subscribe("t", "c", 32).await;
    for want in 0..messages {
        match consumer.answer().await {
            Some(Frame::Message { id, body: got, .. }) => {
                assert!(got[..] == body(want)[..], "message {want} in order, intact");
                consumer.fin(&id).await;
            }
            other => panic!("message {want} of {messages}: {other:?}"),
        }
        if want % 256 == 0 {
            max_used = max_used.max(volume.used());
        }
    }
    consumer.expect_no_message(Duration::from_millis(500)).await;

    let text = b.metrics().await;
    let read = metric(&text, "rustqueue_tiering_read_through_bytes_total").unwrap_or(0.0);
    assert!(read >= evicted * 0.9, "{read} bytes read through");
    assert_eq!(metric(&text, "rustqueue_storage_errors_total"), Some(0.0));
    assert_eq!(
        metric(&text, "rustqueue_storage_quarantined_messages_total"),
        Some(0.0)
    );
    eprintln!(
        "{BACKLOG_MIB} MiB through a {VOLUME_MIB} MiB volume: at most {} MiB used, {throttled} \
         MPUBs throttled, {} MiB evicted, {} MiB read through",
        max_used >> 20,
        evicted as u64 >> 20,
        read as u64 >> 20
    );
    b.stop().await;
}
