//! One function per command: read, print, patch. The pure parts live in their own modules.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail};
use clap::CommandFactory;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use rustqueue_api::contract::TokenScope;

use crate::brokers;
use crate::cli::{Cli, Command, Format, Rollout, Toggle};
use crate::cluster::{self, Target, pod_name};
use crate::patch;
use crate::reach::Reach;
use crate::stats::{self, BrokerStats};
use crate::summary;
use crate::wait::{self, Verdict};

/// How many brokers are asked at once.
const FAN_OUT: usize = 16;

/// Runs the command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Completion { shell } = cli.command {
        let mut cmd = Cli::command();
        clap_complete::generate(shell, &mut cmd, "rustqueuectl", &mut std::io::stdout());
        return Ok(ExitCode::SUCCESS);
    }
    let target = cluster::connect(
        cli.kubeconfig.as_deref(),
        cli.context.as_deref(),
        cli.namespace.as_deref(),
        &cli.name,
    )
    .await?;
    let ctx = Ctx {
        reach: Reach::new(target.clone(), cli.via),
        target,
        port: cli.broker_http_port,
    };
    match cli.command {
        Command::Status { output } => status(&ctx, output).await,
        Command::Brokers { output } => broker_table(&ctx, output).await,
        Command::Topics { topic, output } => topics(&ctx, topic.as_deref(), output).await,
        Command::Stats => fan_out(&ctx, Ask::Stats).await,
        Command::Scrub => fan_out(&ctx, Ask::Scrub).await,
        Command::Maintenance { broker, action } => {
            let on = action == Toggle::Enable;
            let body = patch::maintenance(&ctx.target.name, &broker, on)?;
            ctx.target.patch(&body).await?;
            let state = if on { "requested" } else { "disabled" };
            println!(
                "maintenance of {broker} {state} on RustQueue {}",
                ctx.target.what()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Storage { size } => {
            ctx.target.patch(&patch::storage(&size)?).await?;
            println!(
                "storageSize of RustQueue {} set to {}",
                ctx.target.what(),
                size.trim()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Rollout(r) => rollout(&ctx, r).await,
        Command::Wait { for_, timeout } => wait_for(&ctx, for_, timeout).await,
        Command::Tail {
            topic,
            count,
            timeout,
        } => crate::tail::tail(&ctx.target, &ctx.reach, &topic, count, timeout).await,
        Command::Report { file } => crate::collect::report(&ctx, file).await,
        Command::Completion { .. } => unreachable!("handled above"),
    }
}

/// What every command has.
pub struct Ctx {
    /// The RustQueue named on the command line.
    pub target: Target,
    /// How Pods are reached.
    pub reach: Reach,
    /// The brokers' HTTP port.
    pub port: u16,
}

/// Prints `value` as JSON or YAML.
pub fn print_as<T: serde::Serialize>(value: &T, format: Format) -> anyhow::Result<()> {
    let text = match format {
        Format::Yaml => serde_norway::to_string(value)?,
        Format::Json | Format::Table => serde_json::to_string_pretty(value)? + "\n",
    };
    print!("{text}");
    Ok(())
}

async fn status(ctx: &Ctx, output: Format) -> anyhow::Result<ExitCode> {
    let mut rq = ctx.target.queue().await?;
    // as `kubectl get -o json` prints it (without --show-managed-fields)
    rq.metadata.managed_fields = None;
    match output {
        Format::Table => print!("{}", summary::render(&rq, jiff::Timestamp::now())),
        f => print_as(&rq, f)?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn rollout(ctx: &Ctx, r: Rollout) -> anyhow::Result<ExitCode> {
    let what = ctx.target.what();
    let (body, done) = match r {
        Rollout::Pause => (patch::pause(true), "paused".to_string()),
        Rollout::Resume => (patch::pause(false), "resumed".to_string()),
        Rollout::Retry => {
            let nonce = patch::retry_nonce();
            (
                patch::retry(&nonce),
                format!("retried (retryNonce {nonce})"),
            )
        }
        Rollout::Rollback { image } => (
            patch::rollback(&image)?,
            format!("rolling back to {}", image.trim()),
        ),
        Rollout::Forward => (
            patch::forward(),
            "rolling forward to spec.image".to_string(),
        ),
        Rollout::Approve => {
            let rq = ctx.target.queue().await?;
            let (revision, body) = patch::approve(&rq)?;
            (body, format!("approved revision {revision}"))
        }
    };
    ctx.target.patch(&body).await?;
    println!("rollout of RustQueue {what} {done}");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for(
    ctx: &Ctx,
    what: crate::cli::WaitFor,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let rq = ctx.target.queue().await?;
        let line = wait::progress(&rq);
        if line != last {
            println!("[{:>4}s] {line}", start.elapsed().as_secs());
            let _ = std::io::stdout().flush();
            last = line;
        }
        match wait::judge(&rq, what) {
            Verdict::Done => return Ok(ExitCode::SUCCESS),
            Verdict::Stuck(why) => bail!("{why}"),
            Verdict::Pending => {}
        }
        if start.elapsed() >= timeout {
            eprintln!(
                "rustqueuectl: timed out after {}s waiting for {}; last seen: {last}",
                timeout.as_secs(),
                match what {
                    crate::cli::WaitFor::Ready => "Ready",
                    crate::cli::WaitFor::OperationDone => "the operation to finish",
                }
            );
            return Ok(ExitCode::from(2));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Each broker's `/v1/stats`, in Pod order; an error names the broker.
pub async fn all_stats(
    ctx: &Ctx,
    pods: &[Pod],
    token: &str,
) -> Vec<(String, anyhow::Result<serde_json::Value>)> {
    futures::stream::iter(pods)
        .map(|p| async move {
            let got = ctx
                .reach
                .get_json(p, ctx.port, "/v1/stats", Some(token))
                .await;
            (pod_name(p).to_string(), got)
        })
        .buffered(FAN_OUT)
        .collect()
        .await
}

/// Fails with one line naming every broker that failed.
fn failures<T>(results: &[(String, anyhow::Result<T>)]) -> anyhow::Result<()> {
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(b, r)| r.as_ref().err().map(|e| format!("{b}: {e:#}")))
        .collect();
    match failed.len() {
        0 => Ok(()),
        1 => Err(anyhow!("broker {}", failed[0])),
        n => Err(anyhow!("{n} brokers failed: {}", failed.join("; "))),
    }
}

#[derive(Clone, Copy)]
enum Ask {
    Stats,
    Scrub,
}

async fn fan_out(ctx: &Ctx, ask: Ask) -> anyhow::Result<ExitCode> {
    let rq = ctx.target.queue().await?;
    let pods = ctx.target.brokers().await?;
    let scope = match ask {
        Ask::Stats => TokenScope::Registry,
        Ask::Scrub => TokenScope::Admin,
    };
    let token = ctx.target.token(&rq, scope).await?;
    let results = match ask {
        Ask::Stats => all_stats(ctx, &pods, &token).await,
        Ask::Scrub => {
            futures::stream::iter(&pods)
                .map(|p| {
                    let token = token.clone();
                    async move {
                        let path = "/v1/storage/scrub";
                        let got = ctx
                            .reach
                            .http(p, ctx.port, http::Method::POST, path, Some(&token))
                            .await
                            .and_then(|(s, b)| crate::reach::json_2xx(path, s, &b));
                        (pod_name(p).to_string(), got)
                    }
                })
                .buffered(FAN_OUT)
                .collect()
                .await
        }
    };
    for (broker, r) in &results {
        if let Ok(v) = r {
            println!("{broker}\t{v}");
        }
    }
    failures(&results)?;
    Ok(ExitCode::SUCCESS)
}

async fn topics(ctx: &Ctx, only: Option<&str>, output: Format) -> anyhow::Result<ExitCode> {
    let rq = ctx.target.queue().await?;
    let pods = ctx.target.brokers().await?;
    let token = ctx.target.token(&rq, TokenScope::Registry).await?;
    let results = all_stats(ctx, &pods, &token).await;
    failures(&results)?;
    let per_broker: Vec<(String, BrokerStats)> = results
        .into_iter()
        .filter_map(|(b, r)| Some((b, serde_json::from_value(r.ok()?).ok()?)))
        .collect();
    let topics = stats::aggregate(&per_broker, only);
    if let (Some(t), true) = (only, topics.is_empty()) {
        bail!(
            "no broker of RustQueue {} holds topic {t}",
            ctx.target.what()
        );
    }
    match output {
        Format::Table => print!("{}", stats::render(&topics)),
        f => print_as(&topics, f)?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn broker_table(ctx: &Ctx, output: Format) -> anyhow::Result<ExitCode> {
    let rq = ctx.target.queue().await?;
    let pods = ctx.target.brokers().await?;
    let pvcs: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.target.client.clone(), &ctx.target.namespace);
    let token = ctx.target.token(&rq, TokenScope::Registry).await.ok();
    let rows = futures::stream::iter(&pods)
        .map(|p| {
            let pvcs = pvcs.clone();
            let token = token.clone();
            async move {
                let pvc = match brokers::claim_name(p) {
                    Some(c) => pvcs.get_opt(&c).await.ok().flatten(),
                    None => None,
                };
                let used = ctx
                    .reach
                    .http(p, ctx.port, http::Method::GET, "/metrics", None)
                    .await
                    .ok()
                    .and_then(|(_, b)| brokers::used_percent(&String::from_utf8_lossy(&b)));
                let depth = match &token {
                    Some(t) => ctx
                        .reach
                        .get_json(p, ctx.port, "/v1/stats", Some(t))
                        .await
                        .ok()
                        .and_then(|v| serde_json::from_value::<BrokerStats>(v).ok())
                        .map(|s| s.depth()),
                    None => None,
                };
                brokers::row(p, pvc.as_ref(), used, depth)
            }
        })
        .buffered(FAN_OUT)
        .collect::<Vec<_>>()
        .await;
    match output {
        Format::Table => print!("{}", brokers::render(&rows)),
        f => print_as(&rows, f)?,
    }
    Ok(ExitCode::SUCCESS)
}
