//! `GET /v1/observe/head` and `GET /v1/observe` (console token): what the console polls.
//!
//! Counts, gauges, settings and histograms only: nothing here reads a message body. The head
//! walks no topic (the registry revision, atomics, one statvfs, the `COMPATIBILITY` file; the
//! backlog walk behind `consume_ready` only while draining). The full observation adds the
//! catalog (one stats walk), storage totals, aggregates, group-commit counters and the latency
//! histograms. Counters and histograms are the very ones `/metrics` renders (one source).

use rustqueue_api::contract::{
    DATA_FORMAT, DeliveryBudget, GroupCommit, HistogramSnapshot, Histograms,
    OBSERVE_SCHEMA_VERSION, Observation, ObserveHead, ObservedDisk, ObservedLimits,
    ObservedManagement, ObservedNode, ObservedStorage, QueueAggregates, QueueObservation,
    Readiness, RuntimeCounters, StatsTopic,
};
use rustqueue_engine::{Counter, Engine, Timer};

use super::ControlState;
use super::capabilities::CapabilityError;
use super::metrics::{BUCKETS, disk_usage};
use super::registry::{ReadyFacts, has_work};
use super::stats::{now_ms, topics};

/// Settings the observation reports, taken from the configuration at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObserveSettings {
    /// Disk pressure starts at this use, percent.
    pub high_watermark_percent: u8,
    /// Disk pressure ends below this use, percent.
    pub low_watermark_percent: u8,
    /// Disk pressure also starts below this many free bytes.
    pub min_free_bytes: u64,
    /// Protective eviction is on.
    pub protective_eviction_enabled: bool,
    /// Limits and ack mode.
    pub max_message_bytes: u64,
    /// `durable`, `write_ack` or `nsq_relaxed`.
    pub publish_ack_mode: String,
    /// Relaxed sync thresholds.
    pub relaxed_sync_messages: u64,
    /// Relaxed sync thresholds.
    pub relaxed_sync_bytes: u64,
    /// Relaxed sync thresholds.
    pub relaxed_sync_interval_ms: u64,
    /// Index page cache bound.
    pub message_index_cache_bytes: u64,
    /// Most client connections.
    pub max_connections: u64,
}

impl ObserveSettings {
    /// The settings of `cfg`.
    pub fn of(cfg: &crate::config::Config) -> ObserveSettings {
        let (s, q) = (&cfg.storage, &cfg.queue);
        ObserveSettings {
            high_watermark_percent: s.disk_high_watermark_percent,
            low_watermark_percent: s.disk_low_watermark_percent,
            min_free_bytes: s.min_free_bytes,
            protective_eviction_enabled: s.protective_eviction_enabled,
            max_message_bytes: q.max_message_bytes,
            publish_ack_mode: q.publish_ack_mode.clone(),
            relaxed_sync_messages: q.relaxed_sync_messages,
            relaxed_sync_bytes: q.relaxed_sync_bytes,
            relaxed_sync_interval_ms: q.relaxed_sync_interval_ms,
            message_index_cache_bytes: s.message_index_cache_bytes,
            max_connections: cfg.limits.max_connections as u64,
        }
    }
}

/// `GET /v1/observe/head`.
pub fn head(state: &ControlState) -> Result<ObserveHead, CapabilityError> {
    let e = &state.engine;
    let facts = ReadyFacts::now(state);
    // Only a draining broker needs the backlog walk to say whether it still serves consumers.
    let consume_ready = facts.ready() && (facts.accepting || has_work(&e.stats(None, None)));
    let (publish_bytes, delivery_bytes) = e.inflight_bytes();
    Ok(ObserveHead {
        schema_version: OBSERVE_SCHEMA_VERSION,
        registry_revision: e.registry_revision(),
        collected_at_ms: now_ms(),
        node: ObservedNode {
            id: state.node.node_id,
            address: state.node.broadcast_address.clone(),
            version: state.binary.binary_version.clone(),
            data_format: DATA_FORMAT,
            compatibility: state.capabilities()?,
        },
        readiness: Readiness {
            process_ready: !e.health().shutting_down,
            storage_healthy: facts.storage_ok,
            disk_ready: facts.disk_ok,
            publish_ready: facts.publish_ready(),
            consume_ready,
            draining: !facts.accepting,
            management_fences_ready: facts.fences_ready,
        },
        disk: disk(state, facts.disk_ok),
        runtime: runtime(state, publish_bytes),
        delivery_budget: DeliveryBudget {
            in_flight_bytes: delivery_bytes,
            waiters: e.counter(Counter::BudgetWaiters),
            waits_total: e.counter(Counter::BudgetWaits),
        },
        limits: limits(&state.settings),
        management: ObservedManagement {
            enabled: state.management.is_some(),
            fence_revision: state.fences.revision(),
            tombstones: state.fences.tombstones(),
        },
    })
}

/// `GET /v1/observe`.
pub fn full(state: &ControlState) -> Result<Observation, CapabilityError> {
    let head = head(state)?;
    let stats = state.engine.stats(None, None);
    let catalog_collected_at_ms = now_ms();
    let topics = topics(&stats);
    Ok(Observation {
        head,
        storage: ObservedStorage {
            segment_count: topics.iter().map(|t| t.segment_count).sum(),
            segment_bytes: topics.iter().map(|t| t.segment_bytes).sum(),
        },
        catalog_collected_at_ms,
        queue: QueueObservation {
            aggregates: aggregates(&topics),
            group_commit: group_commit(&state.engine),
            histograms: histograms(&state.engine),
            topics,
        },
    })
}

