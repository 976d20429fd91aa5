//! Drain-aware rollout (and rollback): replace one broker at a time with the target
//! pod-template revision. A broker is drained with deliveries frozen until nothing is in
//! flight, then its Pod is deleted; the StatefulSet (`OnDelete`) recreates it from the target
//! template on the same PVC, so the backlog stays. The next broker waits until every broker of
//! the target revision is Ready. See docs/operator.md for the decision order.

use rustqueue_api::crd::{OperationKind, OperationPhase, OperationStatus};

use super::model::{Action, BrokerPod, DrainGoal, Observed};
use super::operation::{Step, operation_id, unix_seconds};
use crate::render::{Desired, names};

/// What the rollout engine sees.
pub struct Input<'a> {
    /// The desired set (target revision, effective image, rollout controls).
    pub desired: &'a Desired,
    /// Broker Pods.
    pub brokers: &'a [BrokerPod],
    /// StatefulSet replicas.
    pub replicas: i32,
    /// The operation in status.
    pub previous: Option<&'a OperationStatus>,
    /// Now, unix seconds.
    pub now: u64,
}

/// The kind and id of the rollout to `d`: a new image, revision or retry nonce is a new one.
pub(super) fn identity(d: &Desired) -> (OperationKind, String) {
    let r = &d.spec.rollout;
    let kind = if r.rollback_to_image.is_some() {
        OperationKind::Rollback
    } else {
        OperationKind::Rollout
    };
    let id = operation_id(
        kind,
        &[&d.spec.image, &format!("{}:{}", d.revision, r.retry_nonce)],
    );
    (kind, id)
}

/// The rollout operation while preflight holds it (`Preflight` or `Blocked`).
pub fn preflight_step(d: &Desired, obs: &Observed, phase: OperationPhase, message: &str) -> Step {
    let (kind, id) = identity(d);
    Step {
        id,
        kind,
        phase,
        target: d.spec.image.clone(),
        revision: d.revision.clone(),
        message: message.to_string(),
        previous_image: obs
            .brokers
            .iter()
            .find(|b| !b.runs(&d.revision))
            .and_then(|b| b.image.clone()),
        current_broker: None,
    }
}

/// The rollout's step and its actions; `None` when no rollout is due (every Pod runs the
/// target revision and no rollout to it is in progress).
pub fn decide(i: &Input<'_>) -> Option<(Step, Vec<Action>)> {
    let d = i.desired;
    let r = &d.spec.rollout;
    let (kind, id) = identity(d);
    let same = i.previous.filter(|p| p.id == id);
    let outdated: Vec<&BrokerPod> = i.brokers.iter().filter(|b| !b.runs(&d.revision)).collect();
    if outdated.is_empty() && same.is_none_or(|p| p.phase == OperationPhase::Completed) {
        return None;
    }
    let previous_image = same
        .and_then(|p| p.previous_image.clone())
        .or_else(|| outdated.first().and_then(|b| b.image.clone()));
    let step = |phase, message: String, broker: Option<&str>| Step {
        id: id.clone(),
        kind,
        phase,
        target: d.spec.image.clone(),
        revision: d.revision.clone(),
        message,
        previous_image: previous_image.clone(),
        current_broker: broker.map(str::to_string),
    };
    let draining: Vec<&BrokerPod> = outdated
        .iter()
        .copied()
        .filter(|b| !b.is_ready() && b.is_draining() && !b.terminating)
        .collect();
    let resume_all = || -> Vec<Action> {
        draining
            .iter()
            .map(|b| Action::Resume {
                pod: b.name.clone(),
            })
            .collect()
    };
    if let Some(p) = same {
        if p.phase == OperationPhase::Failed {
            return Some((
                step(OperationPhase::Failed, p.message.clone(), None),
                resume_all(),
            ));
        }
        let started = unix_seconds(&p.started_at).unwrap_or(i.now);
        if !p.phase.is_waiting_for_a_person_or_final()
            && i.now.saturating_sub(started) >= r.timeout_seconds
        {
            let at = p.current_broker.as_deref().unwrap_or("no broker");
            let msg = format!(
                "rollout to revision {} did not finish within {}s (stalled at {at}: {}); change spec.rollout.retryNonce to retry or set spec.rollout.rollbackToImage",
                d.revision, r.timeout_seconds, p.message
            );
            return Some((step(OperationPhase::Failed, msg, None), resume_all()));
        }
    }
    Some(replace_next(i, &outdated, &draining, &step, resume_all()))
}

