//! Fail-closed storage (docs/architecture.md, "Errors on the wire"): an fsync that fails isolates the whole store. The
//! request that hit it gets an error (never `OK`), every later write is refused even once
//! the disk works again, `health().storage_fault` says why, and a restart recovers.
//!
//! The faults come from [`FaultFs`], a pass-through to the real file system that fails
//! `fdatasync`/`fsync` of files with a given suffix while armed.

mod common;

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{HookFs, Hooks};
use rustqueue_engine::{
    AckMode, Bytes, Consumer, ConsumerOptions, DeliveryError, Engine, EngineConfig, PublishError,
};

/// Which files fail to sync, and how often a sync was refused.
#[derive(Default)]
struct Rules {
    fail_sync_of: Option<&'static str>,
    refused: u64,
}

/// The real file system with injectable sync failures.
#[derive(Clone, Default)]
struct FaultFs {
    rules: Arc<Mutex<Rules>>,
}

impl Hooks for Mutex<Rules> {
    fn sync(&self, path: &Path) -> io::Result<()> {
        let mut r = self.lock().unwrap();
        match r.fail_sync_of {
            Some(s) if path.to_string_lossy().ends_with(s) => {
                r.refused += 1;
                Err(io::Error::other("injected sync failure"))
            }
            _ => Ok(()),
        }
    }
}

impl FaultFs {
    /// Every later `sync_data`/`sync_all` of a file whose name ends with `suffix` fails.
    fn fail_syncs_of(&self, suffix: &'static str) {
        self.rules.lock().unwrap().fail_sync_of = Some(suffix);
    }
    /// The disk works again.
    fn heal(&self) {
        self.rules.lock().unwrap().fail_sync_of = None;
    }
    fn refused(&self) -> u64 {
        self.rules.lock().unwrap().refused
    }
    fn fs(&self) -> Arc<HookFs<Mutex<Rules>>> {
        Arc::new(HookFs(self.rules.clone()))
    }
}

fn cfg(dir: &Path, ack_mode: AckMode) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        ack_mode,
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

async fn open(dir: &Path, fs: &FaultFs, ack_mode: AckMode) -> Engine {
    Engine::open_with_fs(cfg(dir, ack_mode), fs.fs())
        .await
        .unwrap()
}

async fn publish(e: &Engine, body: &'static str) -> Result<(), PublishError> {
    e.publish("t", vec![Bytes::from_static(body.as_bytes())], None)
        .await
}

/// The next delivery's body, or `None` if nothing comes within `wait`.
async fn receive(
    c: &mut Consumer,
    wait: Duration,
) -> Option<(rustqueue_engine::MessageId, String)> {
    let d = tokio::time::timeout(wait, c.next()).await.ok()??;
    Some((d.id, String::from_utf8(d.body.to_vec()).unwrap()))
}

/// Later publishes are refused as a storage fault although the disk works again, and health
/// names the fault; returns the fault text.
async fn assert_isolated(e: &Engine, fs: &FaultFs) -> String {
    fs.heal();
    let later = publish(e, "later").await;
    assert!(
        matches!(later, Err(PublishError::StorageFault(_))),
        "a publish after the fault was not refused: {later:?}"
    );
    let fault = e.health().storage_fault.expect("health reports the fault");
    assert_ne!(e.stats(None, None).health, "OK");
    fault
}

