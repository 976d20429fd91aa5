//! rustqueuectl as a user runs it: the kubectl plugin `kubectl rustqueue ...`, found by the
//! pinned kubectl on `PATH` (a directory holding only `kubectl-rustqueue`, a link to the
//! `rustqueuectl` the images were built with, `$RUSTQUEUE_E2E_BIN_DIR`), against the live
//! RustQueue of the scenario. kubectl hands a plugin everything after its name, so the
//! kubeconfig comes in `$KUBECONFIG`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustqueue_e2e::tools::{Output, kubectl_path, run};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustqueue_e2e::repo_root;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::gateway::service_ip;
use crate::rollout::brokers;

/// The rustqueuectl under test: `$RUSTQUEUE_E2E_BIN_DIR/rustqueuectl`.
pub fn ctl_binary() -> PathBuf {
    let bin = std::env::var_os("RUSTQUEUE_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release"))
        .join("rustqueuectl");
    assert!(
        bin.exists(),
        "{} missing: run `make e2e-operator` (it builds rustqueuectl with the images)",
        bin.display()
    );
    bin
}

/// A directory with `kubectl-rustqueue` in it (kept for the test process).
fn plugin_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("a plugin directory");
        std::os::unix::fs::symlink(ctl_binary(), d.path().join("kubectl-rustqueue"))
            .expect("linking kubectl-rustqueue");
        d
    })
    .path()
    .to_path_buf()
}

/// `kubectl rustqueue -n <NS> --name <RQ> <args>`, the plugin first on `PATH`.
fn plugin(c: &Cluster, args: &[&str]) -> Command {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("rustqueue")
        .args(["-n", NS, "--name", RQ])
        .args(args)
        .env("PATH", format!("{}:{path}", plugin_dir().display()))
        .env("KUBECONFIG", c.kubeconfig());
    cmd
}

/// Runs the plugin to its end off the runtime's threads (the testbed's kubelet runs on them).
async fn rq(c: &Cluster, args: &[&str]) -> Output {
    let cmd = plugin(c, args);
    tokio::task::spawn_blocking(move || run(cmd))
        .await
        .expect("the plugin ran")
}

/// Like [`rq`], panicking unless it exits 0; prints and returns its stdout.
async fn rq_ok(c: &Cluster, args: &[&str]) -> String {
    let out = rq(c, args).await;
    assert!(
        out.success,
        "kubectl rustqueue {} failed:\n{}{}",
        args.join(" "),
        out.stdout,
        out.stderr
    );
    eprintln!("$ kubectl rustqueue {}\n{}", args.join(" "), out.stdout);
    out.stdout
}

/// Like [`rq`], asserting a non-zero exit with one line on stderr containing `says`.
async fn rq_refused(c: &Cluster, args: &[&str], says: &str) -> String {
    let out = rq(c, args).await;
    assert!(
        !out.success,
        "kubectl rustqueue {} succeeded",
        args.join(" ")
    );
    let err = out.stderr.trim_end();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(says), "`{}` said {err:?}", args.join(" "));
    eprintln!("$ kubectl rustqueue {} -> {err}", args.join(" "));
    err.to_string()
}

/// During the canary of `paused_and_canary_rollouts_wait_for_a_human`: `approve` refused while
/// paused; (after the resume) `status` names the revision to approve, `rollout approve`
/// approves exactly it.
pub async fn ctl_refuses_to_approve_a_paused_rollout(c: &Cluster) {
    rq_refused(c, &["rollout", "approve"], "nothing to approve").await;
    let status = rq_ok(c, &["status"]).await;
    assert!(status.contains("Phase:      RolloutPaused"), "{status}");
    assert!(!status.contains("Approve:"), "{status}");
}

/// `rollout resume` through the plugin.
pub async fn ctl_resumes_the_rollout(c: &Cluster) {
    let out = rq_ok(c, &["rollout", "resume"]).await;
    assert!(out.contains("resumed"), "{out}");
}

