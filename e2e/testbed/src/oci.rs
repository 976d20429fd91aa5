//! OCI images for the process kubelet: reference parsing (Docker's normalization rules), and an
//! image store that pulls by reference, then by digest, from the testbed's local registry
//! ([`crate::registry`]) and unpacks each digest once into a read-only root filesystem that
//! containers use as the lower layer of their own overlay.
//!
//! The local registry stands in for `docker.io` (like a registry mirror in a kind node's
//! containerd): `rustqueue:dev` is `docker.io/library/rustqueue:dev` and is served by the
//! local registry as `library/rustqueue:dev`. References naming the local registry's own
//! `host:port` work too; any other registry is unreachable (`ErrImagePull`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio::sync::Mutex;

/// The registry Pods' short references default to.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (`docker.io` by default).
    pub registry: String,
    /// Repository path (`library/` added for single-component Docker Hub names).
    pub repository: String,
    /// Tag, when given (or `latest` when neither tag nor digest is).
    pub tag: Option<String>,
    /// Digest, when given (`sha256:...`).
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses a reference the way Docker and the kubelet normalize it.
    pub fn parse(reference: &str) -> Result<ImageRef, String> {
        let (rest, digest) = match reference.split_once('@') {
            Some((r, d)) if d.starts_with("sha256:") && d.len() == 71 => (r, Some(d.to_string())),
            Some(_) => return Err(format!("invalid digest in image reference {reference:?}")),
            None => (reference, None),
        };
        let (name, tag) = match rest.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, Some(t.to_string())),
            _ => (rest, None),
        };
        if name.is_empty() || name.chars().any(|c| c.is_ascii_uppercase() || c == ' ') {
            return Err(format!("invalid image reference {reference:?}"));
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
        };
        let repository = if registry == DEFAULT_REGISTRY && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        let tag = match (&tag, &digest) {
            (None, None) => Some("latest".to_string()),
            _ => tag,
        };
        Ok(ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The same repository and tag/digest on registry `host`.
    pub fn at(&self, host: &str) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => format!("{host}/{}@{d}", self.repository),
            (None, Some(t)) => format!("{host}/{}:{t}", self.repository),
            (None, None) => format!("{host}/{}:latest", self.repository),
        }
    }

    /// `registry/repository`, as in an `imageID`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

/// The kubelet's default `imagePullPolicy`: `Always` for `:latest` or untagged references,
/// `IfNotPresent` otherwise.
pub fn default_pull_policy(reference: &str) -> &'static str {
    match ImageRef::parse(reference) {
        Ok(r) if r.digest.is_none() && r.tag.as_deref() == Some("latest") => "Always",
        _ => "IfNotPresent",
    }
}

/// The parts of an image's config the runtime uses.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct RuntimeConfig {
    /// ENTRYPOINT.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    /// CMD.
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// ENV (`KEY=value`).
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// WORKDIR.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// USER (`uid[:gid]` or names from the image's /etc/passwd).
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: RuntimeConfig,
}

/// An image unpacked on disk.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// `registry/repository@sha256:...` (the container status `imageID`).
    pub image_id: String,
    /// The unpacked root filesystem (shared, never written: containers overlay it).
    pub rootfs: PathBuf,
    /// Entrypoint, command, env, working dir, user.
    pub config: RuntimeConfig,
}

/// Why an image could not be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullError {
    /// `ErrImagePull`, `ErrImageNeverPull` or `InvalidImageName`.
    pub reason: &'static str,
    /// What went wrong.
    pub message: String,
}

/// Pulled images, by digest, under one directory; reference -> digest for `IfNotPresent`.
pub(crate) struct Store {
    dir: PathBuf,
    crane: PathBuf,
    registry: Option<String>,
    by_reference: Mutex<BTreeMap<String, Pulled>>,
}

impl Store {
    pub(crate) fn new(dir: PathBuf, registry: Option<String>) -> Store {
        Store {
            dir,
            crane: crate::registry::crane_path(),
            registry,
            by_reference: Mutex::new(BTreeMap::new()),
        }
    }

    /// The image for `reference` under `policy` (`Always`, `IfNotPresent`, `Never`).
    pub(crate) async fn get(&self, reference: &str, policy: &str) -> Result<Pulled, PullError> {
        let parsed = ImageRef::parse(reference).map_err(|m| PullError {
            reason: "InvalidImageName",
            message: m,
        })?;
        // One pull at a time: two containers of one image unpack it once.
        let mut known = self.by_reference.lock().await;
        if policy != "Always"
            && let Some(p) = known.get(reference)
        {
            return Ok(p.clone());
        }
        if policy == "Never" {
            return Err(PullError {
                reason: "ErrImageNeverPull",
                message: format!(
                    "container image {reference:?} is not present with pull policy of Never"
                ),
            });
        }
        let pulled = self.pull(reference, &parsed).await?;
        known.insert(reference.to_string(), pulled.clone());
        Ok(pulled)
    }

