//! Read the cluster (and each broker's `/v1/health`) into one plain [`Observed`] value.
//! Status is never trusted as proof of anything: every reconcile starts here.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerStateTerminated, Node, PersistentVolumeClaim, Pod, PodStatus, Secret,
    Service,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::ListParams;
use rustqueue_api::contract::{self, RESTORE_CONTAINER, RestoreSummary, paths};
use rustqueue_api::crd::{RustQueueSpec, TieringCredentials};
use rustqueue_api::labels;

use crate::Error;
use crate::plan::{
    AuthState, BrokerPod, Claim, DiscoveryPod, GatewayPod, GatewaySet, Health, KodoObserved,
    Observed, ProbePod, RestoreRun, StorageClassState, StorageDamage, TieringSecret, Workload,
    auth_secret_name,
};
use crate::render::kodo::names as kodo_names;
use crate::render::{
    AuthTokens, COMPONENT_PROBE, DiscoveryMode, broker_selector, names, tokens_from_secret,
};

/// The broker HTTP client: connect within 1 s, answer within 3 s, no redirects, so one stuck
/// broker cannot stall a reconcile.
pub fn broker_http_client() -> reqwest::Client {
    rustqueue_api::http_client::builder()
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(3))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("static reqwest configuration is valid")
}

/// Everything observe needs.
pub struct Observer<'a> {
    /// Kubernetes client.
    pub client: &'a kube::Client,
    /// Broker HTTP client.
    pub http: &'a reqwest::Client,
    /// Namespace of the RustQueue.
    pub namespace: &'a str,
}

/// The `storage_damage` object of a `/v1/health` body, when it records any finding.
pub fn storage_damage(health: &serde_json::Value) -> Option<StorageDamage> {
    let d = health.get("storage_damage")?;
    let findings = d.get("findings_on_record")?.as_u64()?;
    if findings == 0 {
        return None;
    }
    let latest = d["latest"].as_array().and_then(|l| l.last()).map(|r| {
        let field = |k: &str| r[k].as_str().unwrap_or("?").to_string();
        format!(
            "{} in topic {} ({}), found by {}",
            field("kind"),
            field("topic"),
            field("file"),
            field("detected_by")
        )
    });
    Some(StorageDamage {
        findings,
        messages: d["messages_on_record"].as_u64().unwrap_or(0),
        latest,
    })
}

