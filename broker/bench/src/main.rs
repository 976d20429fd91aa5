//! `rustqueue-bench`: `run` one benchmark against a broker, `compare` RustQueue and nsqd side
//! by side (what `make bench` does), or `report` a results JSON as `docs/benchmarks.md`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use rustqueue_bench::broker::Binaries;
use rustqueue_bench::compare::{self, Settings};
use rustqueue_bench::floor::{FloorConfig, FloorServer, SyncMode};
use rustqueue_bench::report;
use rustqueue_bench::run::{self, RunConfig};
use rustqueue_bench::sweep;

#[derive(Parser)]
#[command(version, about = "NSQ V2 load generator and ledger checker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One run against a running broker; exits non-zero unless the ledger drained clean.
    Run(RunArgs),
    /// RustQueue and nsqd side by side on fresh brokers; writes JSON and the markdown table.
    Compare(CompareArgs),
    /// Render a results JSON as markdown.
    Report(ReportArgs),
    /// Serve the floor: NSQ V2's socket work for the bench's loads and nothing else, to measure
    /// what a broker costs above it (not a broker: see the `floor` module).
    Floor(FloorArgs),
}

#[derive(Args)]
struct FloorArgs {
    #[arg(long, default_value = "127.0.0.1:4150")]
    tcp_address: std::net::SocketAddr,
    /// Answers every request 200 (readiness probes).
    #[arg(long, default_value = "127.0.0.1:4151")]
    http_address: std::net::SocketAddr,
    /// Where `--append` writes one file per topic.
    #[arg(long, default_value = "floor-data")]
    data_path: PathBuf,
    /// Write every published body to its topic's file (page cache, never synced) before `OK`.
    #[arg(long)]
    append: bool,
    /// With --append: also do this ack mode's disk work (syncs of the topic files, the
    /// finishes persisted; see the `floor` module).
    #[arg(long, requires = "append", value_enum)]
    sync: Option<SyncMode>,
}

#[derive(Args)]
struct RunArgs {
    /// Broker NSQ TCP address.
    #[arg(long, default_value = "127.0.0.1:4150")]
    address: String,
    /// Topic prefix (a unique suffix is added per run).
    #[arg(long, default_value = "benchmark")]
    topic: String,
    /// Count mode: total messages (ignored when --duration-seconds is given).
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Body size in bytes (at least 20).
    #[arg(long, default_value_t = 1024)]
    message_bytes: usize,
    #[arg(long, default_value_t = 16)]
    producers: usize,
    #[arg(long, default_value_t = 16)]
    consumers: usize,
    /// Consumers start reading only after publishing ends (they SUB first).
    #[arg(long)]
    consume_after_publish: bool,
    /// Messages per command: 1 = PUB, more = MPUB.
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    #[arg(long, default_value_t = 0.0)]
    warmup_seconds: f64,
    /// Time mode: measure for this long.
    #[arg(long)]
    duration_seconds: Option<f64>,
    /// Total fixed arrival rate, msg/s (omitted = saturation).
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 300.0)]
    drain_timeout_seconds: f64,
    /// Skip IDENTIFY (magic then straight to PUB/SUB).
    #[arg(long)]
    no_identify: bool,
    /// Broker pid to sample RSS and CPU from /proc.
    #[arg(long)]
    broker_pid: Option<u32>,
    /// Spread producers and consumers over this many topics (at least one consumer each).
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// At a fixed --rate, space the producers' commands evenly instead of all at once.
    #[arg(long)]
    spread_producers: bool,
    /// Producers connect to these (comma-separated, round robin) instead of --address: a
    /// gateway, or several nsqd.
    #[arg(long, value_delimiter = ',')]
    producer_addresses: Vec<String>,
    /// Consumers connect to these (comma-separated, round robin, at least one consumer each)
    /// instead of --address: every broker of a cluster.
    #[arg(long, value_delimiter = ',')]
    consumer_addresses: Vec<String>,
    /// Print the report as JSON (otherwise a short summary).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CompareArgs {
    #[arg(long, env = "BENCH_DURATION", default_value_t = 5.0)]
    duration_seconds: f64,
    #[arg(long, env = "BENCH_WARMUP", default_value_t = 1.0)]
    warmup_seconds: f64,
    /// Alternating rounds of every profile per case; at least 1 (0 is refused, not rounded up).
    #[arg(long, env = "BENCH_ROUNDS", default_value_t = 1, value_parser = at_least_one())]
    rounds: usize,
    /// Messages in the backlog case (docs/benchmarks.md uses 10,000,000).
    #[arg(long, env = "BENCH_BACKLOG_MESSAGES", default_value_t = 100_000)]
    backlog_messages: u64,
    #[arg(long, env = "BENCH_DRAIN_TIMEOUT", default_value_t = 90.0)]
    drain_timeout_seconds: f64,
    /// Messages in the restart case.
    #[arg(long, env = "BENCH_RESTART_MESSAGES", default_value_t = 1_000_000)]
    restart_messages: u64,
    /// Messages in each drain case (`drain_200b`, `drain_1kib`).
    #[arg(long, env = "BENCH_DRAIN_MESSAGES", default_value_t = 1_000_000)]
    drain_messages: u64,
    /// Topics in the idle-topics case.
    #[arg(long, env = "BENCH_IDLE_TOPICS", default_value_t = 1_000, value_parser = at_least_one())]
    idle_topics: usize,
    /// Messages in each tiered case (`tiered_local`, `tiered_read_through`).
    #[arg(long, env = "BENCH_TIERED_MESSAGES", default_value_t = 200_000)]
    tiered_messages: u64,
    /// Also run the sweeps behind the curves (clients, message size, topics, brokers behind
    /// the gateway; 14 more cases).
    /// The environment variable takes 1/0, yes/no or true/false (`BENCH_SWEEPS=1 make bench`).
    #[arg(long, env = "BENCH_SWEEPS", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    sweeps: bool,
    /// Comma-separated case names (default all).
    #[arg(long, env = "BENCH_CASES", value_delimiter = ',')]
    cases: Vec<String>,
    /// Comma-separated profile names (default all).
    #[arg(long, env = "BENCH_PROFILES", value_delimiter = ',')]
    profiles: Vec<String>,
    #[arg(long, env = "NSQD_BIN")]
    nsqd: PathBuf,
    /// rustqueued binary; without it only nsqd profiles run (and no results are published).
    #[arg(long, env = "RUSTQUEUED_BIN")]
    rustqueued: Option<PathBuf>,
    /// versitygw binary, the bucket of the tiered cases (`scripts/deps.sh versitygw`); without
    /// it their RustQueue runs fail saying so.
    #[arg(long, env = "VERSITYGW_BIN")]
    versitygw: Option<PathBuf>,
    /// Results JSON path (default bench/results/<date>.json under --root).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Markdown path to (re)write.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Hand-written notes appended to the markdown.
    #[arg(long)]
    notes: Option<PathBuf>,
    /// Repository root.
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

