//! Phases and the conditions derived from a plan, in the shape `kubectl wait` and Argo CD read.

use super::{Observed, Plan, StorageState, Workload};
use crate::render::Desired;
use ConditionType as C;

/// Summary phase of a RustQueue (`status.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every desired broker runs the target revision, is Ready, and no operation is pending.
    Ready,
    /// The StatefulSet is growing (or the first objects are being created).
    Scaling,
    /// A broker is down for its own reasons (no operation caused it); waiting for it.
    WaitingForBrokers,
    /// A rollout or rollback is replacing brokers.
    Rolling,
    /// The rollout is held by `spec.rollout.paused`.
    RolloutPaused,
    /// The rollout waits for `spec.rollout.approvedRevision` after the canary.
    RolloutAwaitingApproval,
    /// The rollout cannot proceed (e.g. a single broker).
    RolloutBlocked,
    /// The rollout timed out; sticky until `spec.rollout.retryNonce` changes.
    RolloutFailed,
    /// The highest-ordinal broker drains before a scale-down.
    Draining,
    /// One broker is drained for maintenance.
    Maintenance,
    /// Maintenance cannot start (another broker is not Ready, or the target is unknown).
    MaintenanceBlocked,
    /// Fewer eligible Nodes than brokers needed.
    InsufficientNodes,
    /// The target image is being probed; no broker is touched until it passes.
    Preflight,
    /// The target image or a running broker cannot run the desired set.
    PreflightBlocked,
    /// Broker claims are growing to the requested size.
    StorageResizing,
    /// A broker PVC contradicts the spec.
    StorageBlocked,
    /// The spec (or the Secret it names) is unusable; nothing was changed.
    InvalidSpec,
    /// The last reconcile failed talking to the API server.
    ReconcileError,
    /// A broker disruption waits for the Kodo fences (grace, producer restart).
    WaitingForKodoCutover,
    /// Fewer than three Kodo Gateways are Ready.
    WaitingForKodoGateways,
    /// Discovery does not advertise the Kodo Gateways yet.
    WaitingForKodoAdvertisement,
    /// The Kodo producers have not been confirmed restarted since advertisement.
    WaitingForKodoProducerRestart,
    /// The profile is being disabled; the Kodo Gateways are retained.
    DisablingKodo,
    /// The profile was disabled without `decommissionConfirmed`: nothing changes.
    KodoDecommissionBlocked,
    /// A broker's restore init container is rebuilding its empty volume from the bucket
    /// (docs/tiering.md); the broker starts when it ends.
    RestoringFromBucket,
    /// A broker's restore from the bucket failed: it does not start until a person looks.
    RestoreFromBucketFailed,
}

impl Phase {
    /// The `status.phase` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Scaling => "Scaling",
            Self::WaitingForBrokers => "WaitingForBrokers",
            Self::Rolling => "Rolling",
            Self::RolloutPaused => "RolloutPaused",
            Self::RolloutAwaitingApproval => "RolloutAwaitingApproval",
            Self::RolloutBlocked => "RolloutBlocked",
            Self::RolloutFailed => "RolloutFailed",
            Self::Draining => "Draining",
            Self::Maintenance => "Maintenance",
            Self::MaintenanceBlocked => "MaintenanceBlocked",
            Self::InsufficientNodes => "InsufficientNodes",
            Self::Preflight => "Preflight",
            Self::PreflightBlocked => "PreflightBlocked",
            Self::StorageResizing => "StorageResizing",
            Self::StorageBlocked => "StorageBlocked",
            Self::InvalidSpec => "InvalidSpec",
            Self::ReconcileError => "ReconcileError",
            Self::WaitingForKodoCutover => "WaitingForKodoCutover",
            Self::WaitingForKodoGateways => "WaitingForKodoGateways",
            Self::WaitingForKodoAdvertisement => "WaitingForKodoAdvertisement",
            Self::WaitingForKodoProducerRestart => "WaitingForKodoProducerRestart",
            Self::DisablingKodo => "DisablingKodo",
            Self::KodoDecommissionBlocked => "KodoDecommissionBlocked",
            Self::RestoringFromBucket => "RestoringFromBucket",
            Self::RestoreFromBucketFailed => "RestoreFromBucketFailed",
        }
    }

    /// Phases that need the user (Degraded=True).
    pub fn is_degraded(self) -> bool {
        matches!(
            self,
            Self::InsufficientNodes
                | Self::PreflightBlocked
                | Self::MaintenanceBlocked
                | Self::RolloutBlocked
                | Self::RolloutFailed
                | Self::StorageBlocked
                | Self::InvalidSpec
                | Self::ReconcileError
                | Self::KodoDecommissionBlocked
                | Self::RestoreFromBucketFailed
        )
    }

    /// Phases held by a person on purpose: neither progressing nor degraded.
    pub fn is_held(self) -> bool {
        matches!(
            self,
            Self::Maintenance | Self::RolloutPaused | Self::RolloutAwaitingApproval
        )
    }
}

