//! `rustqueue-discovery`: nsqlookupd-compatible lookup for a RustQueue cluster
//! (docs/discovery.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rustqueue_api::gateway::env as gateway_env;
use rustqueue_discovery::{
    Mode, PollerConfig, Shared, View, poll_brokers, router, static_view, watch_endpoint_slices,
};
use tokio::sync::watch;

#[derive(Parser, Debug)]
#[command(
    name = "rustqueue-discovery",
    version,
    about = "nsqlookupd-compatible lookup for RustQueue"
)]
struct Cli {
    /// HTTP listen address.
    #[arg(
        long,
        env = "RUSTQUEUE_DISCOVERY_ADDRESS",
        default_value = "0.0.0.0:4161"
    )]
    address: SocketAddr,
    /// Static mode: comma-separated broker HTTP addresses (`host:port`) instead of
    /// EndpointSlices, e.g. `127.0.0.1:4151` beside `make run`.
    #[arg(
        long,
        env = "RUSTQUEUE_DISCOVERY_STATIC_BROKERS",
        value_delimiter = ','
    )]
    static_brokers: Vec<String>,
    /// Namespace of the brokers' headless Service.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// The brokers' headless Service (its EndpointSlices are watched).
    #[arg(
        long,
        env = "RUSTQUEUE_BROKER_SERVICE",
        default_value = "rustqueue-brokers"
    )]
    broker_service: String,
    /// Broker HTTP port used when an EndpointSlice lists no port.
    #[arg(long, env = "RUSTQUEUE_BROKER_HTTP_PORT", default_value_t = 4151)]
    broker_http_port: u16,
    /// File holding the brokers' registry token (re-read every poll).
    #[arg(long, env = "RUSTQUEUE_REGISTRY_TOKEN_FILE")]
    registry_token_file: Option<PathBuf>,
    /// Kodo mode: `/nodes` advertises the three Kodo gateway identities (docs/kodo.md).
    #[arg(
        long,
        env = gateway_env::KODO_COMPATIBILITY_ENABLED,
        default_value_t = false
    )]
    kodo_compatibility_enabled: bool,
    /// Kodo mode: the gateway Service host every identity advertises (required there,
    /// refused in direct mode).
    #[arg(long, env = gateway_env::KODO_GATEWAY_ADDRESS)]
    kodo_gateway_address: Option<String>,
    /// Kodo cleanup compatibility: never supported, `true` is a startup error.
    #[arg(long, env = gateway_env::KODO_CLEANUP_ENABLED, default_value_t = false)]
    kodo_cleanup_enabled: bool,
    /// Log lines as `text` or `json` (one object a line: timestamp, level, target, message).
    #[arg(long, env = rustqueue_api::telemetry::LOG_FORMAT_ENV, default_value = "text")]
    log_format: rustqueue_api::telemetry::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    rustqueue_api::telemetry::init_logging(cli.log_format, "info");
    // Ring as the process-wide rustls provider, for what builds TLS without one of its own
    // (kube); reqwest clients come from rustqueue_api::http_client and do not need it.
    rustqueue_api::http_client::install_default_provider();
    let mode = Mode::from_settings(
        cli.kodo_compatibility_enabled,
        cli.kodo_gateway_address.as_deref(),
        cli.kodo_cleanup_enabled,
    )?;
    if let Mode::Kodo { gateway_address } = &mode {
        tracing::info!(%gateway_address, "Kodo mode: /nodes advertises the Kodo gateways");
    }
    let shared = Arc::new(Shared::with_mode(mode));
    let statics: Vec<String> = cli
        .static_brokers
        .iter()
        .filter(|s| !s.trim().is_empty())
        .cloned()
        .collect();
    let (tx, rx) = if statics.is_empty() {
        let client = kube::Client::try_default()
            .await
            .context("no Kubernetes client (set --static-brokers outside a cluster)")?;
        let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, &cli.namespace);
        let (tx, rx) = watch::channel(View {
            problem: Some("EndpointSlices not listed yet".into()),
            ..Default::default()
        });
        tokio::spawn(watch_endpoint_slices(
            api,
            cli.broker_service.clone(),
            cli.broker_http_port,
            tx.clone(),
            shared.clone(),
        ));
        tracing::info!(
            namespace = %cli.namespace,
            service = %cli.broker_service,
            "watching EndpointSlices"
        );
        (tx, rx)
    } else {
        tracing::info!(brokers = ?statics, "static mode");
        watch::channel(static_view(&statics))
    };
    let cfg = PollerConfig {
        registry_token_file: cli.registry_token_file.clone(),
    };
    tokio::spawn(poll_brokers(rx, cfg, shared.clone()));
    let listener = tokio::net::TcpListener::bind(cli.address)
        .await
        .with_context(|| format!("bind {}", cli.address))?;
    let local = listener.local_addr()?;
    shared
        .http_port
        .store(local.port(), std::sync::atomic::Ordering::Relaxed);
    tracing::info!(address = %local, "rustqueue-discovery listening");
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown())
        .await?;
    drop(tx);
    Ok(())
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}
