//! Where the control-plane binaries are: `$RUSTQUEUE_K8S_BIN`, else
//! `$RUSTQUEUE_CACHE/k8s-<K8S_VERSION>-<K8S_BUILD>/bin` (default cache `~/.cache/rustqueue`), as built by
//! `scripts/build-k8s.sh`. The version comes from `scripts/versions.env`, read at compile time so
//! the crate and the build script cannot disagree.

use std::path::PathBuf;

use crate::Error;

const VERSIONS_ENV: &str = include_str!("../../../scripts/versions.env");

/// A value pinned in `scripts/versions.env` (e.g. `PYNSQ_VERSION`), or `unknown`.
pub fn pinned(key: &str) -> &'static str {
    VERSIONS_ENV
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
        .unwrap_or("unknown")
}

/// The pinned Kubernetes version (`K8S_VERSION` in scripts/versions.env).
pub fn k8s_version() -> &'static str {
    pinned("K8S_VERSION")
}

/// The pinned etcd version (`ETCD_VERSION` in scripts/versions.env).
pub fn etcd_version() -> &'static str {
    pinned("ETCD_VERSION")
}

/// Where `scripts/deps.sh` installs tools: `$RUSTQUEUE_CACHE`, else `~/.cache/rustqueue`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("RUSTQUEUE_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".cache/rustqueue"),
    }
}

/// The pinned `kubectl` (`K8S_VERSION`) that `scripts/deps.sh kubectl` installs; it may not
/// exist yet.
pub fn kubectl_path() -> PathBuf {
    cache_dir()
        .join(format!("kubectl-{}", k8s_version()))
        .join("bin/kubectl")
}

/// The directory holding `etcd`, `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`
/// and `kube-proxy` (`k8s-<K8S_VERSION>-<K8S_BUILD>`); errors when they are not there.
pub fn bin_dir() -> Result<PathBuf, Error> {
    let dir = match std::env::var_os("RUSTQUEUE_K8S_BIN") {
        Some(d) => PathBuf::from(d),
        None => cache_dir()
            .join(format!("k8s-{}-{}", k8s_version(), pinned("K8S_BUILD")))
            .join("bin"),
    };
    let complete = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ]
    .iter()
    .all(|b| dir.join(b).exists());
    if complete {
        Ok(dir)
    } else {
        Err(Error::MissingBinaries(dir))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pinned_versions_are_read_from_versions_env() {
        assert!(super::k8s_version().starts_with("v1."));
        assert!(super::etcd_version().starts_with("v3."));
    }
}
