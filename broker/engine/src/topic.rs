//! A topic: its log, its channels and its publish group-commit worker.
//!
//! The worker is a two-stage pipeline (see [`publish_worker`]): appends under the log lock
//! never wait for an fsync, and one fdatasync outside the lock answers every durable request
//! appended before it began. In the relaxed modes requests are answered after the append and
//! the sync stage syncs by the relaxed thresholds.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::log::AppendBatch;
use rustqueue_storage::meta::Manifest;
use rustqueue_storage::{Store, TopicLog};
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::Channel;
use crate::config::AckMode;
use crate::error::{PublishError, StorageFault};
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
        let mut moved_by = 0;
        self.visible.send_if_modified(|cur| {
            moved_by = v.saturating_sub(*cur);
            if v > *cur {
                *cur = v;
                true
            } else {
                false
            }
        });
        if moved_by > 0 {
            for c in self.channel_list() {
                c.announce(moved_by);
            }
        }
    }
}

/// Settings the worker needs.
#[derive(Clone, Copy)]
pub(crate) struct GroupSettings {
    pub max_requests: usize,
    pub max_bytes: u64,
    pub ack_mode: AckMode,
    pub sync_messages: u64,
    pub sync_bytes: u64,
    pub sync_interval: Duration,
}

type Reply = oneshot::Sender<Result<(), PublishError>>;

/// What the append stage hands the sync stage.
enum Appended {
    /// Appended requests answered only once an fsync that started after their append is done.
    AwaitSync(Vec<Reply>),
    /// A relaxed append already answered: sync when a relaxed threshold is reached.
    Relaxed,
}

/// The per-topic commit pipeline; ends when the topic is dropped.
///
/// Two stages run side by side in this task. The append stage takes every request already
/// queued (up to 64 requests / 8 MiB, never waiting for more) and appends them in one lock
/// hold. The sync stage fdatasyncs the active segment and answers every durable request
/// appended before that fsync began. Appends go on while an fsync runs, so everything that
/// arrives during one fsync shares the next: a group is as large as the load makes it, and an
/// idle topic pays one fsync, with no batching delay.
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
    let (sync_tx, sync_rx) = mpsc::unbounded_channel();
    tokio::join!(
        append_stage(topic.clone(), store, set, rx, sync_tx),
        sync_stage(topic, set, sync_rx),
    );
    metrics.sub(Counter::PublishWorkers, 1);
    metrics.add(Counter::PublishWorkersRetired, 1);
}

async fn append_stage(
    topic: Weak<Topic>,
    store: Arc<Store>,
    set: GroupSettings,
    mut rx: mpsc::Receiver<PubReq>,
    sync_tx: mpsc::UnboundedSender<Appended>,
) {
    let mut carry: Option<PubReq> = None;
    loop {
        let first = match carry.take() {
            Some(r) => r,
            None => match rx.recv().await {
                Some(r) => r,
                None => break,
            },
        };
        let (group, bytes, rest) = collect_group(
            first,
            PubReq::bytes,
            || rx.try_recv().ok(),
            set.max_requests,
            set.max_bytes,
        );
        carry = rest;
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
        let relaxed = set.ack_mode != AckMode::Durable && !t.ephemeral;
        let n = group.len();
        let mut reqs = Vec::with_capacity(n);
        // Each reply, and whether it waits for an fsync (durable mode, or forced: dead letters).
        let mut replies = Vec::with_capacity(n);
        for r in group {
            replies.push((r.reply, !t.ephemeral && (!relaxed || r.force_sync)));
            reqs.push((r.bodies, r.available_at_ms));
        }
        // A plain append is a write to the page cache: done here, it saves a thread handoff per
        // group. One that seals a segment or reserves more ids fsyncs: that goes to the
        // blocking pool.
        let ids: u64 = reqs.iter().map(|(b, _)| b.len() as u64).sum();
        let needs_io = lock(&t.log).append_needs_io(bytes) || !store.ids_reserved(ids);
        let results = if needs_io {
            let t2 = t.clone();
            let store2 = store.clone();
            tokio::task::spawn_blocking(move || append(&t2, &store2, &reqs))
                .await
                .unwrap_or_else(|e| {
                    let e = PublishError::from(StorageFault::task("commit", &e));
                    vec![Err(e); n]
                })
        } else {
            append(&t, &store, &reqs)
        };
        t.publish_visibility();
        let answered = replies.iter().filter(|(_, after_sync)| !after_sync).count() as u64;
        if answered > 0 {
            m.add(Counter::GroupCommits, 1);
            m.add(Counter::GroupRequests, answered);
            m.raise(Counter::GroupMaxRequests, answered);
        }
        let mut appended = Vec::new();
        let mut relaxed_ok = false;
        for ((reply, after_sync), result) in replies.into_iter().zip(results) {
            match result {
                Ok(()) if after_sync => appended.push(reply),
                r => {
                    relaxed_ok |= !after_sync && r.is_ok();
                    let _ = reply.send(r);
                }
            }
        }
        if !appended.is_empty() {
            let _ = sync_tx.send(Appended::AwaitSync(appended));
        }
        if relaxed && relaxed_ok {
            let _ = sync_tx.send(Appended::Relaxed);
        }
    }
}

