//! Protective eviction (docs/api.md, "Disk pressure") at the engine level: off means nothing is ever
//! deleted under pressure; on, the oldest segments go; and a crash at every I/O step of the
//! eviction sequence never leaves a deleted segment that a channel has not durably moved past.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::segment_files;
use rustqueue_engine::{Bytes, ConsumerOptions, Counter, Engine, EngineConfig};
use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::{Fs, Store, StoreOptions, testing::list_audits};

/// Small segments (5 messages of 100 B each) and no pressure whatever the host disk holds.
fn roomy(dir: &Path) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        max_segment_bytes: 1_024,
        max_message_bytes: 512,
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

/// Permanent pressure from a test-set free-space floor, checked every 5 ms.
fn pressured(dir: &Path, eviction: bool, grace: Duration) -> EngineConfig {
    EngineConfig {
        min_free_bytes: u64::MAX,
        disk_check_interval: Duration::from_millis(5),
        protective_eviction_enabled: eviction,
        disk_pressure_grace: grace,
        ..roomy(dir)
    }
}

/// A hold, not a synchronisation: with eviction off nothing may be deleted however long the
/// pressure lasts, and this window (about 300 disk checks at the 5 ms interval of
/// [`pressured`]) is how long the test watches for a deletion that must never come.
const NOTHING_EVICTED_HOLD: Duration = Duration::from_millis(1_500);

fn body(i: u64) -> Bytes {
    Bytes::from(format!("m{i:03}-{}", "x".repeat(95)))
}

/// Publishes 40 messages (8 segments) with durable channels `a` and `b`; `a` finishes 1..=3.
async fn fill(e: &Engine) {
    e.create_channel("t", "a").unwrap();
    e.create_channel("t", "b").unwrap();
    for i in 1..=40 {
        e.publish("t", vec![body(i)], None).await.unwrap();
    }
    let mut c = e.subscribe("t", "a", ConsumerOptions::default()).unwrap();
    c.set_ready(3);
    for _ in 0..3 {
        let d = tokio::time::timeout(Duration::from_secs(5), c.next())
            .await
            .unwrap()
            .unwrap();
        c.finish(d.id).await.unwrap();
    }
}

