//! Where a durable topic's sync stage runs: on a thread of its own while the topic publishes.
//!
//! The sync stage ([`crate::topic`]) blocks twice a durable group: in the hold for returning
//! publishers and in the fdatasync. As a task on the multi-threaded runtime each block is a
//! `block_in_place`, which hands the worker's other tasks to a second thread and takes them
//! back, and every hand-over from the append stage wakes a worker to poll the stage. On a
//! thread of its own the stage blocks that thread alone: the append stage's hand-over wakes it
//! directly, and it answers the publishers from there. In PUB+FIN 16/16 1 KiB durable this
//! cut the broker's context switches a message from 0.66-0.67 to 0.51-0.52 and its futex calls
//! from 0.53-0.54 to 0.42-0.44. What that is worth depends on the host's hour: 13-20 % more
//! throughput and 14-18 % less broker CPU a message in one where the runtime build read
//! 30-35k msg/s, 2-6 % and 1-6 % in one where it read 37-40k (docs/benchmarks.md, notes).
//!
//! The thread is started by the first durable hand-over and ends after [`IDLE`] without one,
//! with nothing left to sync or answer, so idle topics hold no thread; the next hand-over
//! starts another. At most [`MAX_THREADS`] exist at once in the process (a place is given back
//! once its thread has exited, not when the stage stops): past that (and on a
//! current-thread runtime, or if a thread cannot be started) the stage runs as a task, as the
//! relaxed modes' stages always do. A run of the stage, on a thread or as a task, is the same
//! code; only [`on_own_thread`] tells them apart.

use std::cell::Cell;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::lock::lock;
use crate::topic::{Appended, GroupSettings, Topic, sync_stage};

/// How long a sync stage waits for its next hand-over before it stops (its thread ends).
pub(crate) const IDLE: Duration = Duration::from_secs(1);

/// Most sync stages on threads of their own at once, over all topics; the rest run as tasks.
/// The 64 cost about 4 MiB of memory in all (`idle_topics`, docs/benchmarks.md).
pub(crate) const MAX_THREADS: usize = 64;

/// This process's sync threads that have not been joined: running, ending, or ended since
/// the last start of a thread, which joins the ended ones. Its length is the places taken.
static THREADS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

thread_local! {
    static OWN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the caller runs on a sync stage's own thread, where blocking blocks nothing else.
pub(crate) fn on_own_thread() -> bool {
    OWN_THREAD.with(Cell::get)
}

/// Starts a durable topic's sync stage when there is something to sync, and knows when none
/// is running. The topic's publish worker holds it.
pub(crate) struct SyncHome {
    topic: Weak<Topic>,
    set: GroupSettings,
    /// The stage's receiver while no run of the stage holds it.
    parked: Mutex<Option<mpsc::UnboundedReceiver<Appended>>>,
    /// Runs of the stage going now (0 or 1).
    runs: watch::Sender<usize>,
}

impl SyncHome {
    pub(crate) fn new(
        topic: Weak<Topic>,
        set: GroupSettings,
        rx: mpsc::UnboundedReceiver<Appended>,
    ) -> Arc<Self> {
        Arc::new(Self {
            topic,
            set,
            parked: Mutex::new(Some(rx)),
            runs: watch::channel(0).0,
        })
    }

    /// Starts a run of the stage unless one is going. Called after every hand-over: a run that
    /// stops for idleness parks the receiver only once it is empty, under the same lock, so a
    /// hand-over either reaches the running stage or finds the receiver parked and starts one.
    pub(crate) fn wake(self: &Arc<Self>) {
        let Some(rx) = lock(&self.parked).take() else {
            return;
        };
        self.start(rx, RunEnds::count(self));
    }

    /// Resolves once no run of the stage is going (the publish worker's end).
    pub(crate) async fn stopped(&self) {
        let mut runs = self.runs.subscribe();
        let _ = runs.wait_for(|n| *n == 0).await;
    }

    fn start(self: &Arc<Self>, rx: mpsc::UnboundedReceiver<Appended>, run: RunEnds) {
        let runtime = Handle::current();
        let (rx, run) = if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            match self.start_thread(rx, run, runtime) {
                Ok(()) => return,
                Err(back) => back,
            }
        } else {
            (rx, run)
        };
        tokio::spawn(self.clone().run(rx, run));
    }

    /// Starts the run on a thread of its own if one of the [`MAX_THREADS`] places is free, or
    /// hands the run back to go on the runtime.
    fn start_thread(
        self: &Arc<Self>,
        rx: mpsc::UnboundedReceiver<Appended>,
        run: RunEnds,
        runtime: Handle,
    ) -> Result<(), (mpsc::UnboundedReceiver<Appended>, RunEnds)> {
        let mut threads = lock(&THREADS);
        // A place is given back by joining its thread, which returns once the thread has
        // exited: a thread that is still tearing down keeps its place.
        for ended in threads.extract_if(.., |t| t.is_finished()) {
            if ended.join().is_err() {
                tracing::warn!("a sync thread panicked");
            }
        }
        if threads.len() >= MAX_THREADS {
            return Err((rx, run));
        }
        // Handed through a slot so that a thread that could not be started gives it back.
        let slot = Arc::new(Mutex::new(Some((rx, run))));
        let (home, given) = (self.clone(), slot.clone());
        let spawned = std::thread::Builder::new()
            .name("rq-sync".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let handed = lock(&given).take();
                if let Some((rx, run)) = handed {
                    home.run_on_thread(rx, run, &runtime);
                }
            });
        match spawned {
            Ok(thread) => {
                threads.push(thread);
                Ok(())
            }
            Err(e) => {
                // The closure never ran, so the run is still in the slot.
                tracing::warn!("cannot start a sync thread ({e}); syncing on the runtime");
                lock(&slot).take().map_or(Ok(()), Err)
            }
        }
    }

    fn run_on_thread(
        self: Arc<Self>,
        rx: mpsc::UnboundedReceiver<Appended>,
        run: RunEnds,
        runtime: &Handle,
    ) {
        // Time only (the stage's timeouts): no I/O driver, so no descriptors per thread.
        match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(rt) => {
                OWN_THREAD.with(|t| t.set(true));
                rt.block_on(self.run(rx, run));
            }
            Err(e) => {
                tracing::warn!(
                    "cannot start a sync thread's runtime ({e}); syncing on the runtime"
                );
                runtime.spawn(self.run(rx, run));
            }
        }
    }

    /// Runs the stage until it ends for good (the topic is gone) or stops for idleness with
    /// nothing left in its receiver; `_run` counts the run out however it ends.
    async fn run(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Appended>, _run: RunEnds) {
        while let Some(back) = sync_stage(self.topic.clone(), self.set, rx, Some(IDLE)).await {
            let mut parked = lock(&self.parked);
            if back.is_empty() {
                *parked = Some(back);
                break;
            }
            rx = back;
        }
    }
}

/// A run of the stage, counted in [`SyncHome::runs`] from its start until this is dropped:
/// when the run ends, panics, or is dropped before it began (a task on a runtime shutting
/// down), so the publish worker's end never waits for a run that is gone.
struct RunEnds(Arc<SyncHome>);

impl RunEnds {
    fn count(home: &Arc<SyncHome>) -> Self {
        home.runs.send_modify(|n| *n += 1);
        Self(home.clone())
    }
}

impl Drop for RunEnds {
    fn drop(&mut self) {
        self.0.runs.send_modify(|n| *n = n.saturating_sub(1));
    }
}
