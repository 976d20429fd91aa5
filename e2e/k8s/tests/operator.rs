//! Issue 7 on the testbed: the operator installed from `config/`, two replicas, the sample
//! RustQueue on three eligible Nodes; publish/consume, a broker Pod back on its PVC with its
//! backlog, leader failover, and a CEL refusal from the real API server.
//!
//! Needs `rustqueued` and `rustqueue-operator` in `$RUSTQUEUE_E2E_BIN_DIR` (`make e2e` builds
//! them), the testbed's control plane, kubectl and pynsq (`scripts/deps.sh k8s kubectl python`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams};
use rustqueue_api::crd::{ConditionStatus, RustQueue};
use rustqueue_e2e::tools::{kubectl, kubectl_ok, pynsq_consume};
use rustqueue_e2e::{eventually, repo_root};
use rustqueue_testbed::{Image, STORAGE_CLASS, Testbed, TestbedOptions};

const NS: &str = "rustqueue-system";
const LONG: Duration = Duration::from_secs(180);

fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("RUSTQUEUE_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/debug"));
    for b in ["rustqueued", "rustqueue-operator"] {
        assert!(
            dir.join(b).exists(),
            "{} missing: run `make e2e`",
            dir.join(b).display()
        );
    }
    dir
}

async fn pod_ip(pods: &Api<Pod>, name: &str) -> String {
    pods.get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap()
}

async fn ready_pod_uid(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get_opt(name).await.ok()??;
    let ready = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (ready && p.metadata.deletion_timestamp.is_none())
        .then(|| p.metadata.uid.clone().unwrap_or_default())
}

async fn rq_ready(rqs: &Api<RustQueue>) -> Option<RustQueue> {
    let rq = rqs.get("queue").await.ok()?;
    let s = rq.status.as_ref()?;
    let ready = s.condition("Ready")?.status == ConditionStatus::True;
    (ready && s.observed_generation == rq.metadata.generation && s.ready_brokers == Some(3))
        .then_some(rq)
}

async fn admin_token(client: &kube::Client) -> String {
    let s: Secret = Api::namespaced(client.clone(), NS)
        .get("queue-auth")
        .await
        .unwrap();
    String::from_utf8(s.data.unwrap()["admin-token"].0.clone()).unwrap()
}