fn disk(state: &ControlState, disk_ok: bool) -> ObservedDisk {
    let s = &state.settings;
    let (total_bytes, available_bytes) = disk_usage(&state.data_path).unwrap_or((0, 0));
    let used_percent = if total_bytes == 0 {
        0.0
    } else {
        total_bytes.saturating_sub(available_bytes) as f64 * 100.0 / total_bytes as f64
    };
    ObservedDisk {
        total_bytes,
        available_bytes,
        used_percent,
        pressure: !disk_ok,
        high_watermark_percent: s.high_watermark_percent,
        low_watermark_percent: s.low_watermark_percent,
        min_free_bytes: s.min_free_bytes,
        protective_eviction_enabled: s.protective_eviction_enabled,
    }
}

fn runtime(state: &ControlState, publish_inflight_bytes: u64) -> RuntimeCounters {
    let e = &state.engine;
    let m = &state.metrics;
    RuntimeCounters {
        tcp_connections: u64::try_from(m.tcp_connections.get()).unwrap_or(0),
        publish_messages_total: e.counter(Counter::PublishMessages),
        publish_bytes_total: e.counter(Counter::PublishBytes),
        publish_inflight_bytes,
        publish_throttled_requests_total: e.counter(Counter::ThrottledRequests),
        publish_throttled_bytes_total: e.counter(Counter::ThrottledBytes),
        delivered_messages_total: e.counter(Counter::Delivered),
        finished_messages_total: e.counter(Counter::Finished),
        requeued_messages_total: e.counter(Counter::Requeued),
        timed_out_messages_total: e.counter(Counter::TimedOut),
        dead_letter_messages_total: e.counter(Counter::DeadLetters),
        retention_expired_messages_total: 0,
        auth_failures_total: m.auth_failures_total.get(),
        storage_errors_total: e.counter(Counter::StorageErrors),
        protective_evictions_total: e.counter(Counter::Evictions),
        protective_evicted_messages_total: e.counter(Counter::EvictedMessages),
    }
}

fn limits(s: &ObserveSettings) -> ObservedLimits {
    ObservedLimits {
        max_message_bytes: s.max_message_bytes,
        publish_ack_mode: s.publish_ack_mode.clone(),
        relaxed_sync_messages: s.relaxed_sync_messages,
        relaxed_sync_bytes: s.relaxed_sync_bytes,
        relaxed_sync_interval_ms: s.relaxed_sync_interval_ms,
        message_index_cache_bytes: s.message_index_cache_bytes,
        max_connections: s.max_connections,
    }
}

fn aggregates(topics: &[StatsTopic]) -> QueueAggregates {
    let mut a = QueueAggregates {
        topics: topics.len() as u64,
        ..QueueAggregates::default()
    };
    for t in topics {
        a.stored_messages += t.message_count;
        a.unsynced_messages += t.unsynced_messages;
        a.unsynced_bytes += t.unsynced_bytes;
        a.max_sync_lag_ms = a.max_sync_lag_ms.max(t.sync_lag_ms);
        for c in &t.channels {
            a.channels += 1;
            a.depth += c.depth;
            a.in_flight += c.in_flight_count;
            a.deferred += c.deferred_count;
            a.ack_gap += c.ack_gap;
        }
    }
    a
}

fn group_commit(e: &Engine) -> GroupCommit {
    GroupCommit {
        publish_group_commits_total: e.counter(Counter::GroupCommits),
        publish_group_requests_total: e.counter(Counter::GroupRequests),
        publish_group_max_requests: e.counter(Counter::GroupMaxRequests),
        channel_group_commits_total: e.counter(Counter::ChannelGroupCommits),
        channel_group_requests_total: e.counter(Counter::ChannelGroupRequests),
        channel_group_max_requests: e.counter(Counter::ChannelGroupMaxRequests),
    }
}

/// One engine histogram as the contract's snapshot: per-bucket (not cumulative) counts, the
/// last one above every bound.
pub fn snapshot(e: &Engine, t: Timer) -> HistogramSnapshot {
    let h = e.metrics().histogram(t);
    let mut counts = Vec::with_capacity(BUCKETS.len() + 1);
    let mut below = 0;
    for c in &h.cumulative {
        counts.push(c.saturating_sub(below));
        below = *c;
    }
    counts.push(h.count.saturating_sub(below));
    HistogramSnapshot {
        bounds: BUCKETS.to_vec(),
        counts,
        sum_seconds: h.sum_seconds,
        count: h.count,
    }
}

fn histograms(e: &Engine) -> Histograms {
    Histograms {
        storage_fsync: snapshot(e, Timer::PublishFsync),
        group_commit_wait: snapshot(e, Timer::GroupCommitWait),
        publish_ack: snapshot(e, Timer::PublishAck),
        channel_fsync: snapshot(e, Timer::ChannelFsync),
        channel_ack: snapshot(e, Timer::ChannelAck),
        payload_read: snapshot(e, Timer::PayloadRead),
        storage_scrub: snapshot(e, Timer::Scrub),
        storage_gc: snapshot(e, Timer::Gc),
    }
}
