//! `GET /v1/stats` (unauthenticated) and `POST /v1/storage/scrub` (admin): a broker's topics and
//! channels with their counters, in the shape the console and `rustqueuectl` read. The full
//! observation (`/v1/observe`) carries the same topic type.

use serde::{Deserialize, Serialize};

/// `GET /v1/stats` (filters `topic` and `channel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Always true: a broker reports every topic it holds (a filter narrows, never truncates).
    pub complete: bool,
    /// The broker's node id.
    pub node_id: u32,
    /// Wall clock of the collection, ms since the Unix epoch.
    pub collected_at_ms: u64,
    /// Topics in name order.
    pub topics: Vec<StatsTopic>,
}

/// One topic of a broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsTopic {
    /// Topic name.
    pub name: String,
    /// Paused: publishes are kept, deliveries stop.
    pub paused: bool,
    /// Messages ever published to the topic on this broker (monotonic).
    pub published_count: u64,
    /// Messages still held for some channel.
    pub message_count: u64,
    /// Segment files of the topic.
    #[serde(default)]
    pub segment_count: u64,
    /// Bytes in those segment files.
    #[serde(default)]
    pub segment_bytes: u64,
    /// Highest position on stable storage.
    pub last_durable_position: u64,
    /// Appended but not yet fsynced messages (relaxed ack modes; 0 when durable).
    pub unsynced_messages: u64,
    /// Appended but not yet fsynced bytes.
    pub unsynced_bytes: u64,
    /// Age of the oldest unsynced append, ms (0 when nothing waits for a sync).
    #[serde(default)]
    pub sync_lag_ms: u64,
    /// Channels in name order.
    pub channels: Vec<StatsChannel>,
}

/// One channel of a topic on a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsChannel {
    /// Channel name.
    pub name: String,
    /// Ready backlog: held minus in flight minus deferred.
    pub depth: u64,
    /// Messages that ever reached the channel (monotonic).
    pub message_count: u64,
    /// Delivered and not yet finished or requeued.
    pub in_flight_count: u64,
    /// Deferred by DPUB or a REQ with a delay.
    pub deferred_count: u64,
    /// REQs (monotonic).
    pub requeue_count: u64,
    /// In-flight timeouts (monotonic).
    pub timeout_count: u64,
    /// Paused: nothing is delivered.
    pub paused: bool,
    /// Ends in `#ephemeral`: kept in memory only, gone with its last consumer.
    #[serde(default)]
    pub ephemeral: bool,
    /// Topic position below which every message is finished for this channel.
    #[serde(default)]
    pub ack_cursor: u64,
    /// Finished messages above the cursor (acknowledged out of order).
    #[serde(default)]
    pub ack_gap: u64,
}

/// `POST /v1/storage/scrub` (admin token): every sealed segment re-read and checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// `"ok"`.
    pub status: String,
    /// Records whose checksums were verified.
    pub records_checked: u64,
}
