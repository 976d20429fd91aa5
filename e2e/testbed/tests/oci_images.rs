//! Pods from OCI images: pulled from the testbed's local registry by reference and digest,
//! run in their own root filesystem with the Pod's securityContext (uid 65532, fsGroup,
//! read-only root, no capabilities, no_new_privs), their output readable with `kubectl logs`;
//! unknown images and `imagePullPolicy: Never` fail the way a kubelet's pulls do.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::{TINY_OCI, wait_pod};

const NS: &str = "images";
const LONG: Duration = Duration::from_secs(90);
const FS_GROUP: u32 = 2000;

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

/// `Key:\tvalue` from /proc/<pid>/status.
fn proc_status(pid: u32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} not in /proc/{pid}/status"))
        .trim()
        .to_string()
}

#[test]
fn pods_run_from_registry_images_with_their_security_context() {
    support::run(scenario());
}

#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
async fn scenario() {
    let bed = support::start().await;
    let digest = support::push_tiny_oci_image(&bed).await;
    bed.create_namespace(NS).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(bed.client(), NS);
    let pp = PostParams::default();
    let restricted: Pod = serde_json::from_value(json!({
        "metadata": {"name": "restricted"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "fsGroup": FS_GROUP, "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "tiny", "image": TINY_OCI, "args": ["serve", "--data-dir", "/data"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
                "securityContext": {
                    "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    }))
    .unwrap();
    pods.create(&pp, &restricted).await.unwrap();
    for (name, image, policy) in [
        ("unknown", "testbed/no-such-image:1", "IfNotPresent"),
        ("never", "testbed/never-pulled:1", "Never"),
    ] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": policy}]},
        }))
        .unwrap();
        pods.create(&pp, &p).await.unwrap();
    }

    // Pulled by digest from the local registry, started as 65532 and Ready.
    let p = wait_pod(&pods, "restricted", "Ready", LONG, support::is_ready).await;
    let status = p.status.clone().unwrap();
    let cs = &status.container_statuses.unwrap()[0];
    assert_eq!(
        cs.image_id,
        format!("docker.io/testbed/tiny-oci@{digest}"),
        "the image ID names the digest that was pulled"
    );
    let pid: u32 = cs
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("process://")
        .parse()
        .unwrap();
    assert_eq!(
        proc_status(pid, "Uid").split_whitespace().next(),
        Some("65532")
    );
    assert_eq!(
        proc_status(pid, "Gid").split_whitespace().next(),
        Some("65532")
    );
    let groups = proc_status(pid, "Groups");
    assert!(
        groups.split_whitespace().any(|g| g == FS_GROUP.to_string()),
        "fsGroup is a supplementary group: {groups}"
    );
    assert_eq!(
        proc_status(pid, "NoNewPrivs"),
        "1",
        "allowPrivilegeEscalation: false"
    );
    assert_eq!(
        proc_status(pid, "CapEff"),
        "0000000000000000",
        "no capabilities"
    );
    assert_eq!(
        proc_status(pid, "CapPrm"),
        "0000000000000000",
        "no capabilities"
    );
    // Its root is the image, not the host's: no shell in there.
    let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
    assert!(root.join("usr/local/bin/rustqueue-testbed").exists());
    assert!(!root.join("bin/sh").exists(), "the host's root leaked in");

    // Writes land in the volume (group fsGroup), never in the read-only root.
    let ip = support::pod_ip(&p).unwrap();
    let (code, _) = support::http("PUT", &format!("{ip}:8080"), "/data/k1", b"v1")
        .await
        .unwrap();
    assert_eq!(code, 204, "the uid-65532 process writes its volume");
    let written = std::fs::metadata(root.join("data/k1")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (written.uid(), written.gid()),
        (65532, FS_GROUP),
        "new files belong to the user and, through the setgid volume, to fsGroup"
    );
    let err = std::fs::write(root.join("etc/not-allowed"), b"x").unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(nix::libc::EROFS),
        "readOnlyRootFilesystem: even root cannot write the container's root ({err})"
    );

    // `kubectl logs` reaches the container's output through the API server and the kubelet API.
    let kubectl = rustqueue_testbed::kubectl_path();
    assert!(
        kubectl.exists(),
        "{} is missing: scripts/deps.sh kubectl",
        kubectl.display()
    );
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(bed.kubeconfig_path())
        .args(["logs", "-n", NS, "restricted", "-c", "tiny", "--tail=5"])
        .output()
        .await
        .unwrap();
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && logs.contains(&format!("tiny: listening on {ip}:8080")),
        "kubectl logs: {logs}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Unknown images fail to pull, then back off; Never does not pull at all.
    wait_pod(&pods, "unknown", "ErrImagePull", LONG, |p| {
        waiting_reason(p).as_deref() == Some("ErrImagePull")
    })
    .await;
    wait_pod(&pods, "unknown", "ImagePullBackOff", LONG, |p| {
        waiting_reason(p).as_deref() == Some("ImagePullBackOff")
    })
    .await;
    wait_pod(&pods, "never", "ErrImageNeverPull", LONG, |p| {
        waiting_reason(p).as_deref() == Some("ErrImageNeverPull")
    })
    .await;
}
