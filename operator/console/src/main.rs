//! `rustqueue-console`: collects a RustQueue's state into a snapshot, serves it and the web
//! pages, and (when enabled) the guarded Topic/Channel management flow. Configured by
//! environment variables (docs/console.md); exits non-zero if a task ends.

use std::sync::Arc;

use anyhow::Context as _;
use rustqueue_console::Console;
use rustqueue_console::config::Config;
use rustqueue_console::kube_store::KubeCluster;

async fn terminated() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler cannot fail");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).is_some_and(|a| a == "--version") {
        println!("rustqueue-console {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "rustqueue_console=info".into()),
        )
        .init();
    let config = Config::from_env().context("invalid configuration")?;
    let client = kube::Client::try_default()
        .await
        .context("connect to the API server")?;
    let kube = Arc::new(KubeCluster::new(
        client,
        config.namespace.clone(),
        config.name.clone(),
    ));
    let listener = tokio::net::TcpListener::bind(config.address)
        .await
        .with_context(|| format!("bind {}", config.address))?;
    tracing::info!(
        address = %config.address,
        namespace = %config.namespace,
        name = %config.name,
        management = config.management_enabled,
        "starting"
    );
    let console = Console::new(config, kube.clone(), kube);
    let collector = tokio::spawn(console.collector().run());
    let reconciler = tokio::spawn(console.reconciler().run());
    let management = console.config.management_enabled;
    tokio::select! {
        r = console.serve(listener) => r.context("the HTTP server stopped")?,
        r = collector => anyhow::bail!("the collector stopped: {r:?}"),
        r = reconciler, if management => anyhow::bail!("the reconciler stopped: {r:?}"),
        () = terminated() => tracing::info!("terminating"),
    }
    Ok(())
}
