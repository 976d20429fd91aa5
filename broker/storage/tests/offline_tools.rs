//! `rustqueued storage verify` and `storage repair` (docs/operations.md): verify reports every
//! file and writes nothing; repair quarantines what verify found and rebuilds the indexes, after
//! which verify finds nothing new.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustqueue_storage::offline::{self, FileStatus};
use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::testing::{HEADER_LEN, hex};
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, DamageKind, Detector, Fs, Manifest, Store,
    StoreOptions, TopicLog,
};

fn opts() -> StoreOptions {
    StoreOptions {
        node_id: 9,
        feature_level: 1,
        max_segment_bytes: 400,
        page_cache: Default::default(),
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(fs: &SimFs, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for n in fs.list(dir).unwrap_or_default() {
        let p = dir.join(&n);
        match fs.read(&p) {
            Ok(b) => {
                out.insert(p, b);
            }
            Err(_) => snapshot(fs, &p, out),
        }
    }
}

/// Appends one message with a fresh id (not synced).
fn append_one(store: &Store, log: &mut TopicLog, body: &str) -> u64 {
    let id = store.allocate_ids(1).unwrap();
    log.append(&AppendBatch {
        first_id: id,
        bodies: &[body.as_bytes()],
        timestamp_ns: 1,
        available_at_ms: 0,
    })
    .unwrap();
    id
}

fn flip(fs: &SimFs, path: &Path, at: usize) {
    let b = fs.read(path).unwrap();
    fs.corrupt(path, at, b[at] ^ 0x10);
}

#[test]
fn verify_reports_without_writing_and_repair_leaves_nothing_new_to_report() {
    let fs = SimFs::new();
    let root = Path::new("/data");
    let (store, _) = Store::open(Arc::new(fs.clone()), root, opts()).unwrap();
    let mut log = store.create_topic(&Manifest::new("t")).unwrap();
    let mut wal = store
        .create_channel("t", &ChannelState::new("c", 1))
        .unwrap();
    for i in 0..12u64 {
        let id = append_one(&store, &mut log, &format!("message number {i:03}"));
        log.sync().unwrap();
        wal.append(&[ChannelCommand::Finish {
            position: i + 1,
            id,
        }])
        .unwrap();
    }
    wal.sync().unwrap();
    drop((store, log, wal));

    let tdir = root.join("topics").join(hex("t"));
    let seg = tdir
        .join("segments")
        .join(format!("segment-{:020}.rqlog", 1));
    // The body of the second record of the first (sealed) segment.
    let first_len = {
        let b = fs.read(&seg).unwrap();
        HEADER_LEN + u32::from_be_bytes(b[40..44].try_into().unwrap()) as usize
    };
    flip(&fs, &seg, first_len + HEADER_LEN + 24 + 3);
    let idx = seg.with_extension("rqidx");
    let idx_len = fs.read(&idx).unwrap().len();
    flip(&fs, &idx, idx_len - 2);
    let wal_path = tdir.join("channels").join(format!("{}.wal", hex("c")));
    flip(&fs, &wal_path, 29 * 3 + 14);

    let mut before = BTreeMap::new();
    snapshot(&fs, root, &mut before);
    let report = offline::verify(&fs, root).unwrap();
    let mut after = BTreeMap::new();
    snapshot(&fs, root, &mut after);
    assert!(before == after, "verify wrote to the data directory");
    let status = |file: &Path| {
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        report
            .files
            .iter()
            .find(|f| f.file == rel)
            .unwrap_or_else(|| panic!("{rel} not in {:#?}", report.files))
            .clone()
    };
    let s = status(&seg);
    assert_eq!((s.status, s.lost_positions), (FileStatus::Damaged, vec![2]));
    assert_eq!(status(&idx).status, FileStatus::Damaged);
    assert_eq!(status(&wal_path).status, FileStatus::Damaged);
    assert_eq!(status(&tdir.join("manifest")).status, FileStatus::Ok);
    assert_eq!(report.damaged_files, 3, "{:#?}", report.files);

    let repaired = offline::repair(Arc::new(fs.clone()), root).unwrap();
    assert_eq!(repaired.indexes_rebuilt, 1, "{repaired:#?}");
    let kinds: Vec<(DamageKind, Detector, Vec<u64>)> = repaired
        .new_findings
        .iter()
        .map(|r| (r.kind, r.detected_by, r.positions.clone()))
        .collect();
    assert!(
        kinds.contains(&(DamageKind::SegmentRecord, Detector::Repair, vec![2])),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(DamageKind::ChannelWal, Detector::Repair, vec![])),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(DamageKind::SegmentIndex, Detector::Repair, vec![])),
        "{kinds:?}"
    );

    let again = offline::verify(&fs, root).unwrap();
    assert_eq!(again.damaged_files, 0, "{:#?}", again.files);
    let rel = seg.strip_prefix(root).unwrap().display().to_string();
    let s = again.files.iter().find(|f| f.file == rel).unwrap();
    assert_eq!(s.status, FileStatus::Quarantined);
    // And the repaired directory opens like any other, with nothing new to count.
    let (store, topics) = Store::open(Arc::new(fs.clone()), root, opts()).unwrap();
    assert_eq!(store.quarantine().messages_total(), 0);
    let log = &topics[0].log;
    for p in (1..=12).filter(|&p| p != 2) {
        let e = log.entry(p).unwrap();
        let body = log.read_body(&e).unwrap();
        assert_eq!(body, format!("message number {:03}", p - 1).into_bytes());
    }
    // The rebuilt index lists only whole records, so the lost message is simply absent.
    assert!(log.entry(2).is_none());
}

#[test]
fn verify_names_the_zeros_ahead_of_a_crashed_segment_tail_apart_from_a_partial_record() {
    let detail_after = |tear: usize| {
        let fs = SimFs::new();
        let root = Path::new("/data");
        let (store, _) = Store::open(
            Arc::new(fs.clone()),
            root,
            StoreOptions {
                max_segment_bytes: 100 << 20,
                ..opts()
            },
        )
        .unwrap();
        let mut log = store.create_topic(&Manifest::new("t")).unwrap();
        for i in 0..3u64 {
            append_one(&store, &mut log, &format!("message {i}"));
            if i < 2 {
                log.sync().unwrap();
            }
        }
        // Power lost with the third record unsynced: `tear` of its bytes reached the disk.
        std::mem::forget((store, log));
        fs.crash(&mut |_| tear);
        let report = offline::verify(&fs, root).unwrap();
        let seg = report
            .files
            .iter()
            .find(|f| f.file.ends_with(".rqlog"))
            .unwrap()
            .clone();
        assert_eq!(seg.status, FileStatus::TornTail, "{seg:#?}");
        assert_eq!(report.damaged_files, 0);
        seg.detail
    };
    let zeros = detail_after(0);
    assert!(
        zeros.starts_with("2 whole records; zeros written ahead of the tail from offset"),
        "{zeros}"
    );
    let partial = detail_after(HEADER_LEN + 3);
    assert!(
        partial.starts_with("2 whole records; partial record from offset"),
        "{partial}"
    );
}
