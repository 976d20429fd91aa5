//! A data directory that lost `COMPATIBILITY` (docs/storage-format.md, "Damage to FORMAT,
//! COMPATIBILITY and broker.meta"), on a real directory: beside data the start refuses, naming
//! the repair, instead of recreating the fence at level 1; `storage repair
//! --rebuild-compatibility` writes the lowest level the stored records need, or checks the
//! level it is given against them.

use std::path::Path;
use std::sync::Arc;

use rustqueue_storage::offline::{self, FileStatus};
use rustqueue_storage::{
    AppendBatch, Compatibility, Manifest, RealFs, Store, StoreOptions, read_compatibility,
};

fn opts(level: u8) -> StoreOptions {
    StoreOptions {
        node_id: 3,
        feature_level: level,
        max_segment_bytes: 256 << 20,
        page_cache: Default::default(),
    }
}

/// A directory opened at `level` holding one topic with one record per batch of `batches`.
fn directory_with(root: &Path, level: u8, batches: &[Vec<Vec<u8>>]) {
    let (store, _) = Store::open(Arc::new(RealFs), root, opts(level)).unwrap();
    let mut log = store.create_topic(&Manifest::new("t")).unwrap();
    for bodies in batches {
        let first_id = store.allocate_ids(bodies.len() as u64).unwrap();
        let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        log.append(&AppendBatch {
            first_id,
            bodies: &bodies,
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .unwrap();
    }
    log.sync().unwrap();
    drop((store, log));
    std::fs::remove_file(root.join("COMPATIBILITY")).unwrap();
}

fn small() -> Vec<Vec<u8>> {
    vec![b"a small message".to_vec(); 3]
}

fn level_of(root: &Path) -> (u8, u8) {
    let c: Compatibility = read_compatibility(&RealFs, root).unwrap().unwrap();
    (
        c.active_writer_feature_level,
        c.minimum_reader_feature_level,
    )
}

#[test]
fn a_missing_compatibility_file_beside_data_refuses_the_start_and_names_the_repair() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    directory_with(root, 1, &[small()]);
    let Err(e) = Store::open(Arc::new(RealFs), root, opts(1)) else {
        panic!("the start recreated COMPATIBILITY beside data");
    };
    let e = e.to_string();
    assert!(
        e.contains("COMPATIBILITY is missing while the directory holds data")
            && e.contains("rustqueued storage repair --rebuild-compatibility --feature-level <L>"),
        "{e}"
    );
    assert!(!root.join("COMPATIBILITY").exists(), "nothing was written");
    let report = offline::verify(&RealFs, root).unwrap();
    let line = report
        .files
        .iter()
        .find(|f| f.kind == "compatibility")
        .expect("verify reports the missing file");
    assert_eq!(line.status, FileStatus::Damaged, "{line:?}");
    assert_eq!(report.damaged_files, 1);
    // repair alone refuses the same way: the level is never guessed silently.
    let e = offline::repair(Arc::new(RealFs), root)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--rebuild-compatibility"), "{e}");
}

#[test]
fn an_empty_directory_still_gets_a_new_compatibility_file_at_level_one() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(Arc::new(RealFs), dir.path(), opts(1)).unwrap());
    assert_eq!(level_of(dir.path()), (1, 1));
}

#[test]
fn repair_derives_level_one_when_every_record_fits_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    directory_with(root, 1, &[small(), small()]);
    let done = offline::rebuild_compatibility(Arc::new(RealFs), root, None).unwrap();
    assert!(done.contains("feature level 1"), "{done}");
    assert_eq!(level_of(root), (1, 1));
    // The directory opens again and its messages are there.
    let (_store, topics) = Store::open(Arc::new(RealFs), root, opts(1)).unwrap();
    assert_eq!(topics[0].log.next_position(), 7);
}

#[test]
fn repair_derives_level_two_from_a_message_above_level_ones_cap_and_refuses_a_lower_level() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let large = vec![vec![
        7u8;
        (offline::LEVEL_ONE_MAX_MESSAGE_BYTES + 1) as usize
    ]];
    directory_with(root, 2, &[small(), large]);
    let e = offline::rebuild_compatibility(Arc::new(RealFs), root, Some(1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("feature level 1 is below what the stored records need (2")
            && e.contains("holds a message of 20971521 bytes"),
        "{e}"
    );
    assert!(!root.join("COMPATIBILITY").exists(), "nothing was written");
    let done = offline::rebuild_compatibility(Arc::new(RealFs), root, None).unwrap();
    assert!(done.contains("feature level 2"), "{done}");
    assert_eq!(level_of(root), (2, 2));
    // A level-1 start is refused now: the fence is back.
    let e = Store::open(Arc::new(RealFs), root, opts(1))
        .err()
        .expect("a level-1 start on level-2 data")
        .to_string();
    assert!(e.contains("levels cannot be lowered"), "{e}");
    drop(Store::open(Arc::new(RealFs), root, opts(2)).unwrap());
}

#[test]
fn repair_derives_level_two_from_a_batch_record_above_level_ones_record_bound() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Four bodies, each within level 1's message cap; together one record above 72 MiB.
    let body = (offline::LEVEL_ONE_MAX_RECORD_PAYLOAD / 4) as usize;
    directory_with(root, 2, &[small(), vec![vec![1u8; body]; 4]]);
    let (level, why) = offline::lowest_safe_level(&RealFs, root).unwrap();
    assert_eq!(level, 2, "{why:?}");
    assert!(why.unwrap().contains("holds a record of"));
    let done = offline::rebuild_compatibility(Arc::new(RealFs), root, Some(2)).unwrap();
    assert!(done.contains("feature level 2"), "{done}");
    assert_eq!(level_of(root), (2, 2));
}
