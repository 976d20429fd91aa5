//! Read the cluster (and each broker's `/v1/health`) into one plain [`Observed`] value.
//! Status is never trusted as proof of anything: every reconcile starts here.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use rustqueue_api::contract::{self, paths};
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::labels;

use crate::Error;
use crate::plan::{AuthState, BrokerPod, Claim, Health, Observed, auth_secret_name};
use crate::render::{broker_selector, names, tokens_from_secret};

/// The broker HTTP client: short timeouts, no redirects (spec/operator.md §2.1).
pub fn broker_http_client() -> reqwest::Client {
    reqwest::Client::builder()
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

impl Observer<'_> {
    /// Observe RustQueue `name`.
    pub async fn observe(&self, name: &str, spec: &RustQueueSpec) -> Result<Observed, Error> {
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

        let brokers = futures::future::join_all(pods.items.iter().map(|p| self.broker(p))).await;
        let sts_spec = sts.map(|s| s.spec);
        let claim_template_size = sts_spec.as_ref().and_then(|s| {
            let t = s.volume_claim_templates.as_ref()?.first()?;
            let req = t.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?;
            Some(req.get("storage")?.0.clone())
        });
        Ok(Observed {
            eligible_nodes: i32::try_from(eligible.items.len()).unwrap_or(i32::MAX),
            statefulset_replicas: sts_spec.map(|s| s.replicas.unwrap_or(1)),
            claim_template_size,
            brokers,
            claims: pvcs.items.iter().map(claim).collect(),
            auth: auth_state(spec, &secret_name, secret.as_ref()),
        })
    }

    async fn broker(&self, pod: &Pod) -> BrokerPod {
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
        let health = match status.pod_ip.as_deref() {
            None => Health::Unreachable("no Pod IP".into()),
            Some(ip) => self.health(ip).await,
        };
        BrokerPod {
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
        }
    }

    async fn health(&self, ip: &str) -> Health {
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        let url = format!(
            "http://{host}:{}{}",
            labels::BROKER_HTTP_PORT,
            paths::HEALTH
        );
        let resp = match self.http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => return Health::Unreachable(unreachable_reason(&e)),
        };
        match resp.json::<contract::Health>().await {
            Ok(contract::Health::Ready { .. }) => Health::Ready,
            Ok(contract::Health::NotReady { reason, .. }) => Health::NotReady(reason),
            Err(_) => Health::Unreachable("unreadable /v1/health body".into()),
        }
    }
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

/// The registry token of RustQueue `name`, for authenticated contract calls.
pub async fn registry_token(
    client: &kube::Client,
    namespace: &str,
    secret_name: &str,
) -> Result<Option<String>, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let s = secrets
        .get_opt(secret_name)
        .await
        .map_err(|e| Error::kube("get auth Secret", e))?;
    Ok(s.and_then(|s| s.data).and_then(|d| {
        d.get("registry-token")
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
    }))
}
