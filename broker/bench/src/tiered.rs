//! The tiered cases (docs/benchmarks.md, docs/tiering.md): one backlog drained twice by the
//! same consumers, once from the broker's own volume and once from the bucket.
//!
//! Both runs start a real S3-compatible server (versitygw over a temporary directory on the
//! same disk, on loopback) and a broker with `[tiering]` uploading to it. In `tiered_local`
//! the broker keeps its local copies; in `tiered_read_through` `local_retention_bytes = 0`
//! removes each segment's local copy once it is uploaded, so the channel reads every sealed
//! segment from the bucket (1 MiB ranged GETs, each body checked against its CRC). Between
//! publishing and draining the case waits until every sealed segment is uploaded and, for
//! read-through, evicted; the drain is timed from the consumers' start as in the drain cases.
//! A run counts only if the broker's counters show what the case claims: read-through bytes
//! in the read-through run, none in the local one.
//!
//! nsqd has no bucket: its drain of the same backlog (from its memory queue and disk) stands
//! beside both runs as the reference the ratio column is taken on.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::broker::{Binaries, Broker, Kind, Profile, StartOptions};
use crate::run::{self, RunConfig, RunReport};

/// Segment size of the tiered broker: a 1 KiB backlog of 200,000 messages seals about a
/// dozen segments, each uploaded (multipart) and read back in 1 MiB ranges.
const SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
/// The bucket versitygw serves.
const BUCKET: &str = "rustqueue-bench";
/// How long uploads (and evictions) may take before the run is given up.
const SETTLE_LIMIT: Duration = Duration::from_secs(180);

/// Which of the two runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieredConfig {
    /// Remove each local copy once uploaded (`local_retention_bytes = 0`), so the drain reads
    /// from the bucket; otherwise local copies stay and the drain reads the volume.
    pub read_through: bool,
}

/// What the broker's counters said about one tiered run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TieredReport {
    /// Sealed segments uploaded before the drain.
    pub uploaded_segments: u64,
    /// Local copies removed before the drain.
    pub evicted_segments: u64,
    /// Bytes the channel read from the bucket during the drain (read-ahead included).
    pub read_through_bytes: u64,
    /// Seconds from the end of publishing until the uploads (and evictions) were done.
    pub settle_seconds: f64,
}

/// The broker's tiering counters, from its `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counters {
    backlog_segments: f64,
    uploads: f64,
    evicted: f64,
    read_through_bytes: f64,
}

impl Counters {
    fn parse(text: &str) -> Counters {
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    let metric = series.split('{').next()?;
                    (metric == name).then(|| value.parse::<f64>().ok())?
                })
                .sum()
        };
        Counters {
            backlog_segments: sum("rustqueue_tiering_upload_backlog_segments"),
            uploads: sum("rustqueue_tiering_uploads_total"),
            evicted: sum("rustqueue_tiering_evicted_segments_total"),
            read_through_bytes: sum("rustqueue_tiering_read_through_bytes_total"),
        }
    }

    /// All `sealed` segments are uploaded (at least one) and, for read-through, every
    /// uploaded one has lost its local copy. The backlog gauge alone would not do: it is
    /// refreshed by the uploader's scan, so just after publishing it can still say 0 while
    /// the last segments sealed wait for their upload.
    fn settled(&self, config: TieredConfig, sealed: u64) -> bool {
        self.backlog_segments == 0.0
            && self.uploads >= sealed.max(1) as f64
            && (!config.read_through || self.evicted >= self.uploads)
    }
}

fn scrape(http: &str) -> Result<Counters, String> {
    let response = crate::http::get(http, "/metrics").map_err(|e| format!("GET /metrics: {e}"))?;
    if response.status != 200 {
        return Err(format!("GET /metrics answered {}", response.status));
    }
    Ok(Counters::parse(&String::from_utf8_lossy(&response.body)))
}

async fn scrape_async(http: String) -> Result<Counters, String> {
    tokio::task::spawn_blocking(move || scrape(&http))
        .await
        .map_err(|e| format!("metrics task: {e}"))?
}

/// Sealed segments under the broker's store `data`: every topic's segment indexes, which are
/// written when a segment is sealed (the active one has none yet) and stay when local
/// retention removes its `.rqlog`.
fn sealed_segments(data: &Path) -> u64 {
    let Ok(topics) = std::fs::read_dir(data.join("topics")) else {
        return 0;
    };
    topics
        .filter_map(Result::ok)
        .map(|t| {
            std::fs::read_dir(t.path().join("segments")).map_or(0, |files| {
                files
                    .filter_map(Result::ok)
                    .filter(|f| f.file_name().to_string_lossy().ends_with(".rqidx"))
                    .count() as u64
            })
        })
        .sum()
}

