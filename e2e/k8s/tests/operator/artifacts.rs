//! The artifacts under test are the user's: every broker and operator Pod runs the image
//! `make images` built (an `imageID` by digest, not a host directory) with the
//! securityContext the operator and `config/manager` render, and on the testbed the broker
//! processes wrote their claims as the images' nonroot user.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::Api;
use kube::api::ListParams;

use crate::cluster::{Cluster, DEV};
use crate::rollout::brokers;

/// The images' `nonroot` user and group.
const NONROOT: i64 = 65532;

/// The running container's image digest and the securityContext it was started with.
fn check_pod(p: &Pod) {
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let spec = p.spec.as_ref().expect("Pod spec");
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some(DEV.as_str()), "{name}: image");
    let status = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|s| s.first())
        .unwrap_or_else(|| panic!("{name}: no container status"));
    assert!(
        status.image_id.contains("rustqueue@sha256:"),
        "{name} does not run an image pulled by digest: imageID {:?}",
        status.image_id
    );
    let psc = spec.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    assert_eq!(psc.run_as_non_root, Some(true), "{name}: runAsNonRoot");
    assert_eq!(
        csc.run_as_user.or(psc.run_as_user),
        Some(NONROOT),
        "{name}: runAsUser"
    );
    assert_eq!(
        csc.run_as_group.or(psc.run_as_group),
        Some(NONROOT),
        "{name}: runAsGroup"
    );
    assert_eq!(
        csc.read_only_root_filesystem,
        Some(true),
        "{name}: readOnlyRootFilesystem"
    );
    assert_eq!(
        csc.allow_privilege_escalation,
        Some(false),
        "{name}: allowPrivilegeEscalation"
    );
    let dropped = csc.capabilities.and_then(|c| c.drop).unwrap_or_default();
    assert!(
        dropped.iter().any(|d| d == "ALL"),
        "{name}: capabilities not dropped: {dropped:?}"
    );
}

/// Every file under `dir` is owned by [`NONROOT`] (what the broker wrote on its claim).
fn owned_by_nonroot(dir: &Path) -> Result<usize, String> {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let meta = e.metadata().map_err(|e| e.to_string())?;
            if i64::from(meta.uid()) != NONROOT {
                return Err(format!(
                    "{} is owned by uid {}",
                    e.path().display(),
                    meta.uid()
                ));
            }
            n += 1;
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(n)
}

/// The brokers and both operator replicas run `rustqueue:dev` from the registry as 65532 with
/// a read-only root and no capabilities; on the testbed, each broker's claim holds only files
/// the broker wrote as 65532.
pub async fn brokers_and_operator_run_the_built_image_as_nonroot(c: &Cluster) {
    c.ready(3).await;
    for b in brokers() {
        check_pod(&c.pods.get(&b).await.expect("broker Pod"));
    }
    let operators = c
        .pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=rustqueue-operator"))
        .await
        .expect("operator Pods");
    assert_eq!(operators.items.len(), 2, "two operator replicas");
    operators.items.iter().for_each(check_pod);
    if !c.is_testbed() {
        return;
    }
    let pvs: Api<PersistentVolume> = Api::all(c.client.clone());
    for b in brokers() {
        let claim_name = format!("data-{b}");
        let claim = c.pvcs.get(&claim_name).await.expect("broker claim");
        let volume = claim
            .spec
            .and_then(|s| s.volume_name)
            .unwrap_or_else(|| panic!("{claim_name} is not bound"));
        let path = pvs
            .get(&volume)
            .await
            .expect("PersistentVolume")
            .spec
            .and_then(|s| s.host_path)
            .map(|h| h.path)
            .expect("a testbed hostPath volume");
        let files =
            owned_by_nonroot(Path::new(&path)).unwrap_or_else(|e| panic!("{claim_name}: {e}"));
        assert!(
            files > 0,
            "{claim_name}: the broker wrote nothing on its claim"
        );
    }
}
