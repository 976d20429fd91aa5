//! Console management over real HTTP and TCP (docs/api.md, "Management"): fences stale until
//! the first sync, tombstones refusing publish, SUB and create until they expire, actions seen
//! through `/v1/stats`, idempotency by `operation_id`, and every refusal code.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use common::Broker;
use reqwest::StatusCode;
use rustqueue_api::contract::{ObserveHead, Stats, StatsTopic, paths};
use serde_json::{Value, json};

const CONSOLE: &str = "console-secret";

struct Managed {
    b: Broker,
    tokens: tempfile::TempDir,
}

fn token_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for n in ["console", "registry"] {
        std::fs::write(dir.path().join(n), format!("{n}-secret\n")).unwrap();
    }
    dir
}

async fn start_in(data: tempfile::TempDir, tokens: tempfile::TempDir) -> Managed {
    let (c, r) = (
        tokens.path().join("console"),
        tokens.path().join("registry"),
    );
    let b = Broker::start_in(data, move |cfg| {
        cfg.security.console_token_file = Some(c);
        cfg.security.registry_token_file = Some(r);
        cfg.security.console_management_enabled = true;
    })
    .await;
    Managed { b, tokens }
}

async fn managed() -> Managed {
    start_in(tempfile::tempdir().unwrap(), token_dir()).await
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh operation id.
fn op() -> String {
    static N: AtomicU64 = AtomicU64::new(1);
    format!("op-test-{:012}", N.fetch_add(1, Ordering::SeqCst))
}

async fn post(b: &Broker, path: &str, token: &str, body: String) -> (StatusCode, Value) {
    let r = rustqueue_api::http_client::client()
        .post(b.url(path))
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn head(b: &Broker) -> ObserveHead {
    rustqueue_api::http_client::client()
        .get(b.url(paths::OBSERVE_HEAD))
        .bearer_auth(CONSOLE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn revision(b: &Broker) -> u64 {
    head(b).await.registry_revision
}

/// `POST /v1/manage/<kind>/<action>` with `fields` plus the current revision unless given.
async fn manage(b: &Broker, kind: &str, action: &str, mut fields: Value) -> (StatusCode, Value) {
    if fields.get("expected_revision").is_none() {
        fields["expected_revision"] = json!(revision(b).await);
    }
    if fields.get("operation_id").is_none() {
        fields["operation_id"] = json!(op());
    }
    let path = format!("/v1/manage/{kind}/{action}");
    post(b, &path, CONSOLE, fields.to_string()).await
}

async fn ok(b: &Broker, kind: &str, action: &str, fields: Value) -> Value {
    let (s, v) = manage(b, kind, action, fields).await;
    assert_eq!(s, StatusCode::OK, "{kind}/{action}: {v}");
    v
}

fn code(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

async fn sync(b: &Broker, revision: &str, topics: Value, channels: Value) {
    let body = json!({"revision": revision, "topics": topics, "channels": channels});
    let (s, v) = post(b, paths::FENCES_SYNC, CONSOLE, body.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "ok");
}

async fn http_pub(b: &Broker, topic: &str) -> (StatusCode, String) {
    let r = rustqueue_api::http_client::client()
        .post(b.url(&format!("/pub?topic={topic}")))
        .body("m")
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn topic(b: &Broker, name: &str) -> Option<StatsTopic> {
    let s: Stats = b.get_json("/v1/stats").await;
    s.topics.into_iter().find(|t| t.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_are_stale_until_the_first_sync() {
    let m = managed().await;
    let b = &m.b;
    let r = rustqueue_api::http_client::get(b.url(paths::HEALTH))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["reason"], "management_fences_stale");
    let reg: Value = rustqueue_api::http_client::client()
        .get(b.url(paths::REGISTRY_HEAD))
        .bearer_auth("registry-secret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&reg["ready"], &reg["publish_ready"], &reg["consume_ready"]),
        (&json!(false), &json!(false), &json!(false))
    );
    let h = head(b).await;
    assert!(h.management.enabled && !h.readiness.management_fences_ready);
    let (s, text) = http_pub(b, "t").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("E_MANAGEMENT_UNAVAILABLE"), "{text}");
    let (s, v) = manage(b, "topics", "create", json!({"topic": "t"})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "E_MANAGEMENT_UNAVAILABLE")
    );
    let r = rustqueue_api::http_client::client()
        .post(b.url("/topic/create?topic=t"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let mut c = b.client().await;
    c.cmd_body("PUB t", b"m").await;
    c.expect_error("E_MANAGEMENT_UNAVAILABLE").await;
    c.cmd("SUB t c").await;
    c.expect_error("E_MANAGEMENT_UNAVAILABLE").await;

    sync(b, "r1", json!({}), json!([])).await;
    assert_eq!(
        rustqueue_api::http_client::get(b.url(paths::HEALTH))
            .await
            .unwrap()
            .status(),
        200
    );
    let h = head(b).await;
    assert!(h.readiness.management_fences_ready && h.readiness.publish_ready);
    assert_eq!(h.management.fence_revision, "r1");
    c.publish("t", b"m").await;
    assert_eq!(http_pub(b, "t").await.0, StatusCode::OK);
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_refuse_publish_subscribe_and_create_until_they_expire() {
    let m = managed().await;
    let b = &m.b;
    sync(b, "r1", json!({}), json!([])).await;
    ok(
        b,
        "channels",
        "create",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    http_pub(b, "t").await;
    let until = now_ms() + 600_000;
    let v = ok(
        b,
        "topics",
        "delete",
        json!({"topic": "t", "tombstone_until_ms": until}),
    )
    .await;
    assert_eq!(v["changed"], true);
    assert!(topic(b, "t").await.is_none(), "deleted");
    assert_eq!(head(b).await.management.tombstones, 1);

    let (s, text) = http_pub(b, "t").await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(text.contains("E_TOPIC_TOMBSTONED"), "{text}");
    let r = rustqueue_api::http_client::client()
        .post(b.url("/mpub?topic=t"))
        .body("a\nb")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let mut c = b.client().await;
    c.cmd_body("PUB t", b"m").await;
    c.expect_error("E_TOPIC_TOMBSTONED").await;
    c.cmd_body("PUB other", b"m").await;
    c.expect_ok().await;
    c.cmd("SUB t c").await;
    c.expect_error("E_TOPIC_TOMBSTONED").await;
    for path in ["/topic/create?topic=t", "/channel/create?topic=t&channel=x"] {
        let r = rustqueue_api::http_client::client()
            .post(b.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CONFLICT, "{path}");
    }
    assert!(topic(b, "t").await.is_none(), "nothing recreated the topic");

    // Shortened to expire soon (a tombstone replaces the expiry), it lapses: publishing goes
    // through again.
    let soon = json!({"topic": "t", "tombstone_until_ms": now_ms() + 2_000});
    ok(b, "topics", "tombstone", soon).await;
    common::eventually(async || http_pub(b, "t").await.0 == StatusCode::OK).await;
    assert_eq!(head(b).await.management.tombstones, 0);
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_tombstone_refuses_subscribe_until_create_clears_it() {
    let m = managed().await;
    let b = &m.b;
    let until = now_ms() + 600_000;
    sync(
        b,
        "r2",
        json!({}),
        json!([{"topic": "t", "channel": "gone", "until_ms": until}]),
    )
    .await;
    let mut c = b.client().await;
    c.cmd("SUB t gone").await;
    c.expect_error("E_CHANNEL_TOMBSTONED").await;
    c.publish("t", b"publishing to the topic is fine").await;
    let r = rustqueue_api::http_client::client()
        .post(b.url("/channel/create?topic=t&channel=gone"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("E_CHANNEL_TOMBSTONED"));
    let v = ok(
        b,
        "channels",
        "create",
        json!({"topic": "t", "channel": "gone"}),
    )
    .await;
    assert_eq!(v["changed"], true);
    let mut s = b.client().await;
    s.subscribe("t", "gone", 1).await;
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_show_in_stats_and_replays_act_only_once() {
    let m = managed().await;
    let b = &m.b;
    sync(b, "r1", json!({}), json!([])).await;
    let create = json!({"topic": "t", "channel": "c", "operation_id": op()});
    let first = ok(b, "channels", "create", create.clone()).await;
    assert_eq!(first["changed"], true);
    assert_eq!(ok(b, "channels", "create", create).await, first, "replay");
    let again = ok(
        b,
        "channels",
        "create",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    assert_eq!(again["changed"], false, "a new id finds it done");
    let mut p = b.client().await;
    for i in 0..3 {
        p.publish("t", format!("m{i}").as_bytes()).await;
    }
    let rev = revision(b).await;
    ok(
        b,
        "channels",
        "pause",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    assert!(topic(b, "t").await.unwrap().channels[0].paused);
    assert!(revision(b).await > rev, "pausing changes the revision");
    let v = ok(
        b,
        "channels",
        "pause",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    assert_eq!(v["changed"], false);
    ok(
        b,
        "channels",
        "unpause",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    assert!(!topic(b, "t").await.unwrap().channels[0].paused);

    let empty = json!({"topic": "t", "channel": "c", "operation_id": op()});
    let done = ok(b, "channels", "empty", empty.clone()).await;
    assert_eq!(done["changed"], true);
    assert_eq!(topic(b, "t").await.unwrap().channels[0].depth, 0);
    p.publish("t", b"after").await;
    p.publish("t", b"after2").await;
    assert_eq!(ok(b, "channels", "empty", empty).await, done, "replayed");
    assert_eq!(
        topic(b, "t").await.unwrap().channels[0].depth,
        2,
        "emptied once"
    );

    ok(b, "topics", "pause", json!({"topic": "t"})).await;
    assert!(topic(b, "t").await.unwrap().paused);
    ok(b, "topics", "unpause", json!({"topic": "t"})).await;
    ok(b, "topics", "empty", json!({"topic": "t"})).await;
    assert_eq!(topic(b, "t").await.unwrap().message_count, 0);
    let until = now_ms() + 600_000;
    ok(
        b,
        "channels",
        "delete",
        json!({"topic": "t", "channel": "c", "tombstone_until_ms": until}),
    )
    .await;
    assert!(topic(b, "t").await.unwrap().channels.is_empty());
    ok(
        b,
        "topics",
        "delete",
        json!({"topic": "t", "tombstone_until_ms": until}),
    )
    .await;
    assert!(topic(b, "t").await.is_none());
    let v = ok(
        b,
        "topics",
        "tombstone",
        json!({"topic": "u", "tombstone_until_ms": until}),
    )
    .await;
    assert_eq!(v["changed"], true);
    assert_eq!(head(b).await.management.tombstones, 3);
    m.b.stop().await;
}

/// `(kind, action, fields, status, code)`: refusals decided from the request alone.
fn request_refusals() -> Vec<(&'static str, &'static str, Value, StatusCode, &'static str)> {
    let bad = StatusCode::BAD_REQUEST;
    vec![
        (
            "topics",
            "explode",
            json!({"topic": "t"}),
            bad,
            "E_BAD_ACTION",
        ),
        (
            "topics",
            "create",
            json!({"topic": "t", "operation_id": "short"}),
            bad,
            "E_BAD_REQUEST",
        ),
        (
            "topics",
            "create",
            json!({"topic": "bad name"}),
            bad,
            "E_BAD_TOPIC",
        ),
        (
            "topics",
            "pause",
            json!({"topic": "missing"}),
            StatusCode::NOT_FOUND,
            "E_BAD_TOPIC",
        ),
        (
            "channels",
            "create",
            json!({"topic": "t"}),
            bad,
            "E_BAD_CHANNEL",
        ),
        (
            "channels",
            "create",
            json!({"topic": "t", "channel": "a/b"}),
            bad,
            "E_BAD_CHANNEL",
        ),
        (
            "topics",
            "delete",
            json!({"topic": "t"}),
            bad,
            "E_BAD_TOMBSTONE",
        ),
        (
            "topics",
            "tombstone",
            json!({"topic": "t", "tombstone_until_ms": 5}),
            bad,
            "E_BAD_TOMBSTONE",
        ),
        (
            "topics",
            "create",
            json!({"topic": "t", "expected_revision": 987_654}),
            StatusCode::CONFLICT,
            "E_REVISION_CONFLICT",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_or_stale_request_has_its_code() {
    let m = managed().await;
    let b = &m.b;
    sync(b, "r1", json!({}), json!([])).await;
    for (kind, action, fields, status, want) in request_refusals() {
        let (s, v) = manage(b, kind, action, fields.clone()).await;
        let got = (s, code(&v));
        assert_eq!(got, (status, want), "{kind}/{action} {fields}: {v}");
    }
    let (s, v) = post(b, "/v1/manage/topics/create", CONSOLE, "{not json".into()).await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "E_BAD_REQUEST"));
    let body = json!({"operation_id": op(), "topic": "t", "expected_revision": 0});
    let (s, _) = post(
        b,
        "/v1/manage/topics/create",
        "registry-secret",
        body.to_string(),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "the registry token cannot manage"
    );
    let (s, _) = post(b, paths::FENCES_SYNC, "registry-secret", "{}".into()).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_that_depend_on_broker_state_have_their_codes() {
    let m = managed().await;
    let b = &m.b;
    sync(b, "r1", json!({}), json!([])).await;
    ok(
        b,
        "channels",
        "create",
        json!({"topic": "t", "channel": "c"}),
    )
    .await;
    let missing = json!({"topic": "t", "channel": "nope"});
    let (s, v) = manage(b, "channels", "pause", missing).await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "E_BAD_CHANNEL"));
    let id = op();
    ok(
        b,
        "topics",
        "pause",
        json!({"topic": "t", "operation_id": id}),
    )
    .await;
    let reused = json!({"topic": "t", "operation_id": id});
    let (s, v) = manage(b, "topics", "unpause", reused).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "E_OPERATION_CONFLICT")
    );
    let until = now_ms() + 600_000;
    let fence = json!({"topic": "fenced", "tombstone_until_ms": until});
    ok(b, "topics", "tombstone", fence).await;
    let under = json!({"topic": "fenced", "channel": "c"});
    let (s, v) = manage(b, "channels", "create", under).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "E_TOPIC_TOMBSTONED"));
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_operations_survive_a_restart_but_readiness_waits_for_a_sync() {
    let m = managed().await;
    sync(&m.b, "r1", json!({}), json!([])).await;
    let until = now_ms() + 600_000;
    let id = op();
    let fields = json!({"topic": "t", "tombstone_until_ms": until, "operation_id": id});
    let first = ok(&m.b, "topics", "tombstone", fields.clone()).await;
    let tokens = m.tokens;
    let data = m.b.stop_keep_dir().await;
    let m = start_in(data, tokens).await;
    let b = &m.b;
    let r = rustqueue_api::http_client::get(b.url(paths::HEALTH))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let h = head(b).await;
    assert_eq!(h.management.tombstones, 1, "the fence file was read back");
    assert!(!h.readiness.management_fences_ready);
    sync(b, "r3", json!({"t": until}), json!([])).await;
    assert_eq!(http_pub(b, "t").await.0, StatusCode::CONFLICT);
    assert_eq!(
        ok(b, "topics", "tombstone", fields).await,
        first,
        "the catalog was read back"
    );
    m.b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_storage_failures_have_their_codes_and_record_nothing() {
    let tokens = token_dir();
    let c = tokens.path().join("console");
    let b = Broker::start_with(move |cfg| {
        cfg.security.console_token_file = Some(c);
        cfg.security.console_management_enabled = true;
        cfg.queue.max_topics = 1;
    })
    .await;
    sync(&b, "r1", json!({}), json!([])).await;
    ok(&b, "topics", "create", json!({"topic": "a"})).await;
    let (s, v) = manage(&b, "topics", "create", json!({"topic": "b"})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::TOO_MANY_REQUESTS, "E_THROTTLED")
    );
    // The refused create is forgotten, not left pending on its topic.
    let until = now_ms() + 600_000;
    let fence = json!({"topic": "b", "tombstone_until_ms": until});
    ok(&b, "topics", "tombstone", fence).await;

    // A directory where the catalog's temp file goes: the write fails, nothing is recorded.
    let tmp = b.dir.path().join("management-operations.json.tmp");
    std::fs::create_dir(&tmp).unwrap();
    let id = op();
    let pause = json!({"topic": "a", "operation_id": id});
    let (s, v) = manage(&b, "topics", "pause", pause.clone()).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE")
    );
    assert!(!topic(&b, "a").await.unwrap().paused, "not acted on");
    std::fs::remove_dir(&tmp).unwrap();
    let v = ok(&b, "topics", "pause", pause).await;
    assert_eq!(
        v["changed"], true,
        "the same id is new: it was never recorded"
    );
    b.stop().await;
}
