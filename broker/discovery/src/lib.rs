//! `rustqueue-discovery`: an nsqlookupd-compatible lookup service for a RustQueue cluster.
//!
//! Brokers come from a source (`source`: the EndpointSlices of the brokers' headless Service,
//! or a static list beside `make run`); the poller (`poller`) reads each broker's
//! `/v1/registry/head` and fetches `/v1/registry` only when it changed; the index (`index`)
//! keeps per-topic owner and channel maps up to date incrementally; `api` serves nsqlookupd's
//! read API and the native `/v1/publishers`, `/v1/brokers`, `/v1/health` and `/metrics`. In
//! Kodo mode (`kodo`) `/nodes` advertises the Kodo gateways instead of the brokers. See
//! docs/discovery.md.
//!
//! The face: [`Shared`] (the state the poller and the API share), a [`View`] of the brokers
//! from [`watch_endpoint_slices`] or [`static_view`], [`poll_brokers`] with its
//! [`PollerConfig`], the HTTP [`router`], the [`Mode`] and the errors. The modules are private.

mod api;
mod index;
mod kodo;
mod metrics;
mod poller;
mod query;
mod source;

pub use api::router;
pub use kodo::{KodoConfigError, Mode};
pub use poller::{PollError, PollerConfig, RefreshError, run as poll_brokers};
pub use source::{View, static_view, watch_endpoint_slices};

use std::sync::atomic::AtomicU16;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// A source older than this makes every lookup route answer 503 (fail closed).
pub const STALE_AFTER: Duration = Duration::from_secs(5);

/// State shared by the poller and the HTTP API.
#[derive(Debug)]
pub struct Shared {
    /// The lookup indexes.
    pub index: RwLock<index::Index>,
    /// When the source last produced a successful refresh.
    last_success: Mutex<Option<Instant>>,
    /// Why the last refresh was not a success (for `/v1/health`).
    last_error: Mutex<Option<String>>,
    /// Prometheus metrics.
    pub metrics: metrics::Metrics,
    /// The HTTP port reported by `/info`.
    pub http_port: AtomicU16,
    /// Direct or Kodo mode (fixed at startup).
    pub mode: kodo::Mode,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            index: RwLock::default(),
            last_success: Mutex::new(None),
            last_error: Mutex::new(None),
            metrics: metrics::Metrics::new(),
            http_port: AtomicU16::new(4161),
            mode: kodo::Mode::Direct,
        }
    }
}

impl Shared {
    /// A service in `mode`.
    pub fn with_mode(mode: kodo::Mode) -> Self {
        Shared {
            mode,
            ..Shared::default()
        }
    }

    /// `lookup_ready` of `/v1/health` and the gauge: the source is fresh and, in Kodo mode,
    /// every stats shard has its broker ([`kodo::lookup_ready`]).
    pub fn lookup_ready(&self) -> bool {
        let fresh = self.source_ready().is_ok();
        kodo::lookup_ready(&self.mode, fresh, self.read().consume_ready_nodes())
    }

    /// Record a refresh outcome: `Ok` marks the source fresh, `Err` keeps the reason.
    pub fn record(&self, outcome: Result<(), RefreshError>) {
        match outcome {
            Ok(()) => {
                *lock(&self.last_success) = Some(Instant::now());
                *lock(&self.last_error) = None;
            }
            Err(e) => *lock(&self.last_error) = Some(e.to_string()),
        }
    }

    /// `Ok` while the last successful refresh is at most [`STALE_AFTER`] old, else why not.
    pub fn source_ready(&self) -> Result<(), NotReady> {
        let fresh = lock(&self.last_success).is_some_and(|t| t.elapsed() <= STALE_AFTER);
        if fresh {
            return Ok(());
        }
        let last_error = lock(&self.last_error).clone();
        Err(match *lock(&self.last_success) {
            None => NotReady::NeverRefreshed { last_error },
            Some(t) => NotReady::Stale {
                ms: t.elapsed().as_millis(),
                last_error,
            },
        })
    }

    /// Read access to the index (a poisoned lock is still readable: the index is only
    /// mutated through methods that leave it consistent).
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, index::Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the index.
    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, index::Index> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why the lookup routes answer 503: the source has not refreshed recently (`reason` of
/// `/v1/health` and of every gated route).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// No refresh has succeeded since startup.
    #[error("no successful refresh yet{}", suffix(last_error))]
    NeverRefreshed {
        /// Why the last refresh failed, if one did.
        last_error: Option<String>,
    },
    /// The last successful refresh is older than [`STALE_AFTER`].
    #[error("source stale for {ms} ms{}", suffix(last_error))]
    Stale {
        /// Its age.
        ms: u128,
        /// Why the last refresh failed, if one did.
        last_error: Option<String>,
    },
}

fn suffix(e: &Option<String>) -> String {
    e.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
