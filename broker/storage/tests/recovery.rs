//! Recovery rules of the store: torn tails, middle corruption, sealed indexes, GC, fences.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::{AppendBatch, Fs, RealFs, StorageError, Store, StoreOptions, TopicLog};
use rustqueue_storage::{DamageKind, Detector, Manifest, testing::hex};

fn opts(seg: u64) -> StoreOptions {
    StoreOptions {
        node_id: 3,
        feature_level: 1,
        max_segment_bytes: seg,
        page_cache: Default::default(),
    }
}

fn manifest() -> Manifest {
    Manifest::new("t")
}

fn seg_dir() -> PathBuf {
    Path::new("/d/topics").join(hex("t")).join("segments")
}

fn publish(store: &Store, log: &mut TopicLog, bodies: &[&[u8]]) -> u64 {
    let id = store.allocate_ids(bodies.len() as u64).unwrap();
    let p = log
        .append(&AppendBatch {
            first_id: id,
            bodies,
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .unwrap();
    log.sync().unwrap();
    p
}

fn open(fs: &SimFs, seg: u64) -> Result<(Store, Option<TopicLog>), StorageError> {
    let (s, mut t) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts(seg))?;
    Ok((s, t.pop().map(|t| t.log)))
}

/// A store on `fs` with 200-byte segments and topic `t` holding `n` one-message records,
/// the i-th body being `len` bytes of `i`: every record beyond the first few seals a segment.
fn small_segments(fs: &SimFs, n: u8, len: usize) -> (Store, TopicLog) {
    let (store, _) = open(fs, 200).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    for i in 0..n {
        publish(&store, &mut log, &[&vec![i; len]]);
    }
    (store, log)
}

#[test]
fn a_torn_tail_is_truncated_and_earlier_records_survive() {
    let fs = SimFs::new();
    let (store, _) = open(&fs, 1 << 20).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    publish(&store, &mut log, &[b"kept"]);
    let id = store.allocate_ids(1).unwrap();
    log.append(&AppendBatch {
        first_id: id,
        bodies: &[b"torn".as_slice()],
        timestamp_ns: 1,
        available_at_ms: 0,
    })
    .unwrap();
    drop((store, log));
    fs.crash(&mut |n| n - 3);
    let (_, log) = open(&fs, 1 << 20).unwrap();
    let log = log.unwrap();
    assert_eq!(log.next_position(), 2);
    let e = log.entry(1).unwrap();
    assert_eq!(log.read_body(&e).unwrap(), b"kept");
}

#[test]
fn a_corrupt_record_in_the_active_segment_is_quarantined_and_the_next_one_kept() {
    let fs = SimFs::new();
    let (store, _) = open(&fs, 1 << 20).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    publish(&store, &mut log, &[b"first"]);
    publish(&store, &mut log, &[b"second"]);
    drop((store, log));
    let seg = seg_dir().join(format!("segment-{:020}.rqlog", 1));
    fs.corrupt(&seg, 60, 0xEE);
    let (store, log) = open(&fs, 1 << 20).unwrap();
    let log = log.unwrap();
    assert!(
        log.entry(1).is_none(),
        "the damaged message is never served"
    );
    let e = log.entry(2).unwrap();
    assert_eq!(log.read_body(&e).unwrap(), b"second");
    let recs = store.quarantine().records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].kind, DamageKind::SegmentRecord);
    assert_eq!(recs[0].detected_by, Detector::Startup);
    assert_eq!((recs[0].positions.clone(), recs[0].messages), (vec![1], 1));
    assert_eq!(
        recs[0].file,
        "topics/74/segments/segment-00000000000000000001.rqlog"
    );
    assert_eq!(recs[0].offset_start, 0);
    assert_eq!(store.quarantine().messages_total(), 1);
    drop((store, log));
    // A restart finds the same damage and does not count it again.
    let (store, _log) = open(&fs, 1 << 20).unwrap();
    assert_eq!(store.quarantine().messages_total(), 0);
    assert_eq!(store.quarantine().records().len(), 1);
}

#[test]
fn sealed_segments_reopen_from_their_index_and_a_stale_index_is_ignored() {
    let fs = SimFs::new();
    let (store, log) = small_segments(&fs, 20, 50);
    assert!(log.segment_count() > 5);
    drop((store, log));
    let (store, log) = open(&fs, 200).unwrap();
    let log = log.unwrap();
    for p in 1..=20u64 {
        let e = log.entry(p).unwrap();
        assert_eq!(log.read_body(&e).unwrap(), vec![(p - 1) as u8; 50]);
    }
    drop((store, log));
    // A corrupt index is not trusted: the segment is scanned instead.
    let idx = seg_dir().join(format!("segment-{:020}.rqidx", 1));
    fs.corrupt(&idx, 70, 0x55);
    let (_, log) = open(&fs, 200).unwrap();
    assert_eq!(log.unwrap().entry(1).unwrap().position, 1);
}

