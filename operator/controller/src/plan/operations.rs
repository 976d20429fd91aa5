//! The operations: with a valid spec and Secret, choose the one thing to do now (storage,
//! nodes, maintenance, scale-down, scale-up, rollout) and the StatefulSet size. (Named for
//! what it decides, not "engine", which is the broker's crate.)

use rustqueue_api::crd::{
    OperationKind, OperationPhase, OperationStatus, RustQueueSpec, RustQueueStatus,
};

use super::model::{Action, BrokerPod, DrainGoal, Observed, OperationChange, Plan};
use super::operation::{Step, advance, operation_id, withdraw};
use super::preflight::{self, Preflight};
use super::{Phase, REQUEUE_ACTIVE, StorageState, desired_brokers, rollout};
use crate::render::{Desired, names};

/// Inputs of one decision.
pub(super) struct Context<'a> {
    pub spec: &'a RustQueueSpec,
    pub obs: &'a Observed,
    pub desired: &'a Desired,
    pub previous: &'a RustQueueStatus,
    pub now: u64,
    /// The Kodo fences allow draining, replacing or removing a broker (docs/kodo.md); always
    /// true outside the profile.
    pub disruptions_allowed: bool,
    /// The layout of the Kodo Gateways and discovery.
    pub kodo: &'a crate::render::KodoLayout,
}

/// What one branch decided.
struct Outcome {
    phase: Phase,
    message: String,
    step: Option<Step>,
    actions: Vec<Action>,
    /// StatefulSet replicas to apply; `None` applies the runtime objects only.
    replicas: Option<i32>,
}

impl Context<'_> {
    fn name(&self) -> &str {
        &self.desired.name
    }
    fn current(&self) -> i32 {
        self.obs.statefulset_replicas.unwrap_or(0)
    }
    fn desired_n(&self) -> i32 {
        desired_brokers(self.spec, self.obs.eligible_nodes)
    }
    /// More brokers run than are desired: a drained scale-down is due.
    fn shrinking(&self) -> bool {
        self.current() > self.desired_n() && self.current() > 0
    }
    /// Replicas to apply outside a scale-down: grow at once, never shrink without a drain.
    fn grow_to(&self) -> i32 {
        self.desired_n().max(self.current())
    }
    /// Broker Pods of ordinals `0..n`, `None` for a missing one.
    fn set(&self, n: i32) -> Vec<(String, Option<&BrokerPod>)> {
        (0..n)
            .map(|o| {
                let p = names::pod(self.name(), o);
                let b = self.obs.broker(&p);
                (p, b)
            })
            .collect()
    }
    /// Resume every draining broker except `keep`.
    fn resume_all_but(&self, keep: Option<&str>) -> Vec<Action> {
        self.obs
            .brokers
            .iter()
            .filter(|b| b.is_draining() && !b.terminating && Some(b.name.as_str()) != keep)
            .map(|b| Action::Resume {
                pod: b.name.clone(),
            })
            .collect()
    }
}

/// Decide into `out`.
pub(super) fn decide(c: &Context<'_>, storage: &StorageState, out: &mut Plan) {
    let o = choose(c, storage);
    out.phase = o.phase;
    out.message = o.message;
    out.actions
        .extend(preflight::probe_actions(c.obs, c.desired));
    out.actions.push(Action::ApplyRuntime {
        image: runtime_image(c.obs, c.desired),
        kodo: c.kodo.clone(),
    });
    if let Some(replicas) = o.replicas {
        out.actions.push(Action::ApplyBrokerSet { replicas });
        out.actions.extend(stale_config_maps(c));
    }
    if o.actions.iter().any(|a| {
        matches!(
            a,
            Action::Drain { .. } | Action::DeletePod { .. } | Action::Resume { .. }
        )
    }) || matches!(
        o.phase,
        Phase::Rolling | Phase::Draining | Phase::Preflight | Phase::StorageResizing
    ) {
        out.requeue = REQUEUE_ACTIVE;
    }
    out.actions.extend(o.actions);
    let now = crate::status::rfc3339(c.now);
    let previous = c.previous.current_operation.as_ref();
    if let Some(step) = o.step {
        let (op, history) = advance(previous, &c.previous.operation_history, step, &now);
        out.operation = OperationChange::Set(Box::new(op));
        out.operation_history = history;
    } else if let Some(p) = previous.filter(|p| !p.phase.is_outcome())
        && let Some(why) = withdrawn(c, p)
    {
        out.operation_history = withdraw(p, &c.previous.operation_history, &why, &now);
        out.operation = OperationChange::Clear;
    }
}

