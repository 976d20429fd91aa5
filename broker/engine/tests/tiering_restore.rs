//! Checkpoints in the bucket and `storage restore --from-bucket` against a real versitygw
//! (docs/tiering.md, "Restoring a lost volume"): the data directory is deleted after segments
//! and checkpoints went up, rebuilt from the bucket, and the broker started on it. A ledger of
//! what was published and finished says what each channel must get back, in order, and what
//! the restore must report lost, exactly.

mod common;

use std::path::Path;
use std::time::Duration;

use common::tiering::{PREFIX, bucket, bucket_config, record, sealed_bases, segment_paths};
use rustqueue_engine::restore::{
    RestoreError, RestoreOptions, RestoreReport, TopicRestore, restore_from_bucket,
};
use rustqueue_engine::{
    Bytes, Catalog, ConsumerOptions, Engine, EngineConfig, StorageError, TieringStatus,
    TopicCheckpoint,
};
use rustqueue_tier::ObjectKey;
use rustqueue_tier::test_server::TestServer;

/// The tiering tests' configuration, with a checkpoint upload every 100 ms.
fn tiered(dir: &Path, server: &TestServer) -> EngineConfig {
    let mut cfg = common::tiering::tiered(dir, bucket_config(server));
    if let Some(t) = cfg.tiering.as_mut() {
        t.checkpoint_interval = Duration::from_millis(100);
    }
    cfg
}

fn status(e: &Engine) -> TieringStatus {
    e.tiering_status().expect("tiering is on")
}

fn body(tag: &str, i: u32) -> Vec<u8> {
    format!("{tag}{i:06}").repeat(150).into_bytes()
}

async fn publish(e: &Engine, topic: &str, tag: &str, range: std::ops::Range<u32>) {
    for i in range {
        e.publish(topic, vec![Bytes::from(body(tag, i))], None)
            .await
            .unwrap();
    }
}

/// The node's catalog in the bucket, if any.
async fn catalog(server: &TestServer) -> Option<Catalog> {
    let key = ObjectKey::new("nodes/1/catalog.json").unwrap();
    let (bytes, _) = bucket(server).get_verified(&key).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// `topic`'s current checkpoint (through the catalog), if any.
async fn checkpoint(server: &TestServer, topic: &str) -> Option<TopicCheckpoint> {
    let c = catalog(server).await?;
    let entry = c.topics.iter().find(|t| t.topic == topic)?;
    let hex: String = topic.bytes().map(|b| format!("{b:02x}")).collect();
    let key = format!("nodes/1/topics/{hex}/{}/checkpoint.json", entry.incarnation);
    let (bytes, _) = bucket(server)
        .get_verified(&ObjectKey::new(key).unwrap())
        .await
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Waits until every sealed segment of `t` is uploaded and a checkpoint says `head` and each
/// channel's ack floor, and lists the segments it records.
async fn wait_checkpointed(
    e: &Engine,
    server: &TestServer,
    dir: &Path,
    head: u64,
    floors: &[(&str, u64)],
) -> TopicCheckpoint {
    common::wait_for(60, "every sealed segment uploaded and recorded", || {
        let recorded: Vec<u64> = record(dir).segments.iter().map(|s| s.base).collect();
        status(e).backlog_segments == 0 && recorded == sealed_bases(dir)
    })
    .await;
    let sealed = sealed_bases(dir);
    let mut found = None;
    let what = format!("a checkpoint of head {head}, segments {sealed:?}, floors {floors:?}");
    common::wait_until(60, &what, async || {
        let Some(cp) = checkpoint(server, "t").await else {
            return false;
        };
        let bases: Vec<u64> = cp.segments.iter().map(|s| s.base).collect();
        let floors_ok = floors.iter().all(|(name, floor)| {
            cp.channels
                .iter()
                .any(|c| c.name == *name && c.ack_floor == *floor)
        });
        let done = cp.head == head && bases == sealed && floors_ok;
        found = done.then_some(cp);
        done
    })
    .await;
    found.expect("the wait ended on a matching checkpoint")
}

/// The last position of sealed segment `base` of `t`, from its local index.
fn last_position(dir: &Path, base: u64) -> u64 {
    let [log, idx] = segment_paths(dir, base);
    let len = std::fs::metadata(log).unwrap().len();
    let bytes = std::fs::read(idx).unwrap();
    rustqueue_storage::restore::index_summary(&bytes, base, len)
        .unwrap()
        .last_position
        .unwrap()
}

fn options(server: &TestServer, dir: &Path, force: bool) -> RestoreOptions {
    RestoreOptions {
        bucket: bucket_config(server),
        node_id: 1,
        data_path: dir.to_path_buf(),
        force,
    }
}

async fn restore(server: &TestServer, dir: &Path, force: bool) -> RestoreReport {
    let mut lines = Vec::new();
    let report = restore_from_bucket(options(server, dir, force), &mut |l| lines.push(l))
        .await
        .unwrap();
    assert!(
        lines.iter().any(|l| l.contains("segment")),
        "progress names segments: {lines:?}"
    );
    report
}

fn topic<'a>(report: &'a RestoreReport, name: &str) -> &'a TopicRestore {
    report.topics.iter().find(|t| t.topic == name).unwrap()
}

