//! Protective eviction through the real broker (docs/api.md, "Disk pressure"): a broker filled with
//! small segments restarts under a test-set free-space floor with eviction on; after the
//! grace, each 1 s tick deletes the oldest segment, writes its audit record and moves every
//! channel past it; the counters move; and a restart without pressure resumes the channel
//! right after the gap from the replayed `Evict` record.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Broker, metric};
use rustqueue_server::Config;
use rustqueue_storage::{RealFs, Store, StoreOptions};

/// Segments of three 1,000-byte messages.
fn small(cfg: &mut Config) {
    cfg.limits.max_body_bytes = 4_096;
    cfg.queue.max_message_bytes = 4_096;
    cfg.storage.max_segment_bytes = 4_160;
}

fn body(i: u64) -> Vec<u8> {
    let mut b = format!("m{i:03}-").into_bytes();
    b.resize(1_000, b'x');
    b
}

fn value(text: &str, name: &str) -> f64 {
    metric(text, name).unwrap_or_else(|| panic!("{name} missing"))
}

fn audits(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut v: Vec<(String, serde_json::Value)> = match std::fs::read_dir(dir.join("audit")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let json = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                (name, json)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort_by_key(|(_, j)| j["through_position"].as_u64());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_deletes_the_oldest_segments_with_audit_and_channels_resume_after_the_gap() {
    // Fill 30 messages (10 segments); the channel finishes the first two.
    let b = Broker::start_with(small).await;
    let mut c = b.client().await;
    c.subscribe("t", "c", 2).await;
    let mut p = b.client().await;
    for i in 1..=30 {
        p.publish("t", &body(i)).await;
    }
    for _ in 0..2 {
        let (id, _, _) = c.expect_message().await;
        c.fin(&id).await;
    }
    drop((c, p));
    let dir = b.stop_keep_dir().await;
    assert!(audits(dir.path()).is_empty());

    // Pressure forever, eviction on, 1 s grace.
    let b = Broker::start_in(dir, |cfg| {
        small(cfg);
        cfg.storage.min_free_bytes = u64::MAX;
        cfg.storage.protective_eviction_enabled = true;
        cfg.storage.disk_pressure_grace_seconds = 1;
    })
    .await;
    let status = rustqueue_api::http_client::get(b.url("/v1/health"))
        .await
        .unwrap()
        .status();
    assert_eq!(status, 503);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = b.metrics().await;
        if value(&text, "rustqueue_protective_evictions_total") >= 2.0 {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no eviction in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let evictions = value(&text, "rustqueue_protective_evictions_total");
    let evicted = value(&text, "rustqueue_protective_evicted_messages_total");
    assert_eq!(evicted, 3.0 * evictions, "three messages per segment");
    let dir = b.stop_keep_dir().await;

    // One audit record per deleted segment, contiguous from position 1, named as docs/storage-format.md says.
    let records = audits(dir.path());
    assert!(records.len() as f64 >= evictions);
    let hex_topic = rustqueue_storage::testing::hex("t");
    let mut next = 1;
    for (name, a) in &records {
        let created = a["created_at_ms"].as_u64().unwrap();
        let through = a["through_position"].as_u64().unwrap();
        assert_eq!(
            name,
            &format!("eviction-{created:020}-{hex_topic}-{through:020}.json")
        );
        assert_eq!(a["topic"], "t");
        assert_eq!(a["first_position"].as_u64(), Some(next));
        assert_eq!(a["messages"].as_u64(), Some(through - next + 1));
        assert!(a["segment"].as_str().unwrap().ends_with(".rqlog"));
        next = through + 1;
    }
    let through = next - 1;
    assert!(
        !dir.path()
            .join("audit")
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().ends_with(".tmp") })
    );

    // The channel's Evict record is durable: its recovered ack floor is past the gap.
    {
        let opts = StoreOptions {
            node_id: 1,
            feature_level: 1,
            max_segment_bytes: 4_160,
            page_cache: Default::default(),
        };
        let (store, topics) = Store::open(Arc::new(RealFs), dir.path(), opts).unwrap();
        let t = topics.into_iter().next().unwrap();
        assert_eq!(t.log.first_position(), through + 1);
        assert!(t.channels[0].state.ack_floor >= through, "Evict replayed");
        store.release_lock();
    }

    // Restart without pressure: the channel resumes right after the gap, no error.
    let b = Broker::start_in(dir, small).await;
    let mut c = b.client().await;
    c.subscribe("t", "c", 50).await;
    for i in through + 1..=30 {
        let (id, _, got) = c.expect_message().await;
        assert_eq!(got, body(i));
        c.fin(&id).await;
    }
    let mut p = b.client().await;
    p.publish("t", b"after").await;
    let (_, _, got) = c.expect_message().await;
    assert_eq!(got, b"after");
    b.stop().await;
}