/// Why the spec no longer asks for `op`, an operation that has not ended and that this
/// reconcile did not continue; `None` while it still does (a rollout held by storage or the
/// Kodo fences keeps its operation).
fn withdrawn(c: &Context<'_>, op: &OperationStatus) -> Option<String> {
    let asked = match op.kind {
        OperationKind::Rollout | OperationKind::Rollback => rollout::identity(c.desired).1 == op.id,
        OperationKind::Maintenance => c.spec.maintenance.as_ref().is_some_and(|m| {
            m.enabled && operation_id(OperationKind::Maintenance, &[&m.broker, "enabled"]) == op.id
        }),
        OperationKind::ScaleUp => {
            operation_id(OperationKind::ScaleUp, &[&c.desired_n().to_string()]) == op.id
        }
        OperationKind::ScaleDown => c.current() > c.desired_n(),
    };
    (!asked).then(|| match op.kind {
        OperationKind::Rollout | OperationKind::Rollback => format!(
            "withdrawn: the spec no longer asks for {} at revision {}",
            op.target, op.revision
        ),
        OperationKind::Maintenance => {
            format!(
                "withdrawn: spec.maintenance no longer asks for {}",
                op.target
            )
        }
        OperationKind::ScaleUp | OperationKind::ScaleDown => format!(
            "withdrawn: the desired broker count is {} now",
            c.desired_n()
        ),
    })
}

/// The image of the runtime workloads: the one an outdated broker still runs, else the
/// target's (every broker runs it, or there is no broker yet).
pub(super) fn runtime_image(obs: &Observed, desired: &Desired) -> String {
    obs.brokers
        .iter()
        .filter(|b| !b.runs(&desired.revision))
        .find_map(|b| b.image.clone())
        .unwrap_or_else(|| desired.spec.image.clone())
}

/// The gates after Kodo, in order (docs/operator.md, "Decision order"): the first that has
/// something to say decides; the rollout (or `Ready`) comes last.
fn choose(c: &Context<'_>, storage: &StorageState) -> Outcome {
    preflight_gate(c)
        .or_else(|| storage_gate(c, storage))
        .or_else(|| nodes_gate(c))
        .or_else(|| fences_gate(c))
        .or_else(|| maintenance(c))
        .or_else(|| c.shrinking().then(|| scale_down(c)))
        .or_else(|| scale_up(c))
        .unwrap_or_else(|| rollout(c))
}

/// The target image and the running brokers must support the desired set: `Preflight` or
/// `PreflightBlocked`, drains resumed, runtime objects only.
fn preflight_gate(c: &Context<'_>) -> Option<Outcome> {
    let (phase, op_phase, message) = match preflight::check(c.obs, c.desired) {
        Preflight::Passed => return None,
        Preflight::Pending(m) => (Phase::Preflight, OperationPhase::Preflight, m),
        Preflight::Blocked(m) => (Phase::PreflightBlocked, OperationPhase::Blocked, m),
    };
    let outdated = c.obs.brokers.iter().any(|b| !b.runs(&c.desired.revision));
    let step = outdated.then(|| rollout::preflight_step(c.desired, c.obs, op_phase, &message));
    Some(Outcome {
        phase,
        message,
        step,
        actions: c.resume_all_but(None),
        replicas: None,
    })
}

/// Claims that contradict the spec block (`StorageBlocked`); claims below the size grow
/// (`StorageResizing`). Either way drains are resumed and only runtime objects applied.
fn storage_gate(c: &Context<'_>, storage: &StorageState) -> Option<Outcome> {
    match storage {
        StorageState::Blocked(m) => Some(Outcome {
            phase: Phase::StorageBlocked,
            message: m.clone(),
            step: None,
            actions: c.resume_all_but(None),
            replicas: None,
        }),
        StorageState::Resizing { message, grow } => {
            let mut actions: Vec<Action> = grow
                .iter()
                .map(|n| Action::PatchClaim {
                    name: n.clone(),
                    size: c.desired.claim_size.clone(),
                })
                .collect();
            actions.extend(c.resume_all_but(None));
            Some(Outcome {
                phase: Phase::StorageResizing,
                message: message.clone(),
                step: None,
                actions,
                replicas: None,
            })
        }
        StorageState::Ready | StorageState::Pending(_) => None,
    }
}

