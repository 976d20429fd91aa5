//! The side-by-side driver behind `make bench`: for each case and round it runs every profile
//! in alternating order (RustQueue, nsqd, RustQueue, nsqd, ...), each on a fresh broker and
//! data directory, and collects the reports into one JSON document.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::broker::{self, Binaries, Broker, Kind, Profile};
use crate::run::{self, RunConfig, RunReport};

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
    /// The load (address and pid are filled in per run).
    pub load: RunConfig,
    /// Profiles not run in this case, each with the reason (shown in the table).
    #[serde(default)]
    pub skip: Vec<Skip>,
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
}

/// The five cases of docs/benchmarks.md.
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
    };
    let case = |name: &str, title: &str, headline, load: RunConfig| Case {
        name: name.to_owned(),
        title: title.to_owned(),
        headline,
        load: RunConfig {
            topic_prefix: format!("bench-{name}"),
            ..load
        },
        skip: vec![],
    };
    let mut all = vec![
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
                ..base
            },
        ),
    ];
    if let Some(backlog) = all.last_mut() {
        backlog.skip.push(Skip {
            profile: "nsqd-sync-every-1".to_owned(),
            reason: "fsyncs every message on both the topic and the channel disk queue \
                     (about 200 msg/s on this disk): the backlog alone would take hours"
                .to_owned(),
        });
    }
    all.into_iter()
        .filter(|c| s.cases.is_empty() || s.cases.contains(&c.name))
        .collect()
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
    /// `git describe` of the RustQueue tree measured, if any.
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
    let profiles: Vec<Profile> = broker::profiles()
        .into_iter()
        .filter(|p| settings.profiles.is_empty() || settings.profiles.contains(&p.name))
        .filter(|p| p.kind == Kind::Nsqd || bins.rustqueued.is_some())
        .collect();
    let cases = cases(&settings);
    let mut results = Results {
        started_utc: utc_now(),
        machine: machine(),
        nsqd_version: command_line(&bins.nsqd.to_string_lossy(), &["--version"]),
        rustqueue_revision: bins
            .rustqueued
            .as_ref()
            .map(|_| command_line("git", &["describe", "--always", "--dirty"])),
        settings: settings.clone(),
        profiles: profiles.clone(),
        cases: cases.clone(),
        runs: Vec::new(),
    };
    for case in &cases {
        for round in 0..settings.rounds {
            for profile in &profiles {
                if case.skip.iter().any(|s| s.profile == profile.name) {
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

async fn run_one(case: &Case, profile: &Profile, bins: &Binaries, round: usize) -> CaseRun {
    let mut out = CaseRun {
        case: case.name.clone(),
        profile: profile.name.clone(),
        round,
        report: None,
        error: None,
    };
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

fn progress_line(run: &CaseRun) -> String {
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
    fn the_five_cases_have_the_shapes_issue_8_asks_for() {
        let s = Settings {
            duration_seconds: 5.0,
            warmup_seconds: 1.0,
            rounds: 1,
            backlog_messages: 1000,
            drain_timeout_seconds: 60.0,
            cases: vec![],
            profiles: vec![],
        };
        let c = cases(&s);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mpub_publish",
                "pub_fin",
                "low_load_latency",
                "small_messages",
                "backlog"
            ]
        );
        assert_eq!((c[0].load.producers, c[0].load.batch_size), (16, 64));
        assert_eq!((c[1].load.producers, c[1].load.consumers), (16, 16));
        assert_eq!(c[2].load.rate, Some(1000.0));
        assert_eq!(c[3].load.message_bytes, 100);
        assert_eq!(
            (c[4].load.messages, c[4].load.duration_seconds),
            (1000, None)
        );
        let only = cases(&Settings {
            cases: vec!["backlog".into()],
            ..s
        });
        assert_eq!(only.len(), 1);
    }
}
