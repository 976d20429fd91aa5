//! One benchmark run against one broker: connect consumers (SUB before any publish), warm up,
//! measure for a duration (or publish a fixed count), then drain until the ledger has every
//! acknowledged message back, and report. A run is `complete` only when that drain finished
//! with nothing missing, duplicated or unexpected, and no connection failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{ClientError, Conn};
use crate::ledger::{self, Ledger, Summary};
use crate::load::{self, ConsumerControl, PHASE_MEASURE, PHASE_STOP, ProducerPlan};
use crate::procstat::{self, Sampler};

/// Everything one run needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    /// Broker TCP address.
    pub address: String,
    /// Topic name prefix; the run appends a unique suffix.
    pub topic_prefix: String,
    /// Producer connections.
    pub producers: usize,
    /// Consumer connections on one channel.
    pub consumers: usize,
    /// Consumers only start reading after publishing ends (publish-only and backlog cases;
    /// they still SUB first, so the channel holds every message).
    pub consume_after_publish: bool,
    /// Messages per command: 1 = PUB, more = MPUB.
    pub batch_size: usize,
    /// Body size in bytes (at least the 20-byte ledger header).
    pub message_bytes: usize,
    /// Total fixed arrival rate in msg/s; `None` = saturation.
    pub rate: Option<f64>,
    /// Warm-up seconds (time mode): published and drained, not measured.
    pub warmup_seconds: f64,
    /// Measured seconds; `None` = count mode (publish `messages` then stop).
    pub duration_seconds: Option<f64>,
    /// Messages in count mode.
    pub messages: u64,
    /// Give up draining after this long (the run then does not count).
    pub drain_timeout_seconds: f64,
    /// Send IDENTIFY after the magic.
    pub identify: bool,
    /// Broker process to sample in /proc (RSS, CPU).
    pub broker_pid: Option<u32>,
    /// Topics the load is spread over: producer `i` publishes to topic `i % topics`, and
    /// there is at least one consumer per topic (consumer `j` reads topic `j % topics`).
    #[serde(default = "one")]
    pub topics: usize,
    /// At a fixed rate, offset each producer's schedule by `index / producers` of the
    /// interval, so arrivals are evenly spaced instead of a burst from every producer at once.
    #[serde(default)]
    pub spread_producers: bool,
    /// Where producer `i` connects: `producer_addresses[i % len]`; empty = `address`. A
    /// cluster run sends every producer to the gateway (RustQueue) or spreads them over the
    /// servers themselves (nsqd, which has no gateway).
    #[serde(default)]
    pub producer_addresses: Vec<String>,
    /// Where consumer connection `j` connects: `consumer_addresses[j % len]`; empty =
    /// `address`. A cluster run gives every server its share of the consumers, as an NSQ
    /// consumer connects to every broker that holds the topic.
    #[serde(default)]
    pub consumer_addresses: Vec<String>,
    /// Further server processes whose CPU time counts with `broker_pid`'s (a cluster run's
    /// other brokers, its gateway and discovery); memory figures stay `broker_pid`'s.
    #[serde(default)]
    pub extra_pids: Vec<u32>,
}

fn one() -> usize {
    1
}

impl RunConfig {
    /// Consumer connections the run opens: `consumers`, but at least one per topic, and at
    /// least one per consumer address.
    pub fn consumer_connections(&self) -> usize {
        self.consumers
            .max(self.topics)
            .max(self.consumer_addresses.len())
    }

    fn producer_address(&self, i: usize) -> &str {
        pick(&self.producer_addresses, i).unwrap_or(&self.address)
    }

    fn consumer_address(&self, j: usize) -> &str {
        pick(&self.consumer_addresses, j).unwrap_or(&self.address)
    }

    /// Every process whose CPU the run measures.
    fn server_pids(&self) -> Vec<u32> {
        self.broker_pid
            .into_iter()
            .chain(self.extra_pids.iter().copied())
            .collect()
    }
}

fn pick(list: &[String], i: usize) -> Option<&str> {
    (!list.is_empty()).then(|| list[i % list.len()].as_str())
}

/// Publish-ack latency percentiles, microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Acknowledged commands recorded (PUB or MPUB).
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 95th percentile.
    pub p95_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