/// Fewer eligible Nodes than brokers desired: `InsufficientNodes`, drains resumed.
fn nodes_gate(c: &Context<'_>) -> Option<Outcome> {
    let desired = c.desired_n();
    (c.obs.eligible_nodes < desired).then(|| Outcome {
        phase: Phase::InsufficientNodes,
        message: format!(
            "{} eligible nodes; desired is {desired} and minimum is {}: label more Nodes with the eligible selector or lower spec.minBrokers",
            c.obs.eligible_nodes, c.spec.min_brokers
        ),
        step: None,
        actions: c.resume_all_but(None),
        replicas: Some(c.grow_to()),
    })
}

/// A maintenance drain or a scale-down waits while the Kodo fences are open.
fn fences_gate(c: &Context<'_>) -> Option<Outcome> {
    let enabled_maintenance = c.spec.maintenance.as_ref().is_some_and(|m| m.enabled);
    (!c.disruptions_allowed && (enabled_maintenance || c.shrinking())).then(|| Outcome {
        phase: Phase::WaitingForKodoCutover,
        message:
            "a broker disruption (maintenance or scale-down) waits for the Kodo cutover fences"
                .into(),
        step: None,
        actions: c.resume_all_but(None),
        replicas: Some(c.grow_to()),
    })
}

/// The rollout to the target revision (one broker at a time), held while the Kodo fences
/// are open; `Ready` (or waiting for a broker down for its own reasons) when none is due.
fn rollout(c: &Context<'_>) -> Outcome {
    if !c.disruptions_allowed {
        let outdated = c
            .set(c.current())
            .iter()
            .any(|(_, b)| !b.is_some_and(|b| b.runs(&c.desired.revision)));
        let mut o = steady(c, None);
        if outdated {
            o.phase = Phase::WaitingForKodoCutover;
            o.message =
                "brokers are replaced with the new revision only once the Kodo cutover fences hold"
                    .into();
        }
        return o;
    }
    let input = rollout::Input {
        desired: c.desired,
        brokers: &c.obs.brokers,
        replicas: c.current(),
        previous: c.previous.current_operation.as_ref(),
        now: c.now,
    };
    match rollout::decide(&input) {
        Some((step, actions)) if step.phase != OperationPhase::Completed => Outcome {
            phase: rollout_phase(step.phase),
            message: step.message.clone(),
            step: Some(step),
            actions,
            replicas: Some(c.grow_to()),
        },
        done => steady(c, done),
    }
}

fn rollout_phase(p: OperationPhase) -> Phase {
    match p {
        OperationPhase::Blocked => Phase::RolloutBlocked,
        OperationPhase::Failed => Phase::RolloutFailed,
        OperationPhase::Paused => Phase::RolloutPaused,
        OperationPhase::AwaitingCanaryApproval => Phase::RolloutAwaitingApproval,
        OperationPhase::Completed => Phase::Ready,
        _ => Phase::Rolling,
    }
}

/// No operation due: Ready, or waiting for a broker that is down for its own reasons.
fn steady(c: &Context<'_>, done: Option<(Step, Vec<Action>)>) -> Outcome {
    let n = c.current();
    let down: Vec<String> = c
        .set(n)
        .into_iter()
        .filter_map(|(p, b)| match b {
            Some(b) if b.is_ready() => None,
            Some(b) => Some(format!("{p}: {}", b.why_not_ready())),
            None => Some(format!("{p}: PodMissing")),
        })
        .collect();
    let (step, mut actions) = done.map_or((None, Vec::new()), |(s, a)| (Some(s), a));
    let step = step.or_else(|| finished_scale_down(c));
    if actions.is_empty() {
        actions = c.resume_all_but(None);
    }
    let (phase, message) = if down.is_empty() {
        (Phase::Ready, format!("{n}/{n} brokers ready"))
    } else {
        (
            Phase::WaitingForBrokers,
            format!(
                "{}/{n} brokers ready; waiting for {}",
                n - i32::try_from(down.len()).unwrap_or(n),
                down.join(", ")
            ),
        )
    };
    Outcome {
        phase,
        message,
        step,
        actions,
        replicas: Some(c.grow_to()),
    }
}

