use rustqueue_api::crd::{
    CatalogAction, CatalogOperation, CatalogPhase, RustQueueChannelSpec, RustQueueTopicSpec,
};

use super::*;
use crate::fixtures::{broker_view, observation, snapshot, topic};
use crate::manage::catalog::{new_channel, new_topic};

fn req(kind: ManageKind, action: UiAction, channel: Option<&str>) -> ActionRequest {
    ActionRequest {
        kind,
        action,
        topic: "orders".into(),
        channel: channel.map(Into::into),
        action_token: None,
        confirmation: None,
    }
}

/// q-0 holds orders/billing, q-1 holds orders/billing and orders/shared, q-2 holds nothing.
fn world() -> (Snapshot, Catalog) {
    let mut a = broker_view("q-0", 1);
    a.observation = Some(observation(
        1,
        vec![topic("orders", 5, &[("billing", 2), ("tail#ephemeral", 0)])],
    ));
    let mut b = broker_view("q-1", 2);
    b.observation = Some(observation(2, vec![topic("orders", 5, &[("billing", 3)])]));
    let c = broker_view("q-2", 3);
    let mut s = snapshot(vec![a, b, c]);
    s.management = crate::snapshot::ManagementView {
        enabled: true,
        registry_available: true,
        crd_fresh: true,
    };
    let mut catalog = Catalog::default();
    let mut t = new_topic(
        &s.cluster,
        topic_spec(CatalogPhase::Active, &["q-0", "q-1"]),
    );
    t.metadata.uid = Some("t-uid".into());
    t.metadata.resource_version = Some("10".into());
    catalog.topics.push(t);
    let mut ch = new_channel(
        &s.cluster,
        channel_spec("billing", CatalogPhase::Active, &["q-0", "q-1"]),
    );
    ch.metadata.resource_version = Some("11".into());
    catalog.channels.push(ch);
    (s, catalog)
}

fn topic_spec(phase: CatalogPhase, owners: &[&str]) -> RustQueueTopicSpec {
    RustQueueTopicSpec {
        queue: "q".into(),
        topic: "orders".into(),
        owners: owners.iter().map(|o| o.to_string()).collect(),
        phase,
        revision: 1,
        paused: false,
        tombstone_until_ms: None,
        last_error: None,
        operation: None,
    }
}

fn channel_spec(name: &str, phase: CatalogPhase, owners: &[&str]) -> RustQueueChannelSpec {
    RustQueueChannelSpec {
        queue: "q".into(),
        topic: "orders".into(),
        channel: name.into(),
        owners: owners.iter().map(|o| o.to_string()).collect(),
        phase,
        revision: 1,
        paused: false,
        ephemeral: false,
        tombstone_until_ms: None,
        last_error: None,
        operation: None,
    }
}

fn op(action: CatalogAction) -> Option<CatalogOperation> {
    Some(CatalogOperation {
        id: "op-0123456789abcdef".into(),
        action,
        completed_owners: Vec::new(),
        attempt: 1,
        created_at_ms: 0,
        updated_at_ms: 0,
    })
}

fn run(r: &ActionRequest, s: &Snapshot, c: &Catalog) -> Result<Decision, ApiError> {
    decide(
        r,
        &View {
            snapshot: s,
            catalog: c,
            now_ms: 1_001_000,
            staleness_ms: 8_000,
        },
    )
}

