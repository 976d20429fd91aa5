//! The testbed's local OCI registry: go-containerregistry's `crane registry serve` (pinned as
//! `CRANE_VERSION` in `scripts/versions.env`, installed by `scripts/deps.sh crane`), listening on
//! loopback inside the testbed's network namespace with its blobs under the work directory.
//! Images given to [`crate::TestbedOptions::registry_image`] are pushed into it at start; the
//! process kubelet pulls from it (see [`crate::oci`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;
use crate::oci::ImageRef;
use crate::process::{ProcessGroups, ProcessSet};

/// Where `scripts/deps.sh crane` installs crane (`$RUSTQUEUE_CRANE` overrides it).
pub fn crane_path() -> PathBuf {
    match std::env::var_os("RUSTQUEUE_CRANE") {
        Some(p) => PathBuf::from(p),
        None => crate::cache_dir()
            .join(format!("crane-{}", crate::pinned("CRANE_VERSION")))
            .join("bin/crane"),
    }
}

/// A running registry.
pub(crate) struct Registry {
    procs: ProcessSet,
    host: String,
    crane: PathBuf,
}

impl Registry {
    /// Starts the registry on a free loopback port, storing blobs under `dir/registry`.
    pub(crate) async fn start(dir: &Path, groups: &ProcessGroups) -> Result<Registry, Error> {
        let crane = crane_path();
        if !crane.exists() {
            return Err(Error::MissingTool {
                tool: "crane",
                path: crane,
                install: "scripts/deps.sh crane",
            });
        }
        let port = crate::controlplane::free_port()?;
        let host = format!("127.0.0.1:{port}");
        let blobs = dir.join("registry");
        std::fs::create_dir_all(&blobs).map_err(|e| Error::io("creating", &blobs, e))?;
        let mut procs = ProcessSet::default();
        let serve = ["registry", "serve", "--address", &host, "--disk"];
        let args = serve
            .iter()
            .map(std::ffi::OsStr::new)
            .chain([blobs.as_os_str()]);
        procs.spawn(dir, groups, "registry", &crane, args)?;
        let mut registry = Registry { procs, host, crane };
        let limit = Duration::from_secs(20);
        let start = Instant::now();
        while tokio::net::TcpStream::connect(&registry.host)
            .await
            .is_err()
        {
            registry.procs.check_alive(dir)?;
            if start.elapsed() > limit {
                return Err(Error::NotReady {
                    name: "registry".into(),
                    secs: limit.as_secs(),
                    log_tail: crate::controlplane::tail(&dir.join("registry.log"), 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(registry)
    }

    /// `host:port` of the registry (reachable inside the testbed's network namespace).
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// Pushes a `docker save` tarball or a single-image OCI layout as `reference` (a Pod-style
    /// reference such as `rustqueue:dev`, stored under its normalized repository); returns the
    /// manifest digest.
    pub(crate) async fn push(&self, archive: &Path, reference: &str) -> Result<String, Error> {
        let r = ImageRef::parse(reference).map_err(|m| Error::Image {
            reference: reference.into(),
            message: m,
        })?;
        let target = r.at(&self.host);
        let out = tokio::process::Command::new(&self.crane)
            .args(["push", "--insecure"])
            .arg(archive)
            .arg(&target)
            .output()
            .await
            .map_err(|source| Error::Spawn {
                name: "crane push".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(Error::Image {
                reference: reference.into(),
                message: format!(
                    "crane push {} {target}: {}",
                    archive.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let printed = String::from_utf8_lossy(&out.stdout);
        Ok(printed
            .trim()
            .rsplit_once('@')
            .map(|(_, d)| d.to_string())
            .unwrap_or_default())
    }

    /// Stops the registry.
    pub(crate) fn stop(&mut self, groups: &ProcessGroups) {
        self.procs.stop(groups);
    }
}
