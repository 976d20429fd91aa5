//! `GET /metrics`: Prometheus text with the metric names of spec/broker.md §7.
//!
//! Gauges derived from engine state (queue aggregates, in-flight bytes, disk) are refreshed on
//! every scrape. Counters are `pub` so the protocol paths can feed them; the control layer
//! itself counts auth failures and times manual scrubs. Histograms use the §7.4 buckets.

use std::path::Path;

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntGauge, Registry, TextEncoder};

use super::ControlState;
use super::drain::counts;

/// Histogram buckets in seconds (spec/broker.md §7.4).
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Histogram names of spec/broker.md §7.4.
pub const HISTOGRAMS: [&str; 13] = [
    "rustqueue_storage_fsync_duration_seconds",
    "rustqueue_group_commit_wait_duration_seconds",
    "rustqueue_publish_topic_lock_wait_duration_seconds",
    "rustqueue_publish_topic_lock_hold_duration_seconds",
    "rustqueue_publish_ack_duration_seconds",
    "rustqueue_delivery_topic_lock_wait_duration_seconds",
    "rustqueue_delivery_topic_lock_hold_duration_seconds",
    "rustqueue_channel_fsync_duration_seconds",
    "rustqueue_channel_group_commit_wait_duration_seconds",
    "rustqueue_channel_ack_duration_seconds",
    "rustqueue_payload_read_duration_seconds",
    "rustqueue_storage_scrub_duration_seconds",
    "rustqueue_storage_gc_duration_seconds",
];

/// The broker's metrics.
pub struct Metrics {
    registry: Registry,
    /// Open TCP connections (set by the TCP listener).
    pub tcp_connections: IntGauge,
    /// Messages accepted by PUB/MPUB/DPUB and `/pub`, `/mpub`.
    pub publish_messages_total: IntCounter,
    /// Body bytes accepted.
    pub publish_bytes_total: IntCounter,
    /// Publishes refused with `E_THROTTLED` / 429.
    pub publish_throttled_requests_total: IntCounter,
    /// Bytes of refused publishes.
    pub publish_throttled_bytes_total: IntCounter,
    /// Messages handed to consumers.
    pub delivered_messages_total: IntCounter,
    /// FIN count.
    pub finished_messages_total: IntCounter,
    /// REQ count.
    pub requeued_messages_total: IntCounter,
    /// Declared by the spec; never incremented there either.
    pub protocol_errors_total: IntCounter,
    /// Requests refused for a missing or wrong token.
    pub auth_failures_total: IntCounter,
    /// Storage errors seen by the control layer (scrub failures).
    pub storage_errors_total: IntCounter,
    publish_inflight_bytes: IntGauge,
    delivery_inflight_bytes: IntGauge,
    disk_total_bytes: IntGauge,
    disk_available_bytes: IntGauge,
    disk_used_percent: prometheus::Gauge,
    disk_pressure: IntGauge,
    topics: IntGauge,
    channels: IntGauge,
    topic_messages_total: IntGauge,
    channel_depth_total: IntGauge,
    channel_in_flight_total: IntGauge,
    channel_deferred_total: IntGauge,
    publish_unsynced_messages: IntGauge,
    publish_unsynced_bytes: IntGauge,
    histograms: Vec<Histogram>,
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let r = Registry::new();
        let used = prometheus::Gauge::new("rustqueue_disk_used_percent", "Data disk used percent")
            .expect("valid metric name");
        r.register(Box::new(used.clone())).expect("unique");
        let histograms = HISTOGRAMS
            .iter()
            .map(|name| {
                let h = Histogram::with_opts(
                    HistogramOpts::new(*name, name.replace('_', " ")).buckets(BUCKETS.to_vec()),
                )
                .expect("valid histogram");
                r.register(Box::new(h.clone())).expect("unique");
                h
            })
            .collect();
        Self {
            tcp_connections: gauge(&r, "rustqueue_tcp_connections", "Open TCP connections"),
            publish_messages_total: counter(
                &r,
                "rustqueue_publish_messages_total",
                "Messages published",
            ),
            publish_bytes_total: counter(
                &r,
                "rustqueue_publish_bytes_total",
                "Body bytes published",
            ),
            publish_throttled_requests_total: counter(
                &r,
                "rustqueue_publish_throttled_requests_total",
                "Publishes refused with E_THROTTLED / 429",
            ),
            publish_throttled_bytes_total: counter(
                &r,
                "rustqueue_publish_throttled_bytes_total",
                "Bytes of throttled publishes",
            ),
            delivered_messages_total: counter(
                &r,
                "rustqueue_delivered_messages_total",
                "Deliveries",
            ),
            finished_messages_total: counter(&r, "rustqueue_finished_messages_total", "FINs"),
            requeued_messages_total: counter(&r, "rustqueue_requeued_messages_total", "REQs"),
            protocol_errors_total: counter(
                &r,
                "rustqueue_protocol_errors_total",
                "Protocol errors",
            ),
            auth_failures_total: counter(&r, "rustqueue_auth_failures_total", "Refused tokens"),
            storage_errors_total: counter(&r, "rustqueue_storage_errors_total", "Storage errors"),
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
            disk_used_percent: used,
            disk_pressure: gauge(
                &r,
                "rustqueue_disk_pressure",
                "1 while publishes are throttled for disk space",
            ),
            topics: gauge(&r, "rustqueue_topics", "Topics"),
            channels: gauge(&r, "rustqueue_channels", "Channels"),
            topic_messages_total: gauge(
                &r,
                "rustqueue_topic_messages_total",
                "Messages held over all topics",
            ),
            channel_depth_total: gauge(
                &r,
                "rustqueue_channel_depth_total",
                "Ready backlog over all channels",
            ),
            channel_in_flight_total: gauge(
                &r,
                "rustqueue_channel_in_flight_total",
                "In flight over all channels",
            ),
            channel_deferred_total: gauge(
                &r,
                "rustqueue_channel_deferred_total",
                "Deferred over all channels",
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
            histograms,
            registry: r,
        }
    }

