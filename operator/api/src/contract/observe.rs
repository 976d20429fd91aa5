//! `GET /v1/observe/head` and `GET /v1/observe` (console token): what the console polls.
//!
//! The head is small and cheap (readiness, disk, runtime counters, budgets, limits and the
//! registry revision); the console reads it every poll and fetches the full observation (the
//! head plus storage, the catalog of topics and channels, group-commit counters and latency
//! histograms) only when the head says something changed. Neither carries a message body.

use serde::{Deserialize, Serialize};

use super::{Capabilities, StatsTopic};

/// The `schema_version` of both bodies.
pub const OBSERVE_SCHEMA_VERSION: u32 = 1;

/// `GET /v1/observe/head`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserveHead {
    /// [`OBSERVE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The registry revision (`/v1/registry/head`): changes with every topic or channel
    /// created, deleted, paused or unpaused. Management requests must name it.
    pub registry_revision: u64,
    /// Wall clock of the collection, ms since the Unix epoch.
    pub collected_at_ms: u64,
    /// Who answers.
    pub node: ObservedNode,
    /// The readiness facts behind `/v1/health` and the registry's ready flags.
    pub readiness: Readiness,
    /// The data disk.
    pub disk: ObservedDisk,
    /// Process-wide counters and gauges (the `/metrics` runtime family).
    pub runtime: RuntimeCounters,
    /// The delivery byte budget.
    pub delivery_budget: DeliveryBudget,
    /// Limits and ack mode in force.
    pub limits: ObservedLimits,
    /// Console management on this broker.
    pub management: ObservedManagement,
}

/// The broker in an observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedNode {
    /// Node id.
    pub id: u32,
    /// Broadcast address clients dial.
    pub address: String,
    /// Binary version.
    pub version: String,
    /// On-disk data format (7).
    pub data_format: u32,
    /// Same as `GET /v1/capabilities`.
    pub compatibility: Capabilities,
}

/// Readiness facts. `publish_ready` and `consume_ready` follow the registry's formulas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    /// Started and not shutting down.
    pub process_ready: bool,
    /// No storage fault isolated the store.
    pub storage_healthy: bool,
    /// No disk pressure.
    pub disk_ready: bool,
    /// Accepting publishes.
    pub publish_ready: bool,
    /// Delivering.
    pub consume_ready: bool,
    /// Draining (operator drain or maintenance).
    pub draining: bool,
    /// Management fences synced (always true with management off).
    pub management_fences_ready: bool,
}

/// The data disk as the broker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ObservedDisk {
    /// File system size, bytes.
    pub total_bytes: u64,
    /// Bytes available to the broker.
    pub available_bytes: u64,
    /// Used share of the file system, percent.
    pub used_percent: f64,
    /// Under disk pressure: publishes are throttled.
    pub pressure: bool,
    /// Pressure starts at this use, percent.
    pub high_watermark_percent: u8,
    /// Pressure ends below this use, percent.
    pub low_watermark_percent: u8,
    /// Pressure also starts below this many free bytes.
    pub min_free_bytes: u64,
    /// Protective eviction of the oldest data under pressure is on.
    pub protective_eviction_enabled: bool,
}

/// Process-wide counters (monotonic, `_total`) and gauges, named as on `/metrics` without the
/// `rustqueue_` prefix. Rates are deltas of these between two polls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[allow(
    missing_docs,
    reason = "each field is the /metrics series of the same name"
)]
pub struct RuntimeCounters {
    pub tcp_connections: u64,
    pub publish_messages_total: u64,
    pub publish_bytes_total: u64,
    pub publish_inflight_bytes: u64,
    pub publish_throttled_requests_total: u64,
    pub publish_throttled_bytes_total: u64,
    pub delivered_messages_total: u64,
    pub finished_messages_total: u64,
    pub requeued_messages_total: u64,
    pub timed_out_messages_total: u64,
    pub dead_letter_messages_total: u64,
    pub retention_expired_messages_total: u64,
    pub auth_failures_total: u64,
    pub storage_errors_total: u64,
    pub protective_evictions_total: u64,
    pub protective_evicted_messages_total: u64,
}

/// The delivery byte budget (messages sent and not yet finished, over all consumers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryBudget {
    /// Bytes in flight to consumers.
    pub in_flight_bytes: u64,
    /// Deliveries waiting for budget now.
    pub waiters: u64,
    /// Waits for budget since start.
    pub waits_total: u64,
}

/// Limits and durability settings in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedLimits {
    /// Largest message body, bytes.
    pub max_message_bytes: u64,
    /// `durable`, `write_ack` or `nsq_relaxed`.
    pub publish_ack_mode: String,
    /// Relaxed modes sync after this many messages...
    pub relaxed_sync_messages: u64,
    /// ...or this many bytes...
    pub relaxed_sync_bytes: u64,
    /// ...or this long, ms.
    pub relaxed_sync_interval_ms: u64,
    /// Message index cache, bytes.
    pub message_index_cache_bytes: u64,
    /// Most client connections.
    pub max_connections: u64,
}

/// Console management state on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObservedManagement {
    /// `security.console_management_enabled`: `/v1/manage/*` is served.
    pub enabled: bool,
    /// The `revision` of the last fence sync (empty before the first).
    pub fence_revision: String,
    /// Unexpired topic and channel tombstones.
    pub tombstones: u64,
}

