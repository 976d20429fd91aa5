//! The testbed's acceptance scenario: a 3-replica StatefulSet with a volumeClaimTemplate
//! running the tiny server, through the real scheduler, PV binder, endpointslice controller and
//! the process kubelet; data survives a Pod replacement, a PVC grows, and teardown leaves no
//! process or mount behind.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rustqueue_testbed::{STORAGE_CLASS, testserver, wait_for};
use serde_json::json;
use support::{http, is_ready, pod_ip, wait_pod};

const NS: &str = "selftest";
const LONG: Duration = Duration::from_secs(120);

fn statefulset() -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "tiny"},
        "spec": {
            "serviceName": "tiny",
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "tiny"}},
            "template": {
                "metadata": {"labels": {"app": "tiny"}},
                "spec": {
                    "nodeSelector": {"rustqueue.io/eligible": "true"},
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "tiny",
                        "image": testserver::TINY_IMAGE,
                        "args": ["--data-dir", "/var/lib/tiny"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "ports": [{"name": "http", "containerPort": testserver::TINY_PORT}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                        "livenessProbe": {"tcpSocket": {"port": testserver::TINY_PORT}, "periodSeconds": 2},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/tiny"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))
    .unwrap()
}

fn service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "tiny"},
        "spec": {"clusterIP": "None", "selector": {"app": "tiny"},
                 "ports": [{"name": "http", "port": testserver::TINY_PORT}]},
    }))
    .unwrap()
}

async fn ready_ips(pods: &Api<Pod>) -> Vec<String> {
    let list = pods
        .list(&ListParams::default().labels("app=tiny"))
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|p| is_ready(p))
        .filter_map(pod_ip)
        .collect()
}

async fn sliced_ready_ips(client: &kube::Client) -> BTreeSet<String> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=tiny"))
        .await
        .unwrap();
    list.items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect()
}

#[test]
fn statefulset_pods_get_ips_endpoints_and_keep_their_volume_across_replacement_and_growth() {
    support::run(scenario());
}