#[test]
fn gc_deletes_only_whole_sealed_segments_below_the_floor_and_positions_are_never_reused() {
    let fs = SimFs::new();
    let (store, mut log) = small_segments(&fs, 10, 60);
    let before = log.segment_count();
    let removed = log.gc(5).unwrap();
    assert!(removed > 0 && log.segment_count() == before - removed);
    assert!(log.first_position() <= 5);
    assert!(log.entry(log.first_position()).is_some());
    let mut m = manifest();
    m.next_position = log.next_position();
    store.write_manifest(&m).unwrap();
    log.seal_active().unwrap();
    log.gc(u64::MAX).unwrap();
    assert_eq!(log.segment_count(), 1);
    drop((store, log));
    let (store, log) = open(&fs, 200).unwrap();
    let mut log = log.unwrap();
    assert_eq!(publish(&store, &mut log, &[b"new"]), 11);
}

#[test]
fn format_node_and_feature_level_fences_refuse_to_open() {
    let fs = SimFs::new();
    drop(open(&fs, 1 << 20).unwrap());
    let arc: Arc<dyn Fs> = Arc::new(fs.clone());
    let wrong_node = Store::open(
        arc.clone(),
        Path::new("/d"),
        StoreOptions {
            node_id: 4,
            ..opts(1 << 20)
        },
    );
    assert!(wrong_node.err().unwrap().to_string().contains("node 3"));
    drop(
        Store::open(
            arc.clone(),
            Path::new("/d"),
            StoreOptions {
                feature_level: 2,
                ..opts(1 << 20)
            },
        )
        .unwrap(),
    );
    let lower = Store::open(arc.clone(), Path::new("/d"), opts(1 << 20));
    assert!(
        lower
            .err()
            .unwrap()
            .to_string()
            .contains("cannot be lowered")
    );
    let legacy = SimFs::new();
    legacy.create_dir_all(Path::new("/d/topics")).unwrap();
    let err = Store::open(Arc::new(legacy), Path::new("/d"), opts(1 << 20))
        .err()
        .unwrap();
    assert!(err.to_string().contains("no FORMAT file"));
}

#[test]
fn a_second_store_on_a_real_directory_is_refused_by_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Store::open(Arc::new(RealFs), dir.path(), opts(1 << 20)).unwrap();
    let err = Store::open(Arc::new(RealFs), dir.path(), opts(1 << 20))
        .err()
        .unwrap();
    assert!(matches!(err, StorageError::Locked(_)), "{err}");
    drop(a);
    Store::open(Arc::new(RealFs), dir.path(), opts(1 << 20)).unwrap();
}

#[test]
fn ids_resume_above_the_persisted_reservation_after_a_crash() {
    let fs = SimFs::new();
    let (store, _) = open(&fs, 1 << 20).unwrap();
    let first = store.allocate_ids(10).unwrap();
    drop(store);
    fs.crash(&mut |_| 0);
    let (store, _) = open(&fs, 1 << 20).unwrap();
    let next = store.allocate_ids(1).unwrap();
    assert!(
        next >= first + (1 << 20),
        "a new block after restart: {next:x} vs {first:x}"
    );
    assert_eq!(next >> 48, 3, "node id in the high bits");
}

