//! `GET /metrics`: Prometheus text with the metric names listed in docs/api.md ("Other endpoints").
//!
//! Three sources, rendered together on each scrape:
//! - engine counters, gauges and histograms ([`rustqueue_engine::metrics`]): atomics fed on
//!   the publish, delivery, FIN/REQ, group-commit, GC, scrub and eviction paths;
//! - series this crate feeds itself: TCP connections and auth failures (control tokens and
//!   TCP `AUTH`);
//! - queue aggregates, budgets and disk gauges computed from engine state at scrape time,
//!   plus the optional per-topic/channel series of [`super::detailed`].
//!
//! [`RESERVED`] series have no source in this broker yet and always read 0 (docs/api.md).

use std::path::Path;

use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{Encoder, IntCounter, IntGauge, Registry, TextEncoder};
use rustqueue_engine::{Counter, Engine, Kind, Timer};

use super::ControlState;
use super::drain::counts;

pub use rustqueue_engine::metrics::BUCKETS;

/// Series registered but never fed: no source exists in this broker yet (docs/api.md lists them
/// as reserved). `rustqueue_protocol_errors_total` is kept for dashboards and never
/// incremented.
pub const RESERVED: [&str; 3] = [
    "rustqueue_retention_expired_messages_total",
    "rustqueue_publish_workers_rejected_total",
    "rustqueue_channel_commit_workers_rejected_total",
];

/// The broker's metrics.
pub struct Metrics {
    registry: Registry,
    /// Open TCP connections (maintained by the TCP listener).
    pub tcp_connections: IntGauge,
    /// Requests refused for a missing or wrong token, and failed TCP `AUTH`s.
    pub auth_failures_total: IntCounter,
    publish_inflight_bytes: IntGauge,
    delivery_inflight_bytes: IntGauge,
    disk_total_bytes: IntGauge,
    disk_available_bytes: IntGauge,
    disk_used_ratio: prometheus::Gauge,
    disk_pressure: IntGauge,
    topics: IntGauge,
    channels: IntGauge,
    topics_published_messages: IntGauge,
    channels_depth: IntGauge,
    channels_in_flight: IntGauge,
    channels_deferred: IntGauge,
    channels_ack_gap: IntGauge,
    publish_unsynced_messages: IntGauge,
    publish_unsynced_bytes: IntGauge,
    publish_sync_lag_seconds: prometheus::Gauge,
    detailed_series: IntGauge,
    detailed_series_omitted: IntGauge,
    /// `Some(budget)` when the per-topic/channel series are on.
    detail: Option<usize>,
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric name");
    r.register(Box::new(c.clone())).expect("unique metric name");
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric name");
    r.register(Box::new(g.clone())).expect("unique metric name");
    g
}