type StepFn<'a> = dyn Fn(OperationPhase, String, Option<&str>) -> Step + 'a;

/// What one decision stage answers: the step and its actions, or `None` to go on.
type Verdict = Option<(Step, Vec<Action>)>;

/// Decision rows a-j of docs/operator.md, in order: wait until the broker set has settled
/// (a-d), keep to one disruption at a time (e-g), let people hold the rollout (h-i), then
/// replace the highest-ordinal outdated broker (j).
fn replace_next(
    i: &Input<'_>,
    outdated: &[&BrokerPod],
    draining: &[&BrokerPod],
    step: &StepFn<'_>,
    resume_all: Vec<Action>,
) -> (Step, Vec<Action>) {
    if let Some(v) = settle(i, outdated, draining, step, &resume_all)
        .or_else(|| one_disruption(i, draining, step, &resume_all))
        .or_else(|| human_gates(i, outdated, step))
    {
        return v;
    }
    // j. the highest-ordinal outdated broker.
    let next = outdated
        .iter()
        .max_by_key(|b| ordinal(&b.name))
        .expect("outdated is not empty");
    replace(step, next)
}

/// Rows a-d: every Pod exists, the disruption in flight has finished, replaced brokers are
/// Ready, and no outdated broker is down for a reason of its own.
fn settle(
    i: &Input<'_>,
    outdated: &[&BrokerPod],
    draining: &[&BrokerPod],
    step: &StepFn<'_>,
    resume_all: &[Action],
) -> Verdict {
    use OperationPhase as P;
    let d = i.desired;
    let wait = |msg: String, broker: Option<&str>, actions: Vec<Action>| {
        Some((step(P::WaitingForReady, msg, broker), actions))
    };
    // a. the Pod set must be exactly ordinals 0..N-1.
    let missing: Vec<String> = (0..i.replicas)
        .map(|o| names::pod(&d.name, o))
        .filter(|n| !i.brokers.iter().any(|b| &b.name == n))
        .collect();
    if !missing.is_empty() {
        return wait(
            format!("waiting for broker Pods {} to exist", missing.join(", ")),
            None,
            Vec::new(),
        );
    }
    // A deleted outdated Pod is the one disruption in flight.
    if let Some(b) = outdated.iter().find(|b| b.terminating) {
        return Some((
            step(
                P::Replacing,
                format!("replacing {}: waiting for the old Pod to terminate", b.name),
                Some(b.name.as_str()),
            ),
            Vec::new(),
        ));
    }
    // b. nothing outdated: done once every broker is Ready.
    let current_unready = i
        .brokers
        .iter()
        .find(|b| b.runs(&d.revision) && !b.is_ready());
    let not_ready_yet = |b: &BrokerPod| {
        format!(
            "waiting for {} (revision {}) to become Ready: {}",
            b.name,
            d.revision,
            b.why_not_ready()
        )
    };
    if outdated.is_empty() {
        return match current_unready {
            None => Some((
                step(
                    P::Completed,
                    format!("all brokers run revision {}", d.revision),
                    None,
                ),
                i.brokers
                    .iter()
                    .filter(|b| b.is_draining())
                    .map(|b| Action::Resume {
                        pod: b.name.clone(),
                    })
                    .collect(),
            )),
            Some(b) => wait(not_ready_yet(b), Some(b.name.as_str()), Vec::new()),
        };
    }
    // c. a replaced broker is not Ready yet: never disrupt the next one.
    if let Some(b) = current_unready {
        return wait(not_ready_yet(b), Some(b.name.as_str()), resume_all.to_vec());
    }
    // d. an unexpected outage: resume our drain instead of compounding it.
    let outage = outdated
        .iter()
        .find(|b| !b.is_ready() && !draining.iter().any(|x| x.name == b.name))?;
    wait(
        format!(
            "refusing to make another broker unavailable: {} is not Ready ({})",
            outage.name,
            outage.why_not_ready()
        ),
        Some(outage.name.as_str()),
        resume_all.to_vec(),
    )
}