impl Observer<'_> {
    /// Observe RustQueue `name`; also returns the tokens the applier needs for drains.
    pub async fn observe(
        &self,
        name: &str,
        spec: &RustQueueSpec,
    ) -> Result<(Observed, Option<AuthTokens>), Error> {
        let ns = self.namespace;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let eligible = nodes
            .list_metadata(&ListParams::default().labels(&spec.eligible_node_selector))
            .await
            .map_err(|e| Error::kube("list eligible Nodes", e))?;
        let sts: Api<StatefulSet> = Api::namespaced(self.client.clone(), ns);
        let sts = sts
            .get_opt(&names::stateful_set(name))
            .await
            .map_err(|e| Error::kube("get StatefulSet", e))?;
        let selector = ListParams::default().labels(&broker_selector(name));
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pods = pods
            .list(&selector)
            .await
            .map_err(|e| Error::kube("list broker Pods", e))?;
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let pvcs = pvcs
            .list(&selector)
            .await
            .map_err(|e| Error::kube("list broker PVCs", e))?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let secret_name = auth_secret_name(name, spec);
        let secret = secrets
            .get_opt(&secret_name)
            .await
            .map_err(|e| Error::kube("get auth Secret", e))?;
        let tiering_secret = match &spec.tiering {
            None => TieringSecret::Unused,
            Some(t) => {
                let c = &t.credentials_secret;
                let found = secrets
                    .get_opt(&c.name)
                    .await
                    .map_err(|e| Error::kube("get tiering credentials Secret", e))?;
                tiering_secret(c, found.as_ref())
            }
        };
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let config_maps = config_maps
            .list_metadata(&selector)
            .await
            .map_err(|e| Error::kube("list broker ConfigMaps", e))?;
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        let class = classes
            .get_opt(&spec.storage_class_name)
            .await
            .map_err(|e| Error::kube("get StorageClass", e))?;

        let probe_selector = ListParams::default().labels(&format!(
            "{}={name},{}={}",
            labels::INSTANCE,
            labels::COMPONENT,
            COMPONENT_PROBE
        ));
        let probes = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&probe_selector)
            .await
            .map_err(|e| Error::kube("list capability probe Pods", e))?;
        let runtime = self.runtime(name).await?;
        let kodo = self.kodo(name, runtime.discovery_template_mode).await?;
        let tokens = secret.as_ref().and_then(|s| secret_tokens(&secret_name, s));
        let registry = tokens.as_ref().map(|t| t.registry.as_str());
        let brokers =
            futures::future::join_all(pods.items.iter().map(|p| self.broker(p, registry))).await;
        let sts_spec = sts.map(|s| s.spec);
        let claim_template_size = sts_spec.as_ref().and_then(|s| {
            let t = s.volume_claim_templates.as_ref()?.first()?;
            let req = t.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?;
            Some(req.get("storage")?.0.clone())
        });
        let observed = Observed {
            eligible_nodes: i32::try_from(eligible.items.len()).unwrap_or(i32::MAX),
            statefulset_replicas: sts_spec.map(|s| s.replicas.unwrap_or(1)),
            claim_template_size,
            brokers,
            claims: pvcs.items.iter().map(claim).collect(),
            storage_class: match class {
                None => StorageClassState::Missing,
                Some(c) => StorageClassState::Present {
                    allow_expansion: c.allow_volume_expansion == Some(true),
                },
            },
            config_maps: config_maps
                .items
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .collect(),
            probes: probes.items.iter().map(probe).collect(),
            auth: auth_state(spec, &secret_name, secret.as_ref()),
            tiering_secret,
            discovery: runtime.discovery,
            gateway: runtime.gateway,
            console: runtime.console,
            kodo,
        };
        Ok((observed, tokens))
    }

    /// The Kodo Gateways (StatefulSet and Pods), the discovery Pods and the discovery
    /// Service's mode.
    async fn kodo(
        &self,
        name: &str,
        discovery_template_mode: Option<DiscoveryMode>,
    ) -> Result<KodoObserved, Error> {
        let ns = self.namespace;
        let sts = Api::<StatefulSet>::namespaced(self.client.clone(), ns)
            .get_opt(&kodo_names::gateway(name))
            .await
            .map_err(|e| Error::kube("get Kodo Gateway StatefulSet", e))?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let gateways = match sts {
            None => None,
            Some(sts) => {
                let list = pods
                    .list(
                        &ListParams::default()
                            .labels(&component_selector(name, labels::COMPONENT_KODO_GATEWAY)),
                    )
                    .await
                    .map_err(|e| Error::kube("list Kodo Gateway Pods", e))?;
                Some(gateway_set(&sts, &list.items))
            }
        };
        let discovery_pods = pods
            .list(
                &ListParams::default()
                    .labels(&component_selector(name, labels::COMPONENT_DISCOVERY)),
            )
            .await
            .map_err(|e| Error::kube("list discovery Pods", e))?
            .items
            .iter()
            .map(|p| DiscoveryPod {
                mode: mode_label(p.metadata.labels.as_ref()),
                ready: pod_ready(p),
            })
            .collect();
        let service = Api::<Service>::namespaced(self.client.clone(), ns)
            .get_opt(&names::discovery(name))
            .await
            .map_err(|e| Error::kube("get discovery Service", e))?;
        Ok(KodoObserved {
            gateways,
            discovery_template_mode,
            discovery_route: service
                .and_then(|s| s.spec)
                .and_then(|s| mode_label(s.selector.as_ref())),
            discovery_pods,
        })
    }

    /// The discovery and console Deployments and the gateway DaemonSet, as their controllers
    /// report them, and the mode label of the discovery Pod template.
    async fn runtime(&self, name: &str) -> Result<RuntimeRead, Error> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), self.namespace);
        let discovery = deployments
            .get_opt(&names::discovery(name))
            .await
            .map_err(|e| Error::kube("get discovery Deployment", e))?;
        let console = deployments
            .get_opt(&names::console(name))
            .await
            .map_err(|e| Error::kube("get console Deployment", e))?;
        let daemon_sets: Api<DaemonSet> = Api::namespaced(self.client.clone(), self.namespace);
        let gateway = daemon_sets
            .get_opt(&names::gateway(name))
            .await
            .map_err(|e| Error::kube("get gateway DaemonSet", e))?;
        let mode = discovery
            .as_ref()
            .and_then(|d| d.spec.template.metadata.as_ref())
            .and_then(|m| mode_label(m.labels.as_ref()));
        Ok(RuntimeRead {
            discovery: discovery.as_ref().map(deployment_workload),
            gateway: gateway.as_ref().map(daemon_set_workload),
            console: console.as_ref().map(deployment_workload),
            discovery_template_mode: mode,
        })
    }

    async fn broker(&self, pod: &Pod, registry_token: Option<&str>) -> BrokerPod {
        let status = pod.status.clone().unwrap_or_default();
        let pod_ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let waiting = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .or_else(|| {
                (status.phase.as_deref() == Some("Pending") && status.pod_ip.is_none())
                    .then(|| "Pending".to_string())
            });
        let ((health, damage), drain, capabilities) = match status.pod_ip.as_deref() {
            None => ((Health::Unreachable("no Pod IP".into()), None), None, None),
            Some(ip) => {
                let base = base_url(ip);
                let (h, d, c) = futures::join!(
                    self.health(&base),
                    self.get_json(&base, paths::DRAIN, registry_token),
                    self.get_json(&base, paths::CAPABILITIES, registry_token),
                );
                (h, d, c)
            }
        };
        let spec = pod.spec.as_ref();
        BrokerPod {
            ip: status.pod_ip.clone(),
            image: spec
                .and_then(|s| s.containers.iter().find(|c| c.name == "broker"))
                .and_then(|c| c.image.clone()),
            config_map: spec
                .and_then(|s| s.volumes.as_ref())
                .and_then(|v| v.iter().find(|v| v.name == "config"))
                .and_then(|v| v.config_map.as_ref())
                .map(|c| c.name.clone()),
            drain,
            capabilities,
            name: pod.metadata.name.clone().unwrap_or_default(),
            pod_ready,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            revision: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::REVISION_ANNOTATION).cloned()),
            waiting,
            health,
            damage,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            restore: restore_run(&status),
        }
    }

    /// `/v1/health`: readiness, and the damage at rest it reports beside it.
    async fn health(&self, base: &str) -> (Health, Option<StorageDamage>) {
        let url = format!("{base}{}", paths::HEALTH);
        let resp = match self.http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => return (Health::Unreachable(unreachable_reason(&e)), None),
        };
        let Ok(body) = resp.json::<serde_json::Value>().await else {
            return (
                Health::Unreachable("unreadable /v1/health body".into()),
                None,
            );
        };
        let damage = storage_damage(&body);
        let health = match serde_json::from_value::<contract::Health>(body) {
            Ok(contract::Health::Ready { .. }) => Health::Ready,
            Ok(contract::Health::NotReady { reason, .. }) => Health::NotReady(reason),
            Err(_) => Health::Unreachable("unreadable /v1/health body".into()),
        };
        (health, damage)
    }
}

