//! The console the operator runs (docs/console.md), and an official NSQ tool beside it: nsqadmin
//! v1.3.0 pointed at the discovery Service lists what every broker holds; the console's
//! snapshot covers the three brokers under load with the brokers' own rates and never a
//! message body; its token cannot drain a broker; with management off the brokers keep their
//! management API closed; with it on, topics and channels are created, paused, emptied and
//! deleted through the console, and an operation cut by a killed console finishes once.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustqueue_e2e::ledger::Ledger;
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::{kubectl_ok, nsqadmin_path};
use rustqueue_e2e::{Poll, eventually};
use serde_json::Value;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::gateway::service_ip;
use crate::rollout::brokers;

/// The console's port (its Service `queue-console`).
const CONSOLE_PORT: u16 = 4180;

/// `http://<console Service ClusterIP>:4180`.
pub async fn console_url(c: &Cluster) -> String {
    format!(
        "http://{}:{CONSOLE_PORT}",
        service_ip(c, "queue-console").await
    )
}

/// `GET url` (with a token when given): the status and the body as JSON (`Null` when it is
/// not JSON or did not answer).
pub async fn get_json(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = rustqueue_api::http_client::client()
        .get(url)
        .timeout(Duration::from_secs(5));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    match req.send().await {
        Err(_) => (0, Value::Null),
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
    }
}

