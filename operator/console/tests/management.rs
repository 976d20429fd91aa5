//! The management flow against real brokers with console management on: create, pause,
//! unpause, empty and delete through preview/apply, carried out owner by owner by the
//! reconciler, stepped by hand and by the background loops.

mod support;

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use serde_json::json;
use support::manage::{channel_phase, code, ready, topic_on, topic_phase};
use support::{Cluster, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_topic_lands_on_the_chosen_owner_and_becomes_active() {
    let cluster = Cluster::start(3, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "busy", &["q-0", "q-1"]).await;
    let req = json!({"kind": "topic", "action": "create", "topic": "orders", "channel": null});
    let (s, preview) = b.post("/api/v1/management/preview", &req).await;
    assert_eq!(s, StatusCode::OK, "{preview}");
    assert_eq!(
        preview["impact"]["owners"],
        json!(["q-2"]),
        "the broker without topics"
    );
    assert_eq!(
        preview["impact"]["warnings"],
        json!(["topic_requires_channel"])
    );
    let mut apply = req.clone();
    apply["action_token"] = preview["action_token"].clone();
    let (s, accepted) = b.post("/api/v1/management/apply", &apply).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["status"], "accepted");
    assert_eq!(accepted["refresh_required"], true);
    assert!(
        accepted["operation_id"]
            .as_str()
            .unwrap()
            .starts_with("op-")
    );
    let (s, v) = b.post("/api/v1/management/apply", &apply).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_ACTION_TOKEN_EXPIRED"),
        "a replayed apply"
    );
    assert_eq!(
        cluster.mem.topic("orders").unwrap().spec.phase,
        CatalogPhase::Preparing
    );

    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert_eq!(t.spec.owners, ["q-2"]);
    assert!(t.spec.operation.is_none());
    assert!(cluster.broker("q-2").topic("orders").await.is_some());
    assert!(cluster.broker("q-0").topic("orders").await.is_none());
    served.tick().await;
    let (_, snap) = served.snapshot().await;
    let view = snap["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "orders")
        .unwrap();
    assert_eq!(view["managed_phase"], "ACTIVE");
    assert_eq!(view["owners"], json!(["q-2"]));
    let reasons: Vec<String> = cluster
        .mem
        .recorded_events()
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert!(
        reasons.contains(&"ConsoleManagementAccepted".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"ConsoleManagementSucceeded".to_string()),
        "{reasons:?}"
    );
    let (s, v) = b.act("topic", "create", "orders", None).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "E_ALREADY_EXISTS"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_on_two_owners_is_created_paused_and_unpaused_on_both() {
    let cluster = Cluster::start(2, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0", "q-1"]).await;

    let (s, v) = b.act("channel", "create", "orders", Some("billing")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    channel_phase(&served, &cluster, "orders", "billing", CatalogPhase::Active).await;
    for br in &cluster.brokers {
        assert!(
            br.channel("orders", "billing").await.is_some(),
            "{}",
            br.name
        );
    }

    let (s, v) = b.act("channel", "pause", "orders", Some("billing")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let (s, v) = b.act("channel", "unpause", "orders", Some("billing")).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_OPERATION_IN_PROGRESS")
    );
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_CHANNEL_OPERATION_IN_PROGRESS")
    );
    channel_phase(&served, &cluster, "orders", "billing", CatalogPhase::Active).await;
    assert!(
        cluster
            .mem
            .channel("orders", "billing")
            .unwrap()
            .spec
            .paused
    );
    for br in &cluster.brokers {
        assert_eq!(
            br.channel("orders", "billing").await.unwrap()["paused"],
            true,
            "{}",
            br.name
        );
    }

    let (s, v) = b.act("channel", "unpause", "orders", Some("billing")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    channel_phase(&served, &cluster, "orders", "billing", CatalogPhase::Active).await;
    for br in &cluster.brokers {
        assert_eq!(
            br.channel("orders", "billing").await.unwrap()["paused"],
            false,
            "{}",
            br.name
        );
    }

    let (s, v) = b.act("channel", "empty", "orders", Some("billing")).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_MIGRATION_IN_PROGRESS"),
        "empty on two owners"
    );
    let (s, v) = b
        .act("channel", "pause", "orders", Some("tail#ephemeral"))
        .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_EPHEMERAL_UNMANAGED")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_drops_the_backlog_and_delete_fences_the_topic_everywhere() {
    let cluster = Cluster::start(2, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "jobs", &["q-0"]).await;
    let (s, v) = b.act("channel", "create", "jobs", Some("work")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    channel_phase(&served, &cluster, "jobs", "work", CatalogPhase::Active).await;
    let owner = cluster.broker("q-0");
    for i in 0..3 {
        assert_eq!(
            owner.publish("jobs", &format!("job {i}")).await,
            StatusCode::OK
        );
    }
    assert_eq!(owner.channel("jobs", "work").await.unwrap()["depth"], 3);

    let (s, v) = b.act("channel", "empty", "jobs", Some("work")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    channel_phase(&served, &cluster, "jobs", "work", CatalogPhase::Active).await;
    assert_eq!(owner.channel("jobs", "work").await.unwrap()["depth"], 0);

    let (s, v) = b.act("topic", "delete", "jobs", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    topic_phase(&served, &cluster, "jobs", CatalogPhase::Tombstoned).await;
    assert_eq!(
        cluster.mem.channel("jobs", "work").unwrap().spec.phase,
        CatalogPhase::Tombstoned
    );
    assert!(owner.topic("jobs").await.is_none());
    wait_for("the fence on every broker", 20, || async {
        served.tick().await;
        let mut all = true;
        for br in &cluster.brokers {
            all &= br.publish("jobs", "late").await == StatusCode::CONFLICT;
        }
        all.then_some(())
    })
    .await;
    let (_, snap) = served.snapshot().await;
    let view = snap["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "jobs")
        .unwrap();
    assert_eq!(view["managed_phase"], "TOMBSTONED");

    let (s, v) = b.act("topic", "create", "jobs", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "recreate: {v}");
    topic_phase(&served, &cluster, "jobs", CatalogPhase::Active).await;
    let owner = cluster.mem.topic("jobs").unwrap().spec.owners[0].clone();
    assert_eq!(
        cluster.broker(&owner).publish("jobs", "again").await,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_loops_carry_a_create_and_a_two_owner_pause_to_the_end() {
    let cluster = Cluster::start(2, true).await;
    let (mut served, b) = ready(&cluster).await;
    served.run_loops();
    let (s, v) = b.act("topic", "create", "events", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let owner = wait_for("the topic ACTIVE", 30, || async {
        let t = cluster.mem.topic("events")?;
        (t.spec.phase == CatalogPhase::Active).then(|| t.spec.owners[0].clone())
    })
    .await;
    let other = if owner == "q-0" { "q-1" } else { "q-0" };
    assert_eq!(
        cluster
            .broker(other)
            .admin("/topic/create?topic=events")
            .await,
        StatusCode::OK
    );
    wait_for("both owners adopted", 30, || async {
        let t = cluster.mem.topic("events")?;
        (t.spec.owners.len() == 2).then_some(())
    })
    .await;
    let (s, v) = wait_for("a pause accepted on a fresh snapshot", 30, || async {
        let (s, v) = b.act("topic", "pause", "events", None).await;
        // The collector may move the object between preview and apply; preview again.
        (code(&v) != "E_RESOURCE_CHANGED").then_some((s, v))
    })
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    wait_for("the pause on both owners", 30, || async {
        let t = cluster.mem.topic("events")?;
        (t.spec.phase == CatalogPhase::Active && t.spec.paused).then_some(())
    })
    .await;
    for br in &cluster.brokers {
        assert_eq!(
            br.topic("events").await.unwrap()["paused"],
            true,
            "{}",
            br.name
        );
    }
}