impl Observer<'_> {
    /// `GET <path>` with the registry token; `None` on any failure (the broker is then
    /// treated as unknown, never as drained).
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        base: &str,
        path: &str,
        token: Option<&str>,
    ) -> Option<T> {
        let mut req = self.http.get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.header(contract::headers::TOKEN, t);
        }
        let resp = req.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json().await.ok()
    }
}

/// `instance=<n>,component=<component>` (and the app name).
fn component_selector(instance: &str, component: &str) -> String {
    crate::render::selector_labels(instance, component)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The discovery publisher mode in a label map (a Pod's labels, a Service selector).
fn mode_label(labels: Option<&BTreeMap<String, String>>) -> Option<DiscoveryMode> {
    DiscoveryMode::parse(labels?.get(labels::DISCOVERY_PUBLISHER_MODE)?)
}

/// Condition Ready=True and not terminating.
fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Gateway StatefulSet and its Pods.
fn gateway_set(sts: &StatefulSet, pods: &[Pod]) -> GatewaySet {
    let uid = |r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
        r.controller == Some(true) && r.kind == "RustQueue"
    };
    GatewaySet {
        replicas: sts.spec.replicas.unwrap_or(1),
        update_revision: sts.status.as_ref().and_then(|s| s.update_revision.clone()),
        owned: sts.metadata.owner_references.iter().flatten().any(uid),
        pods: pods
            .iter()
            .map(|p| GatewayPod {
                name: p.metadata.name.clone().unwrap_or_default(),
                ready: pod_ready(p),
                controller_revision: p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash").cloned()),
                revision: p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(labels::REVISION_ANNOTATION).cloned()),
            })
            .collect(),
    }
}

