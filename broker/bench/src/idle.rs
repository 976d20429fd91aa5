//! The `idle_topics` case: many topics with two channels each and light traffic (one producer
//! PUBs round-robin across the topics at a low fixed rate; the channels hold what it
//! publishes), then nothing at all. Reported: RSS and CPU with the light traffic, and RSS and
//! CPU while idle, which is what per-topic timers, workers and wake-ups cost.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::broker::{Binaries, Broker, Profile};
use crate::client::Conn;
use crate::procstat::{self, TICKS_PER_SECOND};
use crate::wire;

/// HTTP clients creating the topics and channels in parallel.
const SETUP_CLIENTS: usize = 8;

/// The shape of the case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdleConfig {
    /// Topics.
    pub topics: usize,
    /// Channels per topic.
    pub channels: usize,
    /// Total publish rate during the traffic phase, msg/s (round-robin over the topics).
    pub rate: f64,
    /// Seconds of traffic.
    pub traffic_seconds: f64,
    /// Seconds of idle measured after it.
    pub idle_seconds: f64,
    /// Body bytes.
    pub message_bytes: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IdleReport {
    /// Seconds to create every topic and channel over HTTP.
    pub setup_seconds: f64,
    /// Messages acknowledged during the traffic phase.
    pub published: u64,
    /// Broker RSS after setup, bytes.
    pub rss_setup_bytes: u64,
    /// Broker CPU during the traffic phase, in cores.
    pub traffic_cpu_cores: f64,
    /// Broker RSS at the end of the traffic phase, bytes.
    pub rss_traffic_bytes: u64,
    /// Broker CPU while idle, in cores.
    pub idle_cpu_cores: f64,
    /// Broker RSS at the end of the idle phase, bytes.
    pub rss_idle_bytes: u64,
    /// Every topic and channel existed and every publish was acknowledged.
    pub complete: bool,
}

/// Runs the case on a fresh broker of `profile`.
pub async fn run(
    profile: &Profile,
    bins: &Binaries,
    config: &IdleConfig,
) -> Result<IdleReport, String> {
    let broker = Broker::start(profile, bins).map_err(|e| e.to_string())?;
    let pid = broker.pid();
    let topics: Vec<String> = (0..config.topics).map(|t| format!("idle-{t:04}")).collect();
    let channels: Vec<String> = (0..config.channels).map(|c| format!("c{c}")).collect();
    let setup = Instant::now();
    {
        let (addr, topics, channels) = (broker.http.clone(), topics.clone(), channels.clone());
        // Several clients at once, as many services starting up would.
        let mut workers = Vec::new();
        for w in 0..SETUP_CLIENTS {
            let (addr, channels) = (addr.clone(), channels.clone());
            let mine: Vec<String> = topics
                .iter()
                .skip(w)
                .step_by(SETUP_CLIENTS)
                .cloned()
                .collect();
            workers.push(tokio::task::spawn_blocking(move || {
                mine.iter()
                    .try_for_each(|t| crate::restart::create(&addr, t, &channels))
            }));
        }
        for w in workers {
            w.await.map_err(|e| e.to_string())??;
        }
    }
    let mut report = IdleReport {
        setup_seconds: setup.elapsed().as_secs_f64(),
        ..IdleReport::default()
    };
    report.rss_setup_bytes = procstat::sample(pid).map_or(0, |s| s.rss_bytes);

    let mut conn = Conn::connect(&broker.tcp, true, "bench-idle")
        .await
        .map_err(|e| e.to_string())?;
    let body = vec![b'i'; config.message_bytes];
    let every = Duration::from_secs_f64(1.0 / config.rate);
    let count = (config.rate * config.traffic_seconds).round() as u64;
    let before = procstat::sample(pid).unwrap_or_default();
    let start = tokio::time::Instant::now();
    for i in 0..count {
        tokio::time::sleep_until(start + every * i as u32).await;
        wire::publish(&mut conn.wbuf, &topics[i as usize % topics.len()], &body);
        conn.flush().await.map_err(|e| e.to_string())?;
        conn.expect_ok("PUB").await.map_err(|e| e.to_string())?;
        report.published += 1;
    }
    tokio::time::sleep_until(start + Duration::from_secs_f64(config.traffic_seconds)).await;
    let traffic_window = start.elapsed().as_secs_f64();
    let after = procstat::sample(pid).unwrap_or_default();
    report.traffic_cpu_cores = cores(before.cpu_ticks, after.cpu_ticks, traffic_window);
    report.rss_traffic_bytes = after.rss_bytes;
    // The producer stays connected but silent, as an idle client would.
    let idle_start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(config.idle_seconds)).await;
    let end = procstat::sample(pid).unwrap_or_default();
    report.idle_cpu_cores = cores(
        after.cpu_ticks,
        end.cpu_ticks,
        idle_start.elapsed().as_secs_f64(),
    );
    report.rss_idle_bytes = end.rss_bytes;
    drop(conn);
    let depth = {
        let addr = broker.http.clone();
        let (first, last) = (topics[0].clone(), topics[topics.len() - 1].clone());
        let chans = channels.clone();
        tokio::task::spawn_blocking(move || {
            crate::restart::min_depth(&addr, &first, &chans)
                .and_then(|a| crate::restart::min_depth(&addr, &last, &chans).map(|b| a.min(b)))
        })
        .await
        .map_err(|e| e.to_string())??
    };
    report.complete = report.published == count && depth >= count / config.topics as u64;
    tokio::task::spawn_blocking(move || broker.stop())
        .await
        .ok();
    Ok(report)
}

fn cores(from: u64, to: u64, seconds: f64) -> f64 {
    to.saturating_sub(from) as f64 / TICKS_PER_SECOND / seconds.max(1e-9)
}
