//! Table tests of every Kodo transition (docs/kodo.md), through `plan` as the controller calls
//! it: enabling on a running cluster, label adoption, the atomic switch and its soak-failure
//! switch-back, the grace and the producer-restart fence, disruptions, the decommission gate
//! and the disable path up to the Gateways' deletion.

use rustqueue_api::crd::{Condition, ConditionStatus, Maintenance, RustQueueSpec, RustQueueStatus};

use super::super::builder::CAPABLE;
use super::super::model::{
    Action, DiscoveryPod, DrainGoal, GatewayPod, GatewaySet, KodoObserved, Observed, Plan,
};
use super::super::{Phase, operations, plan};
use crate::render::{Desired, DesiredInputs, DiscoveryMode, KodoLayout, Owner};

use DiscoveryMode::{Direct, Kodo};

const NOW: u64 = 2_000_000_000;
const GRACE: u64 = 630;
const IMAGE: &str =
    "rustqueue@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn kodo_spec(enabled: bool) -> RustQueueSpec {
    let mut s = RustQueueSpec::with_image(IMAGE);
    s.kodo_compatibility.enabled = enabled;
    s.min_brokers = 3;
    s.max_brokers = 3;
    s.storage_feature_level = 2;
    s.max_message_bytes = 104_857_600;
    s.connection_delivery_inflight_bytes = 128 << 20;
    s.node_delivery_inflight_bytes = 512 << 20;
    s.bootstrap_retention_seconds = 180;
    s.broker_resources.cpu_request = "1".into();
    s.broker_resources.memory_request = "2Gi".into();
    s.kodo_compatibility.producer_restart_nonce = "n0".into();
    s
}

fn disabled(confirmed: bool) -> RustQueueSpec {
    let mut s = kodo_spec(false);
    s.kodo_compatibility.decommission_confirmed = confirmed;
    s
}

fn desired(spec: &RustQueueSpec) -> Desired {
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
            feature_level_floor: 1,
        },
    );
    d.revision = "b".into();
    d.config_map = "q-config-b".into();
    d.probe_pod = "q-preflight-target".into();
    d
}

/// Three Ready brokers on revision `rev` (`a`: outdated, `b`: the target).
fn brokers(rev: &str) -> super::super::builder::ObservedBuilder {
    Observed::test()
        .brokers(3)
        .at_revision(rev)
        .capabilities(CAPABLE, 2)
}

/// Gateways: 3 replicas, `ready` of them Ready on the rendered template.
fn gateways(obs: &Observed, spec: &RustQueueSpec, ready: usize) -> GatewaySet {
    let d = desired(spec);
    let rev = d.kodo_gateway_revision(&operations::runtime_image(obs, &d));
    GatewaySet {
        replicas: 3,
        update_revision: Some("g1".into()),
        owned: true,
        pods: (0..3)
            .map(|k| GatewayPod {
                name: format!("q-kodo-gateway-{k}"),
                ready: k < ready,
                controller_revision: Some("g1".into()),
                revision: Some(rev.clone()),
            })
            .collect(),
    }
}

/// Discovery: template mode, Service route, Ready Pods per mode.
fn discovery(
    template: Option<DiscoveryMode>,
    route: Option<DiscoveryMode>,
    direct: usize,
    kodo: usize,
) -> KodoObserved {
    let pods = |mode, n| (0..n).map(move |_| DiscoveryPod { mode, ready: true });
    KodoObserved {
        gateways: None,
        discovery_template_mode: template,
        discovery_route: route,
        discovery_pods: pods(Some(Direct), direct)
            .chain(pods(Some(Kodo), kodo))
            .collect(),
    }
}

/// The cluster: brokers on `rev`, discovery as given, Gateways with `ready` Ready Pods (`None`:
/// no Gateway StatefulSet).
fn cluster(spec: &RustQueueSpec, rev: &str, mut k: KodoObserved, ready: Option<usize>) -> Observed {
    let base = brokers(rev).build();
    k.gateways = ready.map(|r| gateways(&base, spec, r));
    brokers(rev).kodo(k).build()
}

fn cond(type_: &str, status: bool, reason: &str, since: u64) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: reason.into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: crate::status::rfc3339(since),
    }
}

