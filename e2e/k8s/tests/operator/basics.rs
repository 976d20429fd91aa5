//! The steps a new user walks through first: install, the sample cluster, publish/consume,
//! a broker Pod back on its PVC, leader failover, Events and a CEL refusal.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::{kubectl, kubectl_ok, pynsq_consume};
use rustqueue_e2e::{Poll, eventually, repo_root};

use crate::cluster::{Cluster, DEV, LONG, NS, RQ, http_post};

/// The CRDs `config/crd` installs: the RustQueue and the console's catalog.
const CRDS: [&str; 3] = [
    "rustqueues.rustqueue.io",
    "rustqueuetopics.rustqueue.io",
    "rustqueuechannels.rustqueue.io",
];

/// `kubectl apply -k config/default`: namespace, the three CRDs, RBAC and the two-replica
/// operator.
pub async fn the_operator_installs_from_config_default(c: &Cluster) {
    let install = install_dir(c);
    let out = kubectl_ok(c.kubeconfig(), &["apply", "-k", install.to_str().unwrap()]);
    for crd in CRDS {
        assert!(
            out.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{crd}"
            )),
            "kubectl apply -k config/default did not create the CRD {crd}:\n{out}"
        );
    }
    let crds = CRDS.map(|crd| format!("crd/{crd}"));
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(crds.iter().map(String::as_str));
    kubectl_ok(c.kubeconfig(), &args);
}

/// `config/default`'s namespace enforces Pod Security `restricted`, and the API server applies
/// it: a Pod that a hardened cluster refuses (root, privilege escalation allowed, default
/// capabilities, no seccomp profile) is refused here too, so every Pod the operator creates
/// in it (and the operator's own) is proven to meet `restricted` by being admitted at all.
pub async fn pod_security_restricted_refuses_a_privileged_pod(c: &Cluster) {
    let ns: k8s_openapi::api::core::v1::Namespace =
        kube::Api::all(c.client.clone()).get(NS).await.unwrap();
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted"),
        "{labels:?}"
    );
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pod-security-probe"},
        "spec": {"containers": [{"name": "c", "image": DEV.as_str(),
            "securityContext": {"privileged": true}}]}
    }))
    .unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(c.client.clone(), NS);
    match api.create(&kube::api::PostParams::default(), &pod).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "{e:?}");
            assert!(
                e.message.contains("violates PodSecurity \"restricted"),
                "{}",
                e.message
            );
            eprintln!("refused as on a hardened cluster: {}", e.message);
        }
        other => panic!("a privileged Pod was not refused in {NS}: {other:?}"),
    }
}

/// `config/default` itself, or when the images come from elsewhere
/// (`$RUSTQUEUE_E2E_IMAGE_REGISTRY`, `$RUSTQUEUE_E2E_IMAGE_TAG`) an overlay over it whose
/// kustomize `images:` entry renames `rustqueue`, as a user points it at their registry.
fn install_dir(c: &Cluster) -> PathBuf {
    let default = repo_root().join("config/default");
    let Some((name, tag)) = DEV
        .rsplit_once(':')
        .filter(|_| DEV.as_str() != "rustqueue:dev")
    else {
        return default;
    };
    let overlay = c.scratch.path().join("install");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n  - {}\nimages:\n  - name: rustqueue\n    newName: {name}\n    \
             newTag: {tag}\n",
            relative_to(&overlay, &default)
        ),
    )
    .unwrap();
    overlay
}