#[test]
fn a_full_size_mpub_of_65536_messages_round_trips_as_one_record() {
    let fs = SimFs::new();
    let (store, _) = open(&fs, 64 << 20).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    let bodies: Vec<Vec<u8>> = (0..65_536u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let id = store.allocate_ids(65_536).unwrap();
    log.append(&AppendBatch {
        first_id: id,
        bodies: &bodies,
        timestamp_ns: 1,
        available_at_ms: 0,
    })
    .unwrap();
    log.sync().unwrap();
    let too_many: Vec<Vec<u8>> = vec![vec![1]; 65_537];
    assert!(matches!(
        log.append(&AppendBatch {
            first_id: 0,
            bodies: &too_many,
            timestamp_ns: 1,
            available_at_ms: 0
        }),
        Err(StorageError::BatchTooLarge(_))
    ));
    drop((store, log));
    let (_, log) = open(&fs, 64 << 20).unwrap();
    let log = log.unwrap();
    assert_eq!(log.next_position(), 65_537);
    let e = log.entry(40_000).unwrap();
    assert_eq!(
        (e.id, log.read_body(&e).unwrap()),
        (id + 39_999, 39_999u32.to_be_bytes().to_vec())
    );
}

#[test]
fn a_100_mib_message_round_trips_through_a_real_segment() {
    let dir = tempfile::tempdir().unwrap();
    let o = StoreOptions {
        node_id: 3,
        feature_level: 2,
        max_segment_bytes: 256 << 20,
        page_cache: Default::default(),
    };
    let (store, _) = Store::open(Arc::new(RealFs), dir.path(), o.clone()).unwrap();
    let mut log = store.create_topic(&manifest()).unwrap();
    let body: Vec<u8> = (0..100u32 << 20).map(|i| (i % 251) as u8).collect();
    let id = store.allocate_ids(1).unwrap();
    log.append(&AppendBatch {
        first_id: id,
        bodies: std::slice::from_ref(&body),
        timestamp_ns: 1,
        available_at_ms: 0,
    })
    .unwrap();
    log.sync().unwrap();
    drop((store, log));
    let (_, mut t) = Store::open(Arc::new(RealFs), dir.path(), o).unwrap();
    let log = t.pop().unwrap().log;
    let e = log.entry(1).unwrap();
    assert_eq!(e.body_len as usize, body.len());
    assert!(log.read_body(&e).unwrap() == body);
}

#[test]
fn scrub_passes_intact_sealed_segments_and_quarantines_a_flipped_byte() {
    let fs = SimFs::new();
    let (store, log) = small_segments(&fs, 6, 60);
    let sealed = log.sealed_segments();
    let sink = log.damage_sink().clone();
    assert!(sealed.len() >= 2);
    let mut paced = 0;
    for s in &sealed {
        let r = rustqueue_storage::verify_segment(s, &sink, &mut |n| paced += n).unwrap();
        assert_eq!((r.records, r.findings), (1, 0));
    }
    assert!(paced > 0);
    fs.corrupt(&sealed[1].path, 100, 0xAB);
    let r = rustqueue_storage::verify_segment(&sealed[1], &sink, &mut |_| {}).unwrap();
    assert_eq!((r.records, r.findings), (0, 1));
    let rec = store.quarantine().records().pop().unwrap();
    assert_eq!((rec.positions, rec.detected_by), (vec![2], Detector::Scrub));
    assert_eq!(rec.message_ids.len(), 1);
    // Scrubbing again finds the same damage and counts nothing new.
    let r = rustqueue_storage::verify_segment(&sealed[1], &sink, &mut |_| {}).unwrap();
    assert_eq!(r.findings, 0);
    assert_eq!(store.quarantine().messages_total(), 1);
    let e = log.entry(2).unwrap();
    assert!(
        log.read_body(&e).is_err(),
        "a damaged body is never returned"
    );

    // The index is scrubbed too: a flipped byte in a page is quarantined and the index is
    // rebuilt from the (intact) segment.
    let idx = sealed[0]
        .index
        .as_ref()
        .expect("a sealed segment has its index");
    let page = idx.summary.page_offset(0);
    fs.corrupt(&idx.path, page as usize + 3, 0x5A);
    let r = rustqueue_storage::verify_segment(&sealed[0], &sink, &mut |_| {}).unwrap();
    assert_eq!(r.findings, 1);
    assert!(r.rebuilt_index.is_some());
    let rec = store.quarantine().records().pop().unwrap();
    assert_eq!(rec.kind, DamageKind::SegmentIndex);
    assert!(rec.file.ends_with(".rqidx"), "{rec:?}");
    let r = rustqueue_storage::verify_segment(&sealed[0], &sink, &mut |_| {}).unwrap();
    assert_eq!(r.findings, 0, "the rebuilt index verifies");
}

#[test]
fn scrub_rebuilds_a_rewritten_index_header_and_the_log_adopts_it() {
    let fs = SimFs::new();
    let (store, mut log) = small_segments(&fs, 6, 60);
    let sealed = log.sealed_segments();
    let idx = sealed[0].index.as_ref().unwrap();
    fs.corrupt(&idx.path, 10, 0x01);
    let sink = log.damage_sink().clone();
    let r = rustqueue_storage::verify_segment(&sealed[0], &sink, &mut |_| {}).unwrap();
    assert_eq!(r.findings, 1);
    log.adopt_index(r.rebuilt_index.unwrap());
    let first = log.entry(1).expect("entries of the rebuilt index");
    assert_eq!(log.read_body(&first).unwrap(), vec![0u8; 60]);
    drop((store, log, sealed));
    let (store, log) = open(&fs, 200).unwrap();
    let log = log.unwrap();
    let again = log.sealed_segments();
    assert!(
        fs.exists(&again[0].index.as_ref().unwrap().path),
        "index rewritten"
    );
    let r = rustqueue_storage::verify_segment(&again[0], log.damage_sink(), &mut |_| {}).unwrap();
    assert_eq!(r.findings, 0);
    assert_eq!(store.quarantine().records().len(), 1);
}
