//! The engine's own metrics: plain atomics fed on the hot paths (no lock is taken just to
//! count) and fixed-bucket histograms. The server renders them as Prometheus text under the
//! names listed in docs/api.md; [`Counter::name`] and [`Timer::name`] are those names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Histogram bucket upper bounds in seconds (docs/api.md; `+Inf` is implicit).
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Whether a series only grows or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic `_total`.
    Counter,
    /// Current value.
    Gauge,
}

macro_rules! counters {
    ($($v:ident => $name:literal, $kind:ident, $help:literal;)*) => {
        /// A counter or gauge the engine feeds itself.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter { $(#[doc = $help] $v,)* }
        impl Counter {
            /// Every engine-fed series.
            pub const ALL: &'static [Counter] = &[$(Counter::$v,)*];
            /// The Prometheus name.
            pub fn name(self) -> &'static str { match self { $(Counter::$v => $name,)* } }
            /// Help text.
            pub fn help(self) -> &'static str { match self { $(Counter::$v => $help,)* } }
            /// Counter or gauge.
            pub fn kind(self) -> Kind { match self { $(Counter::$v => Kind::$kind,)* } }
        }
    };
}

counters! {
    PublishMessages => "rustqueue_publish_messages_total", Counter, "Messages accepted by PUB, MPUB, DPUB and HTTP publishes";
    PublishBytes => "rustqueue_publish_bytes_total", Counter, "Body bytes accepted by publishes";
    ThrottledRequests => "rustqueue_publish_throttled_requests_total", Counter, "Publishes refused for disk pressure or a full publish budget";
    ThrottledBytes => "rustqueue_publish_throttled_bytes_total", Counter, "Body bytes of throttled publishes";
    Delivered => "rustqueue_delivered_messages_total", Counter, "Messages handed to consumers";
    FetchRequests => "rustqueue_consumer_fetch_requests_total", Counter, "Takes from a channel by a consumer with RDY capacity";
    FetchEmpty => "rustqueue_consumer_fetch_empty_total", Counter, "Takes that found nothing deliverable";
    FetchBatches => "rustqueue_consumer_fetch_batches_total", Counter, "Takes that returned at least one message";
    FetchMessages => "rustqueue_consumer_fetch_messages_total", Counter, "Messages returned by takes";
    FetchBytes => "rustqueue_consumer_fetch_bytes_total", Counter, "Body bytes read for delivery";
    Finished => "rustqueue_finished_messages_total", Counter, "FINs applied";
    Requeued => "rustqueue_requeued_messages_total", Counter, "REQs applied";
    TimedOut => "rustqueue_timed_out_messages_total", Counter, "Deliveries whose in-flight timeout passed before a FIN, REQ or TOUCH (deliverable again)";
    DeadLetters => "rustqueue_dead_letter_messages_total", Counter, "Messages moved to a dead-letter topic";
    StorageErrors => "rustqueue_storage_errors_total", Counter, "Storage write, fsync, read or scrub failures";
    QuarantinedMessages => "rustqueue_storage_quarantined_messages_total", Counter, "Messages found damaged at rest (read, startup scan or scrub) and quarantined: never delivered, each counted once";
    Evictions => "rustqueue_protective_evictions_total", Counter, "Segments deleted by protective eviction";
    EvictedMessages => "rustqueue_protective_evicted_messages_total", Counter, "Messages deleted by protective eviction";
    GroupCommits => "rustqueue_publish_group_commits_total", Counter, "Publish groups answered together (one fdatasync in durable mode, one append otherwise)";
    GroupRequests => "rustqueue_publish_group_requests_total", Counter, "Publish requests committed in groups";
    GroupMaxRequests => "rustqueue_publish_group_max_requests", Gauge, "Largest publish group so far";
    SyncHolds => "rustqueue_publish_sync_holds_total", Counter, "Durable fdatasyncs held back (at most 400 µs) for the publishers the previous one answered, so that they share it (docs/architecture.md, step 4)";
    PublishWorkers => "rustqueue_publish_workers", Gauge, "Running publish group-commit workers (one per topic)";
    PublishWorkersRetired => "rustqueue_publish_workers_retired_total", Counter, "Publish workers that ended";
    InlineAppends => "rustqueue_publish_inline_appends_total", Counter, "Publishes appended on the publisher's own task, without the commit pipeline (write_ack and nsq_relaxed, nothing queued, no segment roll)";
    ChannelGroupCommits => "rustqueue_channel_group_commits_total", Counter, "Channel WAL group commits";
    ChannelGroupRequests => "rustqueue_channel_group_requests_total", Counter, "FIN/REQ/control requests committed in channel groups";
    ChannelGroupMaxRequests => "rustqueue_channel_group_max_requests", Gauge, "Largest channel group so far";
    ChannelWorkers => "rustqueue_channel_commit_workers", Gauge, "Running channel WAL workers (one per durable channel)";
    ChannelWorkersRetired => "rustqueue_channel_commit_workers_retired_total", Counter, "Channel WAL workers that ended";
    BudgetWaiters => "rustqueue_delivery_budget_waiters", Gauge, "Deliveries waiting for the node delivery budget";
    BudgetWaits => "rustqueue_delivery_budget_waits_total", Counter, "Deliveries that had to wait for the delivery budget";
    TieringBacklogSegments => "rustqueue_tiering_upload_backlog_segments", Gauge, "Sealed segments not yet recorded as uploaded to the bucket (0 without [tiering])";
    TieringBacklogBytes => "rustqueue_tiering_upload_backlog_bytes", Gauge, "Segment bytes (.rqlog) of the sealed segments not yet uploaded (0 without [tiering])";
    TieringUploads => "rustqueue_tiering_uploads_total", Counter, "Sealed segments uploaded (segment and index) and recorded";
    TieringUploadedBytes => "rustqueue_tiering_uploaded_bytes_total", Counter, "Bytes of the segments and indexes uploaded and recorded";
    TieringUploadFailures => "rustqueue_tiering_upload_failures_total", Counter, "Segment uploads that failed after the bucket's own retries (each is tried again later)";
    TieringRequestFailures => "rustqueue_tiering_bucket_request_failures_total", Counter, "Bucket requests that failed and were retried (a slow or unreachable bucket shows here first)";
    TieringEvictedSegments => "rustqueue_tiering_evicted_segments_total", Counter, "Uploaded segments whose local .rqlog local retention removed (read from the bucket since)";
    TieringEvictedBytes => "rustqueue_tiering_evicted_bytes_total", Counter, "Bytes of the local .rqlog files local retention removed";
    TieringReadThroughBytes => "rustqueue_tiering_read_through_bytes_total", Counter, "Bytes read from the bucket for consumers reading remote-only segments (read-ahead included)";
    TieringRemoteReadFailures => "rustqueue_tiering_remote_read_failures_total", Counter, "Reads from the bucket for consumers that failed after the bucket's own retries (the consumer tries again)";
    TieringRemoteDeletes => "rustqueue_tiering_remote_deleted_segments_total", Counter, "Segments GC deleted whose objects were then deleted from the bucket and dropped from the tiered record";
    TieringRemoteDeleteFailures => "rustqueue_tiering_remote_delete_failures_total", Counter, "Deletions of a GC'd segment's or a deleted topic's objects that failed after the bucket's own retries (tried again next scan)";
    TieringLastCheckpointUpload => "rustqueue_tiering_last_checkpoint_upload_timestamp_seconds", Gauge, "Unix time the topic checkpoints and the catalog in the bucket were last all up to date (set at start; 0 without [tiering])";
    TieringDeletedTopics => "rustqueue_tiering_remote_deleted_topics_total", Counter, "Deleted topics' lives whose every object was then deleted from the bucket";
}

