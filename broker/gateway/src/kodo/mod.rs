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

pub mod backend;
pub mod config;
pub mod http;
pub mod intake;
pub mod publish;
pub mod session;
pub mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustqueue_protocol::DecoderLimits;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pool::Pools;
use crate::{StartError, discovery, drain};

use self::config::{CONTROL_BODY_BYTES, KodoSettings, METRICS_PORT, SHARD_PORTS};
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
    /// The pools (tests read them).
    pub pools: Arc<Pools>,
    /// The metrics.
    pub metrics: Metrics,
    /// The node-wide in-flight byte budget, one permit per byte (tests read it).
    pub budget: Arc<Semaphore>,
    stop: CancellationToken,
    done: JoinHandle<()>,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

fn local(l: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, StartError> {
    l.local_addr()
        .map_err(|source| StartError::Bind { addr, source })
}

fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    stop: &CancellationToken,
) -> JoinHandle<()> {
    let graceful = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(graceful)
            .await
        {
            tracing::error!(error = %e, "Kodo HTTP listener failed");
        }
    })
}

impl KodoGateway {
    /// Bind the producer listener on the TCP address and the four HTTP listeners on the
    /// HTTP address's host, then start discovery, sessions and the HTTP side.
    pub async fn start(cfg: Config, kodo: KodoSettings) -> Result<KodoGateway, StartError> {
        let tcp = bind(cfg.tcp_address).await?;
        let host = cfg.http_address.ip();
        let mut shards = Vec::new();
        for port in SHARD_PORTS {
            shards.push(bind(SocketAddr::new(host, port)).await?);
        }
        let probe = bind(SocketAddr::new(host, METRICS_PORT)).await?;
        let tcp_address = local(&tcp, cfg.tcp_address)?;
        let mut shard_addresses = [cfg.http_address; 3];
        for (slot, l) in shard_addresses.iter_mut().zip(&shards) {
            *slot = local(l, cfg.http_address)?;
        }
        let metrics_address = local(&probe, cfg.http_address)?;
        let (pools, metrics) = (Arc::new(Pools::default()), Metrics::new());
        metrics.kodo_gateway.set(1);
        let budget = Arc::new(Semaphore::new(cfg.max_inflight_bytes as usize));
        let (stop, abort, sessions) = (
            CancellationToken::new(),
            CancellationToken::new(),
            TaskTracker::new(),
        );
        let client =
            discovery::Client::new(cfg.discovery_urls.clone(), pools.clone(), metrics.clone())?;
        tokio::spawn(client.run(stop.clone()));
        let ctx = SessionCtx {
            publish: publish::PublishCtx {
                pools: pools.clone(),
                metrics: metrics.clone(),
            },
            budget: budget.clone(),
            limits: DecoderLimits {
                max_message_bytes: cfg.max_message_bytes,
                max_body_bytes: cfg.max_body_bytes,
                max_control_body_bytes: CONTROL_BODY_BYTES,
                ..DecoderLimits::default()
            },
            stop: stop.clone(),
            abort: abort.clone(),
        };
        let accept = tokio::spawn(accept(tcp, ctx, stop.clone(), sessions.clone()));
        let state = Arc::new(http::KodoHttp::new(
            pools.clone(),
            metrics.clone(),
            budget.clone(),
        )?);
        let mut servers: Vec<JoinHandle<()>> = shards
            .into_iter()
            .enumerate()
            .map(|(k, l)| serve_http(l, http::shard_router(state.clone(), k), &stop))
            .collect();
        servers.push(serve_http(probe, http::metrics_router(state), &stop));
        let done = tokio::spawn(drain(
            stop.clone(),
            abort,
            accept,
            servers,
            sessions,
            cfg.shutdown_grace,
        ));
        tracing::info!(tcp = %tcp_address, stats = ?shard_addresses, metrics = %metrics_address, ordinal = kodo.ordinal, "rustqueue-gateway listening in Kodo gateway mode");
        Ok(KodoGateway {
            tcp_address,
            shard_addresses,
            metrics_address,
            ordinal: kodo.ordinal,
            pools,
            metrics,
            budget,
            stop,
            done,
        })
    }

    /// Stop accepting; publishes in progress finish within the grace, queued commands are
    /// not run; then everything still open is cut.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }
}

async fn accept(
    listener: TcpListener,
    ctx: SessionCtx,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let ctx = ctx.clone();
                let gauge = ctx.publish.metrics.kodo_sessions.clone();
                gauge.inc();
                tasks.spawn(async move {
                    session::run(stream, ctx).await;
                    gauge.dec();
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
