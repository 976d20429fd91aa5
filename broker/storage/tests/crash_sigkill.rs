//! Real SIGKILL at each persistence boundary (feature `crash-injection`).
//!
//! The fixture is built in-process; the crash worker binary repeats one step until its
//! failpoint fires, writes a marker and parks; we SIGKILL it, reopen the directory and check
//! what must (and may) have survived.
#![cfg(all(unix, feature = "crash-injection"))]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustqueue_storage::Manifest;
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, RealFs, RecoveredTopic, Store, StoreOptions,
};

fn opts() -> StoreOptions {
    opts_at(1)
}

fn opts_at(feature_level: u8) -> StoreOptions {
    StoreOptions {
        node_id: 41,
        feature_level,
        max_segment_bytes: 256,
        page_cache: Default::default(),
    }
}

fn reopen(dir: &Path) -> (Store, RecoveredTopic) {
    reopen_at(dir, 1)
}

fn reopen_at(dir: &Path, level: u8) -> (Store, RecoveredTopic) {
    let (s, mut t) =
        Store::open(Arc::new(RealFs), dir, opts_at(level)).expect("reopen after SIGKILL");
    (s, t.pop().expect("topic survives"))
}

/// Topic `t` with channel `c` and `n` acknowledged 1 KiB messages ("m0", "m1", ...).
fn fixture(dir: &Path, n: usize, finished: &[u64]) {
    let (store, _) = Store::open(Arc::new(RealFs), dir, opts()).unwrap();
    let m = Manifest {
        unrouted_from_position: None,
        ..Manifest::new("t")
    };
    let mut log = store.create_topic(&m).unwrap();
    let mut wal = store
        .create_channel("t", &ChannelState::new("c", 1))
        .unwrap();
    for i in 0..n {
        let mut body = format!("m{i}").into_bytes();
        body.resize(1024, b'.');
        let id = store.allocate_ids(1).unwrap();
        log.append(&AppendBatch {
            first_id: id,
            bodies: &[body],
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .unwrap();
        log.sync().unwrap();
    }
    let cmds: Vec<ChannelCommand> = finished
        .iter()
        .map(|&p| ChannelCommand::Finish {
            position: p,
            id: log.entry(p).unwrap().id,
        })
        .collect();
    if !cmds.is_empty() {
        wal.append(&cmds).unwrap();
        wal.sync().unwrap();
    }
}

fn crash_at(dir: &Path, scenario: &str, failpoint: &str) {
    let marker = dir.join("failpoint.marker");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rustqueue-crash-worker"))
        .args([scenario, dir.to_str().unwrap()])
        .env("RUSTQUEUE_CRASH_FAILPOINT", failpoint)
        .env("RUSTQUEUE_CRASH_MARKER", &marker)
        .spawn()
        .expect("spawn crash worker");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("worker exited ({status}) before failpoint {failpoint}");
        }
        assert!(
            Instant::now() < deadline,
            "failpoint {failpoint} not reached in 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    std::fs::remove_file(&marker).unwrap();
}

fn bodies(t: &RecoveredTopic) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = t.log.first_position();
    while p < t.log.next_position() {
        if let Some(e) = t.log.entry(p) {
            let b = t.log.read_body(&e).unwrap();
            out.push(
                String::from_utf8_lossy(&b)
                    .trim_end_matches('.')
                    .to_string(),
            );
        }
        p += 1;
    }
    out
}

#[test]
fn publish_killed_before_fsync_keeps_every_acknowledged_message() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 1, &[]);
    crash_at(dir.path(), "publish", "publish_after_append_before_fsync");
    let (_, t) = reopen(dir.path());
    let b = bodies(&t);
    assert_eq!(b[0], "m0", "acknowledged message present");
    assert!(b.len() <= 2);
}

#[test]
fn publish_killed_after_fsync_before_reply_keeps_the_ambiguous_message() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 1, &[]);
    crash_at(dir.path(), "publish", "publish_after_fsync_before_reply");
    let (_, t) = reopen(dir.path());
    assert_eq!(bodies(&t), vec!["m0".to_string(), "ambiguous".to_string()]);
}

