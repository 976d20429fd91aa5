//! Table tests: one row per decision of `plan`.

use super::*;

fn spec() -> RustQueueSpec {
    RustQueueSpec::with_image("rustqueue:dev")
}

fn broker(name: &str, ready: bool) -> BrokerPod {
    BrokerPod {
        name: name.into(),
        pod_ready: ready,
        terminating: false,
        revision: Some("r1".into()),
        waiting: None,
        health: if ready {
            Health::Ready
        } else {
            Health::Unreachable("connection refused".into())
        },
    }
}

fn valid() -> AuthState {
    AuthState::Valid {
        revision: "7".into(),
    }
}

/// A cluster with `nodes` eligible Nodes, a StatefulSet of `sts` replicas and these Pods.
fn observed(nodes: i32, sts: Option<i32>, brokers: Vec<BrokerPod>) -> Observed {
    Observed {
        eligible_nodes: nodes,
        statefulset_replicas: sts,
        brokers,
        claims: Vec::new(),
        auth: valid(),
        claim_template_size: None,
    }
}

fn three_ready() -> Vec<BrokerPod> {
    (0..3).map(|i| broker(&format!("q-{i}"), true)).collect()
}

fn cond<'a>(p: &'a Plan, t: &str) -> &'a ConditionSpec {
    p.conditions.iter().find(|c| c.type_ == t).unwrap()
}

fn apply(replicas: i32) -> Action {
    Action::ApplyChildren {
        replicas,
        auth_revision: "7".into(),
    }
}

#[test]
fn desired_brokers_is_eligible_nodes_clamped_to_min_and_max() {
    let mut s = spec();
    s.min_brokers = 2;
    s.max_brokers = 4;
    for (eligible, desired) in [(0, 2), (1, 2), (2, 2), (3, 3), (4, 4), (9, 4)] {
        assert_eq!(
            desired_brokers(&s, eligible),
            desired,
            "eligible {eligible}"
        );
    }
}

#[test]
fn phase_table() {
    struct Row {
        what: &'static str,
        spec: fn() -> RustQueueSpec,
        obs: Observed,
        phase: Phase,
        actions: Vec<Action>,
        message: &'static str,
    }
    let user_secret = || {
        let mut s = spec();
        s.registry_secret_name = Some("mine".into());
        s
    };
    let blocked_claim = Claim {
        name: "data-q-0".into(),
        storage_class: Some("other".into()),
        requested: Some("100Gi".into()),
        capacity: Some("100Gi".into()),
        bound: true,
    };
    let rows = vec![
        Row {
            what: "fresh resource: generate the auth Secret first",
            spec,
            obs: Observed {
                auth: AuthState::GeneratedMissing,
                ..observed(3, None, vec![])
            },
            phase: Phase::Scaling,
            actions: vec![Action::CreateAuthSecret {
                name: "q-auth".into(),
            }],
            message: "creating the auth Secret",
        },
        Row {
            what: "secret exists, no StatefulSet: scale from 0",
            spec,
            obs: observed(3, None, vec![]),
            phase: Phase::Scaling,
            actions: vec![apply(3)],
            message: "scaling from 0 to 3 brokers",
        },
        Row {
            what: "new eligible node: scale up",
            spec,
            obs: observed(4, Some(3), three_ready()),
            phase: Phase::Scaling,
            actions: vec![apply(4)],
            message: "scaling from 3 to 4 brokers",
        },
        Row {
            what: "set at size, one broker not ready yet",
            spec,
            obs: observed(3, Some(3), {
                let mut b = three_ready();
                b[1] = broker("q-1", false);
                b
            }),
            phase: Phase::Rolling,
            actions: vec![apply(3)],
            message: "2/3 brokers ready; waiting for q-1: PodNotReady (connection refused)",
        },
        Row {
            what: "a broker Pod is missing (deleted, not recreated yet)",
            spec,
            obs: observed(3, Some(3), three_ready().into_iter().take(2).collect()),
            phase: Phase::Rolling,
            actions: vec![apply(3)],
            message: "waiting for q-2: PodMissing",
        },
        Row {
            what: "all brokers ready",
            spec,
            obs: observed(3, Some(3), three_ready()),
            phase: Phase::Ready,
            actions: vec![apply(3)],
            message: "3/3 brokers ready",
        },
        Row {
            what: "a node lost its label: never shrink without a drain",
            spec,
            obs: observed(2, Some(3), three_ready()),
            phase: Phase::Ready,
            actions: vec![apply(3)],
            message: "scale-down waits for drain support",
        },
        Row {
            what: "fewer eligible nodes than minBrokers",
            spec: || {
                let mut s = spec();
                s.min_brokers = 3;
                s
            },
            obs: observed(1, None, vec![]),
            phase: Phase::InsufficientNodes,
            actions: vec![apply(3)],
            message: "1 eligible nodes; desired is 3 and minimum is 3: label more Nodes",
        },
        Row {
            what: "invalid spec changes nothing",
            spec: || {
                let mut s = spec();
                s.min_brokers = 9;
                s.max_brokers = 3;
                s
            },
            obs: observed(3, Some(3), three_ready()),
            phase: Phase::InvalidSpec,
            actions: vec![],
            message: "invalid spec: spec.minBrokers (9) must be between 1 and spec.maxBrokers (3)",
        },
        Row {
            what: "user-named Secret missing",
            spec: user_secret,
            obs: Observed {
                auth: AuthState::UserMissing,
                ..observed(3, None, vec![])
            },
            phase: Phase::InvalidSpec,
            actions: vec![],
            message: "Secret mine named by spec.registrySecretName does not exist",
        },
        Row {
            what: "Secret with shared tokens",
            spec,
            obs: Observed {
                auth: AuthState::Invalid(
                    "Secret q-auth: admin-token and console-token must differ".into(),
                ),
                ..observed(3, Some(3), three_ready())
            },
            phase: Phase::InvalidSpec,
            actions: vec![],
            message: "must differ",
        },
        Row {
            what: "claim of another StorageClass blocks before touching anything",
            spec,
            obs: Observed {
                claims: vec![blocked_claim.clone()],
                ..observed(3, Some(3), three_ready())
            },
            phase: Phase::StorageBlocked,
            actions: vec![],
            message: "PVC data-q-0 uses StorageClass other",
        },
    ];
    for r in rows {
        let p = plan("q", &(r.spec)(), &r.obs);
        assert_eq!(p.phase, r.phase, "{}: {}", r.what, p.message);
        assert_eq!(p.actions, r.actions, "{}", r.what);
        assert!(
            p.message.contains(r.message),
            "{}: message {:?}",
            r.what,
            p.message
        );
    }
}

