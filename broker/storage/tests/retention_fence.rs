//! Storage feature level 3, the rollback fence of local retention (docs/storage-format.md,
//! "COMPATIBILITY"; docs/tiering.md): a segment is recorded evicted only in a directory whose
//! minimum reader level is 3, so a release that reads levels up to 2 (tiered record format 2)
//! refuses the directory instead of dropping the evicted segments' messages; repair derives
//! level 3 from a record listing an evicted segment; a directory evicted by a build from
//! before the fence is refused below level 3 and fenced by a start at level 3.

use std::path::Path;
use std::sync::Arc;

use rustqueue_storage::offline;
use rustqueue_storage::{
    AppendBatch, Compatibility, LOCAL_RETENTION_LEVEL, Manifest, RealFs, RemoteSegment, Store,
    StoreOptions, TieredObject, TieredRecord, TieredSegment, read_compatibility,
};

fn opts(feature_level: u8) -> StoreOptions {
    StoreOptions {
        node_id: 5,
        feature_level,
        max_segment_bytes: 256,
        page_cache: Default::default(),
    }
}

fn level_of(root: &Path) -> (u8, u8) {
    let c: Compatibility = read_compatibility(&RealFs, root).unwrap().unwrap();
    (
        c.active_writer_feature_level,
        c.minimum_reader_feature_level,
    )
}

/// The tiered record of topic `t` listing its oldest sealed segment, `evicted` as given.
fn record_of_oldest(
    log: &rustqueue_storage::TopicLog,
    evicted: bool,
) -> (TieredRecord, RemoteSegment) {
    let f = log
        .sealed_files()
        .into_iter()
        .next()
        .expect("a sealed segment");
    let key = format!("k/{}", f.base);
    let mut record = TieredRecord::new("t", "b", None, "i1");
    record.insert(TieredSegment {
        base: f.base,
        objects: vec![TieredObject {
            key: key.clone(),
            size: f.log_len,
            crc32c: 0,
        }],
        evicted,
    });
    (
        record,
        RemoteSegment {
            key,
            size: f.log_len,
        },
    )
}

/// Topic `t` with eight 100-byte messages in 256-byte segments, opened at `level`.
fn directory_at(root: &Path, level: u8) -> (Store, rustqueue_storage::TopicLog) {
    let (store, _) = Store::open(Arc::new(RealFs), root, opts(level)).unwrap();
    let mut log = store.create_topic(&Manifest::new("t")).unwrap();
    for _ in 0..8 {
        let first_id = store.allocate_ids(1).unwrap();
        log.append(&AppendBatch {
            first_id,
            bodies: &[vec![b'x'; 100]],
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .unwrap();
    }
    log.sync().unwrap();
    (store, log)
}

#[test]
fn an_eviction_is_refused_until_the_directory_fences_out_level_two_readers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log) = directory_at(dir.path(), 2);
    let (uploaded, _) = record_of_oldest(&log, false);
    store
        .write_tiered(&uploaded)
        .expect("an upload needs no fence");
    let (evicted, _) = record_of_oldest(&log, true);
    let e = store.write_tiered(&evicted).unwrap_err().to_string();
    assert!(
        e.contains("needs storage feature level 3") && e.contains("set storage.feature_level = 3"),
        "{e}"
    );
    store
        .fault()
        .check()
        .expect("a refused eviction does not isolate storage");
    let on_disk = store.read_tiered("t").unwrap().unwrap();
    assert!(
        on_disk.segments.iter().all(|s| !s.evicted),
        "nothing recorded evicted"
    );
    drop((store, log));

    // At level 3 the open raises the fence (active writer too, one generation on), and the
    // eviction is recorded.
    let (store, _) = Store::open(Arc::new(RealFs), dir.path(), opts(3)).unwrap();
    assert_eq!(store.minimum_reader_level(), LOCAL_RETENTION_LEVEL);
    assert_eq!(level_of(dir.path()), (3, 3));
    store.write_tiered(&evicted).unwrap();
}

