//! A real `rustqueued` SIGKILLed at every step of a management operation (feature
//! `crash-injection`): the console's resend of the same `operation_id` after the restart
//! answers as the first attempt would have, and the action takes effect exactly once (an
//! `empty` never empties what was published after it was accepted; a `delete` leaves the
//! topic gone and fenced).
#![cfg(all(unix, feature = "crash-injection"))]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use rustqueue_api::contract::{ObserveHead, Stats, paths};
use serde_json::{Value, json};

const CONSOLE: &str = "console-secret";

struct Proc {
    b: common::Spawned,
    http: String,
    _config: tempfile::TempDir,
}

/// `rustqueued` on `data` with console management on; `failpoint` parks it at that step.
async fn spawn(data: &Path, failpoint: Option<&str>) -> Proc {
    let config = tempfile::tempdir().unwrap();
    let token = config.path().join("console");
    std::fs::write(&token, CONSOLE).unwrap();
    let toml = format!(
        "{}[security]\nconsole_token_file = {:?}\nconsole_management_enabled = true\n",
        common::DISK_GUARD_TOML,
        token.to_str().unwrap()
    );
    let file = config.path().join("rustqueued.toml");
    std::fs::write(&file, toml).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    cmd.env("RUSTQUEUE_CONFIG", &file)
        .env("RUSTQUEUE_DATA_PATH", data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    if let Some(fp) = failpoint {
        cmd.env("RUSTQUEUE_CRASH_FAILPOINT", fp)
            .env("RUSTQUEUE_CRASH_MARKER", data.join("failpoint.marker"));
    }
    let b = common::spawn_broker(&mut cmd, "/ping", common::T).await;
    Proc {
        http: format!("http://{}", b.http),
        b,
        _config: config,
    }
}

impl Proc {
    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let r = rustqueue_api::http_client::client()
            .post(format!("{}{path}", self.http))
            .bearer_auth(CONSOLE)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    async fn sync(&self) {
        let (s, v) = self
            .post(paths::FENCES_SYNC, &json!({"revision": "r"}))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }

    async fn revision(&self) -> u64 {
        let h: ObserveHead = rustqueue_api::http_client::client()
            .get(format!("{}{}", self.http, paths::OBSERVE_HEAD))
            .bearer_auth(CONSOLE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        h.registry_revision
    }

    async fn nsq(&self, path: &str, body: &'static str) -> StatusCode {
        rustqueue_api::http_client::client()
            .post(format!("{}{path}", self.http))
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn stats(&self) -> Stats {
        rustqueue_api::http_client::get(format!("{}/v1/stats", self.http))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Sends `body` to `path`, waits until the process parks at its failpoint, SIGKILLs it.
    async fn crash_during(mut self, path: &str, body: &Value, data: &Path) {
        let (url, body) = (format!("{}{path}", self.http), body.to_string());
        let request = tokio::spawn(async move {
            let _ = rustqueue_api::http_client::client()
                .post(url)
                .bearer_auth(CONSOLE)
                .body(body)
                .send()
                .await;
        });
        let marker = data.join("failpoint.marker");
        let deadline = tokio::time::Instant::now() + common::T;
        while !marker.exists() {
            assert!(
                self.b.child.try_wait().unwrap().is_none(),
                "rustqueued exited before its failpoint"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "failpoint never reached"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.b.child.kill().unwrap();
        self.b.child.wait().unwrap();
        request.abort();
        std::fs::remove_file(marker).unwrap();
    }
}

fn request(id: &str, topic: &str, extra: Value, revision: u64) -> Value {
    let mut v = json!({"operation_id": id, "topic": topic, "expected_revision": revision});
    if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
        m.extend(x);
    }
    v
}

/// The request to resend. An operation whose pending record never became durable was never
/// accepted: a restart changes the registry revision, so its resend is refused
/// (`E_REVISION_CONFLICT`) and the console re-reads the revision before sending it again.
async fn accepted_or_reread(p: &Proc, path: &str, mut body: Value, pending_durable: bool) -> Value {
    if !pending_durable {
        let (s, v) = p.post(path, &body).await;
        assert_eq!(
            (s, v["message"].as_str()),
            (StatusCode::CONFLICT, Some("E_REVISION_CONFLICT")),
            "{v}"
        );
        body["expected_revision"] = json!(p.revision().await);
    }
    body
}

/// Channel `t/c` holding 5 messages, then `empty` crashed at `failpoint`. After the restart 3
/// more are published; the resend must leave exactly those 3 (when the pending record was
/// durable before the crash: the operation was accepted before they came).
async fn empty_crashed_at(failpoint: &str, pending_durable: bool) {
    let dir = tempfile::tempdir().unwrap();
    let p = spawn(dir.path(), Some(failpoint)).await;
    p.sync().await;
    assert_eq!(p.nsq("/channel/create?topic=t&channel=c", "").await, 200);
    for _ in 0..5 {
        assert_eq!(p.nsq("/pub?topic=t", "old").await, 200);
    }
    let id = format!("empty-at-{failpoint}");
    let body = request(&id, "t", json!({"channel": "c"}), p.revision().await);
    p.crash_during("/v1/manage/channels/empty", &body, dir.path())
        .await;

    let p = spawn(dir.path(), None).await;
    p.sync().await;
    for _ in 0..3 {
        assert_eq!(p.nsq("/pub?topic=t", "new").await, 200);
    }
    let path = "/v1/manage/channels/empty";
    if pending_durable {
        // The pending operation holds its topic; a new id asking the same adopts it.
        let pause = request("a-different-operation", "t", json!({"channel": "c"}), 0);
        let (s, v) = p.post("/v1/manage/channels/pause", &pause).await;
        assert_eq!(
            (s, v["message"].as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("E_MANAGEMENT_UNAVAILABLE")
            ),
            "{failpoint}"
        );
        let adopt = request(&format!("{id}-adopted"), "t", json!({"channel": "c"}), 0);
        let (s, adopted) = p.post(path, &adopt).await;
        assert_eq!(s, StatusCode::OK, "{failpoint}: {adopted}");
    }
    let body = accepted_or_reread(&p, path, body, pending_durable).await;
    let (s, first) = p.post(path, &body).await;
    assert_eq!(s, StatusCode::OK, "{failpoint}: {first}");
    assert_eq!(first["changed"], true, "{failpoint}");
    let depth = p.stats().await.topics[0].channels[0].depth;
    assert_eq!(depth, if pending_durable { 3 } else { 0 }, "{failpoint}");
    let (_, again) = p.post(path, &body).await;
    assert_eq!(
        again, first,
        "{failpoint}: a replay answers the recorded result"
    );
    assert_eq!(p.stats().await.topics[0].channels[0].depth, depth);
}

/// Topic `t` deleted with a tombstone, crashed at `failpoint`: the resend leaves it deleted
/// and fenced, once.
async fn delete_crashed_at(failpoint: &str) {
    let dir = tempfile::tempdir().unwrap();
    let p = spawn(dir.path(), Some(failpoint)).await;
    p.sync().await;
    assert_eq!(p.nsq("/channel/create?topic=t&channel=c", "").await, 200);
    assert_eq!(p.nsq("/pub?topic=t", "m").await, 200);
    let until = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 600_000;
    let id = format!("delete-at-{failpoint}");
    let body = request(
        &id,
        "t",
        json!({"tombstone_until_ms": until}),
        p.revision().await,
    );
    p.crash_during("/v1/manage/topics/delete", &body, dir.path())
        .await;

    let p = spawn(dir.path(), None).await;
    p.sync().await;
    let pending_durable = failpoint != "manage_pending_before_rename";
    let body = accepted_or_reread(&p, "/v1/manage/topics/delete", body, pending_durable).await;
    let (s, first) = p.post("/v1/manage/topics/delete", &body).await;
    assert_eq!(s, StatusCode::OK, "{failpoint}: {first}");
    assert_eq!(first["changed"], true, "{failpoint}");
    assert!(p.stats().await.topics.is_empty(), "{failpoint}");
    assert_eq!(p.nsq("/pub?topic=t", "m").await, StatusCode::CONFLICT);
    let (_, again) = p.post("/v1/manage/topics/delete", &body).await;
    assert_eq!(again, first, "{failpoint}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_killed_at_any_step_empties_once_on_resend() {
    empty_crashed_at("manage_pending_before_rename", false).await;
    for fp in [
        "manage_after_pending",
        "manage_after_action",
        "manage_completed_before_rename",
    ] {
        empty_crashed_at(fp, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_killed_at_any_step_completes_on_resend() {
    for fp in [
        "manage_pending_before_rename",
        "manage_after_pending",
        "manage_fences_before_rename",
        "manage_after_fence",
        "manage_after_action",
        "manage_completed_before_rename",
    ] {
        delete_crashed_at(fp).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_sync_killed_before_its_rename_keeps_the_old_fences() {
    let dir = tempfile::tempdir().unwrap();
    let p = spawn(dir.path(), Some("manage_fence_sync_before_rename")).await;
    p.crash_during(paths::FENCES_SYNC, &json!({"revision": "lost"}), dir.path())
        .await;
    let p = spawn(dir.path(), None).await;
    let r = rustqueue_api::http_client::get(format!("{}{}", p.http, paths::HEALTH))
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "still waiting for a sync"
    );
    p.sync().await;
    assert_eq!(p.nsq("/pub?topic=t", "m").await, 200);
}
