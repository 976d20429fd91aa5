//! One Pod's lifecycle, owned by one task: pod IP, volumes, init containers in order, then the
//! containers, probes, restarts by `restartPolicy`, status patches, and on deletion preStop
//! hooks, SIGTERM, SIGKILL after the grace period and the final delete (grace 0), like the
//! kubelet's pod worker. The container bookkeeping lives in [`super::run`].

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::Kubelet;
use super::run::{Ctr, Outcome};
use super::volumes::{self, Sources};
use crate::process::signal_group;

const TICK: Duration = Duration::from_millis(300);
const VOLUME_RESYNC: Duration = Duration::from_secs(30);

pub(crate) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// The state of one Pod on this kubelet.
pub(crate) struct Worker {
    pub(crate) k: Arc<Kubelet>,
    pub(crate) pod: Arc<Pod>,
    pub(crate) uid: String,
    pub(crate) ns: String,
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) log_dir: PathBuf,
    pub(crate) ip: Option<Ipv4Addr>,
    sources: Option<Sources>,
    volume_error: Option<String>,
    last_volume_sync: Instant,
    start_time: String,
    pub(crate) init: Vec<Ctr>,
    pub(crate) ctrs: Vec<Ctr>,
    init_done: bool,
    conditions: Vec<(String, bool, String)>,
    last_patch: Option<Value>,
}

impl Worker {
    pub(crate) async fn run(k: Arc<Kubelet>, mut rx: watch::Receiver<Option<Arc<Pod>>>) {
        let Some(pod) = rx.borrow_and_update().clone() else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let mut w = Worker {
            dir: k.cfg.dir.join("pods").join(&uid),
            log_dir: k.cfg.dir.join("logs").join(format!("{ns}_{name}_{uid}")),
            ip: None,
            sources: None,
            volume_error: None,
            last_volume_sync: Instant::now(),
            start_time: now(),
            init: spec
                .init_containers
                .unwrap_or_default()
                .into_iter()
                .map(Ctr::new)
                .collect(),
            ctrs: spec.containers.into_iter().map(Ctr::new).collect(),
            init_done: false,
            conditions: Vec::new(),
            last_patch: None,
            k,
            pod,
            uid,
            ns,
            name,
        };
        if terminal {
            // Nothing to run; only finish a deletion.
            for c in w.init.iter_mut().chain(w.ctrs.iter_mut()) {
                c.done = true;
            }
            w.init_done = true;
        }
        loop {
            if w.pod.metadata.deletion_timestamp.is_some() {
                w.terminate(&mut rx).await;
                w.finalize(true).await;
                return;
            }
            if !terminal {
                w.step().await;
                w.sync_status().await;
            }
            tokio::select! {
                changed = rx.changed() => {
                    let latest = if changed.is_ok() { rx.borrow_and_update().clone() } else { None };
                    match latest {
                        Some(p) => w.pod = p,
                        None => {
                            w.kill_now();
                            w.finalize(false).await;
                            return;
                        }
                    }
                }
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    }

    pub(crate) fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    pub(crate) fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(secs.max(0) as u64)
    }

    pub(crate) fn hostname(&self) -> String {
        let h = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| self.name.clone());
        h.chars().take(63).collect()
    }

    async fn step(&mut self) {
        if self.ip.is_none() {
            self.ip = self.k.ipam.allocate();
            if self.ip.is_none() {
                self.volume_error = Some("no free pod IP in the testbed block".into());
                return;
            }
        }
        let ip = self.ip.map(|i| i.to_string()).unwrap_or_default();
        if self.sources.is_none() || self.last_volume_sync.elapsed() > VOLUME_RESYNC {
            self.last_volume_sync = Instant::now();
            match volumes::prepare(&self.k.cfg.client, &self.pod, &ip, &self.dir).await {
                Ok(s) => {
                    self.sources = Some(s);
                    self.volume_error = None;
                }
                Err(e) if self.sources.is_none() => {
                    self.volume_error = Some(e);
                    // retry soon rather than after a full resync period
                    self.last_volume_sync = Instant::now() - VOLUME_RESYNC + Duration::from_secs(1);
                    return;
                }
                Err(e) => tracing::debug!(pod = %self.name, %e, "volume resync failed"),
            }
        }
        self.reap_all();
        if !self.init_done {
            match self
                .init
                .iter()
                .position(|c| c.outcome() != Outcome::Succeeded)
            {
                None => self.init_done = true,
                Some(i) => {
                    if self.init[i].outcome() == Outcome::Failed {
                        return;
                    }
                    if self.init[i].should_start() {
                        self.start(true, i).await;
                    }
                    return;
                }
            }
        }
        for i in 0..self.ctrs.len() {
            if self.ctrs[i].should_start() {
                self.start(false, i).await;
            }
        }
        self.probe_all().await;
    }