/// Receives `want` in order on `channel` of `t` (finishing each), then shows the channel
/// holds nothing more: a message published now is the next one delivered.
async fn expect_exactly(e: &Engine, channel: &str, want: &[Vec<u8>], marker: &[u8]) {
    let mut c = e
        .subscribe("t", channel, ConsumerOptions::default())
        .unwrap();
    c.set_ready(1);
    for (n, expected) in want.iter().enumerate() {
        let d = tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap_or_else(|_| panic!("{channel}: message {n} of {} not delivered", want.len()))
            .unwrap();
        assert_eq!(
            &d.body[..],
            &expected[..],
            "{channel}: delivery {n} out of order or wrong"
        );
        c.finish(d.id).await.unwrap();
    }
    let d = tokio::time::timeout(Duration::from_secs(10), c.next())
        .await
        .expect("the marker is delivered")
        .unwrap();
    assert_eq!(
        &d.body[..],
        marker,
        "{channel}: nothing but the ledger came back"
    );
    c.finish(d.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_data_directory_comes_back_from_the_bucket_and_the_loss_is_counted_exactly() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    e.create_topic("t").unwrap();
    e.create_channel("t", "c").unwrap();
    e.create_channel("t", "d").unwrap();
    publish(&e, "t", "m", 0..40).await;
    // The ledger: c finishes the first 15, d all 40.
    for (channel, n) in [("c", 15u32), ("d", 40)] {
        let mut c = e
            .subscribe("t", channel, ConsumerOptions::default())
            .unwrap();
        c.set_ready(1);
        for i in 0..n {
            let d = tokio::time::timeout(Duration::from_secs(10), c.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&d.body[..], &body("m", i)[..]);
            c.finish(d.id).await.unwrap();
        }
    }
    let cp = wait_checkpointed(&e, &server, dir.path(), 40, &[("c", 15), ("d", 40)]).await;
    let sealed = sealed_bases(dir.path());
    let uploaded_through = last_position(dir.path(), *sealed.last().unwrap());
    assert!(
        (16..40).contains(&uploaded_through),
        "the active segment holds the last messages: {uploaded_through}"
    );
    e.shutdown().await;
    drop(e);

    std::fs::remove_dir_all(dir.path()).unwrap();
    // A broker started on the empty directory by mistake must not replace the lost volume's
    // catalog with its own.
    let fresh = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    common::wait_for(30, "the catalog refused", || {
        status(&fresh).checkpoint_failures >= 1
    })
    .await;
    fresh.shutdown().await;
    drop(fresh);
    assert_eq!(
        catalog(&server).await.unwrap().topics[0].incarnation,
        cp.incarnation
    );
    std::fs::remove_dir_all(dir.path()).unwrap();
    let report = restore(&server, dir.path(), false).await;
    let t = topic(&report, "t");
    assert!(t.restored && !report.damaged(), "{report:#?}");
    assert_eq!(t.incarnation, cp.incarnation);
    assert_eq!(t.segments_restored, sealed.len());
    assert_eq!(t.messages_restored, uploaded_through);
    let lost = 40 - uploaded_through;
    assert_eq!(
        t.lost_messages,
        Some(lost),
        "exactly the messages never uploaded"
    );
    assert_eq!(report.lost_messages, lost);
    assert_eq!(
        (t.lost[0].from, t.lost[0].through, t.lost.len()),
        (uploaded_through + 1, 40, 1)
    );
    let per_channel: Vec<(String, u64)> = t
        .channels
        .iter()
        .map(|c| (c.channel.clone(), c.lost_messages))
        .collect();
    assert_eq!(per_channel, [("c".into(), lost), ("d".into(), 0)]);
    assert!(t.continues_incarnation);

    // The broker starts on it normally: c gets every uploaded message it had not finished,
    // in order; d gets nothing again; new messages follow the lost positions.
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    assert_eq!(
        e.tail_position("t").unwrap(),
        40,
        "positions are never reused"
    );
    let marker = body("new", 0);
    publish(&e, "t", "new", 0..1).await;
    let want: Vec<Vec<u8>> = (15..uploaded_through as u32)
        .map(|i| body("m", i))
        .collect();
    expect_exactly(&e, "c", &want, &marker).await;
    expect_exactly(&e, "d", &[], &marker).await;
    // The uploads continue the incarnation: the restored segments are not uploaded again.
    common::wait_for(30, "three scans", || status(&e).scans >= 3).await;
    assert_eq!(status(&e).uploaded_segments, 0, "nothing uploaded twice");
    // Its checkpoints and catalog go on too: the restored directory is the catalog's volume.
    common::wait_for(30, "a checkpoint and the catalog uploaded", || {
        status(&e).checkpoint_uploads >= 2
    })
    .await;
    assert_eq!(status(&e).checkpoint_failures, 0);
    assert_eq!(
        record(dir.path()).incarnation.as_deref(),
        Some(&*cp.incarnation)
    );
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_directory_that_holds_anything_unless_forced() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish(&e, "t", "m", 0..12).await;
    wait_checkpointed(&e, &server, dir.path(), 12, &[("c", 0)]).await;
    e.shutdown().await;
    drop(e);

    // The broker's own directory, intact: refused, and nothing in it touched.
    let before = common::segment_files(dir.path());
    let err = restore_from_bucket(options(&server, dir.path(), false), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, RestoreError::Storage(StorageError::Incompatible(_))),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("is not empty") && msg.contains("--force"),
        "{msg}"
    );
    assert_eq!(common::segment_files(dir.path()), before);
    // A stray file is refused the same way; --force empties the directory and restores.
    let stray = tempfile::tempdir().unwrap();
    std::fs::write(stray.path().join("notes.txt"), "keep?").unwrap();
    assert!(
        restore_from_bucket(options(&server, stray.path(), false), &mut |_| {})
            .await
            .is_err()
    );
    assert!(stray.path().join("notes.txt").exists());
    let report = restore(&server, dir.path(), true).await;
    assert!(topic(&report, "t").restored);
    // A node that never uploaded anything: a clear refusal naming the node.
    let other = tempfile::tempdir().unwrap();
    let mut opts = options(&server, other.path(), false);
    opts.node_id = 9;
    let err = restore_from_bucket(opts, &mut |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("no catalog for node 9"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_object_is_reported_and_never_used() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish(&e, "t", "m", 0..40).await;
    let cp = wait_checkpointed(&e, &server, dir.path(), 40, &[("c", 0)]).await;
    e.shutdown().await;
    drop(e);
    let sealed = sealed_bases(dir.path());
    assert!(sealed.len() >= 5, "{sealed:?}");
    // One byte of the third segment's object flipped in the server's directory.
    let victim = &cp.segments[2];
    let good_through = last_position(dir.path(), cp.segments[1].base);
    let file = server.object_file(&format!("{PREFIX}/{}", victim.objects[0].key));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    std::fs::remove_dir_all(dir.path()).unwrap();
    let report = restore(&server, dir.path(), false).await;
    assert!(report.damaged(), "damage makes the restore's status say so");
    let t = topic(&report, "t");
    assert_eq!(report.damaged_objects, 1);
    assert_eq!(t.damaged[0].key, victim.objects[0].key);
    assert!(
        t.damaged[0].detail.contains("CRC-32C"),
        "{}",
        t.damaged[0].detail
    );
    let after: Vec<u64> = cp.segments[3..].iter().map(|s| s.base).collect();
    assert_eq!(t.not_restored_after_damage, after);
    assert_eq!(t.segments_restored, 2);
    assert_eq!(t.lost_messages, Some(40 - good_through));
    assert!(!t.continues_incarnation);
    // The damaged bytes are nowhere in the directory: the segment's name is the new, empty
    // active segment (its base follows the last restored record), without an index.
    let [log, idx] = segment_paths(dir.path(), victim.base);
    assert_eq!(std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0), 0);
    assert!(!idx.exists());
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    let marker = body("new", 0);
    publish(&e, "t", "new", 0..1).await;
    let want: Vec<Vec<u8>> = (0..good_through as u32).map(|i| body("m", i)).collect();
    expect_exactly(&e, "c", &want, &marker).await;
    // A new incarnation: the next uploads never replace the objects the restore read.
    common::wait_for(
        60,
        "the restored segments uploaded under a new incarnation",
        || status(&e).backlog_segments == 0 && status(&e).uploaded_segments >= 2,
    )
    .await;
    let now = record(dir.path()).incarnation.unwrap();
    assert_ne!(now, cp.incarnation);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_is_restored_without_the_objects_of_its_previous_life() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish(&e, "t", "old", 0..30).await;
    let old = wait_checkpointed(&e, &server, dir.path(), 30, &[("c", 0)]).await;
    e.delete_topic("t").await.unwrap();
    e.create_channel("t", "c").unwrap();
    publish(&e, "t", "new", 0..12).await;
    let new = wait_checkpointed(&e, &server, dir.path(), 12, &[("c", 0)]).await;
    assert_ne!(new.incarnation, old.incarnation);
    let new_through = last_position(dir.path(), *sealed_bases(dir.path()).last().unwrap());
    // The deleted life's objects go once a catalog without it is up (docs/tiering.md, "GC,
    // eviction and deletion").
    let bucket = bucket(&server);
    let old_prefix = format!("nodes/1/topics/74/{}", old.incarnation);
    common::wait_until(60, "the deleted life's objects deleted", async || {
        bucket.list(Some(&old_prefix)).await.unwrap().is_empty()
    })
    .await;
    e.shutdown().await;
    drop(e);
    // A life deleted before deletions reached the bucket (no intent) left its objects.
    let stray = "0000000000000001-00000000";
    bucket
        .put_bytes(
            &ObjectKey::new(format!("nodes/1/topics/74/{stray}/checkpoint.json")).unwrap(),
            rustqueue_engine::Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();

    std::fs::remove_dir_all(dir.path()).unwrap();
    let report = restore(&server, dir.path(), false).await;
    assert!(!report.damaged(), "{report:#?}");
    let t = topic(&report, "t");
    assert_eq!(t.incarnation, new.incarnation);
    assert_eq!(t.lost_messages, Some(12 - new_through));
    assert!(
        report
            .ignored
            .iter()
            .any(|i| i.topic == "t" && i.incarnation == stray && i.objects > 0),
        "{:?}",
        report.ignored
    );
    assert!(
        report
            .ignored
            .iter()
            .all(|i| i.incarnation != old.incarnation),
        "{:?}",
        report.ignored
    );
    let e = Engine::open(tiered(dir.path(), &server)).await.unwrap();
    let marker = body("mark", 0);
    publish(&e, "t", "mark", 0..1).await;
    let want: Vec<Vec<u8>> = (0..new_through as u32).map(|i| body("new", i)).collect();
    expect_exactly(&e, "c", &want, &marker).await;
    e.shutdown().await;
}