fn code(r: Result<Decision, ApiError>) -> &'static str {
    r.err().map_or("ok", |e| e.code)
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one row per refusal of docs/console.md, formatted one field a line"
)]
fn every_refusal_has_its_code() {
    use ManageKind::{Channel, Topic};
    type Edit = fn(&mut Snapshot, &mut Catalog);
    let table: Vec<(&str, ActionRequest, Edit, &str)> = vec![
        (
            "ok pause",
            req(Topic, UiAction::Pause, None),
            |_, _| {},
            "ok",
        ),
        (
            "stale",
            req(Topic, UiAction::Pause, None),
            |s, _| s.collected_at_ms -= 10_000,
            codes::MANAGEMENT_UNAVAILABLE,
        ),
        (
            "incomplete",
            req(Topic, UiAction::Pause, None),
            |s, _| s.complete = false,
            codes::MANAGEMENT_UNAVAILABLE,
        ),
        (
            "disabled",
            req(Topic, UiAction::Pause, None),
            |s, _| s.management.enabled = false,
            codes::MANAGEMENT_UNAVAILABLE,
        ),
        (
            "crd stale",
            req(Topic, UiAction::Pause, None),
            |s, _| s.management.crd_fresh = false,
            codes::MANAGEMENT_UNAVAILABLE,
        ),
        (
            "no registry",
            req(Topic, UiAction::Pause, None),
            |s, _| s.management.registry_available = false,
            codes::MANAGEMENT_UNAVAILABLE,
        ),
        (
            "ephemeral name",
            req(Channel, UiAction::Pause, Some("tail#ephemeral")),
            |_, _| {},
            codes::EPHEMERAL_UNMANAGED,
        ),
        (
            "ephemeral object",
            req(Channel, UiAction::Pause, Some("billing")),
            |_, c| c.channels[0].spec.ephemeral = true,
            codes::EPHEMERAL_UNMANAGED,
        ),
        (
            "topic exists",
            req(Topic, UiAction::Create, None),
            |_, _| {},
            codes::ALREADY_EXISTS,
        ),
        (
            "topic on a broker only",
            req(Topic, UiAction::Create, None),
            |_, c| c.topics.clear(),
            codes::ALREADY_EXISTS,
        ),
        (
            "recreate tombstoned",
            req(Topic, UiAction::Create, None),
            |s, c| {
                c.topics[0].spec.phase = CatalogPhase::Tombstoned;
                s.topics.clear();
            },
            "ok",
        ),
        (
            "channel exists",
            req(Channel, UiAction::Create, Some("billing")),
            |_, _| {},
            codes::ALREADY_EXISTS,
        ),
        (
            "new channel",
            req(Channel, UiAction::Create, Some("fresh")),
            |_, _| {},
            "ok",
        ),
        (
            "retry not failed",
            req(Topic, UiAction::Retry, None),
            |_, _| {},
            codes::RETRY_NOT_FAILED,
        ),
        (
            "retry failed",
            req(Topic, UiAction::Retry, None),
            |_, c| {
                c.topics[0].spec.phase = CatalogPhase::Failed;
                c.topics[0].spec.operation = op(CatalogAction::Pause);
            },
            "ok",
        ),
        (
            "applying",
            req(Topic, UiAction::Pause, None),
            |_, c| c.topics[0].spec.phase = CatalogPhase::Applying,
            codes::OPERATION_IN_PROGRESS,
        ),
        (
            "failed",
            req(Topic, UiAction::Pause, None),
            |_, c| c.topics[0].spec.phase = CatalogPhase::Failed,
            codes::OPERATION_IN_PROGRESS,
        ),
        (
            "channel busy",
            req(Topic, UiAction::Pause, None),
            |_, c| {
                c.channels[0].spec.phase = CatalogPhase::Applying;
                c.channels[0].spec.operation = op(CatalogAction::Pause);
            },
            codes::CHANNEL_OPERATION_IN_PROGRESS,
        ),
        (
            "topic busy",
            req(Channel, UiAction::Pause, Some("billing")),
            |_, c| c.topics[0].spec.phase = CatalogPhase::Applying,
            codes::TOPIC_OPERATION_IN_PROGRESS,
        ),
        (
            "two-owner empty",
            req(Channel, UiAction::Empty, Some("billing")),
            |_, _| {},
            codes::MIGRATION_IN_PROGRESS,
        ),
        (
            "two-owner delete",
            req(Topic, UiAction::Delete, None),
            |_, _| {},
            codes::MIGRATION_IN_PROGRESS,
        ),
        (
            "unknown channel",
            req(Channel, UiAction::Pause, Some("nope")),
            |_, _| {},
            codes::NOT_FOUND,
        ),
        (
            "unhealthy owner",
            req(Topic, UiAction::Pause, None),
            |s, _| {
                s.brokers[1]
                    .observation
                    .as_mut()
                    .unwrap()
                    .head
                    .readiness
                    .draining = true
            },
            codes::OWNER_UNAVAILABLE,
        ),
        (
            "fences not synced",
            req(Topic, UiAction::Pause, None),
            |s, _| {
                s.brokers[0]
                    .observation
                    .as_mut()
                    .unwrap()
                    .head
                    .readiness
                    .management_fences_ready = false
            },
            codes::OWNER_UNAVAILABLE,
        ),
        (
            "bad shape",
            req(Topic, UiAction::Pause, Some("billing")),
            |_, _| {},
            codes::BAD_REQUEST,
        ),
    ];
    for (name, r, edit, want) in table {
        let (mut s, mut c) = world();
        edit(&mut s, &mut c);
        assert_eq!(code(run(&r, &s, &c)), want, "{name}");
    }
}