    fn reap_all(&mut self) {
        let policy = self.restart_policy().to_string();
        let grace = self.grace();
        for c in self.init.iter_mut() {
            // init containers never restart after success; a failure restarts unless Never
            let p = if policy == "Never" {
                "Never"
            } else {
                "OnFailure"
            };
            c.reap(&self.k, p, grace);
        }
        for c in self.ctrs.iter_mut() {
            c.reap(&self.k, &policy, grace);
        }
    }

    async fn start(&mut self, init: bool, i: usize) {
        let ip = self.ip.map(|i| i.to_string()).unwrap_or_default();
        let hostname = self.hostname();
        let sources = self.sources.clone().unwrap_or_default();
        let ctx = super::run::StartCtx {
            k: &self.k,
            pod: &self.pod,
            ip: &ip,
            hostname: &hostname,
            sources: &sources,
            dir: &self.dir,
            log_dir: &self.log_dir,
        };
        let c = if init {
            &mut self.init[i]
        } else {
            &mut self.ctrs[i]
        };
        c.start(&ctx).await;
    }

    async fn probe_all(&mut self) {
        let ip = self.ip.map(|i| i.to_string()).unwrap_or_default();
        let grace = self.grace();
        let images = &self.k.cfg.images;
        let jobs = self.ctrs.iter_mut().map(|c| c.probe(images, &ip, grace));
        futures::future::join_all(jobs).await;
    }

    fn phase(&self) -> &'static str {
        if self.init.iter().any(|c| c.outcome() == Outcome::Failed) {
            return "Failed";
        }
        if !self.init_done {
            return "Pending";
        }
        if self.ctrs.iter().all(|c| c.outcome() != Outcome::Running) {
            return if self.ctrs.iter().all(|c| c.outcome() == Outcome::Succeeded) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if self.ctrs.iter().any(|c| c.ever_started()) {
            "Running"
        } else {
            "Pending"
        }
    }

    fn set_condition(&mut self, ty: &str, ok: bool) {
        match self.conditions.iter_mut().find(|(t, _, _)| t == ty) {
            Some(c) if c.1 == ok => {}
            Some(c) => {
                c.1 = ok;
                c.2 = now();
            }
            None => self.conditions.push((ty.to_string(), ok, now())),
        }
    }

