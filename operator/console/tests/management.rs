//! The management flow against real brokers with console management on: create, pause,
//! unpause, empty and delete through preview/apply, the reconciler carrying operations owner
//! by owner, a console restart mid-operation, and every refusal code through the HTTP API.

mod support;

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use serde_json::{Value, json};
use support::{Browser, Cluster, Served, wait_for};

/// Steps the console until its snapshot is complete with management usable, then unlocks.
async fn ready(cluster: &Cluster) -> (Served, Browser) {
    let served = Served::start(cluster, true).await;
    wait_for("a complete snapshot with management usable", 20, || async {
        served.tick().await;
        let (_, s) = served.snapshot().await;
        let m = &s["management"];
        let fenced = s["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["observation"]["readiness"]["management_fences_ready"] == true);
        (s["complete"] == true
            && m["registry_available"] == true
            && m["crd_fresh"] == true
            && fenced)
            .then_some(())
    })
    .await;
    let mut browser = served.browser();
    browser.unlock().await;
    (served, browser)
}

async fn topic_phase(served: &Served, cluster: &Cluster, topic: &str, want: CatalogPhase) {
    wait_for(&format!("topic {topic} {want:?}"), 30, || async {
        served.tick().await;
        cluster
            .mem
            .topic(topic)
            .filter(|t| t.spec.phase == want)
            .map(drop)
    })
    .await;
}

async fn channel_phase(
    served: &Served,
    cluster: &Cluster,
    topic: &str,
    channel: &str,
    want: CatalogPhase,
) {
    wait_for(
        &format!("channel {topic}/{channel} {want:?}"),
        30,
        || async {
            served.tick().await;
            cluster
                .mem
                .channel(topic, channel)
                .filter(|c| c.spec.phase == want)
                .map(drop)
        },
    )
    .await;
}

fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("")
}