/// Rows e-g: a single broker is never replaced, two drains never overlap, and a drain under
/// way is finished before another starts.
fn one_disruption(
    i: &Input<'_>,
    draining: &[&BrokerPod],
    step: &StepFn<'_>,
    resume_all: &[Action],
) -> Verdict {
    use OperationPhase as P;
    // e. the single-broker gate.
    if i.replicas < 2 {
        return Some((
            step(P::Blocked, "rolling replacement needs at least two brokers: a single broker cannot be replaced without an outage; scale to two or more brokers first".into(), None),
            resume_all.to_vec(),
        ));
    }
    // f. one disruption at a time.
    if draining.len() > 1 {
        return Some((
            step(
                P::WaitingForReady,
                format!(
                    "{} brokers were draining; resuming them to keep one disruption at a time",
                    draining.len()
                ),
                None,
            ),
            resume_all.to_vec(),
        ));
    }
    // g. continue the broker already draining.
    draining.first().map(|b| replace(step, b))
}

/// Rows h-i: `spec.rollout.paused`, and canary approval after the first replaced broker.
fn human_gates(i: &Input<'_>, outdated: &[&BrokerPod], step: &StepFn<'_>) -> Verdict {
    use OperationPhase as P;
    let d = i.desired;
    let r = &d.spec.rollout;
    // h. paused.
    if r.paused {
        return Some((
            step(
                P::Paused,
                format!(
                    "rollout to revision {} is paused (spec.rollout.paused); {} brokers still outdated",
                    d.revision,
                    outdated.len()
                ),
                None,
            ),
            Vec::new(),
        ));
    }
    // i. canary approval after the first replaced broker.
    let canary = i.brokers.iter().find(|b| b.runs(&d.revision))?;
    if r.require_canary_approval && r.approved_revision.as_deref() != Some(d.revision.as_str()) {
        return Some((
            step(
                P::AwaitingCanaryApproval,
                format!(
                    "canary {} runs revision {}; set spec.rollout.approvedRevision to {} to continue",
                    canary.name, d.revision, d.revision
                ),
                Some(canary.name.as_str()),
            ),
            Vec::new(),
        ));
    }
    None
}

fn replace(step: &StepFn<'_>, b: &BrokerPod) -> (Step, Vec<Action>) {
    let goal = DrainGoal::Quiesced;
    if b.drain.is_some_and(|s| goal.reached(&s)) {
        (
            step(
                OperationPhase::Replacing,
                format!(
                    "{} is quiesced: deleting its Pod to recreate it on its PVC",
                    b.name
                ),
                Some(b.name.as_str()),
            ),
            vec![Action::DeletePod {
                pod: b.name.clone(),
            }],
        )
    } else {
        (
            step(
                OperationPhase::Draining,
                format!(
                    "draining {} (publishes refused, deliveries frozen) until nothing is in flight: {}",
                    b.name,
                    b.drain_progress()
                ),
                Some(b.name.as_str()),
            ),
            vec![Action::Drain {
                pod: b.name.clone(),
                goal,
            }],
        )
    }
}

/// The ordinal of `<n>-<ordinal>`.
pub fn ordinal(pod: &str) -> i64 {
    pod.rsplit_once('-')
        .and_then(|(_, o)| o.parse().ok())
        .unwrap_or(-1)
}