#[test]
fn fin_killed_before_wal_fsync_redelivers_at_most_that_message() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 2, &[]);
    crash_at(
        dir.path(),
        "finish",
        "channel_group_after_append_before_fsync",
    );
    let (_, mut t) = reopen(dir.path());
    let c = t.channels.pop().unwrap();
    assert!(!c.state.is_done(2), "only position 1 was being finished");
}

#[test]
fn fin_killed_after_wal_fsync_is_never_redelivered() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 2, &[]);
    crash_at(
        dir.path(),
        "finish",
        "channel_group_after_fsync_before_reply",
    );
    let (_, mut t) = reopen(dir.path());
    let c = t.channels.pop().unwrap();
    assert!(c.state.is_done(1) && !c.state.is_done(2));
}

#[test]
fn checkpoint_killed_before_rename_keeps_earlier_fins_through_wal_replay() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 3, &[1, 2]);
    crash_at(
        dir.path(),
        "checkpoint",
        "checkpoint_after_file_fsync_before_rename",
    );
    let (_, mut t) = reopen(dir.path());
    let c = t.channels.pop().unwrap();
    assert_eq!(c.state.ack_floor, 2);
    assert!(!c.state.is_done(3));
}

#[test]
fn gc_killed_around_segment_delete_keeps_survivors_and_never_reuses_ids_or_positions() {
    for fp in [
        "gc_before_segment_delete",
        "gc_after_segment_delete_before_dir_fsync",
    ] {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), 4, &[1, 2]);
        let (_, before) = reopen(dir.path());
        let survivor = before.log.entry(3).unwrap().id;
        let max_id = before.log.entry(4).unwrap().id;
        drop(before);
        crash_at(dir.path(), "gc", fp);
        let (store, mut t) = reopen(dir.path());
        assert_eq!(
            t.log.entry(3).map(|e| e.id),
            Some(survivor),
            "{fp}: survivor keeps its id"
        );
        assert_eq!(bodies(&t).last().map(String::as_str), Some("m3"));
        let id = store.allocate_ids(1).unwrap();
        assert!(id > max_id, "{fp}: fresh id");
        let p = t
            .log
            .append(&AppendBatch {
                first_id: id,
                bodies: &[b"new".to_vec()],
                timestamp_ns: 1,
                available_at_ms: 0,
            })
            .unwrap();
        assert_eq!(p, 5, "{fp}: next position");
    }
}

#[test]
fn checkpoint_killed_after_rename_before_wal_truncate_replays_the_old_wal_harmlessly() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 4, &[1, 2]);
    {
        // More history in the WAL: a REQ then FIN of 3, a REQ of 4 and a timeout, so the
        // replay over the new checkpoint must not count anything twice.
        let (_, mut t) = reopen(dir.path());
        let mut c = t.channels.pop().unwrap();
        let (id3, id4) = (t.log.entry(3).unwrap().id, t.log.entry(4).unwrap().id);
        c.wal
            .append(&[
                ChannelCommand::Requeue {
                    position: 3,
                    id: id3,
                    available_at_ms: 0,
                    attempts: 1,
                    requeue_count: 1,
                },
                ChannelCommand::Finish {
                    position: 3,
                    id: id3,
                },
                ChannelCommand::Requeue {
                    position: 4,
                    id: id4,
                    available_at_ms: 5,
                    attempts: 2,
                    requeue_count: 2,
                },
                ChannelCommand::Timeout { timeout_count: 1 },
            ])
            .unwrap();
        c.wal.sync().unwrap();
    }
    let (wal, ckpt) = rustqueue_storage::testing::wal_paths(
        &dir.path()
            .join("topics")
            .join(rustqueue_storage::testing::hex("t"))
            .join("channels"),
        "c",
    );
    let wal_before = std::fs::read(&wal).unwrap();
    let ckpt_before = std::fs::read(&ckpt).unwrap();
    crash_at(
        dir.path(),
        "checkpoint",
        "checkpoint_after_rename_before_wal_truncate",
    );
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        wal_before,
        "killed before the WAL truncate"
    );
    assert_ne!(
        std::fs::read(&ckpt).unwrap(),
        ckpt_before,
        "the new checkpoint was renamed into place"
    );
    let (_, mut t) = reopen(dir.path());
    let mut c = t.channels.pop().unwrap();
    let st = &c.state;
    assert_eq!(st.ack_floor, 3, "checkpoint plus replayed FINs");
    assert!(st.acked.is_empty());
    assert_eq!(st.requeued.get(&4), Some(&(5, 2)), "the REQ of 4 stays");
    assert_eq!(st.requeued.len(), 1, "the finished 3 is not requeued again");
    assert_eq!(
        (st.requeue_count, st.timeout_count),
        (2, 1),
        "counters are not counted twice"
    );
    // The channel keeps working: a new FIN and checkpoint, then a clean reopen.
    let id = t.log.entry(4).unwrap().id;
    c.wal
        .append(&[ChannelCommand::Finish { position: 4, id }])
        .unwrap();
    c.wal.sync().unwrap();
    let mut st = c.state.clone();
    st.apply(&ChannelCommand::Finish { position: 4, id });
    c.wal.checkpoint(&st).unwrap();
    drop((c, t));
    let (_, mut t) = reopen(dir.path());
    let c = t.channels.pop().unwrap();
    assert_eq!((c.state.ack_floor, c.state.requeue_count), (4, 2));
}