/// A topic created directly on `owners` (as producers would), adopted into the catalog.
async fn topic_on(cluster: &Cluster, served: &Served, topic: &str, owners: &[&str]) {
    for o in owners {
        let status = cluster
            .broker(o)
            .admin(&format!("/topic/create?topic={topic}"))
            .await;
        assert_eq!(status, StatusCode::OK, "create {topic} on {o}");
    }
    wait_for("the topic adopted with every owner", 20, || async {
        served.tick().await;
        let t = cluster.mem.topic(topic)?;
        (t.spec.phase == CatalogPhase::Active && t.spec.owners.len() == owners.len()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_must_be_same_origin_json_from_an_unlocked_session() {
    let cluster = Cluster::start(1, true).await;
    let (served, mut b) = ready(&cluster).await;
    let mut fresh = served.browser();
    let unlock = json!({"confirmation": "ns/q"});
    let path = "/api/v1/management/unlock";
    let (s, v) = fresh
        .post_with(
            path,
            &unlock,
            "http://evil.example",
            "application/json",
            false,
        )
        .await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "E_ORIGIN"));
    let (s, v) = fresh
        .post_with(path, &unlock, &served.url, "text/plain", false)
        .await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "E_CONTENT_TYPE"));
    let (s, v) = fresh.post(path, &json!({"confirmation": "ns/other"})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "E_CONFIRMATION_MISMATCH")
    );

    let preview = json!({"kind": "topic", "action": "create", "topic": "orders", "channel": null});
    let (s, v) = fresh.post("/api/v1/management/preview", &preview).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::UNAUTHORIZED, "E_MANAGEMENT_LOCKED")
    );
    fresh.cookie.clone_from(&b.cookie);
    let (s, v) = fresh.post("/api/v1/management/preview", &preview).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::UNAUTHORIZED, "E_MANAGEMENT_LOCKED"),
        "cookie without CSRF"
    );

    let status: Value = reqwest::Client::new()
        .get(format!("{}/api/v1/management", served.url))
        .header("Cookie", b.cookie.clone().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (status["enabled"].as_bool(), status["unlocked"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(status["csrf_token"].as_str(), b.csrf.as_deref());
    let (s, v) = b.post("/api/v1/management/preview", &preview).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = b.post("/api/v1/management/lock", &json!({})).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = b.post("/api/v1/management/preview", &preview).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::UNAUTHORIZED, "E_MANAGEMENT_LOCKED"),
        "after lock"
    );
    b.unlock().await;
}

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
async fn tokens_are_bound_to_their_request_subject_and_a_fresh_snapshot() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0"]).await;
    topic_on(&cluster, &served, "other", &["q-0"]).await;
    let pause = json!({"kind": "topic", "action": "pause", "topic": "orders", "channel": null});

    let (_, p) = b.post("/api/v1/management/preview", &pause).await;
    let mut apply = pause.clone();
    apply["topic"] = json!("other");
    apply["action_token"] = p["action_token"].clone();
    let (s, v) = b.post("/api/v1/management/apply", &apply).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_ACTION_TOKEN_MISMATCH")
    );

    let (_, p) = b.post("/api/v1/management/preview", &pause).await;
    cluster.mem.edit_topic("orders", |t| {
        t.metadata.annotations = Some([("touched".to_string(), "yes".to_string())].into());
    });
    let mut apply = pause.clone();
    apply["action_token"] = p["action_token"].clone();
    let (s, v) = b.post("/api/v1/management/apply", &apply).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "E_RESOURCE_CHANGED"));

    let delete = json!({"kind": "topic", "action": "delete", "topic": "orders", "channel": null});
    let (_, p) = b.post("/api/v1/management/preview", &delete).await;
    assert_eq!(p["confirmation_required"], true);
    assert_eq!(p["impact"]["warnings"], json!(["immediate_irreversible"]));
    let mut apply = delete.clone();
    apply["action_token"] = p["action_token"].clone();
    apply["confirmation"] = json!("wrong");
    let (s, v) = b.post("/api/v1/management/apply", &apply).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "E_CONFIRMATION_MISMATCH")
    );

    cluster.mem.fail_catalog_lists(true);
    served.collect().await;
    let (s, v) = b.post("/api/v1/management/preview", &pause).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "E_MANAGEMENT_UNAVAILABLE"),
        "catalog down"
    );
    cluster.mem.fail_catalog_lists(false);
    served.collect().await;
    let (s, _) = b.post("/api/v1/management/preview", &pause).await;
    assert_eq!(s, StatusCode::OK);
    // No collection: the snapshot ages past 3 polls + 2 s.
    wait_for("the snapshot to go stale", 15, || async {
        let (s, v) = b.post("/api/v1/management/preview", &pause).await;
        (s == StatusCode::SERVICE_UNAVAILABLE && code(&v) == "E_MANAGEMENT_UNAVAILABLE")
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_restarted_mid_operation_completes_it_exactly_once() {
    let cluster = Cluster::start(2, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0", "q-1"]).await;
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let op_id = v["operation_id"].as_str().unwrap().to_string();

    // One reconciler pass applies exactly one owner and records it.
    served.tick().await;
    let t = cluster.mem.topic("orders").unwrap();
    let op = t.spec.operation.clone().unwrap();
    assert_eq!(
        (t.spec.phase, op.completed_owners.clone()),
        (CatalogPhase::Applying, vec!["q-0".to_string()])
    );
    assert_eq!(
        cluster.broker("q-0").topic("orders").await.unwrap()["paused"],
        true
    );
    assert_eq!(
        cluster.broker("q-1").topic("orders").await.unwrap()["paused"],
        false
    );
    let q0_revision = cluster.broker("q-0").head().await["registry_revision"].clone();

    // The console dies; a new one on the same store resumes at the next owner.
    drop(served);
    let (served, _) = ready(&cluster).await;
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert!(t.spec.paused && t.spec.operation.is_none());
    for br in &cluster.brokers {
        assert_eq!(
            br.topic("orders").await.unwrap()["paused"],
            true,
            "{}",
            br.name
        );
    }
    assert_eq!(
        cluster.broker("q-0").head().await["registry_revision"],
        q0_revision,
        "q-0 applied once"
    );
    let done = cluster
        .mem
        .recorded_events()
        .into_iter()
        .filter(|e| e.reason == "ConsoleManagementSucceeded" && e.message.contains(&op_id))
        .count();
    assert_eq!(done, 1);

    // A crash between a broker's answer and its record: the replay is answered from the
    // broker's operation catalog and changes nothing there.
    cluster.mem.edit_topic("orders", |t| {
        t.spec.phase = CatalogPhase::Applying;
        t.spec.operation = Some(rustqueue_api::crd::CatalogOperation {
            completed_owners: Vec::new(),
            ..op.clone()
        });
    });
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    assert_eq!(
        cluster.broker("q-0").head().await["registry_revision"],
        q0_revision,
        "replayed, not reapplied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_refusal_fails_the_operation_and_a_retry_finishes_it() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0"]).await;
    let (s, v) = b.act("topic", "retry", "orders", None).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "E_RETRY_NOT_FAILED"));

    // A pause accepted but not yet applied: channel actions wait for the topic.
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let (s, v) = b.act("channel", "create", "orders", Some("billing")).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_TOPIC_OPERATION_IN_PROGRESS")
    );
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    assert!(cluster.mem.topic("orders").unwrap().spec.paused);

    // The topic vanished from its owner behind the console's back: the broker refuses the
    // next operation (404), which is final until a person retries.
    assert_eq!(
        cluster
            .broker("q-0")
            .admin("/topic/delete?topic=orders")
            .await,
        StatusCode::OK
    );
    let (s, v) = b.act("topic", "unpause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    topic_phase(&served, &cluster, "orders", CatalogPhase::Failed).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert!(
        t.spec
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("E_BROKER_REJECTED"),
        "{:?}",
        t.spec.last_error
    );
    let failed = cluster
        .mem
        .recorded_events()
        .into_iter()
        .any(|e| e.reason == "ConsoleManagementFailed" && e.type_ == "Warning");
    assert!(failed);
    served.tick().await;
    let (_, snap) = served.snapshot().await;
    let view = snap["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "orders")
        .unwrap();
    assert_eq!(view["managed_phase"], "FAILED");
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_OPERATION_IN_PROGRESS")
    );

    // Put the topic back (paused, as the catalog last knew it) and retry: same operation.
    assert_eq!(
        cluster
            .broker("q-0")
            .admin("/topic/create?topic=orders")
            .await,
        StatusCode::OK
    );
    assert_eq!(
        cluster
            .broker("q-0")
            .admin("/topic/pause?topic=orders")
            .await,
        StatusCode::OK
    );
    served.tick().await;
    let (s, v) = b.act("topic", "retry", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        v["operation_id"].as_str(),
        Some(t.spec.operation.as_ref().unwrap().id.as_str())
    );
    assert_eq!(
        cluster
            .mem
            .topic("orders")
            .unwrap()
            .spec
            .operation
            .unwrap()
            .attempt,
        2
    );
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    assert!(!cluster.mem.topic("orders").unwrap().spec.paused);
    assert_eq!(
        cluster.broker("q-0").topic("orders").await.unwrap()["paused"],
        false
    );
}
