//! `rustqueued` entry point: flags, config, logging, signals, and the storage-fault exit.
//!
//! Exit status: 0 after a signal-driven graceful shutdown (or `--check-config` /
//! `--capabilities-output`); 1 when the configuration or startup is refused; 2 for bad
//! command-line flags; 3 when storage became isolated at runtime
//! ([`rustqueue_server::isolation`]); 4 when `storage verify` found damage, or `storage restore`
//! a damaged or missing object.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use rustqueue_server::isolation;
use rustqueue_server::{Config, ConfigFile, LogFormat};

/// RustQueue broker: NSQ V2 TCP + nsqd-compatible HTTP on durable local storage.
#[derive(Parser, Debug)]
#[command(name = "rustqueued", version = env!("RUSTQUEUE_VERSION_LINE"))]
struct Args {
    /// TOML configuration file (unknown keys are rejected).
    #[arg(long, env = "RUSTQUEUE_CONFIG")]
    config: Option<PathBuf>,
    /// Load and validate the configuration, print the effective values as TOML (a file
    /// `--config` accepts), and exit.
    #[arg(long)]
    check_config: bool,
    /// Write this binary's capabilities (JSON, the `binary` object of `/v1/capabilities`) to
    /// the file and exit without starting (the operator's preflight probe).
    #[arg(long, value_name = "FILE")]
    capabilities_output: Option<PathBuf>,
    /// Register with the nsqlookupd at this TCP address (repeatable), as nsqd's flag of the
    /// same name; replaces `network.lookupd_tcp_addresses` and its environment variable.
    #[arg(long = "lookupd-tcp-address", value_name = "HOST:PORT")]
    lookupd_tcp_addresses: Vec<String>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Offline tools for the data directory of a stopped broker (docs/operations.md).
    Storage {
        #[command(subcommand)]
        action: StorageCmd,
    },
}

#[derive(clap::Subcommand, Debug)]
enum StorageCmd {
    /// Read every file and report what is intact, torn or damaged; writes nothing. Exit 0
    /// when nothing is damaged, 4 when something is.
    Verify {
        /// Data directory (default: `storage.data_path` of the configuration).
        #[arg(long)]
        data_path: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Also read the objects of remote-only (evicted) segments from the bucket of the
        /// configuration's [tiering] and check their size and CRC-32C against the tiered record.
        #[arg(long)]
        remote: bool,
    },
    /// Recover as a start would (quarantine damage, rebuild indexes, checkpoint channels),
    /// scrub every sealed segment, and print what was quarantined.
    Repair {
        /// Data directory (default: `storage.data_path` of the configuration).
        #[arg(long)]
        data_path: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// First rewrite a damaged or missing `COMPATIBILITY` with a feature level as the
        /// active writer and minimum reader level: --feature-level (the level the broker last
        /// ran with; refused when the stored records need more), or without it the lowest
        /// level the stored records need.
        #[arg(long = "rebuild-compatibility")]
        rebuild_compatibility: bool,
        /// The level for --rebuild-compatibility.
        #[arg(long, requires = "rebuild_compatibility")]
        feature_level: Option<u8>,
        /// First rewrite a damaged or missing `broker.meta` for this node (refused when a
        /// stored message id belongs to another node); ids resume past the highest stored one.
        #[arg(long = "rebuild-broker-meta", requires = "node_id")]
        rebuild_broker_meta: bool,
        /// The node id for --rebuild-broker-meta.
        #[arg(long)]
        node_id: Option<u16>,
    },
    /// Rebuild a lost data directory from the bucket of `[tiering]`: topics, sealed segments
    /// (each checked), channel checkpoints; report what was lost. The broker must be stopped.
    /// Exit 0 when everything in the bucket was usable, 4 when an object was damaged or
    /// missing (reported, never used).
    Restore {
        /// Required: where to restore from (the bucket of the configuration's `[tiering]`).
        #[arg(long, required = true)]
        from_bucket: bool,
        /// Data directory to fill (default: `storage.data_path` of the configuration). It must
        /// be missing or empty.
        #[arg(long)]
        data_path: Option<PathBuf>,
        /// The node whose objects are restored (default: `node.id` of the configuration).
        #[arg(long)]
        node_id: Option<u16>,
        /// Delete whatever the data directory holds first instead of refusing.
        #[arg(long)]
        force: bool,
        /// Print the report as JSON (progress still goes to standard error).
        #[arg(long)]
        json: bool,
        /// Restore only into an empty data directory, and succeed doing nothing otherwise: a
        /// directory holding a broker's data (`FORMAT`) is left alone, and so is an empty one
        /// when the bucket holds no catalog for the node (a new broker). A directory with
        /// files but no `FORMAT` (a restore cut short) is refused. Damaged objects are
        /// reported but exit 0, so the broker starts on what came back. The operator's restore
        /// init container runs this before every broker start (docs/tiering.md).
        #[arg(long, conflicts_with = "force")]
        if_empty: bool,
        /// Also write a short JSON summary (outcome and counts) to this file, e.g. the
        /// container's termination message, /dev/termination-log.
        #[arg(long, value_name = "FILE")]
        summary_file: Option<PathBuf>,
    },
}

