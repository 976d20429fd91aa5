//! `plan(spec, observed) -> Plan`: the operator's decisions as a pure function.
//!
//! `observe` gathers the cluster into an [`Observed`]; `plan` decides the phase, the
//! conditions and the [`Action`]s; the applier carries the actions out. Nothing here does I/O,
//! so every decision is a row in a table test.
//!
//! Decision order (first match wins for the phase):
//! 1. spec fails validation → `InvalidSpec` (Degraded), touch nothing;
//! 2. the auth Secret is missing or broken → create it, or `InvalidSpec` when the user owns it;
//! 3. a broker claim contradicts the spec → `StorageBlocked` (Degraded), touch nothing;
//! 4. fewer eligible Nodes than the minimum → `InsufficientNodes` (Degraded), still apply;
//! 5. StatefulSet smaller than desired → apply the new size, `Scaling`;
//! 6. a broker of the set is missing or unready → `Rolling` (waiting for it);
//! 7. otherwise `Ready`.

mod conditions;
mod quantity;
mod storage;
mod validate;

use std::time::Duration;

use rustqueue_api::contract::NotReadyReason;
use rustqueue_api::crd::RustQueueSpec;

pub use conditions::{ConditionSpec, Phase};
pub use quantity::parse_bytes;
pub use storage::{StorageState, storage_state};
pub use validate::validate;

use crate::render::names;

/// The state of the auth Secret the brokers mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthState {
    /// Present with three distinct tokens; `revision` is its resourceVersion.
    Valid {
        /// Secret resourceVersion (part of the pod-template revision).
        revision: String,
    },
    /// The operator-generated Secret does not exist yet.
    GeneratedMissing,
    /// The user-named Secret does not exist.
    UserMissing,
    /// Present but its tokens are missing, blank or shared.
    Invalid(String),
}

/// What the broker's `/v1/health` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// 200 ready.
    Ready,
    /// 503 with a reason.
    NotReady(NotReadyReason),
    /// Pod has no IP yet, or the request failed.
    Unreachable(String),
}

/// One broker Pod as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerPod {
    /// Pod name.
    pub name: String,
    /// Kubelet readiness (condition Ready=True).
    pub pod_ready: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// Value of the revision annotation.
    pub revision: Option<String>,
    /// Why the container is not running, if the kubelet says (`ImagePullBackOff`, ...), or
    /// the Pod phase when unscheduled.
    pub waiting: Option<String>,
    /// The broker's own readiness.
    pub health: Health,
}

impl BrokerPod {
    /// Ready for traffic: Pod Ready, not terminating, and the broker says ready.
    pub fn is_ready(&self) -> bool {
        self.pod_ready && !self.terminating && self.health == Health::Ready
    }

    fn why_not_ready(&self) -> String {
        if self.terminating {
            return "terminating".into();
        }
        if let Some(w) = &self.waiting {
            return w.clone();
        }
        match &self.health {
            Health::NotReady(r) => r.as_str().into(),
            Health::Unreachable(e) if !self.pod_ready => format!("PodNotReady ({e})"),
            Health::Unreachable(e) => e.clone(),
            Health::Ready => "PodNotReady".into(),
        }
    }
}

/// One broker PVC as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// PVC name (`data-<n>-<ordinal>`).
    pub name: String,
    /// `spec.storageClassName`.
    pub storage_class: Option<String>,
    /// `spec.resources.requests.storage`.
    pub requested: Option<String>,
    /// `status.capacity.storage`.
    pub capacity: Option<String>,
    /// `status.phase == Bound`.
    pub bound: bool,
}

/// Everything `plan` needs to know about the cluster, read fresh on every reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Nodes carrying the eligible label (readiness ignored: the label is membership intent).
    pub eligible_nodes: i32,
    /// `spec.replicas` of the broker StatefulSet; `None` when it does not exist.
    pub statefulset_replicas: Option<i32>,
    /// Broker Pods of this RustQueue.
    pub brokers: Vec<BrokerPod>,
    /// Broker PVCs of this RustQueue.
    pub claims: Vec<Claim>,
    /// The auth Secret.
    pub auth: AuthState,
    /// Storage request of the existing StatefulSet's claim template (immutable once created).
    pub claim_template_size: Option<String>,
}

/// A change the applier must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the operator-generated auth Secret with fresh tokens (never overwrite).
    CreateAuthSecret {
        /// Secret name.
        name: String,
    },
    /// Server-side apply every child with this StatefulSet size.
    ApplyChildren {
        /// StatefulSet replicas.
        replicas: i32,
        /// resourceVersion of the auth Secret.
        auth_revision: String,
    },
}

/// The decision of one reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Summary phase.
    pub phase: Phase,
    /// Human-readable summary.
    pub message: String,
    /// Broker target.
    pub desired_brokers: i32,
    /// Ready brokers of the target set.
    pub ready_brokers: i32,
    /// Conditions to write (merged with the previous ones by the status writer).
    pub conditions: Vec<ConditionSpec>,
    /// Changes to make, in order.
    pub actions: Vec<Action>,
    /// When to look again if nothing changes.
    pub requeue: Duration,
}

