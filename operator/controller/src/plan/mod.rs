//! `plan(spec, observed, desired, previous_status, now) -> Plan`: every decision of the
//! operator as a pure function.
//!
//! `observe` gathers the cluster into an [`Observed`]; `render` builds the [`Desired`] set
//! (target revision, config, claim size, feature level); `plan` decides the phase, the
//! conditions, the operation and the [`Action`]s; the applier carries the actions out and
//! decides nothing. Nothing here does I/O, so every transition is a row in a table test.
//!
//! Decision order (first match wins; docs/operator.md draws it):
//! 1. spec fails validation (or lowers `storageFeatureLevel` below the active floor) →
//!    `InvalidSpec` (Degraded), touch nothing;
//! 2. the auth Secret is missing or broken → create it, or `InvalidSpec` when the user owns it;
//!    the tiering credentials Secret or one of its keys is missing → `InvalidSpec`;
//! 3. preflight of the target image and the running brokers → `Preflight`/`PreflightBlocked`:
//!    resume drains, runtime objects only;
//! 4. a broker claim contradicts the spec → `StorageBlocked`: resume drains, runtime only;
//!    claims below the size → grow them, `StorageResizing`;
//! 5. fewer eligible Nodes than brokers → `InsufficientNodes`: resume drains;
//! 6. maintenance of one named broker → `Maintenance` / `MaintenanceBlocked`;
//! 7. more brokers than desired → drained scale-down of the highest ordinal (`Draining`);
//! 8. fewer brokers than desired → `Scaling` until the new brokers are Ready;
//! 9. a broker not on the target revision → rollout (`Rolling`, `RolloutPaused`, ...);
//! 10. otherwise `Ready`, or `WaitingForBrokers` while a broker is not Ready
//!     (`RestoringFromBucket` while its restore init container runs, `RestoreFromBucketFailed`
//!     when that failed).

mod conditions;
pub mod kodo;
mod model;
mod operation;
mod operations;
mod preflight;
mod quantity;
mod rollout;
mod storage;
mod tiering;
mod validate;

#[cfg(any(test, feature = "test-support"))]
pub mod builder;

use std::time::Duration;

use rustqueue_api::crd::{RustQueueSpec, RustQueueStatus};

pub use conditions::{ConditionSpec, ConditionType, Phase};
#[cfg(test)]
use model::DrainGoal;
pub use model::{
    Action, AuthState, BrokerPod, Claim, DiscoveryPod, GatewayPod, GatewaySet, Health,
    KodoObserved, Observed, OperationChange, Plan, ProbePod, RestoreRun, StorageClassState,
    StorageDamage, TieringSecret, Workload,
};
#[cfg(test)]
use operation::operation_id;
pub use storage::{StorageState, storage_state};
pub use tiering::{FAILED as RESTORE_FAILED, RESTORED};
pub use validate::validate;

use crate::render::{Desired, names};

/// Normal requeue interval.
pub const REQUEUE: Duration = Duration::from_secs(5);
/// Requeue while a drain or a replacement is in flight.
pub const REQUEUE_ACTIVE: Duration = Duration::from_secs(2);

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

/// The storage feature level floor: what status recorded and what running brokers report as
/// active. Never lowered.
pub fn feature_floor(obs: &Observed, previous: &RustQueueStatus) -> u32 {
    previous
        .active_storage_feature_level
        .unwrap_or(1)
        .max(obs.active_feature_level().unwrap_or(1))
        .max(1)
}

/// A `storageFeatureLevel` below the floor. The CRD refuses lowering it at `kubectl apply`;
/// this catches an object written before that rule (or on a cluster whose CRD is older), which
/// would otherwise read `Ready` while its request is silently not applied.
fn below_floor(spec: &RustQueueSpec, floor: u32) -> Option<String> {
    (spec.storage_feature_level < floor).then(|| {
        format!(
            "spec.storageFeatureLevel {} is below {floor}, the level the brokers have activated (status.activeStorageFeatureLevel): their PVCs may hold records a lower level cannot read, so levels are never lowered; the brokers keep level {floor}; set spec.storageFeatureLevel to {floor}",
            spec.storage_feature_level
        )
    })
}