/// `GET /v1/observe`: the head plus storage, the catalog and the queue internals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The head fields, inline.
    #[serde(flatten)]
    pub head: ObserveHead,
    /// Segment totals over all topics.
    pub storage: ObservedStorage,
    /// When the topic catalog below was collected, ms since the Unix epoch.
    pub catalog_collected_at_ms: u64,
    /// Queue internals and the catalog.
    pub queue: QueueObservation,
}

/// Segment totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedStorage {
    /// Segment files.
    pub segment_count: u64,
    /// Bytes in segment files.
    pub segment_bytes: u64,
}

/// Queue internals of a full observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueObservation {
    /// Totals over all topics and channels.
    pub aggregates: QueueAggregates,
    /// Publish and channel group commit.
    pub group_commit: GroupCommit,
    /// Latency histograms.
    pub histograms: Histograms,
    /// Every topic with its channels, in name order.
    pub topics: Vec<StatsTopic>,
}

/// Totals over all topics and channels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[allow(
    missing_docs,
    reason = "each field is the total of the per-topic/channel value of the same name"
)]
pub struct QueueAggregates {
    pub topics: u64,
    pub channels: u64,
    pub stored_messages: u64,
    pub depth: u64,
    pub in_flight: u64,
    pub deferred: u64,
    pub ack_gap: u64,
    pub unsynced_messages: u64,
    pub unsynced_bytes: u64,
    /// Largest sync lag over topics, ms.
    pub max_sync_lag_ms: u64,
}

/// Group-commit counters (`rustqueue_{publish,channel}_group_*` on `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[allow(
    missing_docs,
    reason = "each field is the /metrics series of the same name"
)]
pub struct GroupCommit {
    pub publish_group_commits_total: u64,
    pub publish_group_requests_total: u64,
    pub publish_group_max_requests: u64,
    pub channel_group_commits_total: u64,
    pub channel_group_requests_total: u64,
    pub channel_group_max_requests: u64,
}

/// Latency histograms, each as on `/metrics` (`rustqueue_<name>_duration_seconds`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Histograms {
    /// Publish group fsync.
    pub storage_fsync: HistogramSnapshot,
    /// Publish wait for its group commit.
    pub group_commit_wait: HistogramSnapshot,
    /// Publish to acknowledgement.
    pub publish_ack: HistogramSnapshot,
    /// Channel WAL fsync.
    pub channel_fsync: HistogramSnapshot,
    /// FIN/REQ to acknowledgement.
    pub channel_ack: HistogramSnapshot,
    /// Message body reads for delivery.
    pub payload_read: HistogramSnapshot,
    /// Scrub passes.
    pub storage_scrub: HistogramSnapshot,
    /// GC passes.
    pub storage_gc: HistogramSnapshot,
}

/// One histogram: upper bounds in seconds (the last bucket, `+Inf`, has no bound) and the
/// count of each bucket (not cumulative; one more than `bounds`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Upper bounds, seconds, ascending.
    pub bounds: Vec<f64>,
    /// Observations per bucket; the last is above every bound.
    pub counts: Vec<u64>,
    /// Sum of observations, seconds.
    pub sum_seconds: f64,
    /// Number of observations.
    pub count: u64,
}

impl HistogramSnapshot {
    /// Adds `other` into `self`. Histograms with different bounds cannot be merged bucket by
    /// bucket; then only `count` and `sum_seconds` add and the buckets of `self` stay.
    /// Returns whether the buckets merged.
    pub fn merge(&mut self, other: &HistogramSnapshot) -> bool {
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
        if self.bounds.is_empty() && self.counts.is_empty() {
            self.bounds.clone_from(&other.bounds);
            self.counts.clone_from(&other.counts);
            return true;
        }
        if self.bounds != other.bounds || self.counts.len() != other.counts.len() {
            return false;
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        true
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1), or `None` when empty or in
    /// the `+Inf` bucket.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return self.bounds.get(i).copied();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(counts: &[u64]) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: vec![0.001, 0.01, 0.1],
            counts: counts.to_vec(),
            sum_seconds: 0.5,
            count: counts.iter().sum(),
        }
    }

    #[test]
    fn histograms_with_the_same_bounds_merge_bucket_by_bucket() {
        let mut a = HistogramSnapshot::default();
        assert!(a.merge(&h(&[1, 2, 3, 4])));
        assert!(a.merge(&h(&[1, 0, 0, 0])));
        assert_eq!(a.counts, vec![2, 2, 3, 4]);
        assert_eq!(a.count, 11);
        assert!((a.sum_seconds - 1.0).abs() < 1e-9);
    }

    #[test]
    fn histograms_with_other_bounds_add_only_count_and_sum() {
        let mut a = h(&[1, 0, 0, 0]);
        let mut b = h(&[0, 1, 0, 0]);
        b.bounds = vec![1.0, 2.0, 3.0];
        assert!(!a.merge(&b));
        assert_eq!(a.counts, vec![1, 0, 0, 0]);
        assert_eq!(a.count, 2);
    }

    #[test]
    fn a_quantile_names_the_bound_of_its_bucket() {
        let x = h(&[50, 40, 9, 1]);
        assert_eq!(x.quantile_bound(0.5), Some(0.001));
        assert_eq!(x.quantile_bound(0.9), Some(0.01));
        assert_eq!(x.quantile_bound(0.99), Some(0.1));
        assert_eq!(x.quantile_bound(1.0), None);
        assert_eq!(HistogramSnapshot::default().quantile_bound(0.5), None);
    }
}