/// The type of a condition the operator writes (`status.conditions[].type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The whole cluster runs the target revision and serves (what `kubectl wait` reads).
    Ready,
    /// The operator is moving the cluster towards the spec.
    Progressing,
    /// The cluster needs a person: the message says why and what to do.
    Degraded,
    /// The target image and every running broker passed preflight.
    Upgradeable,
    /// Broker claims kept after a scale-down.
    OrphanedPVCs,
    /// A broker is drained for maintenance.
    Maintenance,
    /// Every broker of the set is Ready.
    BrokersAvailable,
    /// Every claim is bound with the requested class and size.
    StorageReady,
    /// Discovery, the gateway and (when enabled) the console run their latest template, every
    /// Pod Ready.
    RuntimeAvailable,
    /// A broker has quarantined damage at rest on record.
    StorageDamage,
    /// The Kodo Gateways run (docs/kodo.md).
    KodoGatewaysActive,
    /// All three Kodo Gateways are Ready on the rendered template.
    KodoGatewaysReady,
    /// Discovery advertises the Kodo Gateways.
    KodoGatewaysAdvertised,
    /// The advertisement held for the cutover grace.
    KodoCutoverReady,
    /// The producers were confirmed restarted since the advertisement.
    KodoProducerRestartConfirmed,
    /// Discovery advertises the brokers directly.
    KodoDirectBrokersAdvertised,
    /// Kodo channel cleanup (never: it is off for good).
    KodoCleanupActive,
    /// Disabling the profile was confirmed.
    KodoDecommissionConfirmed,
}

impl ConditionType {
    /// The `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Progressing => "Progressing",
            Self::Degraded => "Degraded",
            Self::Upgradeable => "Upgradeable",
            Self::OrphanedPVCs => "OrphanedPVCs",
            Self::Maintenance => "Maintenance",
            Self::BrokersAvailable => "BrokersAvailable",
            Self::StorageReady => "StorageReady",
            Self::RuntimeAvailable => "RuntimeAvailable",
            Self::StorageDamage => "StorageDamage",
            Self::KodoGatewaysActive => "KodoGatewaysActive",
            Self::KodoGatewaysReady => "KodoGatewaysReady",
            Self::KodoGatewaysAdvertised => "KodoGatewaysAdvertised",
            Self::KodoCutoverReady => "KodoCutoverReady",
            Self::KodoProducerRestartConfirmed => "KodoProducerRestartConfirmed",
            Self::KodoDirectBrokersAdvertised => "KodoDirectBrokersAdvertised",
            Self::KodoCleanupActive => "KodoCleanupActive",
            Self::KodoDecommissionConfirmed => "KodoDecommissionConfirmed",
        }
    }
}

/// Tests and readers compare with the `type` string.
impl PartialEq<&str> for ConditionType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A condition as decided, before transition times are merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionSpec {
    /// Condition type.
    pub type_: ConditionType,
    /// Whether it holds.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Detail.
    pub message: String,
}

