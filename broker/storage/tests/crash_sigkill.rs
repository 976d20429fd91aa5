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

use rustqueue_storage::meta::Manifest;
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, RealFs, RecoveredTopic, Store, StoreOptions,
};

fn opts() -> StoreOptions {
    StoreOptions {
        node_id: 41,
        feature_level: 1,
        max_segment_bytes: 256,
    }
}

fn reopen(dir: &Path) -> (Store, RecoveredTopic) {
    let (s, mut t) = Store::open(Arc::new(RealFs), dir, opts()).expect("reopen after SIGKILL");
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
