//! The side-by-side driver behind `make bench`: for each case and round it runs every profile
//! in alternating order (RustQueue, nsqd, RustQueue, nsqd, ...), each on a fresh broker and
//! data directory, and collects the reports into one JSON document.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::broker::{self, Binaries, Broker, Kind, Profile};
use crate::cluster::{Cluster, ClusterConfig};
use crate::disk::DiskReport;
use crate::idle::{IdleConfig, IdleReport};
use crate::restart::{RestartConfig, RestartReport};
use crate::run::{self, RunConfig, RunReport};
use crate::sweep::{self, SweepPoint};
use crate::tiered::{TieredConfig, TieredReport};

/// What a case's headline figure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Headline {
    /// Acknowledged publishes per second (higher is better).
    PublishRate,
    /// Deliveries per second while publishing (higher is better).
    ReceiveRate,
    /// p99 publish-ack latency (lower is better).
    P99Latency,
    /// Broker peak RSS (lower is better).
    PeakRss,
    /// What the disk can do (no broker; no ratio).
    Disk,
    /// Spawn to ready after a clean stop (lower is better).
    RestartReady,
    /// Broker RSS while idle (lower is better).
    IdleRss,
    /// Acknowledged messages / seconds from the consumers' start until the ledger was
    /// complete, for a backlog published before any consumer reads (higher is better).
    DrainRate,
}

/// What a case runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseKind {
    /// Producers and consumers against each profile ([`Case::load`]).
    #[default]
    Load,
    /// The disk beside the brokers, once per round, no broker.
    Disk,
    /// A backlog, then a clean and a SIGKILL restart.
    Restart(RestartConfig),
    /// Many topics, light traffic, then idle.
    IdleTopics(IdleConfig),
    /// The load of [`Case::load`] against several servers (docs/benchmarks.md, the brokers
    /// curve): RustQueue behind its gateway, nsqd spread over directly.
    Cluster(ClusterConfig),
    /// A backlog drained from a tiered broker's volume or, its local copies removed, from the
    /// bucket (docs/tiering.md); nsqd drains the same backlog as the reference.
    Tiered(TieredConfig),
}

/// One benchmark case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Case {
    /// Short name.
    pub name: String,
    /// What it measures, for the table heading.
    pub title: String,
    /// The figure ratios are taken on.
    pub headline: Headline,
    /// The load (address and pid are filled in per run; unused by other kinds).
    pub load: RunConfig,
    /// What the case runs.
    #[serde(default)]
    pub kind: CaseKind,
    /// Profiles not run in this case, each with the reason (shown in the table).
    #[serde(default)]
    pub skip: Vec<Skip>,
    /// Where the case sits on a curve (sweep cases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepPoint>,
}

/// A profile left out of one case, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skip {
    /// Profile name.
    pub profile: String,
    /// Why (shown in the table).
    pub reason: String,
}

/// Knobs of a comparison (all overridable from `make bench` via `BENCH_*`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    /// Measured seconds per time-mode run.
    pub duration_seconds: f64,
    /// Warm-up seconds per time-mode run.
    pub warmup_seconds: f64,
    /// Alternating rounds of all profiles per case.
    pub rounds: usize,
    /// Messages in the backlog case.
    pub backlog_messages: u64,
    /// Drain limit per run.
    pub drain_timeout_seconds: f64,
    /// Only these cases (empty = all).
    pub cases: Vec<String>,
    /// Only these profiles (empty = all).
    pub profiles: Vec<String>,
    /// Messages in the restart case.
    #[serde(default = "default_restart_messages")]
    pub restart_messages: u64,
    /// Topics in the idle-topics case.
    #[serde(default = "default_idle_topics")]
    pub idle_topics: usize,
    /// Messages in each drain case.
    #[serde(default = "default_drain_messages")]
    pub drain_messages: u64,
    /// Messages in each tiered case.
    #[serde(default = "default_tiered_messages")]
    pub tiered_messages: u64,
    /// Also run the sweep cases behind the curves (`BENCH_SWEEPS=1`).
    #[serde(default)]
    pub sweeps: bool,
}

fn default_tiered_messages() -> u64 {
    200_000
}

fn default_drain_messages() -> u64 {
    1_000_000
}

/// RDY of each consumer in the drain and mixed cases (the bench's consumers all use it).
const DRAIN_RDY: u32 = crate::load::RDY;