pub(super) fn cond(
    type_: ConditionType,
    status: bool,
    reason: &str,
    message: &str,
) -> ConditionSpec {
    ConditionSpec {
        type_,
        status,
        reason: reason.into(),
        message: message.into(),
    }
}

/// `RuntimeAvailable`: whether what clients connect to besides the brokers — the discovery
/// Deployment (lookupd address) and the gateway DaemonSet (producer address) — and, while
/// `console` is enabled, the console Deployment run their latest template on every Pod, each
/// Ready.
pub(super) fn runtime(obs: &Observed, console: bool) -> ConditionSpec {
    let part = |what: &str, w: Option<&Workload>| match w {
        None => Some(format!("{what}: not created yet")),
        Some(w) => w.unavailable().map(|m| format!("{what}: {m}")),
    };
    let parts = [
        (
            "DiscoveryUnavailable",
            part("discovery", obs.discovery.as_ref()),
        ),
        ("GatewayUnavailable", part("gateway", obs.gateway.as_ref())),
        (
            "ConsoleUnavailable",
            console
                .then(|| part("console", obs.console.as_ref()))
                .flatten(),
        ),
    ];
    let missing: Vec<(&str, String)> = parts
        .into_iter()
        .filter_map(|(reason, m)| Some((reason, m?)))
        .collect();
    match missing.as_slice() {
        [] => {
            let pods = |w: Option<&Workload>| w.map_or(0, |w| w.ready);
            let mut message = format!(
                "discovery {} Pods Ready, gateway {} Pods Ready",
                pods(obs.discovery.as_ref()),
                pods(obs.gateway.as_ref())
            );
            if console {
                message.push_str(&format!(
                    ", console {} Pod Ready",
                    pods(obs.console.as_ref())
                ));
            }
            cond(C::RuntimeAvailable, true, "AllReady", &message)
        }
        [(reason, m)] => cond(C::RuntimeAvailable, false, reason, m),
        _ => {
            let all: Vec<&str> = missing.iter().map(|(_, m)| m.as_str()).collect();
            cond(
                C::RuntimeAvailable,
                false,
                "RuntimeUnavailable",
                &all.join("; "),
            )
        }
    }
}

/// Ready, Progressing, Degraded, BrokersAvailable, StorageReady and `runtime` (see
/// [`runtime`]) for `plan`, sorted by type. Under `InvalidSpec` only the first three: the
/// others keep their last values.
pub(super) fn derive(
    plan: &Plan,
    storage: &StorageState,
    unavailable: &[String],
    runtime: ConditionSpec,
    desired: &Desired,
) -> Vec<ConditionSpec> {
    let mut out = summary(plan, storage, unavailable, &runtime, desired);
    if plan.phase != Phase::InvalidSpec {
        out.extend(details(plan, storage, unavailable));
        out.push(runtime);
    }
    out.sort_by_key(|c| c.type_.as_str());
    out
}

/// Ready, Progressing and Degraded.
fn summary(
    plan: &Plan,
    storage: &StorageState,
    unavailable: &[String],
    runtime: &ConditionSpec,
    desired: &Desired,
) -> Vec<ConditionSpec> {
    let phase = plan.phase;
    // Ready never overstates: the phase is Ready only when no operation is pending and every
    // broker of the set runs the target revision; the counts, the claims and the runtime
    // workloads are checked here.
    let waiting = match storage {
        StorageState::Ready if runtime.status => None,
        StorageState::Ready => Some(("WaitingForRuntime", runtime.message.clone())),
        StorageState::Pending(m)
        | StorageState::Blocked(m)
        | StorageState::Resizing { message: m, .. } => Some(("WaitingForStorage", m.clone())),
    };
    let ready = phase == Phase::Ready
        && plan.ready_brokers >= plan.desired_brokers
        && unavailable.is_empty()
        && waiting.is_none();
    let degraded = phase.is_degraded();
    let p = phase.as_str();
    let (reason, ready_message) = match waiting {
        Some((reason, message)) if phase == Phase::Ready => (reason, message),
        _ if ready => (
            p,
            format!("{}; revision {}", plan.message, desired.revision),
        ),
        _ if phase == Phase::Ready => ("WaitingForBrokers", unavailable.join("; ")),
        _ => (p, plan.message.clone()),
    };
    vec![
        cond(C::Ready, ready, reason, &ready_message),
        cond(
            C::Progressing,
            !ready && !degraded && !phase.is_held(),
            reason,
            &ready_message,
        ),
        cond(C::Degraded, degraded, p, &plan.message),
    ]
}

