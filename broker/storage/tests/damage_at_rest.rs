//! Damage at rest (docs/storage-format.md, "Damage at rest"): one bit flipped at a random
//! position of every kind of file (sealed and active segments, indexes, channel WAL,
//! checkpoints, manifests, and `FORMAT`, `COMPATIBILITY` and `broker.meta`) while the store
//! is closed. Each trial must end with the store open,
//! no damaged body returned, and either exact recovery or a quarantine whose positions are
//! exactly the messages that can no longer be read; a channel never counts as finished a
//! message it had not finished (redelivery, never silent loss).
//!
//! The seed is printed; `RUSTQUEUE_TEST_SEED=<n>` replays a run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustqueue_storage::offline;
use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::testing::{BrokerMeta, hex, read_checked, write_checked};
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, DamageKind, Fs, Manifest, Store, StoreOptions,
    is_damaged_body, read_body_from, verify_segment,
};

const SEGMENT_BYTES: u64 = 700;
const TRIALS: usize = 40;

fn opts() -> StoreOptions {
    StoreOptions {
        node_id: 5,
        feature_level: 1,
        max_segment_bytes: SEGMENT_BYTES,
        page_cache: Default::default(),
    }
}

fn seed() -> u64 {
    let seed = std::env::var("RUSTQUEUE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("RUSTQUEUE_TEST_SEED={seed}");
    seed | 1
}

fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// What was stored: bodies by position, and the channel's state.
struct Oracle {
    bodies: BTreeMap<u64, (u64, Vec<u8>)>,
    channel: ChannelState,
}

fn topic_dir() -> PathBuf {
    Path::new("/d/topics").join(hex("t"))
}

/// A closed store with topic `t` in several sealed segments plus an active one (PUBs and
/// some 3-message MPUBs), and channel `c` with a checkpoint and WAL frames after it.
fn build(fs: &SimFs) -> Oracle {
    let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    let mut log = store.create_topic(&Manifest::new("t")).unwrap();
    let mut state = ChannelState::new("c", 1);
    let mut wal = store.create_channel("t", &state).unwrap();
    let mut bodies = BTreeMap::new();
    for i in 0..30u64 {
        let n = if i % 5 == 4 { 3 } else { 1 };
        let batch: Vec<Vec<u8>> = (0..n)
            .map(|j| format!("body {i:02}-{j} of the oracle").into_bytes())
            .collect();
        let id = store.allocate_ids(n).unwrap();
        let first = log
            .append(&AppendBatch {
                first_id: id,
                bodies: &batch,
                timestamp_ns: 1,
                available_at_ms: 0,
            })
            .unwrap();
        log.sync().unwrap();
        for (j, b) in batch.into_iter().enumerate() {
            bodies.insert(first + j as u64, (id + j as u64, b));
        }
    }
    let mut fins = 0;
    for (&p, &(id, _)) in &bodies {
        if p % 3 != 0 {
            continue;
        }
        let cmd = ChannelCommand::Finish { position: p, id };
        wal.append(&[cmd]).unwrap();
        state.apply(&cmd);
        fins += 1;
        if fins == 5 {
            wal.checkpoint(&state).unwrap();
        }
    }
    let req = ChannelCommand::Requeue {
        position: 4,
        id: bodies[&4].0,
        available_at_ms: 77,
        attempts: 2,
        requeue_count: 1,
    };
    wal.append(&[req]).unwrap();
    state.apply(&req);
    wal.sync().unwrap();
    let mut m = Manifest::new("t");
    m.next_position = log.next_position();
    m.unrouted_from_position = None;
    store.write_manifest(&m).unwrap();
    Oracle {
        bodies,
        channel: state,
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    SealedSegment,
    ActiveSegment,
    Index,
    ChannelWal,
    Checkpoint,
    Manifest,
}

/// The files of one kind in the closed store.
fn files(fs: &SimFs, kind: Kind) -> Vec<PathBuf> {
    let seg = topic_dir().join("segments");
    let mut logs: Vec<PathBuf> = fs
        .list(&seg)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".rqlog"))
        .map(|n| seg.join(n))
        .collect();
    logs.sort();
    let chan = topic_dir().join("channels").join(hex("c"));
    match kind {
        Kind::SealedSegment => logs[..logs.len() - 1].to_vec(),
        Kind::ActiveSegment => logs[logs.len() - 1..].to_vec(),
        Kind::Index => logs[..logs.len() - 1]
            .iter()
            .map(|p| p.with_extension("rqidx"))
            .collect(),
        Kind::ChannelWal => vec![chan.with_extension("wal")],
        Kind::Checkpoint => vec![chan.with_extension("checkpoint")],
        Kind::Manifest => vec![topic_dir().join("manifest")],
    }
}

