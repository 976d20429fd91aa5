//! Local retention and read-through against a real versitygw (docs/tiering.md, "Local
//! retention and read-through"): uploaded segments lose their local `.rqlog` under a small
//! `local_retention_bytes`, a channel that reaches them reads them from the bucket (every body
//! checked against its CRC-32C), a restart keeps reading them through, a missing local file
//! that was never evicted is damage, a damaged or missing object is quarantined like a damaged
//! local record, a bucket outage holds up only the channels reading remote segments, and the
//! objects of segments GC deleted are deleted from the bucket.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::tiering::{
    PREFIX, bucket, bucket_config, impatient, record, sealed_bases, tiered, topic_dir,
};
use common::{wait_for, wait_for_seen, wait_until};
use rustqueue_engine::{
    Bytes, Consumer, ConsumerOptions, Engine, EngineConfig, LOCAL_RETENTION_LEVEL, LocalRetention,
    TieringStatus,
};
use rustqueue_tier::BucketConfig;
use rustqueue_tier::test_server::TestServer;

/// Local sealed segment bytes the tests allow: four 4 KiB segments.
const BOUND: u64 = 16 * 1024;
/// `tiered`'s segment size.
const SEGMENT: u64 = 4096;

fn status(e: &Engine) -> TieringStatus {
    e.tiering_status().expect("tiering is on")
}

fn body(i: u32) -> Vec<u8> {
    format!("{i:06}").repeat(170).into_bytes()
}

fn retaining(dir: &Path, bucket: BucketConfig) -> EngineConfig {
    let mut cfg = tiered(dir, bucket);
    cfg.feature_level = LOCAL_RETENTION_LEVEL;
    if let Some(t) = cfg.tiering.as_mut() {
        t.local_retention = LocalRetention {
            bytes: Some(BOUND),
            age: None,
        };
    }
    cfg
}

async fn publish(e: &Engine, from: u32, to: u32) {
    for i in from..to {
        e.publish("t", vec![Bytes::from(body(i))], None)
            .await
            .unwrap();
    }
}

/// `(sealed, active)`: bytes of the local `.rqlog` files of `t`, the active (newest) one apart.
fn local_log_bytes(dir: &Path) -> (u64, u64) {
    let mut logs: Vec<(String, u64)> = std::fs::read_dir(topic_dir(dir).join("segments"))
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            // A file evicted between the listing and this look is gone: it counts for nothing.
            let len = e.metadata().ok()?.len();
            name.ends_with(".rqlog").then_some((name, len))
        })
        .collect();
    logs.sort();
    let active = logs.pop().map_or(0, |(_, len)| len);
    (logs.iter().map(|(_, len)| len).sum(), active)
}

/// Publishes `n` messages and waits until every sealed segment is uploaded and local
/// retention holds: at most [`BOUND`] bytes of sealed `.rqlog` files left on the volume.
async fn publish_and_settle(e: &Engine, dir: &Path, n: u32) {
    publish(e, 0, n).await;
    wait_for(
        120,
        "uploads caught up and the local copies evicted",
        || {
            let s = status(e);
            s.backlog_segments == 0 && s.uploaded_segments > 0 && local_log_bytes(dir).0 <= BOUND
        },
    )
    .await;
}

/// Receives and finishes messages `from..to` in order, bodies checked; `skip` never comes.
async fn drain(c: &mut Consumer, from: u32, to: u32, skip: &[u32]) {
    for i in (from..to).filter(|i| !skip.contains(i)) {
        let d = tokio::time::timeout(Duration::from_secs(60), c.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} delivered"))
            .unwrap();
        assert_eq!(d.body, body(i), "message {i}, in order, its body intact");
        c.finish(d.id).await.unwrap();
    }
}