#[derive(Args)]
struct ReportArgs {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    #[arg(long)]
    notes: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    match cli.command {
        Command::Run(args) => runtime.block_on(run_command(args)),
        Command::Compare(args) => runtime.block_on(compare_command(args)),
        Command::Report(args) => report_command(args),
        Command::Floor(args) => runtime.block_on(floor_command(args)),
    }
}

async fn floor_command(a: FloorArgs) -> anyhow::Result<()> {
    let config = FloorConfig {
        append_dir: a.append.then_some(a.data_path),
        sync: a.sync,
    };
    let server = FloorServer::bind(a.tcp_address, a.http_address, config)
        .await
        .with_context(|| format!("cannot listen on {} and {}", a.tcp_address, a.http_address))?;
    server.serve().await.context("accepting connections")
}

async fn run_command(a: RunArgs) -> anyhow::Result<()> {
    let config = RunConfig {
        address: a.address,
        topic_prefix: a.topic,
        producers: a.producers,
        consumers: a.consumers,
        consume_after_publish: a.consume_after_publish,
        batch_size: a.batch_size,
        message_bytes: a.message_bytes,
        rate: a.rate,
        warmup_seconds: a.warmup_seconds,
        duration_seconds: a.duration_seconds,
        messages: a.messages,
        drain_timeout_seconds: a.drain_timeout_seconds,
        identify: !a.no_identify,
        broker_pid: a.broker_pid,
        topics: a.topics,
        spread_producers: a.spread_producers,
        producer_addresses: a.producer_addresses,
        consumer_addresses: a.consumer_addresses,
        extra_pids: vec![],
    };
    let report = run::run(config).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let l = &report.ledger;
        println!(
            "published {} in {:.2} s: {:.0} msg/s ({:.1} MiB/s); received {:.0} msg/s; ack p50 {} p99 {} p99.9 {} max {} us; drain {:.2} s; acknowledged {} unique {} missing {} duplicates {} unexpected {}",
            report.published,
            report.window_seconds,
            report.publish_msgs_per_sec,
            report.publish_mib_per_sec,
            report.receive_msgs_per_sec,
            report.latency.p50_us,
            report.latency.p99_us,
            report.latency.p999_us,
            report.latency.max_us,
            report.drain_seconds,
            l.acknowledged,
            l.received_unique,
            l.missing,
            l.duplicates,
            l.unexpected,
        );
        for e in &report.errors {
            eprintln!("error: {e}");
        }
    }
    if !report.complete {
        bail!(
            "incomplete run: missing {}, duplicates {}, unexpected {}, drain timed out {}, {} connection error(s)",
            report.ledger.missing,
            report.ledger.duplicates,
            report.ledger.unexpected,
            report.drain_timed_out,
            report.errors.len()
        );
    }
    Ok(())
}

/// A count that must be at least 1: `BENCH_ROUNDS=0` once started a whole one-round run.
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

