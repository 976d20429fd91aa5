//! What `rustqueued storage restore --from-bucket --if-empty --summary-file FILE` writes to
//! `FILE`: a short JSON outcome the operator reads from the restore init container's
//! termination message (docs/tiering.md, "The operator's restore"). Kept far below the
//! kubelet's 4 KiB termination-message limit: counts only, the full report is in the log.

use serde::{Deserialize, Serialize};

/// The name of the broker Pod's init container that restores an empty volume.
pub const RESTORE_CONTAINER: &str = "restore";

/// What the restore did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreOutcome {
    /// The data directory was empty and was rebuilt from the bucket.
    Restored,
    /// The data directory already holds a broker's data: nothing was done.
    HasData,
    /// The data directory was empty and the bucket holds no catalog for this node (a new
    /// broker, or one that never uploaded a checkpoint): nothing was done.
    NothingInBucket,
}

/// The restore's outcome and counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreSummary {
    /// What was done.
    pub outcome: RestoreOutcome,
    /// The node restored.
    pub node_id: u16,
    /// Topics of the catalog.
    #[serde(default)]
    pub topics: u64,
    /// Topics of the catalog not restored at all (no usable checkpoint).
    #[serde(default)]
    pub topics_not_restored: u64,
    /// Sealed segments restored.
    #[serde(default)]
    pub segments_restored: u64,
    /// Messages in them.
    #[serde(default)]
    pub messages_restored: u64,
    /// Positions the topics had as of their newest checkpoint that did not come back.
    #[serde(default)]
    pub lost_messages: u64,
    /// Objects found damaged or missing (never used).
    #[serde(default)]
    pub damaged_objects: u64,
}

impl RestoreSummary {
    /// Nothing done, for `outcome`.
    pub fn nothing(outcome: RestoreOutcome, node_id: u16) -> Self {
        Self {
            outcome,
            node_id,
            topics: 0,
            topics_not_restored: 0,
            segments_restored: 0,
            messages_restored: 0,
            lost_messages: 0,
            damaged_objects: 0,
        }
    }

    /// One line for people: an Event, a status message.
    pub fn describe(&self) -> String {
        match self.outcome {
            RestoreOutcome::HasData => "the volume holds data; nothing restored".into(),
            RestoreOutcome::NothingInBucket => format!(
                "the volume was empty and the bucket holds nothing for node {}; started empty",
                self.node_id
            ),
            RestoreOutcome::Restored => format!(
                "restored {} messages in {} segments of {} topics from the bucket; {} messages lost, {} damaged objects, {} topics not restored",
                self.messages_restored,
                self.segments_restored,
                self.topics,
                self.lost_messages,
                self.damaged_objects,
                self.topics_not_restored
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_round_trips_and_fits_a_termination_message() {
        let s = RestoreSummary {
            outcome: RestoreOutcome::Restored,
            node_id: 65535,
            topics: u64::MAX,
            topics_not_restored: u64::MAX,
            segments_restored: u64::MAX,
            messages_restored: u64::MAX,
            lost_messages: u64::MAX,
            damaged_objects: u64::MAX,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.len() < 1024, "{json}");
        assert_eq!(serde_json::from_str::<RestoreSummary>(&json).unwrap(), s);
        let skipped: RestoreSummary =
            serde_json::from_str(r#"{"outcome":"has_data","node_id":3}"#).unwrap();
        assert_eq!(skipped, RestoreSummary::nothing(RestoreOutcome::HasData, 3));
    }
}
