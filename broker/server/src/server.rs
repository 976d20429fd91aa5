//! Startup and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustqueue_engine::{AckMode, Engine, EngineConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::auth::AuthClient;
use crate::config::Config;
use crate::state::{Shared, decoder_limits, identify_limits};

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The configuration cannot be served (the `[tiering]` credentials went missing since it
    /// was loaded).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The data directory could not be opened.
    #[error("cannot open data directory: {0}")]
    Engine(String),
}

/// A running broker.
pub struct Running {
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

fn engine_config(cfg: &Config) -> EngineConfig {
    let q = &cfg.queue;
    let ack_mode = match q.publish_ack_mode.as_str() {
        "write_ack" => AckMode::WriteAck,
        "nsq_relaxed" => AckMode::NsqRelaxed,
        _ => AckMode::Durable,
    };
    EngineConfig {
        data_path: cfg.storage.data_path.clone(),
        node_id: cfg.node.id as u16,
        feature_level: cfg.storage.feature_level,
        ack_mode,
        max_segment_bytes: cfg.storage.max_segment_bytes,
        max_message_bytes: q.max_message_bytes,
        message_timeout: Duration::from_millis(q.message_timeout_ms),
        max_message_timeout: Duration::from_millis(q.max_message_timeout_ms),
        max_defer: Duration::from_millis(q.max_defer_ms),
        max_delivery_attempts: q.max_delivery_attempts,
        dead_letter_suffix: q.dead_letter_suffix.clone(),
        bootstrap_retention: Duration::from_secs(q.bootstrap_retention_seconds),
        relaxed_sync_messages: q.relaxed_sync_messages,
        relaxed_sync_bytes: q.relaxed_sync_bytes,
        relaxed_sync_interval: Duration::from_millis(q.relaxed_sync_interval_ms),
        max_topics: q.max_topics,
        node_publish_inflight_bytes: cfg.limits.node_publish_inflight_bytes,
        node_delivery_inflight_bytes: cfg.limits.node_delivery_inflight_bytes,
        message_index_cache_bytes: cfg.storage.message_index_cache_bytes,
        disk_high_watermark_percent: cfg.storage.disk_high_watermark_percent,
        disk_low_watermark_percent: cfg.storage.disk_low_watermark_percent,
        min_free_bytes: cfg.storage.min_free_bytes,
        protective_eviction_enabled: cfg.storage.protective_eviction_enabled,
        disk_pressure_grace: Duration::from_secs(cfg.storage.disk_pressure_grace_seconds),
        ..EngineConfig::default()
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The bound sockets, before anything serves them.
struct Listeners {
    tcp: TcpListener,
    http: TcpListener,
    https: Option<TcpListener>,
}

impl Listeners {
    async fn bind(cfg: &Config) -> Result<Listeners, StartError> {
        let bind = |addr: String| async move {
            TcpListener::bind(&addr)
                .await
                .map_err(|source| StartError::Bind { addr, source })
        };
        Ok(Listeners {
            tcp: bind(cfg.network.tcp_address.clone()).await?,
            http: bind(cfg.network.http_address.clone()).await?,
            https: match &cfg.network.https_address {
                Some(addr) => Some(bind(addr.clone()).await?),
                None => None,
            },
        })
    }

    /// The bound addresses: TCP, HTTP, HTTPS.
    fn addrs(&self) -> Result<(SocketAddr, SocketAddr, Option<SocketAddr>), StartError> {
        let local = |l: &TcpListener, what: &str| {
            l.local_addr().map_err(|source| StartError::Bind {
                addr: what.into(),
                source,
            })
        };
        let https = self.https.as_ref().map(|l| local(l, "https")).transpose()?;
        Ok((local(&self.tcp, "tcp")?, local(&self.http, "http")?, https))
    }
}

/// Opens the engine, binds TCP and HTTP, and starts serving.
pub async fn start(cfg: Config) -> Result<Running, StartError> {
    let tls = cfg
        .security
        .tls
        .as_ref()
        .map(crate::tls::TlsReloader::load)
        .transpose()?
        .map(Arc::new);
    let listeners = Listeners::bind(&cfg).await?;
    crate::control::preflight(&cfg).map_err(|e| StartError::Engine(e.to_string()))?;
    let mut engine_cfg = engine_config(&cfg);
    engine_cfg.tiering =
        crate::config::tiering::options(cfg.tiering.as_ref(), |k| std::env::var(k).ok())?;
    let engine = Engine::open(engine_cfg)
        .await
        .map_err(|e| StartError::Engine(e.to_string()))?;
    let (tx, rx) = watch::channel(false);
    let (tcp_addr, http_addr, https_addr) = listeners.addrs()?;
    let l = &cfg.limits;
    let auth = AuthClient::new(
        &cfg.security.auth_http_addresses,
        Duration::from_millis(l.auth_timeout_ms),
        Duration::from_secs(l.auth_max_ttl_seconds),
        l.auth_response_bytes as usize,
    );
    let control = Arc::new(
        crate::control::from_config(
            &cfg,
            engine.clone(),
            cfg.network.advertised_tcp_port.unwrap_or(tcp_addr.port()),
            cfg.network.advertised_http_port.unwrap_or(http_addr.port()),
        )
        .map_err(|e| StartError::Engine(format!("management files: {e}")))?,
    );
    let shared = Arc::new(Shared {
        control,
        identify: identify_limits(&cfg, tls.is_some()),
        decoder: decoder_limits(&cfg),
        tls,
        auth,
        clients: Default::default(),
        start_time: SystemTime::now(),
        tcp_addr,
        http_addr,
        https_addr,
        hostname: hostname(),
        shutdown: rx,
        engine,
        cfg,
    });
    let tasks = serve(&shared, listeners)?;
    tracing::info!(tcp = %shared.tcp_addr, http = %shared.http_addr, https = ?shared.https_addr, "rustqueued listening");
    Ok(Running {
        shared,
        shutdown: tx,
        tasks,
    })
}

/// Starts the TCP, HTTP and HTTPS servers and the lookupd registrations.
fn serve(shared: &Arc<Shared>, listeners: Listeners) -> Result<JoinSet<()>, StartError> {
    let mut tasks = JoinSet::new();
    tasks.spawn(serve_tcp(shared.clone(), listeners.tcp));
    let s = shared.clone();
    tasks.spawn(async move {
        let mut stop = s.shutdown.clone();
        let app = crate::http::router(s);
        let served = axum::serve(listeners.http, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|v| *v).await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!("HTTP server failed: {e}");
        }
    });
    if let Some(tls) = &shared.tls {
        tls.clone().watch(shared.shutdown.clone());
    }
    if let (Some(https), Some(tls)) = (listeners.https, shared.tls.clone()) {
        let s = shared.clone();
        let listener =
            crate::https::TlsListener::new(https, tls, s.shutdown.clone()).map_err(|source| {
                StartError::Bind {
                    addr: "https".into(),
                    source,
                }
            })?;
        tasks.spawn(async move {
            let mut stop = s.shutdown.clone();
            let served = axum::serve(listener, crate::http::router(s))
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|v| *v).await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!("HTTPS server failed: {e}");
            }
        });
    }
    for addr in &shared.cfg.network.lookupd_tcp_addresses {
        tasks.spawn(crate::lookupd::run(shared.clone(), addr.clone()));
    }
    Ok(tasks)
}

