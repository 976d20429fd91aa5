//! The management flow (off by default): unlocked sessions with CSRF, preview issuing a
//! single-use action token bound to its subject, apply with every re-check persisting the
//! operation in a catalog object, and the reconciler that applies it owner by owner.

pub mod apply;
pub mod audit;
pub mod catalog;
pub mod decide;
pub mod error;
pub mod http;
pub mod reconciler;
pub mod request;
pub mod session;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::broker::BrokerClient;
use crate::cluster::CatalogStore;
use crate::collector::Shared;
use crate::config::Config;

/// The management flow's state.
pub struct Manager {
    /// The configuration.
    pub config: Arc<Config>,
    /// The collector's output and the mutation lock.
    pub shared: Arc<Shared>,
    /// The catalog objects.
    pub store: Arc<dyn CatalogStore>,
    /// The brokers.
    pub client: BrokerClient,
    sessions: Mutex<session::Sessions>,
    /// Keys of Accepted Events this process has seen recorded, of operations still in the
    /// catalog: the reconciler records the others before it moves their operation.
    recorded: Mutex<HashSet<String>>,
}

impl Manager {
    /// A manager over `store`.
    pub fn new(config: Arc<Config>, shared: Arc<Shared>, store: Arc<dyn CatalogStore>) -> Self {
        let client = BrokerClient::new(config.token_file.clone(), config.broker_http_port);
        Self {
            config,
            shared,
            store,
            client,
            sessions: Mutex::new(session::Sessions::default()),
            recorded: Mutex::new(HashSet::new()),
        }
    }

    fn recorded(&self) -> MutexGuard<'_, HashSet<String>> {
        self.recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the Event of `key` is known to be recorded.
    fn event_recorded(&self, key: &str) -> bool {
        self.recorded().contains(key)
    }

    /// The Event of `key` is recorded.
    fn remember_event(&self, key: String) {
        self.recorded().insert(key);
    }

    /// Forgets every key but `keep` (those of operations still in the catalog).
    fn forget_events_but(&self, keep: &HashSet<String>) {
        self.recorded().retain(|k| keep.contains(k));
    }

    fn sessions(&self) -> MutexGuard<'_, session::Sessions> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn staleness_ms(&self) -> u64 {
        u64::try_from(self.config.management_staleness().as_millis()).unwrap_or(u64::MAX)
    }
}
