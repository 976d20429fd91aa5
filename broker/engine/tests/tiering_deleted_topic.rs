//! A deleted topic's objects are deleted from the bucket (docs/tiering.md, "GC, eviction and
//! deletion"): the intent is written before the topic's directory goes, the uploader deletes
//! every object of the topic's life once a catalog without it is up, and a restart with the
//! bucket down in between finishes the deletion after the next start. A topic created again
//! under the same name keeps its own objects.

mod common;

use std::path::Path;
use std::time::Duration;

use common::tiering::{bucket, impatient, record, tiered};
use common::{wait_for, wait_until};
use rustqueue_engine::{Bytes, Counter, Engine, EngineConfig};
use rustqueue_tier::Bucket;
use rustqueue_tier::test_server::TestServer;

fn cfg(dir: &Path, server: &TestServer) -> EngineConfig {
    let mut cfg = tiered(dir, impatient(server));
    if let Some(t) = cfg.tiering.as_mut() {
        t.checkpoint_interval = Duration::from_millis(100);
    }
    cfg
}

async fn publish(e: &Engine, n: u32) {
    for i in 0..n {
        let body = format!("{i:06}").repeat(170).into_bytes();
        e.publish("t", vec![Bytes::from(body)], None).await.unwrap();
    }
}

async fn keys(bucket: &Bucket, prefix: &str) -> Vec<String> {
    bucket
        .list(Some(prefix))
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key.to_string())
        .collect()
}

/// Publishes 40 messages to `t` and waits until its segments and a checkpoint are up; returns
/// the prefix of its life in the bucket.
async fn uploaded_topic(e: &Engine, dir: &Path, bucket: &Bucket) -> String {
    publish(e, 40).await;
    // This life's own record: the counters add up every life of the topic, and the backlog
    // gauge may not show a recreated topic's segments yet.
    wait_for(60, "every sealed segment uploaded", || {
        let s = e.tiering_status().unwrap();
        s.backlog_segments == 0 && record(dir).segments.len() >= 8
    })
    .await;
    let prefix = format!("nodes/1/topics/74/{}", record(dir).incarnation.unwrap());
    let checkpoint = format!("{prefix}/checkpoint.json");
    wait_until(60, "the topic's checkpoint uploaded", async || {
        keys(bucket, &prefix).await.contains(&checkpoint)
    })
    .await;
    prefix
}

/// The intents left in the data directory.
fn intents(dir: &Path) -> usize {
    std::fs::read_dir(dir.join(rustqueue_storage::DELETED_DIR)).map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topics_objects_are_deleted_from_the_bucket() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bucket = bucket(&server);
    let e = Engine::open(cfg(dir.path(), &server)).await.unwrap();
    let old = uploaded_topic(&e, dir.path(), &bucket).await;
    assert!(
        keys(&bucket, &old).await.len() >= 17,
        "segments and checkpoint"
    );

    e.delete_topic("t").await.unwrap();
    wait_until(60, "the deleted topic's objects deleted", async || {
        keys(&bucket, &old).await.is_empty()
            && intents(dir.path()) == 0
            && e.metrics().get(Counter::TieringDeletedTopics) == 1
    })
    .await;
    assert!(
        keys(&bucket, "nodes/1/topics").await.is_empty(),
        "nothing of the topic is left"
    );

    // Created again: a new life, whose objects stay.
    let new = uploaded_topic(&e, dir.path(), &bucket).await;
    assert_ne!(new, old);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(keys(&bucket, &new).await.len() >= 17);
    assert_eq!(e.metrics().get(Counter::TieringDeletedTopics), 1);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_while_the_bucket_is_down_loses_its_objects_after_a_restart() {
    let mut server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bucket = bucket(&server);
    let e = Engine::open(cfg(dir.path(), &server)).await.unwrap();
    let old = uploaded_topic(&e, dir.path(), &bucket).await;
    let before = keys(&bucket, &old).await.len();

    server.kill();
    e.delete_topic("t").await.unwrap();
    assert_eq!(
        intents(dir.path()),
        1,
        "the intent outlives the topic's directory"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    e.shutdown().await;
    drop(e);

    server.restart();
    assert_eq!(
        keys(&bucket, &old).await.len(),
        before,
        "nothing deleted yet"
    );
    let e = Engine::open(cfg(dir.path(), &server)).await.unwrap();
    wait_until(60, "the objects deleted after the restart", async || {
        keys(&bucket, &old).await.is_empty()
            && intents(dir.path()) == 0
            && e.metrics().get(Counter::TieringDeletedTopics) == 1
    })
    .await;
    e.shutdown().await;
}
