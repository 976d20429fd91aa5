//! The `restart` case: a broker holding a backlog of `messages` in about `segments` segment
//! files, on a topic with `channels` channels, is stopped and started again on the same data
//! directory; the figure is the time from spawning the process until the readiness probe the
//! operator uses answers 200 (`GET /v1/health` for rustqueued; `GET /ping` for nsqd). Measured
//! twice: after a clean stop (SIGTERM) and after SIGKILL (recovery). A restart only counts when
//! every channel still holds every message afterwards (`/stats?format=json` depth).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::broker::{Binaries, Broker, BrokerError, Kind, Profile, StartOptions};
use crate::client::Conn;
use crate::{http, wire};

/// rustqueued's body limit in this case, so that ~1 MiB segments are allowed.
const BODY_LIMIT: u64 = 1 << 20;

/// How long a restarted broker may take to show every message on every channel (nsqd moves
/// a topic's backlog to its channels after the restart).
const SETTLE: Duration = Duration::from_secs(60);
/// The same after SIGKILL, where what was only in memory is gone for good.
const SETTLE_AFTER_KILL: Duration = Duration::from_secs(5);

/// The shape of the backlog.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestartConfig {
    /// Messages on the topic.
    pub messages: u64,
    /// Segment files the backlog should span (rustqueued's `storage.max_segment_bytes`, and
    /// nsqd's `--max-bytes-per-file` per channel queue, are sized for this).
    pub segments: u64,
    /// Channels on the topic (each holds every message).
    pub channels: usize,
    /// Body bytes.
    pub message_bytes: usize,
    /// Producer connections publishing the backlog (MPUB).
    pub producers: usize,
    /// Messages per MPUB.
    pub batch: usize,
}

/// What one restart run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RestartReport {
    /// Messages acknowledged while building the backlog.
    pub published: u64,
    /// Seconds the backlog took to publish.
    pub publish_seconds: f64,
    /// Segment / queue data files on disk after the clean stop (`*.rqlog`, nsqd `*.dat`).
    pub data_files: u64,
    /// Bytes under the data directory after the clean stop.
    pub data_bytes: u64,
    /// SIGTERM to exit, seconds.
    pub stop_seconds: f64,
    /// Spawn to ready after the clean stop, ms.
    pub clean_ready_ms: f64,
    /// Spawn to ready after SIGKILL, ms.
    pub kill_ready_ms: f64,
    /// Broker RSS once ready after the clean stop, bytes.
    pub rss_ready_bytes: u64,
    /// Smallest channel depth after the clean restart.
    pub min_depth_after: u64,
    /// Smallest channel depth after the SIGKILL restart (a broker that acknowledges before
    /// its disk has the message may lose some here; reported, not required).
    pub min_depth_after_kill: u64,
    /// Every channel held every message after the clean restart.
    pub complete: bool,
}

/// Builds the backlog on a fresh broker of `profile`, then restarts it twice.
pub async fn run(
    profile: &Profile,
    bins: &Binaries,
    config: &RestartConfig,
) -> Result<RestartReport, String> {
    let per_message = config.message_bytes as u64 + 24;
    let segment_bytes = (config.messages * per_message).div_ceil(config.segments.max(1));
    let options = StartOptions {
        // Segments this small need a body limit below them (docs/configuration.md).
        rustqueue_toml: format!(
            "max_segment_bytes = {}\n\n[limits]\nmax_body_bytes = {BODY_LIMIT}\n\n\
             [queue]\nmax_message_bytes = {BODY_LIMIT}\n",
            segment_bytes.max(BODY_LIMIT + 64)
        ),
        nsqd_args: vec![format!("--max-bytes-per-file={segment_bytes}")],
    };
    let e = |e: BrokerError| e.to_string();
    let broker = Broker::start_with(profile, bins, &options, None).map_err(e)?;
    let topic = "bench-restart";
    let channels: Vec<String> = (0..config.channels).map(|c| format!("c{c}")).collect();
    {
        let addr = broker.http.clone();
        let chans = channels.clone();
        tokio::task::spawn_blocking(move || create(&addr, topic, &chans))
            .await
            .map_err(|e| e.to_string())??;
    }
    let started = Instant::now();
    let published = publish(&broker.tcp, topic, config).await?;
    let publish_seconds = started.elapsed().as_secs_f64();
    let stopping = Instant::now();
    let data = tokio::task::spawn_blocking(move || broker.stop_keeping_data())
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no data directory after the stop")?;
    let stop_seconds = stopping.elapsed().as_secs_f64();
    let (data_files, data_bytes) = disk_usage(data.path());
    let mut report = RestartReport {
        published,
        publish_seconds,
        data_files,
        data_bytes,
        stop_seconds,
        ..RestartReport::default()
    };

    let (profile2, bins2, options2) = (profile.clone(), bins.clone(), options.clone());
    let (mut broker, ready) =
        tokio::task::spawn_blocking(move || restart(&profile2, &bins2, &options2, data))
            .await
            .map_err(|e| e.to_string())??;
    report.clean_ready_ms = ready.as_secs_f64() * 1000.0;
    report.rss_ready_bytes = crate::procstat::sample(broker.pid()).map_or(0, |s| s.rss_bytes);
    report.min_depth_after =
        settled_depth(&broker.http, topic, &channels, published, SETTLE).await?;

    broker.kill();
    let data = broker
        .stop_keeping_data()
        .ok_or("no data directory after SIGKILL")?;
    let (profile2, bins2, options2) = (profile.clone(), bins.clone(), options.clone());
    let (broker, ready) =
        tokio::task::spawn_blocking(move || restart(&profile2, &bins2, &options2, data))
            .await
            .map_err(|e| e.to_string())??;
    report.kill_ready_ms = ready.as_secs_f64() * 1000.0;
    report.min_depth_after_kill =
        settled_depth(&broker.http, topic, &channels, published, SETTLE_AFTER_KILL).await?;
    tokio::task::spawn_blocking(move || broker.stop())
        .await
        .ok();
    report.complete = report.min_depth_after == published && published == config.messages;
    Ok(report)
}

