//! A topic: its log, its channels and its publish group-commit worker.
//!
//! The worker is a two-stage pipeline (see [`publish_worker`]): appends under the log lock
//! never wait for an fsync, and one fdatasync outside the lock answers every durable request
//! appended before it began. In the relaxed modes requests are answered after the append and
//! the sync stage syncs by the relaxed thresholds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::AppendBatch;
use rustqueue_storage::Manifest;
use rustqueue_storage::{IndexWrite, Store, TopicLog, ZeroWrite};
use tokio::sync::{mpsc, oneshot, watch};

use crate::channel::Channel;
use crate::config::AckMode;
use crate::error::{PublishError, StorageFault};
use crate::group::{Collector, Policy, answer};
use crate::lock::{lock, read};
use crate::metrics::{Counter, EngineMetrics, Timer};
use crate::sync_thread::SyncHome;
use crate::trace::CommitTrace;
use crate::types::now_ns;

/// A publish waiting for its group commit.
pub(crate) struct PubReq {
    pub bodies: Vec<Bytes>,
    pub available_at_ms: i64,
    /// Sync before replying even in relaxed modes (dead letters).
    pub force_sync: bool,
    /// Its publisher sent it within [`RETURN_WINDOW`] of its previous ack: it publishes in a
    /// loop, and will be back as soon as this one is answered.
    pub returning: bool,
    /// When it was queued (group-commit wait).
    pub queued: Instant,
    pub reply: Reply,
    /// Where a traced publish's commit steps are recorded (`None`: not traced).
    pub trace: Option<Arc<CommitTrace>>,
}

impl PubReq {
    fn bytes(&self) -> u64 {
        request_bytes(&self.bodies)
    }
}

/// What a publish of `bodies` counts against a group's byte limit and the active segment's
/// room: its records and a request's fixed overhead.
fn request_bytes(bodies: &[Bytes]) -> u64 {
    rustqueue_storage::payload_len(bodies.iter().map(Bytes::len)) + 48
}

