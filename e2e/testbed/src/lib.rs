//! A local Kubernetes for end-to-end tests, with no container runtime.
//!
//! The control plane is upstream: `etcd`, `kube-apiserver`, `kube-controller-manager` and
//! `kube-scheduler` built from the Go module proxy by `scripts/build-k8s.sh` (pinned in
//! `scripts/versions.env`). Beside it this crate runs:
//!
//! - a **process kubelet** ([`kubelet`]) that registers N Nodes, keeps their status and Leases
//!   fresh and runs every Pod bound to them as local processes (one private mount namespace per
//!   container, volumes bind-mounted, env resolved, a per-Pod IP `10.244.x.y`, probes,
//!   restarts, graceful termination) and serves the kubelet API for `kubectl logs`;
//! - a **volume provisioner** ([`storage`]) behind the default StorageClass [`STORAGE_CLASS`]
//!   (host directories, `allowVolumeExpansion: true`);
//! - **Service networking and cluster DNS** ([`network`]): upstream kube-proxy (nftables mode)
//!   routes ClusterIPs to Pod IPs, and CoreDNS answers `cluster.local` names on
//!   [`network::CLUSTER_DNS`], which every Pod's `/etc/resolv.conf` names;
//! - a local **OCI registry** ([`registry`], crane's) that Pods' images are pulled from and
//!   run as real images ([`oci`]: own root filesystem, the Pod's securityContext), beside
//!   directory-mapped images ([`Image`]) that run in the host's root.
//!
//! ```no_run
//! # fn demo() -> Result<(), rustqueue_testbed::Error> {
//! use rustqueue_testbed::{Image, Testbed, TestbedOptions, netns};
//! // First: a private network namespace for this thread, then the runtime inside it.
//! let rt = netns::isolated_runtime()?;
//! rt.block_on(async {
//!     let bed = Testbed::start(
//!         TestbedOptions::default()
//!             .nodes(3)
//!             .image("rustqueue:dev", Image::dir("target/release").entrypoint(["rustqueued"])),
//!     )
//!     .await?;
//!     let client = bed.client(); // a kube::Client with cluster-admin rights
//!     # let _ = client;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Everything is torn down when the [`Testbed`] is dropped (also while unwinding from a panic):
//! every process is killed and the work directory removed. See `docs/e2e.md`.

mod assets;
mod controlplane;
mod error;
mod images;
pub mod kubelet;
pub mod netns;
pub mod network;
pub mod oci;
mod pki;
mod process;
pub mod registry;
pub mod storage;
pub mod testserver;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use tokio::task::JoinHandle;

pub use assets::{cache_dir, etcd_version, k8s_version, kubectl_path, pinned};
pub use error::Error;
pub use images::{Image, ImageTable};

use controlplane::ControlPlane;
use process::ProcessGroups;

/// The default StorageClass the testbed installs (host directories, expandable).
pub const STORAGE_CLASS: &str = "testbed-hostpath";
/// Label every testbed Node carries, so tests can tell them apart.
pub const NODE_LABEL: &str = "rustqueue.io/testbed";

/// One Node to register.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// Extra labels (`kubernetes.io/hostname` and [`NODE_LABEL`] are always set).
    pub labels: BTreeMap<String, String>,
}

/// How to start a [`Testbed`].
#[derive(Clone, Debug)]
pub struct TestbedOptions {
    /// The Nodes to register (default: three, `testbed-node-0..2`).
    pub nodes: Vec<NodeSpec>,
    /// Image references the kubelet can run. The built-in `testbed/tiny:1` (see
    /// [`testserver`]) is added when [`TestbedOptions::tiny_image_dir`] is set.
    pub images: ImageTable,
    /// Keep the work directory (logs, etcd data) after teardown, for debugging.
    pub keep_dir: bool,
    /// Images pushed into the testbed's registry at start: reference (as Pods name it, e.g.
    /// `rustqueue:dev`) and a `docker save` tarball or single-image OCI layout.
    pub registry_images: Vec<(String, PathBuf)>,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        TestbedOptions {
            nodes: Vec::new(),
            images: ImageTable::default(),
            keep_dir: std::env::var_os("RUSTQUEUE_TESTBED_KEEP").is_some(),
            registry_images: Vec::new(),
        }
        .nodes(3)
    }
}