fn flip_one_bit(fs: &SimFs, kind: Kind, rand: &mut u64) -> String {
    let candidates = files(fs, kind);
    let file = &candidates[(next_rand(rand) % candidates.len() as u64) as usize];
    let bytes = fs.read(file).unwrap();
    assert!(!bytes.is_empty(), "{kind:?}: {} is empty", file.display());
    let at = (next_rand(rand) % bytes.len() as u64) as usize;
    let bit = next_rand(rand) % 8;
    fs.corrupt(file, at, bytes[at] ^ (1 << bit));
    format!("{kind:?}: bit {bit} of byte {at} of {}", file.display())
}

/// Reopens the damaged store and checks every promise; returns whether damage was reported.
fn check(fs: &SimFs, oracle: &Oracle, what: &str) -> bool {
    let (store, mut topics) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts())
        .unwrap_or_else(|e| panic!("{what}: the store must open: {e}"));
    let t = topics.pop().unwrap_or_else(|| panic!("{what}: topic lost"));
    let mut log = t.log;
    let mut lost = BTreeSet::new();
    for (&p, (id, body)) in &oracle.bodies {
        let Some(e) = log.entry(p) else {
            lost.insert(p);
            continue;
        };
        assert_eq!(e.id, *id, "{what}: position {p}");
        let file = log.body_source(&e).unwrap();
        match read_body_from(file.as_ref(), &e) {
            Ok(b) => assert_eq!(&b, body, "{what}: a damaged body of {p} was returned"),
            Err(err) => {
                assert!(is_damaged_body(&err), "{what}: {err}");
                log.quarantine_body(&e).unwrap();
                lost.insert(p);
            }
        }
    }
    assert_eq!(
        log.next_position(),
        oracle.bodies.len() as u64 + 1,
        "{what}"
    );
    for seg in log.sealed_segments() {
        let r = verify_segment(&seg, log.damage_sink(), &mut |_| {})
            .unwrap_or_else(|e| panic!("{what}: the scrub must not fail: {e}"));
        if let Some(rebuilt) = r.rebuilt_index {
            log.adopt_index(rebuilt);
        }
    }
    assert_eq!(store.fault().reason(), None, "{what}: storage isolated");
    let records = store.quarantine().records();
    let quarantined: BTreeSet<u64> = records
        .iter()
        .flat_map(|r| r.positions.iter().copied())
        .collect();
    assert_eq!(quarantined, lost, "{what}: exact accounting\n{records:#?}");
    assert_eq!(
        records.iter().map(|r| r.messages).sum::<u64>(),
        lost.len() as u64,
        "{what}: each message counted once"
    );
    for r in &records {
        if !r.message_ids.is_empty() {
            let ids: Vec<String> = r
                .positions
                .iter()
                .map(|p| format!("{:016x}", oracle.bodies[p].0))
                .collect();
            assert_eq!(r.message_ids, ids, "{what}: ids of {r:?}");
        }
    }
    let c = t.channels.into_iter().next().expect("channel kept");
    let state = c.state;
    let channel_damage = records.iter().any(|r| {
        matches!(
            r.kind,
            DamageKind::ChannelWal | DamageKind::ChannelCheckpoint
        )
    });
    for &p in oracle.bodies.keys() {
        assert!(
            !state.is_done(p) || oracle.channel.is_done(p),
            "{what}: position {p} finished without a FIN (silent loss)"
        );
    }
    if !channel_damage {
        assert_eq!(
            state, oracle.channel,
            "{what}: channel not recovered exactly"
        );
    }
    // A second open finds nothing new to count.
    drop((store, log));
    let (again, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    assert_eq!(
        again.quarantine().messages_total(),
        0,
        "{what}: counted twice"
    );
    !records.is_empty()
}