/// Counts a publish group of `answered` requests.
fn count_group(m: &EngineMetrics, answered: u64) {
    m.add(Counter::GroupCommits, 1);
    m.add(Counter::GroupRequests, answered);
    m.raise(Counter::GroupMaxRequests, answered);
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
    /// The commit pipeline's settings (the ack mode among them), which the inline append (see
    /// [`Topic::try_publish_inline`]) follows too.
    pub settings: GroupSettings,
    /// Where appends tell the sync stage what waits for an fsync.
    pub(crate) handoff: Handoff,
    /// Asks the topic's visibility task to write what appends left unwritten and to move the
    /// visible position (capacity 1: a request already pending covers every append made
    /// before that task runs; see [`visibility_worker`]). Only `nsq_relaxed` topics, whose
    /// consumers see appended records, have the task; `write_ack` ones leave both to the sync.
    pub(crate) visibility_tx: Option<mpsc::Sender<()>>,
    pub metrics: Arc<EngineMetrics>,
    /// Writes into the topic's files that appends left for after their lock hold (sealed
    /// segments' indexes, zeros ahead of the tail), still running or not yet awaited (see
    /// [`spawn_file_jobs`]).
    pub file_jobs: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Topic {
    /// Waits until every index or zero write started so far has finished (engine shutdown and
    /// topic deletion: nothing may write into the directory after them).
    pub(crate) async fn file_writes_done(&self) {
        let jobs = std::mem::take(&mut *lock(&self.file_jobs));
        for job in jobs {
            let _ = job.await;
        }
    }

    pub fn channel(&self, name: &str) -> Option<Arc<Channel>> {
        read(&self.channels).get(name).cloned()
    }

    pub fn channel_list(&self) -> Vec<Arc<Channel>> {
        read(&self.channels).values().cloned().collect()
    }

    /// Publishes through the topic's group-commit worker; resolves when the batch is
    /// acknowledged per the ack mode (`force_sync`: after its fsync in every mode).
    pub(crate) async fn publish(
        &self,
        bodies: Vec<Bytes>,
        available_at_ms: i64,
        force_sync: bool,
        returning: bool,
        trace: Option<Arc<CommitTrace>>,
    ) -> Result<(), PublishError> {
        let (tx, rx) = oneshot::channel();
        self.pub_tx
            .send(PubReq {
                bodies,
                available_at_ms,
                force_sync,
                returning,
                queued: Instant::now(),
                reply: tx,
                trace,
            })
            .await
            .map_err(|_| PublishError::ShuttingDown)?;
        rx.await.map_err(|_| PublishError::ShuttingDown)?
    }

    /// Appends a publish on the caller's task when nothing needs waiting for: a relaxed mode
    /// (`write_ack`, `nsq_relaxed`: answered after the append), no publish queued for the
    /// commit pipeline, and an append that writes only the page cache (no segment to seal, ids
    /// already reserved). It is the append stage's work for a group of one, without the two
    /// task hand-offs (to the stage and back) that otherwise cost a thread wake-up each on a
    /// loaded runtime. `Err` gives the bodies back for the pipeline ([`Topic::publish`]).
    ///
    /// What consumers see moves as before: in `write_ack` only after the fdatasync (the sync
    /// stage moves it). In `nsq_relaxed` every append is visible, but moving the position here,
    /// per append, would wake a consumer per message, each taking one message per look; the
    /// topic's visibility task moves it instead, once for every append made before it runs
    /// ([`visibility_worker`]). Ephemeral topics keep the pipeline.
    ///
    /// Ordering is unchanged: a publisher waits for each answer before its next publish, and
    /// publishes of different publishers were never ordered.
    pub(crate) fn try_publish_inline(
        self: &Arc<Self>,
        store: &Store,
        bodies: Vec<Bytes>,
        available_at_ms: i64,
        trace: Option<&CommitTrace>,
    ) -> Result<Result<(), PublishError>, Vec<Bytes>> {
        if self.settings.ack_mode == AckMode::Durable
            || self.ephemeral
            || self.pub_tx.capacity() < self.pub_tx.max_capacity()
        {
            return Err(bodies);
        }
        let bytes = request_bytes(&bodies);
        let ids = bodies.len() as u64;
        let waited = Instant::now();
        let reqs = [(bodies, available_at_ms)];
        let Some((mut results, view)) = append_if(self, store, &reqs, |log| {
            !log.append_needs_io(bytes) && store.ids_reserved(ids)
        }) else {
            let [(bodies, _)] = reqs;
            return Err(bodies);
        };
        let result = results.pop().unwrap_or(Err(PublishError::ShuttingDown));
        let m = &self.metrics;
        let appended_at = Instant::now();
        m.observe(Timer::GroupCommitWait, Duration::ZERO);
        if result.is_ok() {
            if self.settings.ack_mode == AckMode::NsqRelaxed {
                // Asked already when the append left its record unwritten; a request
                // pending covers this append too.
                if !view.unwritten {
                    self.ask_visibility();
                }
            } else {
                // `write_ack` shows only synced positions: this moves nothing unless a relaxed
                // sync has just completed, which it then shows before the sync stage's task is
                // back on a thread to do so. A build that left it to the sync stage (and read
                // the sync thresholds under the append's lock hold, as every append now does)
                // read 5-11 % less PUB+FIN `write_ack` throughput, three rounds alternating
                // (docs/benchmarks.md, notes).
                self.show(view);
            }
            count_group(m, 1);
            m.add(Counter::InlineAppends, 1);
            self.handoff.relaxed(&view, &self.settings);
        }
        if let Some(trace) = trace {
            trace.appended(waited, appended_at, 1);
        }
        Ok(result)
    }

    pub fn visible_through(&self) -> u64 {
        *self.visible.borrow()
    }

    /// Asks the topic's visibility task to run (`nsq_relaxed`; a request already pending
    /// covers this one). Other topics have no task, and asking does nothing.
    fn ask_visibility(&self) {
        if let Some(tx) = &self.visibility_tx {
            let _ = tx.try_send(());
        }
    }

    /// Writes what appends left unwritten ([`TopicLog::defer_appends`]), then recomputes
    /// what consumers may see and wakes them if it moved. A failed write isolates storage,
    /// which fails what needs those records later (a sync, a read).
    pub fn publish_visibility(&self) {
        let view = {
            let mut log = lock(&self.log);
            let _ = log.write_unwritten();
            LogView::of(&log)
        };
        self.show(view);
    }

    /// [`Topic::publish_visibility`] from a view of the log already read in a hold of its lock
    /// (an append's, a sync's): the position only ever moves forward, and whatever moves the
    /// log later (a later append, a sync) shows its own view.
    fn show(&self, view: LogView) {
        if self.reveal(view) {
            self.announce();
        }
    }

    /// Moves the position consumers may see to what `view` allows, without waking them;
    /// `true` if it moved (then [`Topic::announce`] wakes them).
    fn reveal(&self, view: LogView) -> bool {
        let v = if self.settings.ack_mode == AckMode::NsqRelaxed || self.ephemeral {
            view.appended
        } else {
            view.durable
        };
        self.visible.send_if_modified(|cur| {
            if v > *cur {
                *cur = v;
                true
            } else {
                false
            }
        })
    }

    /// Wakes the consumers of every channel to look at the visible position again.
    fn announce(&self) {
        for c in self.channel_list() {
            c.announce();
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

type Reply = crate::group::Reply<PublishError>;

/// What the append stage hands the sync stage.
pub(crate) enum Appended {
    /// Appended requests answered only once an fsync that started after their append is done,
    /// how many of them are from returning publishers, and the commit records of the traced
    /// ones (empty, so never allocated, while nothing is traced).
    AwaitSync(Vec<Reply>, usize, Vec<Arc<CommitTrace>>),
    /// A relaxed append already answered: sync when a relaxed threshold is reached.
    Relaxed,
}

/// The per-topic commit pipeline; ends when the topic is dropped.
///
/// Two stages run side by side, each in its own task. The append stage takes every request
/// already queued (a [`Collector`] group: up to 64 requests / 8 MiB, never waiting for more)
/// and appends them in one lock hold. The sync stage fdatasyncs the active segment and answers
/// every durable request appended before that fsync began. Appends go on while an fsync runs, so everything that
/// arrives during one fsync shares the next: a group is as large as the load makes it, and an
/// idle topic pays one fsync, with no batching delay.
pub(crate) async fn publish_worker(
    topic: Weak<Topic>,
    store: Arc<Store>,
    set: GroupSettings,
    rx: mpsc::Receiver<PubReq>,
    sync_rx: mpsc::UnboundedReceiver<Appended>,
) {
    let Some((metrics, ephemeral)) = topic.upgrade().map(|t| (t.metrics.clone(), t.ephemeral))
    else {
        return;
    };
    metrics.add(Counter::PublishWorkers, 1);
    // Apart from the appends: a durable group's fdatasync blocks the sync stage's thread (see
    // [`sync_blocking`]), never the appends queued behind it. A durable topic's stage runs
    // while it has something to sync, on a thread of its own where it can
    // ([`crate::sync_thread`]); a relaxed topic's, which syncs by its thresholds and its
    // interval, runs for the topic's life as a task.
    if set.ack_mode == AckMode::Durable && !ephemeral {
        let home = SyncHome::new(topic.clone(), set, sync_rx);
        append_stage(topic, store, set, rx, Some(&home)).await;
        home.stopped().await;
    } else {
        let syncing = tokio::spawn(sync_stage(topic.clone(), set, sync_rx, None));
        append_stage(topic, store, set, rx, None).await;
        let _ = syncing.await;
    }
    metrics.sub(Counter::PublishWorkers, 1);
    metrics.add(Counter::PublishWorkersRetired, 1);
}

async fn append_stage(
    topic: Weak<Topic>,
    store: Arc<Store>,
    set: GroupSettings,
    rx: mpsc::Receiver<PubReq>,
    home: Option<&Arc<SyncHome>>,
) {
    let mut groups = Collector::new(
        rx,
        Policy {
            max_requests: set.max_requests,
            max_bytes: set.max_bytes,
            window: None,
        },
    );
    while let Some((group, bytes)) = groups.next_group(|r| (1, r.bytes()), |_| false).await {
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
        let mut returning = 0;
        let mut traced = Vec::new();
        for r in group {
            let after_sync = !t.ephemeral && (!relaxed || r.force_sync);
            returning += usize::from(after_sync && r.returning);
            replies.push((r.reply, after_sync));
            reqs.push((r.bodies, r.available_at_ms));
            if let Some(trace) = r.trace {
                traced.push((trace, after_sync));
            }
        }
        // A plain append is a write to the page cache: done here, it saves a thread handoff per
        // group. One that seals a segment or reserves more ids fsyncs: that goes to the
        // blocking pool.
        let ids: u64 = reqs.iter().map(|(b, _)| b.len() as u64).sum();
        let inline = append_if(&t, &store, &reqs, |log| {
            !log.append_needs_io(bytes) && store.ids_reserved(ids)
        });
        let (results, view) = match inline {
            Some(done) => done,
            None => {
                let t2 = t.clone();
                let store2 = store.clone();
                tokio::task::spawn_blocking(move || append(&t2, &store2, &reqs))
                    .await
                    .unwrap_or_else(|e| {
                        let e = PublishError::from(StorageFault::task("commit", &e));
                        (vec![Err(e); n], LogView::of(&lock(&t.log)))
                    })
            }
        };
        let appended_at = Instant::now();
        t.show(view);
        let answered = replies.iter().filter(|(_, after_sync)| !after_sync).count() as u64;
        if answered > 0 {
            count_group(m, answered);
        }
        let mut synced_traces = Vec::new();
        for (trace, after_sync) in traced {
            trace.appended(commit_start, appended_at, n);
            if after_sync {
                synced_traces.push(trace);
            }
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
            let _ = t
                .handoff
                .tx
                .send(Appended::AwaitSync(appended, returning, synced_traces));
            if returning > 0 {
                // After the send: once the sync stage sees the count, the requests are queued.
                t.handoff.returns.handed(returning);
            }
            if let Some(home) = home {
                home.wake();
            }
        }
        if relaxed && relaxed_ok {
            t.handoff.relaxed(&view, &set);
        }
    }
}

/// How many turns the visibility task gives up before it moves the position: each lets the
/// publishers already runnable append first. One turn gave consumers about 17 messages a look
/// in PUB+FIN 16/16 1 KiB, three give more, for 6 % more throughput and 7 % less broker CPU
/// per message. Twelve give 31-36 messages a look at 100 B (three: 22-29) and cut the broker's
/// CPU per message from 18.2 to 14.0 µs there, 1.09x nsqd's throughput against 1.00x over
/// nine alternating rounds, with 1 KiB, `mixed` and the 1,000 msg/s p99 unchanged or better
/// (docs/benchmarks.md, notes). Each turn costs a scheduler pass, microseconds; with nothing
/// else runnable (low load) the turns come straight back, and the publish acks never wait
/// for them.
const VISIBILITY_YIELDS: usize = 12;

/// Writes an `nsq_relaxed` topic's records that appends left in memory
/// ([`rustqueue_storage::TopicLog::defer_appends`]) and moves its visible position for the
/// inline appends ([`Topic::try_publish_inline`]), once per request however many appends it
/// covers: under load, the appends made while this task waited its turn share one write and
/// become visible together, and the woken consumers take them in one look each. Ends with the
/// topic (its sender is the topic's).
///
/// A `write_ack` topic has no such task: its consumers see only synced records, and the sync
/// writes what waits before its fdatasync. Given this task, it paid the twelve turns per lone
/// append: 147-156 against 117-121 µs of broker CPU a message at 1,000 msg/s (docs/benchmarks.md,
/// notes).
pub(crate) async fn visibility_worker(topic: Weak<Topic>, mut rx: mpsc::Receiver<()>) {
    while rx.recv().await.is_some() {
        // Behind the tasks already runnable (under load, publishers about to append): the
        // position then moves past their appends too, and a consumer takes them in one look.
        for _ in 0..VISIBILITY_YIELDS {
            tokio::task::yield_now().await;
        }
        let Some(t) = topic.upgrade() else { break };
        t.publish_visibility();
    }
}

/// The appenders' side of the hand-over to the sync stage (the append stage's and the inline
/// appends'). The topic holds it, so the sync stage ends once the topic is gone.
pub(crate) struct Handoff {
    pub tx: mpsc::UnboundedSender<Appended>,
    /// Set once the sync stage was told of a relaxed append not yet synced; cleared by the sync
    /// stage before each relaxed sync starts.
    pub told: AtomicBool,
    /// How many returning durable requests were handed over: what the sync stage's hold
    /// sleeps on ([`sync_stage`]).
    pub returns: Returns,
}

/// A running count of the returning durable requests the append stage has handed to the sync
/// stage, which the sync stage sleeps on while it holds an fsync for them.
///
/// The hold used to spin on `yield_now` for up to [`RETURN_WINDOW`]: tokio's timers have
/// millisecond grain, far coarser than the window, and the mpsc the requests come by has no
/// deadline. A spinning stage kept a core busy for most of every durable cycle (about 530
/// turns a hold on a loaded machine). A condition variable has both: the count that ends the
/// hold wakes the stage at once, and the window ends it to the microsecond.
#[derive(Default)]
pub(crate) struct Returns {
    state: Mutex<ReturnsState>,
    reached: Condvar,
}

#[derive(Default)]
struct ReturnsState {
    handed: u64,
    /// The count the sync stage sleeps until (`None`: it is not asleep).
    goal: Option<u64>,
}

impl Returns {
    /// Counts `n` returning requests the caller has just sent on the hand-over channel, and
    /// wakes the sync stage if that reaches the count it sleeps until (only then: a wake-up is
    /// a syscall).
    fn handed(&self, n: usize) {
        let mut st = lock(&self.state);
        st.handed += n as u64;
        if st.goal.is_some_and(|goal| st.handed >= goal) {
            st.goal = None;
            self.reached.notify_one();
        }
    }

    /// Returning requests handed over so far.
    fn count(&self) -> u64 {
        lock(&self.state).handed
    }

    /// Blocks the calling thread until `goal` returning requests have been handed over, or
    /// until `until`, whichever comes first.
    fn wait(&self, goal: u64, until: Instant) {
        let mut st = lock(&self.state);
        while st.handed < goal {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st.goal = Some(goal);
            // A poisoned lock is used as is, as `lock` does.
            st = self
                .reached
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        st.goal = None;
    }
}

impl Handoff {
    /// Tells the sync stage of a relaxed append when it needs to know: the first one since its
    /// last sync (that starts the interval), and any that reaches a message or byte threshold.
    /// A relaxed group costs no wake-up of the sync stage otherwise.
    ///
    /// The thresholds are read from the append's own view of the log, not under a second hold
    /// of its lock: an append that crosses one sees it crossed, and so does every append after
    /// it until the sync stage syncs (which reads them again itself before it does).
    fn relaxed(&self, view: &LogView, set: &GroupSettings) {
        let first = !self.told.swap(true, Ordering::SeqCst);
        let due = first || {
            let (msgs, bytes) = view.unsynced;
            msgs >= set.sync_messages || bytes >= set.sync_bytes
        };
        if due {
            let _ = self.tx.send(Appended::Relaxed);
        }
    }
}

/// How long after its previous ack a publisher's next request counts as returning (see
/// [`PubReq::returning`]), and how long after an fsync answered its group the sync stage holds
/// the next fsync for the returning publishers it answered: an ack's way to the client, the
/// next request's way in and its append, on a loaded machine.
pub(crate) const RETURN_WINDOW: Duration = Duration::from_micros(400);

/// The sync stage holds an fdatasync for returning publishers only while syncs carry less than
/// this on average ([`TopicLog::sync_group_bytes`]). The hold saves an fdatasync's fixed cost
/// (its flush and journal commit, about 100-250 µs on the benchmark hosts) by letting the disk
/// idle while the stragglers come back. Once a group's data takes about as long to write as
/// that fixed cost, two groups in turn (one syncing, the other being received and appended)
/// keep the disk busier than one held group. On a disk that syncs 562 MiB/s (docs/benchmarks.md,
/// `disk`) that is 64 KiB: 111 µs. At 256 KiB (tuned on a 1.1 GiB/s disk) `mixed` durable (two
/// writers of MPUB 64 x 1 KiB, groups of one or two) waited on every hold and read 0.39x nsqd
/// against 0.46x at 64 KiB, ten rounds each, alternating (docs/benchmarks.md, notes). PUB+FIN
/// 1 KiB (16 KiB groups, held) and 16 publishers of MPUB 64 x 1 KiB (about 500 KiB groups, not
/// held) are on the same side of both bounds.
const HOLD_MAX_GROUP_BYTES: u64 = 64 * 1024;

/// The per-topic sync stage: one fdatasync for every durable request appended before it began,
/// and the relaxed syncs by their thresholds.
///
/// Publishers that each wait for their ack and publish again at once would otherwise fall
/// into alternation: one request arrives during the other's fsync, waits for it, then gets an
/// fsync of its own, and every fsync carries one request. So the stage counts the returning
/// publishers each fsync answered, and holds the next fsync (until [`RETURN_WINDOW`] after
/// that answer at most) until as many returning requests have come back: the group then shares
/// one fsync and stays in step. A request from a publisher that is not looping (a lone one at
/// low load, a PUB now and then) never waits, and neither does anything once the window closed.
/// Large groups are not held ([`HOLD_MAX_GROUP_BYTES`]): there two groups in turn keep the disk
/// busier than one. The stage sleeps through the hold on its own thread ([`Returns::wait`]),
/// woken by the append stage when the last of them is handed over.
///
/// With `idle` set, the stage stops once it has waited that long for a hand-over with nothing
/// to sync or answer, and gives its receiver back ([`crate::sync_thread`]); `None` when it
/// ended for good (the topic is gone, or its appenders are).
pub(crate) async fn sync_stage(
    topic: Weak<Topic>,
    set: GroupSettings,
    mut rx: mpsc::UnboundedReceiver<Appended>,
    idle: Option<Duration>,
) -> Option<mpsc::UnboundedReceiver<Appended>> {
    let mut unsynced_since: Option<Instant> = None;
    let mut open = true;
    // What arrived during the last fsync, taken into the next group.
    let mut carried = Group::default();
    // When the last fsync that answered returning publishers finished, and the count of
    // returning requests handed over (`Returns`) that their return brings the hold to.
    let mut expected: Option<(Instant, u64)> = None;
    // Requests appended before the append stage ended are still synced and answered.
    while open || !carried.is_empty() {
        let mut group = std::mem::take(&mut carried);
        if group.is_empty() {
            let first = match unsynced_since {
                Some(at) => tokio::time::timeout_at((at + set.sync_interval).into(), rx.recv())
                    .await
                    .unwrap_or(Some(Appended::Relaxed)),
                None => match idle {
                    Some(idle) => match tokio::time::timeout(idle, rx.recv()).await {
                        Ok(first) => first,
                        Err(_) => return Some(rx),
                    },
                    None => rx.recv().await,
                },
            };
            let Some(first) = first else { break };
            group.absorb(first);
        }
        open = group.absorb_queued(&mut rx);
        let Some(t) = topic.upgrade() else {
            for r in group.waiting {
                let _ = r.send(Err(PublishError::ShuttingDown));
            }
            break;
        };
        if let Some((answered_at, goal)) = expected
            && !group.waiting.is_empty()
            && open
        {
            let until = answered_at + RETURN_WINDOW;
            if t.handoff.returns.count() < goal && Instant::now() < until {
                t.metrics.add(Counter::SyncHolds, 1);
                let t2 = t.clone();
                let _ = sync_blocking(move || t2.handoff.returns.wait(goal, until)).await;
            }
            open = group.absorb_queued(&mut rx);
        }
        let relaxed_due = group.relaxed && {
            let (msgs, bytes) = lock(&t.log).unsynced();
            msgs >= set.sync_messages
                || bytes >= set.sync_bytes
                || unsynced_since.is_some_and(|at| at.elapsed() >= set.sync_interval)
        };
        if group.waiting.is_empty() && !relaxed_due {
            if group.relaxed && unsynced_since.is_none() {
                unsynced_since = Some(Instant::now());
            }
            continue;
        }
        let m = &t.metrics;
        let answered = group.waiting.len();
        if answered > 0 {
            count_group(m, answered as u64);
        }
        // A relaxed append from here on may not be covered by this sync: the next one tells us
        // (a durable group's sync also covers the relaxed appends before it).
        t.handoff.told.store(false, Ordering::SeqCst);
        let t2 = t.clone();
        let sync_began = Instant::now();
        let result = if answered > 0 {
            sync_blocking(move || sync(&t2)).await
        } else {
            tokio::task::spawn_blocking(move || sync(&t2)).await
        }
        .unwrap_or_else(|e| Err(StorageFault::task("sync", &e).into()));
        let synced_at = Instant::now();
        for trace in &group.traced {
            trace.synced(sync_began, synced_at, answered);
        }
        let (view, group_bytes) = {
            let log = lock(&t.log);
            (LogView::of(&log), log.sync_group_bytes())
        };
        // The position moves before the answers, so a publisher that has its answer finds its
        // message in the topic's stats and in what a consumer may take. The consumers are woken
        // after the publishers: the next fdatasync waits for the answered publishers to come
        // back (the hold), and woken first they get the cores first, while the deliveries wait
        // a few microseconds behind them. Waking the consumers first read 35.2k against 38.6k
        // msg/s in PUB+FIN 16/16 1 KiB durable, at 25.8 against 24.0 µs of broker CPU a
        // message, with 100 B unchanged (ten rounds alternating; docs/benchmarks.md, notes).
        let moved = t.reveal(view);
        answer(group.waiting, &result);
        if moved {
            t.announce();
        }
        // What is still unsynced was appended after the fsync began.
        let unsynced = view.unsynced.0;
        unsynced_since = (unsynced > 0).then_some(sync_began);
        if answered > 0 {
            // The hold waits for as many returning requests as this group answered, counted
            // from here; groups whose data dominates their fdatasync are not held.
            let hold = group.returning > 0 && group_bytes < HOLD_MAX_GROUP_BYTES;
            expected = hold.then(|| {
                let handed = t.handoff.returns.count();
                (Instant::now(), handed + group.returning as u64)
            });
            open &= carried.absorb_queued(&mut rx);
        }
    }
    if unsynced_since.is_some()
        && let Some(t) = topic.upgrade()
    {
        background_sync(&t).await;
    }
    None
}

/// Runs a blocking step that a durable group's publishers are waiting for (its fdatasync, or
/// the hold before it: [`Returns::wait`]) on the sync stage's own thread.
///
/// On a thread of the stage's own ([`crate::sync_thread`], a durable topic's usual place) the
/// step simply runs there: nothing else waits on that thread. As a task on the multi-threaded
/// runtime it is `block_in_place`: the thread hands its run queue to
/// another one and blocks in the fdatasync, so the runtime goes on serving every other task,
/// and once the fdatasync returns the same thread answers the group at once. Through the
/// blocking pool, each group paid two thread wake-ups on its critical path instead (to start
/// the fsync, and to wake the sync stage after it), about 100 µs of a 650 µs cycle on a
/// two-core VM (docs/benchmarks.md). Elsewhere (a current-thread runtime) it falls back to
/// the blocking pool.
async fn sync_blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if crate::sync_thread::on_own_thread() {
        return Ok(f());
    }
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        Ok(tokio::task::block_in_place(f))
    } else {
        tokio::task::spawn_blocking(f).await
    }
}

/// The sync stage's next group, as the append stage hands it over.
#[derive(Default)]
struct Group {
    /// Durable requests to answer after the fsync.
    waiting: Vec<Reply>,
    /// How many of them are from returning publishers.
    returning: usize,
    /// A relaxed append awaits its sync.
    relaxed: bool,
    /// The commit records of its traced requests.
    traced: Vec<Arc<CommitTrace>>,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && !self.relaxed
    }

    fn absorb(&mut self, a: Appended) {
        match a {
            Appended::AwaitSync(r, returning, traced) => {
                self.waiting.extend(r);
                self.traced.extend(traced);
                self.returning += returning;
            }
            Appended::Relaxed => self.relaxed = true,
        }
    }

    /// Takes everything already queued; `false` once the append stage is gone.
    fn absorb_queued(&mut self, rx: &mut mpsc::UnboundedReceiver<Appended>) -> bool {
        loop {
            match rx.try_recv() {
                Ok(a) => self.absorb(a),
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }
}

/// What an append leaves the log at, read at the end of its lock hold: what the steps after
/// the append need (what consumers may see, the relaxed sync thresholds) without taking the
/// lock again. Each extra hold per publish was a chance to meet another worker's append on
/// the lock, and a futex sleep and wake-up when it did (docs/benchmarks.md, notes).
#[derive(Clone, Copy)]
struct LogView {
    /// Highest position on stable storage.
    durable: u64,
    /// Highest position appended.
    appended: u64,
    /// Appended-but-unsynced messages and record bytes.
    unsynced: (u64, u64),
    /// Whether appended records wait to be written ([`TopicLog::defer_appends`]).
    unwritten: bool,
}

impl LogView {
    fn of(log: &TopicLog) -> Self {
        LogView {
            durable: log.durable_position(),
            appended: log.next_position() - 1,
            unsynced: log.unsynced(),
            unwritten: log.has_unwritten(),
        }
    }
}

/// Appends every request (ids reserved first) in one hold of the log lock and, as far as the
/// active segment reaches, one write; no fsync.
fn append(
    t: &Arc<Topic>,
    store: &Store,
    reqs: &[(Vec<Bytes>, i64)],
) -> (Vec<Result<(), PublishError>>, LogView) {
    let waited = Instant::now();
    append_held(t, store, reqs, lock(&t.log), waited)
}

/// [`append`], if `ready` holds for the log in the same hold of its lock (`None`: nothing was
/// appended).
fn append_if(
    t: &Arc<Topic>,
    store: &Store,
    reqs: &[(Vec<Bytes>, i64)],
    ready: impl FnOnce(&TopicLog) -> bool,
) -> Option<(Vec<Result<(), PublishError>>, LogView)> {
    let waited = Instant::now();
    let log = lock(&t.log);
    if !ready(&log) {
        return None;
    }
    Some(append_held(t, store, reqs, log, waited))
}

/// [`append`] under a hold of the log lock taken at `waited`; releases it.
fn append_held(
    t: &Arc<Topic>,
    store: &Store,
    reqs: &[(Vec<Bytes>, i64)],
    mut log: MutexGuard<'_, TopicLog>,
    waited: Instant,
) -> (Vec<Result<(), PublishError>>, LogView) {
    let m = &t.metrics;
    let held = Instant::now();
    m.observe(Timer::PublishLockWait, held - waited);
    let timestamp_ns = now_ns();
    let mut results: Vec<Result<(), PublishError>> = Vec::with_capacity(reqs.len());
    let mut batches = Vec::with_capacity(reqs.len());
    // Which request each batch is (a request whose ids cannot be reserved has none).
    let mut slots = Vec::with_capacity(reqs.len());
    for (i, (bodies, avail)) in reqs.iter().enumerate() {
        match store.allocate_ids(bodies.len() as u64) {
            Ok(first_id) => {
                results.push(Ok(()));
                slots.push(i);
                batches.push(AppendBatch {
                    first_id,
                    bodies,
                    timestamp_ns,
                    available_at_ms: *avail,
                });
            }
            Err(e) => results.push(Err(PublishError::from(e))),
        }
    }
    for (slot, r) in slots.into_iter().zip(log.append_group(&batches)) {
        if let Err(e) = r {
            results[slot] = Err(PublishError::from(e));
        }
    }
    let sealed = log.take_index_writes();
    let zeros = log.take_zero_write();
    let view = LogView::of(&log);
    drop(log);
    m.since(Timer::PublishLockHold, held);
    if view.unwritten {
        // The visibility task writes them, with the appends made before it runs
        // (`nsq_relaxed`; in `write_ack` there is none, and the next sync writes them).
        t.ask_visibility();
    }
    write_indexes(t, sealed);
    if let Some(z) = zeros {
        write_zeros(t, z);
    }
    (results, view)
}

/// Writes the zeros an append asked for ahead of the tail on the blocking pool, after the
/// log lock is released (`rustqueue_storage::ZeroWrite`): a megabyte of fresh page-cache
/// pages, which no publisher or consumer of the topic waits for.
fn write_zeros(t: &Arc<Topic>, z: ZeroWrite) {
    spawn_file_jobs(
        t,
        [move |t: &Topic| {
            z.run();
            lock(&t.log).zeros_written(&z);
        }],
    );
}

/// Writes the indexes of the segments an append sealed on the blocking pool, after the log
/// lock is released and without holding up the append stage: the next groups are appended
/// and every reader goes on meanwhile, reading the new index's pages from memory
/// (`rustqueue_storage::IndexWrite`). A failed write isolates storage, as a failed seal does.
fn write_indexes(t: &Arc<Topic>, sealed: Vec<IndexWrite>) {
    spawn_file_jobs(
        t,
        sealed.into_iter().map(|w| {
            move |t: &Topic| {
                let written = w.run();
                lock(&t.log).index_written(w.base(), written);
            }
        }),
    );
}

/// Runs writes into the topic's files on the blocking pool, kept in [`Topic::file_jobs`] so
/// that shutdown and topic deletion wait for them ([`Topic::file_writes_done`]).
fn spawn_file_jobs<F>(t: &Arc<Topic>, jobs: impl IntoIterator<Item = F>)
where
    F: FnOnce(&Topic) + Send + 'static,
{
    let mut jobs = jobs.into_iter().peekable();
    if jobs.peek().is_none() {
        return;
    }
    let mut running = lock(&t.file_jobs);
    running.retain(|job| !job.is_finished());
    for job in jobs {
        let t = t.clone();
        running.push(tokio::task::spawn_blocking(move || job(&t)));
    }
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
    use super::*;

    #[test]
    fn the_hold_ends_at_once_when_the_count_is_already_reached() {
        let r = Returns::default();
        r.handed(3);
        let t0 = Instant::now();
        r.wait(3, t0 + Duration::from_secs(5));
        assert!(t0.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_hold_wakes_when_the_last_returning_request_is_handed_over() {
        let r = Arc::new(Returns::default());
        r.handed(1);
        let r2 = r.clone();
        let t0 = Instant::now();
        let waiter =
            std::thread::spawn(move || r2.wait(3, Instant::now() + Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        r.handed(1);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "woken before the count was reached");
        r.handed(1);
        waiter.join().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "slept to the deadline instead of waking at the count"
        );
        assert_eq!(lock(&r.state).goal, None);
    }

    #[test]
    fn the_hold_ends_at_its_deadline_when_a_publisher_does_not_return() {
        let r = Returns::default();
        let t0 = Instant::now();
        r.wait(1, t0 + Duration::from_millis(30));
        let slept = t0.elapsed();
        assert!(slept >= Duration::from_millis(30), "ended early: {slept:?}");
        assert!(slept < Duration::from_secs(2), "overslept: {slept:?}");
        assert_eq!(lock(&r.state).goal, None);
    }
}