#[test]
fn a_release_reading_up_to_level_two_refuses_a_directory_local_retention_evicted_from() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut log) = directory_at(dir.path(), 3);
    let (record, remote) = record_of_oldest(&log, true);
    store.write_tiered(&record).unwrap();
    let base = record.segments[0].base;
    assert!(log.evict_local(base, remote).unwrap());
    drop((store, log));

    for configured in [1, 2] {
        let e = Store::open_with_ceiling(Arc::new(RealFs), dir.path(), opts(configured), 2)
            .err()
            .expect("an older release opened a fenced directory")
            .to_string();
        assert!(
            e.contains(
                "data needs reader level 3 but this binary reads at most 2 (rollback fence)"
            ),
            "{e}"
        );
    }
    assert_eq!(level_of(dir.path()), (3, 3), "the refusal wrote nothing");
    let (_, topics) = Store::open(Arc::new(RealFs), dir.path(), opts(3)).unwrap();
    assert_eq!(topics[0].log.next_position(), 9);
}

#[test]
fn a_directory_evicted_from_before_the_fence_is_refused_below_level_three_and_fenced_at_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut log) = directory_at(dir.path(), 3);
    let (record, remote) = record_of_oldest(&log, true);
    store.write_tiered(&record).unwrap();
    assert!(log.evict_local(record.segments[0].base, remote).unwrap());
    drop((store, log));
    // What a build from before the fence left: evicted segments at level 2.
    rustqueue_storage::testing::write_checked(
        &RealFs,
        &dir.path().join("COMPATIBILITY"),
        &Compatibility {
            data_format: 7,
            active_writer_feature_level: 2,
            minimum_reader_feature_level: 2,
            generation: 2,
        },
    )
    .unwrap();

    let e = Store::open(Arc::new(RealFs), dir.path(), opts(2))
        .err()
        .expect("opened evicted segments below level 3")
        .to_string();
    assert!(
        e.contains("lists segments local retention evicted")
            && e.contains("set storage.feature_level = 3"),
        "{e}"
    );
    let (store, topics) = Store::open(Arc::new(RealFs), dir.path(), opts(3)).unwrap();
    assert_eq!(store.minimum_reader_level(), 3);
    assert_eq!(topics[0].log.next_position(), 9);
}

#[test]
fn repair_derives_level_three_from_a_tiered_record_listing_an_evicted_segment() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (store, log) = directory_at(root, 3);
    let (uploaded, _) = record_of_oldest(&log, false);
    store.write_tiered(&uploaded).unwrap();
    drop((store, log));
    std::fs::remove_file(root.join("COMPATIBILITY")).unwrap();
    // Uploaded but never evicted: the records alone decide (level 1).
    assert_eq!(
        offline::lowest_safe_level(&RealFs, root).unwrap(),
        (1, None)
    );

    let (store, log) = {
        offline::rebuild_compatibility(Arc::new(RealFs), root, Some(3)).unwrap();
        directory_at_existing(root)
    };
    let (evicted, _) = record_of_oldest(&log, true);
    store.write_tiered(&evicted).unwrap();
    drop((store, log));
    std::fs::remove_file(root.join("COMPATIBILITY")).unwrap();

    let (level, why) = offline::lowest_safe_level(&RealFs, root).unwrap();
    assert_eq!(level, LOCAL_RETENTION_LEVEL);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("tiered lists segment") && w.contains("evicted")),
        "{why:?}"
    );
    let e = offline::rebuild_compatibility(Arc::new(RealFs), root, Some(2))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("feature level 2 is below what the stored records need (3"),
        "{e}"
    );
    assert!(!root.join("COMPATIBILITY").exists(), "nothing was written");
    let done = offline::rebuild_compatibility(Arc::new(RealFs), root, None).unwrap();
    assert!(done.contains("feature level 3"), "{done}");
    assert_eq!(level_of(root), (3, 3));
    let e = Store::open_with_ceiling(Arc::new(RealFs), root, opts(2), 2)
        .err()
        .expect("an older release opened a rebuilt fence")
        .to_string();
    assert!(e.contains("rollback fence"), "{e}");
}

fn directory_at_existing(root: &Path) -> (Store, rustqueue_storage::TopicLog) {
    let (store, mut topics) = Store::open(Arc::new(RealFs), root, opts(3)).unwrap();
    (store, topics.pop().unwrap().log)
}