fn default_restart_messages() -> u64 {
    1_000_000
}

fn default_idle_topics() -> usize {
    1_000
}

/// Why the restart and idle cases run one profile per server.
const ONE_PER_SERVER: &str = "the ack mode does not change what a restart reads or what an \
                              idle topic costs: one profile per server";

/// A load case: `load` run against every profile on topic `bench-<name>`.
fn case(name: &str, title: &str, headline: Headline, load: RunConfig) -> Case {
    Case {
        name: name.to_owned(),
        title: title.to_owned(),
        headline,
        load: RunConfig {
            topic_prefix: format!("bench-{name}"),
            ..load
        },
        kind: CaseKind::Load,
        skip: vec![],
        sweep: None,
    }
}

/// The cases that are not a load: the disk, a restart, idle topics.
fn whole_broker_cases(s: &Settings, base: &RunConfig) -> [Case; 3] {
    let one_per_server = || {
        broker::profiles()
            .iter()
            .filter(|p| !crate::restart::runs_profile(p))
            .map(|p| Skip {
                profile: p.name.clone(),
                reason: ONE_PER_SERVER.to_owned(),
            })
            .collect::<Vec<_>>()
    };
    let disk = Case {
        kind: CaseKind::Disk,
        ..case(
            "disk",
            "The disk beside the brokers: write + fdatasync latency, synced write bandwidth, and the limits they set",
            Headline::Disk,
            base.clone(),
        )
    };
    let restart = Case {
        kind: CaseKind::Restart(RestartConfig {
            messages: s.restart_messages,
            segments: 100,
            channels: 10,
            message_bytes: 100,
            producers: 4,
            batch: 100,
        }),
        skip: one_per_server(),
        ..case(
            "restart",
            &format!(
                "Restart: {} messages of 100 B in ~100 segments, 10 channels; spawn to ready (`/v1/health` 200; nsqd `/ping`) after SIGTERM and after SIGKILL",
                thousands(s.restart_messages)
            ),
            Headline::RestartReady,
            base.clone(),
        )
    };
    let idle = Case {
        kind: CaseKind::IdleTopics(IdleConfig {
            topics: s.idle_topics,
            channels: 2,
            rate: 200.0,
            traffic_seconds: 5.0,
            idle_seconds: 10.0,
            message_bytes: 1024,
        }),
        skip: one_per_server(),
        ..case(
            "idle_topics",
            &format!(
                "Idle topics: {} topics x 2 channels, 5 s of 200 msg/s PUB round-robin, then 10 s idle",
                thousands(s.idle_topics as u64)
            ),
            Headline::IdleRss,
            base.clone(),
        )
    };
    [disk, restart, idle]
}

/// Consumers that keep up: two backlogs drained by 2 consumers at RDY 2500, and 2 writers
/// with 2 such readers at once.
fn keep_up_cases(s: &Settings, base: &RunConfig) -> Vec<Case> {
    let mut all = Vec::new();
    let drain = |bytes: usize| RunConfig {
        producers: 2,
        consumers: 2,
        batch_size: 64,
        message_bytes: bytes,
        consume_after_publish: true,
        warmup_seconds: 0.0,
        duration_seconds: None,
        messages: s.drain_messages,
        ..base.clone()
    };
    for (bytes, label) in [(200, "200 B"), (1024, "1 KiB")] {
        all.push(case(
            &format!("drain_{}", label.replace(' ', "").to_lowercase()),
            &format!(
                "Consumers that keep up, backlog: 2 writers MPUB 64 x {label} publish {} messages with no reader, then 2 consumers at RDY {DRAIN_RDY} (FIN each) drain it",
                thousands(s.drain_messages)
            ),
            Headline::DrainRate,
            drain(bytes),
        ));
    }
    // Twice the usual window: a backlog that grows shows better over a longer run.
    let mixed_seconds = 2.0 * s.duration_seconds;
    all.push(case(
        "mixed",
        &format!(
            "Consumers that keep up, live: 2 writers MPUB 64 x 1 KiB and 2 consumers at RDY {DRAIN_RDY} at once, {mixed_seconds} s"
        ),
        Headline::ReceiveRate,
        RunConfig {
            producers: 2,
            consumers: 2,
            batch_size: 64,
            duration_seconds: Some(mixed_seconds),
            ..base.clone()
        },
    ));
    all
}

