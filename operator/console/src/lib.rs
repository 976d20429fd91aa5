//! `rustqueue-console`: the console backend of a RustQueue (docs/console.md).
//!
//! - [`config`]: the environment, validated.
//! - [`cluster`]: the Kubernetes seams ([`cluster::ClusterSource`], [`cluster::CatalogStore`]);
//!   [`kube_store`] implements them against the API server.
//! - [`broker`]: the client of the brokers' console contract.
//! - [`snapshot`]: the snapshot and the pure functions that build it.
//! - [`collector`]: the collection loop (head every poll, full observation when needed).
//! - [`manage`]: the management flow: sessions, preview/apply, the reconciler, audit.
//! - [`http`]: the HTTP server.

pub mod broker;
pub mod cluster;
pub mod collector;
pub mod config;
pub mod http;
pub mod kube_store;
pub mod manage;
pub mod snapshot;

#[cfg(feature = "test-support")]
pub mod memory;

#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;

/// Wall clock, ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

use std::sync::Arc;

/// The console's parts, wired: the collector, the management flow and its reconciler, and the
/// router. `main` runs them against the API server; tests against the in-memory cluster.
pub struct Console {
    /// The configuration.
    pub config: Arc<config::Config>,
    /// What the collector publishes.
    pub shared: Arc<collector::Shared>,
    /// The management flow.
    pub manager: Arc<manage::Manager>,
    cluster: Arc<dyn cluster::ClusterSource>,
    catalog: Arc<dyn cluster::CatalogStore>,
}

impl Console {
    /// The console over `cluster` and `catalog`.
    pub fn new(
        config: config::Config,
        cluster: Arc<dyn cluster::ClusterSource>,
        catalog: Arc<dyn cluster::CatalogStore>,
    ) -> Self {
        let config = Arc::new(config);
        let shared = Arc::new(collector::Shared::default());
        let manager = Arc::new(manage::Manager::new(
            config.clone(),
            shared.clone(),
            catalog.clone(),
        ));
        Self {
            config,
            shared,
            manager,
            cluster,
            catalog,
        }
    }

    /// A collector publishing into this console.
    pub fn collector(&self) -> collector::Collector {
        collector::Collector::new(
            (*self.config).clone(),
            self.cluster.clone(),
            self.catalog.clone(),
            self.shared.clone(),
        )
    }

    /// The reconciler of this console's operations.
    pub fn reconciler(&self) -> manage::reconciler::Reconciler {
        manage::reconciler::Reconciler::new(self.manager.clone())
    }

    /// The HTTP router.
    pub fn router(&self) -> axum::Router {
        http::router(http::App {
            config: self.config.clone(),
            shared: self.shared.clone(),
            manager: self.manager.clone(),
        })
    }

    /// Serves HTTP on `listener` (with the caller's address for the audit log).
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    }
}
