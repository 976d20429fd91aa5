//! `rustqueue-gateway`: one address for NSQ producers in front of a RustQueue cluster
//! (docs/gateway.md).
//!
//! ```text
//!  discovery replicas ──(2 s polls, revisions must agree)──> discovery::Client
//!                                                               │ replace
//!                                                               v
//!  producers ──TCP :4150──> tcp (cap, least-active) ──────> pool::Pools ──> brokers
//!  producers ──HTTP :4151─> http / forward (budget, 413/408, ambiguity rule)
//! ```
//!
//! [`config`] validates flags and environment; [`kodo`] is the Kodo gateway mode, which
//! terminates the producer protocol instead of tunnelling it (docs/kodo.md).

pub mod config;
pub mod discovery;
pub mod forward;
pub mod http;
pub mod kodo;
pub mod metrics;
pub mod pool;
pub mod tcp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pool::Pools;

/// After the grace, tunnels and requests are cut; this much more is allowed for that.
pub const HARD_STOP_AFTER_GRACE: Duration = Duration::from_secs(2);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address is taken or not ours.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The HTTP client could not be built (TLS provider).
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    /// Where the TCP listener is bound.
    pub tcp_address: SocketAddr,
    /// Where the HTTP listener is bound.
    pub http_address: SocketAddr,
    /// The pools (tests read them).
    pub pools: Arc<Pools>,
    /// The metrics.
    pub metrics: Metrics,
    /// The node-wide HTTP in-flight byte budget, one permit per byte (tests read it).
    pub budget: Arc<Semaphore>,
    stop: CancellationToken,
    done: JoinHandle<()>,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

impl Gateway {
    /// Bind both listeners and start the discovery client, the TCP proxy and the HTTP side.
    pub async fn start(cfg: Config) -> Result<Gateway, StartError> {
        let tcp_listener = bind(cfg.tcp_address).await?;
        let http_listener = bind(cfg.http_address).await?;
        let (tcp_address, http_address) = (
            tcp_listener
                .local_addr()
                .map_err(|source| StartError::Bind {
                    addr: cfg.tcp_address,
                    source,
                })?,
            http_listener
                .local_addr()
                .map_err(|source| StartError::Bind {
                    addr: cfg.http_address,
                    source,
                })?,
        );
        let (pools, metrics) = (Arc::new(Pools::default()), Metrics::new());
        let (stop, abort, tunnels) = (
            CancellationToken::new(),
            CancellationToken::new(),
            TaskTracker::new(),
        );
        let client =
            discovery::Client::new(cfg.discovery_urls.clone(), pools.clone(), metrics.clone())?;
        tokio::spawn(client.run(stop.clone()));
        let tcp_ctx = tcp::TcpContext {
            pools: pools.clone(),
            metrics: metrics.clone(),
            slots: Arc::new(Semaphore::new(cfg.max_connections)),
            max_age: cfg.tcp_max_connection_age,
            abort: abort.clone(),
        };
        let accept = tokio::spawn(tcp::serve(
            tcp_listener,
            tcp_ctx,
            stop.clone(),
            tunnels.clone(),
        ));
        let fwd = Arc::new(forward::Forwarder::new(
            pools.clone(),
            metrics.clone(),
            &cfg,
        )?);
        let budget = fwd.budget.clone();
        let graceful = stop.clone().cancelled_owned();
        let http = tokio::spawn(async move {
            let served =
                axum::serve(http_listener, http::router(fwd)).with_graceful_shutdown(graceful);
            if let Err(e) = served.await {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        });
        let done = tokio::spawn(drain(
            stop.clone(),
            abort,
            accept,
            vec![http],
            tunnels,
            cfg.shutdown_grace,
        ));
        tracing::info!(tcp = %tcp_address, http = %http_address, discovery = ?cfg.discovery_urls, "rustqueue-gateway listening");
        Ok(Gateway {
            tcp_address,
            http_address,
            pools,
            metrics,
            budget,
            stop,
            done,
        })
    }

    /// Stop accepting, let open tunnels and requests finish within the grace, then cut them.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }
}

/// After `stop`: stop accepting, let the open connections (`tasks`) and the HTTP `servers`
/// finish within `grace`, then cut what is left (`abort`) and wait at most
/// [`HARD_STOP_AFTER_GRACE`] more. Both gateway modes shut down this way.
pub(crate) async fn drain(
    stop: CancellationToken,
    abort: CancellationToken,
    accept: JoinHandle<()>,
    servers: Vec<JoinHandle<()>>,
    tasks: TaskTracker,
    grace: Duration,
) {
    stop.cancelled().await;
    let _ = accept.await;
    tasks.close();
    let aborts: Vec<_> = servers.iter().map(JoinHandle::abort_handle).collect();
    let finished = async {
        tasks.wait().await;
        futures::future::join_all(servers).await;
    };
    if tokio::time::timeout(grace, finished).await.is_err() {
        tracing::warn!(
            open = tasks.len(),
            "shutdown grace over: closing what is still open"
        );
        abort.cancel();
        aborts.iter().for_each(|a| a.abort());
        let _ = tokio::time::timeout(HARD_STOP_AFTER_GRACE, tasks.wait()).await;
    }
}