/// A previous status: Kodo advertised since `advertised_ago` seconds (if any), baseline nonce.
fn previous(advertised_ago: Option<u64>, baseline: Option<&str>) -> RustQueueStatus {
    RustQueueStatus {
        conditions: advertised_ago
            .map(|ago| cond("KodoGatewaysAdvertised", true, "Advertised", NOW - ago))
            .into_iter()
            .collect(),
        kodo_producer_restart_baseline_nonce: baseline.map(str::to_string),
        ..RustQueueStatus::default()
    }
}

fn run(spec: &RustQueueSpec, obs: &Observed, prev: &RustQueueStatus) -> Plan {
    plan(spec, obs, &desired(spec), prev, NOW)
}

fn layout(p: &Plan) -> KodoLayout {
    p.actions
        .iter()
        .find_map(|a| match a {
            Action::ApplyRuntime { kodo, .. } => Some(kodo.clone()),
            _ => None,
        })
        .expect("the runtime is always applied")
}

/// Actions that disrupt a broker.
fn disruptions(p: &Plan) -> Vec<&Action> {
    p.actions
        .iter()
        .filter(|a| matches!(a, Action::Drain { .. } | Action::DeletePod { .. }))
        .collect()
}

fn condition<'a>(p: &'a Plan, type_: &str) -> (bool, &'a str) {
    let c = p
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("{type_} is written"));
    (c.status, c.reason.as_str())
}

fn deletes(p: &Plan) -> bool {
    p.actions.contains(&Action::DeleteKodoGateways)
}

#[test]
fn enabling_starts_the_gateways_first_and_disrupts_no_broker() {
    let spec = kodo_spec(true);
    // the new config makes every broker outdated: the rollout waits
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Direct), Some(Direct), 2, 0),
        None,
    );
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(p.phase, Phase::WaitingForKodoGateways, "{}", p.message);
    let l = layout(&p);
    assert_eq!(l.gateway_replicas, Some(3));
    assert_eq!((l.discovery_mode, l.route), (Direct, Some(Direct)));
    assert_eq!(
        l.discovery_min_ready_seconds, 660,
        "grace + 30: old Pods linger through the soak"
    );
    assert!(disruptions(&p).is_empty());
    assert_eq!(
        condition(&p, "KodoGatewaysActive"),
        (false, "WaitingForBrokers")
    );
    assert!(!condition(&p, "Ready").0);
    assert_eq!(p.kodo_baseline_nonce, None);

    // two of three Gateways Ready: discovery stays direct
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Direct), Some(Direct), 2, 0),
        Some(2),
    );
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(p.phase, Phase::WaitingForKodoGateways);
    assert_eq!(layout(&p).discovery_mode, Direct);
    assert_eq!(condition(&p, "KodoGatewaysActive"), (true, "Active"));
    assert_eq!(
        condition(&p, "KodoGatewaysReady"),
        (false, "PodsUnavailable")
    );
    assert!(disruptions(&p).is_empty());
}

#[test]
fn gateways_wait_for_two_ready_brokers() {
    let spec = kodo_spec(true);
    let mut obs = brokers("a").unready(1).unready(2).build();
    obs.kodo = discovery(Some(Direct), Some(Direct), 2, 0);
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(
        layout(&p).gateway_replicas,
        None,
        "fewer than two brokers Ready"
    );
    assert_eq!(
        condition(&p, "KodoGatewaysActive"),
        (false, "WaitingForBrokers")
    );
}

#[test]
fn a_gateway_pod_of_an_older_template_is_not_counted_ready() {
    let spec = kodo_spec(true);
    let mut obs = cluster(
        &spec,
        "a",
        discovery(Some(Direct), Some(Direct), 2, 0),
        Some(3),
    );
    let g = obs.kodo.gateways.as_mut().unwrap();
    g.pods[0].revision = Some("older".into());
    g.pods[1].controller_revision = Some("g0".into());
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(p.phase, Phase::WaitingForKodoGateways);
    assert_eq!(
        condition(&p, "KodoGatewaysReady"),
        (false, "PodsUnavailable")
    );
    assert_eq!(layout(&p).discovery_mode, Direct);
}

