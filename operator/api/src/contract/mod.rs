//! The broker control contract, version 1: the JSON bodies of the broker's native `/v1/*`
//! endpoints that the operator, discovery and CLI rely on (spec: broker.md §2.5).
//!
//! Field names are the wire names (snake_case). Documented in `docs/api.md`.

mod capabilities;
mod drain;
mod health;
mod manage;
mod observe;
mod registry;
mod restore;
mod stats;

pub use capabilities::{
    BinaryCapabilities, Capabilities, LEGACY_MAXIMUM_BATCH_BYTES, LEGACY_MAXIMUM_MESSAGE_BYTES,
    LOCAL_RETENTION_FEATURE_LEVEL, StorageCapabilities,
};
pub use drain::{DrainRequest, DrainStatus};
pub use health::{Health, NotReadyReason};
pub use manage::{
    ChannelFence, FenceSync, ManageAction, ManageKind, ManageRequest, ManageResponse, codes,
    valid_operation_id,
};
pub use observe::{
    DeliveryBudget, GroupCommit, HistogramSnapshot, Histograms, OBSERVE_SCHEMA_VERSION,
    Observation, ObserveHead, ObservedDisk, ObservedLimits, ObservedManagement, ObservedNode,
    ObservedStorage, QueueAggregates, QueueObservation, Readiness, RuntimeCounters,
};
pub use registry::{Registry, RegistryHead, RegistryTopic};
pub use restore::{RESTORE_CONTAINER, RestoreOutcome, RestoreSummary};
pub use stats::{ScrubReport, Stats, StatsChannel, StatsTopic};

use serde::{Deserialize, Serialize};

/// The one on-disk data format this generation of brokers reads and writes.
pub const DATA_FORMAT: u32 = 7;
/// The `mode` every broker reports: each broker owns its own PVC, nothing is replicated.
pub const MODE_SHARE_NOTHING: &str = "share-nothing";

/// HTTP paths of the contract endpoints.
pub mod paths {
    /// Readiness (200 ready, 503 with a [`super::NotReadyReason`]). Unauthenticated.
    pub const HEALTH: &str = "/v1/health";
    /// Liveness: plain `OK`. Unauthenticated.
    pub const PING: &str = "/ping";
    /// Binary and storage feature levels (registry or console token).
    pub const CAPABILITIES: &str = "/v1/capabilities";
    /// `GET` drain status (registry/console token), `POST` drain request (admin token).
    pub const DRAIN: &str = "/v1/drain";
    /// Full registry (registry or console token).
    pub const REGISTRY: &str = "/v1/registry";
    /// Small poll target of the registry (registry or console token).
    pub const REGISTRY_HEAD: &str = "/v1/registry/head";
    /// Prometheus text. Unauthenticated.
    pub const METRICS: &str = "/metrics";
    /// Topics and channels with their counters. Unauthenticated.
    pub const STATS: &str = "/v1/stats";
    /// Re-read and check every sealed segment (admin token).
    pub const STORAGE_SCRUB: &str = "/v1/storage/scrub";
    /// The small console poll target (console token).
    pub const OBSERVE_HEAD: &str = "/v1/observe/head";
    /// The full observation (console token).
    pub const OBSERVE: &str = "/v1/observe";
    /// Topic management, followed by `/<action>` (console token, management enabled).
    pub const MANAGE_TOPICS: &str = "/v1/manage/topics";
    /// Channel management, followed by `/<action>` (console token, management enabled).
    pub const MANAGE_CHANNELS: &str = "/v1/manage/channels";
    /// Replace the broker's tombstone fences (console token, management enabled).
    pub const FENCES_SYNC: &str = "/v1/manage/fences/sync";
}

/// Token presentation headers (either works; `Authorization` takes `Bearer <token>`).
pub mod headers {
    /// The native token header.
    pub const TOKEN: &str = "X-RustQueue-Token";
}

/// The scopes a broker token can grant (spec: broker.md §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Topic/channel administration, `POST /v1/drain`, `POST /v1/storage/scrub`.
    Admin,
    /// `/pub`, `/mpub`.
    Publish,
    /// Registry, capabilities and drain-status reads.
    Registry,
    /// Console observation (and management when enabled).
    Console,
}

impl TokenScope {
    /// The key of this scope's token in the auth Secret, and its file name under the mount.
    pub fn secret_key(self) -> &'static str {
        match self {
            Self::Admin => "admin-token",
            Self::Publish => "publish-token",
            Self::Registry => "registry-token",
            Self::Console => "console-token",
        }
    }
}

/// The error body of every non-2xx contract response: `{"message": "E_CODE", "detail": ".."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code, e.g. `E_UNAUTHORIZED`, `E_DRAINING`.
    pub message: String,
    /// Human-readable explanation.
    #[serde(default)]
    pub detail: String,
}