#[test]
fn conditions_follow_the_phase() {
    // (observed, Ready, Progressing, Degraded, BrokersAvailable)
    let mut one_down = three_ready();
    one_down[0] = broker("q-0", false);
    let cases = [
        (
            observed(3, Some(3), three_ready()),
            true,
            false,
            false,
            true,
        ),
        (observed(3, Some(3), one_down), false, true, false, false),
        (observed(3, None, vec![]), false, true, false, false),
        (observed(0, None, vec![]), false, false, true, false),
    ];
    for (i, (obs, ready, progressing, degraded, available)) in cases.into_iter().enumerate() {
        let p = plan("q", &spec(), &obs);
        assert_eq!(cond(&p, "Ready").status, ready, "case {i}");
        assert_eq!(cond(&p, "Progressing").status, progressing, "case {i}");
        assert_eq!(cond(&p, "Degraded").status, degraded, "case {i}");
        assert_eq!(cond(&p, "BrokersAvailable").status, available, "case {i}");
        assert_eq!(cond(&p, "Ready").reason, p.phase.as_str(), "case {i}");
    }
}

#[test]
fn conditions_are_sorted_by_type_and_ready_reason_is_ready() {
    let p = plan("q", &spec(), &observed(3, Some(3), three_ready()));
    let types: Vec<&str> = p.conditions.iter().map(|c| c.type_).collect();
    assert_eq!(
        types,
        [
            "BrokersAvailable",
            "Degraded",
            "Progressing",
            "Ready",
            "StorageReady"
        ]
    );
    assert_eq!(cond(&p, "Ready").reason, "Ready");
    assert_eq!(cond(&p, "BrokersAvailable").reason, "AllReady");
    assert_eq!(cond(&p, "StorageReady").reason, "CapacityReady");
}

#[test]
fn invalid_spec_is_degraded_with_the_validation_message() {
    let mut s = spec();
    s.eligible_node_selector = "a=b,c=d".into();
    let p = plan("q", &s, &observed(3, Some(3), three_ready()));
    let d = cond(&p, "Degraded");
    assert!(d.status);
    assert_eq!(d.reason, "InvalidSpec");
    assert!(d.message.contains("exactly one key=value"), "{}", d.message);
    assert!(!cond(&p, "Ready").status);
}

#[test]
fn a_draining_broker_is_unavailable_with_its_reason() {
    let mut b = three_ready();
    b[2].health = Health::NotReady(NotReadyReason::Draining);
    let p = plan("q", &spec(), &observed(3, Some(3), b));
    assert_eq!(p.ready_brokers, 2);
    let avail = cond(&p, "BrokersAvailable");
    assert_eq!(
        (avail.status, avail.reason.as_str()),
        (false, "PodsUnavailable")
    );
    assert_eq!(avail.message, "q-2: draining");
}

#[test]
fn pod_ready_alone_is_not_enough_and_terminating_pods_do_not_count() {
    let mut b = three_ready();
    b[0].health = Health::Unreachable("timeout".into());
    b[1].terminating = true;
    let p = plan("q", &spec(), &observed(3, Some(3), b));
    assert_eq!(p.ready_brokers, 1);
    assert!(p.message.contains("q-0: timeout") && p.message.contains("q-1: terminating"));
}

#[test]
fn waiting_reasons_from_the_kubelet_are_reported() {
    let mut b = three_ready();
    b[1] = BrokerPod {
        waiting: Some("ImagePullBackOff".into()),
        ..broker("q-1", false)
    };
    let p = plan("q", &spec(), &observed(3, Some(3), b));
    assert_eq!(
        cond(&p, "BrokersAvailable").message,
        "q-1: ImagePullBackOff"
    );
}

#[test]
fn unbound_claims_leave_storage_not_ready_without_blocking() {
    let obs = Observed {
        claims: vec![Claim {
            name: "data-q-0".into(),
            storage_class: Some("local-path".into()),
            requested: Some("100Gi".into()),
            capacity: None,
            bound: false,
        }],
        ..observed(3, Some(3), three_ready())
    };
    let p = plan("q", &spec(), &obs);
    assert_eq!(p.phase, Phase::Ready);
    let s = cond(&p, "StorageReady");
    assert_eq!(
        (s.status, s.reason.as_str()),
        (false, "StorageProvisioning")
    );
}

#[test]
fn pods_outside_the_target_set_do_not_count_as_ready() {
    let mut b = three_ready();
    b.push(broker("q-7", true));
    b.push(broker("other-0", true));
    let p = plan("q", &spec(), &observed(3, Some(3), b));
    assert_eq!(p.ready_brokers, 3);
}