async fn compare_command(a: CompareArgs) -> anyhow::Result<()> {
    if !a.nsqd.is_file() {
        bail!(
            "nsqd not found at {} (run `scripts/deps.sh nsqd`)",
            a.nsqd.display()
        );
    }
    if let Some(rq) = &a.rustqueued
        && !rq.is_file()
    {
        bail!(
            "rustqueued not found at {} (build it with `cargo build --release -p rustqueue-server`)",
            rq.display()
        );
    }
    let settings = Settings {
        duration_seconds: a.duration_seconds,
        warmup_seconds: a.warmup_seconds,
        rounds: a.rounds,
        backlog_messages: a.backlog_messages,
        drain_messages: a.drain_messages,
        tiered_messages: a.tiered_messages,
        drain_timeout_seconds: a.drain_timeout_seconds,
        cases: a.cases.into_iter().filter(|c| !c.is_empty()).collect(),
        profiles: a.profiles.into_iter().filter(|p| !p.is_empty()).collect(),
        restart_messages: a.restart_messages,
        idle_topics: a.idle_topics,
        sweeps: a.sweeps,
    };
    compare::check_names(&settings).map_err(anyhow::Error::msg)?;
    let bins = Binaries {
        nsqd: a.nsqd,
        rustqueued: a.rustqueued,
        versitygw: a.versitygw,
    };
    // Ctrl-C or SIGTERM drops the comparison, and with it the running broker (stopped on drop).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let results = tokio::select! {
        results = compare::compare(settings, bins, |line| eprintln!("{line}")) => results,
        _ = tokio::signal::ctrl_c() => bail!("interrupted; brokers stopped, nothing written"),
        _ = term.recv() => bail!("terminated; brokers stopped, nothing written"),
    };
    let output = a
        .output
        .unwrap_or_else(|| compare::results_path(&a.root, &results.started_utc));
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&output, serde_json::to_string_pretty(&results)? + "\n")
        .with_context(|| format!("writing {}", output.display()))?;
    eprintln!("results: {}", output.display());
    if let Some(md) = a.markdown {
        let notes = read_notes(a.notes.as_deref())?;
        write_markdown(&results, &output, &md, notes.as_deref())?;
        eprintln!("table: {}", md.display());
    }
    let failed: Vec<_> = results
        .runs
        .iter()
        .filter(|r| !r.counts())
        .map(|r| format!("{}/{}/{}", r.case, r.profile, r.round))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} run(s) did not complete: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

fn report_command(a: ReportArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.input)
        .with_context(|| format!("reading {}", a.input.display()))?;
    let results: compare::Results =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", a.input.display()))?;
    let notes = read_notes(a.notes.as_deref())?;
    write_markdown(&results, &a.input, &a.output, notes.as_deref())
}

/// Draws the curves next to the results JSON (`<stem>-<axis>-<measure>.svg`) and writes the
/// markdown that embeds them.
fn write_markdown(
    results: &compare::Results,
    json: &std::path::Path,
    md: &std::path::Path,
    notes: Option<&str>,
) -> anyhow::Result<()> {
    let dir = json.parent().unwrap_or(std::path::Path::new("."));
    let stem = json
        .file_stem()
        .map_or_else(|| "results".into(), |s| s.to_string_lossy().into_owned());
    let charts = sweep::write_charts(results, dir, &stem).map_err(anyhow::Error::msg)?;
    for c in &charts {
        eprintln!("chart: {}", c.path.display());
    }
    let md_dir = md.parent().unwrap_or(std::path::Path::new("."));
    let curves = sweep::section(results, &charts, md_dir);
    std::fs::write(md, report::render_with(results, notes, &curves))
        .with_context(|| format!("writing {}", md.display()))
}

fn read_notes(path: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    path.map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweeps(args: &[&str]) -> bool {
        let cli = Cli::try_parse_from(
            ["rustqueue-bench", "compare", "--nsqd", "nsqd"]
                .iter()
                .chain(args),
        )
        .unwrap();
        match cli.command {
            Command::Compare(a) => a.sweeps,
            _ => unreachable!("parsed as compare"),
        }
    }

    #[test]
    fn zero_rounds_or_idle_topics_are_refused_not_rounded_up() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["rustqueue-bench", "compare", "--nsqd", "nsqd"]
                    .iter()
                    .chain(args),
            )
        };
        for args in [&["--rounds", "0"][..], &["--idle-topics", "0"][..]] {
            let err = parse(args).err().expect("refused");
            assert!(err.to_string().contains(args[0]), "{err}");
        }
        match parse(&["--rounds", "3", "--idle-topics", "1"])
            .unwrap()
            .command
        {
            Command::Compare(a) => assert_eq!((a.rounds, a.idle_topics), (3, 1)),
            _ => unreachable!("parsed as compare"),
        }
    }

    #[test]
    fn sweeps_take_the_values_make_bench_documents() {
        // `BENCH_SWEEPS=1 make bench` goes through the same parser as `--sweeps=1`.
        for (args, want) in [
            (&[][..], false),
            (&["--sweeps"][..], true),
            (&["--sweeps=1"][..], true),
            (&["--sweeps=true"][..], true),
            (&["--sweeps=yes"][..], true),
            (&["--sweeps=0"][..], false),
            (&["--sweeps=no"][..], false),
        ] {
            assert_eq!(sweeps(args), want, "{args:?}");
        }
    }
}