macro_rules! timers {
    ($($v:ident => $name:literal, $help:literal;)*) => {
        /// A duration histogram the engine feeds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Timer { $(#[doc = $help] $v,)* }
        impl Timer {
            /// Every engine-fed histogram.
            pub const ALL: &'static [Timer] = &[$(Timer::$v,)*];
            /// The Prometheus name.
            pub fn name(self) -> &'static str { match self { $(Timer::$v => $name,)* } }
            /// Help text.
            pub fn help(self) -> &'static str { match self { $(Timer::$v => $help,)* } }
        }
    };
}

timers! {
    PublishFsync => "rustqueue_storage_fsync_duration_seconds", "Publish group fdatasync";
    GroupCommitWait => "rustqueue_group_commit_wait_duration_seconds", "Publish queued until its append starts";
    PublishLockWait => "rustqueue_publish_topic_lock_wait_duration_seconds", "Publish waiting for the topic log lock";
    PublishLockHold => "rustqueue_publish_topic_lock_hold_duration_seconds", "Publish group holding the topic log lock";
    PublishAck => "rustqueue_publish_ack_duration_seconds", "Publish accepted until acknowledged";
    DeliveryLockWait => "rustqueue_delivery_topic_lock_wait_duration_seconds", "Delivery waiting for the topic log lock";
    DeliveryLockHold => "rustqueue_delivery_topic_lock_hold_duration_seconds", "Delivery holding the topic log lock";
    ChannelFsync => "rustqueue_channel_fsync_duration_seconds", "Channel WAL fdatasync";
    ChannelGroupWait => "rustqueue_channel_group_commit_wait_duration_seconds", "FIN/REQ queued until its channel group commit starts";
    ChannelAck => "rustqueue_channel_ack_duration_seconds", "FIN/REQ applied until durable";
    PayloadRead => "rustqueue_payload_read_duration_seconds", "Message body read for delivery";
    Scrub => "rustqueue_storage_scrub_duration_seconds", "One scrub pass over every sealed segment";
    Gc => "rustqueue_storage_gc_duration_seconds", "One retention GC pass over every topic";
    TieringUpload => "rustqueue_tiering_upload_duration_seconds", "One sealed segment uploaded (segment and index) and recorded";
}

