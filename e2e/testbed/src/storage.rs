//! Dynamic provisioning on the testbed: the default StorageClass [`STORAGE_CLASS`]
//! (`WaitForFirstConsumer`, `allowVolumeExpansion: true`, reclaim `Delete`) and a provisioner
//! that plays the external-provisioner and external-resizer roles for it:
//!
//! - a claim with a selected node gets a `hostPath` PV (a directory under the testbed's work
//!   dir) pre-bound to it, with node affinity to that node; the real PV controller binds them;
//! - a released PV of the class is deleted together with its directory;
//! - a bound claim whose request grew gets its PV capacity raised, then its status capacity
//!   (the size is bookkeeping: a host directory has no quota).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::{Error, STORAGE_CLASS};

/// The provisioner name in the StorageClass.
pub const PROVISIONER: &str = "rustqueue.io/testbed-hostpath";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Parses a Kubernetes quantity into a whole number (bytes for storage, cores for CPU, rounded
/// up). Returns `None` for malformed input.
pub fn parse_quantity(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        _ => return None,
    };
    Some((num * mult).ceil() as u64)
}

/// Creates the default StorageClass (idempotent).
pub(crate) async fn install_storage_class(client: &Client) -> Result<(), Error> {
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true,
    }))
    .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    match Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The provisioner/resizer loop (it polls: the testbed's object counts are tiny).
pub struct Provisioner {
    client: Client,
    root: PathBuf,
}

fn storage_of(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

impl Provisioner {
    /// A provisioner keeping volumes under `root`.
    pub fn new(client: Client, root: PathBuf) -> Self {
        Provisioner { client, root }
    }

    pub(crate) fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if let Err(e) = self.pass().await {
                    tracing::debug!(%e, "provisioner pass failed; retrying");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    }

    async fn pass(&self) -> Result<(), Error> {
        let pvcs: Api<PersistentVolumeClaim> = Api::all(self.client.clone());
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        for pvc in pvcs.list(&ListParams::default()).await? {
            let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
            if class.as_deref() != Some(STORAGE_CLASS) || pvc.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let bound = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
            match bound {
                None => self.provision(&pvs, &pvc).await?,
                Some(pv) => self.expand(&pvcs, &pvs, &pvc, &pv).await?,
            }
        }
        for pv in pvs.list(&ListParams::default()).await? {
            let ours = pv
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                == Some(STORAGE_CLASS);
            let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
            let delete = pv
                .spec
                .as_ref()
                .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
                == Some("Delete");
            if ours && released && delete && pv.metadata.deletion_timestamp.is_none() {
                let name = pv.metadata.name.clone().unwrap_or_default();
                if let Some(path) = pv.spec.and_then(|s| s.host_path).map(|h| h.path) {
                    let _ = std::fs::remove_dir_all(path);
                }
                pvs.delete(&name, &DeleteParams::default()).await?;
            }
        }
        Ok(())
    }

    async fn provision(
        &self,
        pvs: &Api<PersistentVolume>,
        pvc: &PersistentVolumeClaim,
    ) -> Result<(), Error> {
        let Some(node) = pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
        else {
            return Ok(()); // WaitForFirstConsumer: the scheduler has not picked a node yet
        };
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let name = format!("pvc-{uid}");
        if pvs.get_opt(&name).await?.is_some() {
            return Ok(());
        }
        let dir = self.root.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        // World-writable like rancher's local-path provisioner (kind's `standard` class), so a
        // non-root Pod without an fsGroup can write its claim there too.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| Error::io("chmod", &dir, e))?;
        let spec = pvc.spec.clone().unwrap_or_default();
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": storage_of(pvc).unwrap_or_else(|| "1Gi".into())},
                "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "volumeMode": spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": STORAGE_CLASS,
                "hostPath": {"path": dir.to_string_lossy(), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": pvc.metadata.namespace, "name": pvc.metadata.name, "uid": uid,
                },
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                ]}]}},
            },
        }))
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        match pvs.create(&PostParams::default(), &pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn expand(
        &self,
        pvcs: &Api<PersistentVolumeClaim>,
        pvs: &Api<PersistentVolume>,
        pvc: &PersistentVolumeClaim,
        pv_name: &str,
    ) -> Result<(), Error> {
        let Some(want) = storage_of(pvc) else {
            return Ok(());
        };
        let have = pvc
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.clone());
        let (Some(want_b), Some(have_b)) = (
            parse_quantity(&want),
            have.as_deref().and_then(parse_quantity),
        ) else {
            return Ok(());
        };
        if want_b <= have_b {
            return Ok(());
        }
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(pvcs.clone().into_client(), &ns);
        let t = k8s_openapi::jiff::Timestamp::now().to_string();
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [{"type": "Resizing", "status": "True", "lastTransitionTime": t}],
                "allocatedResources": {"storage": want},
                "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
            }})),
        )
        .await?;
        pvs.patch(
            pv_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"capacity": {"storage": want}}})),
        )
        .await?;
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"storage": want},
                "conditions": null,
                "allocatedResourceStatuses": null,
            }})),
        )
        .await?;
        tracing::info!(pvc = %name, %want, "volume expanded");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_parse_binary_decimal_and_milli_suffixes() {
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("2G"), Some(2_000_000_000));
        assert_eq!(parse_quantity("512Mi"), Some(512 << 20));
        assert_eq!(parse_quantity("1.5Ki"), Some(1536));
        assert_eq!(parse_quantity("500m"), Some(1));
        assert_eq!(parse_quantity("10"), Some(10));
        assert_eq!(parse_quantity("1Xi"), None);
    }
}