fn trials(kind: Kind) {
    let mut rand = seed();
    let mut reported = 0;
    for trial in 0..TRIALS {
        let fs = SimFs::new();
        let oracle = build(&fs);
        let what = format!("trial {trial}, {}", flip_one_bit(&fs, kind, &mut rand));
        if check(&fs, &oracle, &what) {
            reported += 1;
        }
    }
    println!("{kind:?}: {reported} of {TRIALS} flips reported, the rest recovered exactly");
}

#[test]
fn a_bit_flipped_in_a_sealed_segment_costs_at_most_its_record_and_is_reported() {
    trials(Kind::SealedSegment);
}

#[test]
fn a_bit_flipped_in_the_active_segment_costs_at_most_its_record_and_is_reported() {
    trials(Kind::ActiveSegment);
}

#[test]
fn a_bit_flipped_in_an_index_is_recovered_exactly() {
    trials(Kind::Index);
}

#[test]
fn a_bit_flipped_in_a_channel_wal_redelivers_and_never_loses() {
    trials(Kind::ChannelWal);
}

#[test]
fn a_bit_flipped_in_a_checkpoint_redelivers_and_never_loses() {
    trials(Kind::Checkpoint);
}

#[test]
fn a_bit_flipped_in_a_manifest_is_rebuilt_and_reported() {
    trials(Kind::Manifest);
}

/// Opens after a flip in one of the root metadata files: either the store opens (the flip was
/// repaired from what the directory still holds, or touched nothing that is read, such as the
/// checksum key's name) with everything intact, or it refuses naming the file and the repair
/// command. Returns the refusal, if any.
fn open_or_refusal(fs: &SimFs, oracle: &Oracle, what: &str, command: &str) -> Option<String> {
    match Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()) {
        Ok(store) => {
            drop(store);
            check(fs, oracle, what);
            None
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("is damaged") && msg.contains(command),
                "{what}: the refusal must say what to do: {msg}"
            );
            Some(msg)
        }
    }
}

#[test]
fn a_bit_flipped_in_format_is_rewritten_from_compatibility_and_broker_meta() {
    let mut rand = seed();
    let mut reported = 0;
    for trial in 0..TRIALS {
        let fs = SimFs::new();
        let oracle = build(&fs);
        let what = format!(
            "trial {trial}, {}",
            flip_one_meta_bit(&fs, "FORMAT", &mut rand)
        );
        // Both witnesses are whole, so FORMAT is always recovered, never refused.
        let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts())
            .unwrap_or_else(|e| panic!("{what}: must open: {e}"));
        let records = store.quarantine().records();
        assert!(
            records
                .iter()
                .all(|r| r.kind == DamageKind::Metadata && r.messages == 0)
        );
        reported += usize::from(!records.is_empty());
        drop(store);
        check(&fs, &oracle, &what);
    }
    println!("FORMAT: {reported} of {TRIALS} flips repaired and reported, the rest harmless");
    // Without its witnesses FORMAT is not guessed.
    let fs = SimFs::new();
    build(&fs);
    fs.corrupt(Path::new("/d/FORMAT"), 0, b'x');
    fs.corrupt(Path::new("/d/COMPATIBILITY"), 0, b'x');
    let Err(err) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()) else {
        panic!("FORMAT guessed without its witnesses");
    };
    assert!(err.to_string().contains("restore FORMAT"), "{err}");
}

