//! Kodo gateway mode (docs/kodo.md, "The Kodo Gateway"): the same binary, terminating the
//! NSQ producer protocol instead of tunnelling it, for a go-nsq producer fleet that finds
//! its publish targets through nsqlookupd `/nodes` and sends messages up to 100 MiB.
//!
//! ```text
//!  producer ──TCP :4150──> session (IDENTIFY/PUB/MPUB/DPUB/NOP)
//!                            │ intake: codec + working set reserved before the body
//!                            v
//!                          publish (55 s, ≤3 brokers, pre-commit retry / E_AMBIGUOUS)
//!                            │ backend: one broker session per producer
//!                            v
//!                          brokers (publish pool from discovery)
//!  Kodo ──HTTP :4151/:4154/:4155──> stats shard 0/1/2 (merged broker /stats)
//!  probes ──HTTP :4160──> /ping, /v1/health, /metrics
//! ```

mod backend;
pub(crate) mod config;
mod http;
mod intake;
mod publish;
mod session;
mod stats;
mod verdict;

use std::net::SocketAddr;
use std::sync::Arc;

use rustqueue_api::gateway::kodo::{METRICS_PORT, STATS_PORTS};
use rustqueue_protocol::DecoderLimits;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::core::{self, Core, Running};
use crate::error::StartError;

use self::config::CONTROL_BODY_BYTES;
pub use self::config::{KodoConfigError, KodoSettings};
use self::session::SessionCtx;

/// A running Kodo gateway.
#[derive(Debug)]
pub struct KodoGateway {
    /// Where the producer TCP listener is bound.
    pub tcp_address: SocketAddr,
    /// Where stats shards 0, 1 and 2 are bound.
    pub shard_addresses: [SocketAddr; 3],
    /// Where `/ping`, `/v1/health` and `/metrics` are bound.
    pub metrics_address: SocketAddr,
    /// This gateway's ordinal.
    pub ordinal: u8,
    running: Running,
}

impl KodoGateway {
    /// Bind the producer listener on the TCP address and the four HTTP listeners on the
    /// HTTP address's host, then start discovery, sessions and the HTTP side.
    pub async fn start(cfg: Config, kodo: KodoSettings) -> Result<KodoGateway, StartError> {
        let (tcp, tcp_address) = core::bind(cfg.tcp_address).await?;
        let host = cfg.http_address.ip();
        let mut shards = Vec::new();
        let mut shard_addresses = [cfg.http_address; 3];
        for (slot, port) in shard_addresses.iter_mut().zip(STATS_PORTS) {
            let (listener, bound) = core::bind(SocketAddr::new(host, port)).await?;
            shards.push(listener);
            *slot = bound;
        }
        let (probe, metrics_address) = core::bind(SocketAddr::new(host, METRICS_PORT)).await?;
        let mut core = Core::start(&cfg)?;
        let shared = core.shared.clone();
        shared.metrics.kodo_gateway.set(1);
        let ctx = SessionCtx {
            publish: publish::PublishCtx {
                pools: shared.pools.clone(),
                metrics: shared.metrics.clone(),
            },
            budget: shared.budget.clone(),
            limits: DecoderLimits {
                max_message_bytes: cfg.max_message_bytes,
                max_body_bytes: cfg.max_body_bytes,
                max_control_body_bytes: CONTROL_BODY_BYTES,
                ..DecoderLimits::default()
            },
            stop: core.stop.clone(),
            abort: core.abort.clone(),
        };
        let accept = tokio::spawn(accept(tcp, ctx, core.stop.clone(), core.tasks.clone()));
        let state = Arc::new(http::KodoHttp::new(shared.clone())?);
        for (k, listener) in shards.into_iter().enumerate() {
            core.serve_http(listener, http::shard_router(state.clone(), k));
        }
        core.serve_http(probe, http::metrics_router(shared.clone()));
        let running = core.run(accept, cfg.shutdown_grace);
        tracing::info!(tcp = %tcp_address, stats = ?shard_addresses, metrics = %metrics_address, ordinal = kodo.ordinal, "rustqueue-gateway listening in Kodo gateway mode");
        Ok(KodoGateway {
            tcp_address,
            shard_addresses,
            metrics_address,
            ordinal: kodo.ordinal,
            running,
        })
    }

    /// Stop accepting; publishes in progress finish within the grace, queued commands are
    /// not run; then everything still open is cut.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }

    /// What the tests observe: the pools, the metrics, the budget.
    #[cfg(feature = "test-support")]
    pub fn observe(&self) -> &Running {
        &self.running
    }
}

/// Accept producer connections until `stop`, each a session on `tasks`.
async fn accept(
    listener: TcpListener,
    ctx: SessionCtx,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    core::accept_until(listener, stop, |stream| {
        let ctx = ctx.clone();
        let gauge = ctx.publish.metrics.kodo_sessions.clone();
        gauge.inc();
        tasks.spawn(async move {
            session::run(stream, ctx).await;
            gauge.dec();
        });
    })
    .await;
}