/// A scale-down whose StatefulSet is already below its target ordinal is complete, even when
/// the reconcile that lowered the replicas could not record it: the operation is re-derived
/// from the cluster, so status never keeps reporting a drain that is over.
fn finished_scale_down(c: &Context<'_>) -> Option<Step> {
    let p = c.previous.current_operation.as_ref()?;
    if p.kind != OperationKind::ScaleDown || p.phase.is_finished() {
        return None;
    }
    let ordinal: i32 = p.target.rsplit('-').next()?.parse().ok()?;
    (c.current() <= ordinal).then(|| Step {
        id: p.id.clone(),
        kind: OperationKind::ScaleDown,
        phase: OperationPhase::Completed,
        target: p.target.clone(),
        revision: c.desired.revision.clone(),
        message: format!(
            "{} removed: scaled to {} brokers, its PVC is kept",
            p.target,
            c.current()
        ),
        previous_image: None,
        current_broker: Some(p.target.clone()),
    })
}

/// Growing: apply the new size at once and wait for every broker to be Ready.
fn scale_up(c: &Context<'_>) -> Option<Outcome> {
    let desired = c.desired_n();
    let id = operation_id(OperationKind::ScaleUp, &[&desired.to_string()]);
    let growing = c.current() < desired;
    let continuing = c.previous.current_operation.as_ref().is_some_and(|p| {
        p.id == id && p.kind == OperationKind::ScaleUp && p.phase != OperationPhase::Completed
    });
    if !growing && !continuing {
        return None;
    }
    let unready: Vec<String> = c
        .set(desired)
        .into_iter()
        .filter(|(_, b)| !b.is_some_and(BrokerPod::is_ready))
        .map(|(p, _)| p)
        .collect();
    let done = !growing && unready.is_empty();
    let message = if growing {
        format!("scaling from {} to {desired} brokers", c.current())
    } else {
        format!("scaled to {desired} brokers")
    };
    let step = Step {
        id,
        kind: OperationKind::ScaleUp,
        phase: if done {
            OperationPhase::Completed
        } else {
            OperationPhase::WaitingForReady
        },
        target: desired.to_string(),
        revision: c.desired.revision.clone(),
        message: if done || unready.is_empty() {
            message.clone()
        } else {
            format!("{message}; waiting for {}", unready.join(", "))
        },
        previous_image: None,
        current_broker: None,
    };
    if done {
        let mut o = steady(c, None);
        o.step = Some(step);
        return Some(o);
    }
    Some(Outcome {
        phase: Phase::Scaling,
        message: step.message.clone(),
        step: Some(step),
        actions: c.resume_all_but(None),
        replicas: Some(desired),
    })
}

/// Drained scale-down: the highest ordinal drains to empty, then replicas − 1 (its PVC stays).
fn scale_down(c: &Context<'_>) -> Outcome {
    let current = c.current();
    let target = names::pod(c.name(), current - 1);
    let id = operation_id(
        OperationKind::ScaleDown,
        &[&target, &c.desired_n().to_string()],
    );
    let others_down: Vec<String> = c
        .set(current - 1)
        .into_iter()
        .filter(|(_, b)| !b.is_some_and(BrokerPod::is_ready))
        .map(|(p, _)| p)
        .collect();
    let step = |phase, message: String| Step {
        id: id.clone(),
        kind: OperationKind::ScaleDown,
        phase,
        target: target.clone(),
        revision: c.desired.revision.clone(),
        message,
        previous_image: None,
        current_broker: Some(target.clone()),
    };
    let (phase, message, mut actions, replicas) = if !others_down.is_empty() {
        (
            OperationPhase::WaitingForReady,
            format!(
                "scale-down drains {target} only when every other broker is Ready; waiting for {}",
                others_down.join(", ")
            ),
            c.resume_all_but(None),
            current,
        )
    } else {
        match c.obs.broker(&target) {
            // Only a broker seen empty is removed: a Pod that is gone (being recreated by the
            // StatefulSet on its PVC) may still hold messages.
            None => (
                OperationPhase::WaitingForReady,
                format!("waiting for {target} to be back before draining it to empty"),
                Vec::new(),
                current,
            ),
            Some(b) if !b.drain.is_some_and(|s| DrainGoal::Empty.reached(&s)) => (
                OperationPhase::Draining,
                format!(
                    "draining {target} to empty before removing it (its PVC is kept): {}; consumers must finish its backlog",
                    b.drain_progress()
                ),
                vec![Action::Drain {
                    pod: target.clone(),
                    goal: DrainGoal::Empty,
                }],
                current,
            ),
            Some(_) => (
                OperationPhase::Completed,
                format!(
                    "{target} is empty: scaling from {current} to {} brokers, its PVC is kept",
                    current - 1
                ),
                Vec::new(),
                current - 1,
            ),
        }
    };
    actions.extend(c.resume_all_but(Some(&target)));
    actions.dedup();
    Outcome {
        phase: Phase::Draining,
        message: message.clone(),
        step: Some(step(phase, message)),
        actions,
        replicas: Some(replicas),
    }
}