/// The profiles a tiered case runs: RustQueue's default ack mode and nsqd's default.
const TIERED_PROFILES: [&str; 2] = ["rustqueue-durable", broker::BASELINE];

/// A backlog drained from a tiered broker's volume, and from its bucket.
fn tiered_cases(s: &Settings, base: &RunConfig) -> [Case; 2] {
    let skip: Vec<Skip> = broker::profiles()
        .iter()
        .filter(|p| !TIERED_PROFILES.contains(&p.name.as_str()))
        .map(|p| Skip {
            profile: p.name.clone(),
            reason: "reads from the bucket do not depend on the ack mode: RustQueue's default \
                     profile, with nsqd-default draining the same backlog as the reference"
                .to_owned(),
        })
        .collect();
    let load = RunConfig {
        producers: 2,
        consumers: 2,
        batch_size: 64,
        message_bytes: 1024,
        consume_after_publish: true,
        warmup_seconds: 0.0,
        duration_seconds: None,
        messages: s.tiered_messages,
        ..base.clone()
    };
    let messages = thousands(s.tiered_messages);
    let local = Case {
        kind: CaseKind::Tiered(TieredConfig {
            read_through: false,
        }),
        skip: skip.clone(),
        ..case(
            "tiered_local",
            &format!(
                "Tiered, local reads: 2 writers MPUB 64 x 1 KiB publish {messages} messages to a broker uploading 16 MiB segments to versitygw on loopback; once all are uploaded, 2 consumers at RDY {DRAIN_RDY} drain them from the volume"
            ),
            Headline::DrainRate,
            load.clone(),
        )
    };
    let remote = Case {
        kind: CaseKind::Tiered(TieredConfig { read_through: true }),
        skip,
        ..case(
            "tiered_read_through",
            "Tiered, read-through: the same, with `local_retention_bytes = 0`: once every sealed segment is uploaded and its local copy removed, the consumers read them from the bucket",
            Headline::DrainRate,
            load,
        )
    };
    [local, remote]
}

/// Low load at 1,000 msg/s: all producers on one schedule (a burst every 16 ms), and evenly
/// spaced.
fn low_load_cases(base: &RunConfig) -> [Case; 2] {
    [
        case(
            "low_load_latency",
            "Low load: 1,000 msg/s total PUB from 16 producers, 16 consumers, 1 KiB",
            Headline::P99Latency,
            RunConfig {
                rate: Some(1000.0),
                ..base.clone()
            },
        ),
        case(
            "low_load_even",
            "Low load, evenly spaced: 1,000 msg/s total PUB from 16 producers, each offset by 1/16 of its 16 ms interval, 16 consumers, 1 KiB",
            Headline::P99Latency,
            RunConfig {
                rate: Some(1000.0),
                spread_producers: true,
                ..base.clone()
            },
        ),
    ]
}

