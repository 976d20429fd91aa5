//! Engine configuration ([`EngineConfig`]) with the broker specification's defaults.

use std::path::PathBuf;
use std::time::Duration;

/// When a PUB/MPUB/DPUB is acknowledged (docs/architecture.md, "Acknowledgement modes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// Reply after the segment is fdatasynced; consumers see only synced messages. Nothing
    /// acknowledged is lost in a crash.
    Durable,
    /// Reply after the append; consumers see only synced messages; a crash can lose the
    /// acknowledged-but-unsynced tail (synced in the background).
    WriteAck,
    /// Reply after the append and deliver at once, like nsqd; a crash can lose an acknowledged
    /// and even delivered tail.
    NsqRelaxed,
}

/// Engine settings; `Default` gives the specification defaults with data path `data`.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Data directory (one per broker process).
    pub data_path: PathBuf,
    /// Node id (1..=65,535); part of every message id.
    pub node_id: u16,
    /// Storage feature level (1 or 2; 2 allows 100 MiB messages).
    pub feature_level: u8,
    /// Publish acknowledgement mode.
    pub ack_mode: AckMode,
    /// Segment rotation size.
    pub max_segment_bytes: u64,
    /// Largest message body.
    pub max_message_bytes: u64,
    /// Default in-flight timeout per delivery.
    pub message_timeout: Duration,
    /// Largest per-consumer message timeout.
    pub max_message_timeout: Duration,
    /// Largest DPUB defer / REQ delay.
    pub max_defer: Duration,
    /// A message is dead-lettered instead of delivered for this attempt number.
    pub max_delivery_attempts: u16,
    /// Suffix of dead-letter topics `<topic>.<channel><suffix>`.
    pub dead_letter_suffix: String,
    /// New durable channels start this far back.
    pub bootstrap_retention: Duration,
    /// Relaxed modes sync after this many unsynced messages...
    pub relaxed_sync_messages: u64,
    /// ...or this many unsynced bytes...
    pub relaxed_sync_bytes: u64,
    /// ...or this age of the oldest unsynced message.
    pub relaxed_sync_interval: Duration,
    /// Durable topic limit.
    pub max_topics: usize,
    /// Channels per topic.
    pub max_channels_per_topic: usize,
    /// Node-wide publish working set (bodies in flight to storage).
    pub node_publish_inflight_bytes: u64,
    /// Node-wide delivery working set (bodies being read for delivery).
    pub node_delivery_inflight_bytes: u64,
    /// Bound of the process-wide cache of sealed segments' index pages (message metadata
    /// read back on demand; the active segments' metadata is not counted).
    pub message_index_cache_bytes: u64,
    /// How often retention GC runs.
    pub gc_interval: Duration,
    /// How often sealed segments are scrubbed (CRC-verified); the first run is one interval
    /// after open.
    pub scrub_interval: Duration,
    /// Scrub read rate.
    pub scrub_bytes_per_second: u64,
    /// Disk pressure starts at this used percentage...
    pub disk_high_watermark_percent: u8,
    /// ...and clears below this one.
    pub disk_low_watermark_percent: u8,
    /// Disk pressure also while fewer bytes than this are free.
    pub min_free_bytes: u64,
    /// How often the disk is inspected.
    pub disk_check_interval: Duration,
    /// Delete the oldest segments after `disk_pressure_grace` of continuous pressure.
    pub protective_eviction_enabled: bool,
    /// Continuous pressure before protective eviction starts.
    pub disk_pressure_grace: Duration,
    /// Publish pipeline: most requests appended in one hold of the log lock.
    pub group_max_requests: usize,
    /// Publish pipeline: most encoded bytes appended in one hold of the log lock.
    pub group_max_bytes: u64,
    /// Uploads of sealed segments to a bucket (`None`, the default: nothing is uploaded).
    pub tiering: Option<crate::tiering::TieringOptions>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            data_path: PathBuf::from("data"),
            node_id: 1,
            feature_level: 1,
            ack_mode: AckMode::Durable,
            max_segment_bytes: 104_857_600,
            max_message_bytes: 20_971_520,
            message_timeout: Duration::from_secs(60),
            max_message_timeout: Duration::from_secs(900),
            max_defer: Duration::from_secs(3600),
            max_delivery_attempts: 16,
            dead_letter_suffix: ".DLQ".into(),
            bootstrap_retention: Duration::from_secs(90),
            relaxed_sync_messages: 2_500,
            relaxed_sync_bytes: 8 << 20,
            relaxed_sync_interval: Duration::from_millis(10),
            max_topics: 10_000,
            max_channels_per_topic: 1_024,
            node_publish_inflight_bytes: 512 << 20,
            node_delivery_inflight_bytes: 512 << 20,
            message_index_cache_bytes: 64 << 20,
            gc_interval: Duration::from_secs(5),
            scrub_interval: Duration::from_secs(3_600),
            scrub_bytes_per_second: 64 << 20,
            disk_high_watermark_percent: 85,
            disk_low_watermark_percent: 75,
            min_free_bytes: 10 << 30,
            disk_check_interval: Duration::from_secs(1),
            protective_eviction_enabled: false,
            disk_pressure_grace: Duration::from_secs(60),
            group_max_requests: 64,
            group_max_bytes: 8 << 20,
            tiering: None,
        }
    }
}

/// Largest message body readable at a feature level.
pub fn feature_level_message_cap(level: u8) -> u64 {
    if level >= 2 { 100 << 20 } else { 20 << 20 }
}