impl TestbedOptions {
    /// Registers `n` Nodes named `testbed-node-<i>` (replacing any set before).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = (0..n)
            .map(|i| NodeSpec {
                name: format!("testbed-node-{i}"),
                labels: BTreeMap::new(),
            })
            .collect();
        self
    }

    /// Adds a label to every Node registered so far (e.g. `rustqueue.io/eligible=true`).
    pub fn node_label(mut self, key: &str, value: &str) -> Self {
        for n in &mut self.nodes {
            n.labels.insert(key.into(), value.into());
        }
        self
    }

    /// Adds one Node with its own labels.
    pub fn node(mut self, spec: NodeSpec) -> Self {
        self.nodes.push(spec);
        self
    }

    /// Maps an image reference to a local image.
    pub fn image(mut self, reference: &str, image: Image) -> Self {
        self.images.insert(reference, image);
        self
    }

    /// Pushes an image archive (`docker save` tarball, e.g. from `make images`, or a
    /// single-image OCI layout) into the testbed's registry as `reference`; Pods naming it are
    /// pulled and run from their own root filesystem (see [`oci`]). A reference also mapped
    /// with [`TestbedOptions::image`] runs from that directory instead.
    pub fn registry_image(mut self, reference: &str, archive: impl Into<PathBuf>) -> Self {
        self.registry_images
            .push((reference.to_string(), archive.into()));
        self
    }

    /// Makes `testbed/tiny:1` available: `dir` must hold the `rustqueue-testbed` binary (whose
    /// `serve` subcommand is the tiny server).
    pub fn tiny_image_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.image(
            testserver::TINY_IMAGE,
            Image::dir(dir).entrypoint(["rustqueue-testbed", "serve"]),
        )
    }
}

/// A running testbed. Dropping it tears everything down.
pub struct Testbed {
    client: kube::Client,
    kubeconfig: PathBuf,
    node_names: Vec<String>,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    control_plane: ControlPlane,
    registry: Option<registry::Registry>,
    network: Option<network::ClusterNetwork>,
    groups: ProcessGroups,
    kubelet: Arc<kubelet::Kubelet>,
    tasks: Vec<JoinHandle<()>>,
}

/// A `kube::Client` for the kubeconfig file at `path` (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, Error> {
    // kube's rustls needs a process-wide crypto provider when more than one is compiled in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc =
        kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// The registry, with `opts.registry_images` pushed: it runs whenever crane is installed;
/// images to push require it.
async fn start_registry(
    opts: &TestbedOptions,
    dir: &Path,
    groups: &ProcessGroups,
) -> Result<Option<registry::Registry>, Error> {
    if opts.registry_images.is_empty() && !registry::crane_path().exists() {
        return Ok(None);
    }
    let r = registry::Registry::start(dir, groups).await?;
    for (reference, archive) in &opts.registry_images {
        r.push(archive, reference).await?;
    }
    Ok(Some(r))
}