/// Shutting an isolated engine down must not hang, and a restart recovers normally.
async fn restart(e: Engine, dir: &Path) -> Engine {
    tokio::time::timeout(Duration::from_secs(10), e.shutdown())
        .await
        .expect("shutdown of an isolated engine finished");
    drop(e);
    let e = open(dir, &FaultFs::default(), AckMode::Durable).await;
    assert_eq!(e.health().storage_fault, None);
    publish(&e, "after restart")
        .await
        .expect("a restarted engine accepts publishes");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fdatasync_failure_during_a_durable_publish_isolates_storage() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::default();
    let e = open(dir.path(), &fs, AckMode::Durable).await;
    e.create_channel("t", "c").unwrap();
    publish(&e, "before").await.unwrap();

    fs.fail_syncs_of(".rqlog");
    let r = publish(&e, "lost").await;
    assert!(fs.refused() >= 1, "the segment fdatasync was attempted");
    match r {
        Err(PublishError::StorageFault(why)) => {
            assert!(why.to_string().contains("fdatasync"), "{why}")
        }
        other => panic!("a publish whose fdatasync failed answered {other:?}"),
    }
    let fault = assert_isolated(&e, &fs).await;
    assert!(
        fault.contains("fdatasync") && fault.contains(".rqlog"),
        "{fault}"
    );

    // Durable mode shows consumers only synced positions: the failed publish stays invisible.
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(10);
    let first = receive(&mut c, Duration::from_secs(10)).await;
    assert_eq!(first.map(|(_, b)| b).as_deref(), Some("before"));
    let next = receive(&mut c, Duration::from_millis(300)).await;
    assert_eq!(next, None, "an unsynced publish was delivered");
    drop(c);

    // The restart still has the acknowledged publish.
    let e = restart(e, dir.path()).await;
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(10);
    let first = receive(&mut c, Duration::from_secs(10)).await;
    assert_eq!(first.map(|(_, b)| b).as_deref(), Some("before"));
    drop(c);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fsync_failure_of_the_channel_wal_on_fin_isolates_storage() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::default();
    let e = open(dir.path(), &fs, AckMode::Durable).await;
    e.create_channel("t", "c").unwrap();
    publish(&e, "one").await.unwrap();
    publish(&e, "two").await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let (id, body) = receive(&mut c, Duration::from_secs(10)).await.unwrap();
    assert_eq!(body, "one");

    fs.fail_syncs_of(".wal");
    let fin = c.finish(id).await;
    assert!(fs.refused() >= 1, "the WAL fsync was attempted");
    match fin {
        Err(DeliveryError::StorageFault(why)) => assert!(why.to_string().contains(".wal"), "{why}"),
        other => panic!("a FIN whose WAL fsync failed answered {other:?}"),
    }
    let fault = assert_isolated(&e, &fs).await;
    assert!(fault.contains(".wal"), "{fault}");
    // Channel writes are refused too, not only publishes.
    if let Some((id, _)) = receive(&mut c, Duration::from_secs(2)).await {
        let fin = c.finish(id).await;
        assert!(
            matches!(fin, Err(DeliveryError::StorageFault(_))),
            "{fin:?}"
        );
    }
    drop(c);

    // After the restart "two" (never finished) is still there. Whether the failed FIN of
    // "one" took effect is undetermined (its WAL frame was written, the fsync failed): the
    // FIN was not acknowledged, so either outcome keeps at-least-once delivery.
    let e = restart(e, dir.path()).await;
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(10);
    let mut got = Vec::new();
    while let Some((_, body)) = receive(&mut c, Duration::from_secs(1)).await {
        got.push(body);
    }
    assert!(
        got.contains(&"two".to_string())
            && got
                .iter()
                .all(|b| ["one", "two", "after restart"].contains(&b.as_str())),
        "after the restart: {got:?}"
    );
    drop(c);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_background_sync_in_relaxed_mode_isolates_storage() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::default();
    let e = open(dir.path(), &fs, AckMode::NsqRelaxed).await;
    publish(&e, "before").await.unwrap();

    fs.fail_syncs_of(".rqlog");
    // Relaxed mode answers before the sync; the background sync (≤ 10 ms later) fails.
    publish(&e, "unsynced").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while e.health().storage_fault.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the failed background sync did not isolate storage"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(fs.refused() >= 1);
    let fault = assert_isolated(&e, &fs).await;
    assert!(fault.contains(".rqlog"), "{fault}");
    restart(e, dir.path()).await.shutdown().await;
}
