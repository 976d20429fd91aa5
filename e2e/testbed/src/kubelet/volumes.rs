//! Pod volumes as host directories: emptyDir, hostPath, persistentVolumeClaim (the bound PV's
//! host path), configMap, secret, downwardAPI and projected (incl. service-account tokens from
//! the TokenRequest API). File-backed volumes are written again on every resync through the
//! kubelet's atomic `..data` swap ([`super::atomic`]), so updates to ConfigMaps and Secrets
//! reach running containers as with a real kubelet, every file of a volume at once.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Volume,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::atomic::{self, File, Payload};
use super::env;

/// Where each volume of a Pod lives on the host.
pub(crate) type Sources = BTreeMap<String, PathBuf>;

/// Why volumes are not ready yet (shown in the Pod's status; retried).
pub(crate) type NotReady = String;

fn add_file(out: &mut Payload, rel: &str, data: &[u8], mode: Option<i32>) {
    let mode = mode.unwrap_or(0o644) as u32;
    let f = File {
        data: data.to_vec(),
        mode,
    };
    out.insert(rel.to_owned(), f);
}

fn add_keys(
    out: &mut Payload,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
) -> Result<(), NotReady> {
    match items {
        Some(items) => {
            for it in items {
                let v = data
                    .get(&it.key)
                    .ok_or_else(|| format!("key {:?} not found", it.key))?;
                add_file(out, &it.path, v, it.mode.or(default_mode));
            }
        }
        None => {
            for (k, v) in data {
                add_file(out, k, v, default_mode);
            }
        }
    }
    Ok(())
}

fn config_map_data(cm: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    out.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    out
}

fn secret_data(s: Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

struct Ctx<'a> {
    client: &'a Client,
    pod: &'a Pod,
    ns: String,
    ip: &'a str,
}

