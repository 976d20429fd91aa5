//! An operation's Events (Accepted, Succeeded, Failed) are recorded exactly once whenever the
//! console dies or the API server falters: a console stopped at an Event (its record never
//! answers, as when the Pod is killed right there) leaves the operation for the next console,
//! which records the Event then moves on; a record that fails is tried again, and one whose
//! reply was lost is found, not doubled.

mod support;

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use rustqueue_console::cluster::StoreError;
use rustqueue_console::manage::audit::{ACCEPTED, FAILED, SUCCEEDED};
use rustqueue_console::memory::EventFault;
use serde_json::json;
use support::manage::{ready, topic_on, topic_phase};
use support::{Cluster, Served, wait_for};

/// How many Events of `reason` name operation `id`.
fn events(cluster: &Cluster, reason: &str, id: &str) -> usize {
    cluster
        .mem
        .recorded_events()
        .into_iter()
        .filter(|e| e.reason == reason && e.message.contains(id))
        .count()
}

/// One reconciler pass that must stop at the record of an Event `at` (which never answers);
/// the console is killed there (dropped).
async fn killed_in_a_pass(cluster: &Cluster, served: Served, at: &str) {
    let what = format!("the pass at the {at} Event");
    tokio::select! {
        () = served.tick() => panic!("the pass went on without the {at} Event"),
        () = wait_for(&what, 20, || async { cluster.mem.hung_at(at).then_some(()) }) => {}
    }
    drop(served);
}