#[test]
fn a_new_topic_goes_to_the_emptiest_healthy_broker() {
    let (s, mut c) = world();
    c.topics.clear();
    let mut r = req(ManageKind::Topic, UiAction::Create, None);
    r.topic = "fresh".into();
    let d = run(&r, &s, &c).unwrap();
    assert_eq!(d.owners, ["q-2"], "q-2 holds no topic");
    assert_eq!(d.subject.kind, SubjectKind::Catalog);
    assert_eq!(d.subject.uid, "rq-uid");
    assert_eq!(d.subject.resource_version, c.revision());
    assert_eq!(d.impact.warnings, ["topic_requires_channel"]);
    assert_eq!(d.confirmation, None);
}

#[test]
fn owner_choice_prefers_fewest_topics_then_most_free_disk_then_name() {
    let b = |name: &str, topics: usize, free: u64| {
        let mut v = broker_view(name, 1);
        let o = v.observation.as_mut().unwrap();
        o.queue.topics = (0..topics)
            .map(|i| topic(&format!("t{i}"), 0, &[]))
            .collect();
        o.head.disk.available_bytes = free;
        v
    };
    assert_eq!(
        choose_owner(&[b("a", 2, 900), b("b", 1, 100)]).unwrap(),
        "b"
    );
    assert_eq!(
        choose_owner(&[b("a", 1, 100), b("b", 1, 900)]).unwrap(),
        "b"
    );
    assert_eq!(
        choose_owner(&[b("b", 1, 500), b("a", 1, 500)]).unwrap(),
        "a"
    );
    let mut pressured = b("a", 0, 900);
    pressured.observation.as_mut().unwrap().head.disk.pressure = true;
    assert_eq!(choose_owner(&[pressured, b("b", 5, 100)]).unwrap(), "b");
    assert_eq!(
        choose_owner(&[b("a", 0, 5)]).unwrap_err().code,
        codes::OWNER_UNAVAILABLE,
        "below min free"
    );
    let mut not_ready = b("a", 0, 900);
    not_ready.ready = false;
    assert!(choose_owner(&[not_ready]).is_err());
}

#[test]
fn destructive_actions_need_confirmation_and_warn() {
    let (s, mut c) = world();
    c.channels.push(new_channel(
        &s.cluster,
        channel_spec("solo", CatalogPhase::Active, &["q-0"]),
    ));
    let d = run(
        &req(ManageKind::Channel, UiAction::Empty, Some("solo")),
        &s,
        &c,
    )
    .unwrap();
    assert_eq!(d.confirmation.as_deref(), Some("solo"));
    assert_eq!(d.impact.warnings, ["immediate_irreversible"]);
    assert_eq!(
        d.owners,
        ["q-0"],
        "recorded owners when no broker holds it yet"
    );
    let pause = run(
        &req(ManageKind::Channel, UiAction::Pause, Some("billing")),
        &s,
        &c,
    )
    .unwrap();
    assert_eq!(pause.owners, ["q-0", "q-1"]);
    assert_eq!(pause.impact.depth, 5);
    assert_eq!(pause.confirmation, None);
    assert_eq!(pause.subject.kind, SubjectKind::Channel);
    assert_eq!(pause.subject.resource_version, "11");
}

#[test]
fn a_retry_resumes_the_failed_action() {
    let (s, mut c) = world();
    c.topics[0].spec.phase = CatalogPhase::Failed;
    c.topics[0].spec.operation = op(CatalogAction::Unpause);
    let d = run(&req(ManageKind::Topic, UiAction::Retry, None), &s, &c).unwrap();
    assert_eq!(d.action, CatalogAction::Unpause);
    assert_eq!(d.confirmation.as_deref(), Some("orders"));
}
