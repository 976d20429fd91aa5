//! `POST /v1/manage/{topics,channels}/{action}` and `POST /v1/manage/fences/sync` (console
//! token; served only when `security.console_management_enabled`): the guarded management the
//! console drives owner by owner (docs/console.md).
//!
//! Every request carries an `operation_id`; a broker records it in a durable catalog before it
//! acts and answers a replayed id with the recorded result, so the console can resend after any
//! crash. `expected_revision` must equal the broker's registry revision. Deletes leave a
//! tombstone fence until `tombstone_until_ms` that refuses publish, subscribe and create.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A management action, the last path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManageAction {
    /// Create the topic or channel (clears its tombstone).
    Create,
    /// Stop deliveries; publishes are kept.
    Pause,
    /// Resume deliveries.
    Unpause,
    /// Drop every stored message (topic) or the backlog (channel).
    Empty,
    /// Delete and fence until `tombstone_until_ms`.
    Delete,
    /// Fence only (the topic or channel is already gone here).
    Tombstone,
}

impl ManageAction {
    /// Every action, in path order.
    pub const ALL: [ManageAction; 6] = [
        Self::Create,
        Self::Pause,
        Self::Unpause,
        Self::Empty,
        Self::Delete,
        Self::Tombstone,
    ];

    /// The path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Pause => "pause",
            Self::Unpause => "unpause",
            Self::Empty => "empty",
            Self::Delete => "delete",
            Self::Tombstone => "tombstone",
        }
    }

    /// Whether the action needs `tombstone_until_ms` in the future.
    pub fn fences(self) -> bool {
        matches!(self, Self::Delete | Self::Tombstone)
    }
}

impl fmt::Display for ManageAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ManageAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown management action {s:?}; one of create, pause, unpause, empty, delete, tombstone"))
    }
}

/// Whether the request is about a topic or one of its channels (the path's second segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManageKind {
    /// `/v1/manage/topics/...`
    Topic,
    /// `/v1/manage/channels/...`
    Channel,
}

/// The body of a management request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManageRequest {
    /// Idempotency key: 16 to 128 characters of `[A-Za-z0-9_-]` ([`valid_operation_id`]).
    pub operation_id: String,
    /// Topic name.
    pub topic: String,
    /// Channel name (channel requests only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The registry revision the caller observed.
    pub expected_revision: u64,
    /// Fence expiry for delete and tombstone, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_until_ms: Option<u64>,
}

/// The answer to a management request (also to a replay of a completed one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManageResponse {
    /// The registry revision after the operation.
    pub revision: u64,
    /// Whether this operation changed anything (false for a no-op such as pausing a paused
    /// topic).
    pub changed: bool,
}

/// One channel fence in a [`FenceSync`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChannelFence {
    /// Topic name.
    pub topic: String,
    /// Channel name.
    pub channel: String,
    /// Fence expiry, ms since the Unix epoch.
    pub until_ms: u64,
}

/// `POST /v1/manage/fences/sync`: the cluster-wide tombstones, replacing the broker's set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceSync {
    /// Opaque revision of the console's fence set (reported back on the observe head).
    pub revision: String,
    /// Topic fences: name -> expiry (ms since the Unix epoch).
    #[serde(default)]
    pub topics: BTreeMap<String, u64>,
    /// Channel fences.
    #[serde(default)]
    pub channels: Vec<ChannelFence>,
}

/// Whether `id` is a valid `operation_id`: 16 to 128 characters of `[A-Za-z0-9_-]`.
pub fn valid_operation_id(id: &str) -> bool {
    (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Error codes of the management and fence routes (in [`super::ErrorBody::message`]).
pub mod codes {
    /// 400: the action is not one of [`super::ManageAction::ALL`].
    pub const BAD_ACTION: &str = "E_BAD_ACTION";
    /// 400: the body does not parse or an id is malformed.
    pub const BAD_REQUEST: &str = "E_BAD_REQUEST";
    /// 400: delete/tombstone without a future `tombstone_until_ms`.
    pub const BAD_TOMBSTONE: &str = "E_BAD_TOMBSTONE";
    /// 409: `expected_revision` is not the broker's registry revision.
    pub const REVISION_CONFLICT: &str = "E_REVISION_CONFLICT";
    /// 409: the operation id was used for another request.
    pub const OPERATION_CONFLICT: &str = "E_OPERATION_CONFLICT";
    /// 409: the topic is fenced by a tombstone.
    pub const TOPIC_TOMBSTONED: &str = "E_TOPIC_TOMBSTONED";
    /// 409: the channel is fenced by a tombstone.
    pub const CHANNEL_TOMBSTONED: &str = "E_CHANNEL_TOMBSTONED";
    /// 503: fences not synced since start, or another operation on the topic is pending.
    pub const MANAGEMENT_UNAVAILABLE: &str = "E_MANAGEMENT_UNAVAILABLE";
    /// 404/400: no such (or an invalid) topic.
    pub const BAD_TOPIC: &str = "E_BAD_TOPIC";
    /// 404/400: no such (or an invalid) channel.
    pub const BAD_CHANNEL: &str = "E_BAD_CHANNEL";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_16_to_128_safe_characters() {
        assert!(valid_operation_id("op-0123456789abcdef"));
        assert!(valid_operation_id(&"a".repeat(128)));
        assert!(!valid_operation_id("short"));
        assert!(!valid_operation_id(&"a".repeat(129)));
        assert!(!valid_operation_id("op-0123456789abcde/"));
        assert!(!valid_operation_id("op 0123456789abcdef"));
    }

    #[test]
    fn actions_round_trip_through_their_path_segment() {
        for a in ManageAction::ALL {
            assert_eq!(a.as_str().parse::<ManageAction>(), Ok(a));
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        }
        assert!("delete-if-idle".parse::<ManageAction>().is_err());
        assert!(ManageAction::Delete.fences() && ManageAction::Tombstone.fences());
        assert!(!ManageAction::Empty.fences());
    }

    #[test]
    fn a_fence_sync_reads_with_defaults() {
        let f: FenceSync = serde_json::from_str(r#"{"revision":"ab12"}"#).unwrap();
        assert_eq!(f.revision, "ab12");
        assert!(f.topics.is_empty() && f.channels.is_empty());
    }
}
