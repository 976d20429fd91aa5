//! `RustQueueStatus`: what the operator observed and decided, in the shape `kubectl wait` and
//! Argo CD read (`observedGeneration`, `phase`, standard `conditions`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of a RustQueue.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RustQueueStatus {
    /// `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Summary phase (`Ready`, `Scaling`, `InsufficientNodes`, `Degraded`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Human-readable summary of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Target broker count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_brokers: Option<i32>,
    /// Broker Pods Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_brokers: Option<i32>,
    /// Highest storage feature level any broker has activated (a floor; never lowered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_storage_feature_level: Option<u32>,
    /// Standard conditions, sorted by type; a map keyed by `type` for server-side apply and
    /// `kubectl patch`, as Kubernetes' own conditions.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The operation in progress or last finished (cleared when the spec withdraws it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_operation: Option<OperationStatus>,
    /// Earlier operations, newest last.
    #[serde(default)]
    #[schemars(length(max = 20))]
    pub operation_history: Vec<OperationStatus>,
    /// Broker PVCs kept after a scale-down.
    #[serde(default)]
    pub orphaned_pvcs: Vec<String>,
    /// Copy of `spec.storageSize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_storage_size: Option<String>,
    /// Producer-restart nonce captured when Kodo Gateways were advertised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kodo_producer_restart_baseline_nonce: Option<String>,
    /// The brokers have run with `spec.tiering` local retention: the bucket may hold the only
    /// copy of evicted segments, so tiering can no longer be removed nor its bucket or prefix
    /// changed (the CRD refuses it). Never cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiering_local_retention_used: Option<bool>,
    /// The latest restore from the bucket of each broker whose volume was replaced by an
    /// empty one (docs/tiering.md), by broker.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["broker"]))]
    #[schemars(length(max = 500))]
    pub restores: Vec<BrokerRestore>,
}

/// One broker's restore from the bucket, as its restore init container reported it.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRestore {
    /// The broker Pod, `<name>-<ordinal>`.
    pub broker: String,
    /// `RestoringFromBucket` while it runs, then `Restored` or `Failed`.
    pub phase: String,
    /// The Pod the restore ran in (its uid): a new Pod is a new restore.
    #[serde(default)]
    pub pod_uid: String,
    /// RFC 3339 time the restore started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 time it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Messages restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_restored: Option<u64>,
    /// Messages lost: positions of the newest checkpoint that did not come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_messages: Option<u64>,
    /// Damaged or missing objects (never used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged_objects: Option<u64>,
    /// What happened, in words.
    #[serde(default)]
    pub message: String,
}

impl RustQueueStatus {
    /// The condition of `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// `True`, `False` or `Unknown`.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// A standard Kubernetes condition (the shape of `metav1.Condition`).
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Progressing`, `Degraded`, `BrokersAvailable`, `StorageReady`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// CamelCase machine-readable reason.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// Generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339 time of the last change of status or reason.
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
}

/// What an operation does.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Growing the broker set; waits for the new brokers to be Ready.
    ScaleUp,
    /// Draining the highest-ordinal broker to empty, then removing it (its PVC is kept).
    ScaleDown,
    /// Replacing brokers one at a time with the target pod-template revision.
    Rollout,
    /// A rollout to `spec.rollout.rollbackToImage`.
    Rollback,
    /// Draining one named broker for maintenance.
    Maintenance,
}

impl OperationKind {
    /// The serialised name (`Rollout`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScaleUp => "ScaleUp",
            Self::ScaleDown => "ScaleDown",
            Self::Rollout => "Rollout",
            Self::Rollback => "Rollback",
            Self::Maintenance => "Maintenance",
        }
    }
}

/// Where an operation stands.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationPhase {
    /// The target image is being probed before any broker is touched.
    Preflight,
    /// Waiting for brokers to become Ready before the next step.
    WaitingForReady,
    /// A broker is draining (publishes refused) towards its goal.
    Draining,
    /// A drained broker's Pod was deleted and is being recreated on its PVC.
    Replacing,
    /// Stopped by `spec.rollout.paused`.
    Paused,
    /// Stopped after the canary until `spec.rollout.approvedRevision` names the revision.
    AwaitingCanaryApproval,
    /// Cannot proceed until the spec or the cluster changes; nothing is disrupted.
    Blocked,
    /// Timed out; sticky until `spec.rollout.retryNonce` changes.
    Failed,
    /// Done.
    Completed,
    /// The spec stopped asking for it before it finished (the previous image restored, a
    /// level raise taken back, maintenance removed): closed and moved to the history.
    Withdrawn,
    /// A newer operation took its place before it finished: moved to the history.
    Superseded,
}

impl OperationPhase {
    /// Phases a person must end (they never count toward `timeoutSeconds`), or final ones.
    pub fn is_waiting_for_a_person_or_final(self) -> bool {
        matches!(
            self,
            Self::Paused
                | Self::AwaitingCanaryApproval
                | Self::Blocked
                | Self::Failed
                | Self::Completed
                | Self::Withdrawn
                | Self::Superseded
        )
    }

    /// Completed, Failed, Blocked, Withdrawn or Superseded: `completedAt` is stamped.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Blocked | Self::Withdrawn | Self::Superseded
        )
    }

    /// How it ended, when it has (Blocked has not: it waits for the spec or the cluster).
    pub fn is_outcome(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Withdrawn | Self::Superseded
        )
    }
}

/// An operation the operator runs over several reconciles (scale, rollout, maintenance).
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus {
    /// Stable id; a new id starts a new operation.
    pub id: String,
    /// What the operation does.
    pub kind: OperationKind,
    /// Where it stands.
    pub phase: OperationPhase,
    /// What the operation acts on (a count, a Pod, an image).
    #[serde(default)]
    pub target: String,
    /// Pod-template revision it rolls to.
    #[serde(default)]
    pub revision: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// RFC 3339 start (reset when a person resumes a paused or approval-waiting rollout).
    #[schemars(extend("format" = "date-time"))]
    pub started_at: String,
    /// RFC 3339 last update.
    #[schemars(extend("format" = "date-time"))]
    pub updated_at: String,
    /// RFC 3339 completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub completed_at: Option<String>,
    /// Image before a rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_image: Option<String>,
    /// Broker currently being acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_broker: Option<String>,
}
