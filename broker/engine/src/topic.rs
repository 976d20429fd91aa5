//! A topic: its log, its channels and its publish group-commit worker.
//!
//! The worker takes the first queued request and, only if more are already waiting, keeps
//! collecting for up to `group_window` (1 ms) or 64 requests / 8 MiB; a lone publish on an idle
//! topic is committed at once. A group is appended under the log lock, then fdatasynced
//! *outside* it (readers keep going), then every request in it is answered. In the relaxed
//! modes the worker replies after the append and syncs in the background.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::log::AppendBatch;
use rustqueue_storage::meta::Manifest;
use rustqueue_storage::{Store, TopicLog, crash_failpoint};
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::Channel;
use crate::config::AckMode;
use crate::error::PublishError;
use crate::metrics::{Counter, EngineMetrics, Timer};
use crate::types::now_ns;

/// A publish waiting for its group commit.
pub(crate) struct PubReq {
    pub bodies: Vec<Bytes>,
    pub available_at_ms: i64,
    /// Sync before replying even in relaxed modes (dead letters).
    pub force_sync: bool,
    /// When it was queued (group-commit wait).
    pub queued: Instant,
    pub reply: oneshot::Sender<Result<(), PublishError>>,
}

impl PubReq {
    fn bytes(&self) -> u64 {
        rustqueue_storage::record::payload_len(self.bodies.iter().map(Bytes::len)) + 48
    }
}

