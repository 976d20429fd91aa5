//! The process kubelet: registers the testbed's Nodes and runs every Pod bound to them as local
//! processes. One [`pod`] worker per Pod UID owns that Pod's lifecycle; this module only
//! dispatches watch events to the workers and holds what they share (the image table, pod
//! IPs, created mountpoints, log files).
//!
//! ```text
//!   Pod watch ──► dispatch(uid) ──► pod worker ──► volumes ─► containers (unshare -m -u)
//!                                        │                       │
//!                                        └── status patches ◄────┴── probes, exits
//!   heartbeat task ──► Node status + kube-node-lease Lease every 10 s
//! ```

pub(crate) mod api;
mod atomic;
mod container;
mod env;
mod ipam;
mod node;
mod pod;
mod portforward;
mod probe;
mod run;
mod security;
mod volumes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::pki::CertPair;
use crate::process::ProcessGroups;
use crate::{Error, ImageTable, NodeSpec};

/// What the kubelet needs from the testbed.
pub(crate) struct Config {
    pub(crate) client: Client,
    pub(crate) images: ImageTable,
    pub(crate) dir: PathBuf,
    pub(crate) nodes: Vec<NodeSpec>,
    pub(crate) apiserver_port: u16,
    pub(crate) groups: ProcessGroups,
    /// Serving certificate of the kubelet API (`kubectl logs` through the API server).
    pub(crate) serving: CertPair,
    /// `host:port` of the testbed's registry, when one runs.
    pub(crate) registry: Option<String>,
    /// The cluster DNS server every `ClusterFirst` Pod's `/etc/resolv.conf` names, when one
    /// runs (see [`crate::network`]).
    pub(crate) cluster_dns: Option<String>,
}

/// Key of a container's logs: namespace, pod name, container name.
type LogKey = (String, String, String);

/// The process kubelet (shared by its tasks).
pub struct Kubelet {
    cfg: Config,
    ipam: ipam::Ipam,
    /// OCI images pulled from the registry, unpacked once per digest.
    pulled: crate::oci::Store,
    node_names: BTreeSet<String>,
    workers: Mutex<HashMap<String, watch::Sender<Option<Arc<Pod>>>>>,
    mountpoints: Mutex<Vec<PathBuf>>,
    logs: Mutex<BTreeMap<LogKey, Vec<PathBuf>>>,
}

impl Kubelet {
    pub(crate) fn new(cfg: Config) -> Result<Kubelet, Error> {
        let node_names = cfg.nodes.iter().map(|n| n.name.clone()).collect();
        Ok(Kubelet {
            ipam: ipam::Ipam::claim()?,
            pulled: crate::oci::Store::new(cfg.dir.join("images"), cfg.registry.clone()),
            node_names,
            cfg,
            workers: Mutex::new(HashMap::new()),
            mountpoints: Mutex::new(Vec::new()),
            logs: Mutex::new(BTreeMap::new()),
        })
    }

    /// Registers the Nodes, then starts the heartbeat and the Pod watch.
    pub(crate) async fn spawn(self: Arc<Self>) -> Result<Vec<JoinHandle<()>>, Error> {
        let port = api::PORT;
        let api = api::serve(self.clone()).await?;
        node::register(&self.cfg.client, &self.cfg.nodes, port).await?;
        let me = self.clone();
        let heartbeat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(node::HEARTBEAT).await;
                for n in &me.cfg.nodes {
                    if let Err(e) = node::heartbeat(&me.cfg.client, &n.name, port).await {
                        tracing::warn!(node = %n.name, %e, "node heartbeat failed");
                    }
                }
            }
        });
        let me = self.clone();
        let pods = tokio::spawn(async move { me.watch_pods().await });
        Ok(vec![api, heartbeat, pods])
    }

    async fn watch_pods(self: Arc<Self>) {
        let api: Api<Pod> = Api::all(self.cfg.client.clone());
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        let mut seen_in_list = BTreeSet::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => seen_in_list.clear(),
                Ok(watcher::Event::InitApply(pod)) => {
                    if let Some(uid) = pod.metadata.uid.clone() {
                        seen_in_list.insert(uid);
                    }
                    self.dispatch(pod);
                }
                Ok(watcher::Event::InitDone) => {
                    // Pods that vanished while the watch was down are gone for good.
                    let gone: Vec<String> = self
                        .lock_workers()
                        .keys()
                        .filter(|uid| !seen_in_list.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in gone {
                        self.gone(&uid);
                    }
                }
                Ok(watcher::Event::Apply(pod)) => self.dispatch(pod),
                Ok(watcher::Event::Delete(pod)) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        self.gone(uid);
                    }
                }
                Err(e) => {
                    tracing::debug!(%e, "pod watch error; the watcher retries");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }

    fn lock_workers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Option<Arc<Pod>>>>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dispatch(self: &Arc<Self>, pod: Pod) {
        let ours = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| self.node_names.contains(n));
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if !ours {
            return;
        }
        let pod = Arc::new(pod);
        let mut workers = self.lock_workers();
        if let Some(tx) = workers.get(&uid) {
            let _ = tx.send(Some(pod));
            return;
        }
        let (tx, rx) = watch::channel(Some(pod));
        workers.insert(uid.clone(), tx);
        let me = self.clone();
        tokio::spawn(async move {
            pod::Worker::run(me.clone(), rx).await;
            me.lock_workers().remove(&uid);
        });
    }

    fn gone(&self, uid: &str) {
        if let Some(tx) = self.lock_workers().get(uid) {
            let _ = tx.send(None);
        }
    }

    /// SIGKILLs every container (teardown).
    pub(crate) fn kill_all(&self) {
        self.lock_workers().clear();
        self.cfg.groups.kill_all();
    }

    /// Removes the host directories and files created as mountpoints (empty ones only).
    pub(crate) fn remove_mountpoints(&self) {
        let created =
            std::mem::take(&mut *self.mountpoints.lock().unwrap_or_else(|p| p.into_inner()));
        for path in created.iter().rev() {
            if path.is_dir() {
                let _ = std::fs::remove_dir(path);
            } else if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Makes sure `path` exists on the host as a directory (or an empty file) to mount on,
    /// remembering every component it had to create.
    pub(crate) fn ensure_mountpoint(&self, path: &Path, file: bool) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut p = path.to_path_buf();
        while !p.exists() {
            missing.push(p.clone());
            if !p.pop() {
                break;
            }
        }
        let mut created = self.mountpoints.lock().unwrap_or_else(|p| p.into_inner());
        for m in missing.iter().rev() {
            if file && m == path {
                std::fs::File::create(m)?;
            } else {
                match std::fs::create_dir(m) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            if !created.contains(m) {
                created.push(m.clone());
            }
        }
        Ok(())
    }

    pub(crate) fn record_log(&self, key: LogKey, path: PathBuf) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .push(path);
    }

    /// A container's current (or previous) log.
    pub(crate) fn logs(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<String, Error> {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        let what = format!("{namespace}/{pod}/{container}");
        let path = {
            let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
            let runs = logs.get(&key).ok_or_else(|| Error::NoLog(what.clone()))?;
            let idx = if previous {
                runs.len().checked_sub(2)
            } else {
                runs.len().checked_sub(1)
            };
            idx.and_then(|i| runs.get(i))
                .cloned()
                .ok_or_else(|| Error::NoLog(what.clone()))?
        };
        std::fs::read_to_string(&path).map_err(|e| Error::io("reading", path, e))
    }
}