#[test]
fn three_ready_gateways_move_discovery_to_kodo_mode_behind_the_old_selector() {
    let spec = kodo_spec(true);
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Direct), Some(Direct), 2, 0),
        Some(3),
    );
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!(l.discovery_mode, Kodo);
    assert_eq!(
        l.route,
        Some(Direct),
        "the Service keeps the old Pods until the new are Ready"
    );
    assert_eq!(p.phase, Phase::WaitingForKodoAdvertisement);
    assert_eq!(condition(&p, "KodoGatewaysReady"), (true, "AllReady"));
    assert_eq!(
        condition(&p, "KodoGatewaysAdvertised"),
        (false, "WaitingForGateways")
    );

    // one of two Kodo-mode Pods Ready: still not switched
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Kodo), Some(Direct), 2, 1),
        Some(3),
    );
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(layout(&p).route, Some(Direct));
    assert_eq!(p.phase, Phase::WaitingForKodoAdvertisement);
}

#[test]
fn legacy_unlabeled_discovery_is_adopted_before_any_selector_switch() {
    let spec = kodo_spec(true);
    // unlabeled Pods, no mode in the selector
    let legacy = KodoObserved {
        discovery_pods: vec![
            DiscoveryPod {
                mode: None,
                ready: true
            };
            2
        ],
        ..KodoObserved::default()
    };
    let obs = cluster(&spec, "a", legacy, Some(3));
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!(
        (l.discovery_mode, l.route),
        (Direct, None),
        "label first, selector broad"
    );

    // labeled template, rollout not finished: still adopting, even with Ready Gateways
    let mut adopting = discovery(Some(Direct), None, 1, 0);
    adopting.discovery_pods.push(DiscoveryPod {
        mode: None,
        ready: true,
    });
    let mut obs = cluster(&spec, "a", adopting, Some(3));
    obs.discovery = Some(super::super::Workload {
        updated: 1,
        ..super::super::Workload::available(2)
    });
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Direct, None));

    // every Pod labeled and Ready: the selector is pinned to the mode they serve
    let obs = cluster(&spec, "a", discovery(Some(Direct), None, 2, 0), Some(3));
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Direct, Some(Direct)));

    // adopted: now the Kodo switch can begin
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Direct), Some(Direct), 2, 0),
        Some(3),
    );
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Direct)));
}

#[test]
fn a_new_cluster_routes_discovery_at_once() {
    let spec = kodo_spec(true);
    let mut obs = cluster(&spec, "b", KodoObserved::default(), None);
    obs.discovery = None;
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Direct, Some(Direct)));
}

#[test]
fn the_switch_is_atomic_once_every_kodo_pod_is_ready_and_the_baseline_is_captured() {
    let spec = kodo_spec(true);
    let obs = cluster(
        &spec,
        "a",
        discovery(Some(Kodo), Some(Direct), 2, 2),
        Some(3),
    );
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(layout(&p).route, Some(Kodo));
    assert_eq!(
        condition(&p, "KodoGatewaysAdvertised"),
        (true, "Advertised")
    );
    assert_eq!(
        condition(&p, "KodoCutoverReady"),
        (false, "WaitingForDiscoveryGrace")
    );
    assert_eq!(
        condition(&p, "KodoProducerRestartConfirmed"),
        (false, "WaitingForRestart")
    );
    assert_eq!(p.phase, Phase::WaitingForKodoCutover);
    assert_eq!(p.kodo_baseline_nonce.as_deref(), Some("n0"));
    assert!(disruptions(&p).is_empty());
}

#[test]
fn the_grace_runs_from_the_advertisement_then_the_nonce_fence_then_disruptions() {
    let spec = kodo_spec(true);
    let obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    // advertised 100 s ago: grace not over
    let p = run(&spec, &obs, &previous(Some(100), Some("n0")));
    assert_eq!(p.phase, Phase::WaitingForKodoCutover);
    assert!(p.message.contains("100s of the 630s"), "{}", p.message);
    assert!(disruptions(&p).is_empty());
    // grace over, nonce unchanged since the baseline
    let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
    assert_eq!(p.phase, Phase::WaitingForKodoProducerRestart);
    assert_eq!(
        condition(&p, "KodoCutoverReady"),
        (true, "DiscoveryGraceElapsed")
    );
    assert_eq!(
        condition(&p, "KodoProducerRestartConfirmed"),
        (false, "WaitingForRestart")
    );
    assert!(disruptions(&p).is_empty());
    assert_eq!(p.kodo_baseline_nonce.as_deref(), Some("n0"));
    // the producers were restarted: the broker rollout to the Kodo config may start
    let mut restarted = spec.clone();
    restarted.kodo_compatibility.producer_restart_nonce = "n1".into();
    let p = run(&restarted, &obs, &previous(Some(GRACE), Some("n0")));
    assert_eq!(
        condition(&p, "KodoProducerRestartConfirmed"),
        (true, "NonceChangedAfterAdvertisement")
    );
    assert_eq!(p.phase, Phase::Rolling, "{}", p.message);
    assert_eq!(
        disruptions(&p),
        [&Action::Drain {
            pod: "q-2".into(),
            goal: DrainGoal::Quiesced
        }]
    );
    assert_eq!(
        p.kodo_baseline_nonce.as_deref(),
        Some("n0"),
        "the baseline stays"
    );
    // and once every broker runs the target: Ready, every Kodo gate holding
    let obs = cluster(
        &restarted,
        "b",
        discovery(Some(Kodo), Some(Kodo), 0, 2),
        Some(3),
    );
    let p = run(&restarted, &obs, &previous(Some(GRACE + 60), Some("n0")));
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
    assert!(condition(&p, "Ready").0);
}

