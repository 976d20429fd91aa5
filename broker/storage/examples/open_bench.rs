//! Restart benchmark: builds a store of 1,000,000 messages in about 100 sealed segments, then
//! times `Store::open` (recovery reads the sealed-segment indexes, not the records).
//!
//! `cargo run --release -p rustqueue-storage --example open_bench [dir]`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rustqueue_storage::meta::Manifest;
use rustqueue_storage::{AppendBatch, RealFs, Store, StoreOptions};

fn main() {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rustqueue-open-bench"));
    let _ = std::fs::remove_dir_all(&dir);
    const MESSAGES: u64 = 1_000_000;
    const BATCH: usize = 1_000;
    const BODY: usize = 100;
    let per_message = (20 + BODY) as u64;
    let segment = (MESSAGES * per_message) / 100 + 4_096;
    let opts = StoreOptions {
        node_id: 1,
        feature_level: 1,
        max_segment_bytes: segment,
    };
    let t0 = Instant::now();
    {
        let (store, _) = Store::open(Arc::new(RealFs), &dir, opts.clone()).expect("open");
        let m = Manifest::new("bench");
        let mut log = store.create_topic(&m).expect("topic");
        let bodies: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![(i % 251) as u8; BODY]).collect();
        for _ in 0..(MESSAGES as usize / BATCH) {
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
            "built {MESSAGES} messages in {} segments in {:?}",
            log.segment_count(),
            t0.elapsed()
        );
    }
    let t1 = Instant::now();
    let (_store, topics) = Store::open(Arc::new(RealFs), &dir, opts).expect("reopen");
    let open = t1.elapsed();
    let log = &topics[0].log;
    assert_eq!(log.next_position(), MESSAGES + 1);
    println!(
        "restart: {} messages, {} segments, Store::open took {:?}",
        MESSAGES,
        log.segment_count(),
        open
    );
    let _ = std::fs::remove_dir_all(&dir);
}
