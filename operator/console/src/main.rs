//! `rustqueue-console`: collects a RustQueue's state into a snapshot, serves it and the web
//! pages, and (when enabled) the guarded Topic/Channel management flow. Configured by
//! environment variables (docs/console.md); exits non-zero if a task ends.

use std::sync::Arc;

use anyhow::Context as _;
use rustqueue_api::telemetry::LogFormat;
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

/// What the command line asks for: everything else is configured by environment variables.
enum Args {
    Version,
    Run(LogFormat),
}

/// `--version`, or `--log-format text|json` (default `RUSTQUEUE_LOG_FORMAT`, else text).
fn args() -> Args {
    let mut format = std::env::var(rustqueue_api::telemetry::LOG_FORMAT_ENV)
        .ok()
        .map_or(Ok(LogFormat::Text), |v| v.parse());
    let mut argv = std::env::args().skip(1);
    while let Some(a) = argv.next() {
        match a.as_str() {
            "--version" | "-V" => return Args::Version,
            "--log-format" => format = argv.next().unwrap_or_default().parse(),
            other => match other.strip_prefix("--log-format=") {
                Some(v) => format = v.parse(),
                None => fail(&format!(
                    "unknown argument {other:?}: rustqueue-console takes --version and \
                     --log-format text|json; everything else is environment (docs/console.md)"
                )),
            },
        }
    }
    Args::Run(format.unwrap_or_else(|e| fail(&e)))
}

fn fail(message: &str) -> ! {
    eprintln!("rustqueue-console: {message}");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let log_format = match args() {
        Args::Version => {
            println!("rustqueue-console {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        Args::Run(f) => f,
    };
    rustqueue_api::telemetry::init_logging(log_format, "rustqueue_console=info");
    // Ring as the process-wide rustls provider, for what builds TLS without one of its own
    // (kube); reqwest clients come from rustqueue_api::http_client and do not need it.
    rustqueue_api::http_client::install_default_provider();
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
