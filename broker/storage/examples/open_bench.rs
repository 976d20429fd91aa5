//! Restart benchmark: builds a store of N messages (default 1,000,000) in about 100 sealed
//! segments, then times `Store::open` in a fresh process and reports its resident memory
//! (VmRSS) before and after the open and after reading every entry once, so memory held
//! for the backlog is measured apart from what building it left behind.
//!
//! `cargo run --release -p rustqueue-storage --example open_bench [dir] [messages]`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use rustqueue_storage::Manifest;
use rustqueue_storage::{AppendBatch, RealFs, Store, StoreOptions};

const BATCH: usize = 1_000;
const BODY: usize = 100;

fn opts(messages: u64) -> StoreOptions {
    let per_message = (20 + BODY) as u64;
    StoreOptions {
        node_id: 1,
        feature_level: 1,
        max_segment_bytes: (messages * per_message) / 100 + 4_096,
        page_cache: Default::default(),
    }
}

/// Resident set size of this process in MiB, from /proc/self/status.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn build(dir: &Path, messages: u64) {
    let t0 = Instant::now();
    let (store, _) = Store::open(Arc::new(RealFs), dir, opts(messages)).expect("open");
    let m = Manifest::new("bench");
    let mut log = store.create_topic(&m).expect("topic");
    let bodies: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![(i % 251) as u8; BODY]).collect();
    for _ in 0..(messages as usize / BATCH) {
        let id = store.allocate_ids(BATCH as u64).expect("ids");
        log.append(&AppendBatch {
            first_id: id,
            bodies: &bodies,
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .expect("append");
    }
    log.sync().expect("sync");
    println!(
        "built {messages} messages in {} segments in {:?}; VmRSS {:.1} MiB",
        log.segment_count(),
        t0.elapsed(),
        rss_mib()
    );
}

fn reopen(dir: &Path, messages: u64) {
    let before = rss_mib();
    let t1 = Instant::now();
    let (_store, topics) = Store::open(Arc::new(RealFs), dir, opts(messages)).expect("reopen");
    let open = t1.elapsed();
    let after = rss_mib();
    let log = &topics[0].log;
    assert_eq!(log.next_position(), messages + 1);
    println!(
        "restart: {messages} messages, {} segments, Store::open took {open:?}; \
         VmRSS {before:.1} MiB before, {after:.1} MiB after",
        log.segment_count(),
    );
    let t2 = Instant::now();
    let mut bytes = 0u64;
    for p in 1..=messages {
        bytes += u64::from(log.entry(p).expect("entry").body_len);
    }
    assert_eq!(bytes, messages * BODY as u64);
    println!(
        "read every entry once in {:?}; VmRSS {:.1} MiB",
        t2.elapsed(),
        rss_mib()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rustqueue-open-bench"));
    let messages: u64 = args
        .next()
        .map(|n| n.replace('_', "").parse().expect("message count"))
        .unwrap_or(1_000_000);
    assert!(messages >= BATCH as u64 && messages.is_multiple_of(BATCH as u64));
    if args.next().as_deref() == Some("reopen") {
        reopen(&dir, messages);
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    build(&dir, messages);
    // Reopen in a fresh process so its memory is not the builder's leftover heap.
    let status = Command::new(std::env::current_exe().expect("current exe"))
        .arg(&dir)
        .arg(messages.to_string())
        .arg("reopen")
        .status()
        .expect("run the reopen");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "reopen failed: {status}");
}