/// The console's latest snapshot, once it answers one.
pub async fn snapshot(console: &str) -> Value {
    eventually("the console answers a snapshot", LONG, || async {
        match get_json(&format!("{console}/api/v1/snapshot"), None).await {
            (200, v) => Poll::Done(v),
            other => Poll::Saw(other),
        }
    })
    .await
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Every path in `v` whose last key is `key` (`a.b[2].key`).
fn paths_named(v: &Value, key: &str, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let here = format!("{at}.{k}");
                if k == key {
                    out.push(here.clone());
                }
                paths_named(child, key, &here, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                paths_named(child, key, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A process killed and reaped when dropped, so a failing step leaves nothing running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on 127.0.0.1 of the test's network namespace.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Official nsqadmin v1.3.0, given the discovery Service as its only lookupd, lists the topics
/// of all three brokers (a topic published on each one only) and the three brokers as nodes:
/// what an NSQ fleet's operators already use keeps working against RustQueue's discovery.
pub async fn official_nsqadmin_lists_every_brokers_topics_through_discovery(c: &Cluster) {
    let topics: Vec<String> = (0..3).map(|i| format!("admin-{i}")).collect();
    for (pod, topic) in brokers().iter().zip(&topics) {
        let ip = c.pod_ip(pod).await;
        let code = http_post(&format!("http://{ip}:4151/pub?topic={topic}"), None, "x").await;
        assert_eq!(code, 200, "publishing to {topic} on {pod}");
    }
    let lookupd = format!("{}:4161", service_ip(c, "queue-discovery").await);
    let port = free_port();
    let log = c.scratch.path().join("nsqadmin.log");
    let admin = Killed(
        Command::new(nsqadmin_path())
            .arg(format!("--http-address=127.0.0.1:{port}"))
            .arg(format!("--lookupd-http-address={lookupd}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("nsqadmin log"))
            .spawn()
            .expect("starting nsqadmin"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let listed = eventually("nsqadmin lists every broker's topic", LONG, || async {
        let (_, t) = get_json(&format!("{base}/api/topics"), None).await;
        let names: Vec<String> = t["topics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(String::from))
            .collect();
        if topics.iter().all(|want| names.contains(want)) {
            Poll::Done(names)
        } else {
            Poll::Saw((names, std::fs::read_to_string(&log).unwrap_or_default()))
        }
    })
    .await;
    eprintln!("nsqadmin /api/topics via {lookupd}: {listed:?}");
    let nodes = eventually("nsqadmin lists the three brokers", LONG, || async {
        let (_, n) = get_json(&format!("{base}/api/nodes"), None).await;
        let hosts: Vec<String> = n["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["hostname"].as_str().map(String::from))
            .collect();
        if hosts.len() == 3 {
            Poll::Done(hosts)
        } else {
            Poll::Saw(n)
        }
    })
    .await;
    eprintln!("nsqadmin /api/nodes: {nodes:?}");
    drop(admin);
}

/// Sum of `runtime.publish_messages_total` over the brokers' `/v1/observe/head` (console
/// token), and when it was read.
async fn published_total(c: &Cluster, token: &str) -> (u64, u64) {
    let mut total = 0;
    for pod in brokers() {
        let ip = c.pod_ip(&pod).await;
        let (code, head) =
            get_json(&format!("http://{ip}:4151/v1/observe/head"), Some(token)).await;
        assert_eq!(
            code, 200,
            "{pod} /v1/observe/head with the console token: {head}"
        );
        total += head["runtime"]["publish_messages_total"]
            .as_u64()
            .unwrap_or_else(|| panic!("{pod} head has no publish counter: {head}"));
    }
    (total, now_ms())
}

/// With management off: the brokers answer 404 on `/v1/manage/*` and the console says it is
/// off; under a publish and consume load over all three brokers the console's snapshot is
/// complete, lists the three brokers, its publish rate matches the brokers' own counters, and
/// it carries no message body anywhere; the console token cannot drain a broker.
pub async fn the_console_reports_the_brokers_under_load_without_message_bodies(c: &Cluster) {
    let admin = c.admin_token().await;
    let console_token = c.token("console-token").await;
    let ip0 = c.pod_ip("queue-0").await;
    let code = http_post(
        &format!("http://{ip0}:4151/v1/manage/topics/create"),
        Some(&admin),
        r#"{"topic":"closed"}"#,
    )
    .await;
    assert_eq!(code, 404, "the brokers' management API is closed while off");
    let console = console_url(c).await;
    let (_, management) = get_json(&format!("{console}/api/v1/management"), None).await;
    assert_eq!(management["enabled"], false, "{management}");

    let mut addresses = Vec::new();
    for pod in brokers() {
        addresses.push(format!("{}:4150", c.pod_ip(&pod).await));
    }
    let ledger = Ledger::start(&addresses, "console-load", "c", 30);
    let started = Instant::now();
    let snap = eventually(
        "a complete snapshot of three publishing brokers",
        LONG,
        || {
            let console = console.clone();
            async move {
                let s = snapshot(&console).await;
                let n = s["brokers"].as_array().map_or(0, Vec::len);
                let rate = s["summary"]["publish_per_second"].as_f64().unwrap_or(0.0);
                if s["complete"] == true && n == 3 && rate > 0.0 {
                    Poll::Done(s)
                } else {
                    Poll::Saw((s["complete"].clone(), n, rate, s["errors"].clone()))
                }
            }
        },
    )
    .await;
    figure(
        "console: load started -> complete snapshot with rates",
        started.elapsed().as_secs_f64(),
        "s",
    );
    let mut bodies = Vec::new();
    paths_named(&snap, "body", "$", &mut bodies);
    assert!(
        bodies.is_empty(),
        "message bodies in the snapshot: {bodies:?}"
    );

    rates_match_the_brokers(c, &console, &console_token).await;

    let drain = format!("http://{ip0}:4151/v1/drain");
    let code = http_post(&drain, Some(&console_token), r#"{"enabled":true}"#).await;
    if code != 401 {
        http_post(&drain, Some(&admin), r#"{"enabled":false}"#).await;
    }
    assert_eq!(code, 401, "the console token must not drain a broker");

    let report = ledger.finish(Duration::from_secs(30)).await;
    assert!(
        report.missing.is_empty(),
        "messages lost under the console's load: {:?}",
        report.missing
    );
}

/// The console's publish rate over a 20 s window against the brokers' counters over the same
/// window. The console's rate is a counter delta over its own poll (2 s); its history samples
/// inside the window are averaged. The tolerance, 20% (at least 2 msg/s), covers the ends of the
/// window (the console's first and last polls straddle the test's two readings: up to one
/// poll, 2 s of 20 s, 10%) and the jitter of a steady 30 msg/s Python publisher over 2 s polls.
async fn rates_match_the_brokers(c: &Cluster, console: &str, token: &str) {
    let (before, t0) = published_total(c, token).await;
    eventually("the console collects for 20 s", LONG, || async {
        let s = snapshot(console).await;
        let at = s["collected_at_ms"].as_u64().unwrap_or(0);
        if at >= t0 + 20_000 {
            Poll::Done(())
        } else {
            Poll::Saw(at)
        }
    })
    .await;
    let (after, t1) = published_total(c, token).await;
    let brokers_rate = (after - before) as f64 * 1000.0 / (t1 - t0) as f64;
    let s = snapshot(console).await;
    let samples: Vec<f64> = s["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["at_ms"].as_u64().is_some_and(|at| at > t0 && at <= t1))
        .filter_map(|h| h["publish_per_second"].as_f64())
        .collect();
    assert!(
        samples.len() >= 5,
        "the console's history holds {} samples of the 20 s window: {}",
        samples.len(),
        s["history"]
    );
    let console_rate = samples.iter().sum::<f64>() / samples.len() as f64;
    let tolerance = (brokers_rate * 0.2).max(2.0);
    eprintln!(
        "publish rate: brokers {brokers_rate:.2}/s, console {console_rate:.2}/s over {} polls",
        samples.len()
    );
    figure(
        "console publish rate minus the brokers'",
        console_rate - brokers_rate,
        "msg/s",
    );
    assert!(
        (console_rate - brokers_rate).abs() <= tolerance,
        "the console's rate {console_rate:.2}/s is not the brokers' {brokers_rate:.2}/s (±{tolerance:.2})"
    );
}

/// An unlocked management session: the session cookie and the CSRF token, sent same-origin.
pub struct Session {
    base: String,
    cookie: String,
    csrf: String,
}

impl Session {
    /// `POST <console><path>` as the console's own pages do: JSON, `Origin` = the console.
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = rustqueue_api::http_client::client()
            .post(format!("{}{path}", self.base))
            .header("Origin", &self.base)
            .header("Cookie", &self.cookie)
            .header("X-RustQueue-CSRF", &self.csrf)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Preview, then apply with the action token (and the confirmation the preview asks to
    /// type, for empty and delete): the apply's status and body.
    async fn act(
        &self,
        kind: &str,
        action: &str,
        topic: &str,
        channel: Option<&str>,
    ) -> (u16, Value) {
        let request =
            serde_json::json!({"kind": kind, "action": action, "topic": topic, "channel": channel});
        let (code, preview) = self.post("/api/v1/management/preview", &request).await;
        if code != 200 {
            return (code, preview);
        }
        let mut apply = request;
        apply["action_token"] = preview["action_token"].clone();
        if preview["confirmation_required"] == true {
            apply["confirmation"] = preview["confirmation"].clone();
        }
        self.post("/api/v1/management/apply", &apply).await
    }

    /// [`Session::act`], which must be accepted (202); the operation id.
    async fn accepted(
        &self,
        kind: &str,
        action: &str,
        topic: &str,
        channel: Option<&str>,
    ) -> String {
        let (code, body) = self.act(kind, action, topic, channel).await;
        assert_eq!(code, 202, "{action} {kind} {topic}/{channel:?}: {body}");
        body["operation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// `POST /api/v1/management/unlock` with the typed `<namespace>/<queue>`.
async fn unlock(console: &str) -> Session {
    let r = rustqueue_api::http_client::client()
        .post(format!("{console}/api/v1/management/unlock"))
        .header("Origin", console)
        .json(&serde_json::json!({"confirmation": format!("{NS}/{RQ}")}))
        .send()
        .await
        .expect("unlock");
    assert_eq!(r.status().as_u16(), 200, "unlock");
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            v.split(';')
                .next()
                .filter(|kv| kv.starts_with("rustqueue_console_session="))
        })
        .expect("a session cookie")
        .to_string();
    let body: Value = r.json().await.expect("unlock body");
    Session {
        base: console.to_string(),
        cookie,
        csrf: body["csrf_token"]
            .as_str()
            .expect("a CSRF token")
            .to_string(),
    }
}

/// The catalog objects of `kind` (`rqt`, `rqc`) as `kubectl get` lists them.
fn catalog(c: &Cluster, kind: &str) -> Vec<Value> {
    let out = kubectl_ok(c.kubeconfig(), &["get", kind, "-n", NS, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{kind}: {e}: {out}"));
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The `rqt` (channel `None`) or `rqc` of `topic`/`channel`, once `check` holds for its spec.
async fn catalog_until(
    c: &Cluster,
    topic: &str,
    channel: Option<&str>,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let kind = if channel.is_some() { "rqc" } else { "rqt" };
    eventually(
        &format!("{kind} {topic}/{channel:?}: {what}"),
        LONG,
        || async {
            let found = catalog(c, kind).into_iter().find(|o| {
                o["spec"]["topic"] == topic && channel.is_none_or(|ch| o["spec"]["channel"] == ch)
            });
            match found {
                Some(o) if check(&o["spec"]) => Poll::Done(o["spec"].clone()),
                other => Poll::Saw(other),
            }
        },
    )
    .await
}

fn owners(spec: &Value) -> Vec<String> {
    spec["owners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_str().map(String::from))
        .collect()
}

/// `topic` (and `channel`) as broker `pod`'s `/v1/stats` has it.
async fn stats_of(c: &Cluster, pod: &str, topic: &str, channel: Option<&str>) -> Value {
    let stats = c.broker_get(pod, "/v1/stats").await;
    let t = stats["topics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == topic)
        .cloned()
        .unwrap_or(Value::Null);
    match channel {
        None => t,
        Some(ch) => t["channels"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["name"] == ch)
            .cloned()
            .unwrap_or(Value::Null),
    }
}

/// Waits until every broker of `pods` reports `topic`/`channel` with `field` = `want`.
async fn brokers_report(
    c: &Cluster,
    pods: &[String],
    topic: &str,
    channel: Option<&str>,
    field: &str,
    want: Value,
) {
    for pod in pods {
        eventually(
            &format!("{pod}: {topic}/{channel:?} {field} = {want}"),
            LONG,
            || async {
                let s = stats_of(c, pod, topic, channel).await;
                if s[field] == want {
                    Poll::Done(())
                } else {
                    Poll::Saw(s)
                }
            },
        )
        .await;
    }
}

/// `consoleManagementEnabled: true` is the one switch: the brokers roll onto a config with
/// management, the console restarts with it, and the RustQueue is Ready again with both.
pub async fn console_management_turns_on_with_the_one_switch(c: &Cluster) -> Session {
    c.patch_spec_ok(r#"{"consoleManagementEnabled":true}"#);
    let generation = c.rq().await.and_then(|rq| rq.generation());
    c.until("Ready with management on", LONG, |rq| {
        rq.is_ready()
            && rq.ready_brokers() == Some(3)
            && rq.status()["observedGeneration"].as_i64() == generation
    })
    .await;
    let console = console_url(c).await;
    eventually("the console's management is on", LONG, || async {
        let (_, m) = get_json(&format!("{console}/api/v1/management"), None).await;
        if m["enabled"] == true {
            Poll::Done(())
        } else {
            Poll::Saw(m)
        }
    })
    .await;
    let token = c.token("console-token").await;
    for pod in brokers() {
        let ip = c.pod_ip(&pod).await;
        let (_, head) = get_json(&format!("http://{ip}:4151/v1/observe/head"), Some(&token)).await;
        assert_eq!(head["management"]["enabled"], true, "{pod}: {head}");
    }
    unlock(&console).await
}

/// A topic created through unlock, preview and apply lands on one owner, its RustQueueTopic
/// reaches ACTIVE, and the owner holds it; a channel created the same way follows. Returns the
/// topic's owner.
pub async fn a_topic_created_in_the_console_lands_on_an_owner_and_becomes_active(
    c: &Cluster,
    s: &Session,
) -> String {
    s.accepted("topic", "create", "managed", None).await;
    let spec = catalog_until(c, "managed", None, "ACTIVE on one owner", |s| {
        s["phase"] == "ACTIVE" && owners(s).len() == 1
    })
    .await;
    let owner = owners(&spec).remove(0);
    brokers_report(
        c,
        std::slice::from_ref(&owner),
        "managed",
        None,
        "name",
        Value::from("managed"),
    )
    .await;
    s.accepted("channel", "create", "managed", Some("c")).await;
    catalog_until(c, "managed", Some("c"), "ACTIVE", |s| {
        s["phase"] == "ACTIVE"
    })
    .await;
    brokers_report(
        c,
        std::slice::from_ref(&owner),
        "managed",
        Some("c"),
        "name",
        Value::from("c"),
    )
    .await;
    owner
}

/// A channel that lives on two brokers (created on each directly) is paused and resumed on
/// both; emptying it is refused while it has two owners (E_MIGRATION_IN_PROGRESS: a destructive
/// action runs only on a single owner), and a single-owner channel is emptied.
pub async fn channels_are_paused_resumed_and_emptied_through_the_console(
    c: &Cluster,
    s: &Session,
    owner: &str,
) {
    let admin = c.admin_token().await;
    let two: Vec<String> = brokers().into_iter().take(2).collect();
    for pod in &two {
        let ip = c.pod_ip(pod).await;
        let url = format!("http://{ip}:4151/channel/create?topic=two&channel=c");
        assert_eq!(
            http_post(&url, Some(&admin), "").await,
            200,
            "channel two/c on {pod}"
        );
    }
    catalog_until(c, "two", Some("c"), "ACTIVE on two owners", |s| {
        s["phase"] == "ACTIVE" && owners(s).len() == 2
    })
    .await;
    s.accepted("channel", "pause", "two", Some("c")).await;
    catalog_until(c, "two", Some("c"), "paused", |s| {
        s["phase"] == "ACTIVE" && s["paused"] == true
    })
    .await;
    brokers_report(c, &two, "two", Some("c"), "paused", Value::Bool(true)).await;
    s.accepted("channel", "unpause", "two", Some("c")).await;
    catalog_until(c, "two", Some("c"), "resumed", |s| {
        s["phase"] == "ACTIVE" && s["paused"] == false
    })
    .await;
    brokers_report(c, &two, "two", Some("c"), "paused", Value::Bool(false)).await;
    let (code, refused) = s.act("channel", "empty", "two", Some("c")).await;
    assert_eq!(
        (code, refused["code"].as_str()),
        (409, Some("E_MIGRATION_IN_PROGRESS")),
        "{refused}"
    );

    let ip = c.pod_ip(owner).await;
    for i in 0..3 {
        let code = http_post(
            &format!("http://{ip}:4151/pub?topic=managed"),
            None,
            &format!("e{i}"),
        )
        .await;
        assert_eq!(code, 200, "publish e{i} to managed on {owner}");
    }
    brokers_report(
        c,
        &[owner.to_string()],
        "managed",
        Some("c"),
        "depth",
        Value::from(3),
    )
    .await;
    s.accepted("channel", "empty", "managed", Some("c")).await;
    catalog_until(c, "managed", Some("c"), "ACTIVE after empty", |s| {
        s["phase"] == "ACTIVE" && s["operation"].is_null()
    })
    .await;
    brokers_report(
        c,
        &[owner.to_string()],
        "managed",
        Some("c"),
        "depth",
        Value::from(0),
    )
    .await;
}

/// Deleting the topic tombstones it: its RustQueueTopic is TOMBSTONED and a publish to it is
/// refused with 409 on its owner while the fence lasts.
pub async fn a_deleted_topic_refuses_publishes_while_tombstoned(
    c: &Cluster,
    s: &Session,
    owner: &str,
) {
    s.accepted("topic", "delete", "managed", None).await;
    catalog_until(c, "managed", None, "TOMBSTONED", |s| {
        s["phase"] == "TOMBSTONED"
    })
    .await;
    let ip = c.pod_ip(owner).await;
    let code = http_post(&format!("http://{ip}:4151/pub?topic=managed"), None, "late").await;
    assert_eq!(code, 409, "a publish to a tombstoned topic on its owner");
}

/// A console killed (grace 0) while a two-owner pause is half done: the new console Pod
/// resumes it from `completedOwners`, both owners end paused, the operation is cleared, and it
/// succeeds exactly once (one ConsoleManagementSucceeded Event names its id).
pub async fn a_console_killed_mid_operation_finishes_it_exactly_once(c: &Cluster, s: &Session) {
    let admin = c.admin_token().await;
    let two: Vec<String> = brokers().into_iter().skip(1).collect();
    for pod in &two {
        let ip = c.pod_ip(pod).await;
        let url = format!("http://{ip}:4151/topic/create?topic=crash");
        assert_eq!(
            http_post(&url, Some(&admin), "").await,
            200,
            "topic crash on {pod}"
        );
    }
    catalog_until(c, "crash", None, "ACTIVE on two owners", |s| {
        s["phase"] == "ACTIVE" && owners(s).len() == 2
    })
    .await;
    let killed = console_pod(c).await;
    let id = s.accepted("topic", "pause", "crash", None).await;
    let halfway = catalog_until(c, "crash", None, "one owner done", |s| {
        s["operation"]["completedOwners"].as_array().map(Vec::len) == Some(1)
            || s["operation"].is_null()
    })
    .await;
    assert!(
        !halfway["operation"].is_null(),
        "the pause finished before the console could be killed: {halfway}"
    );
    kubectl_ok(
        c.kubeconfig(),
        &[
            "delete",
            "pod",
            "-n",
            NS,
            &killed,
            "--grace-period=0",
            "--force",
        ],
    );
    eprintln!(
        "killed {killed} with {:?} done",
        halfway["operation"]["completedOwners"]
    );
    eventually("a new console Pod", LONG, || async {
        let p = console_pod(c).await;
        if p == killed {
            Poll::Saw(p)
        } else {
            Poll::Done(())
        }
    })
    .await;
    catalog_until(c, "crash", None, "paused, operation cleared", |s| {
        s["phase"] == "ACTIVE" && s["paused"] == true && s["operation"].is_null()
    })
    .await;
    brokers_report(c, &two, "crash", None, "paused", Value::Bool(true)).await;
    // The console records the Event before the write that clears the operation, under a
    // name derived from the operation id, so once the operation is cleared the Event is there,
    // once, whichever console (the killed one may still run for a moment) finished it.
    assert_eq!(
        succeeded_events(c, &id),
        1,
        "operation {id} must succeed exactly once, its Event recorded before it is cleared"
    );
}

/// How many `ConsoleManagementSucceeded` Events name operation `id`.
fn succeeded_events(c: &Cluster, id: &str) -> usize {
    let out = kubectl_ok(c.kubeconfig(), &["get", "events", "-n", NS, "-o", "json"]);
    let events: Value = serde_json::from_str(&out).expect("events JSON");
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "ConsoleManagementSucceeded")
        .filter(|e| e["message"].as_str().is_some_and(|m| m.contains(id)))
        .count()
}

/// The name of the console's running Pod (not terminating).
async fn console_pod(c: &Cluster) -> String {
    eventually("a running console Pod", LONG, || async {
        let out = kubectl_ok(
            c.kubeconfig(),
            &[
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                "app.kubernetes.io/component=console",
                "-o",
                "json",
            ],
        );
        let pods: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        let running: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running"
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
            .collect();
        match running.as_slice() {
            [one] => Poll::Done(one.clone()),
            _ => Poll::Saw(running),
        }
    })
    .await
}

/// `console.enabled: false` removes every `queue-console` object (the Deployment last) and the
/// RustQueue is Ready without it; `true` brings it back, serving a snapshot, and Ready waits
/// for it again.
pub async fn turning_the_console_off_removes_it_and_on_brings_it_back(c: &Cluster) {
    let objects = [
        "deployment",
        "service",
        "serviceaccount",
        "role",
        "rolebinding",
        "networkpolicy",
    ];
    let present = |c: &Cluster| -> Vec<String> {
        objects
            .iter()
            .filter(|kind| {
                rustqueue_e2e::tools::kubectl(
                    c.kubeconfig(),
                    &["get", kind, "queue-console", "-n", NS],
                )
                .success
            })
            .map(|k| k.to_string())
            .collect()
    };
    c.patch_spec_ok(r#"{"console":{"enabled":false}}"#);
    let generation = c.rq().await.and_then(|rq| rq.generation());
    c.until("Ready without the console", LONG, |rq| {
        rq.is_ready() && rq.status()["observedGeneration"].as_i64() == generation
    })
    .await;
    eventually("every queue-console object deleted", LONG, || async {
        let left = present(c);
        if left.is_empty() {
            Poll::Done(())
        } else {
            Poll::Saw(left)
        }
    })
    .await;
    c.patch_spec_ok(r#"{"console":{"enabled":true}}"#);
    let generation = c.rq().await.and_then(|rq| rq.generation());
    let rq = c
        .until("Ready with the console back", LONG, |rq| {
            rq.is_ready() && rq.status()["observedGeneration"].as_i64() == generation
        })
        .await;
    let runtime = rq
        .condition("RuntimeAvailable")
        .cloned()
        .unwrap_or_default();
    assert!(
        runtime["message"]
            .as_str()
            .is_some_and(|m| m.contains("console 1 Pod Ready")),
        "{runtime}"
    );
    assert_eq!(present(c).len(), objects.len(), "every console object back");
    let s = snapshot(&console_url(c).await).await;
    assert_eq!(s["cluster"]["name"], RQ, "the console serves again");
}

/// The console Pod serves its web pages from the image (docs/console.md): `/` is the pages'
/// index, every script, style sheet and font it names loads from the console itself, and an
/// unknown path falls back to the index (the pages route by hash).
pub async fn the_console_serves_its_web_pages_from_the_image(c: &Cluster) {
    let console = console_url(c).await;
    let get = |path: String| async move {
        let r = rustqueue_api::http_client::client()
            .get(&path)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    let (status, index) = get(format!("{console}/")).await;
    assert_eq!(status, 200, "{index}");
    assert!(
        index.contains(r#"<div id="root">"#),
        "not the pages' index: {index}"
    );
    let assets: Vec<&str> = index
        .split('"')
        .filter(|s| s.starts_with("./assets/"))
        .collect();
    assert!(assets.len() >= 2, "no script and style named in {index}");
    for a in &assets {
        let (status, body) = get(format!("{console}/{}", a.trim_start_matches("./"))).await;
        assert_eq!(status, 200, "{a}");
        assert!(!body.is_empty(), "{a} is empty");
    }
    let (status, fallback) = get(format!("{console}/topics")).await;
    assert_eq!(
        (status, fallback == index),
        (200, true),
        "no fallback to the index"
    );
    eprintln!(
        "console pages: index and {} assets served from the image",
        assets.len()
    );
}
