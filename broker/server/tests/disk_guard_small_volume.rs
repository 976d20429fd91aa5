//! The disk guard on a small volume against producers that never pause (docs/api.md, "Disk
//! pressure"): the guard counts what publishes append between its samples of the volume, so
//! they are throttled (`E_THROTTLED`) before the volume is full, never failing with ENOSPC and
//! isolating storage, whatever the guard's once-a-second sample would have seen. Every
//! acknowledged message is then delivered.
//!
//! A real 32 MiB tmpfs (a full volume is a real ENOSPC). Runs as root (it mounts the tmpfs).

mod common;

use std::time::Duration;

use common::tmpfs::Tmpfs;
use common::{Broker, Client, metric};
use rustqueue_protocol::Frame;

const VOLUME_MIB: u64 = 32;
const BODY: usize = 64 << 10;
const BATCH: u64 = 8;
const PRODUCERS: u64 = 4;

fn body(producer: u64, i: u64) -> Vec<u8> {
    (producer << 32 | i).to_le_bytes().repeat(BODY / 8)
}

fn mpub(producer: u64, from: u64) -> Vec<u8> {
    let mut v = (BATCH as u32).to_be_bytes().to_vec();
    for i in from..from + BATCH {
        v.extend_from_slice(&(BODY as u32).to_be_bytes());
        v.extend_from_slice(&body(producer, i));
    }
    v
}

/// Publishes batches back to back until the first refusal; returns the messages acknowledged
/// and the refusal.
async fn publish_until_refused(mut p: Client, producer: u64) -> (u64, Vec<u8>) {
    let mut acked = 0;
    loop {
        p.cmd_body(&format!("MPUB t{producer}"), &mpub(producer, acked))
            .await;
        match p.answer().await {
            Some(Frame::Response(r)) if &r[..] == b"OK" => acked += BATCH,
            Some(Frame::Error(e)) => return (acked, e.to_vec()),
            other => panic!("MPUB at message {acked} of producer {producer}: {other:?}"),
        }
        assert!(acked < 4096, "the volume never filled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaced_producers_are_throttled_before_the_volume_is_full() {
    let volume = Tmpfs::mount(VOLUME_MIB);
    let data = tempfile::TempDir::new_in(volume.path()).unwrap();
    let b = Broker::start_in(data, |cfg| {
        cfg.storage.max_segment_bytes = 2 << 20;
        cfg.limits.max_body_bytes = 1 << 20;
        cfg.queue.max_message_bytes = 1 << 20;
        cfg.storage.disk_high_watermark_percent = 60;
        cfg.storage.disk_low_watermark_percent = 50;
        cfg.storage.min_free_bytes = 2 << 20;
    })
    .await;
    for producer in 0..PRODUCERS {
        let mut c = b.client().await;
        c.subscribe(&format!("t{producer}"), "c", 0).await;
    }
    let mut tasks = Vec::new();
    for producer in 0..PRODUCERS {
        let p = b.client().await.with_patience(Duration::from_secs(60));
        tasks.push(tokio::spawn(publish_until_refused(p, producer)));
    }
    let mut acked = Vec::new();
    for t in tasks {
        let (n, refusal) = t.await.unwrap();
        assert!(
            refusal.starts_with(b"E_THROTTLED"),
            "refused by disk pressure, not a storage failure: {} ({} of {VOLUME_MIB} MiB used)",
            String::from_utf8_lossy(&refusal),
            volume.used() >> 20
        );
        acked.push(n);
    }
    let text = b.metrics().await;
    assert_eq!(metric(&text, "rustqueue_storage_errors_total"), Some(0.0));
    assert_eq!(metric(&text, "rustqueue_disk_pressure"), Some(1.0));
    let used = volume.used();
    assert!(used < VOLUME_MIB << 20, "{used} bytes used");

    // Every acknowledged message is there.
    for (producer, n) in acked.iter().enumerate() {
        let producer = producer as u64;
        let mut c = b.client().await;
        c.subscribe(&format!("t{producer}"), "c", 32).await;
        for i in 0..*n {
            match c.answer().await {
                Some(Frame::Message { id, body: got, .. }) => {
                    assert!(got[..] == body(producer, i)[..], "{producer}/{i}");
                    c.fin(&id).await;
                }
                other => panic!("message {i} of producer {producer}: {other:?}"),
            }
        }
    }
    eprintln!(
        "{} messages of 64 KiB acknowledged by {PRODUCERS} unpaced producers on a {VOLUME_MIB} \
         MiB volume, then throttled at {} MiB used",
        acked.iter().sum::<u64>(),
        used >> 20
    );
    b.stop().await;
}
