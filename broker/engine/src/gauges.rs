//! Read side of the engine's metrics: counters (storage errors come from the store's fault
//! switch) and the queue aggregates that need a walk over topics and channels.

use crate::engine::Engine;
use crate::lock::lock;
use crate::metrics::{Counter, EngineMetrics};
use crate::tiering::TieringStatus;

/// Queue aggregates (and the per-topic parts of the detailed series) of docs/api.md, computed
/// on demand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueGauges {
    /// Age of the oldest appended-but-unsynced message over all topics (0 when all synced).
    pub publish_sync_lag_seconds: f64,
    /// Finished positions held above the ack floors (the sparse-ACK window) over all channels.
    pub channel_ack_gap: u64,
    /// The same per topic, in name order.
    pub topics: Vec<TopicGauges>,
}

/// Per-topic sync lag and per-channel ack gap.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopicGauges {
    /// Topic name.
    pub name: String,
    /// Age of its oldest unsynced message in seconds.
    pub sync_lag_seconds: f64,
    /// `(channel, ack gap)` in name order.
    pub channel_ack_gaps: Vec<(String, u64)>,
}

impl Engine {
    /// The engine's counters and histograms (read by `/metrics`).
    pub fn metrics(&self) -> &EngineMetrics {
        &self.inner.metrics
    }

    /// Current value of an engine counter or gauge; storage errors come from the store's
    /// fail-closed switch.
    pub fn counter(&self, c: Counter) -> u64 {
        match c {
            Counter::StorageErrors => self.inner.store.fault().errors(),
            Counter::QuarantinedMessages => self.inner.store.quarantine().messages_total(),
            Counter::TieringRequestFailures => self
                .inner
                .tiering
                .as_ref()
                .map_or(0, |t| t.bucket.failed_attempts()),
            c => self.inner.metrics.get(c),
        }
    }

    /// What the uploader of sealed segments has done so far; `None` without tiering.
    pub fn tiering_status(&self) -> Option<TieringStatus> {
        let t = self.inner.tiering.as_ref()?;
        let m = &self.inner.metrics;
        Some(TieringStatus {
            backlog_segments: m.get(Counter::TieringBacklogSegments),
            backlog_bytes: m.get(Counter::TieringBacklogBytes),
            uploaded_segments: m.get(Counter::TieringUploads),
            failed_uploads: m.get(Counter::TieringUploadFailures),
            failed_requests: t.bucket.failed_attempts(),
            scans: t.scans.load(std::sync::atomic::Ordering::Relaxed),
            checkpoint_uploads: t
                .checkpoint_uploads
                .load(std::sync::atomic::Ordering::Relaxed),
            checkpoint_failures: t
                .checkpoint_failures
                .load(std::sync::atomic::Ordering::Relaxed),
            evicted_segments: m.get(Counter::TieringEvictedSegments),
            evicted_bytes: m.get(Counter::TieringEvictedBytes),
            read_through_bytes: m.get(Counter::TieringReadThroughBytes),
            remote_read_failures: m.get(Counter::TieringRemoteReadFailures),
        })
    }

    /// Queue aggregates that need a walk over topics and channels (computed per scrape).
    pub fn queue_gauges(&self) -> QueueGauges {
        let now_ns = crate::types::now_ns();
        let mut g = QueueGauges::default();
        for t in self.inner.registry.topic_list() {
            let mut tg = TopicGauges {
                name: t.name.clone(),
                ..TopicGauges::default()
            };
            if let Some(ts) = lock(&t.log).oldest_unsynced_timestamp() {
                tg.sync_lag_seconds = (now_ns - ts).max(0) as f64 / 1e9;
                g.publish_sync_lag_seconds = g.publish_sync_lag_seconds.max(tg.sync_lag_seconds);
            }
            for c in t.channel_list() {
                let gap = lock(&c.st).durable.acked.len() as u64;
                g.channel_ack_gap += gap;
                tg.channel_ack_gaps.push((c.name.clone(), gap));
            }
            g.topics.push(tg);
        }
        g
    }
}
