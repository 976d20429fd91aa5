//! `RustQueueTopic` (`rqt`) and `RustQueueChannel` (`rqc`): the console's durable record of the
//! topics and channels it manages (docs/console.md).
//!
//! They have no status subresource: the console is their only writer and keeps all state in
//! `spec`, including the progress of a multi-owner operation (`operation.completedOwners`), so a
//! console that restarts mid-operation resumes at the next owner. Each is labelled
//! `rustqueue.io/queue=<queue>` and owned by its RustQueue. Object names are derived from the
//! names they stand for ([`topic_object_name`], [`channel_object_name`]).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a managed topic or channel stands.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CatalogPhase {
    /// Created by the console; not yet on its owner.
    Preparing,
    /// On every owner, as the spec says.
    Active,
    /// An operation is being applied owner by owner.
    Applying,
    /// An operation failed in a way a retry must confirm (`lastError` says why).
    Failed,
    /// Deleted; fenced on every broker until `tombstoneUntilMs`.
    Tombstoned,
}

/// A management action recorded in an operation.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CatalogAction {
    /// Create on the chosen owner.
    Create,
    /// Pause deliveries on every owner.
    Pause,
    /// Resume deliveries on every owner.
    Unpause,
    /// Drop the stored messages on the (single) owner.
    Empty,
    /// Delete on the (single) owner and fence everywhere.
    Delete,
}

/// Durable progress of an operation across owners.
#[derive(Serialize, Deserialize, KubeSchema, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogOperation {
    /// The operation id sent to every broker (they deduplicate replays by it).
    #[schemars(length(min = 16, max = 128))]
    pub id: String,
    /// What is being done.
    pub action: CatalogAction,
    /// Broker Pods that have applied it.
    #[serde(default)]
    pub completed_owners: Vec<String>,
    /// 1 for the first try; a retry adds one.
    #[serde(default)]
    pub attempt: u32,
    /// When the operation was accepted, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// When it last progressed.
    pub updated_at_ms: i64,
}

/// A topic the console manages.
// The printer columns repeat `type_ = "string"`; clippy reads that as a duplicated attribute (a
// false positive for `#[kube(printcolumn(...))]`, as on RustQueue).
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "rustqueue.io",
    version = "v1alpha1",
    kind = "RustQueueTopic",
    plural = "rustqueuetopics",
    shortname = "rqt",
    category = "rustqueue-all",
    namespaced,
    derive = "PartialEq",
    doc = "A topic of a RustQueue, managed through the console",
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queue"),
    printcolumn(name = "Topic", type_ = "string", json_path = ".spec.topic"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".spec.phase"),
    printcolumn(name = "Revision", type_ = "integer", json_path = ".spec.revision"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RustQueueTopicSpec {
    /// The RustQueue this topic belongs to.
    #[schemars(length(min = 1))]
    pub queue: String,
    /// Topic name.
    #[schemars(length(min = 1, max = 64))]
    pub topic: String,
    /// Broker Pods that hold the topic.
    #[serde(default)]
    pub owners: Vec<String>,
    /// Where it stands.
    pub phase: CatalogPhase,
    /// Bumped on every console change.
    #[serde(default)]
    pub revision: u64,
    /// Deliveries paused.
    #[serde(default)]
    pub paused: bool,
    /// Fence expiry after a delete, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_until_ms: Option<i64>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub last_error: Option<String>,
    /// The operation in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<CatalogOperation>,
}

/// A channel the console manages.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "rustqueue.io",
    version = "v1alpha1",
    kind = "RustQueueChannel",
    plural = "rustqueuechannels",
    shortname = "rqc",
    category = "rustqueue-all",
    namespaced,
    derive = "PartialEq",
    doc = "A channel of a RustQueue topic, managed through the console",
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queue"),
    printcolumn(name = "Topic", type_ = "string", json_path = ".spec.topic"),
    printcolumn(name = "Channel", type_ = "string", json_path = ".spec.channel"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".spec.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RustQueueChannelSpec {
    /// The RustQueue this channel belongs to.
    #[schemars(length(min = 1))]
    pub queue: String,
    /// Topic name.
    #[schemars(length(min = 1, max = 64))]
    pub topic: String,
    /// Channel name.
    #[schemars(length(min = 1, max = 64))]
    pub channel: String,
    /// Broker Pods that hold the channel.
    #[serde(default)]
    pub owners: Vec<String>,
    /// Where it stands.
    pub phase: CatalogPhase,
    /// Bumped on every console change.
    #[serde(default)]
    pub revision: u64,
    /// Deliveries paused.
    #[serde(default)]
    pub paused: bool,
    /// `#ephemeral`: observed only, never managed.
    #[serde(default)]
    pub ephemeral: bool,
    /// Fence expiry after a delete, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_until_ms: Option<i64>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub last_error: Option<String>,
    /// The operation in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<CatalogOperation>,
}

/// The label naming the RustQueue a topic or channel object belongs to.
pub const QUEUE_LABEL: &str = "rustqueue.io/queue";

/// `topic-<32 hex>`: the first 16 bytes of SHA-256 over the length-prefixed (u64 big-endian)
/// queue and topic names. Readers compare the spec's names to detect a collision.
pub fn topic_object_name(queue: &str, topic: &str) -> String {
    format!("topic-{}", name_hash(&[queue, topic]))
}

/// `channel-<32 hex>`, over queue, topic and channel (see [`topic_object_name`]).
pub fn channel_object_name(queue: &str, topic: &str, channel: &str) -> String {
    format!("channel-{}", name_hash(&[queue, topic, channel]))
}

fn name_hash(fields: &[&str]) -> String {
    let mut input = Vec::new();
    for f in fields {
        input.extend_from_slice(&(f.len() as u64).to_be_bytes());
        input.extend_from_slice(f.as_bytes());
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&input);
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_stable_hashes_of_the_length_prefixed_names() {
        let t = topic_object_name("q", "orders");
        assert_eq!(t.len(), "topic-".len() + 32);
        assert_eq!(t, topic_object_name("q", "orders"));
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        assert_ne!(topic_object_name("ab", "c"), topic_object_name("a", "bc"));
        let c = channel_object_name("q", "orders", "billing");
        assert!(c.starts_with("channel-") && c.len() == "channel-".len() + 32);
        assert_ne!(c, channel_object_name("q", "orders", "billing2"));
    }

    #[test]
    fn phases_and_actions_use_the_upper_case_wire_names() {
        assert_eq!(
            serde_json::to_string(&CatalogPhase::Tombstoned).unwrap(),
            "\"TOMBSTONED\""
        );
        assert_eq!(
            serde_json::to_string(&CatalogAction::Unpause).unwrap(),
            "\"UNPAUSE\""
        );
    }
}