pub(crate) struct Topic {
    pub name: String,
    pub ephemeral: bool,
    pub log: Mutex<TopicLog>,
    pub manifest: Mutex<Manifest>,
    pub channels: RwLock<BTreeMap<String, Arc<Channel>>>,
    pub paused: AtomicBool,
    pub deleted: AtomicBool,
    /// Highest position consumers may see.
    pub visible: watch::Sender<u64>,
    pub pub_tx: mpsc::Sender<PubReq>,
    pub ack_mode: AckMode,
    pub metrics: Arc<EngineMetrics>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Topic {
    pub fn channel(&self, name: &str) -> Option<Arc<Channel>> {
        self.channels
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn channel_list(&self) -> Vec<Arc<Channel>> {
        self.channels
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn visible_through(&self) -> u64 {
        *self.visible.borrow()
    }

    /// Recomputes what consumers may see and wakes them if it moved.
    pub fn publish_visibility(&self) {
        let (durable, appended) = {
            let log = lock(&self.log);
            (log.durable_position(), log.next_position() - 1)
        };
        let v = if self.ack_mode == AckMode::NsqRelaxed || self.ephemeral {
            appended
        } else {
            durable
        };
        let moved = self.visible.send_if_modified(|cur| {
            if v > *cur {
                *cur = v;
                true
            } else {
                false
            }
        });
        if moved {
            for c in self.channel_list() {
                c.notify.notify_waiters();
            }
        }
    }
}

/// Settings the worker needs.
#[derive(Clone, Copy)]
pub(crate) struct GroupSettings {
    pub max_requests: usize,
    pub max_bytes: u64,
    pub window: Duration,
    pub ack_mode: AckMode,
    pub sync_messages: u64,
    pub sync_bytes: u64,
    pub sync_interval: Duration,
}

/// The per-topic group-commit loop; ends when the topic is dropped.
pub(crate) async fn publish_worker(
    topic: Weak<Topic>,
    store: Arc<Store>,
    set: GroupSettings,
    rx: mpsc::Receiver<PubReq>,
) {
    let Some(metrics) = topic.upgrade().map(|t| t.metrics.clone()) else {
        return;
    };
    metrics.add(Counter::PublishWorkers, 1);
    group_commit_loop(topic, store, set, rx).await;
    metrics.sub(Counter::PublishWorkers, 1);
    metrics.add(Counter::PublishWorkersRetired, 1);
}

async fn group_commit_loop(
    topic: Weak<Topic>,
    store: Arc<Store>,
    set: GroupSettings,
    mut rx: mpsc::Receiver<PubReq>,
) {
    let mut carry: Option<PubReq> = None;
    let mut unsynced_since: Option<Instant> = None;
    loop {
        let first = match carry.take() {
            Some(r) => r,
            None => match unsynced_since {
                Some(t) => {
                    match tokio::time::timeout_at((t + set.sync_interval).into(), rx.recv()).await {
                        Ok(Some(r)) => r,
                        Ok(None) => break,
                        Err(_) => {
                            let Some(t) = topic.upgrade() else { break };
                            background_sync(&t).await;
                            unsynced_since = None;
                            continue;
                        }
                    }
                }
                None => match rx.recv().await {
                    Some(r) => r,
                    None => break,
                },
            },
        };
        let started = Instant::now();
        let mut bytes = first.bytes();
        let mut group = vec![first];
        let mut arriving = false;
        while group.len() < set.max_requests {
            let next = match rx.try_recv() {
                Ok(r) => {
                    arriving = true;
                    r
                }
                Err(_) if arriving => {
                    match tokio::time::timeout_at((started + set.window).into(), rx.recv()).await {
                        Ok(Some(r)) => r,
                        _ => break,
                    }
                }
                Err(_) => break,
            };
            if bytes + next.bytes() > set.max_bytes {
                carry = Some(next);
                break;
            }
            bytes += next.bytes();
            group.push(next);
        }
        let Some(t) = topic.upgrade() else {
            for r in group {
                let _ = r.reply.send(Err(PublishError::ShuttingDown));
            }
            break;
        };
        let m = &t.metrics;
        let commit_start = Instant::now();
        for r in &group {
            m.observe(
                Timer::GroupCommitWait,
                commit_start.saturating_duration_since(r.queued),
            );
        }
        m.add(Counter::GroupCommits, 1);
        m.add(Counter::GroupRequests, group.len() as u64);
        m.raise(Counter::GroupMaxRequests, group.len() as u64);
        let relaxed = set.ack_mode != AckMode::Durable && !t.ephemeral;
        let force = group.iter().any(|r| r.force_sync);
        let sync_now = !t.ephemeral && (!relaxed || force);
        let (replies, reqs): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|r| (r.reply, (r.bodies, r.available_at_ms)))
            .unzip();
        let t2 = t.clone();
        let store2 = store.clone();
        let results = tokio::task::spawn_blocking(move || commit(&t2, &store2, &reqs, sync_now))
            .await
            .unwrap_or_else(|e| {
                vec![
                    Err(PublishError::StorageFault(format!(
                        "commit task failed: {e}"
                    )));
                    1
                ]
            });
        t.publish_visibility();
        let n_ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        for (i, reply) in replies.into_iter().enumerate() {
            let r = results.get(i).cloned().unwrap_or_else(|| {
                results
                    .first()
                    .cloned()
                    .unwrap_or(Err(PublishError::ShuttingDown))
            });
            let _ = reply.send(r);
        }
        if relaxed && !sync_now && n_ok > 0 {
            let (msgs, bytes) = lock(&t.log).unsynced();
            if msgs >= set.sync_messages || bytes >= set.sync_bytes {
                background_sync(&t).await;
                unsynced_since = None;
            } else if unsynced_since.is_none() {
                unsynced_since = Some(Instant::now());
            }
        } else if sync_now {
            unsynced_since = None;
        }
    }
    if unsynced_since.is_some()
        && let Some(t) = topic.upgrade()
    {
        background_sync(&t).await;
    }
}

/// Appends every request (ids reserved first), then fdatasyncs outside the log lock.
fn commit(
    t: &Topic,
    store: &Store,
    reqs: &[(Vec<Bytes>, i64)],
    sync: bool,
) -> Vec<Result<(), PublishError>> {
    let mut results = Vec::with_capacity(reqs.len());
    let m = &t.metrics;
    let handle = {
        let waited = Instant::now();
        let mut log = lock(&t.log);
        let held = Instant::now();
        m.observe(Timer::PublishLockWait, held - waited);
        for (bodies, avail) in reqs {
            let r = store
                .allocate_ids(bodies.len() as u64)
                .and_then(|first_id| {
                    log.append(&AppendBatch {
                        first_id,
                        bodies,
                        timestamp_ns: now_ns(),
                        available_at_ms: *avail,
                    })
                });
            results.push(r.map(|_| ()).map_err(PublishError::from));
        }
        let handle = if sync { log.sync_handle() } else { None };
        drop(log);
        m.since(Timer::PublishLockHold, held);
        handle
    };
    if let Some((file, path, through)) = handle {
        if let Err(e) = store.fault().check() {
            return results
                .into_iter()
                .map(|_| Err(PublishError::StorageFault(e.to_string())))
                .collect();
        }
        let fsync = Instant::now();
        let synced = file.sync_data();
        m.since(Timer::PublishFsync, fsync);
        if let Err(e) = synced {
            let msg = format!("fdatasync {}: {e}", path.display());
            store.fault().trip(msg.clone());
            return results
                .into_iter()
                .map(|_| Err(PublishError::StorageFault(msg.clone())))
                .collect();
        }
        crash_failpoint("publish_after_fsync_before_reply");
        lock(&t.log).mark_durable(through);
    }
    results
}

/// Relaxed-mode background fdatasync; a failure isolates storage.
pub(crate) async fn background_sync(t: &Arc<Topic>) {
    let t2 = t.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let mut log = lock(&t2.log);
        let fsync = Instant::now();
        let _ = log.sync();
        t2.metrics.since(Timer::PublishFsync, fsync);
    })
    .await;
    t.publish_visibility();
}