/// Decide what to do for the RustQueue whose desired set is `desired`, at unix time `now`.
pub fn plan(
    spec: &RustQueueSpec,
    obs: &Observed,
    desired: &Desired,
    previous: &RustQueueStatus,
    now: u64,
) -> Plan {
    let name = desired.name.as_str();
    let desired_n = desired_brokers(spec, obs.eligible_nodes);
    let in_use: Vec<&Claim> = obs
        .claims
        .iter()
        .filter(|c| claim_ordinal(name, &c.name).is_none_or(|o| o < desired_n.max(current(obs))))
        .collect();
    let storage = storage_state(
        &in_use,
        obs.storage_class,
        &spec.storage_class_name,
        &spec.storage_size,
    );
    let mut out = Plan {
        phase: Phase::Ready,
        message: String::new(),
        desired_brokers: desired_n,
        ready_brokers: 0,
        conditions: Vec::new(),
        actions: Vec::new(),
        operation: OperationChange::Keep,
        operation_history: previous.operation_history.clone(),
        active_feature_level: feature_floor(obs, previous),
        orphaned_pvcs: obs
            .claims
            .iter()
            .filter(|c| claim_ordinal(name, &c.name).is_some_and(|o| o >= desired_n))
            .map(|c| c.name.clone())
            .collect(),
        desired_storage_size: Some(desired.claim_size.clone()),
        requeue: REQUEUE,
        kodo_baseline_nonce: previous.kodo_producer_restart_baseline_nonce.clone(),
        restores: tiering::records(obs, &previous.restores),
        tiering_local_retention_used: previous.tiering_local_retention_used == Some(true)
            || spec
                .tiering
                .as_ref()
                .is_some_and(rustqueue_api::crd::Tiering::local_retention),
    };
    let i = Inputs {
        spec,
        obs,
        desired,
        previous,
        now,
        desired_n,
    };
    let kodo_conditions = gates(&i, &storage, &mut out).unwrap_or_else(|Stopped(c)| c);
    tiering::overlay(obs, &mut out);
    let unavailable = unavailable(name, obs, out.desired_brokers.max(current(obs)));
    out.ready_brokers = ready_count(name, obs, out.desired_brokers.max(current(obs)));
    let runtime = conditions::runtime(obs, spec.console.enabled);
    out.conditions = conditions::derive(&out, &storage, &unavailable, runtime, desired);
    out.conditions.push(conditions::storage_damage(obs));
    out.conditions.extend(kodo_conditions);
    out.conditions.sort_by_key(|c| c.type_.as_str());
    out
}

/// What every gate reads.
struct Inputs<'a> {
    spec: &'a RustQueueSpec,
    obs: &'a Observed,
    desired: &'a Desired,
    previous: &'a RustQueueStatus,
    now: u64,
    desired_n: i32,
}

impl Inputs<'_> {
    fn name(&self) -> &str {
        &self.desired.name
    }
}

/// A gate stopped the plan: the phase, message and actions are in the plan already; these
/// are the conditions of its own it adds.
struct Stopped(Vec<ConditionSpec>);

/// The gates in order (docs/operator.md, "Decision order"): validate → auth → Kodo →
/// (in [`operations`]) preflight → storage → nodes → the operations. Each lets the plan go on
/// with what it established, or stops it with its phase, message and actions in `out`. A new
/// fence is one more gate here. Returns the Kodo conditions.
fn gates(
    i: &Inputs<'_>,
    storage: &StorageState,
    out: &mut Plan,
) -> Result<Vec<ConditionSpec>, Stopped> {
    validate_gate(i, out)?;
    auth_gate(i, out)?;
    tiering_gate(i, out)?;
    let cut = kodo_gate(i, out)?;
    let ctx = operations::Context {
        spec: i.spec,
        obs: i.obs,
        desired: i.desired,
        previous: i.previous,
        now: i.now,
        disruptions_allowed: cut.disruptions_allowed,
        kodo: &cut.layout,
    };
    operations::decide(&ctx, storage, out);
    if cut.delete_gateways {
        out.actions.push(Action::DeleteKodoGateways);
    }
    if !i.spec.console.enabled && i.obs.console.is_some() {
        out.actions.push(Action::DeleteConsole);
    }
    if let Some((phase, message)) = kodo::overlay(&cut, out.phase) {
        out.phase = phase;
        out.message = message;
    }
    Ok(kodo::conditions(
        &cut,
        i.spec.kodo_compatibility.decommission_confirmed,
    ))
}

/// The spec must be usable, and must not lower the feature level below the floor:
/// `InvalidSpec` (Degraded) otherwise, touching nothing.
fn validate_gate(i: &Inputs<'_>, out: &mut Plan) -> Result<(), Stopped> {
    let mut errors = validate(i.name(), i.spec);
    errors.extend(below_floor(i.spec, out.active_feature_level));
    errors.extend(tiering::removed_after_retention(i.spec, i.previous));
    if errors.is_empty() {
        return Ok(());
    }
    out.phase = Phase::InvalidSpec;
    out.message = format!("invalid spec: {}", errors.join("; "));
    Err(Stopped(Vec::new()))
}

