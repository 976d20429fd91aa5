use rustqueue_api::crd::{CatalogPhase, RustQueueChannelSpec, RustQueueTopicSpec};

use super::*;
use crate::fixtures::{broker_view, observation, snapshot, topic};

fn topic_cr(
    s: &Snapshot,
    name: &str,
    owners: &[&str],
    phase: CatalogPhase,
    version: &str,
) -> RustQueueTopic {
    let mut t = new_topic(
        &s.cluster,
        RustQueueTopicSpec {
            queue: "q".into(),
            topic: name.into(),
            owners: owners.iter().map(|o| o.to_string()).collect(),
            phase,
            revision: 3,
            paused: false,
            tombstone_until_ms: None,
            last_error: None,
            operation: None,
        },
    );
    t.metadata.resource_version = Some(version.into());
    t
}

fn two_owner_snapshot() -> Snapshot {
    let mut a = broker_view("q-0", 1);
    a.observation = Some(observation(
        1,
        vec![topic("orders", 1, &[("billing", 1), ("tail#ephemeral", 0)])],
    ));
    let mut b = broker_view("q-1", 2);
    b.observation = Some(observation(2, vec![topic("orders", 1, &[("billing", 1)])]));
    snapshot(vec![a, b])
}

#[test]
fn unseen_topics_and_channels_get_active_objects_owned_by_the_queue() {
    let s = two_owner_snapshot();
    let changes = plan_observed(&s.cluster, &s.topics, &Catalog::default(), 0);
    assert_eq!(changes.len(), 3);
    let Change::CreateTopic(t) = &changes[0] else {
        panic!("{changes:?}")
    };
    assert_eq!(t.spec.owners, ["q-0", "q-1"]);
    assert_eq!(t.spec.phase, CatalogPhase::Active);
    assert_eq!(
        t.metadata.name.as_deref(),
        Some(topic_object_name("q", "orders").as_str())
    );
    assert_eq!(t.metadata.labels.as_ref().unwrap()[QUEUE_LABEL], "q");
    let owner = &t.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("RustQueue", "rq-uid", Some(true))
    );
    let Change::CreateChannel(c) = &changes[2] else {
        panic!("{changes:?}")
    };
    assert_eq!(c.spec.channel, "tail#ephemeral");
    assert!(c.spec.ephemeral);
}

#[test]
fn settled_objects_follow_drift_and_pending_ones_are_left_alone() {
    let s = two_owner_snapshot();
    let table = [
        (CatalogPhase::Active, vec!["q-0"], None, true),
        (CatalogPhase::Active, vec!["q-1", "q-0"], None, false),
        (CatalogPhase::Tombstoned, vec![], Some(500), true),
        (CatalogPhase::Tombstoned, vec![], Some(5_000), false),
        (CatalogPhase::Applying, vec!["q-0"], None, false),
        (CatalogPhase::Failed, vec!["q-0"], None, false),
    ];
    for (i, (phase, owners, tomb, want)) in table.into_iter().enumerate() {
        let mut cr = topic_cr(&s, "orders", &owners, phase, "7");
        cr.spec.tombstone_until_ms = tomb;
        let catalog = Catalog {
            topics: vec![cr],
            channels: Vec::new(),
        };
        let changes = plan_observed(&s.cluster, &s.topics, &catalog, 1_000);
        let replaced = changes.iter().find_map(|c| match c {
            Change::ReplaceTopic(t) => Some(t),
            _ => None,
        });
        assert_eq!(replaced.is_some(), want, "row {i}: {changes:?}");
        if let Some(t) = replaced {
            assert_eq!(t.spec.owners, ["q-0", "q-1"]);
            assert_eq!(
                (t.spec.phase, t.spec.revision, t.spec.tombstone_until_ms),
                (CatalogPhase::Active, 4, None)
            );
        }
    }
}

#[test]
fn gone_ephemeral_channels_lose_their_objects() {
    let s = snapshot(vec![broker_view("q-0", 1)]);
    let c = new_channel(
        &s.cluster,
        RustQueueChannelSpec {
            queue: "q".into(),
            topic: "orders".into(),
            channel: "tail#ephemeral".into(),
            owners: vec!["q-0".into()],
            phase: CatalogPhase::Active,
            revision: 1,
            paused: false,
            ephemeral: true,
            tombstone_until_ms: None,
            last_error: None,
            operation: None,
        },
    );
    let name = c.metadata.name.clone().unwrap();
    let catalog = Catalog {
        topics: Vec::new(),
        channels: vec![c],
    };
    assert_eq!(
        plan_observed(&s.cluster, &s.topics, &catalog, 0),
        vec![Change::DeleteChannel(name)]
    );
}

#[test]
fn fences_list_unexpired_tombstones_under_a_revision_of_every_object() {
    let s = snapshot(vec![broker_view("q-0", 1)]);
    let mut dead = topic_cr(&s, "dead", &[], CatalogPhase::Tombstoned, "5");
    dead.spec.tombstone_until_ms = Some(2_000);
    let mut expired = topic_cr(&s, "old", &[], CatalogPhase::Tombstoned, "6");
    expired.spec.tombstone_until_ms = Some(500);
    let catalog = Catalog {
        topics: vec![dead, expired],
        channels: Vec::new(),
    };
    let f = catalog.fences(1_000);
    assert_eq!(
        f.topics.into_iter().collect::<Vec<_>>(),
        vec![("dead".to_string(), 2_000)]
    );
    assert_eq!(f.revision.len(), 8);
    let mut other = catalog.clone();
    other.topics[0].metadata.resource_version = Some("9".into());
    assert_ne!(other.revision(), catalog.revision());
    let mut reordered = catalog.clone();
    reordered.topics.reverse();
    assert_eq!(reordered.revision(), catalog.revision());
}

#[test]
fn objects_no_broker_holds_still_show_in_the_views() {
    let mut s = snapshot(vec![broker_view("q-0", 1)]);
    let mut t = topic_cr(&s, "fresh", &["q-0"], CatalogPhase::Preparing, "8");
    t.metadata.uid = Some("t-uid".into());
    Catalog {
        topics: vec![t],
        channels: Vec::new(),
    }
    .merge_into(&mut s);
    assert_eq!(s.topics.len(), 1);
    let v = &s.topics[0];
    assert_eq!(v.managed.managed_phase, Some(CatalogPhase::Preparing));
    assert_eq!(v.managed.resource_uid.as_deref(), Some("t-uid"));
    assert_eq!(v.managed.resource_version.as_deref(), Some("8"));
    assert_eq!(v.owners, ["q-0"]);
}
