//! What both front-ends share: binding, the discovery client and the pools, the budgets,
//! serving an HTTP router under the connection cap, the probe routes (`/ping`, `/v1/health`,
//! `/metrics`) and the shutdown drain. A front-end (`standard`, `kodo`)
//! starts a [`Core`], adds its own listeners and handlers, and hands its accept loop back to
//! [`Core::run`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{ByteBudget, CappedListener, Slots};
use crate::config::Config;
use crate::discovery;
use crate::error::StartError;
use crate::metrics::Metrics;
use crate::pool::Pools;

/// After the grace, tunnels and requests are cut; this much more is allowed for that.
pub(crate) const HARD_STOP_AFTER_GRACE: Duration = Duration::from_secs(2);

/// Bind `addr`, returning the listener and the address it got.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bound = async {
        let l = TcpListener::bind(addr).await?;
        let local = l.local_addr()?;
        Ok::<_, std::io::Error>((l, local))
    };
    bound
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// The pools the discovery client keeps current, the metrics and the byte budget: what the
/// handlers of both front-ends read.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Where work goes.
    pub pools: Arc<Pools>,
    /// Every metric.
    pub metrics: Metrics,
    /// The node-wide in-flight byte budget.
    pub budget: ByteBudget,
}

/// A started core: discovery polling, the budgets, the shutdown tokens.
#[derive(Debug)]
pub struct Core {
    /// What handlers read.
    pub shared: Shared,
    /// Cancelled at shutdown: stop accepting, start no new command.
    pub stop: CancellationToken,
    /// Cancelled when the grace is over: every open connection closes.
    pub abort: CancellationToken,
    /// The open connections of the front-end's own listener.
    pub tasks: TaskTracker,
    http_slots: Slots,
    servers: Vec<JoinHandle<()>>,
}

impl Core {
    /// Start polling discovery for `cfg`.
    pub fn start(cfg: &Config) -> Result<Core, StartError> {
        let (pools, metrics) = (Arc::new(Pools::default()), Metrics::new());
        let stop = CancellationToken::new();
        let client =
            discovery::Client::new(cfg.discovery_urls.clone(), pools.clone(), metrics.clone())?;
        tokio::spawn(client.run(stop.clone()));
        let http_slots = Slots::new(cfg.max_http_connections, metrics.http_refused.clone());
        Ok(Core {
            shared: Shared {
                pools,
                metrics,
                budget: ByteBudget::new(cfg.max_inflight_bytes),
            },
            stop,
            abort: CancellationToken::new(),
            tasks: TaskTracker::new(),
            http_slots,
            servers: Vec::new(),
        })
    }

    /// Serve `router` on `listener` until shutdown; every HTTP listener of the process
    /// shares one connection cap (`--max-http-connections`).
    pub fn serve_http(&mut self, listener: TcpListener, router: Router) {
        let capped = CappedListener::new(listener, self.http_slots.clone());
        let graceful = self.stop.clone().cancelled_owned();
        self.servers.push(tokio::spawn(async move {
            let served = axum::serve(capped, router).with_graceful_shutdown(graceful);
            if let Err(e) = served.await {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        }));
    }

    /// Hand over the front-end's accept loop; the returned handle drains on shutdown.
    pub fn run(self, accept: JoinHandle<()>, grace: Duration) -> Running {
        let stop = self.stop.clone();
        let done = tokio::spawn(drain(
            self.stop,
            self.abort,
            accept,
            self.servers,
            self.tasks,
            grace,
        ));
        Running {
            #[cfg(feature = "test-support")]
            shared: self.shared,
            stop,
            done,
        }
    }
}

/// Accept on `listener` until `stop`, handing each connection to `handle`. A failed accept
/// (out of file descriptors and the like) backs off 50 ms instead of spinning.
pub async fn accept_until(
    listener: TcpListener,
    stop: CancellationToken,
    mut handle: impl FnMut(TcpStream),
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => handle(stream),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A gateway that is serving; [`Running::shutdown`] drains it.
#[derive(Debug)]
pub struct Running {
    #[cfg(feature = "test-support")]
    shared: Shared,
    stop: CancellationToken,
    done: JoinHandle<()>,
}

impl Running {
    /// Stop accepting, let open connections finish within the grace, then cut them.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }

    /// The broker pools (tests wait on them).
    #[cfg(feature = "test-support")]
    pub fn pools(&self) -> &Pools {
        &self.shared.pools
    }

    /// The `/metrics` exposition.
    #[cfg(feature = "test-support")]
    pub fn metrics_text(&self) -> String {
        self.shared.metrics.render()
    }

    /// Bytes of the in-flight budget not reserved.
    #[cfg(feature = "test-support")]
    pub fn budget_available(&self) -> usize {
        self.shared.budget.available()
    }
}

/// After `stop`: stop accepting, let the open connections (`tasks`) and the HTTP `servers`
/// finish within `grace`, then cut what is left (`abort`) and wait at most
/// [`HARD_STOP_AFTER_GRACE`] more.
async fn drain(
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

/// How much `/v1/health` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The standard gateway's: the revision and the publishers too.
    Detailed,
    /// The Kodo gateway's: status and broker count.
    Brief,
}

#[derive(Debug, Clone)]
struct Probe {
    shared: Shared,
    health: Health,
}

/// `/ping` (liveness), `/v1/health` (readiness) and `/metrics`.
pub fn probe_router(shared: Shared, health: Health) -> Router {
    Router::new()
        .route("/ping", get(|| async { "OK" }))
        .route("/v1/health", get(health_answer))
        .route("/metrics", get(metrics_answer))
        .with_state(Probe { shared, health })
}

async fn health_answer(State(p): State<Probe>) -> Response {
    let pools = &p.shared.pools;
    let publishers = pools.publish_backends();
    let (status, mut body) = if publishers.is_empty() {
        let body = json!({
            "status": "not_ready",
            "brokers": 0,
            "reason": "no publish-ready broker agreed on by the discovery replicas",
        });
        (StatusCode::SERVICE_UNAVAILABLE, body)
    } else {
        let body = json!({ "status": "ready", "brokers": publishers.len() });
        (StatusCode::OK, body)
    };
    if p.health == Health::Detailed {
        let listed: Vec<serde_json::Value> = publishers
            .iter()
            .map(|b| json!({ "node_id": b.node_id, "address": format!("{}:{}", b.host, b.tcp_port) }))
            .collect();
        body["revision"] = json!(pools.revision());
        body["publishers"] = json!(listed);
    }
    (status, axum::Json(body)).into_response()
}

async fn metrics_answer(State(p): State<Probe>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        p.shared.metrics.render(),
    )
        .into_response()
}
