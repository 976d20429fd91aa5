//! Table tests: one row per transition of `plan` (docs/operator.md lists them). Brokers run
//! revision `a` unless a row says otherwise; the target revision is `b`.

use rustqueue_api::crd::{OperationKind, OperationPhase, OperationStatus, RustQueueStatus};

use super::*;
use crate::render::{DesiredInputs, Owner};

const NOW: u64 = 2_000_000_000;

pub(super) fn spec() -> RustQueueSpec {
    RustQueueSpec::with_image("rustqueue:b")
}

/// The desired set of `spec` with target revision `revision`.
fn desired_at(spec: &RustQueueSpec, revision: &str) -> Desired {
    desired_over(spec, revision, 1)
}

/// [`desired_at`] over the feature-level floor `floor`.
pub(super) fn desired_over(spec: &RustQueueSpec, revision: &str, floor: u32) -> Desired {
    let owner = Owner {
        name: "q",
        namespace: "ns",
        uid: "u",
    };
    let mut d = Desired::render(
        &owner,
        spec,
        &DesiredInputs {
            tiering_secret_revision: None,
            auth_secret_name: "q-auth".into(),
            auth_secret_revision: "7".into(),
            claim_template_size: None,
            feature_level_floor: floor,
        },
    );
    d.revision = revision.into();
    d.config_map = format!("q-config-{revision}");
    d.probe_pod = "q-preflight-target".into();
    d.feature_level = spec.storage_feature_level.max(floor);
    d
}

/// The operation a previous reconcile left for a rollout of `spec` to `b`.
fn rollout_op(spec: &RustQueueSpec, phase: OperationPhase, started_ago: u64) -> OperationStatus {
    let d = desired_at(spec, "b");
    let kind = if spec.rollout.rollback_to_image.is_some() {
        OperationKind::Rollback
    } else {
        OperationKind::Rollout
    };
    let id = operation_id(
        kind,
        &[&d.spec.image, &format!("b:{}", spec.rollout.retry_nonce)],
    );
    OperationStatus {
        id,
        kind,
        phase,
        target: d.spec.image.clone(),
        revision: "b".into(),
        message: "before".into(),
        started_at: crate::status::rfc3339(NOW - started_ago),
        updated_at: crate::status::rfc3339(NOW - started_ago),
        completed_at: None,
        previous_image: Some("rustqueue:a".into()),
        current_broker: Some("q-2".into()),
    }
}

pub(super) fn run(spec: &RustQueueSpec, obs: &Observed, previous: Option<OperationStatus>) -> Plan {
    let status = RustQueueStatus {
        current_operation: previous,
        ..RustQueueStatus::default()
    };
    let floor = feature_floor(obs, &status);
    plan(spec, obs, &desired_over(spec, "b", floor), &status, NOW)
}

/// The actions that touch brokers, claims or sizes (not the always-applied objects).
fn moves(p: &Plan) -> Vec<Action> {
    p.actions
        .iter()
        .filter(|a| {
            !matches!(
                a,
                Action::ApplyRuntime { .. }
                    | Action::ApplyBrokerSet { .. }
                    | Action::DeleteConfigMap { .. }
            )
        })
        .cloned()
        .collect()
}

fn replicas(p: &Plan) -> Option<i32> {
    p.actions.iter().find_map(|a| match a {
        Action::ApplyBrokerSet { replicas } => Some(*replicas),
        _ => None,
    })
}

fn drain(pod: &str, goal: DrainGoal) -> Action {
    Action::Drain {
        pod: pod.into(),
        goal,
    }
}
fn resume(pod: &str) -> Action {
    Action::Resume { pod: pod.into() }
}
fn delete(pod: &str) -> Action {
    Action::DeletePod { pod: pod.into() }
}
use DrainGoal::{Empty, Quiesced};
use OperationPhase as Op;

struct Row {
    what: &'static str,
    spec: RustQueueSpec,
    obs: Observed,
    previous: Option<OperationStatus>,
    phase: Phase,
    op: Option<(OperationKind, OperationPhase)>,
    moves: Vec<Action>,
    replicas: Option<i32>,
    message: &'static str,
}

fn row(what: &'static str, obs: super::builder::ObservedBuilder) -> Row {
    Row {
        what,
        spec: spec(),
        obs: obs.build(),
        previous: None,
        phase: Phase::Ready,
        op: None,
        moves: vec![],
        replicas: None,
        message: "",
    }
}

impl Row {
    fn spec(mut self, f: impl FnOnce(&mut RustQueueSpec)) -> Self {
        f(&mut self.spec);
        self
    }
    fn after(mut self, phase: OperationPhase, started_ago: u64) -> Self {
        self.previous = Some(rollout_op(&self.spec, phase, started_ago));
        self
    }
    fn then(mut self, phase: Phase, op: Option<(OperationKind, OperationPhase)>) -> Self {
        self.phase = phase;
        self.op = op;
        self
    }
    fn moves(mut self, m: Vec<Action>) -> Self {
        self.moves = m;
        self
    }
    fn replicas(mut self, r: i32) -> Self {
        self.replicas = Some(r);
        self
    }
    fn says(mut self, m: &'static str) -> Self {
        self.message = m;
        self
    }
    fn check(self) {
        let p = run(&self.spec, &self.obs, self.previous.clone());
        let what = self.what;
        assert_eq!(p.phase, self.phase, "{what}: {}", p.message);
        assert_eq!(
            p.operation.set().map(|o| (o.kind, o.phase)),
            self.op,
            "{what}: {:?}",
            p.operation
        );
        assert_eq!(moves(&p), self.moves, "{what}");
        if let Some(r) = self.replicas {
            assert_eq!(replicas(&p), Some(r), "{what}");
        }
        assert!(
            p.message.contains(self.message),
            "{what}: message {:?} lacks {:?}",
            p.message,
            self.message
        );
    }
}

