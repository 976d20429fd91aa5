//! The channel WAL group commit (docs/storage-format.md, "Channel WAL"): concurrent FINs share WAL fsyncs, the
//! automatic checkpoint truncates the WAL and its state survives a reopen; and fan-out to the
//! 1,024-channel limit.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{CountingFs, cfg};
use rustqueue_engine::{Bytes, Consumer, ConsumerOptions, Delivery, Engine, EngineError};

async fn next(c: &mut Consumer) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("a delivery within 5 s")
        .expect("not closed")
}

fn bodies(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("m{i}"))).collect()
}

fn wal_len(dir: &Path, channel: &str) -> u64 {
    let (wal, _) = rustqueue_storage::testing::wal_paths(
        &dir.join("topics")
            .join(rustqueue_storage::testing::hex("t"))
            .join("channels"),
        channel,
    );
    std::fs::metadata(&wal)
        .unwrap_or_else(|e| panic!("{}: {e}", wal.display()))
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_fins_share_a_few_wal_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, syncs) = CountingFs::new(Duration::ZERO);
    let e = Engine::open_with_fs(cfg(dir.path()), fs).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", bodies(200), None).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        let d = next(&mut c).await;
        held.push((c, d));
    }
    let before = syncs.wal();
    let barrier = Arc::new(tokio::sync::Barrier::new(200));
    let tasks: Vec<_> = held
        .into_iter()
        .map(|(c, d)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                c.finish(d.id).await.expect("FIN acknowledged");
                c
            })
        })
        .collect();
    let mut consumers = Vec::new();
    for t in tasks {
        consumers.push(t.await.unwrap());
    }
    let fsyncs = syncs.wal() - before;
    println!("200 concurrent FINs: {fsyncs} WAL fsyncs");
    assert!(fsyncs >= 1, "FINs reach the WAL fsync");
    assert!(fsyncs <= 20, "{fsyncs} WAL fsyncs for 200 concurrent FINs");
    assert_eq!(e.stats(Some("t"), Some("c")).topics[0].channels[0].depth, 0);
    drop(consumers);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(
        e.stats(Some("t"), Some("c")).topics[0].channels[0].depth,
        0,
        "every acknowledged FIN survives"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_automatic_checkpoint_truncates_the_wal_and_its_state_survives_a_reopen() {
    let every = rustqueue_storage::testing::CHECKPOINT_EVERY as usize;
    let (total, fin) = (every + 300, every + 100);
    let dir = tempfile::tempdir().unwrap();
    let (fs, syncs) = CountingFs::new(Duration::ZERO);
    let e = Engine::open_with_fs(cfg(dir.path()), fs).await.unwrap();
    e.create_channel("t", "c").unwrap();
    // More than one MPUB can carry (65,536 messages).
    for chunk in bodies(total).chunks(10_000) {
        e.publish("t", chunk.to_vec(), None).await.unwrap();
    }
    let created = syncs.checkpoints();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1_000);
    let mut pending = Vec::new();
    for i in 0..fin {
        let d = next(&mut c).await;
        assert_eq!(d.body, Bytes::from(format!("m{i}")));
        pending.push(c.finish_pipelined(d.id).unwrap());
        if pending.len() == 1_000 {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
    assert!(
        syncs.checkpoints() > created,
        "{fin} FINs wrote no automatic checkpoint"
    );
    // Left in the WAL: at most the frames after the checkpoint (each frame is > 12 bytes).
    let len = wal_len(dir.path(), "c");
    assert!(
        len < (fin - every + 1_024) as u64 * 40,
        "WAL not truncated: {len} bytes after {fin} FINs"
    );
    // Reopen without a shutdown checkpoint: state = automatic checkpoint + WAL replay.
    drop(c);
    drop(e);
    let e = reopen_when_unlocked(dir.path()).await;
    assert_eq!(
        e.stats(Some("t"), Some("c")).topics[0].channels[0].depth,
        (total - fin) as u64
    );
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    assert_eq!(next(&mut c).await.body, Bytes::from(format!("m{fin}")));
}

/// Opens the engine once the dropped one's background tasks have released the lock.
async fn reopen_when_unlocked(dir: &Path) -> Engine {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match Engine::open(cfg(dir)).await {
            Ok(e) => return e,
            Err(err) if std::time::Instant::now() < deadline => {
                let _ = err;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(err) => panic!("reopen: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_fans_out_to_1024_channels_and_the_1025th_is_refused() {
    // Fan-out is not about the disk: 1,024 channels' files go to memory where the host has it
    // (creating thousands of files on a busy ext4 can take milliseconds each).
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(
        rustqueue_engine::EngineConfig::default().max_channels_per_topic,
        1_024
    );
    let mut consumers = Vec::new();
    for i in 0..1_024 {
        let c = e
            .subscribe("t", &format!("c{i}"), ConsumerOptions::default())
            .unwrap();
        c.set_ready(1);
        consumers.push(c);
    }
    assert_eq!(
        e.create_channel("t", "c1024"),
        Err(EngineError::TooManyChannels)
    );
    assert!(matches!(
        e.subscribe("t", "more", ConsumerOptions::default()),
        Err(EngineError::TooManyChannels)
    ));
    assert!(matches!(
        e.subscribe("t", "x#ephemeral", ConsumerOptions::default()),
        Err(EngineError::TooManyChannels)
    ));
    assert_eq!(e.channels("t").unwrap().len(), 1_024);
    e.publish("t", vec![Bytes::from_static(b"fan")], None)
        .await
        .unwrap();
    let mut ids = std::collections::HashSet::new();
    let mut fins = Vec::new();
    for c in &mut consumers {
        let d = next(c).await;
        assert_eq!(d.body, Bytes::from_static(b"fan"));
        ids.insert(d.id);
        fins.push(c.finish_pipelined(d.id).unwrap());
    }
    for f in fins {
        f.await.unwrap();
    }
    assert_eq!(ids.len(), 1, "one stored message, one id on every channel");
    assert!(
        e.stats(Some("t"), None).topics[0]
            .channels
            .iter()
            .all(|c| c.depth == 0)
    );
}