/// The sample, adapted to the cluster through a kustomize overlay the way a user adapts it to
/// theirs, is applied and `kubectl wait --for=condition=Ready` returns with 3 Ready brokers.
/// The overlay names the cluster's StorageClass and the image under test and lifts the disk
/// watermarks: a testbed volume is a directory on the shared host disk (no quota), so the
/// brokers' disk guard would measure other work's files there, not the claim.
pub async fn the_sample_becomes_ready_for_kubectl_wait(c: &Cluster) {
    let overlay = c.scratch.path().join("sample");
    std::fs::create_dir_all(&overlay).unwrap();
    let ops = serde_json::json!([
        {"op": "replace", "path": "/spec/storageClassName", "value": c.storage_class},
        {"op": "replace", "path": "/spec/image", "value": *DEV},
        {"op": "add", "path": "/spec/diskHighWatermarkPercent", "value": 100},
        {"op": "add", "path": "/spec/diskLowWatermarkPercent", "value": 99},
    ]);
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n  - {}\npatches:\n  - target: {{kind: RustQueue, name: queue}}\n    \
             patch: '{ops}'\n",
            relative_to(&overlay, &repo_root().join("config/samples"))
        ),
    )
    .unwrap();
    kubectl_ok(
        c.kubeconfig(),
        &["apply", "-n", NS, "-k", overlay.to_str().unwrap()],
    );
    let waited = Instant::now();
    let wait = kubectl(
        c.kubeconfig(),
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
        c.dump_broker_logs().await;
    }
    assert!(
        wait.success,
        "kubectl wait: {}{}\nlast status: {:?}",
        wait.stdout,
        wait.stderr,
        c.rq().await
    );
    eprintln!("kubectl wait: {}", wait.stdout.trim());
    figure(
        "sample applied -> kubectl wait --for=condition=Ready returns",
        waited.elapsed().as_secs_f64(),
        "s",
    );
    c.ready(3).await;
    for i in 0..3 {
        assert!(
            c.ready_pod_uid(&format!("queue-{i}")).await.is_some(),
            "queue-{i} is not Ready although the RustQueue is"
        );
    }
}

/// `kubectl get rustqueue` shows NAME PHASE DESIRED READY AGE.
pub async fn the_printer_columns_show_phase_desired_and_ready(c: &Cluster) {
    let table = kubectl_ok(c.kubeconfig(), &["get", "rustqueue", "-n", NS]);
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
        "expected `queue Ready 3 3`:\n{table}"
    );
    // `kubectl get rustqueue <name>` names the one object (a category called `rustqueue` would
    // shadow the kind), and the `rustqueue-all` category lists every kind of ours.
    let one = kubectl_ok(
        c.kubeconfig(),
        &["get", "rustqueue", "queue", "-n", NS, "-o", "name"],
    );
    assert_eq!(one.trim(), "rustqueue.rustqueue.io/queue");
    let all = kubectl_ok(
        c.kubeconfig(),
        &["get", "rustqueue-all", "-n", NS, "-o", "name"],
    );
    assert!(all.contains("rustqueue.rustqueue.io/queue"), "{all}");
}

/// Argo CD's health check of docs/argocd.md says Healthy on the live Ready object.
pub async fn argocd_health_reads_the_ready_cluster_as_healthy(c: &Cluster) {
    let live: serde_json::Value = serde_json::from_str(&kubectl_ok(
        c.kubeconfig(),
        &["get", "rustqueue", RQ, "-n", NS, "-o", "json"],
    ))
    .unwrap();
    let (status, message) = argocd_health(&live);
    assert_eq!(status, "Healthy", "{message}\n{live:#}");
}