/// The auth Secret: created when the operator generates it; a user-named one that is missing
/// or broken is `InvalidSpec`.
fn auth_gate(i: &Inputs<'_>, out: &mut Plan) -> Result<(), Stopped> {
    let secret = || auth_secret_name(i.name(), i.spec);
    match &i.obs.auth {
        AuthState::Valid { .. } => return Ok(()),
        AuthState::GeneratedMissing => {
            out.actions
                .push(Action::CreateAuthSecret { name: secret() });
            out.phase = Phase::Scaling;
            out.message = "creating the auth Secret".into();
            out.requeue = Duration::from_secs(1);
        }
        AuthState::UserMissing => {
            out.phase = Phase::InvalidSpec;
            out.message = format!(
                "Secret {} named by spec.registrySecretName does not exist: create it with admin-token, registry-token and console-token, or unset the field",
                secret()
            );
        }
        AuthState::Invalid(e) => {
            out.phase = Phase::InvalidSpec;
            out.message = e.clone();
        }
    }
    Err(Stopped(Vec::new()))
}

/// The bucket credentials of `spec.tiering` must be mountable: a missing Secret or key is
/// `InvalidSpec` naming them and what to do, touching nothing (a Pod would never start).
fn tiering_gate(i: &Inputs<'_>, out: &mut Plan) -> Result<(), Stopped> {
    let Some(problem) = tiering::secret_problem(i.spec, &i.obs.tiering_secret) else {
        return Ok(());
    };
    out.phase = Phase::InvalidSpec;
    out.message = problem;
    Err(Stopped(Vec::new()))
}

/// The Kodo cutover (docs/kodo.md): its fences go on to the operations; a disable without
/// `decommissionConfirmed` while the Gateways run stops everything as it runs
/// (`KodoDecommissionBlocked`).
fn kodo_gate(i: &Inputs<'_>, out: &mut Plan) -> Result<kodo::Cutover, Stopped> {
    let (name, obs) = (i.name(), i.obs);
    let image = operations::runtime_image(obs, i.desired);
    let gateway_revision = i.desired.kodo_gateway_revision(&image);
    let cut = kodo::cutover(&kodo::Input {
        spec: i.spec,
        obs,
        previous: i.previous,
        now: i.now,
        grace: i.desired.kodo_grace_seconds,
        gateway_revision: &gateway_revision,
        target_brokers_ready: target_brokers_ready(obs, i.desired, i.desired_n),
        ready_brokers: ready_count(name, obs, current(obs)),
    });
    out.kodo_baseline_nonce = cut.baseline.clone();
    if !cut.decommission_blocked {
        return Ok(cut);
    }
    // Nothing changes: the runtime objects are kept as they run, and so are the profile's
    // brokers, whatever the ordinary count would be.
    out.desired_brokers = out.desired_brokers.max(kodo::BROKERS);
    out.phase = Phase::KodoDecommissionBlocked;
    out.message = kodo::DECOMMISSION_BLOCKED.into();
    out.actions.extend(
        obs.brokers
            .iter()
            .filter(|b| b.is_draining() && !b.terminating)
            .map(|b| Action::Resume {
                pod: b.name.clone(),
            }),
    );
    out.actions.push(Action::ApplyRuntime {
        image,
        kodo: cut.layout,
    });
    Err(Stopped(kodo::blocked_conditions()))
}

/// Exactly the brokers `0..n`, each Ready on the target revision, and no more.
fn target_brokers_ready(obs: &Observed, desired: &Desired, n: i32) -> bool {
    let name = desired.name.as_str();
    current(obs) == n
        && (0..n).all(|o| {
            obs.broker(&names::pod(name, o))
                .is_some_and(|b| b.is_ready() && b.runs(&desired.revision))
        })
}

fn current(obs: &Observed) -> i32 {
    obs.statefulset_replicas.unwrap_or(0)
}

fn ready_count(name: &str, obs: &Observed, n: i32) -> i32 {
    let ready = (0..n)
        .filter(|o| {
            obs.broker(&names::pod(name, *o))
                .is_some_and(BrokerPod::is_ready)
        })
        .count();
    i32::try_from(ready).unwrap_or(i32::MAX)
}

/// `pod: reason` for every broker of ordinals `0..n` that is not Ready.
fn unavailable(name: &str, obs: &Observed, n: i32) -> Vec<String> {
    (0..n)
        .map(|o| names::pod(name, o))
        .filter_map(|p| match obs.broker(&p) {
            Some(b) if b.is_ready() => None,
            Some(b) => Some(format!("{p}: {}", b.why_not_ready())),
            None => Some(format!("{p}: PodMissing")),
        })
        .collect()
}

/// The ordinal of claim `data-<n>-<ordinal>`.
fn claim_ordinal(name: &str, claim: &str) -> Option<i32> {
    claim
        .strip_prefix("data-")?
        .strip_prefix(name)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

#[cfg(test)]
mod console_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tiering_tests;