/// Nothing more comes (nothing twice).
async fn assert_drained(c: &mut Consumer) {
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c.next())
            .await
            .is_err(),
        "nothing more, nothing twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_local_bound_evicts_most_segments_and_a_channel_drains_all_of_them_through() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(retaining(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    e.create_channel("t", "c").unwrap();
    publish_and_settle(&e, dir.path(), 200).await;

    // 200 messages of 1 KiB, three to a 4 KiB segment: about 67 sealed segments (~220 KiB)
    // of which at most BOUND / (3 records) ~ 5 keep their local copy. The volume holds at
    // most BOUND bytes of sealed segments plus the active one (< SEGMENT): 20 KiB.
    let (sealed, active) = local_log_bytes(dir.path());
    assert!(sealed <= BOUND, "{sealed} sealed bytes kept locally");
    assert!(active <= SEGMENT);
    assert!(sealed + active <= BOUND + SEGMENT);
    let r = record(dir.path());
    let evicted = r.segments.iter().filter(|s| s.evicted).count();
    assert!(
        evicted * 10 >= r.segments.len() * 8,
        "{evicted} of {} segments evicted",
        r.segments.len()
    );
    // Counted once its file is gone (just after the record says so).
    wait_for(10, "the evictions counted", || {
        status(&e).evicted_segments
            == record(dir.path())
                .segments
                .iter()
                .filter(|s| s.evicted)
                .count() as u64
    })
    .await;
    let s = status(&e);
    assert!(s.evicted_bytes >= 50 * 3000, "{s:?}");

    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    drain(&mut c, 0, 200, &[]).await;
    assert_drained(&mut c).await;
    // The newest ~128 KiB of bodies are still in memory (the log's recent bodies); the 70 or
    // so messages before them can only have come from the bucket.
    let s = status(&e);
    assert!(s.read_through_bytes >= 70 * 1020, "{s:?}");
    assert_eq!(s.remote_read_failures, 0);
    assert_eq!(e.storage_damage().findings_since_start, 0);
    assert_eq!(e.health().storage_fault, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_segments_are_read_through_after_a_restart_and_a_lost_local_file_is_damage() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = || retaining(dir.path(), bucket_config(&server));
    let e = Engine::open(cfg()).await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish_and_settle(&e, dir.path(), 120).await;
    e.shutdown().await;
    drop(e);

    // A restart: the record says which segments are remote-only, and they are read through.
    let e = Engine::open(cfg()).await.unwrap();
    assert_eq!(e.storage_damage().findings_since_start, 0);
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    drain(&mut c, 0, 60, &[]).await;
    drop(c);
    e.shutdown().await;
    drop(e);

    // The oldest sealed segment still local, never evicted, loses its file.
    let r = record(dir.path());
    let local = r
        .segments
        .iter()
        .find(|s| !s.evicted)
        .expect("a sealed segment kept locally");
    let path = topic_dir(dir.path())
        .join("segments")
        .join(format!("segment-{:020}.rqlog", local.base));
    let bodies = std::fs::read(&path).unwrap();
    let lost: Vec<u32> = (60..120)
        .filter(|&i| {
            bodies
                .windows(body(i).len())
                .any(|w| w == body(i).as_slice())
        })
        .collect();
    assert!(!lost.is_empty());
    std::fs::remove_file(&path).unwrap();

    let e = Engine::open(cfg()).await.unwrap();
    let damage = e.storage_damage();
    assert_eq!(damage.findings_since_start, 1, "{damage:?}");
    let finding = &damage.latest[0];
    assert!(finding.action.contains("never evicted"), "{finding:?}");
    let positions: Vec<u64> = lost.iter().map(|&i| u64::from(i) + 1).collect();
    assert_eq!(finding.positions, positions);
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    drain(&mut c, 60, 120, &lost).await;
    assert_drained(&mut c).await;
    assert_eq!(e.health().storage_fault, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_missing_object_is_quarantined_and_never_delivered() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(retaining(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    e.create_channel("t", "c").unwrap();
    publish_and_settle(&e, dir.path(), 60).await;
    // A restart, so no body is still in memory: every evicted one comes from the bucket.
    e.shutdown().await;
    drop(e);
    let e = Engine::open(retaining(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    let r = record(dir.path());
    let evicted: Vec<_> = r.segments.iter().filter(|s| s.evicted).collect();
    assert!(evicted.len() >= 3);
    let object = |s: &rustqueue_storage::TieredSegment| {
        server.object_file(&format!("{PREFIX}/{}", s.objects[0].key))
    };
    let holding = |bytes: &[u8]| -> Vec<u32> {
        (0..60)
            .filter(|&i| {
                bytes
                    .windows(body(i).len())
                    .any(|w| w == body(i).as_slice())
            })
            .collect()
    };

    // A byte flipped inside one body of the second evicted segment: same length, same
    // object metadata.
    let flipped = object(evicted[1]);
    let mut bytes = std::fs::read(&flipped).unwrap();
    let in_it = holding(&bytes);
    let victim = in_it[1];
    let at = bytes
        .windows(body(victim).len())
        .position(|w| w == body(victim).as_slice())
        .unwrap()
        + 500;
    bytes[at] ^= 0x40;
    std::fs::write(&flipped, &bytes).unwrap();
    // The third evicted segment's object deleted from the server's directory.
    let missing = object(evicted[2]);
    let gone = holding(&std::fs::read(&missing).unwrap());
    std::fs::remove_file(&missing).unwrap();

    let mut skip = gone.clone();
    skip.push(victim);
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    drain(&mut c, 0, 60, &skip).await;
    assert_drained(&mut c).await;

    let damage = e.storage_damage();
    assert_eq!(
        damage.quarantined_messages_since_start,
        skip.len() as u64,
        "{damage:?}"
    );
    let mut quarantined: Vec<u64> = damage
        .latest
        .iter()
        .flat_map(|f| {
            assert!(f.file.contains("bucket:"), "{f:?}");
            f.positions.clone()
        })
        .collect();
    quarantined.sort_unstable();
    let mut want: Vec<u64> = skip.iter().map(|&i| u64::from(i) + 1).collect();
    want.sort_unstable();
    assert_eq!(quarantined, want);
    assert_eq!(e.health().storage_fault, None, "damage is not isolation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_outage_holds_up_only_the_channel_reading_remote_segments() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(retaining(dir.path(), impatient(&server)))
        .await
        .unwrap();
    e.create_channel("t", "behind").unwrap();
    let mut live = e
        .subscribe("t", "live", ConsumerOptions::default())
        .unwrap();
    live.set_ready(32);
    // 200 messages: the first ones are no longer among the bodies kept in memory.
    publish_and_settle(&e, dir.path(), 200).await;
    drain(&mut live, 0, 200, &[]).await;

    server.pause();
    let mut behind = e
        .subscribe("t", "behind", ConsumerOptions::default())
        .unwrap();
    behind.set_ready(32);
    let delivered = Arc::new(AtomicU32::new(0));
    let reader = tokio::spawn({
        let delivered = delivered.clone();
        async move {
            for i in 0..220 {
                let d = tokio::time::timeout(Duration::from_secs(120), behind.next())
                    .await
                    .unwrap_or_else(|_| panic!("message {i} delivered after the outage"))
                    .unwrap();
                assert_eq!(d.body, body(i), "message {i}, in order, its body intact");
                behind.finish(d.id).await.unwrap();
                delivered.fetch_add(1, Ordering::SeqCst);
            }
            assert_drained(&mut behind).await;
        }
    });
    // Local data goes on being published and delivered meanwhile.
    publish(&e, 200, 220).await;
    drain(&mut live, 200, 220, &[]).await;
    wait_for(60, "the remote reader failing and trying again", || {
        status(&e).remote_read_failures >= 1
    })
    .await;
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        0,
        "nothing read from a stopped bucket"
    );
    assert_eq!(
        e.inflight_bytes().1,
        0,
        "no delivery budget held while waiting for the bucket"
    );

    server.resume();
    reader.await.unwrap();
    assert_eq!(e.storage_damage().findings_since_start, 0);
    assert_eq!(e.health().storage_fault, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_deletes_the_objects_of_the_segments_it_deleted_once_no_checkpoint_lists_them() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig {
        bootstrap_retention: Duration::ZERO,
        gc_interval: Duration::from_millis(50),
        ..retaining(dir.path(), bucket_config(&server))
    };
    if let Some(t) = cfg.tiering.as_mut() {
        t.checkpoint_interval = Duration::from_millis(100);
    }
    let e = Engine::open(cfg).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    publish_and_settle(&e, dir.path(), 200).await;
    let before = record(dir.path());
    let incarnation = before.incarnation.clone().unwrap();
    assert!(before.segments.iter().filter(|s| s.evicted).count() >= 40);
    let segments = format!("nodes/1/topics/74/{incarnation}/segments");
    let bucket = bucket(&server);
    let listed = async || -> Vec<String> {
        bucket
            .list(Some(&segments))
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.key.to_string())
            .collect()
    };
    assert_eq!(listed().await.len(), 2 * before.segments.len());

    // Every message finished: GC deletes every sealed segment, remote-only or local.
    drain(&mut c, 0, 200, &[]).await;
    let deletes = || {
        e.metrics()
            .get(rustqueue_engine::Counter::TieringRemoteDeletes)
    };
    // Counted once the record is written (just after the objects went).
    wait_until(
        60,
        "the objects of every collected segment deleted",
        async || {
            listed().await.is_empty()
                && record(dir.path()).segments.is_empty()
                && deletes() == before.segments.len() as u64
        },
    )
    .await;
    // The newest checkpoint lists none of them, so a restore never looks for them.
    let checkpoint = bucket
        .get_verified(
            &rustqueue_tier::ObjectKey::new(format!(
                "nodes/1/topics/74/{incarnation}/checkpoint.json"
            ))
            .unwrap(),
        )
        .await
        .unwrap()
        .0;
    let cp: rustqueue_engine::TopicCheckpoint = serde_json::from_slice(&checkpoint).unwrap();
    assert!(cp.segments.is_empty(), "{:?}", cp.segments);
    // New messages are uploaded and kept as before.
    publish(&e, 200, 220).await;
    drain(&mut c, 200, 220, &[]).await;
    assert_drained(&mut c).await;
    assert_eq!(e.storage_damage().findings_since_start, 0);
    assert_eq!(e.health().storage_fault, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_gc_goes_on_while_the_bucket_is_down_and_its_objects_are_deleted_after() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    // No local retention here: the channel reads only local segments while the bucket is down.
    let mut cfg = EngineConfig {
        bootstrap_retention: Duration::ZERO,
        gc_interval: Duration::from_millis(50),
        ..tiered(dir.path(), impatient(&server))
    };
    if let Some(t) = cfg.tiering.as_mut() {
        t.checkpoint_interval = Duration::from_millis(100);
    }
    let e = Engine::open(cfg).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    publish(&e, 0, 40).await;
    wait_for(60, "every sealed segment uploaded", || {
        let s = status(&e);
        s.backlog_segments == 0 && s.uploaded_segments >= 8
    })
    .await;
    let uploaded = record(dir.path()).segments.len();

    server.kill();
    drain(&mut c, 0, 40, &[]).await;
    wait_for(60, "local GC deleting every finished segment", || {
        local_log_bytes(dir.path()).0 == 0
    })
    .await;
    assert_eq!(
        record(dir.path()).segments.len(),
        uploaded,
        "the record keeps them until their objects are deleted"
    );

    server.restart();
    let incarnation = record(dir.path()).incarnation.unwrap();
    let segments = format!("nodes/1/topics/74/{incarnation}/segments");
    let bucket = bucket(&server);
    wait_until(
        60,
        "the objects deleted once the bucket is back",
        async || {
            bucket.list(Some(&segments)).await.unwrap().is_empty()
                && record(dir.path()).segments.is_empty()
        },
    )
    .await;
    assert_drained(&mut c).await;
    assert_eq!(e.health().storage_fault, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_age_bound_alone_evicts_every_uploaded_segment_once_its_newest_message_is_older() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiered(dir.path(), bucket_config(&server));
    cfg.feature_level = LOCAL_RETENTION_LEVEL;
    if let Some(t) = cfg.tiering.as_mut() {
        t.local_retention = LocalRetention {
            bytes: None,
            age: Some(Duration::from_secs(2)),
        };
    }
    let e = Engine::open(cfg).await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish(&e, 0, 40).await;
    // Every segment sealed on disk recorded (a scan in the middle of the publishes can see an
    // empty backlog before the last segments are sealed).
    wait_for(60, "every sealed segment uploaded", || {
        let s = status(&e);
        let recorded: Vec<u64> = record(dir.path()).segments.iter().map(|s| s.base).collect();
        s.backlog_segments == 0 && s.uploaded_segments >= 8 && recorded == sealed_bases(dir.path())
    })
    .await;
    let sealed = record(dir.path()).segments.len();
    // The record says so first, then the file goes.
    wait_for_seen(60, "every uploaded segment evicted by age", || {
        let segments = record(dir.path()).segments;
        let local = local_log_bytes(dir.path());
        let evicted = status(&e).evicted_segments;
        let done = segments.iter().all(|s| s.evicted) && local.0 == 0 && evicted == sealed as u64;
        let listed: Vec<(u64, bool)> = segments.iter().map(|s| (s.base, s.evicted)).collect();
        let seen = format!(
            "{sealed} sealed; record (base, evicted) {listed:?}; local sealed/active .rqlog \
             bytes {local:?}; evicted_segments {evicted}"
        );
        (done, seen)
    })
    .await;
    // Restarted (nothing in memory), the channel reads them all through.
    e.shutdown().await;
    drop(e);
    let mut cfg = tiered(dir.path(), bucket_config(&server));
    cfg.feature_level = LOCAL_RETENTION_LEVEL;
    if let Some(t) = cfg.tiering.as_mut() {
        t.local_retention.age = Some(Duration::from_secs(2));
    }
    let e = Engine::open(cfg).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    drain(&mut c, 0, 40, &[]).await;
    assert_drained(&mut c).await;
}