/// Maintenance of one named broker: drain it (publishes refused, consumers keep draining)
/// while every other broker is Ready; resume it when the request is disabled.
fn maintenance(c: &Context<'_>) -> Option<Outcome> {
    let m = c.spec.maintenance.as_ref()?;
    let target = m.broker.as_str();
    let enabled_id = operation_id(OperationKind::Maintenance, &[target, "enabled"]);
    if !m.enabled {
        let was = c
            .previous
            .current_operation
            .as_ref()
            .is_some_and(|p| p.id == enabled_id);
        let draining = c.obs.broker(target).is_some_and(BrokerPod::is_draining);
        if !was && !draining {
            return None;
        }
        let mut o = steady(c, None);
        o.actions = vec![Action::Resume { pod: target.into() }];
        o.step = Some(Step {
            id: operation_id(OperationKind::Maintenance, &[target, "disabled"]),
            kind: OperationKind::Maintenance,
            phase: OperationPhase::Completed,
            target: target.into(),
            revision: c.desired.revision.clone(),
            message: format!("maintenance of {target} ended: resumed"),
            previous_image: None,
            current_broker: Some(target.into()),
        });
        return Some(o);
    }
    let step = |phase, message: String| Step {
        id: enabled_id.clone(),
        kind: OperationKind::Maintenance,
        phase,
        target: target.into(),
        revision: c.desired.revision.clone(),
        message,
        previous_image: None,
        current_broker: Some(target.into()),
    };
    let others_down: Vec<String> = c
        .set(c.current())
        .into_iter()
        .filter(|(p, b)| p != target && !b.is_some_and(BrokerPod::is_ready))
        .map(|(p, _)| p)
        .collect();
    let blocked = |msg: String, actions| Outcome {
        phase: Phase::MaintenanceBlocked,
        message: msg.clone(),
        step: Some(step(OperationPhase::Blocked, msg)),
        actions,
        replicas: Some(c.grow_to()),
    };
    let Some(b) = c.obs.broker(target) else {
        return Some(blocked(
            format!("spec.maintenance.broker {target} is not a broker Pod of this RustQueue"),
            c.resume_all_but(None),
        ));
    };
    if !others_down.is_empty() && !b.is_draining() {
        return Some(blocked(
            format!(
                "maintenance of {target} needs every other broker Ready; waiting for {}",
                others_down.join(", ")
            ),
            c.resume_all_but(None),
        ));
    }
    let empty = b.drain.is_some_and(|s| DrainGoal::Empty.reached(&s));
    let (phase, msg) = if empty {
        (
            OperationPhase::Completed,
            format!("{target} is drained for maintenance (publishes refused, nothing stored)"),
        )
    } else {
        (
            OperationPhase::Draining,
            format!(
                "{target} is draining for maintenance: publishes refused, consumers keep draining its backlog ({})",
                b.drain_progress()
            ),
        )
    };
    let mut actions = vec![Action::Drain {
        pod: target.into(),
        goal: DrainGoal::Empty,
    }];
    actions.extend(c.resume_all_but(Some(target)));
    Some(Outcome {
        phase: Phase::Maintenance,
        message: msg.clone(),
        step: Some(step(phase, msg)),
        actions,
        replicas: Some(c.grow_to()),
    })
}

/// Broker ConfigMaps that neither the target nor any Pod uses.
fn stale_config_maps(c: &Context<'_>) -> Vec<Action> {
    let prefix = names::config_map_prefix(c.name());
    let legacy = format!("{}-config", c.name());
    c.obs
        .config_maps
        .iter()
        .filter(|n| n.starts_with(&prefix) || **n == legacy)
        .filter(|n| **n != c.desired.config_map)
        .filter(|n| {
            !c.obs
                .brokers
                .iter()
                .any(|b| b.config_map.as_deref() == Some(n.as_str()))
        })
        .map(|n| Action::DeleteConfigMap { name: n.clone() })
        .collect()
}