fn float_gauge(r: &Registry, name: &str, help: &str) -> prometheus::Gauge {
    let g = prometheus::Gauge::new(name, help).expect("valid metric name");
    r.register(Box::new(g.clone())).expect("unique metric name");
    g
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The reserved series: declared so dashboards find them, with no source yet.
fn register_reserved(r: &Registry) {
    const HELP: &str = "Reserved: no source in this broker yet (always 0)";
    for name in RESERVED {
        if name.ends_with("_total") {
            counter(r, name, HELP);
        } else {
            gauge(r, name, HELP);
        }
    }
}

impl Metrics {
    /// Registers every series this crate owns (engine series are added per scrape).
    pub fn new() -> Self {
        let r = Registry::new();
        rustqueue_api::telemetry::register_build_info(&r, "rustqueued").expect("unique metric");
        register_reserved(&r);
        // Declared for dashboards and never incremented (docs/api.md).
        counter(
            &r,
            "rustqueue_protocol_errors_total",
            "Protocol errors (declared by the spec, never incremented)",
        );
        Self {
            tcp_connections: gauge(&r, "rustqueue_tcp_connections", "Open TCP connections"),
            auth_failures_total: counter(
                &r,
                "rustqueue_auth_failures_total",
                "Refused control tokens and failed TCP AUTH",
            ),
            publish_inflight_bytes: gauge(
                &r,
                "rustqueue_publish_inflight_bytes",
                "Publish budget held",
            ),
            delivery_inflight_bytes: gauge(
                &r,
                "rustqueue_delivery_inflight_bytes",
                "Delivery budget held",
            ),
            disk_total_bytes: gauge(&r, "rustqueue_disk_total_bytes", "Data disk size"),
            disk_available_bytes: gauge(
                &r,
                "rustqueue_disk_available_bytes",
                "Data disk free to unprivileged users",
            ),
            disk_used_ratio: float_gauge(
                &r,
                "rustqueue_disk_used_ratio",
                "Share of the data disk in use, 0 to 1",
            ),
            disk_pressure: gauge(
                &r,
                "rustqueue_disk_pressure",
                "1 while publishes are throttled for disk space",
            ),
            topics: gauge(&r, "rustqueue_topics", "Topics"),
            channels: gauge(&r, "rustqueue_channels", "Channels"),
            topics_published_messages: gauge(
                &r,
                "rustqueue_topics_published_messages",
                "Messages published over all topics (sum of their counts; falls when a topic is deleted)",
            ),
            channels_depth: gauge(
                &r,
                "rustqueue_channels_depth",
                "Ready backlog over all channels",
            ),
            channels_in_flight: gauge(
                &r,
                "rustqueue_channels_in_flight",
                "In flight over all channels",
            ),
            channels_deferred: gauge(
                &r,
                "rustqueue_channels_deferred",
                "Deferred over all channels",
            ),
            channels_ack_gap: gauge(
                &r,
                "rustqueue_channels_ack_gap",
                "Finished positions above the ack floors over all channels",
            ),
            publish_unsynced_messages: gauge(
                &r,
                "rustqueue_publish_unsynced_messages",
                "Appended, not fsynced",
            ),
            publish_unsynced_bytes: gauge(
                &r,
                "rustqueue_publish_unsynced_bytes",
                "Appended bytes, not fsynced",
            ),
            publish_sync_lag_seconds: float_gauge(
                &r,
                "rustqueue_publish_sync_lag_seconds",
                "Age of the oldest unsynced message (max over topics)",
            ),
            detailed_series: gauge(
                &r,
                "rustqueue_detailed_queue_metric_series",
                "Per-topic/channel series emitted",
            ),
            detailed_series_omitted: gauge(
                &r,
                "rustqueue_detailed_queue_metric_series_omitted",
                "Per-topic/channel series skipped for the series budget",
            ),
            detail: None,
            registry: r,
        }
    }

    /// Turns the per-topic/channel series on with a series budget (or off with `None`).
    pub fn set_detail(&mut self, budget: Option<usize>) {
        self.detail = budget;
    }

    /// Refreshes the derived gauges and renders the text exposition format.
    pub fn render(&self, state: &ControlState) -> String {
        let stats = state.engine.stats(None, None);
        let c = counts(&stats);
        let (pub_bytes, del_bytes) = state.engine.inflight_bytes();
        let h = state.engine.health();
        let q = state.engine.queue_gauges();
        let channels: usize = stats.topics.iter().map(|t| t.channels.len()).sum();
        let deferred: u64 = stats
            .topics
            .iter()
            .flat_map(|t| &t.channels)
            .map(|ch| ch.deferred_count)
            .sum();
        set(&self.topics, stats.topics.len() as u64);
        set(&self.channels, channels as u64);
        set(&self.topics_published_messages, c.stored_messages);
        set(&self.channels_depth, c.depth.saturating_sub(deferred));
        set(&self.channels_in_flight, c.in_flight);
        set(&self.channels_deferred, deferred);
        set(&self.channels_ack_gap, q.channel_ack_gap);
        set(
            &self.publish_unsynced_messages,
            stats.topics.iter().map(|t| t.unsynced_messages).sum(),
        );
        set(
            &self.publish_unsynced_bytes,
            stats.topics.iter().map(|t| t.unsynced_bytes).sum(),
        );
        self.publish_sync_lag_seconds
            .set(q.publish_sync_lag_seconds);
        set(&self.publish_inflight_bytes, pub_bytes);
        set(&self.delivery_inflight_bytes, del_bytes);
        self.disk_pressure.set(i64::from(h.disk_pressure.is_some()));
        if let Some((total, avail)) = disk_usage(&state.data_path) {
            set(&self.disk_total_bytes, total);
            set(&self.disk_available_bytes, avail);
            let used = if total == 0 {
                0.0
            } else {
                total.saturating_sub(avail) as f64 / total as f64
            };
            self.disk_used_ratio.set(used);
        }
        let detailed = self
            .detail
            .map(|budget| super::detailed::families(&stats, &q, budget));
        if let Some(d) = &detailed {
            set(&self.detailed_series, d.emitted);
            set(&self.detailed_series_omitted, d.omitted);
        }
        let mut families = self.registry.gather();
        families.extend(engine_families(&state.engine));
        families.extend(detailed.into_iter().flat_map(|d| d.families));
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("text encoding of gathered metrics cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

fn family(name: &str, help: &str, kind: MetricType, metric: proto::Metric) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f.set_metric(vec![metric]);
    f
}

/// The engine's counters, gauges and histograms as metric families.
pub fn engine_families(engine: &Engine) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    for c in Counter::ALL {
        let v = engine.counter(*c) as f64;
        let mut m = proto::Metric::default();
        let kind = match c.kind() {
            Kind::Counter => {
                let mut pc = proto::Counter::default();
                pc.set_value(v);
                m.set_counter(pc);
                MetricType::COUNTER
            }
            Kind::Gauge => {
                let mut pg = proto::Gauge::default();
                pg.set_value(v);
                m.set_gauge(pg);
                MetricType::GAUGE
            }
        };
        out.push(family(c.name(), c.help(), kind, m));
    }
    for t in Timer::ALL {
        let snap = engine.metrics().histogram(*t);
        let mut h = proto::Histogram::default();
        h.set_sample_count(snap.count);
        h.set_sample_sum(snap.sum_seconds);
        h.set_bucket(
            BUCKETS
                .iter()
                .zip(&snap.cumulative)
                .map(|(bound, n)| {
                    let mut b = proto::Bucket::default();
                    b.set_upper_bound(*bound);
                    b.set_cumulative_count(*n);
                    b
                })
                .collect(),
        );
        let mut m = proto::Metric::default();
        m.set_histogram(h);
        out.push(family(t.name(), t.help(), MetricType::HISTOGRAM, m));
    }
    out
}

fn set(g: &IntGauge, v: u64) {
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
}

/// `(total, available to unprivileged users)` bytes of the file system holding `path`.
pub fn disk_usage(path: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    let frsize = st.fragment_size() as u64;
    Some((
        st.blocks() as u64 * frsize,
        st.blocks_available() as u64 * frsize,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_histogram_is_rendered_with_the_spec_buckets() {
        let mut names: Vec<&str> = Timer::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        assert_eq!(names.len(), 14, "docs/api.md lists 14 histograms");
        assert_eq!(BUCKETS.len(), 16);
        assert_eq!(BUCKETS[0], 0.0001);
        assert_eq!(BUCKETS[15], 10.0);
    }

    #[test]
    fn reserved_series_do_not_collide_with_fed_ones() {
        let m = Metrics::new();
        let owned: Vec<String> = m
            .registry
            .gather()
            .iter()
            .map(|f| f.name().to_owned())
            .collect();
        for c in Counter::ALL {
            assert!(!owned.iter().any(|n| n == c.name()), "{}", c.name());
        }
        for t in Timer::ALL {
            assert!(!owned.iter().any(|n| n == t.name()), "{}", t.name());
        }
        for r in RESERVED {
            assert!(owned.iter().any(|n| n == r), "{r}");
        }
    }
}
