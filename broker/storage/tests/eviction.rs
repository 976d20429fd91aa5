//! Storage pieces of protective eviction: the oldest sealed segment, deleting exactly it,
//! recovery of a log whose prefix was evicted, the channel `Evict` record through the WAL,
//! and the audit record's name and round trip.

use std::path::Path;
use std::sync::Arc;

use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, ChannelWal, EvictionAudit, Store, StoreOptions,
    testing::list_audits,
};
use rustqueue_storage::{Manifest, testing::hex};

fn opts() -> StoreOptions {
    StoreOptions {
        node_id: 3,
        feature_level: 1,
        max_segment_bytes: 200,
        page_cache: Default::default(),
    }
}

fn manifest() -> Manifest {
    Manifest {
        unrouted_from_position: None,
        ..Manifest::new("t")
    }
}

#[test]
fn the_oldest_sealed_segment_is_evicted_alone_and_recovery_starts_after_it() {
    let fs = SimFs::new();
    let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    assert_eq!(
        log.oldest_sealed(),
        None,
        "the active segment is never offered"
    );
    for i in 0..6u8 {
        let id = store.allocate_ids(1).unwrap();
        let body = [i; 40];
        log.append(&AppendBatch {
            first_id: id,
            bodies: &[&body[..]],
            timestamp_ns: i64::from(i) + 1,
            available_at_ms: 0,
        })
        .unwrap();
    }
    log.sync().unwrap();
    assert_eq!(log.oldest_timestamp(), Some(1));
    let oldest = log.oldest_sealed().expect("200-byte segments rotated");
    assert_eq!(oldest.first_position, 1);
    assert!(oldest.messages >= 1 && oldest.through_position == oldest.messages);
    assert!(oldest.file_name().starts_with("segment-") && oldest.file_name().ends_with(".rqlog"));
    assert_eq!(
        log.evict_oldest(oldest.base + 1).unwrap(),
        0,
        "only the oldest segment can be evicted"
    );
    let gone = log.evict_oldest(oldest.base).unwrap();
    assert_eq!(gone, oldest.messages);
    assert!(!fs.paths().contains(&oldest.path));
    assert_eq!(log.first_position(), oldest.through_position + 1);
    assert_eq!(log.entry(1), None);
    drop((log, store));

    let (_store, topics) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    let log = &topics[0].log;
    assert_eq!(log.first_position(), oldest.through_position + 1);
    assert_eq!(log.next_position(), 7);
    assert!(!fs.paths().contains(&oldest.path));
}

#[test]
fn an_evict_record_survives_the_wal_and_moves_the_channel_past_the_gap() {
    let fs = SimFs::new();
    let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    store.create_topic(&manifest()).unwrap();
    let mut wal = store
        .create_channel("t", &ChannelState::new("c", 1))
        .unwrap();
    wal.append(&[
        ChannelCommand::Finish { position: 9, id: 0 },
        ChannelCommand::Evict { through: 6 },
    ])
    .unwrap();
    wal.sync().unwrap();
    drop((wal, store));
    let (_w, state) = ChannelWal::open(
        Arc::new(fs.clone()),
        &Path::new("/d/topics").join(hex("t")).join("channels"),
        "c",
        rustqueue_storage::Fault::default(),
        &rustqueue_storage::DamageSink::detached(Arc::new(fs.clone()), "t"),
    )
    .unwrap();
    assert_eq!(state.ack_floor, 6);
    assert!(state.is_done(9) && !state.is_done(7));
}

#[test]
fn audit_records_are_named_by_time_topic_and_position_and_read_back_in_order() {
    let fs = SimFs::new();
    let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    let a = |created_at_ms, first, through| EvictionAudit {
        topic: "t".into(),
        first_position: first,
        through_position: through,
        messages: through - first + 1,
        segment: "segment-00000000000000000001.rqlog".into(),
        created_at_ms,
    };
    let p = store.write_eviction_audit(&a(1_700, 1, 4)).unwrap();
    assert_eq!(
        p,
        Path::new("/d/audit/eviction-00000000000000001700-74-00000000000000000004.json")
    );
    store.write_eviction_audit(&a(1_800, 5, 9)).unwrap();
    assert_eq!(
        list_audits(&fs, Path::new("/d")).unwrap(),
        vec![a(1_700, 1, 4), a(1_800, 5, 9)]
    );
    // Written atomically: no temp file is left and the record survives a crash.
    fs.crash(&mut |_| 0);
    assert_eq!(list_audits(&fs, Path::new("/d")).unwrap().len(), 2);
    assert!(
        !fs.paths()
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".tmp"))
    );
}