    /// The histogram called `name` (one of [`HISTOGRAMS`]).
    pub fn histogram(&self, name: &str) -> Option<&Histogram> {
        HISTOGRAMS
            .iter()
            .position(|n| *n == name)
            .map(|i| &self.histograms[i])
    }

    /// Refreshes the derived gauges and renders the text exposition format.
    pub fn render(&self, state: &ControlState) -> String {
        let stats = state.engine.stats(None, None);
        let c = counts(&stats);
        let (pub_bytes, del_bytes) = state.engine.inflight_bytes();
        let h = state.engine.health();
        let channels: usize = stats.topics.iter().map(|t| t.channels.len()).sum();
        let deferred: u64 = stats
            .topics
            .iter()
            .flat_map(|t| &t.channels)
            .map(|ch| ch.deferred_count)
            .sum();
        set(&self.topics, stats.topics.len() as u64);
        set(&self.channels, channels as u64);
        set(&self.topic_messages_total, c.stored_messages);
        set(&self.channel_depth_total, c.depth - deferred);
        set(&self.channel_in_flight_total, c.in_flight);
        set(&self.channel_deferred_total, deferred);
        set(
            &self.publish_unsynced_messages,
            stats.topics.iter().map(|t| t.unsynced_messages).sum(),
        );
        set(
            &self.publish_unsynced_bytes,
            stats.topics.iter().map(|t| t.unsynced_bytes).sum(),
        );
        set(&self.publish_inflight_bytes, pub_bytes);
        set(&self.delivery_inflight_bytes, del_bytes);
        self.disk_pressure.set(i64::from(h.disk_pressure.is_some()));
        if let Some((total, avail)) = disk_usage(&state.data_path) {
            set(&self.disk_total_bytes, total);
            set(&self.disk_available_bytes, avail);
            let used = if total == 0 {
                0.0
            } else {
                total.saturating_sub(avail) as f64 * 100.0 / total as f64
            };
            self.disk_used_percent.set(used);
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding of gathered metrics cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
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
    fn every_spec_histogram_is_registered_with_the_spec_buckets() {
        let m = Metrics::new();
        m.histogram("rustqueue_storage_scrub_duration_seconds")
            .unwrap()
            .observe(0.003);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&m.registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        for name in HISTOGRAMS {
            assert!(
                text.contains(&format!("{name}_bucket{{le=\"0.0001\"}}")),
                "{name}"
            );
            assert!(
                text.contains(&format!("{name}_bucket{{le=\"10\"}}")),
                "{name}"
            );
            assert!(
                text.contains(&format!("{name}_bucket{{le=\"+Inf\"}}")),
                "{name}"
            );
        }
        assert!(text.contains("rustqueue_storage_scrub_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("rustqueue_storage_scrub_duration_seconds_bucket{le=\"0.0025\"} 0"));
    }
}
