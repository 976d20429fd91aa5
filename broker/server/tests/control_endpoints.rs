//! The control contract over real HTTP: every endpoint, every token scope, rotation and the
//! fail-closed behaviour of an unreadable token file.

mod common;

use std::path::{Path, PathBuf};

use common::Broker;
use reqwest::StatusCode;
use rustqueue_api::contract::{Capabilities, DrainStatus, Health, Registry, RegistryHead};

struct Tokens {
    _dir: tempfile::TempDir,
    admin: PathBuf,
    publish: PathBuf,
    registry: PathBuf,
    console: PathBuf,
}

fn tokens() -> Tokens {
    let dir = tempfile::tempdir().unwrap();
    let mk = |name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("{name}-secret\n")).unwrap();
        p
    };
    Tokens {
        admin: mk("admin"),
        publish: mk("publish"),
        registry: mk("registry"),
        console: mk("console"),
        _dir: dir,
    }
}

async fn secured(t: &Tokens) -> Broker {
    let (a, p, r, c) = (
        t.admin.clone(),
        t.publish.clone(),
        t.registry.clone(),
        t.console.clone(),
    );
    Broker::start_with(move |cfg| {
        cfg.security.admin_token_file = Some(a);
        cfg.security.publish_token_file = Some(p);
        cfg.security.registry_token_file = Some(r);
        cfg.security.console_token_file = Some(c);
    })
    .await
}

async fn call(b: &Broker, method: &str, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let http = rustqueue_api::http_client::client();
    let url = b.url(path);
    let mut req = match method {
        "GET" => http.get(url),
        _ => http
            .post(url)
            .body(if path == "/v1/drain" { "{}" } else { "x" }),
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

fn code_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_accepts_exactly_its_token_scopes() {
    let t = tokens();
    let b = secured(&t).await;
    let (admin, publish, registry, console) = (
        "admin-secret",
        "publish-secret",
        "registry-secret",
        "console-secret",
    );
    for path in ["/v1/health", "/v1/stats", "/metrics", "/ping"] {
        assert_eq!(
            call(&b, "GET", path, None).await.0,
            StatusCode::OK,
            "{path}"
        );
    }
    let cases: [(&str, &str, &[&str]); 9] = [
        ("GET", "/v1/capabilities", &[registry, console]),
        ("GET", "/v1/registry", &[registry, console]),
        ("GET", "/v1/registry/head", &[registry, console]),
        ("GET", "/v1/drain", &[registry, console]),
        ("POST", "/v1/storage/scrub", &[admin]),
        ("POST", "/pub?topic=scoped", &[publish]),
        ("POST", "/topic/create?topic=other", &[admin]),
        ("POST", "/channel/create?topic=other&channel=c", &[admin]),
        ("POST", "/v1/drain", &[admin]),
    ];
    for (method, path, allowed) in cases {
        let (status, body) = call(&b, method, path, None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a token"
        );
        assert_eq!(code_of(&body), "E_UNAUTHORIZED");
        assert_eq!(
            call(&b, method, path, Some("nope")).await.0,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a wrong token"
        );
        for tok in [admin, publish, registry, console] {
            let (status, body) = call(&b, method, path, Some(tok)).await;
            if allowed.contains(&tok) {
                assert_eq!(status, StatusCode::OK, "{method} {path} with {tok}: {body}");
            } else {
                assert_eq!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with {tok}"
                );
            }
        }
    }
    // The X-RustQueue-Token header works as well as Authorization: Bearer.
    let r = rustqueue_api::http_client::client()
        .get(b.url("/v1/registry/head"))
        .header("X-RustQueue-Token", console)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let metrics = call(&b, "GET", "/metrics", None).await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rustqueue_auth_failures_total ") && !l.ends_with(" 0")),
        "auth failures are counted"
    );
    b.stop().await;
}

