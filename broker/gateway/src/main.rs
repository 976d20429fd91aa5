//! `rustqueue-gateway`: the producer gateway of a RustQueue cluster (docs/gateway.md).

use clap::Parser;
use rustqueue_gateway::{Cli, Gateway, KodoGateway, KodoSettings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    rustqueue_api::telemetry::init_logging(cli.log_format, "info");
    let cfg = cli.validate()?;
    let kodo = if cli.kodo_compatibility_enabled {
        Some(KodoSettings::from_cli(&cli)?)
    } else {
        None
    };
    if let Some(kodo) = kodo {
        let gateway = KodoGateway::start(cfg, kodo).await?;
        shutdown_signal().await;
        tracing::info!("shutting down");
        gateway.shutdown().await;
        return Ok(());
    }
    let gateway = Gateway::start(cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    gateway.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
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
}
