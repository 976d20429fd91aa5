//! Phases and the conditions derived from a plan, in the shape `kubectl wait` and Argo CD read.

use super::{Plan, StorageState};

/// Summary phase of a RustQueue (`status.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every desired broker is Ready.
    Ready,
    /// The StatefulSet is growing (or the first objects are being created).
    Scaling,
    /// Waiting for brokers of the current set to become Ready.
    Rolling,
    /// Fewer eligible Nodes than brokers needed.
    InsufficientNodes,
    /// A broker PVC contradicts the spec.
    StorageBlocked,
    /// The spec (or the Secret it names) is unusable; nothing was changed.
    InvalidSpec,
    /// The last reconcile failed talking to the API server.
    ReconcileError,
}

impl Phase {
    /// The `status.phase` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Scaling => "Scaling",
            Self::Rolling => "Rolling",
            Self::InsufficientNodes => "InsufficientNodes",
            Self::StorageBlocked => "StorageBlocked",
            Self::InvalidSpec => "InvalidSpec",
            Self::ReconcileError => "ReconcileError",
        }
    }

    /// Phases that need the user (Degraded=True).
    pub fn is_degraded(self) -> bool {
        matches!(
            self,
            Self::InsufficientNodes
                | Self::StorageBlocked
                | Self::InvalidSpec
                | Self::ReconcileError
        )
    }
}

/// A condition as decided, before transition times are merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSpec {
    /// Condition type.
    pub type_: &'static str,
    /// Whether it holds.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Detail.
    pub message: String,
}

fn cond(type_: &'static str, status: bool, reason: &str, message: &str) -> ConditionSpec {
    ConditionSpec {
        type_,
        status,
        reason: reason.into(),
        message: message.into(),
    }
}

/// Ready, Progressing, Degraded, BrokersAvailable and StorageReady for `plan`, sorted by type.
pub(super) fn derive(
    plan: &Plan,
    storage: &StorageState,
    unavailable: &[String],
) -> Vec<ConditionSpec> {
    let phase = plan.phase;
    let ready = phase == Phase::Ready && plan.ready_brokers >= plan.desired_brokers;
    let degraded = phase.is_degraded();
    let p = phase.as_str();
    let mut out = vec![
        cond("Ready", ready, p, &plan.message),
        cond("Progressing", !ready && !degraded, p, &plan.message),
        cond("Degraded", degraded, p, &plan.message),
    ];
    if phase != Phase::InvalidSpec {
        out.push(if unavailable.is_empty() {
            cond(
                "BrokersAvailable",
                true,
                "AllReady",
                &format!("{} brokers ready", plan.ready_brokers),
            )
        } else {
            cond(
                "BrokersAvailable",
                false,
                "PodsUnavailable",
                &unavailable.join("; "),
            )
        });
        out.push(match storage {
            StorageState::Ready => cond(
                "StorageReady",
                true,
                "CapacityReady",
                "all PVCs satisfy the requested capacity",
            ),
            StorageState::Pending(m) => cond("StorageReady", false, "StorageProvisioning", m),
            StorageState::Blocked(m) => cond("StorageReady", false, "StorageBlocked", m),
        });
    }
    out.sort_by_key(|c| c.type_);
    out
}