    async fn pull(&self, reference: &str, r: &ImageRef) -> Result<Pulled, PullError> {
        let err = |message: String| PullError {
            reason: "ErrImagePull",
            message: format!("failed to pull image {reference:?}: {message}"),
        };
        let Some(host) = self.registry.as_deref() else {
            return Err(err(format!(
                "the testbed runs no registry (crane is not installed: scripts/deps.sh crane; \
                 expected at {})",
                self.crane.display()
            )));
        };
        if r.registry != DEFAULT_REGISTRY && r.registry != host {
            return Err(err(format!(
                "registry {} is not reachable from the testbed (it serves {DEFAULT_REGISTRY} \
                 references and {host} from its local registry)",
                r.registry
            )));
        }
        let digest = match &r.digest {
            Some(d) => d.clone(),
            None => self
                .crane(&["digest", "--insecure", &r.at(host)])
                .await
                .map_err(err)?
                .trim()
                .to_string(),
        };
        let by_digest = ImageRef {
            digest: Some(digest.clone()),
            ..r.clone()
        }
        .at(host);
        let image_dir = self.dir.join(digest.replace(':', "-"));
        let rootfs = image_dir.join("rootfs");
        let config_path = image_dir.join("config.json");
        if !image_dir.join("complete").exists() {
            let _ = std::fs::remove_dir_all(&image_dir);
            std::fs::create_dir_all(&rootfs).map_err(|e| err(format!("creating store: {e}")))?;
            let config = self
                .crane(&["config", "--insecure", &by_digest])
                .await
                .map_err(err)?;
            std::fs::write(&config_path, config).map_err(|e| err(e.to_string()))?;
            let fs_tar = image_dir.join("fs.tar");
            self.crane(&[
                "export",
                "--insecure",
                &by_digest,
                &fs_tar.to_string_lossy(),
            ])
            .await
            .map_err(err)?;
            untar(&fs_tar, &rootfs).await.map_err(err)?;
            let _ = std::fs::remove_file(&fs_tar);
            std::fs::write(image_dir.join("complete"), &digest).map_err(|e| err(e.to_string()))?;
        }
        let text = std::fs::read_to_string(&config_path).map_err(|e| err(e.to_string()))?;
        let config = serde_json::from_str::<ConfigFile>(&text)
            .map_err(|e| err(format!("image config: {e}")))?
            .config;
        Ok(Pulled {
            image_id: format!("{}@{digest}", r.name()),
            rootfs,
            config,
        })
    }

    async fn crane(&self, args: &[&str]) -> Result<String, String> {
        let out = tokio::process::Command::new(&self.crane)
            .args(args)
            .output()
            .await
            .map_err(|e| format!("running {}: {e}", self.crane.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().last().unwrap_or_default().trim();
            Err(format!("crane {}: {last}", args.first().unwrap_or(&"")))
        }
    }
}

async fn untar(tarball: &Path, dest: &Path) -> Result<(), String> {
    let out = tokio::process::Command::new("tar")
        .arg("-xf")
        .arg(tarball)
        .arg("-C")
        .arg(dest)
        .args(["--numeric-owner", "--same-permissions"])
        .output()
        .await
        .map_err(|e| format!("tar: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "unpacking: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Resolves the image's `USER` (`uid[:gid]`, or names looked up in the image's /etc/passwd and
/// /etc/group) to numbers; `(0, 0)` when unset.
pub fn image_user(config: &RuntimeConfig, rootfs: &Path) -> Result<(u32, Option<u32>), String> {
    let Some(user) = config.user.as_deref().filter(|u| !u.is_empty()) else {
        return Ok((0, None));
    };
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let lookup = |file: &str, name: &str| -> Option<(u32, Option<u32>)> {
        let text = std::fs::read_to_string(rootfs.join(file)).ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name)).then(|| {
                (
                    f.get(2).and_then(|x| x.parse().ok()).unwrap_or(0),
                    f.get(3).and_then(|x| x.parse().ok()),
                )
            })
        })
    };
    let (uid, passwd_gid) = match u.parse::<u32>() {
        Ok(n) => (n, None),
        Err(_) => lookup("etc/passwd", u)
            .ok_or_else(|| format!("user {u:?} is not in the image's /etc/passwd"))?,
    };
    let gid = match g {
        Some(g) => Some(match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                lookup("etc/group", g)
                    .ok_or_else(|| format!("group {g:?} is not in the image's /etc/group"))?
                    .0
            }
        }),
        None => passwd_gid,
    };
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_docker_hub_library_images() {
        let r = ImageRef::parse("rustqueue:dev").unwrap();
        assert_eq!(r.registry, "docker.io");
        assert_eq!(r.repository, "library/rustqueue");
        assert_eq!(r.tag.as_deref(), Some("dev"));
        assert_eq!(
            r.at("127.0.0.1:5000"),
            "127.0.0.1:5000/library/rustqueue:dev"
        );
        assert_eq!(r.name(), "docker.io/library/rustqueue");
    }

    #[test]
    fn registry_hosts_ports_and_digests_are_recognized() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r = ImageRef::parse(&format!("127.0.0.1:5000/rustqueue/rustqueued@{d}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "rustqueue/rustqueued");
        assert_eq!((r.tag, r.digest), (None, Some(d)));
        let r = ImageRef::parse("rustqueue/rustqueued").unwrap();
        assert_eq!(r.registry, "docker.io");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert!(ImageRef::parse("Upper/case:1").is_err());
        assert!(ImageRef::parse("x@sha256:short").is_err());
    }

    #[test]
    fn latest_and_untagged_references_are_always_pulled() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("rustqueue:dev"), "IfNotPresent");
    }

    #[test]
    fn image_user_reads_numbers_and_names() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/sbin/nologin\nnonroot:x:65532:65533::/home/nonroot:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "nonroot:x:65533:\n").unwrap();
        let user = |u: &str| {
            let c = RuntimeConfig {
                user: Some(u.into()),
                ..Default::default()
            };
            image_user(&c, root.path())
        };
        assert_eq!(user("65532:65532"), Ok((65532, Some(65532))));
        assert_eq!(user("nonroot"), Ok((65532, Some(65533))));
        assert_eq!(user("7:nonroot"), Ok((7, Some(65533))));
        assert!(user("nobody").is_err());
        assert_eq!(
            image_user(&RuntimeConfig::default(), root.path()),
            Ok((0, None))
        );
    }
}