#[test]
fn a_nonce_changed_before_the_advertisement_does_not_count() {
    let mut spec = kodo_spec(true);
    spec.kodo_compatibility.producer_restart_nonce = "n1".into();
    let obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    // first advertised reconcile: the baseline is the current nonce
    let p = run(&spec, &obs, &previous(Some(GRACE), None));
    assert_eq!(p.kodo_baseline_nonce.as_deref(), Some("n1"));
    assert_eq!(p.phase, Phase::WaitingForKodoProducerRestart);
}

#[test]
fn maintenance_and_scale_down_wait_for_the_fences() {
    let mut spec = kodo_spec(true);
    spec.maintenance = Some(Maintenance {
        broker: "q-1".into(),
        enabled: true,
    });
    let obs = cluster(&spec, "b", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    let p = run(&spec, &obs, &previous(Some(100), Some("n0")));
    assert!(disruptions(&p).is_empty());
    assert_eq!(p.phase, Phase::WaitingForKodoCutover);
    // a fourth broker left over: no drain either
    let mut obs = obs;
    obs.statefulset_replicas = Some(4);
    let obs4 = Observed {
        brokers: Observed::test().brokers(4).at_revision("b").build().brokers,
        ..obs
    };
    spec.maintenance = None;
    let p = run(&spec, &obs4, &previous(Some(GRACE), Some("n0")));
    assert!(disruptions(&p).is_empty(), "{:?}", p.actions);
    assert_eq!(p.phase, Phase::WaitingForKodoProducerRestart);
}

#[test]
fn a_soak_failure_switches_back_and_clears_the_baseline() {
    let spec = kodo_spec(true);
    // the Kodo-mode Pods fell out of Ready; the old direct Pods still run
    let obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 2, 0), Some(3));
    let p = run(&spec, &obs, &previous(Some(300), Some("n0")));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Direct)));
    assert_eq!(
        condition(&p, "KodoGatewaysAdvertised"),
        (false, "WaitingForGateways")
    );
    assert_eq!(
        p.kodo_baseline_nonce, None,
        "a new restart confirmation is needed"
    );
    assert_eq!(
        condition(&p, "KodoProducerRestartConfirmed"),
        (false, "WaitingForAdvertisement")
    );
    assert_eq!(p.phase, Phase::WaitingForKodoAdvertisement);
}

#[test]
fn losing_the_advertisement_without_a_fallback_keeps_the_route_and_clears_the_baseline() {
    let spec = kodo_spec(true);
    let obs = cluster(&spec, "b", discovery(Some(Kodo), Some(Kodo), 0, 1), Some(3));
    let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
    assert_eq!(layout(&p).route, Some(Kodo));
    assert_eq!(p.kodo_baseline_nonce, None);
    assert_ne!(p.phase, Phase::Ready);
    assert!(!condition(&p, "Ready").0);
}

