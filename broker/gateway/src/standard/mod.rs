//! The standard gateway: the core plus opaque TCP tunnels ([`tcp`]: the connection cap,
//! least-active placement, rotation) and HTTP forwarding ([`http`], [`forward`]: the body
//! limit and budget, the ambiguity rule). docs/gateway.md.

mod forward;
mod http;
mod tcp;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::budget::Slots;
use crate::config::Config;
use crate::core::{self, Core, Running};
use crate::error::StartError;

/// A running standard gateway.
#[derive(Debug)]
pub struct Gateway {
    /// Where the TCP listener is bound.
    pub tcp_address: SocketAddr,
    /// Where the HTTP listener is bound.
    pub http_address: SocketAddr,
    running: Running,
}

impl Gateway {
    /// Bind both listeners and start the discovery client, the TCP proxy and the HTTP side.
    pub async fn start(cfg: Config) -> Result<Gateway, StartError> {
        let (tcp_listener, tcp_address) = core::bind(cfg.tcp_address).await?;
        let (http_listener, http_address) = core::bind(cfg.http_address).await?;
        let mut core = Core::start(&cfg)?;
        let shared = core.shared.clone();
        let tcp_ctx = tcp::TcpContext {
            pools: shared.pools.clone(),
            metrics: shared.metrics.clone(),
            slots: Slots::new(cfg.max_connections, shared.metrics.tcp_refused.clone()),
            max_age: cfg.tcp_max_connection_age,
            abort: core.abort.clone(),
        };
        let accept = tokio::spawn(tcp::serve(
            tcp_listener,
            tcp_ctx,
            core.stop.clone(),
            core.tasks.clone(),
        ));
        let fwd = Arc::new(forward::Forwarder::new(shared.clone(), &cfg)?);
        core.serve_http(http_listener, http::router(shared.clone(), fwd));
        let running = core.run(accept, cfg.shutdown_grace);
        tracing::info!(tcp = %tcp_address, http = %http_address, discovery = ?cfg.discovery_urls, "rustqueue-gateway listening");
        Ok(Gateway {
            tcp_address,
            http_address,
            running,
        })
    }

    /// Stop accepting, let open tunnels and requests finish within the grace, then cut them.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }

    /// What the tests observe: the pools, the metrics, the budget.
    #[cfg(feature = "test-support")]
    pub fn observe(&self) -> &Running {
        &self.running
    }
}
