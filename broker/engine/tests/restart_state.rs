//! What a channel keeps across a restart (docs/storage-format.md, "Channel checkpoint"): its timeout, message and
//! requeue counters and its pause state; and what an ephemeral channel never writes.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cfg;
use rustqueue_engine::{Bytes, ChannelStats, Consumer, ConsumerOptions, Delivery, Engine};

async fn next(c: &mut Consumer) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("a delivery within 5 s")
        .expect("not closed")
}

fn chan(e: &Engine, channel: &str) -> ChannelStats {
    e.stats(Some("t"), Some(channel)).topics[0].channels[0].clone()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn timeout_message_and_requeue_counters_and_pause_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish(
        "t",
        (0..5).map(|i| Bytes::from(format!("m{i}"))).collect(),
        None,
    )
    .await
    .unwrap();
    let opts = ConsumerOptions {
        msg_timeout: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let mut c = e.subscribe("t", "c", opts).unwrap();
    c.set_ready(1);
    let first = next(&mut c).await;
    let again = next(&mut c).await;
    let third = next(&mut c).await;
    assert_eq!(
        (again.id, third.id, third.attempts),
        (first.id, first.id, 3)
    );
    c.requeue(third.id, Duration::ZERO).await.unwrap();
    let d = next(&mut c).await;
    c.requeue(d.id, Duration::ZERO).await.unwrap();
    drop(c);
    e.pause_channel("t", "c", true).await.unwrap();
    let before = chan(&e, "c");
    assert_eq!(
        (
            before.timeout_count,
            before.requeue_count,
            before.message_count
        ),
        (2, 2, 5)
    );
    assert!(before.paused);
    e.shutdown().await;

    let e = Engine::open(cfg(dir.path())).await.unwrap();
    let after = chan(&e, "c");
    assert_eq!(after.timeout_count, 2, "timeout_count survives");
    assert_eq!(after.requeue_count, 2, "requeue_count survives");
    assert_eq!(after.message_count, 5, "message_count survives");
    assert!(after.paused, "the pause survives");
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    assert!(
        tokio::time::timeout(Duration::from_millis(150), c.next())
            .await
            .is_err(),
        "a paused channel delivers nothing after a restart"
    );
    e.pause_channel("t", "c", false).await.unwrap();
    let d = next(&mut c).await;
    assert_eq!((d.id, d.attempts), (first.id, 5), "attempts survive too");
    c.finish(d.id).await.unwrap();
    drop(c);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert!(!chan(&e, "c").paused, "the resume survives too");
}

#[tokio::test]
async fn an_ephemeral_channel_writes_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "durable").unwrap();
    let before: Vec<PathBuf> = files(dir.path())
        .into_iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "wal" || x == "checkpoint")
        })
        .collect();
    assert_eq!(
        before.len(),
        2,
        "the durable channel's WAL and checkpoint: {before:?}"
    );
    let mut c = e
        .subscribe("t", "x#ephemeral", ConsumerOptions::default())
        .unwrap();
    c.set_ready(2);
    e.publish(
        "t",
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
        None,
    )
    .await
    .unwrap();
    let a = next(&mut c).await;
    let b = next(&mut c).await;
    c.finish(a.id).await.unwrap();
    c.requeue(b.id, Duration::from_millis(10)).await.unwrap();
    let b = next(&mut c).await;
    c.finish(b.id).await.unwrap();
    e.pause_channel("t", "x#ephemeral", true).await.unwrap();
    let hex = rustqueue_storage::testing::hex("x#ephemeral");
    let all = files(dir.path());
    let after: Vec<&PathBuf> = all
        .iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "wal" || x == "checkpoint")
        })
        .collect();
    assert_eq!(
        after.len(),
        2,
        "only the durable channel has files: {after:?}"
    );
    assert!(
        all.iter().all(|p| !p.to_string_lossy().contains(&hex)),
        "no file names the ephemeral channel: {all:?}"
    );
    drop(c);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(e.channels("t").unwrap(), vec!["durable".to_string()]);
}