/// A lock-free histogram over [`BUCKETS`].
#[derive(Default)]
struct Histogram {
    /// Per-bucket (non-cumulative) counts; the last slot is `+Inf`.
    buckets: [AtomicU64; 17],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts for each bound of [`BUCKETS`].
    pub cumulative: Vec<u64>,
    /// Sum of observations in seconds.
    pub sum_seconds: f64,
    /// Observations.
    pub count: u64,
}

/// Every engine counter, gauge and histogram.
pub struct EngineMetrics {
    counters: Vec<AtomicU64>,
    timers: Vec<Histogram>,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        EngineMetrics {
            counters: Counter::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            timers: Timer::ALL.iter().map(|_| Histogram::default()).collect(),
        }
    }
}

impl EngineMetrics {
    fn slot(&self, c: Counter) -> &AtomicU64 {
        &self.counters[c as usize]
    }

    /// Adds `n`.
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.slot(c).fetch_add(n, Ordering::Relaxed);
    }

    /// Subtracts `n` (gauges).
    pub(crate) fn sub(&self, c: Counter, n: u64) {
        self.slot(c).fetch_sub(n, Ordering::Relaxed);
    }

    /// Sets a gauge to `v`.
    pub(crate) fn set(&self, c: Counter, v: u64) {
        self.slot(c).store(v, Ordering::Relaxed);
    }

    /// Raises a high-water gauge to `v`.
    pub(crate) fn raise(&self, c: Counter, v: u64) {
        self.slot(c).fetch_max(v, Ordering::Relaxed);
    }

    /// Current value. Every message a take returns is delivered, so fetch messages are read
    /// from the delivered counter rather than kept as one more atomic on the delivery path.
    pub fn get(&self, c: Counter) -> u64 {
        let c = match c {
            Counter::FetchMessages => Counter::Delivered,
            c => c,
        };
        self.slot(c).load(Ordering::Relaxed)
    }

    /// Records one duration.
    pub(crate) fn observe(&self, t: Timer, d: Duration) {
        let h = &self.timers[t as usize];
        let secs = d.as_secs_f64();
        let i = BUCKETS.partition_point(|b| *b < secs);
        h.buckets[i].fetch_add(1, Ordering::Relaxed);
        h.sum_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        h.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time since `start`.
    pub(crate) fn since(&self, t: Timer, start: Instant) {
        self.observe(t, start.elapsed());
    }

    /// Reads one histogram.
    pub fn histogram(&self, t: Timer) -> HistogramSnapshot {
        let h = &self.timers[t as usize];
        let mut acc = 0;
        let cumulative = BUCKETS
            .iter()
            .enumerate()
            .map(|(i, _)| {
                acc += h.buckets[i].load(Ordering::Relaxed);
                acc
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            sum_seconds: h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            count: h.count.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_at_or_above_them() {
        let m = EngineMetrics::default();
        m.observe(Timer::Scrub, Duration::from_micros(100));
        m.observe(Timer::Scrub, Duration::from_millis(3));
        m.observe(Timer::Scrub, Duration::from_secs(60));
        let h = m.histogram(Timer::Scrub);
        assert_eq!(h.count, 3);
        assert_eq!(h.cumulative[0], 1, "0.0001 is inclusive");
        assert_eq!(h.cumulative[4], 1, "le=0.0025");
        assert_eq!(h.cumulative[5], 2, "le=0.005");
        assert_eq!(h.cumulative[15], 2, "60 s is only in +Inf");
        assert!((h.sum_seconds - 60.0031).abs() < 1e-6);
    }

    #[test]
    fn names_are_unique_and_follow_the_spec_prefix() {
        let mut names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.extend(Timer::ALL.iter().map(|t| t.name()));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(names.iter().all(|n| n.starts_with("rustqueue_")));
        for c in Counter::ALL {
            assert_eq!(
                c.name().ends_with("_total"),
                c.kind() == Kind::Counter,
                "{c:?}"
            );
        }
    }
}