/// `http://<ip>:4151` (IPv6 bracketed).
pub fn base_url(ip: &str) -> String {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    format!("http://{host}:{}", labels::BROKER_HTTP_PORT)
}

fn secret_tokens(name: &str, secret: &Secret) -> Option<AuthTokens> {
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    tokens_from_secret(name, &data).ok()
}

fn unreachable_reason(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "health check timed out".into()
    } else if e.is_connect() {
        "connection refused".into()
    } else {
        "health check failed".into()
    }
}

fn probe(pod: &Pod) -> ProbePod {
    let status = pod.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == "probe");
    let state = container.and_then(|c| c.state.as_ref());
    ProbePod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase: status.phase.clone().unwrap_or_default(),
        waiting: state
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone()),
        message: state
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.clone()),
    }
}

/// The bucket credentials Secret: present with both keys non-empty, or what it lacks. Only the
/// keys' presence is read; their values never leave the Secret.
fn tiering_secret(c: &TieringCredentials, secret: Option<&Secret>) -> TieringSecret {
    let Some(secret) = secret else {
        return TieringSecret::Missing {
            name: c.name.clone(),
        };
    };
    let has = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|v| !String::from_utf8_lossy(&v.0).trim().is_empty())
    };
    let keys: Vec<String> = [&c.access_key_id_key, &c.secret_access_key_key]
        .into_iter()
        .filter(|k| !has(k))
        .cloned()
        .collect();
    if keys.is_empty() {
        TieringSecret::Valid {
            revision: secret.metadata.resource_version.clone().unwrap_or_default(),
        }
    } else {
        TieringSecret::MissingKeys {
            name: c.name.clone(),
            keys,
        }
    }
}

