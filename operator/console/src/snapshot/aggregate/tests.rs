use crate::fixtures::{broker_view, observation, snapshot, topic};

#[test]
fn topics_and_channels_sum_over_their_owners() {
    let mut a = broker_view("q-0", 1);
    a.observation = Some(observation(
        1,
        vec![topic("orders", 10, &[("billing", 4), ("audit", 1)])],
    ));
    let mut b = broker_view("q-1", 2);
    b.observation = Some(observation(
        2,
        vec![topic("orders", 5, &[("billing", 2)]), topic("logs", 3, &[])],
    ));
    let mut paused = topic("orders", 1, &[("billing", 0)]);
    paused.paused = true;
    paused.channels[0].paused = true;
    let mut c = broker_view("q-2", 3);
    c.observation = Some(observation(3, vec![paused]));
    let s = snapshot(vec![a, b, c]);
    let names: Vec<&str> = s.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["logs", "orders"]);
    let orders = &s.topics[1];
    assert_eq!(orders.owners, ["q-0", "q-1", "q-2"]);
    assert_eq!(orders.stored_messages, 16);
    assert_eq!(orders.segment_count, 3);
    assert!(orders.paused, "paused on any owner");
    let billing = orders
        .channels
        .iter()
        .find(|c| c.name == "billing")
        .unwrap();
    assert_eq!(
        (billing.depth, billing.owners.len(), billing.paused),
        (6, 3, true)
    );
    let audit = orders.channels.iter().find(|c| c.name == "audit").unwrap();
    assert_eq!(audit.owners, ["q-0"]);
    assert_eq!(s.summary.stored_messages, 19);
    assert_eq!(s.summary.depth, 7);
}

#[test]
fn storage_sums_disks_and_merges_histograms() {
    let mut a = broker_view("q-0", 1);
    let mut b = broker_view("q-1", 2);
    for (v, n) in [(&mut a, 1u64), (&mut b, 2)] {
        let o = v.observation.as_mut().unwrap();
        o.queue.histograms.storage_fsync = rustqueue_api::contract::HistogramSnapshot {
            bounds: vec![0.001, 0.01],
            counts: vec![n, 0, 0],
            sum_seconds: 0.0,
            count: n,
        };
        o.storage.segment_count = n;
    }
    b.observation.as_mut().unwrap().head.disk.pressure = true;
    let s = snapshot(vec![a, b]);
    assert_eq!(s.storage.total_bytes, 2000);
    assert_eq!(s.storage.available_bytes, 1600);
    assert!((s.storage.used_percent - 20.0).abs() < 1e-9);
    assert_eq!(s.storage.segment_count, 3);
    assert_eq!(s.storage.pressure_brokers, ["q-1"]);
    assert_eq!(s.storage.fsync.counts, vec![3, 0, 0]);
}

#[test]
fn a_snapshot_is_complete_only_with_every_desired_broker_and_no_error() {
    assert!(snapshot(vec![broker_view("q-0", 1)]).complete);
    let mut failed = broker_view("q-0", 1);
    failed.error = Some("timed out".into());
    let s = snapshot(vec![failed]);
    assert!(!s.complete);
    assert_eq!(s.errors, ["broker q-0: timed out"]);
    assert!(!snapshot(Vec::new()).complete);
    let mut missing = crate::snapshot::build(crate::snapshot::Collected {
        now_ms: 0,
        rustqueue: crate::fixtures::rustqueue(3),
        brokers: vec![crate::snapshot::BrokerState {
            observation: Some(observation(1, Vec::new())),
            ..Default::default()
        }],
        events: Vec::new(),
        errors: Vec::new(),
    });
    assert!(!missing.complete, "1 of 3 desired brokers");
    missing.brokers.clear();
}

#[test]
fn events_are_those_of_the_queue_newest_first() {
    use crate::cluster::ClusterEvent;
    let ev = |name: &str, uid: &str, at: u64| ClusterEvent {
        object_name: name.into(),
        object_uid: uid.into(),
        last_seen_ms: at,
        ..ClusterEvent::default()
    };
    let s = crate::snapshot::build(crate::snapshot::Collected {
        now_ms: 0,
        rustqueue: crate::fixtures::rustqueue(0),
        brokers: Vec::new(),
        events: vec![
            ev("q", "", 1),
            ev("q-0", "", 3),
            ev("other", "", 4),
            ev("x", "rq-uid", 2),
            ev("qq", "", 5),
        ],
        errors: Vec::new(),
    });
    let seen: Vec<u64> = s.events.iter().map(|e| e.last_seen_ms).collect();
    assert_eq!(seen, [3, 2, 1]);
}

#[test]
fn the_cluster_view_carries_the_spec_and_status() {
    let s = snapshot(vec![broker_view("q-0", 1)]);
    assert_eq!(s.cluster.name, "q");
    assert_eq!(s.cluster.namespace, "ns");
    assert_eq!(s.cluster.phase.as_deref(), Some("Ready"));
    assert_eq!(s.cluster.spec["image"], "rustqueue:test");
}