    fn readiness_gates_pass(&self) -> bool {
        let gates = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.clone())
            .unwrap_or_default();
        let current = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        gates.iter().all(|g| {
            current
                .iter()
                .any(|c| c.type_ == g.condition_type && c.status == "True")
        })
    }

    pub(crate) fn status_json(&mut self) -> Value {
        let phase = self.phase();
        let sandbox = self.volume_error.is_none() && self.ip.is_some();
        let all_ready = !self.ctrs.is_empty() && self.ctrs.iter().all(|c| c.ready());
        let gates = self.readiness_gates_pass();
        self.set_condition("PodReadyToStartContainers", sandbox);
        self.set_condition("Initialized", self.init_done);
        self.set_condition("ContainersReady", all_ready && phase == "Running");
        self.set_condition("Ready", all_ready && gates && phase == "Running");
        let conditions: Vec<Value> = self
            .conditions
            .iter()
            .map(|(t, ok, at)| {
                json!({"type": t, "status": if *ok { "True" } else { "False" },
                       "lastTransitionTime": at, "lastProbeTime": null})
            })
            .collect();
        let waiting_reason = if self.volume_error.is_some() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let msg = self.volume_error.clone();
        let statuses = |cs: &[Ctr]| -> Vec<Value> {
            cs.iter()
                .map(|c| c.status_json(waiting_reason, msg.as_deref()))
                .collect()
        };
        let mut status = json!({
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "conditions": conditions,
            "containerStatuses": statuses(&self.ctrs),
        });
        if !self.init.is_empty() {
            status["initContainerStatuses"] = json!(statuses(&self.init));
        }
        if let Some(ip) = self.ip.filter(|_| sandbox) {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        if let Some(m) = &self.volume_error {
            status["message"] = json!(m);
        }
        json!({"status": status})
    }

    async fn sync_status(&mut self) {
        let body = self.status_json();
        if self.last_patch.as_ref() == Some(&body) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.k.cfg.client.clone(), &self.ns);
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(with_uid_precondition(&body, &self.uid)),
            )
            .await
        {
            Ok(_) => self.last_patch = Some(body),
            // The name now belongs to another Pod (a force delete and an immediate
            // replacement): its status is its own worker's to write, never this one's.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                tracing::debug!(pod = %self.name, uid = %self.uid, %e, "status patch refused: the Pod was replaced");
                self.last_patch = Some(body);
            }
            Err(e) => tracing::debug!(pod = %self.name, %e, "status patch failed; retrying"),
        }
    }

    /// preStop hooks, SIGTERM, wait up to the grace period (which a later delete may shorten,
    /// or a force delete may end), then SIGKILL.
    async fn terminate(&mut self, rx: &mut watch::Receiver<Option<Arc<Pod>>>) {
        let mut deadline = Instant::now() + self.grace();
        let ip = self.ip.map(|i| i.to_string()).unwrap_or_default();
        let images = &self.k.cfg.images;
        let hooks = self.ctrs.iter().map(|c| c.pre_stop(images, &ip, deadline));
        futures::future::join_all(hooks).await;
        for c in self.init.iter_mut().chain(self.ctrs.iter_mut()) {
            c.signal(Signal::SIGTERM);
        }
        loop {
            let grace = self.grace();
            self.reap_stopping();
            let running = self.init.iter().chain(&self.ctrs).any(|c| c.is_running());
            if !running {
                break;
            }
            if Instant::now() >= deadline {
                for c in self.init.iter_mut().chain(self.ctrs.iter_mut()) {
                    c.signal(Signal::SIGKILL);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            tokio::select! {
                changed = rx.changed() => {
                    let latest = if changed.is_ok() { rx.borrow_and_update().clone() } else { None };
                    match latest {
                        Some(p) => {
                            self.pod = p;
                            let shorter = Instant::now() + self.grace();
                            if self.grace() < grace && shorter < deadline {
                                deadline = shorter;
                            }
                        }
                        None => deadline = Instant::now(),
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        self.sync_status().await;
    }

    fn reap_stopping(&mut self) {
        for c in self.init.iter_mut().chain(self.ctrs.iter_mut()) {
            c.reap(&self.k, "Never", Duration::ZERO);
        }
    }

    fn kill_now(&mut self) {
        for c in self.init.iter_mut().chain(self.ctrs.iter_mut()) {
            c.signal(Signal::SIGKILL);
        }
    }

    /// Reaps what is left, deletes the Pod object (when it still exists), frees the IP and
    /// removes the Pod's directory (PV data lives elsewhere).
    async fn finalize(&mut self, delete: bool) {
        for c in self.init.iter_mut().chain(self.ctrs.iter_mut()) {
            if let Some(pid) = c.pid() {
                signal_group(pid, Signal::SIGKILL);
            }
            c.reap_blocking(&self.k).await;
        }
        if delete {
            let api: Api<Pod> = Api::namespaced(self.k.cfg.client.clone(), &self.ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(self.uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = api.delete(&self.name, &dp).await {
                tracing::debug!(pod = %self.name, %e, "final delete failed");
            }
        }
        if let Some(ip) = self.ip.take() {
            self.k.ipam.release(ip);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A status patch that applies only to the Pod with this UID, like the kubelet's status
/// manager writes them: Pods are addressed by name, and a StatefulSet reuses a name as soon as
/// a force delete removes the object, while the deleted Pod's worker may still be finishing a
/// step. The API server refuses a patch whose `metadata.uid` differs from the object's.
fn with_uid_precondition(body: &Value, uid: &str) -> Value {
    let mut patch = body.clone();
    patch["metadata"] = json!({ "uid": uid });
    patch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_patch_names_the_pod_uid_it_was_computed_for() {
        let body = json!({"status": {"phase": "Running"}});
        let patch = with_uid_precondition(&body, "u-1");
        assert_eq!(patch["metadata"]["uid"], "u-1");
        assert_eq!(patch["status"], body["status"]);
    }
}
