//! Randomized crash-point test over the simulated file system.
//!
//! Each round runs a mixed PUB/MPUB/FIN/REQ/checkpoint/seal/GC workload, kills the "process"
//! at a random I/O operation (that and every later operation fail), crashes the simulated disk
//! (unsynced data dropped, unsynced tails torn at random), reopens and checks an oracle:
//! every acknowledged publish is present (or was durably finished and collected), every
//! acknowledged FIN is honoured, no position or id is reused, and nothing panics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rustqueue_storage::Manifest;
use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, ChannelWal, Fs, Store, StoreOptions, TopicLog,
};

const ROOT: &str = "/data";

#[derive(Default)]
struct Oracle {
    /// position -> (id, body) of every acknowledged (synced) publish.
    acked: BTreeMap<u64, (u64, Vec<u8>)>,
    /// Durably finished positions.
    finished: BTreeSet<u64>,
    /// Durable requeues not finished since: position -> attempts.
    requeued: BTreeMap<u64, u16>,
    /// Highest id ever handed out (acknowledged or not).
    max_id: u64,
    /// Segments deleted by GC (to show the workload reaches it).
    gc_deleted: usize,
}

struct Open {
    store: Store,
    log: TopicLog,
    wal: ChannelWal,
    state: ChannelState,
    manifest: Manifest,
}

fn opts() -> StoreOptions {
    StoreOptions {
        node_id: 7,
        feature_level: 1,
        max_segment_bytes: 600,
        page_cache: Default::default(),
    }
}

fn open(fs: &SimFs) -> Result<Open, String> {
    let arc: Arc<dyn Fs> = Arc::new(fs.clone());
    let (store, mut topics) =
        Store::open(arc, Path::new(ROOT), opts()).map_err(|e| e.to_string())?;
    if let Some(t) = topics.pop() {
        let mut chans = t.channels;
        if let Some(c) = chans.pop() {
            return Ok(Open {
                store,
                log: t.log,
                wal: c.wal,
                state: c.state,
                manifest: t.manifest,
            });
        }
        let state = ChannelState::new("c", 1);
        let wal = store
            .create_channel("t", &state)
            .map_err(|e| e.to_string())?;
        return Ok(Open {
            store,
            log: t.log,
            wal,
            state,
            manifest: t.manifest,
        });
    }
    let manifest = Manifest {
        unrouted_from_position: None,
        ..Manifest::new("t")
    };
    let log = store.create_topic(&manifest).map_err(|e| e.to_string())?;
    let state = ChannelState::new("c", 1);
    let wal = store
        .create_channel("t", &state)
        .map_err(|e| e.to_string())?;
    Ok(Open {
        store,
        log,
        wal,
        state,
        manifest,
    })
}

/// Runs random operations until one fails (the injected crash) or `ops` are done.
fn workload(o: &mut Open, oracle: &mut Oracle, rng: &mut StdRng, ops: usize) -> Result<(), String> {
    let e = |e: rustqueue_storage::StorageError| e.to_string();
    for _ in 0..ops {
        match rng.random_range(0..100) {
            0..40 => {
                let n = if rng.random_bool(0.3) {
                    rng.random_range(2..12)
                } else {
                    1
                };
                let bodies: Vec<Vec<u8>> = (0..n)
                    .map(|_| (0..rng.random_range(1..40)).map(|_| rng.random()).collect())
                    .collect();
                let first_id = o.store.allocate_ids(n as u64).map_err(e)?;
                oracle.max_id = oracle.max_id.max(first_id + n as u64 - 1);
                let pos = o
                    .log
                    .append(&AppendBatch {
                        first_id,
                        bodies: &bodies,
                        timestamp_ns: 1,
                        available_at_ms: 0,
                    })
                    .map_err(e)?;
                o.log.sync().map_err(e)?;
                for (i, b) in bodies.into_iter().enumerate() {
                    oracle
                        .acked
                        .insert(pos + i as u64, (first_id + i as u64, b));
                }
            }
            40..75 => {
                let open: Vec<u64> = oracle
                    .acked
                    .keys()
                    .copied()
                    .filter(|p| !o.state.is_done(*p))
                    .take(8)
                    .collect();
                if open.is_empty() {
                    continue;
                }
                let mut cmds = Vec::new();
                for _ in 0..rng.random_range(1..4) {
                    let p = open[rng.random_range(0..open.len())];
                    let id = oracle.acked[&p].0;
                    cmds.push(if rng.random_bool(0.75) {
                        ChannelCommand::Finish { position: p, id }
                    } else {
                        let attempts = o.state.requeued.get(&p).map_or(1, |r| r.1 + 1);
                        ChannelCommand::Requeue {
                            position: p,
                            id,
                            available_at_ms: 5,
                            attempts,
                            requeue_count: o.state.requeue_count + 1,
                        }
                    });
                }
                for c in &cmds {
                    o.state.apply(c);
                }
                o.wal.append(&cmds).map_err(e)?;
                o.wal.sync().map_err(e)?;
                for c in cmds {
                    match c {
                        ChannelCommand::Finish { position, .. } => {
                            oracle.finished.insert(position);
                            oracle.requeued.remove(&position);
                        }
                        ChannelCommand::Requeue {
                            position, attempts, ..
                        } if !oracle.finished.contains(&position) => {
                            oracle.requeued.insert(position, attempts);
                        }
                        _ => {}
                    }
                }
            }
            75..82 => o.wal.checkpoint(&o.state).map_err(e)?,
            82..90 => o.log.seal_active().map_err(e)?,
            _ => {
                let floor = o.state.ack_floor + 1;
                o.manifest.next_position = o.log.next_position();
                o.store.write_manifest(&o.manifest).map_err(e)?;
                oracle.gc_deleted += o.log.gc(floor).map_err(e)?;
            }
        }
    }
    Ok(())
}