#[test]
fn disabling_without_confirmation_is_blocked_and_changes_nothing() {
    let spec = disabled(false);
    // the non-Kodo config would be a new revision: nothing rolls
    let obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
    assert_eq!(p.phase, Phase::KodoDecommissionBlocked);
    assert!(p.message.contains("decommissionConfirmed"), "{}", p.message);
    let l = layout(&p);
    assert_eq!(l.gateway_replicas, Some(3));
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Kodo)));
    assert!(
        p.actions
            .iter()
            .all(|a| matches!(a, Action::ApplyRuntime { .. })),
        "{:?}",
        p.actions
    );
    assert_eq!(condition(&p, "Degraded"), (true, "KodoDecommissionBlocked"));
    assert!(!condition(&p, "Ready").0);
    assert!(!condition(&p, "Progressing").0);
    assert_eq!(
        condition(&p, "KodoGatewaysActive"),
        (true, "RetainedForSafety")
    );
    assert_eq!(
        condition(&p, "KodoDecommissionConfirmed"),
        (false, "ConfirmationRequired")
    );
    assert!(
        !p.conditions
            .iter()
            .any(|c| c.type_ == "KodoGatewaysAdvertised"),
        "the other Kodo conditions keep their values"
    );
}

#[test]
fn the_blocked_state_keeps_desiring_the_profiles_three_brokers_or_more() {
    // (minBrokers, maxBrokers, eligible Nodes) of the spec that disabled the profile, and the
    // desiredBrokers the blocked state reports: max(the ordinary count, 3).
    for (min, max, nodes, want) in [(1, 1, 3, 3), (1, 2, 3, 3), (3, 5, 5, 5), (3, 3, 3, 3)] {
        let mut spec = disabled(false);
        spec.min_brokers = min;
        spec.max_brokers = max;
        let mut obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
        obs.eligible_nodes = nodes;
        let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
        assert_eq!(p.phase, Phase::KodoDecommissionBlocked, "{}", p.message);
        assert_eq!(p.desired_brokers, want, "min {min} max {max} nodes {nodes}");
        assert_eq!(p.ready_brokers, 3);
    }
}

#[test]
fn a_confirmed_disable_rolls_brokers_while_discovery_is_held_in_kodo_mode() {
    let spec = disabled(true);
    let obs = cluster(&spec, "a", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
    let l = layout(&p);
    assert_eq!(l.gateway_replicas, Some(3), "retained");
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Kodo)), "held");
    assert_eq!(p.phase, Phase::Rolling, "{}", p.message);
    assert_eq!(disruptions(&p).len(), 1);
    assert!(!deletes(&p));
    assert_eq!(p.kodo_baseline_nonce, None, "disabling clears the baseline");
    assert_eq!(
        condition(&p, "KodoGatewaysActive"),
        (true, "RetainedForSafety")
    );
    assert_eq!(
        condition(&p, "KodoDecommissionConfirmed"),
        (true, "Confirmed")
    );
    assert_eq!(
        condition(&p, "KodoDirectBrokersAdvertised"),
        (false, "WaitingForSafeInventory")
    );
}

#[test]
fn once_the_brokers_are_current_discovery_rolls_back_to_direct_then_the_selector_flips() {
    let spec = disabled(true);
    // every broker current: discovery goes direct; its direct Pods not Ready yet
    let obs = cluster(&spec, "b", discovery(Some(Kodo), Some(Kodo), 0, 2), Some(3));
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Direct, Some(Kodo)));
    assert_eq!(l.gateway_replicas, Some(3));
    assert_eq!(p.phase, Phase::DisablingKodo);
    assert!(p.message.contains("direct advertisement"), "{}", p.message);
    assert!(!deletes(&p));
    assert!(!condition(&p, "Ready").0);

    // direct Pods Ready: the selector flips; the Gateways stay for the grace even though the
    // decommission is confirmed, so every Kodo producer refreshes /nodes onto the brokers first
    let obs = cluster(
        &spec,
        "b",
        discovery(Some(Direct), Some(Kodo), 2, 2),
        Some(3),
    );
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Direct, Some(Direct)));
    assert_eq!(l.gateway_replicas, Some(3), "retained through the grace");
    assert!(!deletes(&p));
    assert_eq!(
        condition(&p, "KodoDirectBrokersAdvertised"),
        (true, "Advertised")
    );
    assert_eq!(p.phase, Phase::DisablingKodo, "{}", p.message);
    assert!(p.message.contains("of the 630s grace"), "{}", p.message);
    assert!(!condition(&p, "Ready").0);

    // advertised for the whole grace: now the Gateways go
    let direct_since = RustQueueStatus {
        conditions: vec![cond(
            "KodoDirectBrokersAdvertised",
            true,
            "Advertised",
            NOW - GRACE,
        )],
        ..RustQueueStatus::default()
    };
    let p = run(&spec, &obs, &direct_since);
    assert_eq!(layout(&p).gateway_replicas, None);
    assert!(deletes(&p));
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
}