/// The cases of docs/benchmarks.md, in run order.
pub fn cases(s: &Settings) -> Vec<Case> {
    let base = RunConfig {
        address: String::new(),
        topic_prefix: String::new(),
        producers: 16,
        consumers: 16,
        consume_after_publish: false,
        batch_size: 1,
        message_bytes: 1024,
        rate: None,
        warmup_seconds: s.warmup_seconds,
        duration_seconds: Some(s.duration_seconds),
        messages: 0,
        drain_timeout_seconds: s.drain_timeout_seconds,
        identify: true,
        broker_pid: None,
        producer_addresses: vec![],
        consumer_addresses: vec![],
        extra_pids: vec![],
        topics: 1,
        spread_producers: false,
    };
    let [disk, restart, idle] = whole_broker_cases(s, &base);
    let [low_load, low_load_even] = low_load_cases(&base);
    let mut all = vec![
        disk,
        case(
            "mpub_publish",
            "Publish only: 16 producers, MPUB 64 x 1 KiB, saturation (drained afterwards by 4 consumers to check the ledger)",
            Headline::PublishRate,
            RunConfig {
                batch_size: 64,
                consumers: 4,
                consume_after_publish: true,
                ..base.clone()
            },
        ),
        case(
            "pub_fin",
            "End to end: 16 producers PUB + 16 consumers RDY/FIN, 1 KiB, saturation, full drain",
            Headline::ReceiveRate,
            base.clone(),
        ),
        low_load,
        low_load_even,
        case(
            "small_messages",
            "Small messages: 16 producers PUB + 16 consumers, 100 B, saturation",
            Headline::ReceiveRate,
            RunConfig {
                message_bytes: 100,
                ..base.clone()
            },
        ),
        case(
            "backlog",
            "Backlog: 16 producers MPUB 64 x 1 KiB publish a fixed count with no reader, then 4 consumers drain it",
            Headline::PeakRss,
            RunConfig {
                batch_size: 64,
                consumers: 4,
                consume_after_publish: true,
                warmup_seconds: 0.0,
                duration_seconds: None,
                messages: s.backlog_messages,
                ..base.clone()
            },
        ),
    ];
    all.extend(keep_up_cases(s, &base));
    for backlog in all
        .iter_mut()
        .filter(|c| c.name == "backlog" || c.name.starts_with("drain_"))
    {
        backlog.skip.push(Skip {
            profile: "nsqd-sync-every-1".to_owned(),
            reason: "fsyncs every message on both the topic and the channel disk queue \
                     (about 200 msg/s on this disk): the backlog alone would take hours"
                .to_owned(),
        });
    }
    all.extend(tiered_cases(s, &base));
    all.push(restart);
    all.push(idle);
    let sweeps = sweep::cases(&base);
    let named = |c: &Case| s.cases.contains(&c.name);
    all.into_iter()
        .filter(|c| s.cases.is_empty() || named(c))
        .chain(sweeps.into_iter().filter(|c| s.sweeps || named(c)))
        .collect()
}

/// Refuses case or profile names the comparison does not have (a typo would otherwise run
/// nothing, or less than asked, and write results that look complete), naming the valid ones.
pub fn check_names(s: &Settings) -> Result<(), String> {
    let every = Settings {
        cases: vec![],
        sweeps: true,
        ..s.clone()
    };
    let case_names: Vec<String> = cases(&every).into_iter().map(|c| c.name).collect();
    let profile_names: Vec<String> = broker::profiles()
        .into_iter()
        .chain(broker::floor_profiles())
        .map(|p| p.name)
        .collect();
    let unknown = |asked: &[String], known: &[String], what: &str| {
        let bad: Vec<&str> = asked
            .iter()
            .filter(|n| !known.contains(n))
            .map(String::as_str)
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "unknown {what} {}; the {what}s are: {}",
                bad.join(", "),
                known.join(", ")
            ))
        }
    };
    unknown(&s.cases, &case_names, "case")?;
    unknown(&s.profiles, &profile_names, "profile")
}

/// One profile's attempt at one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRun {
    /// Case name.
    pub case: String,
    /// Profile name.
    pub profile: String,
    /// Which round (0-based).
    pub round: usize,
    /// The report, if the run could be carried out.
    pub report: Option<RunReport>,
    /// Why not, otherwise.
    pub error: Option<String>,
    /// The `disk` case's measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskReport>,
    /// The `restart` case's measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartReport>,
    /// The `idle_topics` case's measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleReport>,
    /// What a tiered case's broker uploaded, evicted and read from the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiered: Option<TieredReport>,
}

impl CaseRun {
    /// The run was carried out and its result counts (drained clean, backlog intact, ...).
    pub fn counts(&self) -> bool {
        self.error.is_none()
            && (self.report.as_ref().is_some_and(|r| r.complete)
                || self.disk.is_some()
                || self.restart.as_ref().is_some_and(|r| r.complete)
                || self.idle.as_ref().is_some_and(|r| r.complete))
    }
}

/// `1000000` as `1,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Facts about where it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// `uname -r`.
    pub kernel: String,
    /// How load generator and broker share the machine.
    pub note: String,
}

/// The whole comparison, as written to `bench/results/<date>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// UTC date and time the comparison started (`YYYY-MM-DDTHH:MM:SSZ`).
    pub started_utc: String,
    /// Where it ran.
    pub machine: Machine,
    /// The knobs.
    pub settings: Settings,
    /// `nsqd --version`.
    pub nsqd_version: String,
    /// `rustqueued --version` of the broker binary measured, if any: the release builds of
    /// `make bench` stamp their `git describe` into it.
    pub rustqueue_revision: Option<String>,
    /// Every profile, with its durability label.
    pub profiles: Vec<Profile>,
    /// Every case.
    pub cases: Vec<Case>,
    /// Every run, in the order they ran.
    pub runs: Vec<CaseRun>,
}