/// Serves NSQ TCP until shutdown, then gives open sessions the grace period to finish.
async fn serve_tcp(s: Arc<Shared>, tcp: TcpListener) {
    let mut sessions = JoinSet::new();
    crate::tcp::serve(s.clone(), tcp, &mut sessions).await;
    let grace = Duration::from_secs(s.cfg.shutdown.grace_seconds)
        .saturating_sub(Duration::from_millis(250));
    if tokio::time::timeout(grace, async {
        while sessions.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            "{} sessions still open after the grace period; closing them",
            sessions.len()
        );
        sessions.shutdown().await;
    }
}

impl Running {
    /// The bound NSQ TCP address.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.shared.tcp_addr
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.shared.http_addr
    }

    /// The bound HTTPS address, when `network.https_address` is set.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.shared.https_addr
    }

    /// Resolves with the fault's reason once storage is isolated (checked every
    /// [`crate::isolation::MONITOR_INTERVAL`]); never on a healthy broker or during a graceful
    /// shutdown. Only the binary waits on it: see [`crate::isolation`].
    pub async fn storage_fault(&self) -> String {
        crate::isolation::storage_fault(&self.shared.engine, crate::isolation::MONITOR_INTERVAL)
            .await
    }

    /// The engine behind the broker (feature `test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Runs the TLS watcher's check now: `Ok(true)` when changed files are in force, an error
    /// when they cannot be used (the previous ones stay), `Ok(false)` without TLS (feature
    /// `test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn reload_tls_if_changed(&self) -> Result<bool, crate::tls::TlsError> {
        match &self.shared.tls {
            Some(tls) => tls.reload_if_changed(),
            None => Ok(false),
        }
    }

    /// Stops accepting, lets sessions and in-progress publishes finish (bounded by the
    /// grace period), then flushes and closes the engine.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        while self.tasks.join_next().await.is_some() {}
        self.shared.engine.shutdown().await;
    }

    /// Stop after storage isolation: stops accepting and closes sessions like [`Self::shutdown`],
    /// but waits at most `bound` for them and never calls the engine's shutdown, whose sync,
    /// checkpoint and manifest writes would only be refused by (or hang on) the faulted
    /// storage. The directory lock goes with the process.
    pub async fn stop_isolated(mut self, bound: Duration) {
        let _ = self.shutdown.send(true);
        let drained = tokio::time::timeout(bound, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "listeners and sessions still busy {bound:?} after storage isolation; abandoning them"
            );
            // Aborting the TCP task drops its session set, which aborts every session.
            self.tasks.abort_all();
        }
    }
}
