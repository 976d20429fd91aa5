//! The oldest data of a log: the sync lag of its oldest unsynced message (metrics) and, for
//! protective eviction (docs/api.md, "Disk pressure"), which sealed segment is oldest and deleting
//! exactly that one. The caller (the engine) runs the durable sequence around it:
//! seal, manifest, audit record, channel `Evict` records, and only then [`TopicLog::evict_oldest`].

use std::path::PathBuf;

use super::TopicLog;
use crate::StorageError;

/// The oldest sealed segment of a topic, described for the eviction audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldestSegment {
    /// Base log index (the segment's file name).
    pub base: u64,
    /// Segment file path.
    pub path: PathBuf,
    /// First position stored in it (0 when it holds no message).
    pub first_position: u64,
    /// Last position stored in it (0 when it holds no message).
    pub through_position: u64,
    /// Messages stored in it.
    pub messages: u64,
}

impl OldestSegment {
    /// The segment's file name (`segment-<20 digits>.rqlog`).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl TopicLog {
    /// Publish time (ns) of the oldest stored message.
    pub fn oldest_timestamp(&self) -> Option<i64> {
        self.first_sealed()
            .map(|s| s.first_timestamp_ns)
            .or_else(|| self.active.front().map(|e| e.timestamp_ns))
    }

    /// Publish time (ns) of the oldest appended-but-unsynced message.
    pub fn oldest_unsynced_timestamp(&self) -> Option<i64> {
        if self.unsynced().0 == 0 {
            return None;
        }
        self.entry(self.durable_position + 1)
            .map(|e| e.timestamp_ns)
    }

    /// The oldest sealed segment, if any (the active segment is never offered).
    pub fn oldest_sealed(&self) -> Option<OldestSegment> {
        if self.segments.len() < 2 {
            return None;
        }
        let seg = self.segments.first()?;
        // Not while its index is being written: that write would outlive the deletion.
        if !seg.index_on_disk() {
            return None;
        }
        let summary = seg.summary.as_ref()?;
        let held = summary.count > 0;
        Some(OldestSegment {
            base: seg.base,
            path: seg.path.clone(),
            first_position: if held { summary.first_position } else { 0 },
            through_position: seg.last_position.unwrap_or(0),
            messages: u64::from(summary.count),
        })
    }

    /// Deletes the oldest sealed segment if its base is `base` (files, then directory fsync)
    /// and forgets its entries; returns how many messages went with it.
    pub fn evict_oldest(&mut self, base: u64) -> Result<u64, StorageError> {
        self.fault.check()?;
        if self.segments.len() < 2
            || self
                .segments
                .first()
                .is_none_or(|s| s.base != base || !s.index_on_disk())
        {
            return Ok(0);
        }
        let seg = self.segments.remove(0);
        self.cache.forget(self.log_id, seg.base, seg.base);
        let r = self.delete_segment(&seg);
        self.fault.guard(r)?;
        Ok(seg.summary.map_or(0, |s| u64::from(s.count)))
    }
}