/// Upgradeable, OrphanedPVCs, Maintenance, BrokersAvailable and StorageReady.
fn details(plan: &Plan, storage: &StorageState, unavailable: &[String]) -> Vec<ConditionSpec> {
    let phase = plan.phase;
    let mut out = Vec::new();
    out.push(match phase {
        Phase::Preflight => cond(C::Upgradeable, false, "Preflight", &plan.message),
        Phase::PreflightBlocked => cond(C::Upgradeable, false, "PreflightBlocked", &plan.message),
        _ => cond(
            C::Upgradeable,
            true,
            "PreflightPassed",
            "the target image and every running broker support the desired set",
        ),
    });
    out.push(if plan.orphaned_pvcs.is_empty() {
        cond(C::OrphanedPVCs, false, "None", "no retained broker PVCs")
    } else {
        cond(
            C::OrphanedPVCs,
            true,
            "RetainedAfterScaleDown",
            &format!(
                "kept after scale-down (delete them yourself once their data is not needed): {}",
                plan.orphaned_pvcs.join(", ")
            ),
        )
    });
    out.push(match phase {
        Phase::Maintenance | Phase::MaintenanceBlocked => {
            cond(C::Maintenance, true, "Requested", &plan.message)
        }
        _ => cond(
            C::Maintenance,
            false,
            "NotRequested",
            "no broker is in maintenance",
        ),
    });
    out.push(if unavailable.is_empty() {
        cond(
            C::BrokersAvailable,
            true,
            "AllReady",
            &format!("{} brokers ready", plan.ready_brokers),
        )
    } else {
        cond(
            C::BrokersAvailable,
            false,
            "PodsUnavailable",
            &unavailable.join("; "),
        )
    });
    out.push(match storage {
        StorageState::Ready => cond(
            C::StorageReady,
            true,
            "CapacityReady",
            "all PVCs satisfy the requested capacity",
        ),
        StorageState::Pending(m) => cond(C::StorageReady, false, "StorageProvisioning", m),
        StorageState::Resizing { message, .. } => {
            cond(C::StorageReady, false, "StorageResizing", message)
        }
        StorageState::Blocked(m) => cond(C::StorageReady, false, "StorageBlocked", m),
    });
    out
}

/// `StorageDamage`: True while any broker has quarantined damage at rest on record, naming each
/// broker and what was lost. Damage does not make a broker unready (it keeps serving the rest),
/// so this is the place a person learns of it; it clears when the records are cleared
/// (docs/operations.md).
pub(super) fn storage_damage(obs: &Observed) -> ConditionSpec {
    let damaged: Vec<String> = obs
        .brokers
        .iter()
        .filter_map(|b| {
            let d = b.damage.as_ref()?;
            let latest = d
                .latest
                .as_deref()
                .map(|l| format!("; latest: {l}"))
                .unwrap_or_default();
            Some(format!(
                "{}: {} messages lost in {} quarantine records{latest}",
                b.name, d.messages, d.findings
            ))
        })
        .collect();
    if damaged.is_empty() {
        cond(
            C::StorageDamage,
            false,
            "NoneRecorded",
            "no broker has quarantined damage at rest",
        )
    } else {
        cond(
            C::StorageDamage,
            true,
            "Quarantined",
            &format!(
                "damage at rest was quarantined (see docs/operations.md): {}",
                damaged.join("; ")
            ),
        )
    }
}