/// Messages published over a broker's HTTP are read back by the official pynsq `Reader`.
pub async fn messages_published_over_http_reach_a_pynsq_reader(c: &Cluster) {
    let ip0 = c.pod_ip("queue-0").await;
    for i in 0..5 {
        let code = http_post(
            &format!("http://{ip0}:4151/pub?topic=e2e"),
            None,
            &format!("m{i}"),
        )
        .await;
        assert_eq!(code, 200, "HTTP publish of m{i} to queue-0");
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
}

/// A deleted broker Pod comes back on the same PVC and its backlog is consumed from it.
pub async fn a_deleted_broker_returns_on_its_pvc_with_its_backlog(c: &Cluster) {
    let token = c.admin_token().await;
    let ip1 = c.pod_ip("queue-1").await;
    assert_eq!(
        http_post(
            &format!("http://{ip1}:4151/channel/create?topic=backlog&channel=c"),
            Some(&token),
            ""
        )
        .await,
        200,
        "creating channel backlog/c on queue-1"
    );
    for i in 0..3 {
        let code = http_post(
            &format!("http://{ip1}:4151/pub?topic=backlog"),
            None,
            &format!("b{i}"),
        )
        .await;
        assert_eq!(code, 200, "publishing b{i} to queue-1");
    }
    let pvc_uid = c.pvcs.get("data-queue-1").await.unwrap().metadata.uid;
    let old_uid = c.ready_pod_uid("queue-1").await.expect("queue-1 Ready");
    kubectl_ok(c.kubeconfig(), &["delete", "pod", "-n", NS, "queue-1"]);
    eventually("queue-1 recreated and Ready", LONG, || async {
        match c.ready_pod_uid("queue-1").await {
            Some(u) if u != old_uid => Poll::Done(()),
            other => Poll::Saw(format!("Ready uid {other:?} (old {old_uid})")),
        }
    })
    .await;
    assert_eq!(
        c.pvcs.get("data-queue-1").await.unwrap().metadata.uid,
        pvc_uid,
        "queue-1 came back on another PVC"
    );
    c.ready(3).await;
    let ip1 = c.pod_ip("queue-1").await;
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
}

/// The Lease holder is killed; the standby holds the Lease within lease + renew. Returns the
/// new leader's Pod name.
pub async fn the_standby_takes_the_lease_when_the_leader_dies(c: &Cluster) -> String {
    let (_, new_holder, took) = c.replace_leader(Some(0)).await;
    figure(
        "leader Pod killed (grace 0) -> the standby holds the Lease",
        took.as_secs_f64(),
        "s",
    );
    assert!(
        took <= Duration::from_secs(35),
        "handover took {took:?} (lease 20 s + renew 5 s)"
    );
    new_holder
}

/// A leader stopped the ordinary way (`kubectl delete pod`: SIGTERM) gives the Lease up on its
/// way out, so the standby leads within one of its 5 s attempts instead of waiting out the
/// 20 s lease.
pub async fn a_terminated_leader_hands_the_lease_over_at_once(c: &Cluster) {
    let (_, _, took) = c.replace_leader(None).await;
    figure(
        "leader Pod deleted (SIGTERM) -> the standby holds the Lease",
        took.as_secs_f64(),
        "s",
    );
    assert!(
        took <= Duration::from_secs(10),
        "handover after SIGTERM took {took:?}: the Lease was not released (a 20 s lease ran out)"
    );
}

/// After a failover the new leader reconciles a spec change (Ready at the new generation,
/// Argo CD Healthy) and says it leads on `:8080/metrics`.
pub async fn the_new_leader_reconciles_and_reports_leadership(c: &Cluster, leader: &str) {
    c.patch_spec_ok(r#"{"maxTopics":5000}"#);
    let rq = c.ready(3).await;
    assert_eq!(rq.0["spec"]["maxTopics"], 5000);
    let (health, message) = argocd_health(&rq.0);
    assert_eq!(health, "Healthy", "{message}");
    let leader_ip = c.pod_ip(leader).await;
    let metrics = rustqueue_api::http_client::get(format!("http://{leader_ip}:8080/metrics"))
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
}

/// Phase transitions were recorded as Events on the RustQueue.
pub async fn phase_transitions_are_recorded_as_events(c: &Cluster) {
    let events = kubectl_ok(
        c.kubeconfig(),
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
}

/// The API server refuses `minBrokers > maxBrokers` with the CEL rule's message.
pub async fn the_api_server_refuses_min_brokers_above_max(c: &Cluster) {
    let refused = c.patch_spec(r#"{"minBrokers":5}"#);
    assert!(!refused.success, "minBrokers 5 > maxBrokers 3 was accepted");
    assert!(
        refused
            .stderr
            .contains("minBrokers must be less than or equal to maxBrokers"),
        "{}",
        refused.stderr
    );
}

/// Runs the Argo CD health check from docs/argocd.md on `obj` the way Argo CD does, in
/// gopher-lua (config/argocd/health, built by `scripts/deps.sh argocd-health`): (status, message).
pub fn argocd_health(obj: &serde_json::Value) -> (String, String) {
    use std::io::Write;
    let bin = std::env::var_os("RUSTQUEUE_ARGOCD_HEALTH").map_or_else(
        || {
            let cache = std::env::var_os("RUSTQUEUE_CACHE").map_or_else(
                || {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap())
                        .join(".cache/rustqueue")
                },
                std::path::PathBuf::from,
            );
            cache.join("argocd-health")
        },
        std::path::PathBuf::from,
    );
    let mut child = std::process::Command::new(&bin)
        .arg("-doc")
        .arg(repo_root().join("docs/argocd.md"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `scripts/deps.sh argocd-health`)",
                bin.display()
            )
        });
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(obj.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "Argo CD health check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        hs["status"].as_str().unwrap_or_default().to_string(),
        hs["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// `target` as a path relative to directory `from` (kustomize refuses absolute bases).
fn relative_to(from: &std::path::Path, target: &std::path::Path) -> String {
    let from = from.canonicalize().unwrap();
    let target = target.canonicalize().unwrap();
    let up = from.components().count() - 1;
    let rest = target.strip_prefix("/").unwrap();
    format!("{}{}", "../".repeat(up), rest.display())
}