/// Broker resource use from /proc.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BrokerUsage {
    /// Largest RSS sampled during the run (every 100 ms), bytes.
    pub peak_rss_bytes: u64,
    /// The kernel's high-water mark (VmHWM) at the end, bytes.
    pub hwm_bytes: u64,
    /// RSS before the first publish, bytes.
    pub rss_before_bytes: u64,
    /// RSS when publishing ended, before the drain, bytes.
    pub rss_after_publish_bytes: u64,
    /// (RSS after publish - RSS before) / messages acknowledged.
    pub rss_growth_per_message_bytes: f64,
    /// Broker CPU time during the measured window, seconds.
    pub cpu_seconds: f64,
    /// Broker CPU during the window in cores (of 2 shared with the load generator).
    pub cpu_cores: f64,
}

/// The result of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// The configuration it ran with.
    pub config: RunConfig,
    /// The topic actually used.
    pub topic: String,
    /// Length of the measured window, seconds.
    pub window_seconds: f64,
    /// Messages acknowledged in the window.
    pub published: u64,
    /// Published msg/s in the window.
    pub publish_msgs_per_sec: f64,
    /// Published MiB/s of bodies in the window.
    pub publish_mib_per_sec: f64,
    /// Deliveries in the window (0 when consumers start after publishing).
    pub received_in_window: u64,
    /// Delivered msg/s in the window.
    pub receive_msgs_per_sec: f64,
    /// Delivered MiB/s in the window.
    pub receive_mib_per_sec: f64,
    /// Time from the end of publishing until the ledger was complete.
    pub drain_seconds: f64,
    /// The drain hit its time limit.
    pub drain_timed_out: bool,
    /// The ledger's verdict over the whole run (warm-up included).
    pub ledger: Summary,
    /// Publish-ack latency in the window.
    pub latency: Latency,
    /// Broker resource use, when a pid was given.
    pub broker: Option<BrokerUsage>,
    /// Load generator CPU during the window, cores.
    pub generator_cpu_cores: f64,
    /// Connection failures.
    pub errors: Vec<String>,
    /// Drained, clean ledger, no errors: only such a run counts.
    pub complete: bool,
}

/// Why a run could not start at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A configuration that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A consumer or producer could not connect or subscribe.
    #[error("setting up connections: {0}")]
    Setup(#[from] ClientError),
    /// What the run awaited between publishing and draining failed.
    #[error("before the drain: {0}")]
    BeforeDrain(String),
}

/// Connects and subscribes every consumer (SUB is acknowledged before the first publish, so
/// the channel holds every message), each held by `control` until released.
async fn start_consumers(
    config: &RunConfig,
    topics: &[String],
    channel: &str,
    ledger: &Arc<Ledger>,
    control: &ConsumerControl,
) -> Result<Vec<JoinHandle<Result<(), ClientError>>>, RunError> {
    let mut consumers = Vec::new();
    for i in 0..config.consumer_connections() {
        let address = config.consumer_address(i);
        let mut conn = Conn::connect(address, config.identify, &format!("bench-c{i}")).await?;
        load::subscribe(&mut conn, &topics[i % topics.len()], channel).await?;
        let task = load::consume(conn, ledger.clone(), control.clone());
        consumers.push(tokio::spawn(task));
    }
    Ok(consumers)
}

