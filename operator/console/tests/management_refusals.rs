//! Every refusal of the management API seen through HTTP against real brokers: same-origin
//! JSON, the session and CSRF, token binding, a changed subject, a stale snapshot, operations
//! in progress, and a broker refusal that fails an operation until a retry.

mod support;

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use serde_json::{Value, json};
use support::manage::{code, ready, topic_on, topic_phase};
use support::{Cluster, wait_for};

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

    let status: Value = rustqueue_api::http_client::client()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_waits_for_discovery() {
    let cluster = Cluster::start(1, true).await;
    let (served, b) = ready(&cluster).await;
    cluster.stop_discovery();
    let (_, snap) = wait_for("discovery reported down", 20, || async {
        served.collect().await;
        let (s, v) = served.snapshot().await;
        (v["management"]["registry_available"] == false).then_some((s, v))
    })
    .await;
    assert_eq!(snap["complete"], false);
    assert!(
        snap["errors"].to_string().contains("discovery"),
        "{}",
        snap["errors"]
    );
    let (s, v) = b.act("topic", "create", "orders", None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "E_MANAGEMENT_UNAVAILABLE")
    );
    assert!(v["detail"].as_str().unwrap().contains("discovery"), "{v}");
}