#[test]
fn gateways_someone_else_owns_are_never_deleted() {
    let spec = disabled(true);
    let mut obs = cluster(
        &spec,
        "b",
        discovery(Some(Direct), Some(Direct), 2, 0),
        Some(3),
    );
    obs.kodo.gateways.as_mut().unwrap().owned = false;
    let direct_since = RustQueueStatus {
        conditions: vec![cond(
            "KodoDirectBrokersAdvertised",
            true,
            "Advertised",
            NOW - GRACE,
        )],
        ..RustQueueStatus::default()
    };
    let p = run(&spec, &obs, &direct_since);
    assert!(!deletes(&p));
    assert_eq!(layout(&p).gateway_replicas, None);
}

#[test]
fn a_completed_decommission_is_never_resurrected() {
    for (confirmed, empty_set) in [(true, false), (false, false), (true, true), (false, true)] {
        let spec = disabled(confirmed);
        let mut obs = cluster(
            &spec,
            "b",
            discovery(Some(Direct), Some(Direct), 2, 0),
            None,
        );
        if empty_set {
            // what an older operator's removal left: the StatefulSet at 0, its Pods gone; it
            // is deleted now, never scaled up again
            let mut g = gateways(&obs, &spec, 0);
            g.replicas = 0;
            g.pods.clear();
            obs.kodo.gateways = Some(g);
        }
        let p = run(&spec, &obs, &previous(None, None));
        let l = layout(&p);
        assert_eq!(l.gateway_replicas, None);
        assert_eq!((l.discovery_mode, l.route), (Direct, Some(Direct)));
        assert_eq!(deletes(&p), empty_set, "confirmed {confirmed}");
        assert_eq!(
            p.phase,
            Phase::Ready,
            "confirmed {confirmed}: {}",
            p.message
        );
        assert_eq!(condition(&p, "KodoGatewaysActive"), (false, "Disabled"));
        assert_eq!(
            condition(&p, "KodoDecommissionConfirmed"),
            (false, "NotRequired")
        );
        assert_eq!(l.discovery_min_ready_seconds, 30);
    }
}

#[test]
fn outside_the_profile_nothing_kodo_is_rendered_and_the_conditions_say_disabled() {
    let spec = RustQueueSpec::with_image("rustqueue:b");
    let obs = Observed::test()
        .brokers(3)
        .at_revision("b")
        .kodo(discovery(Some(Direct), Some(Direct), 2, 0))
        .build();
    let p = run(&spec, &obs, &RustQueueStatus::default());
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
    assert_eq!(layout(&p), KodoLayout::default());
    for t in [
        "KodoGatewaysActive",
        "KodoGatewaysReady",
        "KodoGatewaysAdvertised",
        "KodoCutoverReady",
        "KodoProducerRestartConfirmed",
        "KodoCleanupActive",
    ] {
        assert_eq!(condition(&p, t), (false, "Disabled"), "{t}");
    }
    assert_eq!(
        condition(&p, "KodoDirectBrokersAdvertised"),
        (true, "Advertised")
    );
}

#[test]
fn a_vanished_discovery_comes_back_in_the_mode_it_served() {
    // enabled and advertised: back in Kodo mode even before the Gateways are Ready again
    let spec = kodo_spec(true);
    let mut obs = cluster(&spec, "a", discovery(None, Some(Kodo), 0, 0), Some(1));
    obs.discovery = None;
    let p = run(&spec, &obs, &previous(Some(GRACE), Some("n0")));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Kodo)));
    // a confirmed disable still holding: back in Kodo mode, the Gateways retained
    let spec = disabled(true);
    let mut obs = cluster(&spec, "a", discovery(None, Some(Kodo), 0, 0), Some(3));
    obs.discovery = None;
    let p = run(&spec, &obs, &previous(None, None));
    let l = layout(&p);
    assert_eq!((l.discovery_mode, l.route), (Kodo, Some(Kodo)));
    assert_eq!(l.gateway_replicas, Some(3));
    assert!(!deletes(&p));
    // never advertised: direct, as on a new cluster
    let spec = kodo_spec(true);
    let mut obs = cluster(&spec, "a", discovery(None, None, 0, 0), Some(1));
    obs.discovery = None;
    let p = run(&spec, &obs, &previous(None, None));
    assert_eq!(layout(&p).discovery_mode, Direct);
}