/// The operation id of the topic's operation.
fn operation_id(cluster: &Cluster, topic: &str) -> String {
    let t = cluster.mem.topic(topic).unwrap();
    t.spec.operation.expect("an operation").id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_killed_between_the_last_owner_and_the_succeeded_event_records_it_once_on_restart()
 {
    let cluster = Cluster::start(2, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0", "q-1"]).await;
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let id = v["operation_id"].as_str().unwrap().to_string();
    served.tick().await;
    let op = cluster.mem.topic("orders").unwrap().spec.operation.unwrap();
    assert_eq!(op.completed_owners, ["q-0"]);

    // The pass that applies q-1 dies at the Succeeded Event.
    cluster.mem.fault_events(SUCCEEDED, Some(EventFault::Hang));
    killed_in_a_pass(&cluster, served, SUCCEEDED).await;
    assert_eq!(
        cluster.broker("q-1").topic("orders").await.unwrap()["paused"],
        true,
        "q-1 applied before the console died"
    );
    let t = cluster.mem.topic("orders").unwrap();
    assert!(
        t.spec.phase == CatalogPhase::Applying && t.spec.operation.is_some(),
        "an operation is cleared only once its Succeeded Event exists: {:?}",
        t.spec
    );
    assert_eq!(events(&cluster, SUCCEEDED, &id), 0);

    // The next console finishes it and records the Event, once.
    cluster.mem.fault_events(SUCCEEDED, None);
    let (served, _) = ready(&cluster).await;
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert!(t.spec.paused && t.spec.operation.is_none(), "{:?}", t.spec);
    served.tick().await;
    served.tick().await;
    assert_eq!(
        events(&cluster, SUCCEEDED, &id),
        1,
        "succeeded exactly once"
    );
    assert_eq!(events(&cluster, ACCEPTED, &id), 1, "accepted exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_event_that_fails_or_loses_its_reply_is_recorded_once_later() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0"]).await;
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let id = v["operation_id"].as_str().unwrap().to_string();

    // The API server refuses Events for a while: the owner is applied and recorded, the
    // operation waits for its Event.
    let outage = StoreError::Other("the API server is unavailable".into());
    cluster
        .mem
        .fault_events(SUCCEEDED, Some(EventFault::Fail(outage)));
    served.tick().await;
    served.tick().await;
    let t = cluster.mem.topic("orders").unwrap();
    assert_eq!(t.spec.phase, CatalogPhase::Applying, "{:?}", t.spec);
    assert_eq!(
        t.spec.operation.as_ref().unwrap().completed_owners,
        ["q-0"],
        "the owner's progress is kept while the Event waits"
    );
    let why = t.spec.last_error.clone().unwrap_or_default();
    assert!(why.starts_with("E_EVENT_UNAVAILABLE"), "{why}");
    assert_eq!(events(&cluster, SUCCEEDED, &id), 0);
    let q0 = cluster.broker("q-0");
    assert_eq!(q0.topic("orders").await.unwrap()["paused"], true);
    let revision = q0.head().await["registry_revision"].clone();

    // Recorded, but the reply is lost: not known, so not moved on; the next record finds it.
    cluster
        .mem
        .fault_events(SUCCEEDED, Some(EventFault::LoseReply));
    served.tick().await;
    assert!(
        cluster
            .mem
            .topic("orders")
            .unwrap()
            .spec
            .operation
            .is_some()
    );
    assert_eq!(events(&cluster, SUCCEEDED, &id), 1);

    cluster.mem.fault_events(SUCCEEDED, None);
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert!(
        t.spec.paused && t.spec.operation.is_none() && t.spec.last_error.is_none(),
        "{:?}",
        t.spec
    );
    assert_eq!(
        events(&cluster, SUCCEEDED, &id),
        1,
        "succeeded exactly once"
    );
    assert_eq!(
        q0.head().await["registry_revision"],
        revision,
        "the owner applied it once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_killed_at_the_failed_event_records_it_once_on_restart() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0"]).await;
    // The topic vanishes from its owner behind the console's back: the unpause is refused.
    assert_eq!(
        cluster
            .broker("q-0")
            .admin("/topic/delete?topic=orders")
            .await,
        StatusCode::OK
    );
    let (s, v) = b.act("topic", "unpause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let id = v["operation_id"].as_str().unwrap().to_string();

    cluster.mem.fault_events(FAILED, Some(EventFault::Hang));
    killed_in_a_pass(&cluster, served, FAILED).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert_eq!(
        t.spec.phase,
        CatalogPhase::Applying,
        "an operation is FAILED only once its Failed Event exists: {:?}",
        t.spec
    );
    assert_eq!(events(&cluster, FAILED, &id), 0);

    cluster.mem.fault_events(FAILED, None);
    let (served, _) = ready(&cluster).await;
    topic_phase(&served, &cluster, "orders", CatalogPhase::Failed).await;
    served.tick().await;
    served.tick().await;
    let t = cluster.mem.topic("orders").unwrap();
    let why = t.spec.last_error.clone().unwrap_or_default();
    assert!(why.starts_with("E_BROKER_REJECTED"), "{why}");
    assert_eq!(events(&cluster, FAILED, &id), 1, "failed exactly once");
    assert_eq!(events(&cluster, SUCCEEDED, &id), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_killed_at_the_accepted_event_has_the_next_record_it_once() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0"]).await;

    // The apply writes the operation, then dies at its Accepted Event (no answer comes).
    let req = json!({"kind": "topic", "action": "pause", "topic": "orders", "channel": null});
    let (s, preview) = b.post("/api/v1/management/preview", &req).await;
    assert_eq!(s, StatusCode::OK, "{preview}");
    let mut apply = req.clone();
    apply["action_token"] = preview["action_token"].clone();
    cluster.mem.fault_events(ACCEPTED, Some(EventFault::Hang));
    let answer = tokio::spawn(async move { b.post("/api/v1/management/apply", &apply).await });
    wait_for("the operation written", 20, || async {
        cluster.mem.topic("orders")?.spec.operation.map(drop)
    })
    .await;
    answer.abort();
    if let Ok((s, v)) = answer.await {
        assert_ne!(s, StatusCode::ACCEPTED, "accepted without its Event: {v}");
    }
    drop(served);
    let id = operation_id(&cluster, "orders");
    assert_eq!(events(&cluster, ACCEPTED, &id), 0);

    cluster.mem.fault_events(ACCEPTED, None);
    let (served, _) = ready(&cluster).await;
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    assert!(cluster.mem.topic("orders").unwrap().spec.paused);
    served.tick().await;
    assert_eq!(events(&cluster, ACCEPTED, &id), 1, "accepted exactly once");
    assert_eq!(
        events(&cluster, SUCCEEDED, &id),
        1,
        "succeeded exactly once"
    );
    let order: Vec<String> = cluster
        .mem
        .recorded_events()
        .into_iter()
        .filter(|e| e.message.contains(&id))
        .map(|e| e.reason)
        .collect();
    assert_eq!(order, [ACCEPTED, SUCCEEDED], "accepted before it succeeded");
}