#[test]
fn metadata_killed_before_rename_keeps_the_old_file_and_never_reuses_ids() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 2, &[1]);
    let before = {
        let (s, t) = reopen(dir.path());
        (s.revision(), t.log.entry(2).unwrap().id)
    };
    let meta = dir.path().join("broker.meta");
    let meta_before = std::fs::read(&meta).unwrap();
    // The worker's first atomic metadata write: its broker.meta update at open.
    crash_at(dir.path(), "publish", "meta_after_file_fsync_before_rename");
    assert_eq!(
        std::fs::read(&meta).unwrap(),
        meta_before,
        "the old metadata stays in place"
    );
    assert!(
        dir.path().join("broker.meta.tmp").exists(),
        "killed with the fsynced temp file not yet renamed"
    );
    let (store, mut t) = reopen(dir.path());
    assert!(
        store.revision() > before.0,
        "the revision still moves forward"
    );
    assert_eq!(bodies(&t), vec!["m0".to_string(), "m1".to_string()]);
    let c = t.channels.pop().unwrap();
    assert!(c.state.is_done(1) && !c.state.is_done(2));
    let id = store.allocate_ids(1).unwrap();
    assert!(id > before.1, "fresh id after the crash");
}

#[test]
fn channel_creation_killed_before_its_checkpoint_rename_leaves_no_half_channel() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 2, &[1]);
    crash_at(dir.path(), "create_channel", "channel_create_before_rename");
    let cdir = dir
        .path()
        .join("topics")
        .join(rustqueue_storage::testing::hex("t"))
        .join("channels");
    let (dwal, dckpt) = rustqueue_storage::testing::wal_paths(&cdir, "d");
    assert!(
        dwal.exists() && !dckpt.exists(),
        "killed with the WAL created and the checkpoint not yet renamed"
    );
    let (store, t) = reopen(dir.path());
    let names: Vec<&str> = t.channels.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["c"], "the half-created channel is dropped");
    assert!(t.channels[0].state.is_done(1) && !t.channels[0].state.is_done(2));
    assert!(!dwal.exists() && !dckpt.exists(), "its files are removed");
    let leftovers: Vec<_> = std::fs::read_dir(&cdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    drop(t);
    store
        .create_channel("t", &ChannelState::new("d", 1))
        .expect("the channel can be created again");
    drop(store);
    let (_, t) = reopen(dir.path());
    assert_eq!(t.channels.len(), 2);
}