/// Runs the comparison; `progress` gets one line per run.
pub async fn compare(
    settings: Settings,
    bins: Binaries,
    mut progress: impl FnMut(&str),
) -> Results {
    // The floor profiles run only when named.
    let profiles: Vec<Profile> = broker::profiles()
        .into_iter()
        .chain(broker::floor_profiles())
        .filter(|p| {
            if settings.profiles.is_empty() {
                p.kind != Kind::Floor
            } else {
                settings.profiles.contains(&p.name)
            }
        })
        .filter(|p| p.kind != Kind::Rustqueue || bins.rustqueued.is_some())
        .collect();
    let cases = cases(&settings);
    let mut results = Results {
        started_utc: utc_now(),
        machine: machine(),
        nsqd_version: command_line(&bins.nsqd.to_string_lossy(), &["--version"]),
        rustqueue_revision: bins
            .rustqueued
            .as_ref()
            .map(|b| command_line(&b.to_string_lossy(), &["--version"])),
        settings: settings.clone(),
        profiles: profiles.clone(),
        cases: cases.clone(),
        runs: Vec::new(),
    };
    for case in &cases {
        for round in 0..settings.rounds {
            if matches!(case.kind, CaseKind::Disk) {
                let run = run_disk(case, round).await;
                progress(&progress_line(&run));
                results.runs.push(run);
                continue;
            }
            for profile in &profiles {
                if case.skip.iter().any(|s| s.profile == profile.name) {
                    continue;
                }
                // The floor serves producer/consumer loads only (no restart, no gateway).
                if profile.kind == Kind::Floor && !matches!(case.kind, CaseKind::Load) {
                    continue;
                }
                let run = run_one(case, profile, &bins, round).await;
                progress(&progress_line(&run));
                results.runs.push(run);
            }
        }
    }
    results
}

