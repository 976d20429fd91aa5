//! A container's `securityContext` (merged with the Pod's) turned into what the runtime applies
//! to an OCI image's process: user, group and supplementary groups (`fsGroup`,
//! `supplementalGroups`), `runAsNonRoot`, the capability bounding set (the container
//! runtime's default set, minus `drop`, plus `add`), `allowPrivilegeEscalation: false` as
//! `no_new_privs`, `readOnlyRootFilesystem`; and `fsGroup` ownership of the Pod's volumes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::oci::{Pulled, image_user};

/// containerd's and CRI-O's default capability set for containers.
const DEFAULT_CAPS: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// Who and how a container's process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Supplementary groups (the primary group, `fsGroup`, `supplementalGroups`).
    pub(crate) groups: Vec<u32>,
    /// `allowPrivilegeEscalation: false`.
    pub(crate) no_new_privs: bool,
    /// Capability names (`NET_BIND_SERVICE`) left in the bounding set.
    pub(crate) capabilities: Vec<String>,
    pub(crate) read_only_root: bool,
}

/// The identity of container `c` of `pod` running `image`. Errors are
/// `CreateContainerConfigError` messages, as with a real kubelet.
pub(crate) fn identity(pod: &Pod, c: &Container, image: &Pulled) -> Result<Identity, String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.clone());
    let csc = c.security_context.clone().unwrap_or_default();
    let (image_uid, image_gid) = image_user(&image.config, &image.rootfs)?;
    let uid = csc
        .run_as_user
        .or(psc.as_ref().and_then(|p| p.run_as_user))
        .map_or(image_uid, |u| u as u32);
    let gid = csc
        .run_as_group
        .or(psc.as_ref().and_then(|p| p.run_as_group))
        .map(|g| g as u32)
        .or(image_gid)
        .unwrap_or(0);
    let non_root = csc
        .run_as_non_root
        .or(psc.as_ref().and_then(|p| p.run_as_non_root));
    if non_root == Some(true) && uid == 0 {
        return Err(format!(
            "container has runAsNonRoot and image will run as root (container: {})",
            c.name
        ));
    }
    let mut groups = vec![gid];
    if let Some(p) = &psc {
        let extra = p
            .fs_group
            .iter()
            .chain(p.supplemental_groups.iter().flatten());
        for g in extra.map(|g| *g as u32) {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    let mut capabilities: Vec<String> = if csc.privileged == Some(true) {
        vec!["ALL".to_string()]
    } else {
        DEFAULT_CAPS.iter().map(|c| c.to_string()).collect()
    };
    if let Some(caps) = &csc.capabilities {
        let drop: Vec<String> = caps.drop.iter().flatten().map(|d| cap_name(d)).collect();
        if drop.iter().any(|d| d == "ALL") {
            capabilities.clear();
        } else {
            capabilities.retain(|c| !drop.contains(c));
        }
        for a in caps.add.iter().flatten().map(|a| cap_name(a)) {
            if !capabilities.contains(&a) {
                capabilities.push(a);
            }
        }
    }
    Ok(Identity {
        uid,
        gid,
        groups,
        no_new_privs: csc.allow_privilege_escalation == Some(false),
        capabilities,
        read_only_root: csc.read_only_root_filesystem == Some(true),
    })
}

fn cap_name(c: &str) -> String {
    let c = c.to_ascii_uppercase();
    c.strip_prefix("CAP_").map(str::to_string).unwrap_or(c)
}

impl Identity {
    /// `setpriv` arguments applying the bounding set and `no_new_privs`. The chroot step that
    /// follows needs SETUID, SETGID and SYS_CHROOT; they are kept in the bounding set, and
    /// vanish with every other capability when it switches to a non-root user.
    pub(crate) fn setpriv_args(&self) -> Vec<String> {
        let mut out = vec!["setpriv".to_string()];
        if self.no_new_privs {
            out.push("--no-new-privs".into());
        }
        if !self.capabilities.iter().any(|c| c == "ALL") {
            let mut keep: Vec<String> = self
                .capabilities
                .iter()
                .map(|c| c.to_ascii_lowercase())
                .collect();
            for needed in ["setuid", "setgid", "sys_chroot"] {
                if !keep.iter().any(|k| k == needed) {
                    keep.push(needed.into());
                }
            }
            let list: Vec<String> = keep.iter().map(|k| format!("+{k}")).collect();
            out.push("--bounding-set".into());
            out.push(format!("-all,{}", list.join(",")));
        }
        out.push("--".into());
        out
    }

    /// `chroot` arguments switching to the container's root and user.
    pub(crate) fn chroot_args(&self, root: &Path) -> Vec<String> {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        vec![
            "chroot".into(),
            format!("--userspec={}:{}", self.uid, self.gid),
            format!("--groups={}", groups.join(",")),
            root.to_string_lossy().into_owned(),
        ]
    }
}

/// Gives a volume to `fs_group` the way the kubelet does: every file group-owned by it and
/// group-readable (and writable unless `read_only`), directories setgid so new files inherit
/// the group. Skipped when the volume's root already has the group and the setgid bit
/// (`fsGroupChangePolicy: OnRootMismatch`), unless `always`.
pub(crate) fn apply_fs_group(
    root: &Path,
    fs_group: u32,
    read_only: bool,
    always: bool,
) -> Result<(), String> {
    let meta = std::fs::metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !always && meta.gid() == fs_group && meta.mode() & 0o2000 != 0 {
        return Ok(());
    }
    let (file_bits, dir_bits) = if read_only {
        (0o440, 0o2050)
    } else {
        (0o660, 0o2070)
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        std::os::unix::fs::chown(&path, None, Some(fs_group))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
        let bits = if meta.is_dir() { dir_bits } else { file_bits };
        let mode = (meta.mode() & 0o7777) | bits;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))? {
                stack.push(entry.map_err(|e| e.to_string())?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::RuntimeConfig;

    fn pulled(user: Option<&str>) -> Pulled {
        Pulled {
            image_id: "docker.io/library/x@sha256:0".into(),
            rootfs: std::env::temp_dir(),
            config: RuntimeConfig {
                user: user.map(str::to_string),
                ..Default::default()
            },
        }
    }

    fn pod(pod_sc: serde_json::Value, ctr_sc: serde_json::Value) -> (Pod, Container) {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"securityContext": pod_sc, "containers": [{"name": "c", "securityContext": ctr_sc}]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    #[test]
    fn restricted_context_runs_as_the_given_user_with_no_capabilities_and_no_new_privs() {
        let (p, c) = pod(
            serde_json::json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 2000}),
            serde_json::json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                               "capabilities": {"drop": ["ALL"]}}),
        );
        let id = identity(&p, &c, &pulled(None)).unwrap();
        assert_eq!((id.uid, id.gid), (65532, 65532));
        assert_eq!(id.groups, vec![65532, 2000]);
        assert!(id.no_new_privs && id.read_only_root);
        assert!(id.capabilities.is_empty());
        let setpriv = id.setpriv_args().join(" ");
        assert_eq!(
            setpriv,
            "setpriv --no-new-privs --bounding-set -all,+setuid,+setgid,+sys_chroot --"
        );
    }

    #[test]
    fn image_user_applies_unless_the_context_overrides_it_and_root_is_refused_when_asked() {
        let (p, c) = pod(serde_json::json!({}), serde_json::json!({}));
        let id = identity(&p, &c, &pulled(Some("65532:65532"))).unwrap();
        assert_eq!((id.uid, id.gid), (65532, 65532));
        assert!(!id.no_new_privs);
        assert!(id.capabilities.contains(&"NET_BIND_SERVICE".to_string()));
        let (p, c) = pod(
            serde_json::json!({"runAsNonRoot": true}),
            serde_json::json!({"capabilities": {"drop": ["NET_RAW"], "add": ["CAP_NET_ADMIN"]}}),
        );
        assert!(
            identity(&p, &c, &pulled(None)).is_err(),
            "root image refused"
        );
        let id = identity(&p, &c, &pulled(Some("10"))).unwrap();
        assert!(!id.capabilities.contains(&"NET_RAW".to_string()));
        assert!(id.capabilities.contains(&"NET_ADMIN".to_string()));
    }

    #[test]
    fn fs_group_gives_volumes_to_the_group_with_setgid_directories() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/f"), b"x").unwrap();
        apply_fs_group(root.path(), 4321, false, false).unwrap();
        for (p, bits) in [
            (root.path().to_path_buf(), 0o2070),
            (root.path().join("sub"), 0o2070),
            (root.path().join("sub/f"), 0o660),
        ] {
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!(m.gid(), 4321, "{}", p.display());
            assert_eq!(m.mode() & bits, bits, "{}", p.display());
        }
    }
}
