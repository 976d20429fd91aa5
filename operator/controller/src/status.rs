//! From a [`Plan`] and the previous status to the next status: transition times are kept while
//! a condition's (status, reason) is unchanged, `observedGeneration` is stamped, and phase
//! changes become Events.

use rustqueue_api::crd::{Condition, ConditionStatus, RustQueueStatus};

use crate::plan::{ConditionType, OperationChange, Phase, Plan, RESTORE_FAILED, RESTORED};

/// A phase change worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// New phase (the Event reason).
    pub reason: String,
    /// The plan's message (the Event note).
    pub note: String,
    /// Warning when the new phase is degraded.
    pub warning: bool,
}

/// The status to write after `plan`, and the transition to announce, if any.
pub fn next_status(
    previous: &RustQueueStatus,
    plan: &Plan,
    generation: Option<i64>,
    now: &str,
) -> (RustQueueStatus, Option<Transition>) {
    let conditions = plan
        .conditions
        .iter()
        .map(|c| {
            let status = ConditionStatus::from(c.status);
            let kept = previous
                .condition(c.type_.as_str())
                .filter(|p| p.status == status && p.reason == c.reason)
                .map(|p| p.last_transition_time.clone());
            Condition {
                type_: c.type_.as_str().to_string(),
                status,
                reason: c.reason.clone(),
                message: c.message.clone(),
                observed_generation: generation,
                last_transition_time: kept.unwrap_or_else(|| now.to_string()),
            }
        })
        // Conditions this plan did not decide (e.g. BrokersAvailable under InvalidSpec) keep
        // their last value.
        .chain(
            previous
                .conditions
                .iter()
                .filter(|p| !plan.conditions.iter().any(|c| c.type_ == p.type_.as_str()))
                .cloned(),
        );
    let mut conditions: Vec<Condition> = conditions.collect();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));

    let phase = plan.phase.as_str().to_string();
    let transition = (previous.phase.as_deref() != Some(phase.as_str())).then(|| Transition {
        reason: phase.clone(),
        note: plan.message.clone(),
        warning: plan.phase.is_degraded(),
    });
    let keep_counts = plan.phase == Phase::InvalidSpec;
    let status = RustQueueStatus {
        observed_generation: generation,
        phase: Some(phase),
        message: Some(plan.message.clone()),
        desired_brokers: if keep_counts {
            previous.desired_brokers
        } else {
            Some(plan.desired_brokers)
        },
        ready_brokers: if keep_counts {
            previous.ready_brokers
        } else {
            Some(plan.ready_brokers)
        },
        active_storage_feature_level: Some(
            previous
                .active_storage_feature_level
                .unwrap_or(1)
                .max(plan.active_feature_level),
        ),
        conditions,
        current_operation: match &plan.operation {
            OperationChange::Keep => previous.current_operation.clone(),
            OperationChange::Set(op) => Some(op.as_ref().clone()),
            OperationChange::Clear => None,
        },
        operation_history: plan.operation_history.clone(),
        orphaned_pvcs: if keep_counts {
            previous.orphaned_pvcs.clone()
        } else {
            plan.orphaned_pvcs.clone()
        },
        desired_storage_size: plan
            .desired_storage_size
            .clone()
            .or_else(|| previous.desired_storage_size.clone()),
        kodo_producer_restart_baseline_nonce: plan.kodo_baseline_nonce.clone(),
        tiering_local_retention_used: (plan.tiering_local_retention_used
            || previous.tiering_local_retention_used == Some(true))
        .then_some(true),
        restores: plan.restores.clone(),
    };
    (status, transition)
}

/// The status written when a reconcile fails (API errors): Degraded with the error, counts
/// and other conditions kept.
pub fn error_status(
    previous: &RustQueueStatus,
    error: &str,
    generation: Option<i64>,
    now: &str,
) -> (RustQueueStatus, Option<Transition>) {
    let message = format!("reconciliation failed: {error}");
    let plan = Plan {
        phase: Phase::ReconcileError,
        message: message.clone(),
        desired_brokers: previous.desired_brokers.unwrap_or(0),
        ready_brokers: previous.ready_brokers.unwrap_or(0),
        conditions: [
            ConditionType::Degraded,
            ConditionType::Progressing,
            ConditionType::Ready,
        ]
        .into_iter()
        .map(|t| crate::plan::ConditionSpec {
            type_: t,
            status: t == ConditionType::Degraded,
            reason: "ReconcileError".into(),
            message: message.clone(),
        })
        .collect(),
        actions: Vec::new(),
        operation: OperationChange::Keep,
        operation_history: previous.operation_history.clone(),
        active_feature_level: previous.active_storage_feature_level.unwrap_or(1),
        orphaned_pvcs: previous.orphaned_pvcs.clone(),
        desired_storage_size: previous.desired_storage_size.clone(),
        requeue: crate::plan::REQUEUE,
        kodo_baseline_nonce: previous.kodo_producer_restart_baseline_nonce.clone(),
        restores: previous.restores.clone(),
        tiering_local_retention_used: previous.tiering_local_retention_used == Some(true),
    };
    next_status(previous, &plan, generation, now)
}

/// An Event for each restore from the bucket that ended since `previous` (docs/tiering.md):
/// `RestoredFromBucket` with its counts (a Warning when it lost messages or met damaged
/// objects), or `RestoreFromBucketFailed`.
pub fn restore_events(previous: &RustQueueStatus, next: &RustQueueStatus) -> Vec<Transition> {
    next.restores
        .iter()
        .filter(|r| r.phase == RESTORED || r.phase == RESTORE_FAILED)
        .filter(|r| !previous.restores.contains(r))
        .map(|r| {
            let restored = r.phase == RESTORED;
            let lossy = r.lost_messages.unwrap_or(0) > 0 || r.damaged_objects.unwrap_or(0) > 0;
            Transition {
                reason: if restored {
                    "RestoredFromBucket".into()
                } else {
                    "RestoreFromBucketFailed".into()
                },
                note: format!("{}: {}", r.broker, r.message),
                warning: !restored || lossy,
            }
        })
        .collect()
}