/// Waits until the ledger has every acknowledged message back, every consumer ended, or the
/// limit passed: `(seconds, timed out)`.
async fn drain(
    ledger: &Ledger,
    consumers: &[JoinHandle<Result<(), ClientError>>],
    limit_seconds: f64,
) -> (f64, bool) {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(limit_seconds);
    while ledger.outstanding() > 0 {
        if start.elapsed() > limit {
            return (start.elapsed().as_secs_f64(), true);
        }
        if consumers.iter().all(|c| c.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (start.elapsed().as_secs_f64(), false)
}

/// The broker's memory and CPU over the run, from its /proc samples.
fn broker_usage(
    pid: u32,
    sampler: Sampler,
    (before, after_publish): (Option<procstat::Sample>, Option<procstat::Sample>),
    (window_start, window_end): (&Mark, &Mark),
    summary: &Summary,
) -> BrokerUsage {
    let peak = sampler.finish();
    let end = procstat::sample(pid).unwrap_or_default();
    let before = before.unwrap_or_default();
    let after = after_publish.unwrap_or_default();
    let window = window_end.at.duration_since(window_start.at).as_secs_f64();
    let cpu_seconds = (window_end
        .broker_ticks
        .saturating_sub(window_start.broker_ticks)) as f64
        / procstat::TICKS_PER_SECOND;
    BrokerUsage {
        peak_rss_bytes: peak.max(end.rss_bytes),
        hwm_bytes: end.hwm_bytes,
        rss_before_bytes: before.rss_bytes,
        rss_after_publish_bytes: after.rss_bytes,
        rss_growth_per_message_bytes: (after.rss_bytes as f64 - before.rss_bytes as f64)
            / summary.acknowledged.max(1) as f64,
        cpu_seconds,
        cpu_cores: cpu_seconds / window.max(1e-9),
    }
}

/// Runs one benchmark.
pub async fn run(config: RunConfig) -> Result<RunReport, RunError> {
    run_with(config, async { Ok(()) }).await
}

/// Runs one benchmark, awaiting `before_drain` between the end of publishing and the
/// consumers' release (the tiered cases wait there for the broker's uploads); the drain is
/// timed from the release. An error from it ends the run with [`RunError::BeforeDrain`].
pub async fn run_with(
    config: RunConfig,
    before_drain: impl std::future::Future<Output = Result<(), String>>,
) -> Result<RunReport, RunError> {
    validate(&config)?;
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    let mut topics = topic_names(&config, nonce);
    let channel = "bench".to_owned();
    let ledger = Arc::new(Ledger::new(nonce, config.producers));
    let (go_tx, go_rx) = watch::channel(!config.consume_after_publish);
    let (stop_tx, stop_rx) = watch::channel(false);

    let control = ConsumerControl {
        go: go_rx,
        stop: stop_rx,
    };
    let consumers = start_consumers(&config, &topics, &channel, &ledger, &control).await?;
    let mut conns = Vec::new();
    for i in 0..config.producers {
        let address = config.producer_address(i);
        conns.push(Conn::connect(address, config.identify, &format!("bench-p{i}")).await?);
    }
    let sampler = config
        .broker_pid
        .map(|pid| (pid, Sampler::start(pid, Duration::from_millis(100))));
    let broker_before = config.broker_pid.and_then(procstat::sample);
    let phase = Arc::new(AtomicU8::new(if config.warmup_seconds > 0.0 {
        load::PHASE_WARMUP
    } else {
        PHASE_MEASURE
    }));
    let mut producers = Vec::new();
    for (index, conn) in conns.into_iter().enumerate() {
        let plan = plan_for(&config, &topics, index);
        producers.push(tokio::spawn(load::produce(
            conn,
            plan,
            ledger.clone(),
            phase.clone(),
        )));
    }

    let mut errors = Vec::new();
    if config.warmup_seconds > 0.0 && config.duration_seconds.is_some() {
        tokio::time::sleep(Duration::from_secs_f64(config.warmup_seconds)).await;
    }
    let pids = config.server_pids();
    let window_start = Mark::take(&ledger, &pids);
    phase.store(PHASE_MEASURE, Ordering::Release);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
    if let Some(seconds) = config.duration_seconds {
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    }
    let mut window_end = None;
    if config.duration_seconds.is_some() {
        window_end = Some(Mark::take(&ledger, &pids));
        phase.store(PHASE_STOP, Ordering::Release);
    }
    for task in producers {
        match task.await {
            Ok(Ok(h)) => hist.add(h).expect("same bounds"),
            Ok(Err(e)) => errors.push(format!("producer: {e}")),
            Err(e) => errors.push(format!("producer task: {e}")),
        }
    }
    let window_end = window_end.unwrap_or_else(|| Mark::take(&ledger, &pids));
    let broker_after_publish = config.broker_pid.and_then(procstat::sample);

    if let Err(e) = before_drain.await {
        let _ = stop_tx.send(true);
        return Err(RunError::BeforeDrain(e));
    }
    let _ = go_tx.send(true);
    let (drain_seconds, drain_timed_out) =
        drain(&ledger, &consumers, config.drain_timeout_seconds).await;
    let _ = stop_tx.send(true);
    finish_consumers(consumers, &mut errors).await;
    let summary = ledger.summary();
    let broker = sampler.map(|(pid, sampler)| {
        let samples = (broker_before, broker_after_publish);
        broker_usage(
            pid,
            sampler,
            samples,
            (&window_start, &window_end),
            &summary,
        )
    });
    Ok(report(
        config,
        topics.swap_remove(0),
        (window_start, window_end),
        (drain_seconds, drain_timed_out),
        summary,
        &hist,
        broker,
        errors,
    ))
}

/// Waits for each consumer to close (they were told to), noting any that failed.
async fn finish_consumers(
    consumers: Vec<JoinHandle<Result<(), ClientError>>>,
    errors: &mut Vec<String>,
) {
    for task in consumers {
        match tokio::time::timeout(Duration::from_secs(30), task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.push(format!("consumer: {e}")),
            Ok(Err(e)) => errors.push(format!("consumer task: {e}")),
            Err(_) => errors.push("consumer did not finish within 30 s of CLS".to_owned()),
        }
    }
}

/// `<prefix>-<nonce hex>`, or with `-<k>` appended for each of several topics.
fn topic_names(config: &RunConfig, nonce: u64) -> Vec<String> {
    let base = format!("{}-{:x}", config.topic_prefix, nonce);
    if config.topics == 1 {
        return vec![base];
    }
    (0..config.topics).map(|k| format!("{base}-{k}")).collect()
}

fn validate(config: &RunConfig) -> Result<(), RunError> {
    let bad = |m: &str| Err(RunError::Config(m.to_owned()));
    if config.producers == 0 || config.consumers == 0 {
        return bad("at least one producer and one consumer (to check the ledger) are needed");
    }
    if config.message_bytes < ledger::HEADER_BYTES {
        return bad("--message-bytes must be at least 20 (the ledger header)");
    }
    if config.batch_size == 0 {
        return bad("--batch-size must be at least 1");
    }
    if config.rate.is_some_and(|r| r <= 0.0 || !r.is_finite()) {
        return bad("--rate must be positive");
    }
    if config.duration_seconds.is_none() && config.messages == 0 {
        return bad("count mode needs --messages > 0 (or give --duration-seconds)");
    }
    if !(1..=MAX_TOPICS).contains(&config.topics) {
        return bad("--topics must be between 1 and 1024");
    }
    if config.topic_prefix.len() > 40 {
        return bad("--topic is limited to 40 characters (a 17-character run suffix is added)");
    }
    Ok(())
}

/// Most topics one run spreads its load over (`-<k>` keeps names within NSQ's 64 characters).
const MAX_TOPICS: usize = 1024;

fn plan_for(config: &RunConfig, topics: &[String], index: usize) -> ProducerPlan {
    let quota = config.duration_seconds.is_none().then(|| {
        let n = config.producers as u64;
        config.messages / n + u64::from((index as u64) < config.messages % n)
    });
    let interval = config.rate.map(|rate| {
        Duration::from_secs_f64(config.batch_size as f64 * config.producers as f64 / rate)
    });
    let offset = match interval {
        Some(every) if config.spread_producers => every * index as u32 / config.producers as u32,
        _ => Duration::ZERO,
    };
    ProducerPlan {
        index,
        topic: topics[index % topics.len()].clone(),
        offset,
        message_bytes: config.message_bytes,
        batch: config.batch_size,
        quota,
        interval,
    }
}

struct Mark {
    at: Instant,
    acked: u64,
    received: u64,
    broker_ticks: u64,
    own_ticks: u64,
}

impl Mark {
    /// Samples CPU first (reading /proc takes a while) and the ledger counters last, so the
    /// caller's phase switch follows the counters at once: otherwise producers keep timing
    /// acks for the phase being left while the window's counts are already fixed.
    fn take(ledger: &Ledger, pids: &[u32]) -> Mark {
        let broker_ticks = pids
            .iter()
            .filter_map(|&pid| procstat::sample(pid))
            .map(|s| s.cpu_ticks)
            .sum();
        let own_ticks = procstat::sample(std::process::id())
            .map(|s| s.cpu_ticks)
            .unwrap_or(0);
        Mark {
            at: Instant::now(),
            acked: ledger.acknowledged(),
            received: ledger.received_total(),
            broker_ticks,
            own_ticks,
        }
    }
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
fn report(
    config: RunConfig,
    topic: String,
    (start, end): (Mark, Mark),
    (drain_seconds, drain_timed_out): (f64, bool),
    ledger: Summary,
    hist: &Histogram<u64>,
    broker: Option<BrokerUsage>,
    errors: Vec<String>,
) -> RunReport {
    let window = end.at.duration_since(start.at).as_secs_f64().max(1e-9);
    let published = end.acked - start.acked;
    let received = end.received - start.received;
    let mib = config.message_bytes as f64 / (1024.0 * 1024.0);
    let latency = Latency {
        count: hist.len(),
        p50_us: hist.value_at_quantile(0.50),
        p95_us: hist.value_at_quantile(0.95),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        mean_us: hist.mean(),
    };
    let complete = ledger.is_clean() && !drain_timed_out && errors.is_empty();
    RunReport {
        topic,
        window_seconds: window,
        published,
        publish_msgs_per_sec: published as f64 / window,
        publish_mib_per_sec: published as f64 * mib / window,
        received_in_window: received,
        receive_msgs_per_sec: received as f64 / window,
        receive_mib_per_sec: received as f64 * mib / window,
        drain_seconds,
        drain_timed_out,
        ledger,
        latency,
        broker,
        generator_cpu_cores: (end.own_ticks - start.own_ticks) as f64
            / procstat::TICKS_PER_SECOND
            / window,
        errors,
        complete,
        config,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RunConfig {
        RunConfig {
            address: String::new(),
            topic_prefix: "t".into(),
            producers: 4,
            consumers: 2,
            consume_after_publish: false,
            batch_size: 1,
            message_bytes: 100,
            rate: Some(1000.0),
            warmup_seconds: 0.0,
            duration_seconds: Some(1.0),
            messages: 0,
            drain_timeout_seconds: 1.0,
            identify: true,
            broker_pid: None,
            topics: 3,
            spread_producers: true,
            producer_addresses: vec![],
            consumer_addresses: vec![],
            extra_pids: vec![],
        }
    }

    #[test]
    fn spread_producers_start_evenly_across_one_interval() {
        let c = config();
        let topics = topic_names(&c, 0xab);
        assert_eq!(topics, ["t-ab-0", "t-ab-1", "t-ab-2"]);
        // 1,000 msg/s from 4 producers: each sends every 4 ms, offset by 1 ms from the last.
        let plans: Vec<_> = (0..4).map(|i| plan_for(&c, &topics, i)).collect();
        for (i, p) in plans.iter().enumerate() {
            assert_eq!(p.interval, Some(Duration::from_millis(4)));
            assert_eq!(p.offset, Duration::from_millis(i as u64));
        }
        assert_eq!(plans[3].topic, "t-ab-0");
        assert_eq!(c.consumer_connections(), 3);
        let bunched = plan_for(
            &RunConfig {
                spread_producers: false,
                ..config()
            },
            &topics,
            3,
        );
        assert_eq!(bunched.offset, Duration::ZERO);
    }

    #[test]
    fn a_cluster_run_spreads_connections_over_its_addresses() {
        let single = config();
        assert_eq!(single.producer_address(5), "");
        let c = RunConfig {
            address: "gw".into(),
            producer_addresses: vec!["gw".into()],
            consumer_addresses: vec!["b1".into(), "b2".into(), "b3".into()],
            consumers: 2,
            topics: 1,
            broker_pid: Some(10),
            extra_pids: vec![11, 12],
            ..config()
        };
        assert_eq!(c.producer_address(7), "gw");
        let to: Vec<&str> = (0..4).map(|j| c.consumer_address(j)).collect();
        assert_eq!(to, ["b1", "b2", "b3", "b1"]);
        assert_eq!(
            c.consumer_connections(),
            3,
            "at least one consumer per broker"
        );
        assert_eq!(c.server_pids(), [10, 11, 12]);
    }

    #[test]
    fn one_topic_keeps_the_plain_name_and_too_many_are_refused() {
        let c = RunConfig {
            topics: 1,
            ..config()
        };
        assert_eq!(topic_names(&c, 1), ["t-1"]);
        let many = RunConfig {
            topics: MAX_TOPICS + 1,
            ..config()
        };
        assert!(validate(&many).is_err());
    }
}