fn rotate(path: &Path, value: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, value).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_works_without_restart_and_an_unreadable_file_fails_closed() {
    let t = tokens();
    let b = secured(&t).await;
    let head = "/v1/registry/head";
    assert_eq!(
        call(&b, "GET", head, Some("registry-secret")).await.0,
        StatusCode::OK
    );
    rotate(&t.registry, "rotated\n");
    assert_eq!(
        call(&b, "GET", head, Some("registry-secret")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&b, "GET", head, Some("rotated")).await.0,
        StatusCode::OK
    );
    std::fs::remove_file(&t.registry).unwrap();
    let (status, body) = call(&b, "GET", head, Some("rotated")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code_of(&body), "E_AUTH_UNAVAILABLE");
    // The console token still opens registry reads while the registry file is gone.
    assert_eq!(
        call(&b, "GET", head, Some("console-secret")).await.0,
        StatusCode::OK
    );
    rotate(&t.registry, "back");
    assert_eq!(call(&b, "GET", head, Some("back")).await.0, StatusCode::OK);
    std::fs::write(&t.admin, "").unwrap();
    let (status, body) = call(&b, "POST", "/v1/drain", Some("admin-secret")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_registry_stats_and_metrics_describe_the_broker() {
    let b = Broker::start().await;
    let http = rustqueue_api::http_client::client();
    let get = async |path: &str| {
        let r = http.get(b.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        r.text().await.unwrap()
    };
    let health: Health = serde_json::from_str(&get("/v1/health").await).unwrap();
    assert_eq!(health, Health::ready(1));
    let before: RegistryHead = serde_json::from_str(&get("/v1/registry/head").await).unwrap();
    assert!(before.ready && before.publish_ready);
    let post = async |path: &str, body: &'static str| {
        let r = http.post(b.url(path)).body(body).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    };
    post("/channel/create?topic=orders&channel=billing", "").await;
    for i in 0..3 {
        post("/pub?topic=orders", ["a", "b", "c"][i]).await;
    }
    let after: RegistryHead = serde_json::from_str(&get("/v1/registry/head").await).unwrap();
    assert_ne!(
        after.revision, before.revision,
        "creating a channel changes the revision"
    );

    let reg: Registry = serde_json::from_str(&get("/v1/registry").await).unwrap();
    assert_eq!(reg.head.format, 7);
    assert_eq!(reg.tcp_port, b.tcp.port());
    assert_eq!(reg.http_port, b.http.port());
    assert_eq!((reg.stored_messages, reg.depth, reg.in_flight), (3, 3, 0));
    assert_eq!(reg.topics.len(), 1);
    assert_eq!(reg.topics[0].name, "orders");
    assert_eq!(reg.topics[0].channels, vec!["billing".to_string()]);
    assert_eq!(reg.topics[0].stored_messages, 3);

    let caps: Capabilities = serde_json::from_str(&get("/v1/capabilities").await).unwrap();
    assert_eq!(caps, reg.compatibility);
    assert_eq!(
        caps.binary.maximum_writer_feature_level,
        rustqueue_server::MAX_STORAGE_FEATURE_LEVEL
    );
    assert_eq!(caps.binary.maximum_message_bytes, 20_971_520);
    assert_eq!(caps.storage.active_writer_feature_level, 1);
    assert_eq!(caps.storage.generation, 1);

    let stats: serde_json::Value =
        serde_json::from_str(&get("/v1/stats?topic=orders").await).unwrap();
    assert_eq!(stats["complete"], true);
    assert_eq!(stats["topics"][0]["channels"][0]["depth"], 3);
    assert_eq!(stats["topics"][0]["published_count"], 3);

    let drain: DrainStatus = serde_json::from_str(&get("/v1/drain").await).unwrap();
    assert!(!drain.draining && !drain.empty);
    assert_eq!(drain.stored_messages, 3);

    let r = http.get(b.url("/metrics")).send().await.unwrap();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text().await.unwrap();
    for line in [
        "rustqueue_topics 1",
        "rustqueue_channels 1",
        "rustqueue_channels_depth 3",
        "rustqueue_channels_in_flight 0",
        "rustqueue_disk_pressure 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?}");
    }
    assert!(text.contains("rustqueue_storage_fsync_duration_seconds_bucket{le=\"0.00025\"}"));

    let r = http.post(b.url("/v1/storage/scrub")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let scrub: serde_json::Value = r.json().await.unwrap();
    assert_eq!(scrub["status"], "ok");
    assert!(scrub["records_checked"].is_u64());
    b.stop().await;
}