const RO: OperationKind = OperationKind::Rollout;

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn rollout_transitions() {
    let three_a = || Observed::test().brokers(3).at_revision("a");
    let rows = vec![
        row(
            "j. a new revision drains the highest ordinal with deliveries frozen",
            three_a(),
        )
        .then(Phase::Rolling, Some((RO, Op::Draining)))
        .moves(vec![drain("q-2", Quiesced)])
        .says("draining q-2"),
        row(
            "g. the draining broker is drained again until quiesced",
            three_a().draining(2),
        )
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::Draining)))
        .moves(vec![drain("q-2", Quiesced)]),
        row(
            "g. a quiesced broker's Pod is deleted",
            three_a().quiesced(2),
        )
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::Replacing)))
        .moves(vec![delete("q-2")])
        .says("q-2 is quiesced"),
        row(
            "the deleted Pod is still terminating: nothing else moves",
            three_a().terminating(2),
        )
        .after(Op::Replacing, 10)
        .then(Phase::Rolling, Some((RO, Op::Replacing))),
        row(
            "a. the replaced Pod does not exist yet",
            three_a().missing(2),
        )
        .after(Op::Replacing, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .says("waiting for broker Pods q-2 to exist"),
        row(
            "c. the replaced broker is not Ready yet",
            three_a().revision_of(2, "b").unready(2),
        )
        .after(Op::Replacing, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .says("waiting for q-2 (revision b) to become Ready"),
        row(
            "c. ... and a drain that started meanwhile is resumed",
            three_a().revision_of(2, "b").unready(2).draining(1),
        )
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .moves(vec![resume("q-1")]),
        row(
            "j. the next outdated broker once the replaced one is Ready",
            three_a().revision_of(2, "b"),
        )
        .after(Op::WaitingForReady, 10)
        .then(Phase::Rolling, Some((RO, Op::Draining)))
        .moves(vec![drain("q-1", Quiesced)]),
        row(
            "d. an unexpected outage resumes our drain instead of compounding it",
            three_a().draining(2).unready(0),
        )
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .moves(vec![resume("q-2")])
        .says("refusing to make another broker unavailable: q-0"),
        row(
            "f. two draining brokers are both resumed",
            three_a().draining(2).draining(1),
        )
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .moves(vec![resume("q-1"), resume("q-2")]),
        row(
            "e. a single broker is never rolled",
            Observed::test().brokers(1).at_revision("a").nodes(1),
        )
        .then(Phase::RolloutBlocked, Some((RO, Op::Blocked)))
        .says("needs at least two brokers"),
        row("h. paused holds before the first broker", three_a())
            .spec(|s| s.rollout.paused = true)
            .then(Phase::RolloutPaused, Some((RO, Op::Paused)))
            .says("paused"),
        row(
            "g before h: pausing mid-drain finishes that broker",
            three_a().quiesced(2),
        )
        .spec(|s| s.rollout.paused = true)
        .after(Op::Draining, 10)
        .then(Phase::Rolling, Some((RO, Op::Replacing)))
        .moves(vec![delete("q-2")]),
        row(
            "i. the canary waits for approval and names the revision",
            three_a().revision_of(2, "b"),
        )
        .spec(|s| s.rollout.require_canary_approval = true)
        .after(Op::WaitingForReady, 10)
        .then(
            Phase::RolloutAwaitingApproval,
            Some((RO, Op::AwaitingCanaryApproval)),
        )
        .says("set spec.rollout.approvedRevision to b"),
        row("i. the first (canary) broker needs no approval", three_a())
            .spec(|s| s.rollout.require_canary_approval = true)
            .then(Phase::Rolling, Some((RO, Op::Draining)))
            .moves(vec![drain("q-2", Quiesced)]),
        row(
            "i. approval of the revision continues the rollout",
            three_a().revision_of(2, "b"),
        )
        .spec(|s| {
            s.rollout.require_canary_approval = true;
            s.rollout.approved_revision = Some("b".into());
        })
        .after(Op::AwaitingCanaryApproval, 5000)
        .then(Phase::Rolling, Some((RO, Op::Draining)))
        .moves(vec![drain("q-1", Quiesced)]),
        row(
            "timeout: a stalled drain fails and is resumed",
            three_a().draining(2),
        )
        .after(Op::Draining, 601)
        .then(Phase::RolloutFailed, Some((RO, Op::Failed)))
        .moves(vec![resume("q-2")])
        .says("did not finish within 600s"),
        row("failed is sticky", three_a())
            .after(Op::Failed, 700)
            .then(Phase::RolloutFailed, Some((RO, Op::Failed))),
        row("a new retryNonce starts a new rollout", three_a())
            .after(Op::Failed, 700)
            .spec(|s| s.rollout.retry_nonce = "1".into())
            .then(Phase::Rolling, Some((RO, Op::Draining)))
            .moves(vec![drain("q-2", Quiesced)]),
        row("human waits never time out", three_a().revision_of(2, "b"))
            .spec(|s| s.rollout.paused = true)
            .after(Op::Paused, 5000)
            .then(Phase::RolloutPaused, Some((RO, Op::Paused))),
        row(
            "b. every broker on the target and Ready completes the rollout",
            three_a().at_revision("b"),
        )
        .after(Op::WaitingForReady, 10)
        .then(Phase::Ready, Some((RO, Op::Completed)))
        .says("3/3 brokers ready"),
        row(
            "b. ... not before the last one is Ready",
            three_a().at_revision("b").unready(0),
        )
        .after(Op::Replacing, 10)
        .then(Phase::Rolling, Some((RO, Op::WaitingForReady)))
        .says("waiting for q-0"),
        row("rollbackToImage rolls as a Rollback", three_a())
            .spec(|s| s.rollout.rollback_to_image = Some("rustqueue:a".into()))
            .then(
                Phase::Rolling,
                Some((OperationKind::Rollback, Op::Draining)),
            )
            .moves(vec![drain("q-2", Quiesced)]),
    ];
    for r in rows {
        r.check();
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn preflight_transitions() {
    use super::builder::{CAPABLE, LEVEL_ONE, RETAINING};
    let three_a = || Observed::test().brokers(3).at_revision("a");
    let create = Action::CreateProbePod {
        name: "q-preflight-target".into(),
    };
    let rows = vec![
        row(
            "the target image is probed before any broker is touched",
            three_a().probe(None),
        )
        .then(Phase::Preflight, Some((RO, Op::Preflight)))
        .moves(vec![create.clone()])
        .says("probing image rustqueue:b"),
        row(
            "a fresh cluster probes first too (no operation: nothing to roll)",
            Observed::test().probe(None),
        )
        .then(Phase::Preflight, None)
        .moves(vec![create]),
        row(
            "the probe is still running",
            three_a().probe(Some(("Running", None, None))),
        )
        .then(Phase::Preflight, Some((RO, Op::Preflight))),
        row(
            "an image that cannot be pulled blocks, no broker touched",
            three_a()
                .draining(2)
                .probe(Some(("Pending", Some("ImagePullBackOff"), None))),
        )
        .then(Phase::PreflightBlocked, Some((RO, Op::Blocked)))
        .moves(vec![resume("q-2")])
        .says("image rustqueue:b cannot be pulled (ImagePullBackOff)"),
        row(
            "an image whose probe fails blocks",
            three_a().probe(Some(("Failed", None, Some("exec: rustqueued not found")))),
        )
        .then(Phase::PreflightBlocked, Some((RO, Op::Blocked)))
        .says("failed its capability probe (exec: rustqueued not found)"),
        row(
            "rollbackToImage behind the PVC reader fence is blocked",
            three_a()
                .capabilities(CAPABLE, 2)
                .probe(Some(("Succeeded", None, Some(LEVEL_ONE)))),
        )
        .spec(|s| {
            s.storage_feature_level = 2;
            s.rollout.rollback_to_image = Some("rustqueue:old".into());
        })
        .then(
            Phase::PreflightBlocked,
            Some((OperationKind::Rollback, Op::Blocked)),
        )
        .says("PVC reader fence"),
        row(
            "rollbackToImage to a capable binary rolls",
            three_a().capabilities(CAPABLE, 2),
        )
        .spec(|s| {
            s.storage_feature_level = 2;
            s.rollout.rollback_to_image = Some("rustqueue:old".into());
        })
        .then(
            Phase::Rolling,
            Some((OperationKind::Rollback, Op::Draining)),
        )
        .moves(vec![drain("q-2", Quiesced)]),
        row(
            "raising the level under old-ceiling brokers needs a capable binary first",
            three_a().capabilities(LEVEL_ONE, 1),
        )
        .spec(|s| s.storage_feature_level = 2)
        .then(Phase::PreflightBlocked, Some((RO, Op::Blocked)))
        .says("roll a capable image first, then raise storageFeatureLevel"),
        row(
            "raising the level beyond the target image is blocked",
            three_a().probe(Some(("Succeeded", None, Some(LEVEL_ONE)))),
        )
        .spec(|s| s.storage_feature_level = 2)
        .then(Phase::PreflightBlocked, Some((RO, Op::Blocked)))
        .says("supports storage feature levels 1..=1, level 2 is needed (requested by spec.storageFeatureLevel"),
        row(
            "a level lowered below the one the brokers activated is refused, nothing moves",
            Observed::test()
                .brokers(3)
                .at_revision("b")
                .capabilities(CAPABLE, 2),
        )
        .then(Phase::InvalidSpec, None)
        .says("spec.storageFeatureLevel 1 is below 2, the level the brokers have activated"),
        row(
            "raising the level once the binaries are capable rolls",
            three_a().capabilities(CAPABLE, 1),
        )
        .spec(|s| s.storage_feature_level = 2)
        .then(Phase::Rolling, Some((RO, Op::Draining)))
        .moves(vec![drain("q-2", Quiesced)]),
        row(
            "rollbackToImage to a level-2 release once local retention fenced the PVCs is blocked",
            three_a()
                .capabilities(RETAINING, 3)
                .probe(Some(("Succeeded", None, Some(CAPABLE)))),
        )
        .spec(|s| {
            s.storage_feature_level = 3;
            s.rollout.rollback_to_image = Some("rustqueue:old".into());
        })
        .then(
            Phase::PreflightBlocked,
            Some((OperationKind::Rollback, Op::Blocked)),
        )
        .says("it supports storage feature levels 1..=2, level 3 is needed (the PVCs have activated it: the binary is behind the PVC reader fence)"),
        row(
            "rollbackToImage to a release that reads level 3 rolls",
            three_a()
                .capabilities(RETAINING, 3)
                .probe(Some(("Succeeded", None, Some(RETAINING)))),
        )
        .spec(|s| {
            s.storage_feature_level = 3;
            s.rollout.rollback_to_image = Some("rustqueue:old".into());
        })
        .then(
            Phase::Rolling,
            Some((OperationKind::Rollback, Op::Draining)),
        )
        .moves(vec![drain("q-2", Quiesced)]),
        row(
            "raising to level 3 under level-2 brokers needs a capable binary first",
            three_a()
                .capabilities(CAPABLE, 2)
                .probe(Some(("Succeeded", None, Some(RETAINING)))),
        )
        .spec(|s| s.storage_feature_level = 3)
        .then(Phase::PreflightBlocked, Some((RO, Op::Blocked)))
        .says("writes storage feature levels up to 2, level 3 is requested: roll a capable image first"),
    ];
    for r in rows {
        r.check();
    }
}

#[test]
fn probes_of_older_contracts_are_deleted() {
    let mut obs = Observed::test().brokers(3).at_revision("b").build();
    obs.probes.push(ProbePod {
        name: "q-preflight-old".into(),
        phase: "Succeeded".into(),
        waiting: None,
        message: None,
    });
    let p = run(&spec(), &obs, None);
    assert!(p.actions.contains(&Action::DeleteProbePod {
        name: "q-preflight-old".into()
    }));
    assert_eq!(p.phase, Phase::Ready);
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn cluster_transitions() {
    let ready_b = || Observed::test().brokers(3).at_revision("b");
    let up = OperationKind::ScaleUp;
    let down = OperationKind::ScaleDown;
    let mnt = OperationKind::Maintenance;
    let maintenance = |enabled| {
        move |s: &mut RustQueueSpec| {
            s.maintenance = Some(rustqueue_api::crd::Maintenance {
                broker: "q-1".into(),
                enabled,
            })
        }
    };
    let rows = vec![
        row(
            "fresh resource: generate the auth Secret first",
            Observed::test().auth(AuthState::GeneratedMissing),
        )
        .then(Phase::Scaling, None)
        .moves(vec![Action::CreateAuthSecret {
            name: "q-auth".into(),
        }]),
        row("no StatefulSet: scale from 0", Observed::test())
            .then(Phase::Scaling, Some((up, Op::WaitingForReady)))
            .replicas(3)
            .says("scaling from 0 to 3 brokers"),
        row("a new eligible Node: scale up", ready_b().nodes(4))
            .then(Phase::Scaling, Some((up, Op::WaitingForReady)))
            .replicas(4)
            .says("scaling from 3 to 4"),
        row("all brokers Ready on the target: Ready", ready_b())
            .then(Phase::Ready, None)
            .replicas(3)
            .says("3/3 brokers ready"),
        row(
            "a broker down for its own reasons is not a rollout",
            ready_b().unready(1),
        )
        .then(Phase::WaitingForBrokers, None)
        .says("2/3 brokers ready; waiting for q-1: PodNotReady (connection refused)"),
        row(
            "a node lost its label: drain the highest ordinal to empty",
            ready_b().nodes(2),
        )
        .then(Phase::Draining, Some((down, Op::Draining)))
        .moves(vec![drain("q-2", Empty)])
        .replicas(3)
        .says("draining q-2 to empty"),
        row(
            "scale-down: the empty broker is removed, its PVC kept",
            ready_b().nodes(2).empty(2),
        )
        .then(Phase::Draining, Some((down, Op::Completed)))
        .replicas(2)
        .says("its PVC is kept"),
        row(
            "scale-down never removes a broker it has not seen empty",
            ready_b().nodes(2).missing(2),
        )
        .then(Phase::Draining, Some((down, Op::WaitingForReady)))
        .replicas(3)
        .says("waiting for q-2 to be back"),
        row(
            "scale-down waits for every other broker",
            ready_b().nodes(2).unready(0).draining(2),
        )
        .then(Phase::Draining, Some((down, Op::WaitingForReady)))
        .moves(vec![resume("q-2")])
        .replicas(3),
        row(
            "fewer eligible nodes than minBrokers resumes drains",
            ready_b().nodes(1).draining(2),
        )
        .spec(|s| s.min_brokers = 3)
        .then(Phase::InsufficientNodes, None)
        .moves(vec![resume("q-2")])
        .says("1 eligible nodes; desired is 3 and minimum is 3"),
        row(
            "maintenance drains the named broker, consumers keep draining",
            ready_b(),
        )
        .spec(maintenance(true))
        .then(Phase::Maintenance, Some((mnt, Op::Draining)))
        .moves(vec![drain("q-1", Empty)]),
        row(
            "maintenance completes when the broker is empty",
            ready_b().empty(1),
        )
        .spec(maintenance(true))
        .then(Phase::Maintenance, Some((mnt, Op::Completed)))
        .moves(vec![drain("q-1", Empty)]),
        row(
            "maintenance needs every other broker Ready",
            ready_b().unready(2),
        )
        .spec(maintenance(true))
        .then(Phase::MaintenanceBlocked, Some((mnt, Op::Blocked)))
        .says("waiting for q-2"),
        row(
            "maintenance of a broker that does not exist is blocked",
            ready_b(),
        )
        .spec(|s| {
            s.maintenance = Some(rustqueue_api::crd::Maintenance {
                broker: "q-7".into(),
                enabled: true,
            })
        })
        .then(Phase::MaintenanceBlocked, Some((mnt, Op::Blocked)))
        .says("q-7 is not a broker Pod of this RustQueue"),
        row(
            "disabling maintenance resumes the broker",
            ready_b().empty(1),
        )
        .spec(maintenance(false))
        .then(Phase::WaitingForBrokers, Some((mnt, Op::Completed)))
        .moves(vec![resume("q-1")]),
        row("invalid spec changes nothing", ready_b())
            .spec(|s| {
                s.min_brokers = 9;
                s.max_brokers = 3;
            })
            .then(Phase::InvalidSpec, None)
            .says("spec.minBrokers (9) must be between 1 and spec.maxBrokers (3)"),
        row(
            "user-named Secret missing",
            Observed::test().auth(AuthState::UserMissing),
        )
        .spec(|s| s.registry_secret_name = Some("mine".into()))
        .then(Phase::InvalidSpec, None)
        .says("Secret mine named by spec.registrySecretName does not exist"),
        row(
            "Secret with shared tokens",
            ready_b().auth(AuthState::Invalid(
                "admin-token and console-token must differ".into(),
            )),
        )
        .then(Phase::InvalidSpec, None)
        .says("must differ"),
        row(
            "storageSize grew: every claim's request is raised",
            ready_b().claims("local-path", "1Gi"),
        )
        .spec(|s| s.storage_size = "2Gi".into())
        .then(Phase::StorageResizing, None)
        .moves(
            ["data-q-0", "data-q-1", "data-q-2"]
                .map(|n| Action::PatchClaim {
                    name: n.into(),
                    size: "2Gi".into(),
                })
                .to_vec(),
        )
        .says("waiting for PVC expansion to 2Gi"),
        row(
            "grown requests wait for the capacity",
            ready_b()
                .claims("local-path", "2Gi")
                .claim(0, |c| c.capacity = Some("1Gi".into())),
        )
        .spec(|s| s.storage_size = "2Gi".into())
        .then(Phase::StorageResizing, None)
        .says("waiting for PVC expansion to 2Gi: data-q-0"),
        row(
            "a class without expansion blocks growth and says so",
            ready_b()
                .claims("local-path", "1Gi")
                .storage_class(StorageClassState::Present {
                    allow_expansion: false,
                }),
        )
        .spec(|s| s.storage_size = "2Gi".into())
        .then(Phase::StorageBlocked, None)
        .says("StorageClass local-path does not allow volume expansion"),
        row(
            "a missing StorageClass is named, not waited for",
            Observed::test().storage_class(StorageClassState::Missing),
        )
        .then(Phase::StorageBlocked, None)
        .says("StorageClass local-path does not exist"),
        row(
            "a shrink is refused without touching a claim",
            ready_b().claims("local-path", "2Gi"),
        )
        .spec(|s| s.storage_size = "1Gi".into())
        .then(Phase::StorageBlocked, None)
        .says("storage shrink to 1Gi is forbidden"),
        row(
            "a claim of another StorageClass blocks and resumes drains",
            ready_b().claims("other", "100Gi").draining(0),
        )
        .then(Phase::StorageBlocked, None)
        .moves(vec![resume("q-0")])
        .says("PVC data-q-0 uses StorageClass other"),
    ];
    for r in rows {
        r.check();
    }
}

#[test]
fn invalid_spec_and_blocked_storage_apply_nothing_to_the_broker_set() {
    let mut bad = spec();
    bad.min_brokers = 0;
    let p = run(&bad, &Observed::test().brokers(3).build(), None);
    assert!(p.actions.is_empty());
    let p = run(
        &spec(),
        &Observed::test().brokers(3).claims("other", "100Gi").build(),
        None,
    );
    assert!(
        matches!(&p.actions[..], [Action::ApplyRuntime { .. }]),
        "runtime only: {:?}",
        p.actions
    );
}

#[test]
fn an_operation_the_spec_no_longer_asks_for_is_withdrawn_into_the_history() {
    let ready_b = || Observed::test().brokers(3).at_revision("b");
    let mut broken = spec();
    broken.image = "rustqueue:broken".into();
    let blocked_image = rollout_op(&broken, Op::Blocked, 60);
    let mut blocked_raise = rollout_op(&spec(), Op::Blocked, 60);
    blocked_raise.id = operation_id(RO, &["rustqueue:b", "c:"]);
    blocked_raise.revision = "c".into();
    let mut draining_maintenance = rollout_op(&spec(), Op::Draining, 60);
    draining_maintenance.kind = OperationKind::Maintenance;
    draining_maintenance.id = operation_id(OperationKind::Maintenance, &["q-1", "enabled"]);
    type Edit = fn(&mut RustQueueSpec);
    // (what, spec edit, cluster, previous operation, withdrawn?, phase)
    let rows: Vec<(&str, Edit, Observed, OperationStatus, bool, Phase)> = vec![
        (
            "a blocked rollout whose good image was restored",
            |_| {},
            ready_b().build(),
            blocked_image,
            true,
            Phase::Ready,
        ),
        (
            "a blocked level raise taken back",
            |_| {},
            ready_b().build(),
            blocked_raise,
            true,
            Phase::Ready,
        ),
        (
            "maintenance removed from the spec while its broker drained",
            |_| {},
            ready_b().build(),
            draining_maintenance,
            true,
            Phase::Ready,
        ),
        (
            "a rollout the spec still asks for, held while claims grow, is kept",
            |_| {},
            Observed::test()
                .brokers(3)
                .at_revision("a")
                .claims("local-path", "50Gi")
                .build(),
            rollout_op(&spec(), Op::Draining, 60),
            false,
            Phase::StorageResizing,
        ),
        (
            "an operation that ended stays as the last finished one",
            |_| {},
            ready_b().build(),
            rollout_op(&broken, Op::Failed, 60),
            false,
            Phase::Ready,
        ),
    ];
    for (what, edit, obs, previous, withdrawn, phase) in rows {
        let mut s = spec();
        edit(&mut s);
        let status = RustQueueStatus {
            current_operation: Some(previous.clone()),
            ..RustQueueStatus::default()
        };
        let p = plan(&s, &obs, &desired_at(&s, "b"), &status, NOW);
        assert_eq!(p.phase, phase, "{what}: {}", p.message);
        if withdrawn {
            assert_eq!(p.operation, OperationChange::Clear, "{what}");
            let last = p.operation_history.last().expect("history");
            assert_eq!(
                (&last.id, last.phase, last.completed_at.is_some()),
                (&previous.id, Op::Withdrawn, true),
                "{what}: {last:?}"
            );
            assert!(last.message.starts_with("withdrawn: "), "{what}: {last:?}");
            let (written, _) = crate::status::next_status(&status, &p, Some(2), "T");
            assert_eq!(written.current_operation, None, "{what}");
        } else {
            assert_ne!(p.operation, OperationChange::Clear, "{what}");
            assert!(p.operation_history.is_empty(), "{what}");
        }
    }
}

#[test]
fn a_scale_up_stays_scaling_until_the_new_brokers_are_ready() {
    let s = spec();
    let grown = run(
        &s,
        &Observed::test()
            .brokers(3)
            .at_revision("b")
            .nodes(4)
            .build(),
        None,
    );
    let op = grown.operation.set().cloned();
    let waiting = Observed::test()
        .brokers(4)
        .at_revision("b")
        .unready(3)
        .build();
    let p = run(&s, &waiting, op.clone());
    assert_eq!(p.phase, Phase::Scaling, "{}", p.message);
    assert!(p.message.contains("waiting for q-3"), "{}", p.message);
    let done = run(
        &s,
        &Observed::test().brokers(4).at_revision("b").build(),
        p.operation.set().cloned(),
    );
    assert_eq!(done.phase, Phase::Ready);
    assert_eq!(done.operation.set().unwrap().phase, Op::Completed);
}

#[test]
fn a_scale_down_is_recorded_complete_once_the_set_has_shrunk() {
    let s = spec();
    let draining = run(
        &s,
        &Observed::test()
            .brokers(3)
            .at_revision("b")
            .nodes(2)
            .build(),
        None,
    );
    let op = draining.operation.set().cloned().unwrap();
    assert_eq!(
        (op.kind, op.phase),
        (OperationKind::ScaleDown, Op::Draining)
    );
    // The reconcile that lowered the replicas did not get to write Completed.
    let shrunk = Observed::test().brokers(2).at_revision("b").build();
    let p = run(&s, &shrunk, Some(op.clone()));
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
    let done = p.operation.set().cloned().unwrap();
    assert_eq!((done.id, done.phase), (op.id, Op::Completed));
    assert!(done.message.contains("q-2 removed"), "{}", done.message);
}

#[test]
fn the_operation_keeps_its_id_and_start_across_reconciles() {
    let s = spec();
    let three = Observed::test().brokers(3).at_revision("a");
    let first = run(&s, &three.clone().build(), None)
        .operation
        .set()
        .cloned()
        .unwrap();
    let second = run(&s, &three.draining(2).build(), Some(first.clone()))
        .operation
        .set()
        .cloned()
        .unwrap();
    assert_eq!(first.id, second.id);
    assert_eq!(first.started_at, second.started_at);
    assert_eq!(second.previous_image.as_deref(), Some("rustqueue:a"));
    assert_eq!(second.current_broker.as_deref(), Some("q-2"));
    assert_eq!(second.revision, "b");
}

#[test]
fn ready_needs_the_target_revision_the_size_and_the_claims() {
    let s = spec();
    let cond = |p: &Plan, t: &str| p.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
    let ok = run(
        &s,
        &Observed::test().brokers(3).at_revision("b").build(),
        None,
    );
    assert!(cond(&ok, "Ready").status);
    assert!(cond(&ok, "Ready").message.contains("revision b"));
    let rolling = run(&s, &Observed::test().brokers(3).build(), None);
    assert!(!cond(&rolling, "Ready").status);
    assert!(cond(&rolling, "Progressing").status);
    let small = Observed::test()
        .brokers(3)
        .at_revision("b")
        .claims("local-path", "100Gi")
        .claim(1, |c| c.capacity = Some("50Gi".into()))
        .build();
    let p = run(&s, &small, None);
    assert!(
        !cond(&p, "Ready").status,
        "a claim below the size is not Ready"
    );
    let failed = run(
        &s,
        &Observed::test().brokers(3).build(),
        Some(rollout_op(&s, Op::Failed, 700)),
    );
    assert!(cond(&failed, "Degraded").status);
    assert!(!cond(&failed, "Progressing").status);
    let paused = run(
        &{
            let mut s = spec();
            s.rollout.paused = true;
            s
        },
        &Observed::test().brokers(3).build(),
        None,
    );
    assert!(!cond(&paused, "Progressing").status && !cond(&paused, "Degraded").status);
}

#[test]
fn conditions_are_sorted_by_type() {
    let p = run(
        &spec(),
        &Observed::test().brokers(3).at_revision("b").build(),
        None,
    );
    let types: Vec<&str> = p.conditions.iter().map(|c| c.type_.as_str()).collect();
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
fn config_maps_no_pod_mounts_are_deleted_but_the_target_and_mounted_ones_stay() {
    let obs = Observed::test()
        .brokers(3)
        .at_revision("b")
        .broker(0, |b| b.config_map = Some("q-config-b".into()))
        .config_maps(&[
            "q-config-a",
            "q-config-b",
            "q-config-old",
            "q-config",
            "other-config-x",
        ])
        .build();
    let p = run(&spec(), &obs, None);
    let deleted: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteConfigMap { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["q-config-old", "q-config"]);
}

#[test]
fn orphaned_claims_are_those_at_or_above_the_desired_count() {
    let obs = Observed::test()
        .brokers(3)
        .at_revision("b")
        .claims("local-path", "100Gi")
        .nodes(2)
        .empty(2)
        .build();
    assert_eq!(run(&spec(), &obs, None).orphaned_pvcs, ["data-q-2"]);
}

#[test]
fn the_feature_floor_comes_from_status_and_running_brokers() {
    let mut obs = Observed::test().brokers(1).build();
    let prev = RustQueueStatus {
        active_storage_feature_level: Some(2),
        ..RustQueueStatus::default()
    };
    assert_eq!(feature_floor(&obs, &prev), 2);
    obs.brokers[0].capabilities = Some(rustqueue_api::contract::Capabilities {
        binary: rustqueue_api::contract::BinaryCapabilities {
            binary_version: "x".into(),
            data_format: 7,
            minimum_reader_feature_level: 1,
            maximum_reader_feature_level: 3,
            maximum_writer_feature_level: 3,
            maximum_message_bytes: 1,
            maximum_batch_bytes: 1,
        },
        storage: rustqueue_api::contract::StorageCapabilities {
            data_format: 7,
            active_writer_feature_level: 3,
            minimum_reader_feature_level: 1,
            generation: 1,
        },
    });
    assert_eq!(feature_floor(&obs, &prev), 3);
    assert_eq!(feature_floor(&obs, &RustQueueStatus::default()), 3);
}

#[test]
fn a_level_below_the_floor_in_status_is_refused_even_with_every_broker_down() {
    let obs = Observed::test().brokers(3).at_revision("b").build();
    let floor_two = RustQueueStatus {
        active_storage_feature_level: Some(2),
        ..RustQueueStatus::default()
    };
    let p = plan(&spec(), &obs, &desired_at(&spec(), "b"), &floor_two, NOW);
    assert_eq!(p.phase, Phase::InvalidSpec, "{}", p.message);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(
        p.message.contains("set spec.storageFeatureLevel to 2"),
        "{}",
        p.message
    );
    let mut at_floor = spec();
    at_floor.storage_feature_level = 2;
    let p = plan(
        &at_floor,
        &obs,
        &desired_at(&at_floor, "b"),
        &floor_two,
        NOW,
    );
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
}

fn runtime_image(p: &Plan) -> Option<&str> {
    p.actions.iter().find_map(|a| match a {
        Action::ApplyRuntime { image, .. } => Some(image.as_str()),
        _ => None,
    })
}

#[test]
fn discovery_runs_the_brokers_image_until_every_broker_runs_the_target() {
    let s = spec();
    let cases: [(&str, Observed, &str); 4] = [
        (
            "no broker yet",
            Observed::test().brokers(0).nodes(3).build(),
            "rustqueue:b",
        ),
        (
            "every broker at the target",
            Observed::test().brokers(3).at_revision("b").build(),
            "rustqueue:b",
        ),
        (
            "mid-rollout: q-2 replaced",
            Observed::test().brokers(3).revision_of(2, "b").build(),
            "rustqueue:a",
        ),
        (
            "preflight of a target that cannot start",
            Observed::test()
                .brokers(3)
                .probe(Some(("Pending", Some("ErrImagePull"), None)))
                .build(),
            "rustqueue:a",
        ),
    ];
    for (what, obs, want) in cases {
        let p = run(&s, &obs, None);
        assert_eq!(runtime_image(&p), Some(want), "{what}: {:?}", p.actions);
    }
}

#[test]
fn quarantined_damage_raises_storage_damage_naming_the_broker_and_the_loss_without_unreadying_it() {
    let condition = |p: &Plan, t: &str| p.conditions.iter().find(|c| c.type_ == t).cloned();
    let clean = run(
        &spec(),
        &Observed::test().brokers(3).at_revision("b").build(),
        None,
    );
    let c = condition(&clean, "StorageDamage").unwrap();
    assert!(!c.status, "{c:?}");
    let damaged = Observed::test()
        .brokers(3)
        .at_revision("b")
        .broker(1, |b| {
            b.damage = Some(StorageDamage {
                findings: 2,
                messages: 3,
                latest: Some(
                    "message_body in topic orders (topics/x/s.rqlog), found by read".into(),
                ),
            })
        })
        .build();
    let p = run(&spec(), &damaged, None);
    let c = condition(&p, "StorageDamage").unwrap();
    assert!(c.status && c.reason == "Quarantined", "{c:?}");
    assert!(
        c.message
            .contains("q-1: 3 messages lost in 2 quarantine records")
            && c.message.contains("topic orders"),
        "{}",
        c.message
    );
    assert!(
        condition(&p, "Ready").unwrap().status,
        "the broker keeps serving"
    );
}

#[test]
fn ready_waits_for_the_discovery_and_gateway_pods_clients_connect_to() {
    let cond = |p: &Plan, t: &str| p.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
    let brokers = || Observed::test().brokers(3).at_revision("b");
    let all = run(&spec(), &brokers().build(), None);
    assert_eq!(all.phase, Phase::Ready);
    assert!(cond(&all, "Ready").status);
    assert!(cond(&all, "RuntimeAvailable").status);

    let rolling = Workload {
        updated: 1,
        ..Workload::available(2)
    };
    let rows: [(Option<Workload>, Option<Workload>, &str, &str); 4] = [
        (
            None,
            Some(Workload::available(3)),
            "DiscoveryUnavailable",
            "discovery: not created yet",
        ),
        (
            Some(rolling),
            Some(Workload::available(3)),
            "DiscoveryUnavailable",
            "1 of 2 Pods updated",
        ),
        (
            Some(Workload::available(2)),
            Some(Workload::available(0)),
            "GatewayUnavailable",
            "does any Node match the selector?",
        ),
        (
            None,
            None,
            "RuntimeUnavailable",
            "discovery: not created yet; gateway: not created yet",
        ),
    ];
    for (discovery, gateway, reason, says) in rows {
        let obs = brokers().discovery(discovery).gateway(gateway).build();
        let p = run(&spec(), &obs, None);
        assert_eq!(p.phase, Phase::Ready, "the brokers are done: {reason}");
        let runtime = cond(&p, "RuntimeAvailable");
        assert!(!runtime.status);
        assert_eq!(runtime.reason, reason);
        assert!(runtime.message.contains(says), "{}", runtime.message);
        let ready = cond(&p, "Ready");
        assert!(!ready.status, "Ready never overstates: {reason}");
        assert_eq!(ready.reason, "WaitingForRuntime");
        assert_eq!(ready.message, runtime.message);
        assert!(cond(&p, "Progressing").status);
        assert!(!cond(&p, "Degraded").status);
    }
}

/// The reading a reconcile takes comes before it applies a new runtime template; deciding the
/// status again from what the apply returned (a generation the DaemonSet controller has not
/// observed yet) keeps `Ready` false at the new generation until the Pods roll.
#[test]
fn a_runtime_template_applied_in_this_reconcile_is_not_available_yet() {
    let cond = |p: &Plan, t: &str| p.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
    let before = Observed::test().brokers(3).at_revision("b").build();
    assert!(cond(&run(&spec(), &before, None), "Ready").status);
    let just_applied = Workload {
        observed: false,
        ..Workload::available(3)
    };
    let after = before.with_runtime(Workload::available(2), just_applied, None);
    let p = run(&spec(), &after, None);
    let ready = cond(&p, "Ready");
    assert!(!ready.status);
    assert_eq!(ready.reason, "WaitingForRuntime");
    assert!(
        ready.message.contains("has not seen the latest spec"),
        "{}",
        ready.message
    );
}