/// Reopens `dir` under constant disk pressure with eviction on and no grace, waits for at
/// least `evictions`, and shuts down.
async fn evict_under_pressure(dir: &Path, evictions: u64) {
    let cfg = EngineConfig {
        disk_check_interval: Duration::from_millis(50),
        ..pressured(dir, true, Duration::ZERO)
    };
    let e = Engine::open(cfg).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while e.counter(Counter::Evictions) < evictions {
        assert!(tokio::time::Instant::now() < deadline, "no evictions");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_eviction_off_pressure_never_deletes_anything() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(roomy(dir.path())).await.unwrap();
    fill(&e).await;
    e.shutdown().await;
    let before = segment_files(dir.path());
    assert!(before.len() >= 8, "{before:?}");

    let e = Engine::open(pressured(dir.path(), false, Duration::ZERO))
        .await
        .unwrap();
    assert!(e.health().disk_pressure.is_some());
    tokio::time::sleep(NOTHING_EVICTED_HOLD).await;
    assert_eq!(e.counter(Counter::Evictions), 0);
    assert_eq!(segment_files(dir.path()), before);
    assert!(!dir.path().join("audit").exists());
    let stats = e.stats(Some("t"), Some("b"));
    assert_eq!(stats.topics[0].channels[0].depth, 40);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_eviction_on_the_oldest_segments_go_and_channels_skip_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(roomy(dir.path())).await.unwrap();
    fill(&e).await;
    e.shutdown().await;
    let before = segment_files(dir.path());

    evict_under_pressure(dir.path(), 3).await;
    // Sealing the active segment adds new files; of the old ones exactly a prefix is gone.
    let after = segment_files(dir.path());
    let kept: Vec<&String> = before.iter().filter(|f| after.contains(f)).collect();
    let gone = before.len() - kept.len();
    assert!(
        gone >= 3 && kept.iter().copied().eq(&before[gone..]),
        "{before:?} -> {after:?}"
    );
    let audits = list_audits(&rustqueue_storage::RealFs, dir.path()).unwrap();
    assert_eq!(audits.len(), gone);
    assert!(audits.iter().all(|a| a.topic == "t" && a.messages == 5));
    assert_eq!(audits[0].segment, before[0]);
    assert_eq!(audits[0].first_position, 1);
    for w in audits.windows(2) {
        assert_eq!(w[1].first_position, w[0].through_position + 1);
    }

    // Restart without pressure: both channels resume right after the gap.
    let through = audits.last().unwrap().through_position;
    let e = Engine::open(roomy(dir.path())).await.unwrap();
    for ch in ["a", "b"] {
        let mut c = e.subscribe("t", ch, ConsumerOptions::default()).unwrap();
        c.set_ready(100);
        for i in through + 1..=40 {
            let d = tokio::time::timeout(Duration::from_secs(5), c.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(d.body, body(i), "channel {ch}");
            c.finish(d.id).await.unwrap();
        }
    }
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_durable_channel_eviction_moves_the_unrouted_boundary_past_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(roomy(dir.path())).await.unwrap();
    for i in 1..=20 {
        e.publish("t", vec![body(i)], None).await.unwrap();
    }
    e.shutdown().await;

    evict_under_pressure(dir.path(), 2).await;
    let through = list_audits(&rustqueue_storage::RealFs, dir.path())
        .unwrap()
        .last()
        .unwrap()
        .through_position;
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join("topics")
                .join(rustqueue_storage::testing::hex("t"))
                .join("manifest"),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(manifest["unrouted_from_position"].as_u64().unwrap() > through);

    // The first durable channel starts at the boundary: right after the gap.
    let e = Engine::open(roomy(dir.path())).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let d = tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.body, body(through + 1));
    e.shutdown().await;
}

fn store_opts() -> StoreOptions {
    StoreOptions {
        node_id: 1,
        feature_level: 1,
        max_segment_bytes: 1_024,
        page_cache: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_eviction_step_never_leaves_a_channel_pointing_into_a_deleted_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (mut fired, mut completed, mut deleted_any) = (0, 0, 0);
    for budget in 0..80 {
        let fs = SimFs::new();
        let e = Engine::open_with_fs(roomy(dir.path()), Arc::new(fs.clone()))
            .await
            .unwrap();
        fill(&e).await;
        e.shutdown().await;
        drop(e);

        // The grace keeps the first eviction after the failure budget is armed.
        let cfg = pressured(dir.path(), true, Duration::from_millis(100));
        let e = Engine::open_with_fs(cfg, Arc::new(fs.clone()))
            .await
            .unwrap();
        fs.fail_after(budget);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !fs.failed()
            && e.counter(Counter::Evictions) < 3
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        completed += e.counter(Counter::Evictions);
        if fs.failed() {
            fired += 1;
        } else {
            fs.fail_after(0);
        }
        drop(e);
        // A settling pause, not a proof: the dropped engine's background tasks (disk loop,
        // channel WAL workers) end on their own and nothing public says when. Every write
        // fails from here (the budget fired or is 0), so what they still attempt changes
        // nothing; the pause only keeps those attempts from landing after the crash below,
        // which makes writes succeed again.
        tokio::time::sleep(Duration::from_millis(20)).await;
        fs.crash(&mut |n| n / 2);

        let arc: Arc<dyn Fs> = Arc::new(fs.clone());
        let (_store, topics) = Store::open(arc, Path::new(dir.path()), store_opts()).unwrap();
        let t = topics.into_iter().next().expect("topic survives");
        let first = t.log.first_position();
        if first > 1 {
            deleted_any += 1;
        }
        let audits = list_audits(&fs, dir.path()).unwrap();
        for p in 1..first {
            assert!(
                audits
                    .iter()
                    .any(|a| a.first_position <= p && p <= a.through_position),
                "budget {budget}: position {p} deleted without an audit record"
            );
        }
        let states: BTreeMap<String, _> =
            t.channels.into_iter().map(|c| (c.name, c.state)).collect();
        assert_eq!(states.len(), 2, "budget {budget}");
        for (name, st) in &states {
            for p in 1..first {
                assert!(
                    st.is_done(p),
                    "budget {budget}: channel {name} recovered with position {p} neither finished \
                     nor evicted, but its segment is gone"
                );
            }
        }
        // Everything not evicted is still stored (missing = 0).
        let missing: Vec<u64> = (first..=40).filter(|p| t.log.entry(*p).is_none()).collect();
        assert!(missing.is_empty(), "budget {budget}: missing {missing:?}");
    }
    println!(
        "eviction crash points: {fired} fired, {completed} evictions completed, \
         {deleted_any} runs with a deleted prefix, missing=0"
    );
    assert!(fired >= 40, "injected failures fired only {fired} times");
    assert!(
        deleted_any >= 10,
        "only {deleted_any} runs got as far as a deletion"
    );
}