async fn run_disk(case: &Case, round: usize) -> CaseRun {
    let mut out = CaseRun {
        case: case.name.clone(),
        profile: "disk".to_owned(),
        round,
        report: None,
        error: None,
        disk: None,
        restart: None,
        idle: None,
        tiered: None,
    };
    // Broker data directories are fresh temp dirs (broker.rs): measure in the same place.
    let dir = std::env::temp_dir();
    match tokio::task::spawn_blocking(move || crate::disk::measure(&dir)).await {
        Ok(Ok(d)) => out.disk = Some(d),
        Ok(Err(e)) => out.error = Some(e.to_string()),
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

async fn run_one(case: &Case, profile: &Profile, bins: &Binaries, round: usize) -> CaseRun {
    let mut out = CaseRun {
        case: case.name.clone(),
        profile: profile.name.clone(),
        round,
        report: None,
        error: None,
        disk: None,
        restart: None,
        idle: None,
        tiered: None,
    };
    match &case.kind {
        CaseKind::Load => {}
        CaseKind::Tiered(config) => {
            match crate::tiered::run(profile, bins, *config, &case.load).await {
                Ok((report, tiered)) => {
                    out.report = Some(report);
                    out.tiered = tiered;
                }
                Err(e) => out.error = Some(e),
            }
            return out;
        }
        CaseKind::Cluster(cluster) => return run_cluster(case, profile, bins, *cluster, out).await,
        CaseKind::Disk => return run_disk(case, round).await,
        CaseKind::Restart(config) => {
            match crate::restart::run(profile, bins, config).await {
                Ok(r) => out.restart = Some(r),
                Err(e) => out.error = Some(e),
            }
            return out;
        }
        CaseKind::IdleTopics(config) => {
            match crate::idle::run(profile, bins, config).await {
                Ok(r) => out.idle = Some(r),
                Err(e) => out.error = Some(e),
            }
            return out;
        }
    }
    let broker = match Broker::start(profile, bins) {
        Ok(b) => b,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let config = RunConfig {
        address: broker.tcp.clone(),
        broker_pid: Some(broker.pid()),
        ..case.load.clone()
    };
    match run::run(config).await {
        Ok(report) => out.report = Some(report),
        Err(e) => out.error = Some(e.to_string()),
    }
    tokio::task::spawn_blocking(move || broker.stop())
        .await
        .ok();
    out
}

async fn run_cluster(
    case: &Case,
    profile: &Profile,
    bins: &Binaries,
    config: ClusterConfig,
    mut out: CaseRun,
) -> CaseRun {
    leave_realtime_scheduling();
    let (p, b) = (profile.clone(), bins.clone());
    let cluster = match tokio::task::spawn_blocking(move || Cluster::start(&p, &b, config)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            out.error = Some(e.to_string());
            return out;
        }
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let pids = cluster.pids();
    let load = RunConfig {
        address: cluster.producer_addresses[0].clone(),
        producer_addresses: cluster.producer_addresses.clone(),
        consumer_addresses: cluster.consumer_addresses.clone(),
        broker_pid: pids.first().copied(),
        extra_pids: pids[1..].to_vec(),
        ..case.load.clone()
    };
    match run::run(load).await {
        Ok(report) => out.report = Some(report),
        Err(e) => out.error = Some(e.to_string()),
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .ok();
    out
}

/// Moves the compare (every thread) to normal scheduling before the first cluster case, if it
/// runs at a real-time priority (`chrt -f`, as single-server sittings may): several nsqd
/// inherit it, their idle Go threads spin before they park, and on a small host two of them
/// starved the load generator for as long as the case ran (docs/benchmarks.md, notes). The
/// servers it starts from then on inherit the normal policy. Said once on stderr.
fn leave_realtime_scheduling() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        if !sched_policy(&stat).is_some_and(|p| p == 1 || p == 2) {
            return;
        }
        let pid = std::process::id().to_string();
        let moved = std::process::Command::new("chrt")
            .args(["-a", "-o", "-p", "0", &pid])
            .status()
            .is_ok_and(|s| s.success());
        if moved {
            eprintln!(
                "cluster cases: moved to normal scheduling (several nsqd at a real-time \
                 priority starve everything else on a small host); the cases after run there too"
            );
        } else {
            eprintln!(
                "cluster cases: could not leave real-time scheduling (`chrt -a -o -p 0 {pid}` \
                 failed); run the compare without `chrt -f` if the cluster cases stall"
            );
        }
    });
}

/// The scheduling policy in a `/proc/<pid>/stat` line (field 41: 0 normal, 1 FIFO, 2 round
/// robin), read after the command name, which may itself hold spaces and parentheses.
fn sched_policy(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(41 - 3)?.parse().ok()
}

fn progress_line(run: &CaseRun) -> String {
    if let Some(d) = &run.disk {
        let small = d.p50_us(crate::disk::SMALL, crate::disk::Layout::Grow);
        let group = d.p50_us(crate::disk::GROUP, crate::disk::Layout::Grow);
        return format!(
            "{:<17} {:<21} round {}: fdatasync p50 1 KiB {:?} us, 16 KiB {:?} us; synced bandwidth {:.0} MiB/s; bare pipeline {}",
            run.case,
            run.profile,
            run.round,
            small,
            group,
            d.bandwidth_mib_per_sec,
            d.pipelined
                .as_ref()
                .map_or_else(|| "-".to_owned(), |p| format!("{:.0} MiB/s", p.mib_per_sec))
        );
    }
    if let Some(r) = &run.restart {
        return format!(
            "{:<17} {:<21} round {}: published {} in {:.1} s, {} data files; ready after SIGTERM {:.0} ms, after SIGKILL {:.0} ms; min depth {} / after SIGKILL {}, {}",
            run.case,
            run.profile,
            run.round,
            r.published,
            r.publish_seconds,
            r.data_files,
            r.clean_ready_ms,
            r.kill_ready_ms,
            r.min_depth_after,
            r.min_depth_after_kill,
            if r.complete { "complete" } else { "INCOMPLETE" },
        );
    }
    if let Some(r) = &run.idle {
        return format!(
            "{:<17} {:<21} round {}: setup {:.1} s; traffic {:.3} cores, rss {:.1} MiB; idle {:.3} cores, rss {:.1} MiB, {}",
            run.case,
            run.profile,
            run.round,
            r.setup_seconds,
            r.traffic_cpu_cores,
            r.rss_traffic_bytes as f64 / 1048576.0,
            r.idle_cpu_cores,
            r.rss_idle_bytes as f64 / 1048576.0,
            if r.complete { "complete" } else { "INCOMPLETE" },
        );
    }
    match (&run.report, &run.error) {
        (Some(r), _) => format!(
            "{:<17} {:<21} round {}: pub {:>9.0} msg/s, recv {:>9.0} msg/s, p99 {:>7} us, peak rss {:>6.1} MiB, missing {}, dup {}, {}",
            run.case,
            run.profile,
            run.round,
            r.publish_msgs_per_sec,
            r.receive_msgs_per_sec,
            r.latency.p99_us,
            r.broker
                .as_ref()
                .map_or(0.0, |b| b.peak_rss_bytes as f64 / 1048576.0),
            r.ledger.missing,
            r.ledger.duplicates,
            if r.complete { "complete" } else { "INCOMPLETE" },
        ),
        (None, e) => format!(
            "{:<17} {:<21} round {}: FAILED {}",
            run.case,
            run.profile,
            run.round,
            e.as_deref().unwrap_or("?")
        ),
    }
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or_else(String::new, |m| m.trim().to_owned()),
        memory_gib: (mem_kib / 1048576.0 * 10.0).round() / 10.0,
        kernel: command_line("uname", &["-r"]),
        note: "load generator and broker run on the same machine and share its cores; \
               loopback TCP; no CPU pinning"
            .to_owned(),
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, no date crate needed).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_string(secs)
}