/// Format unix seconds as RFC 3339 UTC with second precision (`2026-11-30T05:00:00Z`).
pub fn rfc3339(unix_secs: u64) -> String {
    jiff::Timestamp::from_second(unix_secs as i64)
        .map_or_else(|_| unix_secs.to_string(), |t| t.to_string())
}

/// Now, as RFC 3339.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Observed, Plan};
    use crate::render::{Desired, DesiredInputs, Owner};
    use rustqueue_api::crd::RustQueueSpec;

    fn obs(ready: bool) -> Observed {
        let b = Observed::test().brokers(1).at_revision("r");
        if ready {
            b.build()
        } else {
            b.unready(0).build()
        }
    }

    fn spec() -> RustQueueSpec {
        RustQueueSpec::with_image("img")
    }

    fn plan(_name: &str, spec: &RustQueueSpec, obs: &Observed) -> Plan {
        let owner = Owner {
            name: "q",
            namespace: "ns",
            uid: "u",
        };
        let inputs = DesiredInputs {
            tiering_secret_revision: None,
            auth_secret_name: "q-auth".into(),
            auth_secret_revision: "7".into(),
            claim_template_size: None,
            feature_level_floor: 1,
        };
        let mut d = Desired::render(&owner, spec, &inputs);
        d.revision = "r".into();
        d.probe_pod = "q-preflight-target".into();
        crate::plan::plan(spec, obs, &d, &RustQueueStatus::default(), 1_000)
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_928_461), "2026-11-29T05:01:01Z");
    }

    #[test]
    fn transition_time_is_kept_while_status_and_reason_are_unchanged() {
        let p = plan("q", &spec(), &obs(true));
        let (s1, t1) = next_status(&RustQueueStatus::default(), &p, Some(1), "T1");
        assert_eq!(t1.unwrap().reason, "Ready");
        let (s2, t2) = next_status(&s1, &p, Some(2), "T2");
        assert!(t2.is_none(), "no phase change, no event");
        assert!(s2.conditions.iter().all(|c| c.last_transition_time == "T1"));
        assert_eq!(s2.observed_generation, Some(2));
        assert!(
            s2.conditions
                .iter()
                .all(|c| c.observed_generation == Some(2))
        );

        let down = plan("q", &spec(), &obs(false));
        let (s3, t3) = next_status(&s2, &down, Some(2), "T3");
        assert_eq!(t3.unwrap().reason, "WaitingForBrokers");
        let ready = s3.condition("Ready").unwrap();
        assert_eq!(
            (ready.status, ready.last_transition_time.as_str()),
            (ConditionStatus::False, "T3")
        );
        assert_eq!(
            s3.condition("StorageReady").unwrap().last_transition_time,
            "T1"
        );
        assert_eq!(s3.ready_brokers, Some(0));
    }

    #[test]
    fn invalid_spec_keeps_counts_and_undecided_conditions() {
        let (s1, _) = next_status(
            &RustQueueStatus::default(),
            &plan("q", &spec(), &obs(true)),
            Some(1),
            "T1",
        );
        let mut bad = spec();
        bad.min_brokers = 0;
        let (s2, t) = next_status(&s1, &plan("q", &bad, &obs(true)), Some(2), "T2");
        let t = t.unwrap();
        assert!(t.warning && t.reason == "InvalidSpec");
        assert_eq!(s2.ready_brokers, Some(1));
        assert_eq!(
            s2.condition("BrokersAvailable")
                .unwrap()
                .last_transition_time,
            "T1"
        );
        assert_eq!(
            s2.condition("Degraded").unwrap().status,
            ConditionStatus::True
        );
        let types: Vec<&str> = s2.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "BrokersAvailable",
                "Degraded",
                "KodoCleanupActive",
                "KodoCutoverReady",
                "KodoDecommissionConfirmed",
                "KodoDirectBrokersAdvertised",
                "KodoGatewaysActive",
                "KodoGatewaysAdvertised",
                "KodoGatewaysReady",
                "KodoProducerRestartConfirmed",
                "Maintenance",
                "OrphanedPVCs",
                "Progressing",
                "Ready",
                "RuntimeAvailable",
                "StorageDamage",
                "StorageReady",
                "Upgradeable"
            ]
        );
    }

    #[test]
    fn errors_are_degraded_and_keep_the_other_conditions() {
        let (s1, _) = next_status(
            &RustQueueStatus::default(),
            &plan("q", &spec(), &obs(true)),
            Some(1),
            "T1",
        );
        let (s2, t) = error_status(&s1, "apply StatefulSet q: forbidden", Some(1), "T2");
        assert_eq!(s2.phase.as_deref(), Some("ReconcileError"));
        assert_eq!(
            t.unwrap().note,
            "reconciliation failed: apply StatefulSet q: forbidden"
        );
        assert_eq!(
            s2.condition("Degraded").unwrap().status,
            ConditionStatus::True
        );
        assert_eq!(
            s2.condition("Ready").unwrap().status,
            ConditionStatus::False
        );
        assert_eq!(
            s2.condition("BrokersAvailable").unwrap().status,
            ConditionStatus::True
        );
        assert_eq!(s2.ready_brokers, Some(1));
    }
}