/// Waits until the broker at `http`, its store in `data`, has uploaded (and, for
/// read-through, evicted) every sealed segment.
async fn settle(http: String, data: PathBuf, config: TieredConfig) -> Result<f64, String> {
    let start = Instant::now();
    loop {
        let now = scrape_async(http.clone()).await?;
        let sealed = sealed_segments(&data);
        if now.settled(config, sealed) {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > SETTLE_LIMIT {
            return Err(format!(
                "uploads not done within {SETTLE_LIMIT:?} of the end of publishing: {sealed} segments sealed, {now:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A versitygw serving [`BUCKET`] from a temporary directory; stopped on drop.
struct Versitygw {
    child: Child,
    dir: tempfile::TempDir,
    address: String,
}

const ACCESS_KEY: &str = "rustqueue-bench-access";
const SECRET_KEY: &str = "rustqueue-bench-secret-key";

impl Versitygw {
    fn start(bin: &PathBuf) -> Result<Versitygw, String> {
        let dir = tempfile::Builder::new()
            .prefix("rustqueue-bench-bucket-")
            .tempdir()
            .map_err(|e| format!("bucket temp dir: {e}"))?;
        std::fs::create_dir_all(dir.path().join("root").join(BUCKET))
            .map_err(|e| format!("bucket dir: {e}"))?;
        let address = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("free port: {e}"))?
            .to_string();
        let log_path = dir.path().join("versitygw.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("versitygw log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("versitygw log: {e}"))?;
        let child = Command::new(bin)
            .args(["--access", ACCESS_KEY, "--secret", SECRET_KEY, "--port"])
            .arg(&address)
            .arg("posix")
            .arg(dir.path().join("root"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let mut server = Versitygw {
            child,
            dir,
            address,
        };
        let start = Instant::now();
        while TcpStream::connect(&server.address).is_err() {
            let exited = server.child.try_wait().ok().flatten();
            if exited.is_some() || start.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "versitygw did not listen on {} ({}); its log:\n{}",
                    server.address,
                    exited.map_or("30 s passed".to_owned(), |s| format!("exited: {s}")),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// rustqueued's configuration for this bucket: `[storage]` keys (the bench's config ends
    /// in that table), then `[tiering]`.
    fn broker_toml(&self, config: TieredConfig) -> Result<String, String> {
        let write = |name: &str, value: &str| {
            let path = self.dir.path().join(name);
            std::fs::write(&path, value)
                .map(|()| path)
                .map_err(|e| format!("credentials file: {e}"))
        };
        let access = write("access-key", ACCESS_KEY)?;
        let secret = write("secret-key", SECRET_KEY)?;
        // Local retention needs storage feature level 3 (its rollback fence).
        let (level, retention) = if config.read_through {
            ("feature_level = 3\n", "local_retention_bytes = 0\n")
        } else {
            ("", "")
        };
        // Segments smaller than the default body limit need a smaller limit: 4 MiB bodies
        // (MPUBs of this case are 64 KiB), 1 MiB messages.
        Ok(format!(
            "{level}max_segment_bytes = {SEGMENT_BYTES}\n\n[limits]\nmax_body_bytes = 4194304\n\n\
             [queue]\nmax_message_bytes = 1048576\n\n[tiering]\nbucket = \"{BUCKET}\"\n\
             endpoint = \"http://{}\"\nallow_http = true\nprefix = \"bench\"\n\
             access_key_file = \"{}\"\nsecret_key_file = \"{}\"\n{retention}",
            self.address,
            access.display(),
            secret.display()
        ))
    }
}

impl Drop for Versitygw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the backlog `load` on a fresh broker of `profile`: a tiered rustqueued as `config`
/// says, or nsqd as it is.
pub async fn run(
    profile: &Profile,
    bins: &Binaries,
    config: TieredConfig,
    load: &RunConfig,
) -> Result<(RunReport, Option<TieredReport>), String> {
    if profile.kind == Kind::Nsqd {
        let broker = Broker::start(profile, bins).map_err(|e| e.to_string())?;
        let load = RunConfig {
            address: broker.tcp.clone(),
            broker_pid: Some(broker.pid()),
            ..load.clone()
        };
        let report = run::run(load).await.map_err(|e| e.to_string());
        tokio::task::spawn_blocking(move || broker.stop())
            .await
            .ok();
        return report.map(|r| (r, None));
    }
    let bin = bins.versitygw.as_ref().ok_or(
        "no versitygw binary for the tiered cases: run `scripts/deps.sh versitygw` and pass \
         --versitygw (make bench does both)",
    )?;
    let bucket = Versitygw::start(bin)?;
    let options = StartOptions {
        rustqueue_toml: bucket.broker_toml(config)?,
        ..StartOptions::default()
    };
    let broker = Broker::start_with(profile, bins, &options, None).map_err(|e| e.to_string())?;
    let http = broker.http.clone();
    let data = broker.data_path().join("data");
    let load = RunConfig {
        address: broker.tcp.clone(),
        broker_pid: Some(broker.pid()),
        ..load.clone()
    };
    let settled = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (h, s) = (http.clone(), settled.clone());
    let outcome = run::run_with(load, async move {
        let seconds = settle(h.clone(), data, config).await?;
        let before = scrape_async(h).await?;
        *s.lock().expect("not poisoned") = Some((seconds, before));
        Ok(())
    })
    .await;
    let after = scrape_async(http).await;
    tokio::task::spawn_blocking(move || broker.stop())
        .await
        .ok();
    drop(bucket);
    let report = outcome.map_err(|e| e.to_string())?;
    let (settle_seconds, before) = settled
        .lock()
        .expect("not poisoned")
        .take()
        .ok_or("the drain started before the uploads were done")?;
    let after = after?;
    let tiered = TieredReport {
        uploaded_segments: before.uploads as u64,
        evicted_segments: before.evicted as u64,
        read_through_bytes: (after.read_through_bytes - before.read_through_bytes) as u64,
        settle_seconds,
    };
    check(config, &tiered)?;
    Ok((report, Some(tiered)))
}

/// A run counts only if it read where it says it did.
fn check(config: TieredConfig, r: &TieredReport) -> Result<(), String> {
    if config.read_through && r.read_through_bytes < r.evicted_segments * SEGMENT_BYTES / 2 {
        return Err(format!(
            "the read-through run read {} bytes from the bucket for {} evicted segments of \
             {SEGMENT_BYTES} bytes: the drain did not read from the bucket",
            r.read_through_bytes, r.evicted_segments
        ));
    }
    if !config.read_through && (r.read_through_bytes > 0 || r.evicted_segments > 0) {
        return Err(format!(
            "the local run evicted {} segments and read {} bytes from the bucket: it was not local",
            r.evicted_segments, r.read_through_bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP rustqueue_tiering_uploads_total Sealed segments uploaded\n\
        # TYPE rustqueue_tiering_uploads_total counter\n\
        rustqueue_tiering_uploads_total 12\n\
        rustqueue_tiering_upload_backlog_segments 0\n\
        rustqueue_tiering_evicted_segments_total{node=\"a\"} 5\n\
        rustqueue_tiering_evicted_segments_total{node=\"b\"} 7\n\
        rustqueue_tiering_evicted_bytes_total 99\n\
        rustqueue_tiering_read_through_bytes_total 3e+06\n";

    #[test]
    fn reads_and_sums_the_tiering_counters() {
        let c = Counters::parse(METRICS);
        assert_eq!(
            c,
            Counters {
                backlog_segments: 0.0,
                uploads: 12.0,
                evicted: 12.0,
                read_through_bytes: 3e6,
            }
        );
        assert!(c.settled(TieredConfig { read_through: true }, 12));
        assert!(
            !c.settled(TieredConfig { read_through: true }, 13),
            "a sealed segment the gauge does not show yet"
        );
        let lagging = Counters { evicted: 11.0, ..c };
        assert!(!lagging.settled(TieredConfig { read_through: true }, 12));
        assert!(lagging.settled(
            TieredConfig {
                read_through: false
            },
            12
        ));
        let uploading = Counters {
            backlog_segments: 1.0,
            ..c
        };
        assert!(!uploading.settled(
            TieredConfig {
                read_through: false
            },
            12
        ));
        assert!(!Counters::default().settled(
            TieredConfig {
                read_through: false
            },
            0
        ));
    }

    #[test]
    fn a_run_counts_only_where_it_read_what_it_claims() {
        let remote = TieredReport {
            uploaded_segments: 12,
            evicted_segments: 12,
            read_through_bytes: 12 * SEGMENT_BYTES,
            settle_seconds: 1.0,
        };
        assert!(check(TieredConfig { read_through: true }, &remote).is_ok());
        let err = check(
            TieredConfig {
                read_through: false,
            },
            &remote,
        )
        .unwrap_err();
        assert!(err.contains("not local"), "{err}");
        let local = TieredReport {
            evicted_segments: 0,
            read_through_bytes: 0,
            ..remote.clone()
        };
        assert!(
            check(
                TieredConfig {
                    read_through: false
                },
                &local
            )
            .is_ok()
        );
        let unread = TieredReport {
            read_through_bytes: 0,
            ..remote
        };
        let err = check(TieredConfig { read_through: true }, &unread).unwrap_err();
        assert!(err.contains("did not read from the bucket"), "{err}");
    }
}