/// One append group: `first` plus whatever `next` yields without waiting, up to
/// `max_requests` requests and `max_bytes`. A request that would push the group past
/// `max_bytes` is returned to start the next group, so a request larger than the limit forms a
/// group of its own. Returns the group, its bytes and that carried request.
fn collect_group<T>(
    first: T,
    size: impl Fn(&T) -> u64,
    mut next: impl FnMut() -> Option<T>,
    max_requests: usize,
    max_bytes: u64,
) -> (Vec<T>, u64, Option<T>) {
    let mut bytes = size(&first);
    let mut group = vec![first];
    while group.len() < max_requests {
        let Some(r) = next() else { break };
        if bytes + size(&r) > max_bytes {
            return (group, bytes, Some(r));
        }
        bytes += size(&r);
        group.push(r);
    }
    (group, bytes, None)
}

async fn sync_stage(
    topic: Weak<Topic>,
    set: GroupSettings,
    mut rx: mpsc::UnboundedReceiver<Appended>,
) {
    let mut unsynced_since: Option<Instant> = None;
    let mut open = true;
    while open {
        let first = match unsynced_since {
            Some(at) => tokio::time::timeout_at((at + set.sync_interval).into(), rx.recv())
                .await
                .unwrap_or(Some(Appended::Relaxed)),
            None => rx.recv().await,
        };
        let Some(first) = first else { break };
        let mut waiting: Vec<Reply> = Vec::new();
        let mut relaxed = false;
        let mut absorb = |a: Appended| match a {
            Appended::AwaitSync(r) => waiting.extend(r),
            Appended::Relaxed => relaxed = true,
        };
        absorb(first);
        loop {
            match rx.try_recv() {
                Ok(a) => absorb(a),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let Some(t) = topic.upgrade() else {
            for r in waiting {
                let _ = r.send(Err(PublishError::ShuttingDown));
            }
            break;
        };
        let relaxed_due = relaxed && {
            let (msgs, bytes) = lock(&t.log).unsynced();
            msgs >= set.sync_messages
                || bytes >= set.sync_bytes
                || unsynced_since.is_some_and(|at| at.elapsed() >= set.sync_interval)
        };
        if waiting.is_empty() && !relaxed_due {
            if relaxed && unsynced_since.is_none() {
                unsynced_since = Some(Instant::now());
            }
            continue;
        }
        let m = &t.metrics;
        if !waiting.is_empty() {
            m.add(Counter::GroupCommits, 1);
            m.add(Counter::GroupRequests, waiting.len() as u64);
            m.raise(Counter::GroupMaxRequests, waiting.len() as u64);
        }
        let t2 = t.clone();
        let sync_began = Instant::now();
        let result = tokio::task::spawn_blocking(move || sync(&t2))
            .await
            .unwrap_or_else(|e| Err(StorageFault::task("sync", &e).into()));
        t.publish_visibility();
        for r in waiting {
            let _ = r.send(result.clone());
        }
        // What is still unsynced was appended after the fsync began.
        unsynced_since = (lock(&t.log).unsynced().0 > 0).then_some(sync_began);
    }
    if unsynced_since.is_some()
        && let Some(t) = topic.upgrade()
    {
        background_sync(&t).await;
    }
}

/// Appends every request (ids reserved first) in one hold of the log lock; no fsync.
fn append(t: &Topic, store: &Store, reqs: &[(Vec<Bytes>, i64)]) -> Vec<Result<(), PublishError>> {
    let m = &t.metrics;
    let waited = Instant::now();
    let mut log = lock(&t.log);
    let held = Instant::now();
    m.observe(Timer::PublishLockWait, held - waited);
    let results = reqs
        .iter()
        .map(|(bodies, avail)| {
            store
                .allocate_ids(bodies.len() as u64)
                .and_then(|first_id| {
                    log.append(&AppendBatch {
                        first_id,
                        bodies,
                        timestamp_ns: now_ns(),
                        available_at_ms: *avail,
                    })
                })
                .map(|_| ())
                .map_err(PublishError::from)
        })
        .collect();
    drop(log);
    m.since(Timer::PublishLockHold, held);
    results
}

/// fdatasyncs the active segment *outside* the log lock (appends and deliveries go on) and
/// marks durable everything appended before it began. A failure isolates storage.
fn sync(t: &Topic) -> Result<(), PublishError> {
    let Some(handle) = lock(&t.log).sync_handle() else {
        return Ok(());
    };
    let fsync = Instant::now();
    let synced = handle.sync();
    t.metrics.since(Timer::PublishFsync, fsync);
    lock(&t.log).mark_synced(synced?);
    Ok(())
}

/// A sync outside the commit pipeline (shutdown, the pipeline's last act); a failure isolates
/// storage.
pub(crate) async fn background_sync(t: &Arc<Topic>) {
    let t2 = t.clone();
    let _ = tokio::task::spawn_blocking(move || sync(&t2)).await;
    t.publish_visibility();
}

#[cfg(test)]
mod tests {
    use super::collect_group;

    const MIB: u64 = 1 << 20;

    /// Groups a queue of request sizes the way the append stage does, until it is drained.
    fn groups(sizes: &[u64], max_requests: usize, max_bytes: u64) -> Vec<Vec<u64>> {
        let mut queue = sizes.iter().copied();
        let mut carry = None;
        let mut out = Vec::new();
        while let Some(first) = carry.take().or_else(|| queue.next()) {
            let (g, bytes, rest) =
                collect_group(first, |s| *s, || queue.next(), max_requests, max_bytes);
            assert_eq!(
                bytes,
                g.iter().sum::<u64>(),
                "reported bytes are the group's"
            );
            out.push(g);
            carry = rest;
        }
        out
    }

    #[test]
    fn a_group_takes_at_most_64_requests_and_keeps_their_order() {
        let sizes: Vec<u64> = (1..=150).collect();
        let g = groups(&sizes, 64, 8 * MIB);
        assert_eq!(g.iter().map(Vec::len).collect::<Vec<_>>(), vec![64, 64, 22]);
        assert_eq!(g.concat(), sizes, "nothing lost, reordered or duplicated");
    }

    #[test]
    fn a_group_stops_before_8_mib_and_the_next_request_starts_the_next_group() {
        let g = groups(&[3 * MIB, 3 * MIB, 3 * MIB, MIB], 64, 8 * MIB);
        assert_eq!(g, vec![vec![3 * MIB, 3 * MIB], vec![3 * MIB, MIB]]);
        let exact = groups(&[4 * MIB, 4 * MIB, 1], 64, 8 * MIB);
        assert_eq!(
            exact,
            vec![vec![4 * MIB, 4 * MIB], vec![1]],
            "8 MiB exactly fits"
        );
    }

    #[test]
    fn an_oversized_request_forms_its_own_group() {
        let g = groups(&[100, 20 * MIB, 100, 100], 64, 8 * MIB);
        assert_eq!(g, vec![vec![100], vec![20 * MIB], vec![100, 100]]);
        let first = groups(&[20 * MIB, 1], 64, 8 * MIB);
        assert_eq!(first, vec![vec![20 * MIB], vec![1]]);
    }

    #[test]
    fn a_lone_request_is_a_group_at_once_without_waiting_for_more() {
        let mut polled = 0;
        let (g, _, rest) = collect_group(
            7u64,
            |s| *s,
            || {
                polled += 1;
                None
            },
            64,
            8 * MIB,
        );
        assert_eq!((g, rest, polled), (vec![7], None, 1));
    }
}