/// The broker Pod's restore init container, as the kubelet reports it (`None`: it has none).
fn restore_run(status: &PodStatus) -> Option<RestoreRun> {
    let c = status
        .init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == RESTORE_CONTAINER)?;
    let time = |t: &Option<Time>| t.as_ref().map(|t| t.0.to_string());
    let ended = |t: &ContainerStateTerminated| {
        let summary = t
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str::<RestoreSummary>(m.trim()).ok());
        match summary {
            Some(summary) if t.exit_code == 0 => RestoreRun::Done {
                summary,
                started_at: time(&t.started_at),
                finished_at: time(&t.finished_at),
            },
            _ => RestoreRun::Failed {
                message: t.message.clone().unwrap_or_else(|| {
                    format!(
                        "exit status {} ({})",
                        t.exit_code,
                        t.reason.clone().unwrap_or_default()
                    )
                }),
                finished_at: time(&t.finished_at),
            },
        }
    };
    let state = c.state.as_ref();
    if let Some(r) = state.and_then(|s| s.running.as_ref()) {
        return Some(RestoreRun::Running {
            started_at: time(&r.started_at),
        });
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return Some(ended(t));
    }
    // Waiting again after a failure (back-off): the last run says why.
    match c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
        Some(t) if t.exit_code != 0 => Some(ended(t)),
        _ => Some(RestoreRun::Pending),
    }
}

fn claim(pvc: &PersistentVolumeClaim) -> Claim {
    let spec = pvc.spec.clone().unwrap_or_default();
    let status = pvc.status.clone().unwrap_or_default();
    Claim {
        name: pvc.metadata.name.clone().unwrap_or_default(),
        storage_class: spec.storage_class_name,
        requested: spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").map(|q| q.0.clone())),
        capacity: status
            .capacity
            .and_then(|c| c.get("storage").map(|q| q.0.clone())),
        bound: status.phase.as_deref() == Some("Bound"),
    }
}

fn auth_state(spec: &RustQueueSpec, name: &str, secret: Option<&Secret>) -> AuthState {
    let Some(secret) = secret else {
        return if spec.registry_secret_name.is_some() {
            AuthState::UserMissing
        } else {
            AuthState::GeneratedMissing
        };
    };
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    match tokens_from_secret(name, &data) {
        Ok(_) => AuthState::Valid {
            revision: secret.metadata.resource_version.clone().unwrap_or_default(),
        },
        Err(e) => AuthState::Invalid(e.to_string()),
    }
}

/// The runtime workloads as one reading found them.
struct RuntimeRead {
    discovery: Option<Workload>,
    gateway: Option<Workload>,
    console: Option<Workload>,
    discovery_template_mode: Option<DiscoveryMode>,
}

/// The discovery Deployment, the gateway DaemonSet and the console Deployment (when enabled)
/// as one apply left them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeWorkloads {
    /// The discovery Deployment.
    pub discovery: Workload,
    /// The producer gateway DaemonSet.
    pub gateway: Workload,
    /// The console Deployment; `None` when the console is disabled (not applied).
    pub console: Option<Workload>,
}

/// A Deployment's Pods: `spec.replicas` wanted, `updatedReplicas` on the latest template,
/// `readyReplicas` of `replicas` (old Pods included) Ready.
pub(crate) fn deployment_workload(d: &Deployment) -> Workload {
    let status = d.status.clone().unwrap_or_default();
    Workload {
        observed: status.observed_generation >= d.metadata.generation,
        desired: d.spec.replicas.unwrap_or(1),
        updated: status.updated_replicas.unwrap_or(0),
        ready: status.ready_replicas.unwrap_or(0),
        total: status.replicas.unwrap_or(0),
    }
}