fn check(o: &Open, oracle: &Oracle) -> Result<(), String> {
    for (&p, (id, body)) in &oracle.acked {
        match o.log.entry(p) {
            Some(en) => {
                if en.id != *id {
                    return Err(format!("position {p}: id {} != acknowledged {id}", en.id));
                }
                let got = o.log.read_body(&en).map_err(|e| e.to_string())?;
                if &got != body {
                    return Err(format!("position {p}: body differs"));
                }
            }
            None if o.state.is_done(p) && p < o.log.first_position() => {}
            None => {
                return Err(format!(
                    "acknowledged position {p} missing (first {})",
                    o.log.first_position()
                ));
            }
        }
    }
    for p in &oracle.finished {
        if !o.state.is_done(*p) {
            return Err(format!("acknowledged FIN of position {p} lost"));
        }
    }
    for (p, attempts) in &oracle.requeued {
        // A FIN or REQ written but not acknowledged before the crash may have persisted too.
        if !o.state.is_done(*p) && o.state.requeued.get(p).is_none_or(|r| r.1 < *attempts) {
            return Err(format!(
                "acknowledged REQ of position {p} lost (attempts {attempts}); recovered {:?} done={} floor={}",
                o.state.requeued.get(p),
                o.state.is_done(*p),
                o.state.ack_floor
            ));
        }
    }
    Ok(())
}

/// Appends one message after reopening: it must get a fresh id and position.
fn check_no_reuse(o: &mut Open, oracle: &mut Oracle) -> Result<(), String> {
    let max_pos = oracle
        .acked
        .keys()
        .next_back()
        .copied()
        .unwrap_or(0)
        .max(o.log.next_position() - 1);
    let id = o.store.allocate_ids(1).map_err(|e| e.to_string())?;
    if id <= oracle.max_id {
        return Err(format!("id {id} reused (max handed out {})", oracle.max_id));
    }
    oracle.max_id = id;
    let body = vec![7u8; 5];
    let pos = o
        .log
        .append(&AppendBatch {
            first_id: id,
            bodies: std::slice::from_ref(&body),
            timestamp_ns: 1,
            available_at_ms: 0,
        })
        .map_err(|e| e.to_string())?;
    if pos <= max_pos {
        return Err(format!("position {pos} reused"));
    }
    o.log.sync().map_err(|e| e.to_string())?;
    oracle.acked.insert(pos, (id, body));
    Ok(())
}

#[test]
fn a_thousand_random_crash_points_lose_no_acknowledged_publish_or_finish() {
    let mut fired = 0u32;
    let mut rounds = 0u32;
    let mut gc_deleted = 0;
    let mut seed = 0u64;
    while fired < 1_200 {
        seed += 1;
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = SimFs::new();
        let mut oracle = Oracle::default();
        for _round in 0..3 {
            rounds += 1;
            let budget = rng.random_range(0..160);
            fs.fail_after(budget);
            let mut o = match open(&fs) {
                Ok(o) => Some(o),
                Err(_) if fs.failed() => None,
                Err(e) => panic!("seed {seed}: open failed without injection: {e}"),
            };
            if let Some(o) = o.as_mut() {
                let _ = workload(o, &mut oracle, &mut rng, 60);
            }
            if fs.failed() {
                fired += 1;
            }
            drop(o);
            let tear = rng.random_range(0..3u8);
            fs.crash(&mut |n| match tear {
                0 => 0,
                1 => n,
                _ => n / 2,
            });
            let mut o = open(&fs).unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
            check(&o, &oracle).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            check_no_reuse(&mut o, &mut oracle).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
        gc_deleted += oracle.gc_deleted;
    }
    println!(
        "crash points exercised: {fired} in {rounds} rounds, missing=0, GC deleted {gc_deleted} segments"
    );
    assert!(gc_deleted > 100, "the workload must reach segment GC");
}

#[test]
fn an_injected_write_failure_isolates_the_store_until_restart() {
    let fs = SimFs::new();
    let mut o = open(&fs).unwrap();
    let id = o.store.allocate_ids(1).unwrap();
    fs.fail_after(0);
    let body = [b"x".to_vec()];
    assert!(
        o.log
            .append(&AppendBatch {
                first_id: id,
                bodies: &body,
                timestamp_ns: 1,
                available_at_ms: 0
            })
            .is_err()
    );
    fs.fail_after(u64::MAX);
    let again = o.log.append(&AppendBatch {
        first_id: id + 1,
        bodies: &body,
        timestamp_ns: 1,
        available_at_ms: 0,
    });
    assert!(again.unwrap_err().to_string().contains("isolated"));
    assert!(o.store.fault().reason().is_some());
    assert!(
        o.wal.append(&[ChannelCommand::Pause(true)]).is_err(),
        "channel writes refused too"
    );
}