/// While the canary waits: `status` names `rev` and `rollout approve` approves it.
pub async fn ctl_status_names_the_canary_and_approve_approves_it(c: &Cluster, rev: &str) {
    let status = rq_ok(c, &["status"]).await;
    assert!(
        status.contains(&format!("Approve:    the canary runs revision {rev}")),
        "status does not name {rev}:\n{status}"
    );
    assert!(
        status.contains("Rollout AwaitingCanaryApproval"),
        "{status}"
    );
    let json = rq_ok(c, &["status", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json).expect("status -o json is JSON");
    assert_eq!(v["status"]["currentOperation"]["revision"], rev);
    let out = rq_ok(c, &["rollout", "approve"]).await;
    assert!(out.contains(&format!("approved revision {rev}")), "{out}");
}

/// `wait --for ready` returns 0 once Ready, with progress lines.
pub async fn ctl_waits_until_ready(c: &Cluster) {
    let out = rq_ok(c, &["wait", "--for", "ready", "--timeout", "5m"]).await;
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.contains("phase Ready")),
        "{out}"
    );
}

/// `maintenance queue-1 enable` drains it (phase Maintenance, `/v1/drain` draining, `status`
/// says so); `disable` gives it back and `wait` sees Ready.
pub async fn ctl_maintenance_drains_a_broker_and_gives_it_back(c: &Cluster) {
    c.ready(3).await;
    let b = format!("{RQ}-1");
    rq_refused(c, &["maintenance", "other-1", "enable"], "is not a broker").await;
    rq_ok(c, &["maintenance", &b, "enable"]).await;
    c.until("phase Maintenance", LONG, |rq| rq.phase() == "Maintenance")
        .await;
    let drain = c.broker_get(&b, "/v1/drain").await;
    assert_eq!(drain["draining"], true, "{b} /v1/drain: {drain}");
    let status = rq_ok(c, &["status"]).await;
    assert!(
        status.contains(&format!("Maintenance: {b} requested")),
        "{status}"
    );
    rq_ok(c, &["maintenance", &b, "disable"]).await;
    ctl_waits_until_ready(c).await;
    let drain = c.broker_get(&b, "/v1/drain").await;
    assert_eq!(drain["draining"], false, "{b} after maintenance: {drain}");
    c.patch_spec_ok(r#"{"maintenance":null}"#);
    c.ready(3).await;
}

/// `tail` through a port-forward it opens itself prints what is published through the gateway.
pub async fn ctl_tail_prints_messages_published_through_the_gateway(c: &Cluster) {
    c.ready(3).await;
    let topic = "ctl-tail";
    let admin = c.admin_token().await;
    for b in brokers() {
        let ip = c.pod_ip(&b).await;
        let url = format!("http://{ip}:4151/topic/create?topic={topic}");
        assert_eq!(http_post(&url, Some(&admin), "").await, 200, "{url}");
    }
    let mut cmd = plugin(
        c,
        &[
            "--via",
            "port-forward",
            "tail",
            topic,
            "--count",
            "6",
            "--timeout",
            "120s",
        ],
    );
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("starting kubectl rustqueue tail");
    // Publish once every broker has the tail's ephemeral channel.
    let start = Instant::now();
    loop {
        let mut subscribed = 0;
        for b in brokers() {
            let stats = c.broker_get(&b, &format!("/v1/stats?topic={topic}")).await;
            let chans = stats["topics"][0]["channels"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if chans.iter().any(|ch| {
                ch["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("rustqueuectl-") && n.ends_with("#ephemeral"))
            }) {
                subscribed += 1;
            }
        }
        if subscribed == 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "tail subscribed on {subscribed} of 3 brokers"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let gw = service_ip(c, &format!("{RQ}-gateway")).await;
    let url = format!("http://{gw}:4151/pub?topic={topic}");
    let mut sent: Vec<String> = (0..6).map(|i| format!("tail-{i}")).collect();
    for body in &sent {
        assert_eq!(http_post(&url, None, body).await, 200, "POST {url} {body}");
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("tail ran")
        .expect("tail output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tail failed: {stdout}{stderr}");
    eprintln!(
        "$ kubectl rustqueue --via port-forward tail {topic} --count 6 --timeout 120s\n{stderr}{stdout}"
    );
    let mut got: Vec<String> = stdout.lines().map(str::to_string).collect();
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "tail printed what the gateway took");
}

/// `brokers`, `topics`, `stats` and `scrub` against the three brokers.
pub async fn ctl_reads_brokers_topics_and_stats(c: &Cluster) {
    c.ready(3).await;
    let table = rq_ok(c, &["brokers"]).await;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "BROKER", "READY", "NODE", "IP", "REVISION", "IMAGE", "PVC", "SIZE", "USED", "DEPTH"
        ]
    );
    assert_eq!(rows.len(), 4, "{table}");
    for (i, r) in rows[1..].iter().enumerate() {
        assert_eq!(r[0], format!("{RQ}-{i}"), "{table}");
        assert_eq!(r[1], "true", "{table}");
        assert!(!r.contains(&"?"), "a column could not be read:\n{table}");
    }
    let topics = rq_ok(c, &["topics", "--topic", "ctl-tail", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&topics).expect("topics -o json");
    assert_eq!(v[0]["owners"].as_array().map(Vec::len), Some(3), "{v}");
    rq_ok(c, &["topics"]).await;
    let stats = rq_ok(c, &["stats"]).await;
    assert_eq!(stats.lines().count(), 3, "{stats}");
    for (i, l) in stats.lines().enumerate() {
        let (pod, json) = l.split_once('\t').expect("pod<TAB>json");
        assert_eq!(pod, format!("{RQ}-{i}"));
        serde_json::from_str::<serde_json::Value>(json).expect("JSON stats");
    }
    let scrub = rq_ok(c, &["scrub"]).await;
    assert_eq!(scrub.matches("records_checked").count(), 3, "{scrub}");
    // Leave nothing behind: a later step drains a broker to empty.
    let admin = c.admin_token().await;
    for b in brokers() {
        let ip = c.pod_ip(&b).await;
        let url = format!("http://{ip}:4151/topic/delete?topic=ctl-tail");
        assert_eq!(http_post(&url, Some(&admin), "").await, 200, "{url}");
    }
}

/// `report` writes a bundle whose files are listed and hold no token of the auth Secret.
pub async fn ctl_report_bundles_everything_but_the_tokens(c: &Cluster) {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("bundle.tar.gz");
    let listing = rq_ok(c, &["report", "-f", file.to_str().expect("utf-8 path")]).await;
    for want in [
        "/rustqueue.yaml",
        "/events.yaml",
        "/pods.yaml",
        "/pvcs.yaml",
        "/statefulset.yaml",
        "/brokers/queue-0/health.json",
        "/brokers/queue-2/capabilities.json",
        "/brokers/queue-1/stats.json",
        "/logs/queue-0/",
        "/logs/operator/",
    ] {
        assert!(
            listing.contains(want),
            "{want} missing from the bundle:\n{listing}"
        );
    }
    let out = dir.path().join("x");
    std::fs::create_dir(&out).expect("mkdir");
    let untar = Command::new("tar")
        .arg("xzf")
        .arg(&file)
        .arg("-C")
        .arg(&out)
        .status()
        .expect("tar");
    assert!(untar.success(), "tar xzf {}", file.display());
    let mut files = Vec::new();
    let mut stack = vec![out.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    assert!(files.len() >= 10, "{files:?}");
    let secret: Secret = Api::namespaced(c.client.clone(), NS)
        .get(&format!("{RQ}-auth"))
        .await
        .expect("the auth Secret");
    let tokens = secret.data.expect("Secret data");
    assert!(tokens.contains_key("registry-token") && tokens.contains_key("admin-token"));
    for (key, token) in &tokens {
        for f in &files {
            let text = std::fs::read(f).expect("read");
            let hit = text.windows(token.0.len()).any(|w| w == token.0.as_slice());
            assert!(!hit, "{} holds the {key} of the auth Secret", f.display());
        }
    }
    eprintln!("no file of the bundle holds any of {:?}", tokens.keys());
}

/// No such RustQueue, no kubeconfig, a broker unreachable: one line each and a non-zero exit.
pub async fn ctl_errors_are_one_line_and_a_non_zero_exit(c: &Cluster) {
    rq_refused(
        c,
        &["--name", "nope", "status"],
        "no RustQueue rustqueue-system/nope",
    )
    .await;
    rq_refused(
        c,
        &["--kubeconfig", "/nonexistent/kubeconfig", "status"],
        "cannot read kubeconfig /nonexistent/kubeconfig",
    )
    .await;
    rq_refused(c, &["--broker-http-port", "1", "stats"], "brokers failed").await;
}