/// First line of `--check-config`'s output: a TOML comment, so the whole output stays a
/// configuration file.
const CHECK_CONFIG_HEADER: &str =
    "# configuration OK: the effective values (file, environment, flags) for --config";

/// Exit status of `storage verify` when it found damage.
const EXIT_DAMAGE_FOUND: i32 = 4;

/// Runs a `storage` subcommand; returns the process exit status.
fn storage_command(action: StorageCmd, cfg: &Config) -> anyhow::Result<i32> {
    use rustqueue_engine::offline;
    let fs = std::sync::Arc::new(rustqueue_engine::RealFs);
    match action {
        StorageCmd::Verify { .. } => anyhow::bail!("storage verify runs in verify_command"),
        StorageCmd::Restore { .. } => anyhow::bail!("storage restore runs in restore_command"),
        StorageCmd::Repair {
            data_path,
            json,
            rebuild_compatibility,
            feature_level,
            rebuild_broker_meta,
            node_id,
        } => {
            let root = data_path.unwrap_or_else(|| cfg.storage.data_path.clone());
            if rebuild_compatibility {
                let done = offline::rebuild_compatibility(fs.clone(), &root, feature_level)
                    .with_context(|| format!("rebuilding COMPATIBILITY in {}", root.display()))?;
                eprintln!("{done}");
            }
            if let (true, Some(node)) = (rebuild_broker_meta, node_id) {
                let done = offline::rebuild_broker_meta(fs.clone(), &root, node)
                    .with_context(|| format!("rebuilding broker.meta in {}", root.display()))?;
                eprintln!("{done}");
            }
            let report = offline::repair(fs, &root)
                .with_context(|| format!("repairing {}", root.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                for r in &report.new_findings {
                    println!(
                        "quarantined {:?} {} bytes {}..{}: {} messages {:?}; {}",
                        r.kind,
                        r.file,
                        r.offset_start,
                        r.offset_end,
                        r.messages,
                        r.positions,
                        r.action
                    );
                }
                println!(
                    "{} topics, {} sealed segments scrubbed, {} indexes rebuilt, {} new quarantine records",
                    report.topics,
                    report.segments_scrubbed,
                    report.indexes_rebuilt,
                    report.new_findings.len()
                );
            }
            Ok(0)
        }
    }
}

/// The flags of `storage restore`.
struct RestoreFlags {
    data_path: Option<PathBuf>,
    node_id: Option<u16>,
    force: bool,
    json: bool,
    if_empty: bool,
    summary_file: Option<PathBuf>,
}

/// Writes the restore's summary to `--summary-file`, when given.
fn write_summary(
    path: Option<&PathBuf>,
    summary: &rustqueue_api::contract::RestoreSummary,
) -> anyhow::Result<()> {
    eprintln!("{}", summary.describe());
    if let Some(path) = path {
        let json = serde_json::to_string(summary).context("encoding the restore summary")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `storage restore --from-bucket`: the restore, its progress on stderr and its report.
async fn restore_command(cfg: &Config, flags: RestoreFlags) -> anyhow::Result<i32> {
    use rustqueue_api::contract::{RestoreOutcome, RestoreSummary};
    use rustqueue_engine::restore::{
        DirectoryState, RestoreError, RestoreOptions, directory_state, restore_from_bucket,
    };
    let RestoreFlags {
        data_path,
        node_id,
        force,
        json,
        if_empty,
        summary_file,
    } = flags;
    let node = node_id.unwrap_or(cfg.node.id as u16);
    let root = data_path.unwrap_or_else(|| cfg.storage.data_path.clone());
    if if_empty {
        match directory_state(&rustqueue_engine::RealFs, &root)
            .with_context(|| format!("reading {}", root.display()))?
        {
            DirectoryState::Empty => {}
            DirectoryState::Formatted => {
                write_summary(
                    summary_file.as_ref(),
                    &RestoreSummary::nothing(RestoreOutcome::HasData, node),
                )?;
                return Ok(0);
            }
            DirectoryState::Unformatted(names) => anyhow::bail!(
                "{} holds files ({}) but no FORMAT: a restore cut short, or not a data \
                 directory. --if-empty never deletes anything: check it, then run `rustqueued \
                 storage restore --from-bucket --force` by hand (docs/operations.md)",
                root.display(),
                names.join(", ")
            ),
        }
    }
    let Some(tiering) =
        rustqueue_server::tiering_options(cfg.tiering.as_ref(), |k| std::env::var(k).ok())?
    else {
        anyhow::bail!(
            "storage restore --from-bucket reads the bucket of the configuration's [tiering] \
             section, and there is none: pass the broker's --config (or RUSTQUEUE_CONFIG)"
        );
    };
    let opts = RestoreOptions {
        bucket: tiering.bucket,
        node_id: node,
        data_path: root.clone(),
        force,
    };
    let report = match restore_from_bucket(opts, &mut |line| eprintln!("{line}")).await {
        Ok(report) => report,
        Err(e @ RestoreError::NoCatalog { .. }) if if_empty => {
            eprintln!("{e}");
            write_summary(
                summary_file.as_ref(),
                &RestoreSummary::nothing(RestoreOutcome::NothingInBucket, node),
            )?;
            return Ok(0);
        }
        Err(e) => {
            return Err(e).with_context(|| format!("restoring {} from the bucket", root.display()));
        }
    };
    let count = |n: usize| n as u64;
    write_summary(
        summary_file.as_ref(),
        &RestoreSummary {
            outcome: RestoreOutcome::Restored,
            node_id: node,
            topics: count(report.topics.len()),
            topics_not_restored: count(report.topics_not_restored),
            segments_restored: report
                .topics
                .iter()
                .map(|t| count(t.segments_restored))
                .sum(),
            messages_restored: report.topics.iter().map(|t| t.messages_restored).sum(),
            lost_messages: report.lost_messages,
            damaged_objects: count(report.damaged_objects),
        },
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_restore(&report);
    }
    // Under --if-empty (the operator's init container) the broker must start on what came
    // back: the summary carries the damaged objects and the operator reports them.
    Ok(if report.damaged() && !if_empty {
        EXIT_DAMAGE_FOUND
    } else {
        0
    })
}

/// `storage verify`, with `--remote` the objects of remote-only segments too.
async fn verify_command(
    cfg: &Config,
    data_path: Option<PathBuf>,
    json: bool,
    remote: bool,
) -> anyhow::Result<i32> {
    use rustqueue_engine::offline;
    let root = data_path.unwrap_or_else(|| cfg.storage.data_path.clone());
    let report = offline::verify(&rustqueue_engine::RealFs, &root)
        .with_context(|| format!("verifying {}", root.display()))?;
    let remote_checks = if remote && !report.remote_segments.is_empty() {
        let Some(tiering) =
            rustqueue_server::tiering_options(cfg.tiering.as_ref(), |k| std::env::var(k).ok())?
        else {
            anyhow::bail!(
                "storage verify --remote reads the bucket of the configuration's [tiering] \
                 section, and there is none: pass the broker's --config (or RUSTQUEUE_CONFIG)"
            );
        };
        rustqueue_engine::check_remote_segments(tiering.bucket, &report.remote_segments)
            .await
            .context("checking the objects of remote-only segments")?
    } else {
        Vec::new()
    };
    let remote_damaged = remote_checks.iter().filter(|c| c.problem.is_some()).count();
    let unchecked = if remote {
        0
    } else {
        report.remote_segments.len()
    };
    if json {
        #[derive(serde::Serialize)]
        struct Output<'a> {
            #[serde(flatten)]
            report: &'a offline::VerifyReport,
            remote_checked: &'a [rustqueue_engine::RemoteCheck],
            remote_damaged: usize,
            remote_unchecked: usize,
        }
        let out = Output {
            report: &report,
            remote_checked: &remote_checks,
            remote_damaged,
            remote_unchecked: unchecked,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_verify(&report, &remote_checks, unchecked);
    }
    Ok(if report.damaged_files + remote_damaged > 0 {
        EXIT_DAMAGE_FOUND
    } else {
        0
    })
}

fn print_verify(
    report: &rustqueue_engine::offline::VerifyReport,
    remote_checks: &[rustqueue_engine::RemoteCheck],
    unchecked: usize,
) {
    for f in &report.files {
        println!(
            "{:<11} {:<18} {}: {}",
            format!("{:?}", f.status).to_lowercase(),
            f.kind,
            f.file,
            f.detail
        );
        if !f.lost_positions.is_empty() {
            println!("            lost positions: {:?}", f.lost_positions);
        }
    }
    for c in remote_checks {
        match &c.problem {
            None => println!(
                "{:<11} {:<18} {}: size and CRC-32C match",
                "ok", "remote_object", c.key
            ),
            Some(p) => println!("{:<11} {:<18} {}: {p}", "damaged", "remote_object", c.key),
        }
    }
    println!(
        "{} files checked, {} damaged, {} quarantine records on file",
        report.files.len(),
        report.damaged_files,
        report.quarantine_on_record.len()
    );
    if !remote_checks.is_empty() {
        let bad = remote_checks.iter().filter(|c| c.problem.is_some()).count();
        println!(
            "{} remote-only segments' objects checked in the bucket, {bad} damaged or missing",
            remote_checks.len()
        );
    }
    if unchecked > 0 {
        println!(
            "{unchecked} remote-only segments were not checked (their objects are in the \
             bucket; --remote reads them)"
        );
    }
}

/// How long before now `ms` (since the epoch) was, for people.
fn ago(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format!(
        "{ms} ms since the epoch, {} s ago",
        now.saturating_sub(ms) / 1000
    )
}

/// The restore's report as text: per topic what came back and what was lost.
fn print_restore(report: &rustqueue_engine::restore::RestoreReport) {
    {
        for t in &report.topics {
            let positions = t
                .restored_positions
                .map_or("none".into(), |r| format!("{}..={}", r.from, r.through));
            println!(
                "topic {}: {} (incarnation {}), {} segments, {} messages restored (positions {positions}), head {} at its checkpoint ({})",
                t.topic,
                if t.restored {
                    "restored"
                } else {
                    "NOT restored"
                },
                t.incarnation,
                t.segments_restored,
                t.messages_restored,
                t.head.map_or("unknown".into(), |h| h.to_string()),
                t.checkpoint_written_at_ms.map_or("none".into(), ago),
            );
            match t.lost_messages {
                Some(0) => println!("  lost: nothing"),
                Some(n) => {
                    let ranges: Vec<String> = t
                        .lost
                        .iter()
                        .map(|r| format!("{}..={}", r.from, r.through))
                        .collect();
                    println!("  lost: {n} messages (positions {})", ranges.join(", "));
                }
                None => println!("  lost: unknown (no usable checkpoint)"),
            }
            for c in &t.channels {
                println!(
                    "  channel {}: {} lost messages it had not finished",
                    c.channel, c.lost_messages
                );
            }
            for d in &t.damaged {
                println!("  DAMAGED {}: {}", d.key, d.detail);
            }
            if !t.not_restored_after_damage.is_empty() {
                println!(
                    "  not restored (after the damaged segment): bases {:?}",
                    t.not_restored_after_damage
                );
            }
            if t.collected_segments_skipped > 0 {
                println!(
                    "  {} uploaded segments skipped: collected before the checkpoint",
                    t.collected_segments_skipped
                );
            }
        }
        for i in &report.ignored {
            println!(
                "ignored: topic {} incarnation {} ({} objects): not in the catalog (deleted, replaced by a new incarnation, or created after the catalog)",
                i.topic, i.incarnation, i.objects
            );
        }
        for f in &report.findings {
            println!("finding on open: {:?} {}: {}", f.kind, f.file, f.action);
        }
        println!(
            "{} topics restored, {} not; {} messages lost; {} damaged or missing objects; the broker can start on {}",
            report.topics.len() - report.topics_not_restored,
            report.topics_not_restored,
            report.lost_messages,
            report.damaged_objects,
            report.data_path.display()
        );
    }
}

fn init_logging(format: LogFormat) {
    rustqueue_api::telemetry::init_logging(format, "info");
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler cannot fail");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let lookupd = args.lookupd_tcp_addresses.join(",");
    let cfg = Config::load(args.config.as_deref(), |k| match k {
        // the flags go through the same override and validation as the variable
        "RUSTQUEUE_LOOKUPD_TCP_ADDRESSES" if !lookupd.is_empty() => Some(lookupd.clone()),
        _ => std::env::var(k).ok(),
    })
    .context("configuration rejected")?;
    if let Some(path) = &args.capabilities_output {
        let caps = rustqueue_server::binary_capabilities(&cfg);
        let json = serde_json::to_string_pretty(&caps).context("encoding capabilities")?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    if let Some(Cmd::Storage { action }) = args.command {
        let code = match action {
            StorageCmd::Restore {
                from_bucket: _,
                data_path,
                node_id,
                force,
                json,
                if_empty,
                summary_file,
            } => {
                let flags = RestoreFlags {
                    data_path,
                    node_id,
                    force,
                    json,
                    if_empty,
                    summary_file,
                };
                restore_command(&cfg, flags).await?
            }
            StorageCmd::Verify {
                data_path,
                json,
                remote,
            } => verify_command(&cfg, data_path, json, remote).await?,
            action => storage_command(action, &cfg)?,
        };
        std::process::exit(code);
    }
    if args.check_config {
        // TOML, so the output can be saved and fed back with `--config`
        let effective =
            toml::to_string(&cfg).context("encoding the effective configuration as TOML")?;
        print!("{CHECK_CONFIG_HEADER}\n{effective}");
        return Ok(());
    }
    init_logging(cfg.log_format);
    // Spans go out only when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md).
    let traces = rustqueue_api::otel::init("rustqueued").context("starting trace export")?;
    let running = rustqueue_server::start(cfg)
        .await
        .context("rustqueued failed to start")?;
    let fault = tokio::select! {
        () = wait_for_signal() => None,
        fault = running.storage_fault() => Some(fault),
    };
    if let Some(fault) = fault {
        tracing::error!("{}", isolation::exit_message(&fault));
        running.stop_isolated(isolation::ISOLATED_STOP_BOUND).await;
        // `exit` rather than returning: dropping the runtime would wait for blocking tasks,
        // and one may be stuck in an fsync on the failed device.
        std::process::exit(isolation::EXIT_STORAGE_ISOLATED);
    }
    tracing::info!("shutting down: finishing sessions and flushing storage");
    running.shutdown().await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    tracing::info!("shutdown complete");
    Ok(())
}