fn utc_string(secs: u64) -> String {
    jiff::Timestamp::from_second(secs as i64).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// Default results path: `bench/results/<date>.json`.
pub fn results_path(root: &std::path::Path, started_utc: &str) -> PathBuf {
    root.join("bench/results")
        .join(format!("{}.json", &started_utc[..10]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates_across_leap_years() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_796_002_261), "2026-11-30T01:31:01Z");
    }

    #[test]
    fn reads_the_scheduling_policy_from_a_stat_line() {
        let fields = |policy: &str| {
            let mut f = vec!["0"; 50];
            f[41 - 3] = policy;
            f[40 - 3] = "10";
            f.join(" ")
        };
        assert_eq!(sched_policy(&format!("12 (cat) {}", fields("1"))), Some(1));
        assert_eq!(sched_policy(&format!("12 (a) b) {}", fields("0"))), Some(0));
        assert_eq!(sched_policy(&format!("12 (x) {}", fields("2"))), Some(2));
        assert_eq!(sched_policy("12 (cut) R 1 2"), None);
        assert_eq!(sched_policy(""), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        assert!(
            sched_policy(&own).is_some(),
            "this process's own stat line: {own}"
        );
    }

    fn settings() -> Settings {
        Settings {
            duration_seconds: 5.0,
            warmup_seconds: 1.0,
            rounds: 1,
            backlog_messages: 1000,
            drain_timeout_seconds: 60.0,
            cases: vec![],
            profiles: vec![],
            restart_messages: 1_000_000,
            idle_topics: 1_000,
            drain_messages: 2000,
            tiered_messages: 3000,
            sweeps: false,
        }
    }

    #[test]
    fn unknown_case_or_profile_names_are_refused_with_the_valid_ones() {
        let mut s = settings();
        s.cases = vec!["pub_fin".into(), "sweep_size_1048576".into()];
        s.profiles = vec!["nsqd-default".into(), "rustqueue-durable".into()];
        assert_eq!(check_names(&s), Ok(()));
        s.cases.push("pubfin".into());
        let e = check_names(&s).unwrap_err();
        assert!(
            e.starts_with("unknown case pubfin; the cases are: disk, mpub_publish"),
            "{e}"
        );
        s.cases.pop();
        s.profiles.push("all".into());
        let e = check_names(&s).unwrap_err();
        assert!(
            e.starts_with("unknown profile all; the profiles are: "),
            "{e}"
        );
        assert!(e.contains("rustqueue-nsq_relaxed"), "{e}");
    }

    #[test]
    fn the_cases_have_the_shapes_docs_benchmarks_describes() {
        let s = settings();
        let c = cases(&s);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "disk",
                "mpub_publish",
                "pub_fin",
                "low_load_latency",
                "low_load_even",
                "small_messages",
                "backlog",
                "drain_200b",
                "drain_1kib",
                "mixed",
                "tiered_local",
                "tiered_read_through",
                "restart",
                "idle_topics"
            ]
        );
        assert!(matches!(c[0].kind, CaseKind::Disk));
        assert_eq!((c[1].load.producers, c[1].load.batch_size), (16, 64));
        assert_eq!((c[2].load.producers, c[2].load.consumers), (16, 16));
        assert_eq!(c[3].load.rate, Some(1000.0));
        assert!(!c[3].load.spread_producers);
        assert_eq!(
            (c[4].load.rate, c[4].load.spread_producers),
            (Some(1000.0), true)
        );
        assert_eq!(c[5].load.message_bytes, 100);
        assert_eq!(
            (c[6].load.messages, c[6].load.duration_seconds),
            (1000, None)
        );
        for (drain, bytes) in [(&c[7], 200), (&c[8], 1024)] {
            assert_eq!(drain.headline, Headline::DrainRate);
            let l = &drain.load;
            assert_eq!((l.producers, l.consumers, l.message_bytes), (2, 2, bytes));
            assert_eq!((l.messages, l.consume_after_publish), (2000, true));
            assert!(drain.skip.iter().any(|s| s.profile == "nsqd-sync-every-1"));
        }
        let mixed = &c[9].load;
        assert_eq!(
            (mixed.producers, mixed.consumers, mixed.batch_size),
            (2, 2, 64)
        );
        assert!(!mixed.consume_after_publish);
        assert_eq!(mixed.duration_seconds, Some(10.0));
        for (tiered, read_through) in [(&c[10], false), (&c[11], true)] {
            assert!(matches!(tiered.kind, CaseKind::Tiered(t) if t.read_through == read_through));
            assert_eq!(tiered.headline, Headline::DrainRate);
            let l = &tiered.load;
            assert_eq!((l.producers, l.consumers, l.message_bytes), (2, 2, 1024));
            assert_eq!((l.messages, l.consume_after_publish), (3000, true));
            let runs: Vec<_> = broker::profiles()
                .into_iter()
                .filter(|p| !tiered.skip.iter().any(|s| s.profile == p.name))
                .map(|p| p.name)
                .collect();
            assert_eq!(runs, ["rustqueue-durable", "nsqd-default"]);
        }
        let c = &c[6..];
        let CaseKind::Restart(r) = &c[6].kind else {
            panic!("restart case")
        };
        assert_eq!((r.messages, r.segments, r.channels), (1_000_000, 100, 10));
        let CaseKind::IdleTopics(i) = &c[7].kind else {
            panic!("idle case")
        };
        assert_eq!((i.topics, i.channels), (1_000, 2));
        // One profile per server in the restart and idle cases; the other four are skipped.
        assert_eq!(c[6].skip.len(), 4);
        assert!(!c[7].skip.iter().any(|s| s.profile == "rustqueue-durable"));
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(999), "999");
        let only = cases(&Settings {
            cases: vec!["backlog".into()],
            ..s.clone()
        });
        assert_eq!(only.len(), 1);
    }

    #[test]
    fn sweeps_run_when_asked_or_when_a_point_is_named() {
        let s = settings();
        assert!(cases(&s).iter().all(|c| c.sweep.is_none()));
        let with_sweeps = cases(&Settings {
            sweeps: true,
            cases: vec![],
            ..s.clone()
        });
        let sweep_names: Vec<&str> = with_sweeps
            .iter()
            .filter(|c| c.sweep.is_some())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(sweep_names.len(), 14, "{sweep_names:?}");
        assert!(sweep_names.contains(&"sweep_size_1048576"));
        let three = with_sweeps
            .iter()
            .find(|c| c.name == "sweep_brokers_3")
            .unwrap();
        assert!(
            matches!(three.kind, CaseKind::Cluster(ClusterConfig { brokers: 3 })),
            "{:?}",
            three.kind
        );
        let topics = with_sweeps
            .iter()
            .find(|c| c.name == "sweep_topics_256")
            .unwrap();
        assert_eq!(
            (topics.load.topics, topics.load.consumer_connections()),
            (256, 256)
        );
        let one_point = cases(&Settings {
            cases: vec!["sweep_clients_64".into()],
            ..s
        });
        assert_eq!(one_point.len(), 1);
        assert_eq!(
            (one_point[0].load.producers, one_point[0].load.consumers),
            (64, 64)
        );
    }
}