fn restart(
    profile: &Profile,
    bins: &Binaries,
    options: &StartOptions,
    data: tempfile::TempDir,
) -> Result<(Broker, Duration), String> {
    let mut broker =
        Broker::start_with(profile, bins, options, Some(data)).map_err(|e| e.to_string())?;
    let ready = broker
        .wait_http_ready(Duration::from_secs(300))
        .map_err(|e| e.to_string())?;
    Ok((broker, ready))
}

/// Creates `topic` and its channels over HTTP (`POST /topic/create`, `/channel/create`).
pub fn create(http_addr: &str, topic: &str, channels: &[String]) -> Result<(), String> {
    let ok = |path: String| match http::post(http_addr, &path) {
        Ok(r) if r.status == 200 => Ok(()),
        Ok(r) => Err(format!(
            "POST {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )),
        Err(e) => Err(format!("POST {path}: {e}")),
    };
    ok(format!("/topic/create?topic={topic}"))?;
    for c in channels {
        ok(format!("/channel/create?topic={topic}&channel={c}"))?;
    }
    Ok(())
}

async fn publish(addr: &str, topic: &str, config: &RestartConfig) -> Result<u64, String> {
    let mut tasks = Vec::new();
    for p in 0..config.producers {
        let n = config.messages / config.producers as u64
            + u64::from((p as u64) < config.messages % config.producers as u64);
        let (addr, topic, bytes, batch) = (
            addr.to_owned(),
            topic.to_owned(),
            config.message_bytes,
            config.batch,
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(&addr, true, &format!("bench-restart-p{p}"))
                .await
                .map_err(|e| e.to_string())?;
            let body = vec![b'r'; bytes];
            let mut done = 0u64;
            while done < n {
                let want = (n - done).min(batch as u64) as usize;
                wire::multi_publish(&mut conn.wbuf, &topic, std::iter::repeat_n(&body[..], want));
                conn.flush().await.map_err(|e| e.to_string())?;
                conn.expect_ok("MPUB").await.map_err(|e| e.to_string())?;
                done += want as u64;
            }
            Ok::<u64, String>(done)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.map_err(|e| e.to_string())??;
    }
    Ok(total)
}

/// Polls [`min_depth`] until it reaches `want` (or `limit` passes); the last value.
async fn settled_depth(
    http_addr: &str,
    topic: &str,
    channels: &[String],
    want: u64,
    limit: Duration,
) -> Result<u64, String> {
    let deadline = Instant::now() + limit;
    loop {
        let (addr, t, c) = (http_addr.to_owned(), topic.to_owned(), channels.to_vec());
        let depth = tokio::task::spawn_blocking(move || min_depth(&addr, &t, &c))
            .await
            .map_err(|e| e.to_string())??;
        if depth >= want || Instant::now() > deadline {
            return Ok(depth);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The smallest depth among `channels` of `topic` in `/stats?format=json`.
pub fn min_depth(http_addr: &str, topic: &str, channels: &[String]) -> Result<u64, String> {
    let r = http::get(http_addr, &format!("/stats?format=json&topic={topic}"))
        .map_err(|e| format!("GET /stats: {e}"))?;
    let doc: serde_json::Value =
        serde_json::from_slice(&r.body).map_err(|e| format!("GET /stats: {e}"))?;
    // nsqd 1.x answers the document itself; some versions wrap it in {"data": ...}
    let doc = doc.get("data").unwrap_or(&doc);
    let topics = doc
        .get("topics")
        .and_then(|t| t.as_array())
        .ok_or("GET /stats: no topics")?;
    let t = topics
        .iter()
        .find(|t| t.get("topic_name").and_then(|n| n.as_str()) == Some(topic))
        .ok_or_else(|| format!("GET /stats: no topic {topic}"))?;
    let empty = vec![];
    let found = t
        .get("channels")
        .and_then(|c| c.as_array())
        .unwrap_or(&empty);
    let mut min = u64::MAX;
    for c in channels {
        let depth = found
            .iter()
            .find(|x| x.get("channel_name").and_then(|n| n.as_str()) == Some(c))
            .and_then(|x| x.get("depth"))
            .and_then(|d| d.as_u64())
            .ok_or_else(|| format!("GET /stats: no depth for channel {c}"))?;
        min = min.min(depth);
    }
    Ok(min)
}

/// Data files (`*.rqlog` segments, nsqd `*.dat` queue files) and total bytes under `dir`.
fn disk_usage(dir: &std::path::Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                bytes += meta.len();
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".rqlog") || name.ends_with(".dat") {
                    files += 1;
                }
            }
        }
    }
    (files, bytes)
}

/// Whether `profile` is one the restart and idle cases run (ack modes do not change what a
/// restart reads or what idle topics cost, so one profile per server is enough).
pub fn runs_profile(profile: &Profile) -> bool {
    matches!(
        (profile.kind, profile.name.as_str()),
        (Kind::Rustqueue, "rustqueue-durable") | (Kind::Nsqd, crate::broker::BASELINE)
    )
}