async fn http_post(url: &str, token: Option<&str>, body: &str) -> u16 {
    let mut req = reqwest::Client::new().post(url).body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

#[test]
fn operator_runs_the_sample_cluster_and_survives_pod_and_leader_loss() {
    // The testbed's private network namespace: Pod IPs are reachable from this test.
    rustqueue_testbed::netns::isolated_runtime()
        .expect("private network namespace")
        .block_on(scenario());
}

async fn scenario() {
    let bed = Testbed::start(
        TestbedOptions::default()
            .nodes(3)
            .node_label("rustqueue.io/eligible", "true")
            .image("rustqueue:dev", Image::dir(bin_dir())),
    )
    .await
    .expect("testbed starts");
    let client = bed.client();
    let kc = bed.kubeconfig_path().to_path_buf();

    // What the README tells users: the operator (CRD, RBAC, two-replica manager) from
    // config/default, then the sample, with the pinned kubectl.
    let root = repo_root().join("config");
    let out = kubectl_ok(
        &kc,
        &["apply", "-k", root.join("default").to_str().unwrap()],
    );
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/rustqueues.rustqueue.io"),
        "{out}"
    );
    kubectl_ok(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/rustqueues.rustqueue.io",
            "--timeout=60s",
        ],
    );
    // The sample names the `local-path` class of k3s/local-path-provisioner; point it at the
    // testbed's class with a kustomize overlay, the way a user adapts it to their cluster.
    let overlay = tempfile::tempdir().unwrap();
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "resources:\n  - {}\npatches:\n  - target: {{kind: RustQueue, name: queue}}\n    \
             patch: '[{{\"op\": \"replace\", \"path\": \"/spec/storageClassName\", \"value\": \"{STORAGE_CLASS}\"}}]'\n",
            relative_to(overlay.path(), &root.join("samples"))
        ),
    )
    .unwrap();
    kubectl_ok(
        &kc,
        &["apply", "-n", NS, "-k", overlay.path().to_str().unwrap()],
    );

    let rqs: Api<RustQueue> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let waited = Instant::now();
    let wait = kubectl(
        &kc,
        &[
            "wait",
            "-n",
            NS,
            "--for=condition=Ready",
            "rustqueue/queue",
            "--timeout=180s",
        ],
    );
    if !wait.success {
        rq_ready_or_dump(&bed, &rqs).await;
    }
    assert!(wait.success, "kubectl wait: {}{}", wait.stdout, wait.stderr);
    eprintln!(
        "kubectl wait returned after {:.1}s: {}",
        waited.elapsed().as_secs_f64(),
        wait.stdout.trim()
    );
    rq_ready_or_dump(&bed, &rqs).await;
    for i in 0..3 {
        assert!(
            ready_pod_uid(&pods, &format!("queue-{i}")).await.is_some(),
            "queue-{i} Ready"
        );
    }
    let table = kubectl_ok(&kc, &["get", "rustqueue", "-n", NS]);
    eprintln!("{table}");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "DESIRED", "READY", "AGE"],
        "{table}"
    );
    assert!(
        table.lines().nth(1).is_some_and(|l| l
            .split_whitespace()
            .take(4)
            .eq(["queue", "Ready", "3", "3"])),
        "{table}"
    );

    // Argo CD's view: the health check of docs/argocd.md on the live object.
    let live: serde_json::Value = serde_json::from_str(&kubectl_ok(
        &kc,
        &["get", "rustqueue", "queue", "-n", NS, "-o", "json"],
    ))
    .unwrap();
    assert_eq!(argocd_health(&live).0, "Healthy", "{live}");

    // Publish over a broker Pod's HTTP and consume with the official pynsq client.
    let ip0 = pod_ip(&pods, "queue-0").await;
    for i in 0..5 {
        let code = http_post(
            &format!("http://{ip0}:4151/pub?topic=e2e"),
            None,
            &format!("m{i}"),
        )
        .await;
        assert_eq!(code, 200, "publish m{i}");
    }
    let mut bodies = pynsq_consume(
        &format!("{ip0}:4150"),
        "e2e",
        "c",
        5,
        Duration::from_secs(30),
    );
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"]);

    // A backlog on queue-1 survives deleting the Pod: it comes back on the same PVC.
    let token = admin_token(&client).await;
    let ip1 = pod_ip(&pods, "queue-1").await;
    assert_eq!(
        http_post(
            &format!("http://{ip1}:4151/channel/create?topic=backlog&channel=c"),
            Some(&token),
            ""
        )
        .await,
        200
    );
    for i in 0..3 {
        assert_eq!(
            http_post(
                &format!("http://{ip1}:4151/pub?topic=backlog"),
                None,
                &format!("b{i}")
            )
            .await,
            200
        );
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvc_uid = pvcs.get("data-queue-1").await.unwrap().metadata.uid;
    let old_uid = ready_pod_uid(&pods, "queue-1").await.unwrap();
    kubectl_ok(&kc, &["delete", "pod", "-n", NS, "queue-1"]);
    eventually("queue-1 recreated and Ready", LONG, || async {
        ready_pod_uid(&pods, "queue-1")
            .await
            .filter(|u| *u != old_uid)
    })
    .await;
    assert_eq!(
        pvcs.get("data-queue-1").await.unwrap().metadata.uid,
        pvc_uid,
        "same PVC"
    );
    rq_ready_or_dump(&bed, &rqs).await;
    let ip1 = pod_ip(&pods, "queue-1").await;
    let mut bodies = pynsq_consume(
        &format!("{ip1}:4150"),
        "backlog",
        "c",
        3,
        Duration::from_secs(30),
    );
    bodies.sort();
    assert_eq!(
        bodies,
        ["b0", "b1", "b2"],
        "backlog consumed after the restart"
    );

    // Kill the leader: the standby takes over within the lease and status keeps updating.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let holder = leases
        .get("rustqueue-operator-leader")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    pods.delete(
        &holder,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    let killed = Instant::now();
    let new_holder = eventually("a new Lease holder", Duration::from_secs(60), || async {
        let h = leases
            .get("rustqueue-operator-leader")
            .await
            .ok()?
            .spec?
            .holder_identity?;
        (h != holder).then_some(h)
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(35),
        "handover took {took:?} (lease 20 s + renew 5 s)"
    );
    eprintln!("leader {holder} -> {new_holder} in {took:?}");
    let patched = patch_spec(&kc, r#"{"maxTopics":5000}"#);
    assert!(patched.success, "{}{}", patched.stdout, patched.stderr);
    let rq = rq_ready_or_dump(&bed, &rqs).await;
    assert_eq!(rq.spec.max_topics, 5000);
    assert_eq!(
        argocd_health(&serde_json::to_value(&rq).unwrap()).0,
        "Healthy"
    );
    // The new leader says so on :8080/metrics, and has reconciled.
    let leader_ip = pod_ip(&pods, &new_holder).await;
    let metrics = reqwest::get(format!("http://{leader_ip}:8080/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "rustqueue_operator_leader 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rustqueue_operator_reconciles_total"),
        "{metrics}"
    );
    // Phase transitions were recorded as Events on the RustQueue.
    let events = kubectl_ok(
        &kc,
        &[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "involvedObject.kind=RustQueue",
            "-o",
            "name",
        ],
    );
    assert!(
        events.lines().count() >= 2,
        "expected transition Events, got:\n{events}"
    );

    // An invalid spec is refused by the API server with the CEL message.
    let refused = patch_spec(&kc, r#"{"minBrokers":5}"#);
    assert!(!refused.success, "minBrokers 5 > maxBrokers 3 was accepted");
    assert!(
        refused
            .stderr
            .contains("minBrokers must be less than or equal to maxBrokers"),
        "{}",
        refused.stderr
    );
}

/// `kubectl patch rustqueue queue --type=merge` with `spec` as the new spec fields.
fn patch_spec(kc: &std::path::Path, spec: &str) -> rustqueue_e2e::tools::Output {
    let body = format!(r#"{{"spec":{spec}}}"#);
    kubectl(
        kc,
        &[
            "patch",
            "rustqueue",
            "queue",
            "-n",
            NS,
            "--type=merge",
            "-p",
            &body,
        ],
    )
}

/// Runs the Argo CD health check from docs/argocd.md (Lua 5.4) on `obj`: (status, message).
fn argocd_health(obj: &serde_json::Value) -> (String, String) {
    use mlua::LuaSerdeExt;
    let doc = std::fs::read_to_string(repo_root().join("docs/argocd.md")).unwrap();
    let start = doc
        .find("```lua\n")
        .expect("docs/argocd.md has a lua block")
        + "```lua\n".len();
    let len = doc[start..].find("```").expect("the lua block is closed");
    let lua = mlua::Lua::new();
    lua.globals()
        .set("obj", lua.to_value(obj).unwrap())
        .unwrap();
    let hs: mlua::Table = lua.load(&doc[start..start + len]).eval().unwrap();
    (hs.get("status").unwrap(), hs.get("message").unwrap())
}

/// `target` as a path relative to directory `from` (kustomize refuses absolute bases).
fn relative_to(from: &std::path::Path, target: &std::path::Path) -> String {
    let from = from.canonicalize().unwrap();
    let target = target.canonicalize().unwrap();
    let up = from.components().count() - 1;
    let rest = target.strip_prefix("/").unwrap();
    format!("{}{}", "../".repeat(up), rest.display())
}

async fn rq_ready_or_dump(bed: &Testbed, rqs: &Api<RustQueue>) -> RustQueue {
    let start = Instant::now();
    loop {
        if let Some(rq) = rq_ready(rqs).await {
            return rq;
        }
        if start.elapsed() > LONG {
            let rq = rqs.get("queue").await.ok();
            let status = rq
                .and_then(|r| r.status)
                .map(|s| serde_json::to_string_pretty(&s).unwrap());
            for p in ["queue-0", "queue-1", "queue-2"] {
                eprintln!("--- {p}\n{}", bed.logs(NS, p, "broker").unwrap_or_default());
            }
            panic!("RustQueue not Ready: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