/// A DaemonSet's Pods, counted by Node: `desiredNumberScheduled` wanted,
/// `updatedNumberScheduled` on the latest template, `numberReady` Ready, and a Node with an
/// unavailable Pod (`numberUnavailable`) or a Pod where none should run (`numberMisscheduled`)
/// counts as not Ready.
pub(crate) fn daemon_set_workload(d: &DaemonSet) -> Workload {
    let status = d.status.clone().unwrap_or_default();
    let unavailable = status.number_unavailable.unwrap_or(0);
    Workload {
        observed: status.observed_generation >= d.metadata.generation,
        desired: status.desired_number_scheduled,
        updated: status.updated_number_scheduled.unwrap_or(0),
        ready: status
            .number_ready
            .min(status.desired_number_scheduled - unavailable),
        total: status.current_number_scheduled + status.number_misscheduled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_generation<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("a valid object")
    }

    #[test]
    fn a_deployment_is_available_once_every_pod_runs_the_latest_template_and_is_ready() {
        let d = |observed: i64, updated: i32, ready: i32, total: i32| -> Workload {
            deployment_workload(&with_generation(serde_json::json!({
                "metadata": {"name": "q-discovery", "generation": 4},
                "spec": {"replicas": 2, "selector": {}, "template": {}},
                "status": {"observedGeneration": observed, "updatedReplicas": updated,
                           "readyReplicas": ready, "replicas": total}
            })))
        };
        assert_eq!(d(4, 2, 2, 2).unavailable(), None);
        assert!(d(3, 2, 2, 2).unavailable().unwrap().contains("not seen"));
        // the surge: two new Pods, the old ones not gone yet
        assert_eq!(
            d(4, 2, 4, 4).unavailable().as_deref(),
            Some("2 of 2 Pods updated, 4 of 4 Ready")
        );
        assert!(
            d(4, 2, 1, 2).unavailable().is_some(),
            "one new Pod not Ready"
        );
        assert!(d(4, 1, 2, 2).unavailable().is_some(), "one old Pod left");
    }

    #[test]
    fn a_daemon_set_is_available_when_every_selected_node_runs_a_ready_latest_pod() {
        let ds = |desired: i32, updated: i32, ready: i32, unavailable: i32| -> Workload {
            daemon_set_workload(&with_generation(serde_json::json!({
                "metadata": {"name": "q-gateway", "generation": 2},
                "spec": {"selector": {}, "template": {}},
                "status": {"observedGeneration": 2, "desiredNumberScheduled": desired,
                           "currentNumberScheduled": desired, "numberMisscheduled": 0,
                           "updatedNumberScheduled": updated, "numberReady": ready,
                           "numberUnavailable": unavailable}
            })))
        };
        assert_eq!(ds(3, 3, 3, 0).unavailable(), None);
        assert!(
            ds(3, 2, 3, 0).unavailable().is_some(),
            "a Node on the old template"
        );
        assert!(
            ds(3, 3, 3, 1).unavailable().is_some(),
            "a Node's Pod unavailable"
        );
        assert!(
            ds(0, 0, 0, 0)
                .unavailable()
                .unwrap()
                .contains("no Pod is scheduled"),
            "a selector no Node matches is not available"
        );
        // what an apply of a new template returns: a generation its controller has not seen,
        // beside the status of the old, fully rolled template
        let just_applied = daemon_set_workload(&with_generation(serde_json::json!({
            "metadata": {"name": "q-gateway", "generation": 3},
            "spec": {"selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "desiredNumberScheduled": 3,
                       "currentNumberScheduled": 3, "numberMisscheduled": 0,
                       "updatedNumberScheduled": 3, "numberReady": 3, "numberUnavailable": 0}
        })));
        assert!(!just_applied.observed);
        assert!(just_applied.unavailable().is_some());
    }

    #[test]
    fn storage_damage_is_read_from_the_documented_health_body() {
        let body = serde_json::json!({
            "status": "ready",
            "storage_damage": {
                "quarantined_messages_since_start": 1, "findings_since_start": 1,
                "findings_on_record": 2, "messages_on_record": 3,
                "latest": [{ "kind": "message_body", "topic": "orders",
                    "file": "topics/6f/segments/s.rqlog", "detected_by": "read" }]
            }
        });
        let d = storage_damage(&body).unwrap();
        assert_eq!((d.findings, d.messages), (2, 3));
        assert_eq!(
            d.latest.as_deref(),
            Some("message_body in topic orders (topics/6f/segments/s.rqlog), found by read")
        );
        let clean = serde_json::json!({"storage_damage": {"findings_on_record": 0}});
        assert_eq!(storage_damage(&clean), None);
        assert_eq!(
            storage_damage(&serde_json::json!({"status": "ready"})),
            None
        );
    }
}