/// Normal requeue interval.
pub const REQUEUE: Duration = Duration::from_secs(5);

/// Desired broker count: eligible Nodes clamped to [minBrokers, maxBrokers].
pub fn desired_brokers(spec: &RustQueueSpec, eligible: i32) -> i32 {
    eligible.clamp(
        spec.min_brokers.max(1),
        spec.max_brokers.max(spec.min_brokers).max(1),
    )
}

/// The Secret the brokers mount.
pub fn auth_secret_name(name: &str, spec: &RustQueueSpec) -> String {
    spec.registry_secret_name
        .clone()
        .unwrap_or_else(|| names::auth_secret(name))
}

/// Decide what to do for RustQueue `name`.
pub fn plan(name: &str, spec: &RustQueueSpec, obs: &Observed) -> Plan {
    let desired = desired_brokers(spec, obs.eligible_nodes);
    let current = obs.statefulset_replicas.unwrap_or(0);
    // Scale-down needs a drain first (a later operation); until then the set never shrinks.
    let replicas = desired.max(current);
    let target: Vec<String> = (0..replicas).map(|o| names::pod(name, o)).collect();
    let ready: Vec<&BrokerPod> = obs
        .brokers
        .iter()
        .filter(|b| target.contains(&b.name) && b.is_ready())
        .collect();
    let ready_count = i32::try_from(ready.len()).unwrap_or(i32::MAX);
    let unavailable: Vec<String> = target
        .iter()
        .filter(|t| !ready.iter().any(|b| &b.name == *t))
        .map(|t| match obs.brokers.iter().find(|b| &b.name == t) {
            Some(b) => format!("{t}: {}", b.why_not_ready()),
            None => format!("{t}: PodMissing"),
        })
        .collect();
    let storage = storage_state(&obs.claims, &spec.storage_class_name, &spec.storage_size);
    let mut out = Plan {
        phase: Phase::Ready,
        message: String::new(),
        desired_brokers: desired,
        ready_brokers: ready_count,
        conditions: Vec::new(),
        actions: Vec::new(),
        requeue: REQUEUE,
    };

    let errors = validate(name, spec);
    if !errors.is_empty() {
        out.phase = Phase::InvalidSpec;
        out.message = format!("invalid spec: {}", errors.join("; "));
    } else {
        match &obs.auth {
            AuthState::GeneratedMissing => {
                out.actions.push(Action::CreateAuthSecret {
                    name: auth_secret_name(name, spec),
                });
                out.phase = Phase::Scaling;
                out.message = "creating the auth Secret".into();
                out.requeue = Duration::from_secs(1);
            }
            AuthState::UserMissing => {
                out.phase = Phase::InvalidSpec;
                out.message = format!(
                    "Secret {} named by spec.registrySecretName does not exist: create it with admin-token, registry-token and console-token, or unset the field",
                    auth_secret_name(name, spec)
                );
            }
            AuthState::Invalid(e) => {
                out.phase = Phase::InvalidSpec;
                out.message = e.clone();
            }
            AuthState::Valid { revision } => {
                let min = spec.min_brokers;
                decide_brokers(
                    &mut out,
                    obs,
                    &storage,
                    (current, replicas, min),
                    &unavailable,
                    revision,
                );
            }
        }
    }
    out.conditions = conditions::derive(&out, &storage, &unavailable);
    out
}

fn decide_brokers(
    out: &mut Plan,
    obs: &Observed,
    storage: &StorageState,
    (current, replicas, min): (i32, i32, i32),
    unavailable: &[String],
    auth_revision: &str,
) {
    if let StorageState::Blocked(m) = storage {
        out.phase = Phase::StorageBlocked;
        out.message = m.clone();
        return;
    }
    out.actions.push(Action::ApplyChildren {
        replicas,
        auth_revision: auth_revision.to_string(),
    });
    let desired = out.desired_brokers;
    if obs.eligible_nodes < desired {
        out.phase = Phase::InsufficientNodes;
        out.message = format!(
            "{} eligible nodes; desired is {desired} and minimum is {min}: label more Nodes with the eligible selector or lower spec.minBrokers",
            obs.eligible_nodes
        );
    } else if current < desired {
        out.phase = Phase::Scaling;
        out.message = format!("scaling from {current} to {desired} brokers");
    } else if !unavailable.is_empty() {
        out.phase = Phase::Rolling;
        out.message = format!(
            "{}/{replicas} brokers ready; waiting for {}",
            out.ready_brokers,
            unavailable.join(", ")
        );
    } else {
        out.phase = Phase::Ready;
        out.message = if current > desired {
            format!(
                "{replicas}/{replicas} brokers ready; {desired} desired: scale-down waits for drain support, PVCs are kept"
            )
        } else {
            format!("{replicas}/{replicas} brokers ready")
        };
    }
}

#[cfg(test)]
mod tests;