impl Ctx<'_> {
    async fn config_map(
        &self,
        name: &str,
        optional: Option<bool>,
    ) -> Result<Option<ConfigMap>, NotReady> {
        let cm = Api::<ConfigMap>::namespaced(self.client.clone(), &self.ns)
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?;
        match cm {
            None if optional != Some(true) => Err(format!("configmap {name:?} not found")),
            other => Ok(other),
        }
    }

    async fn secret(&self, name: &str, optional: Option<bool>) -> Result<Option<Secret>, NotReady> {
        let s = Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?;
        match s {
            None if optional != Some(true) => Err(format!("secret {name:?} not found")),
            other => Ok(other),
        }
    }

    fn downward(
        &self,
        out: &mut Payload,
        items: &[DownwardAPIVolumeFile],
        mode: Option<i32>,
    ) -> Result<(), NotReady> {
        for it in items {
            let text = if let Some(f) = &it.field_ref {
                env::field(self.pod, self.ip, f)?
            } else if let Some(r) = &it.resource_field_ref {
                format!("{:?}", r.resource)
            } else {
                String::new()
            };
            add_file(out, &it.path, text.as_bytes(), it.mode.or(mode));
        }
        Ok(())
    }

    async fn token(
        &self,
        audience: Option<&str>,
        expiration: Option<i64>,
    ) -> Result<String, NotReady> {
        let sa = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let req: TokenRequest = serde_json::from_value(json!({
            "spec": {
                "audiences": audience.map(|a| vec![a]).unwrap_or_default(),
                "expirationSeconds": expiration.unwrap_or(3600),
                "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod",
                    "name": self.pod.metadata.name, "uid": self.pod.metadata.uid,
                },
            }
        }))
        .map_err(|e| e.to_string())?;
        let out: TokenRequest = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
            self.client.clone(),
            &self.ns,
        )
        .create_subresource("token", &sa, &PostParams::default(), &req)
        .await
        .map_err(|e| format!("token for serviceaccount {sa:?}: {e}"))?;
        Ok(out.status.and_then(|s| s.token).unwrap_or_default())
    }

    async fn volume(&self, v: &Volume, dir: &Path) -> Result<PathBuf, NotReady> {
        let mkdir = |d: &Path| {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))
        };
        if let Some(hp) = &v.host_path {
            let p = PathBuf::from(&hp.path);
            if hp.type_.as_deref() == Some("DirectoryOrCreate") {
                mkdir(&p)?;
            }
            return Ok(p);
        }
        if let Some(claim) = &v.persistent_volume_claim {
            let pvc = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &self.ns)
                .get_opt(&claim.claim_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("persistentvolumeclaim {:?} not found", claim.claim_name))?;
            let pv_name = pvc
                .spec
                .and_then(|s| s.volume_name)
                .filter(|_| pvc.status.and_then(|s| s.phase).as_deref() == Some("Bound"))
                .ok_or_else(|| {
                    format!(
                        "persistentvolumeclaim {:?} is not bound yet",
                        claim.claim_name
                    )
                })?;
            let pv = Api::<PersistentVolume>::all(self.client.clone())
                .get(&pv_name)
                .await
                .map_err(|e| e.to_string())?;
            let spec = pv.spec.unwrap_or_default();
            let path = spec
                .host_path
                .map(|h| h.path)
                .or(spec.local.map(|l| l.path))
                .ok_or_else(|| {
                    format!("persistentvolume {pv_name:?} is neither hostPath nor local")
                })?;
            mkdir(Path::new(&path))?;
            return Ok(PathBuf::from(path));
        }
        if let Some(payload) = self.files(v).await? {
            atomic::write(dir, &payload)?;
            return Ok(dir.to_path_buf());
        }
        // emptyDir and anything else: a plain directory.
        mkdir(dir)?;
        Ok(dir.to_path_buf())
    }

    /// The files of a file-backed volume (configMap, secret, downwardAPI, projected) as they
    /// should be now; `None` for other kinds.
    async fn files(&self, v: &Volume) -> Result<Option<Payload>, NotReady> {
        let mut out = Payload::new();
        if let Some(cm) = &v.config_map {
            if let Some(obj) = self.config_map(&cm.name, cm.optional).await? {
                add_keys(
                    &mut out,
                    &config_map_data(obj),
                    cm.items.as_ref(),
                    cm.default_mode,
                )?;
            }
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            if let Some(obj) = self.secret(&name, s.optional).await? {
                add_keys(
                    &mut out,
                    &secret_data(obj),
                    s.items.as_ref(),
                    s.default_mode.or(Some(0o644)),
                )?;
            }
        } else if let Some(d) = &v.downward_api {
            self.downward(
                &mut out,
                d.items.as_deref().unwrap_or_default(),
                d.default_mode,
            )?;
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode;
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    if let Some(obj) = self.config_map(&cm.name, cm.optional).await? {
                        add_keys(&mut out, &config_map_data(obj), cm.items.as_ref(), mode)?;
                    }
                } else if let Some(s) = &src.secret {
                    if let Some(obj) = self.secret(&s.name, s.optional).await? {
                        add_keys(&mut out, &secret_data(obj), s.items.as_ref(), mode)?;
                    }
                } else if let Some(d) = &src.downward_api {
                    self.downward(&mut out, d.items.as_deref().unwrap_or_default(), mode)?;
                } else if let Some(t) = &src.service_account_token {
                    let token = self
                        .token(t.audience.as_deref(), t.expiration_seconds)
                        .await?;
                    add_file(&mut out, &t.path, token.as_bytes(), mode);
                }
            }
        } else {
            return Ok(None);
        }
        Ok(Some(out))
    }
}

/// Materializes every volume of `pod` under `pod_dir/volumes`. Calling it again refreshes the
/// file-backed volumes (and fetches a fresh service-account token).
pub(crate) async fn prepare(
    client: &Client,
    pod: &Pod,
    ip: &str,
    pod_dir: &Path,
) -> Result<Sources, NotReady> {
    let ctx = Ctx {
        client,
        pod,
        ns: pod.metadata.namespace.clone().unwrap_or_default(),
        ip,
    };
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.fs_group)
        .map(|g| g as u32);
    let mut out = Sources::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let dir = pod_dir.join("volumes").join(&v.name);
        let src = ctx
            .volume(v, &dir)
            .await
            .map_err(|e| format!("volume {:?}: {e}", v.name))?;
        if v.empty_dir.is_some() && fs_group.is_none() {
            // A real kubelet creates emptyDirs world-writable: any user may use them.
            std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| format!("volume {:?}: chmod: {e}", v.name))?;
        }
        if let Some(group) = fs_group.filter(|_| v.host_path.is_none()) {
            // A file-backed volume may hold a new version after a resync: give it over every time.
            let file_backed = v.empty_dir.is_none() && v.persistent_volume_claim.is_none();
            let read_only = file_backed
                || v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.read_only == Some(true));
            super::security::apply_fs_group(&src, group, read_only, file_backed)
                .map_err(|e| format!("volume {:?}: fsGroup: {e}", v.name))?;
        }
        out.insert(v.name.clone(), src);
    }
    Ok(out)
}
