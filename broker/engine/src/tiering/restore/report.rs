//! What a restore reports: per topic what came back and what was lost, per channel what it
//! had not finished of that, the damaged objects and the incarnations left alone.

use std::path::PathBuf;

use rustqueue_storage::QuarantineRecord;
use serde::Serialize;

use super::PositionRange;

/// An object that was found damaged or missing, and not used.
#[derive(Clone, Debug, Serialize)]
pub struct DamagedObject {
    /// Its key, relative to the bucket prefix.
    pub key: String,
    /// What is wrong with it.
    pub detail: String,
}

/// What one channel lost.
#[derive(Clone, Debug, Serialize)]
pub struct ChannelLoss {
    /// The channel.
    pub channel: String,
    /// Messages of the lost positions it had not finished.
    pub lost_messages: u64,
}

/// What happened to one topic of the catalog.
#[derive(Clone, Debug, Serialize)]
pub struct TopicRestore {
    /// The topic.
    pub topic: String,
    /// The incarnation restored.
    pub incarnation: String,
    /// Whether the topic was written into the data directory.
    pub restored: bool,
    /// When its checkpoint was written, ms since the epoch (`None`: no usable checkpoint).
    pub checkpoint_written_at_ms: Option<u64>,
    /// The last position it had handed out by then.
    pub head: Option<u64>,
    /// Sealed segments restored.
    pub segments_restored: usize,
    /// Messages in them.
    pub messages_restored: u64,
    /// First and last position restored.
    pub restored_positions: Option<PositionRange>,
    /// Segments in the bucket holding only positions collected before the checkpoint (GC or
    /// eviction had removed them locally): not restored, not lost.
    pub collected_segments_skipped: usize,
    /// Positions the topic had that were not restored.
    pub lost: Vec<PositionRange>,
    /// How many positions that is (`None` when unknown: no usable checkpoint).
    pub lost_messages: Option<u64>,
    /// Per channel, the lost messages it had not finished.
    pub channels: Vec<ChannelLoss>,
    /// Objects found damaged or missing (not used).
    pub damaged: Vec<DamagedObject>,
    /// Bases of the uploaded segments not restored because an earlier one failed.
    pub not_restored_after_damage: Vec<u64>,
    /// Uploads continue under this incarnation (every uploaded segment was restored);
    /// otherwise the next start begins a new one and uploads its segments again.
    pub continues_incarnation: bool,
}

impl TopicRestore {
    /// Nothing restored yet.
    pub(super) fn new(topic: &str, incarnation: &str) -> Self {
        TopicRestore {
            topic: topic.to_owned(),
            incarnation: incarnation.to_owned(),
            restored: false,
            checkpoint_written_at_ms: None,
            head: None,
            segments_restored: 0,
            messages_restored: 0,
            restored_positions: None,
            collected_segments_skipped: 0,
            lost: Vec::new(),
            lost_messages: None,
            channels: Vec::new(),
            damaged: Vec::new(),
            not_restored_after_damage: Vec::new(),
            continues_incarnation: false,
        }
    }
}

/// Objects of the node that the catalog does not name.
#[derive(Clone, Debug, Serialize)]
pub struct Ignored {
    /// The topic (its hex key segment when it is not valid UTF-8 hex).
    pub topic: String,
    /// The incarnation.
    pub incarnation: String,
    /// Objects under it.
    pub objects: usize,
}

/// What a restore did.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// The node restored.
    pub node_id: u16,
    /// The data directory written.
    pub data_path: PathBuf,
    /// When the catalog was written, ms since the epoch.
    pub catalog_written_at_ms: u64,
    /// Every topic of the catalog.
    pub topics: Vec<TopicRestore>,
    /// Incarnations in the bucket the catalog does not name (deleted topics, a recreated
    /// topic's previous life, topics created after the catalog): not restored.
    pub ignored: Vec<Ignored>,
    /// Damaged or missing objects, over all topics.
    pub damaged_objects: usize,
    /// Lost positions over all topics whose loss is known.
    pub lost_messages: u64,
    /// Topics of the catalog not restored at all (no usable checkpoint).
    pub topics_not_restored: usize,
    /// What opening and scrubbing the restored directory found (expected empty).
    pub findings: Vec<QuarantineRecord>,
}

impl RestoreReport {
    /// Whether anything was damaged or missing, or a topic could not be restored.
    pub fn damaged(&self) -> bool {
        self.damaged_objects > 0 || self.topics_not_restored > 0 || !self.findings.is_empty()
    }
}