impl Testbed {
    /// Starts the control plane, the kubelet for `opts.nodes` and the provisioner, and returns
    /// once the Nodes are Ready and schedulable and the `default` ServiceAccount exists.
    ///
    /// Must run inside the testbed's network namespace (see [`netns::isolated_runtime`]).
    pub async fn start(opts: TestbedOptions) -> Result<Testbed, Error> {
        if !netns::in_private_network() {
            return Err(Error::Network(
                "Testbed::start runs only inside the testbed's private network namespace: \
                 build the test's runtime with rustqueue_testbed::netns::isolated_runtime() \
                 (see docs/e2e.md)"
                    .into(),
            ));
        }
        let started = Instant::now();
        let bin = assets::bin_dir()?;
        let tmp = tempfile::Builder::new()
            .prefix("rustqueue-testbed-")
            .tempdir()
            .map_err(|e| Error::io("creating", std::env::temp_dir(), e))?;
        let dir_path = tmp.path().to_path_buf();
        let groups = ProcessGroups::default();
        let pki = pki::Pki::generate()?;
        let control_plane = match ControlPlane::start(&bin, &dir_path, &pki, &groups).await {
            Ok(cp) => cp,
            Err(e) => {
                groups.kill_all();
                return Err(e);
            }
        };
        let registry = match start_registry(&opts, &dir_path, &groups).await {
            Ok(r) => r,
            Err(e) => {
                groups.kill_all();
                return Err(e);
            }
        };
        let kubeconfig = control_plane.admin_kubeconfig.clone();
        // Service routing and cluster DNS run whenever CoreDNS is installed (started once the
        // Nodes exist: kube-proxy reads its Node).
        let cluster_network = network::coredns_path().exists();
        let client = client_from_kubeconfig(&kubeconfig).await?;
        let node_names = opts.nodes.iter().map(|n| n.name.clone()).collect();
        let kubelet = Arc::new(kubelet::Kubelet::new(kubelet::Config {
            client: client.clone(),
            images: opts.images.clone(),
            dir: dir_path.clone(),
            nodes: opts.nodes.clone(),
            apiserver_port: control_plane.apiserver_port,
            groups: groups.clone(),
            serving: pki.kubelet_serving.clone(),
            registry: registry.as_ref().map(|r| r.host().to_string()),
            cluster_dns: cluster_network.then(|| network::CLUSTER_DNS.to_string()),
        })?);
        let mut bed = Testbed {
            client: client.clone(),
            kubeconfig,
            node_names,
            dir: Some(tmp),
            dir_path,
            control_plane,
            registry,
            network: None,
            groups,
            kubelet: kubelet.clone(),
            tasks: Vec::new(),
        };
        if opts.keep_dir
            && let Some(d) = bed.dir.take()
        {
            let _ = d.keep();
        }
        bed.tasks.extend(kubelet.clone().spawn().await?);
        bed.tasks
            .push(storage::Provisioner::new(client.clone(), bed.dir_path.join("volumes")).spawn());
        storage::install_storage_class(&client).await?;
        bed.wait_nodes_ready(Duration::from_secs(60)).await?;
        if cluster_network {
            let node = bed.node_names.first().cloned().unwrap_or_default();
            bed.network = Some(
                network::ClusterNetwork::start(
                    &bin,
                    &bed.dir_path,
                    &bed.kubeconfig,
                    &node,
                    &bed.groups,
                )
                .await?,
            );
        }
        bed.wait_default_service_account("default", Duration::from_secs(60))
            .await?;
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            dir = %bed.dir_path.display(),
            "testbed up"
        );
        Ok(bed)
    }

    /// A client with cluster-admin rights (group `system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The API server's address (inside the testbed's network namespace).
    pub fn apiserver_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.control_plane.apiserver_port))
    }

    /// `host:port` of the testbed's OCI registry (inside its network namespace), when one runs
    /// (crane installed). It also serves every `docker.io` reference (`rustqueue:dev` is
    /// `library/rustqueue:dev` there).
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_ref().map(|r| r.host())
    }

    /// Path of the admin kubeconfig (also usable with `kubectl --kubeconfig`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The registered Node names.
    pub fn node_names(&self) -> &[String] {
        &self.node_names
    }

    /// The work directory (component logs, etcd data, Pod logs, volumes).
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// The stdout+stderr of the current (or last) run of a container.
    pub fn logs(&self, namespace: &str, pod: &str, container: &str) -> Result<String, Error> {
        self.kubelet.logs(namespace, pod, container, false)
    }

    /// The stdout+stderr of the previous run of a container (like `kubectl logs --previous`).
    pub fn previous_logs(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<String, Error> {
        self.kubelet.logs(namespace, pod, container, true)
    }

    /// Leaders of every process group the testbed runs now (control plane and containers);
    /// useful to prove that teardown leaves nothing behind.
    pub fn process_ids(&self) -> Vec<u32> {
        self.groups.list()
    }

    /// The log file of a control-plane component (`kube-apiserver`, `etcd`, ...).
    pub fn component_log(&self, component: &str) -> PathBuf {
        self.dir_path.join(format!("{component}.log"))
    }

    /// Creates a namespace and waits for its `default` ServiceAccount (Pods are rejected by
    /// the ServiceAccount admission plugin until the controller-manager has created it).
    pub async fn create_namespace(&self, name: &str) -> Result<(), Error> {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}
        }))
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        self.wait_default_service_account(name, Duration::from_secs(60))
            .await
    }

    /// Errors if a control-plane process died (useful in long tests).
    pub fn check_control_plane(&mut self) -> Result<(), Error> {
        self.control_plane.check_alive(&self.dir_path)
    }

    async fn wait_default_service_account(
        &self,
        namespace: &str,
        limit: Duration,
    ) -> Result<(), Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        wait_for(
            &format!("ServiceAccount {namespace}/default"),
            limit,
            || {
                let api = api.clone();
                async move { Ok(api.get_opt("default").await?.is_some()) }
            },
        )
        .await
    }

    async fn wait_nodes_ready(&self, limit: Duration) -> Result<(), Error> {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let names = self.node_names.clone();
        wait_for("Nodes Ready without not-ready taints", limit, || {
            let api = api.clone();
            let names = names.clone();
            async move {
                for name in &names {
                    let node = api.get(name).await?;
                    let tainted = node
                        .spec
                        .and_then(|s| s.taints)
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key.starts_with("node.kubernetes.io/"));
                    if tainted {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await
    }

    /// Tears everything down now (what `Drop` does).
    pub fn shutdown(mut self) {
        self.teardown();
    }

    fn teardown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.kubelet.kill_all();
        if let Some(n) = &mut self.network {
            n.stop(&self.groups);
        }
        self.control_plane.stop(&self.groups);
        if let Some(r) = &mut self.registry {
            r.stop(&self.groups);
        }
        self.groups.kill_all();
        self.kubelet.remove_mountpoints();
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Polls `check` every 250 ms until it returns `Ok(true)`; API errors are retried.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::debug!(%e, what, "waiting"),
        }
        if start.elapsed() > limit {
            return Err(Error::Timeout {
                what: what.into(),
                secs: limit.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
