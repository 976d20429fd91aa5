//! `rustqueue-crash-worker <scenario> <dir>` (feature `crash-injection`): performs one storage
//! step on a prepared data directory so that the failpoint named in
//! `RUSTQUEUE_CRASH_FAILPOINT` fires; the test then SIGKILLs it. Scenarios: `publish`
//! (append + fdatasync of "ambiguous"), `finish` (FIN of position 1 to the channel WAL),
//! `checkpoint` (checkpoint of channel `c`), `gc` (manifest write + segment GC below the
//! channel floor), `create_channel` (creation of channel `d`), `evict` (the oldest sealed
//! segment recorded evicted in the tiered record, then its `.rqlog` removed, opened at level 3
//! so the open first raises the rollback fence), `delete_topic` (topic `t`, with a tiered
//! record of incarnation `i1`, deleted). Exits 3 if the failpoint never fired.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use rustqueue_storage::{
    AppendBatch, ChannelCommand, ChannelState, RealFs, RemoteSegment, Store, StoreOptions,
    TieredObject, TieredRecord, TieredSegment,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(scenario), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!(
            "usage: rustqueue-crash-worker <publish|finish|checkpoint|gc|create_channel|evict|delete_topic> <dir>"
        );
        return ExitCode::from(2);
    };
    match run(scenario, Path::new(dir)) {
        Ok(()) => {
            eprintln!("failpoint never fired");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("crash worker: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(scenario: &str, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let opts = StoreOptions {
        node_id: 41,
        // Local retention needs level 3: the open raises the fence before the eviction.
        feature_level: if scenario == "evict" {
            rustqueue_storage::LOCAL_RETENTION_LEVEL
        } else {
            1
        },
        max_segment_bytes: 256,
        page_cache: Default::default(),
    };
    let (store, mut topics) = Store::open(Arc::new(RealFs), dir, opts)?;
    let mut topic = topics.pop().ok_or("fixture has no topic")?;
    match scenario {
        "evict" => {
            let files = topic.log.sealed_files();
            let f = files.first().ok_or("fixture has no sealed segment")?;
            let key = format!("k/{}", f.base);
            let mut record = TieredRecord::new("t", "b", None, "i1");
            record.insert(TieredSegment {
                base: f.base,
                objects: vec![TieredObject {
                    key: key.clone(),
                    size: f.log_len,
                    crc32c: 0,
                }],
                evicted: false,
            });
            record.mark_evicted(f.base);
            store.write_tiered(&record)?;
            topic.log.evict_local(
                f.base,
                RemoteSegment {
                    key,
                    size: f.log_len,
                },
            )?;
        }
        "delete_topic" => {
            store.write_tiered(&TieredRecord::new("t", "b", None, "i1"))?;
            store.delete_topic(&topic.manifest)?;
        }
        "publish" => {
            let id = store.allocate_ids(1)?;
            let body = [b"ambiguous".to_vec()];
            topic.log.append(&AppendBatch {
                first_id: id,
                bodies: &body,
                timestamp_ns: 1,
                available_at_ms: 0,
            })?;
            topic.log.sync()?;
        }
        "finish" | "checkpoint" | "gc" => {
            let mut ch = topic.channels.pop().ok_or("fixture has no channel")?;
            if scenario == "finish" {
                let id = topic.log.entry(1).ok_or("no position 1")?.id;
                ch.wal
                    .append(&[ChannelCommand::Finish { position: 1, id }])?;
                ch.wal.sync()?;
            } else if scenario == "checkpoint" {
                ch.wal.checkpoint(&ch.state)?;
            } else {
                let mut m = topic.manifest.clone();
                m.next_position = topic.log.next_position();
                store.write_manifest(&m)?;
                topic.log.gc(ch.state.ack_floor + 1)?;
            }
        }
        "create_channel" => {
            store.create_channel("t", &ChannelState::new("d", 1))?;
        }
        other => return Err(format!("unknown scenario {other}").into()),
    }
    Ok(())
}
