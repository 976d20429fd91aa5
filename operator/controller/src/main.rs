//! `rustqueue-operator`: `crd` prints the CRDs (or writes them into a directory); `run` (the
//! default) starts the operator.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::events::{Recorder, Reporter};
use rustqueue_operator::{
    Context, Metrics, Scope, broker_http_client, campaign, crd_files, crd_stream, release_lease,
    serve_metrics,
};
use tokio::sync::watch;

#[derive(Parser)]
#[command(
    name = "rustqueue-operator",
    version,
    about = "Operator for RustQueue clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "RUSTQUEUE_OPERATOR_HTTP_ADDRESS",
        default_value = "0.0.0.0:8080",
        global = true
    )]
    http_address: SocketAddr,
    /// Testing only: cap the Kodo cutover grace below the CRD's 630 s minimum, so a test
    /// cluster need not wait 11 minutes per cutover (docs/kodo.md). Unset in production.
    #[arg(long, env = "RUSTQUEUE_OPERATOR_KODO_MAX_GRACE_SECONDS", global = true)]
    kodo_max_grace_seconds: Option<u64>,
    /// Log lines as `text` or `json` (one object a line: timestamp, level, target, message and
    /// the event's fields); config/manager and the chart set json.
    #[arg(long, env = rustqueue_api::telemetry::LOG_FORMAT_ENV, default_value = "text", global = true)]
    log_format: rustqueue_api::telemetry::LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions (RustQueue, RustQueueTopic, RustQueueChannel) as
    /// one YAML stream, or write each to its file in `--dir`.
    Crd {
        /// Write `rustqueue.io_<plural>.yaml` files here instead of printing them.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Run the operator (the default).
    Run,
}

/// The operator's own namespace (where its Lease lives): `POD_NAMESPACE`, else the
/// ServiceAccount's namespace file, else `default`.
fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "default".into())
}

/// Namespaces whose RustQueues this operator manages: `WATCH_NAMESPACES` (comma-separated),
/// empty or unset meaning every namespace.
fn watched_namespaces() -> Scope {
    Scope::from_list(&std::env::var("WATCH_NAMESPACES").unwrap_or_default())
}

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

fn identity() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("operator-{}", std::process::id()))
}

/// `crd`: every CRD to stdout, or each into its file under `dir`.
fn write_crds(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(dir) = dir else {
        print!("{}", crd_stream());
        return Ok(());
    };
    for (file, yaml) in crd_files() {
        let path = dir.join(file);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Crd { dir }) = cli.command {
        return write_crds(dir.as_deref());
    }
    rustqueue_api::telemetry::init_logging(cli.log_format, "rustqueue_operator=info");
    // Ring as the process-wide rustls provider, for what builds TLS without one of its own
    // (kube); reqwest clients come from rustqueue_api::http_client and do not need it.
    rustqueue_api::http_client::install_default_provider();
    // Reconcile spans go out only when OTEL_EXPORTER_OTLP_ENDPOINT is set
    // (docs/observability.md).
    let traces =
        rustqueue_api::otel::init("rustqueue-operator").context("starting trace export")?;
    let ran = run(cli.http_address, cli.kodo_max_grace_seconds).await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    ran
}

async fn run(http_address: SocketAddr, kodo_max_grace_seconds: Option<u64>) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to the API server")?;
    let namespace = own_namespace();
    let scope = watched_namespaces();
    let me = identity();
    tracing::info!(%namespace, watching = %scope, identity = %me, "starting");
    let metrics = Metrics::new();
    let mut server = tokio::spawn(serve_metrics(http_address, metrics.clone()));

    let (tx, mut leading) = watch::channel(false);
    let leases = Api::<Lease>::namespaced(client.clone(), &namespace);
    let mut election = tokio::spawn(campaign(leases.clone(), me.clone(), tx));
    let mut term = std::pin::pin!(terminated());
    let reporter = Reporter {
        controller: "rustqueue-operator".into(),
        instance: Some(me.clone()),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        http: broker_http_client(),
        metrics: metrics.clone(),
        kodo_max_grace_seconds,
    });
    loop {
        tokio::select! {
            r = &mut server => anyhow::bail!("health server stopped: {r:?}"),
            r = &mut election => anyhow::bail!("leader election stopped: {r:?}"),
            () = &mut term => return Ok(()),
            changed = leading.wait_for(|l| *l) => { changed.context("leader channel closed")?; }
        }
        metrics.leader.set(1);
        tracing::info!("leading: starting the controller");
        let mut lost = leading.clone();
        tokio::select! {
            () = rustqueue_operator::run(ctx.clone(), scope.clone()) => anyhow::bail!("controller stream ended"),
            r = &mut server => anyhow::bail!("health server stopped: {r:?}"),
            r = &mut election => anyhow::bail!("leader election stopped: {r:?}"),
            () = &mut term => {
                // The controller future is dropped above: no reconcile is in flight. Stop
                // campaigning, then hand the Lease over at once.
                election.abort();
                match release_lease(&leases, &me).await {
                    Ok(released) => tracing::info!(released, "SIGTERM: Lease released, exiting"),
                    Err(e) => tracing::warn!(error = %e, "SIGTERM: could not release the Lease"),
                }
                return Ok(());
            }
            changed = lost.wait_for(|l| !*l) => { changed.context("leader channel closed")?; }
        }
        // Dropping the controller future above abandoned any reconcile in flight.
        metrics.leader.set(0);
        tracing::warn!("lost leadership: controller stopped, standing by");
    }
}