#[test]
fn a_bit_flipped_in_compatibility_refuses_until_repair_rebuilds_it_at_the_given_level() {
    let mut rand = seed();
    let mut refused = 0;
    for trial in 0..TRIALS {
        let fs = SimFs::new();
        let oracle = build(&fs);
        let what = format!(
            "trial {trial}, {}",
            flip_one_meta_bit(&fs, "COMPATIBILITY", &mut rand)
        );
        if open_or_refusal(&fs, &oracle, &what, "--rebuild-compatibility").is_none() {
            let c: rustqueue_storage::Compatibility =
                read_checked(&fs, Path::new("/d/COMPATIBILITY")).unwrap();
            assert_eq!(
                (
                    c.active_writer_feature_level,
                    c.minimum_reader_feature_level
                ),
                (1, 1),
                "{what}: a fence value changed silently"
            );
            continue;
        }
        refused += 1;
        // The capability preflight reads the same file and refuses the same way.
        assert!(rustqueue_storage::read_compatibility(&fs, Path::new("/d")).is_err());
        offline::rebuild_compatibility(Arc::new(fs.clone()), Path::new("/d"), Some(1)).unwrap();
        check(&fs, &oracle, &what);
        assert!(
            offline::rebuild_compatibility(Arc::new(fs.clone()), Path::new("/d"), Some(1)).is_err(),
            "{what}: a whole file is never overwritten"
        );
    }
    println!("COMPATIBILITY: {refused} of {TRIALS} flips refused, then rebuilt by repair");
}

#[test]
fn a_bit_flipped_in_broker_meta_refuses_until_repair_rebuilds_it_for_the_node() {
    let mut rand = seed();
    let mut refused = 0;
    for trial in 0..TRIALS {
        let fs = SimFs::new();
        let oracle = build(&fs);
        let before: BrokerMeta = read_checked(&fs, Path::new("/d/broker.meta")).unwrap();
        let what = format!(
            "trial {trial}, {}",
            flip_one_meta_bit(&fs, "broker.meta", &mut rand)
        );
        if open_or_refusal(&fs, &oracle, &what, "--rebuild-broker-meta").is_none() {
            let after: BrokerMeta = read_checked(&fs, Path::new("/d/broker.meta")).unwrap();
            assert_eq!(after.node_id, before.node_id, "{what}");
            assert!(after.next_sequence >= before.next_sequence, "{what}");
            continue;
        }
        refused += 1;
        // Never for another node: the stored ids name node 5.
        let wrong =
            offline::rebuild_broker_meta(Arc::new(fs.clone()), Path::new("/d"), 6).unwrap_err();
        assert!(
            wrong.to_string().contains("not node 6's"),
            "{what}: {wrong}"
        );
        offline::rebuild_broker_meta(Arc::new(fs.clone()), Path::new("/d"), 5).unwrap();
        check(&fs, &oracle, &what);
        // Ids resume past every stored one.
        let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
        let next = store.allocate_ids(1).unwrap();
        let highest = oracle.bodies.values().map(|(id, _)| *id).max().unwrap();
        assert!(next > highest, "{what}: id {next:x} not above {highest:x}");
    }
    println!("broker.meta: {refused} of {TRIALS} flips refused, then rebuilt by repair");
}

#[test]
fn a_damaged_metadata_file_with_a_whole_temp_sibling_completes_the_interrupted_replacement() {
    let fs = SimFs::new();
    let oracle = build(&fs);
    let mut bm: BrokerMeta = read_checked(&fs, Path::new("/d/broker.meta")).unwrap();
    bm.next_sequence += 1 << 20;
    write_checked(&fs, Path::new("/d/broker.meta.tmp"), &bm).unwrap();
    fs.corrupt(Path::new("/d/broker.meta"), 3, b'#');
    let (store, _) = Store::open(Arc::new(fs.clone()), Path::new("/d"), opts()).unwrap();
    let records = store.quarantine().records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].kind, DamageKind::Metadata);
    assert_eq!(records[0].messages, 0);
    let id = store.allocate_ids(1).unwrap();
    assert_eq!(
        id & ((1 << 48) - 1),
        bm.next_sequence,
        "ids resume at the temp's sequence"
    );
    drop(store);
    check(&fs, &oracle, "temp sibling adopted");
}

/// A flip in `/d/<name>`.
fn flip_one_meta_bit(fs: &SimFs, name: &str, rand: &mut u64) -> String {
    let file = Path::new("/d").join(name);
    let bytes = fs.read(&file).unwrap();
    let at = (next_rand(rand) % bytes.len() as u64) as usize;
    let bit = next_rand(rand) % 8;
    fs.corrupt(&file, at, bytes[at] ^ (1 << bit));
    format!("{name}: bit {bit} of byte {at}")
}
