//! Issue 7 on the testbed: the operator installed from `config/`, two replicas, the sample
//! RustQueue on three eligible Nodes; publish/consume, a broker Pod back on its PVC with its
//! backlog, leader failover, and a CEL refusal from the real API server.
//!
//! Needs `rustqueued` and `rustqueue-operator` in `$RUSTQUEUE_E2E_BIN_DIR` (`make e2e` builds
//! them) and the testbed's control plane (`make deps-k8s`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use rustqueue_api::crd::{ConditionStatus, RustQueue};
use rustqueue_e2e::{eventually, install, nsq, repo_root};
use rustqueue_testbed::{Image, STORAGE_CLASS, Testbed, TestbedOptions};

const NS: &str = "rustqueue-system";
const LONG: Duration = Duration::from_secs(180);

fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("RUSTQUEUE_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/debug"));
    for b in ["rustqueued", "rustqueue-operator"] {
        assert!(dir.join(b).exists(), "{} missing: run `make e2e`", dir.join(b).display());
    }
    dir
}

async fn pod_ip(pods: &Api<Pod>, name: &str) -> String {
    pods.get(name).await.unwrap().status.unwrap().pod_ip.unwrap()
}

async fn ready_pod_uid(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get_opt(name).await.ok()??;
    let ready = p.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    (ready && p.metadata.deletion_timestamp.is_none()).then(|| p.metadata.uid.clone().unwrap_or_default())
}

async fn rq_ready(rqs: &Api<RustQueue>) -> Option<RustQueue> {
    let rq = rqs.get("queue").await.ok()?;
    let s = rq.status.as_ref()?;
    let ready = s.condition("Ready")?.status == ConditionStatus::True;
    (ready && s.observed_generation == rq.metadata.generation && s.ready_brokers == Some(3)).then_some(rq)
}

async fn admin_token(client: &kube::Client) -> String {
    let s: Secret = Api::namespaced(client.clone(), NS).get("queue-auth").await.unwrap();
    String::from_utf8(s.data.unwrap()["admin-token"].0.clone()).unwrap()
}

async fn http_post(url: &str, token: Option<&str>, body: &str) -> u16 {
    let mut req = reqwest::Client::new().post(url).body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_runs_the_sample_cluster_and_survives_pod_and_leader_loss() {
    let bed = Testbed::start(
        TestbedOptions::default()
            .nodes(3)
            .node_label("rustqueue.io/eligible", "true")
            .image("rustqueue:dev", Image::dir(bin_dir())),
    )
    .await
    .expect("testbed starts");
    let client = bed.client();
    bed.create_namespace(NS).await.unwrap();

    // Install the CRD, RBAC and the two-replica manager from config/.
    let root = repo_root().join("config");
    install::apply(&client, NS, &install::objects(&root.join("crd")).unwrap()).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually("CRD Established", LONG, || async {
        let c = crds.get("rustqueues.rustqueue.io").await.ok()?;
        c.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
    let mut operator = install::objects(&root.join("rbac")).unwrap();
    operator.extend(install::objects(&root.join("manager")).unwrap());
    install::apply(&client, NS, &operator).await.unwrap();

    // The sample, on the testbed's StorageClass.
    let mut sample = install::objects(&root.join("samples")).unwrap();
    sample[0]["spec"]["storageClassName"] = STORAGE_CLASS.into();
    install::apply(&client, NS, &sample).await.unwrap();

    let rqs: Api<RustQueue> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    rq_ready_or_dump(&bed, &rqs).await;
    for i in 0..3 {
        assert!(ready_pod_uid(&pods, &format!("queue-{i}")).await.is_some(), "queue-{i} Ready");
    }

    // Publish over a broker Pod's HTTP and consume over its NSQ TCP.
    let ip0 = pod_ip(&pods, "queue-0").await;
    for i in 0..5 {
        let code = http_post(&format!("http://{ip0}:4151/pub?topic=e2e"), None, &format!("m{i}")).await;
        assert_eq!(code, 200, "publish m{i}");
    }
    let got = nsq::consume(&format!("{ip0}:4150"), "e2e", "c", 5, Duration::from_secs(30)).await.unwrap();
    let mut bodies: Vec<String> = got.iter().map(|b| String::from_utf8_lossy(b).to_string()).collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"]);

    // A backlog on queue-1 survives deleting the Pod: it comes back on the same PVC.
    let token = admin_token(&client).await;
    let ip1 = pod_ip(&pods, "queue-1").await;
    assert_eq!(http_post(&format!("http://{ip1}:4151/channel/create?topic=backlog&channel=c"), Some(&token), "").await, 200);
    for i in 0..3 {
        assert_eq!(http_post(&format!("http://{ip1}:4151/pub?topic=backlog"), None, &format!("b{i}")).await, 200);
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pvc_uid = pvcs.get("data-queue-1").await.unwrap().metadata.uid;
    let old_uid = ready_pod_uid(&pods, "queue-1").await.unwrap();
    pods.delete("queue-1", &DeleteParams::default()).await.unwrap();
    eventually("queue-1 recreated and Ready", LONG, || async {
        ready_pod_uid(&pods, "queue-1").await.filter(|u| *u != old_uid)
    })
    .await;
    assert_eq!(pvcs.get("data-queue-1").await.unwrap().metadata.uid, pvc_uid, "same PVC");
    rq_ready_or_dump(&bed, &rqs).await;
    let ip1 = pod_ip(&pods, "queue-1").await;
    let got = nsq::consume(&format!("{ip1}:4150"), "backlog", "c", 3, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got.len(), 3, "backlog consumed after the restart");

    // Kill the leader: the standby takes over within the lease and status keeps updating.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let holder = leases.get("rustqueue-operator-leader").await.unwrap().spec.unwrap().holder_identity.unwrap();
    pods.delete(&holder, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await.unwrap();
    let killed = Instant::now();
    let new_holder = eventually("a new Lease holder", Duration::from_secs(60), || async {
        let h = leases.get("rustqueue-operator-leader").await.ok()?.spec?.holder_identity?;
        (h != holder).then_some(h)
    })
    .await;
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(35), "handover took {took:?} (lease 20 s + renew 5 s)");
    eprintln!("leader {holder} -> {new_holder} in {took:?}");
    rqs.patch("queue", &PatchParams::apply("rustqueue-e2e"), &Patch::Merge(serde_json::json!({"spec": {"maxTopics": 5000}})))
        .await
        .unwrap();
    rq_ready_or_dump(&bed, &rqs).await;

    // An invalid spec is refused by the API server with the CEL message.
    let err = rqs
        .patch("queue", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"minBrokers": 5}})))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("minBrokers must be less than or equal to maxBrokers"), "{text}");
}

async fn rq_ready_or_dump(bed: &Testbed, rqs: &Api<RustQueue>) -> RustQueue {
    let start = Instant::now();
    loop {
        if let Some(rq) = rq_ready(rqs).await {
            return rq;
        }
        if start.elapsed() > LONG {
            let rq = rqs.get("queue").await.ok();
            let status = rq.and_then(|r| r.status).map(|s| serde_json::to_string_pretty(&s).unwrap());
            for p in ["queue-0", "queue-1", "queue-2"] {
                eprintln!("--- {p}\n{}", bed.logs(NS, p, "broker").unwrap_or_default());
            }
            panic!("RustQueue not Ready: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
