//! Node registration and heartbeats: each Node is created with its labels and a Ready status,
//! and every 10 s its status heartbeat and its `kube-node-lease` Lease are renewed, which is
//! what the node-lifecycle controller watches.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{Error, NODE_LABEL, NodeSpec};

pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Now as a `MicroTime` (RFC 3339 with exactly six fractional digits).
fn micro_now() -> String {
    let ts = k8s_openapi::jiff::Timestamp::now();
    format!(
        "{}.{:06}Z",
        ts.strftime("%Y-%m-%dT%H:%M:%S"),
        ts.subsec_microsecond()
    )
}

fn labels(spec: &NodeSpec) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), spec.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (NODE_LABEL.to_string(), "true".to_string()),
    ]);
    labels.extend(spec.labels.clone());
    labels
}

fn status(name: &str, kubelet_port: u16) -> serde_json::Value {
    let t = now();
    let resources =
        json!({"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": t, "lastTransitionTime": t})
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "testbed kubelet"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "testbed kubelet"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "testbed kubelet"),
            cond("Ready", "True", "KubeletReady", "testbed process kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": name, "systemUUID": name, "bootID": name,
            "kernelVersion": "testbed", "osImage": "rustqueue testbed",
            "containerRuntimeVersion": "process://testbed",
            "kubeletVersion": crate::k8s_version(), "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        },
    })
}

/// Creates (or adopts) the Node objects and posts their first status and Lease.
pub(crate) async fn register(client: &Client, nodes: &[NodeSpec], port: u16) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    for spec in nodes {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": spec.name, "labels": labels(spec)},
        }))
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        heartbeat(client, &spec.name, port).await?;
    }
    Ok(())
}

/// Renews one Node's status and Lease.
pub(crate) async fn heartbeat(client: &Client, name: &str, port: u16) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(name, port)})),
        )
        .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": micro_now(),
        },
    });
    leases
        .patch(
            name,
            &PatchParams::apply("testbed-kubelet").force(),
            &Patch::Apply(lease),
        )
        .await?;
    Ok(())
}