#[test]
fn id_reservation_killed_before_rename_has_handed_out_no_id_of_the_new_block() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 2, &[]);
    let max_id = reopen(dir.path()).1.log.entry(2).unwrap().id;
    // The worker's first publish must reserve a new id block before it may use any id of it.
    crash_at(dir.path(), "publish", "ids_after_file_fsync_before_rename");
    let (store, t) = reopen(dir.path());
    assert_eq!(
        bodies(&t),
        vec!["m0".to_string(), "m1".to_string()],
        "nothing was appended with an id from an unreserved block"
    );
    let id = store.allocate_ids(1).unwrap();
    let in_log: Vec<u64> = (t.log.first_position()..t.log.next_position())
        .filter_map(|p| t.log.entry(p).map(|e| e.id))
        .collect();
    assert!(
        id > max_id && in_log.iter().all(|&i| i < id),
        "fresh id {id} after the crash; ids in the log {in_log:?}"
    );
}

#[test]
fn eviction_killed_before_or_after_its_record_leaves_the_segment_local_or_remote_never_lost() {
    for (fp, remote) in [
        ("tiered_after_file_fsync_before_rename", false),
        ("evict_before_segment_remove", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), 4, &[]);
        let (_, before) = reopen(dir.path());
        let e1 = before.log.entry(1).unwrap();
        drop(before);
        crash_at(dir.path(), "evict", fp);
        // The worker's open raised the fence before it evicted: a release reading up to
        // level 2 is refused whichever side of the record the kill fell.
        let older = Store::open_with_ceiling(Arc::new(RealFs), dir.path(), opts_at(2), 2)
            .err()
            .map(|e| e.to_string());
        assert!(
            older
                .as_deref()
                .is_some_and(|e| e.contains("rollback fence")),
            "{fp}: {older:?}"
        );
        let (store, t) = reopen_at(dir.path(), 3);
        let segments = dir.path().join("topics").join("74").join("segments");
        let log = segments.join(format!("segment-{:020}.rqlog", e1.segment));
        let idx = segments.join(format!("segment-{:020}.rqidx", e1.segment));
        assert_eq!(t.log.entry(1), Some(e1), "{fp}: its entry stays");
        assert!(idx.exists(), "{fp}: its index stays");
        assert_eq!(!log.exists(), remote, "{fp}: the local copy");
        assert_eq!(
            matches!(
                t.log.body_location(&e1),
                Some(rustqueue_storage::BodyLocation::Remote(..))
            ),
            remote,
            "{fp}"
        );
        if !remote {
            assert_eq!(bodies(&t).first().map(String::as_str), Some("m0"));
        }
        assert!(
            store.quarantine().records().is_empty(),
            "{fp}: an eviction is not damage"
        );
    }
}

#[test]
fn topic_deletion_killed_anywhere_after_its_intent_keeps_the_intent_to_delete_its_objects() {
    for (fp, topic_gone) in [
        ("delete_topic_after_tiered_intent", false),
        ("delete_topic_before_directory_removal", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), 2, &[]);
        crash_at(dir.path(), "delete_topic", fp);
        let (store, topics) = Store::open(Arc::new(RealFs), dir.path(), opts()).unwrap();
        assert_eq!(topics.is_empty(), topic_gone, "{fp}");
        let intents = store.deleted_incarnations().unwrap();
        assert_eq!(intents.len(), 1, "{fp}");
        let intent = intents[0].1.as_ref().unwrap();
        assert_eq!(
            (intent.topic.as_str(), intent.incarnation.as_str()),
            ("t", "i1"),
            "{fp}"
        );
    }
}

#[test]
fn a_kill_while_raising_the_fence_for_local_retention_leaves_nothing_evicted() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path(), 4, &[]);
    crash_at(
        dir.path(),
        "evict",
        "compatibility_raise_after_file_fsync_before_rename",
    );
    // Not raised yet, and nothing evicted: a release reading up to level 2 opens the directory
    // and reads every message from its local segments.
    let (store, mut t) = Store::open_with_ceiling(Arc::new(RealFs), dir.path(), opts_at(2), 2)
        .expect("an older release opens a directory nothing was evicted from");
    let t = t.pop().unwrap();
    assert!(!dir.path().join("topics").join("74").join("tiered").exists());
    assert_eq!(bodies(&t), ["m0", "m1", "m2", "m3"]);
    assert!(store.quarantine().records().is_empty());
}