#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
async fn scenario() {
    let started = std::time::Instant::now();
    let bed = support::start().await;
    eprintln!("testbed started in {:.1}s", started.elapsed().as_secs_f64());
    let client = bed.client();
    bed.create_namespace(NS).await.unwrap();
    let pp = PostParams::default();
    Api::<Service>::namespaced(client.clone(), NS)
        .create(&pp, &service())
        .await
        .unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    sts.create(&pp, &statefulset()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // Three Ready Pods with distinct IPs, all listed as ready in the EndpointSlices.
    wait_for("3 ready tiny pods", LONG, || {
        let pods = pods.clone();
        async move { Ok(ready_ips(&pods).await.len() == 3) }
    })
    .await
    .unwrap();
    let ips: BTreeSet<String> = ready_ips(&pods).await.into_iter().collect();
    assert_eq!(ips.len(), 3, "distinct pod IPs: {ips:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("10.244.")), "{ips:?}");
    wait_for("EndpointSlices list the 3 ready pod IPs", LONG, || {
        let client = client.clone();
        let ips = ips.clone();
        async move { Ok(sliced_ready_ips(&client).await == ips) }
    })
    .await
    .unwrap();

    // Write through pod tiny-1.
    let p1 = pods.get("tiny-1").await.unwrap();
    let addr1 = format!("{}:{}", pod_ip(&p1).unwrap(), testserver::TINY_PORT);
    let (code, who) = http("GET", &addr1, "/whoami", b"").await.unwrap();
    assert_eq!((code, who.as_str()), (200, "tiny-1"));
    let (code, _) = http("PUT", &addr1, "/data/greeting", b"kept across restarts")
        .await
        .unwrap();
    assert_eq!(code, 204);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let volume = pvcs
        .get("data-tiny-1")
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    assert_eq!(
        pvcs.get("data-tiny-1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .storage_class_name
            .as_deref(),
        Some(STORAGE_CLASS),
        "the testbed's class is the default"
    );
    let first_pid = p1
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap();

    // Replace the Pod: it comes back (new UID) on the same PVC, with the data.
    let old_uid = p1.metadata.uid.clone().unwrap();
    pods.delete("tiny-1", &DeleteParams::default())
        .await
        .unwrap();
    let p1b = wait_pod(&pods, "tiny-1", "replaced and Ready", LONG, |p| {
        p.metadata.uid.as_deref() != Some(old_uid.as_str()) && is_ready(p)
    })
    .await;
    let addr1b = format!("{}:{}", pod_ip(&p1b).unwrap(), testserver::TINY_PORT);
    let (code, body) = http("GET", &addr1b, "/data/greeting", b"").await.unwrap();
    assert_eq!((code, body.as_str()), (200, "kept across restarts"));
    assert_eq!(
        pvcs.get("data-tiny-1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .volume_name
            .unwrap(),
        volume
    );
    let previous = bed.previous_logs(NS, "tiny-1", "tiny").unwrap();
    assert!(
        previous.contains("tiny: shutting down"),
        "SIGTERM reached the old pod: {previous}"
    );
    assert!(
        bed.logs(NS, "tiny-1", "tiny")
            .unwrap()
            .contains("tiny: listening")
    );
    let old_pid: u32 = first_pid.trim_start_matches("process://").parse().unwrap();
    assert!(
        !support::process_running(old_pid),
        "the replaced pod's process is gone"
    );

    // Grow the PVC: the provisioner completes the expansion on the PV and the claim.
    pvcs.patch(
        "data-tiny-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
    )
    .await
    .unwrap();
    wait_for("PVC capacity 2Gi", LONG, || {
        let pvcs = pvcs.clone();
        async move {
            let pvc = pvcs.get("data-tiny-1").await?;
            let cap = pvc
                .status
                .and_then(|s| s.capacity)
                .and_then(|c| c.get("storage").cloned());
            Ok(cap.map(|q| q.0).as_deref() == Some("2Gi"))
        }
    })
    .await
    .unwrap();
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await
        .unwrap();
    assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "2Gi");

    // Collect every container process, then delete everything.
    let mut pids = vec![old_pid];
    for p in pods.list(&ListParams::default()).await.unwrap() {
        for cs in p.status.unwrap().container_statuses.unwrap_or_default() {
            if let Some(id) = cs.container_id {
                pids.push(id.trim_start_matches("process://").parse().unwrap());
            }
        }
    }
    sts.delete("tiny", &DeleteParams::default()).await.unwrap();
    wait_for("all tiny pods gone", LONG, || {
        let pods = pods.clone();
        async move { Ok(pods.list(&ListParams::default()).await?.items.is_empty()) }
    })
    .await
    .unwrap();
    for name in ["data-tiny-0", "data-tiny-1", "data-tiny-2"] {
        pvcs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    wait_for("PVs reclaimed", LONG, || {
        let pvs = pvs.clone();
        async move { Ok(pvs.list(&ListParams::default()).await?.items.is_empty()) }
    })
    .await
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .delete(NS, &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        pids.iter().all(|p| !support::process_running(*p)),
        "no container process left: {pids:?}"
    );

    let control_plane = bed.process_ids();
    assert!(
        control_plane.len() >= 4,
        "etcd, apiserver, controller-manager, scheduler: {control_plane:?}"
    );
    let dir = bed.dir().to_path_buf();
    let dir_str = dir.to_string_lossy().into_owned();
    drop(bed);
    assert!(!dir.exists(), "work dir removed");
    assert!(
        control_plane.iter().all(|p| !support::process_running(*p)),
        "no control-plane process left: {control_plane:?}"
    );
    assert!(
        support::host_mounts_mentioning(&dir_str).is_empty(),
        "no mount left behind"
    );
    eprintln!(
        "scenario finished in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
