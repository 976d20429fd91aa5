//! The rollback fence of local retention against a real versitygw (docs/tiering.md, "Local
//! retention and read-through"; docs/storage-format.md, "COMPATIBILITY"): local retention is
//! refused below storage feature level 3, a directory that ran at level 1 is raised to 3 before
//! its first eviction, and after it a release reading levels up to 2 (simulated through the
//! storage open's own check, with a ceiling of 2) refuses the directory instead of starting the
//! tiered record over and dropping the evicted segments' messages.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::tiering::{bucket_config, record, tiered};
use common::wait_for;
use rustqueue_engine::{
    Bytes, ConsumerOptions, Engine, EngineConfig, LOCAL_RETENTION_LEVEL, LocalRetention,
};
use rustqueue_storage::{RealFs, Store, StoreOptions};
use rustqueue_tier::BucketConfig;
use rustqueue_tier::test_server::TestServer;

fn body(i: u32) -> Vec<u8> {
    format!("{i:06}").repeat(170).into_bytes()
}

/// [`tiered`] evicting every segment as soon as it is uploaded, at `level`.
fn evicting(dir: &Path, bucket: BucketConfig, level: u8) -> EngineConfig {
    let mut cfg = tiered(dir, bucket);
    cfg.feature_level = level;
    if let Some(t) = cfg.tiering.as_mut() {
        t.local_retention = LocalRetention {
            bytes: Some(0),
            age: None,
        };
    }
    cfg
}

/// `(active writer, minimum reader, generation)` of the directory's `COMPATIBILITY`.
fn levels(dir: &Path) -> (u8, u8, u64) {
    let c = Engine::read_compatibility(dir).unwrap().unwrap();
    (
        c.active_writer_feature_level,
        c.minimum_reader_feature_level,
        c.generation,
    )
}

/// Opens `dir` as a release that reads and writes levels 1..=2 would, configured at 2.
fn open_as_level_two_release(dir: &Path) -> Result<(), String> {
    let opts = StoreOptions {
        node_id: EngineConfig::default().node_id,
        feature_level: 2,
        max_segment_bytes: 4_096,
        page_cache: Default::default(),
    };
    Store::open_with_ceiling(Arc::new(RealFs), dir, opts, 2)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_retention_below_level_three_is_refused_naming_the_level_to_set() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    for level in [1, 2] {
        let e = Engine::open(evicting(dir.path(), bucket_config(&server), level))
            .await
            .err()
            .expect("local retention opened below level 3")
            .to_string();
        assert!(
            e.contains(&format!("storage.feature_level is {level}"))
                && e.contains("set storage.feature_level = 3"),
            "{e}"
        );
    }
    assert!(
        !dir.path().join("COMPATIBILITY").exists(),
        "the refusal came before the directory was opened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_first_eviction_a_release_reading_up_to_level_two_refuses_the_directory() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A broker that ran at level 1 with tiering but no local retention: an older release may
    // still open its directory.
    let e = Engine::open(tiered(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    e.create_channel("t", "c").unwrap();
    for i in 0..10 {
        e.publish("t", vec![Bytes::from(body(i))], None)
            .await
            .unwrap();
    }
    e.shutdown().await;
    drop(e);
    assert_eq!(levels(dir.path()), (1, 1, 1));
    open_as_level_two_release(dir.path()).expect("nothing evicted: an older release opens it");
    // (that release raised it to level 2, as it would)
    assert_eq!(levels(dir.path()), (2, 2, 2));

    // Local retention turned on at level 3: the open raises the fence, before any eviction.
    let e = Engine::open(evicting(dir.path(), bucket_config(&server), 3))
        .await
        .unwrap();
    assert_eq!(levels(dir.path()), (3, 3, 3));
    for i in 10..40 {
        e.publish("t", vec![Bytes::from(body(i))], None)
            .await
            .unwrap();
    }
    wait_for(120, "a segment evicted", || {
        e.tiering_status().unwrap().evicted_segments > 0
    })
    .await;
    assert!(record(dir.path()).segments.iter().any(|s| s.evicted));
    assert_eq!(
        levels(dir.path()),
        (3, LOCAL_RETENTION_LEVEL, 3),
        "COMPATIBILITY says minimum reader 3 once a segment is evicted"
    );
    e.shutdown().await;
    drop(e);

    let refused = open_as_level_two_release(dir.path())
        .expect_err("a release reading up to level 2 opened a directory with evicted segments");
    assert!(
        refused
            .contains("data needs reader level 3 but this binary reads at most 2 (rollback fence)"),
        "{refused}"
    );
    // The refusal changed nothing: the record still lists the evicted segments, and this
    // release delivers every message, the evicted ones read through.
    assert!(record(dir.path()).segments.iter().any(|s| s.evicted));
    assert_eq!(levels(dir.path()), (3, 3, 3));
    let e = Engine::open(evicting(dir.path(), bucket_config(&server), 3))
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(32);
    for i in 0..40 {
        let d = tokio::time::timeout(Duration::from_secs(60), c.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} delivered"))
            .unwrap();
        assert_eq!(d.body, body(i), "message {i}, in order, intact");
        c.finish(d.id).await.unwrap();
    }
    e.shutdown().await;
}
