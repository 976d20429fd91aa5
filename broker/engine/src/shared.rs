//! What the [`Engine`](crate::Engine) handle and its consumers share: one object per concern,
//! each also handed on its own to the background worker that needs it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustqueue_storage::Store;

use crate::budget::Budgets;
use crate::config::EngineConfig;
use crate::disk::DiskGuard;
use crate::metrics::EngineMetrics;
use crate::registry::Registry;
use crate::tiering::Tiering;

pub(crate) struct Shared {
    /// The configuration the engine was opened with.
    pub cfg: EngineConfig,
    /// The durable store (and its fail-closed switch).
    pub store: Arc<Store>,
    /// Topics and channels by name; the shutdown gate.
    pub registry: Arc<Registry>,
    /// The node publish and delivery byte budgets.
    pub budgets: Budgets,
    /// Disk pressure of the data path.
    pub disk: Arc<DiskGuard>,
    /// All deliveries frozen (drain).
    pub frozen: AtomicBool,
    /// Next consumer id.
    pub next_consumer: AtomicU64,
    /// Unix seconds at open.
    pub start_time: u64,
    /// Counters and histograms.
    pub metrics: Arc<EngineMetrics>,
    /// The uploader's bucket and gate, when tiering is on.
    pub tiering: Option<Arc<Tiering>>,
    /// The uploader task, stopped by shutdown: its bucket requests (a catalog, a delete) must
    /// not go on after the engine is closed.
    pub uploader: Option<tokio::task::AbortHandle>,
}

impl Shared {
    /// Whether the engine is shutting down.
    pub(crate) fn shutting_down(&self) -> bool {
        self.registry.is_shutting_down()
    }

    /// Whether deliveries are frozen.
    pub(crate) fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }
}
