//! Pure rendering of every child object of a RustQueue.
//!
//! Each function takes the resource's identity and spec (plus the few observed facts that must
//! flow into a Pod template, gathered in [`BrokerInputs`]) and returns a typed Kubernetes object.
//! Nothing here talks to the API server; the applier server-side applies the results in
//! [`Children::in_apply_order`].

mod config;
mod console;
mod desired;
mod discovery;
mod gateway;
pub mod kodo;
mod network;
mod pod;
mod policy;
mod probe;
mod rbac;
mod revision;
mod secret;
mod service;
mod statefulset;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, PodTemplateSpec, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::labels;

pub use config::{EffectiveLimits, broker_toml, config_map};
pub use console::ConsoleObjects;
pub use desired::{Desired, DesiredInputs};
pub use discovery::{discovery_deployment, discovery_pdb, discovery_service};
pub use gateway::{gateway_daemon_set, gateway_service};
pub use kodo::{DiscoveryMode, KodoLayout, KodoObjects};
pub use network::{broker_network_policy, internal_network_policy};
pub use policy::pod_disruption_budget;
pub use probe::{COMPONENT_PROBE, probe_fingerprint, probe_pod, probe_pod_name, probe_prefix};
pub use rbac::{role, role_binding, service_account};
pub use revision::pod_template_revision;
pub use secret::{AuthTokens, auth_secret, generate_tokens, tokens_from_secret};
pub use service::headless_service;
pub use statefulset::stateful_set;

/// Who the children belong to.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// RustQueue name (`<n>`).
    pub name: &'a str,
    /// Namespace of the RustQueue and all its children.
    pub namespace: &'a str,
    /// UID of the RustQueue, for owner references.
    pub uid: &'a str,
}

impl Owner<'_> {
    /// The controller owner reference every child carries (garbage collection on delete).
    pub fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "rustqueue.io/v1alpha1".into(),
            kind: "RustQueue".into(),
            name: self.name.into(),
            uid: self.uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Standard metadata for a child named `name` of `component`.
    fn metadata(&self, name: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.namespace.into()),
            labels: Some(object_labels(self.name, component)),
            owner_references: Some(vec![self.reference()]),
            ..ObjectMeta::default()
        }
    }
}

/// Names of the children of RustQueue `n`.
pub mod names {
    /// Broker config map of one config: named by its content, so a config is never edited
    /// in place and a Pod restart reads the config of the revision it was created with.
    pub fn config_map(n: &str, toml: &str) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(toml.as_bytes());
        format!("{n}-config-{}", hex::encode(&digest[..5]))
    }
    /// Prefix of every broker config map name.
    pub fn config_map_prefix(n: &str) -> String {
        format!("{n}-config-")
    }
    /// Generated auth Secret.
    pub fn auth_secret(n: &str) -> String {
        format!("{n}-auth")
    }
    /// Headless broker Service (StatefulSet serviceName).
    pub fn brokers_service(n: &str) -> String {
        format!("{n}-brokers")
    }
    /// Broker PDB.
    pub fn pdb(n: &str) -> String {
        format!("{n}-brokers")
    }
    /// Discovery Deployment and Service.
    pub fn discovery(n: &str) -> String {
        format!("{n}-discovery")
    }
    /// Producer gateway DaemonSet and Service.
    pub fn gateway(n: &str) -> String {
        format!("{n}-gateway")
    }
    /// Discovery PDB.
    pub fn discovery_pdb(n: &str) -> String {
        format!("{n}-discovery-pdb")
    }
    /// NetworkPolicy of the broker Pods.
    pub fn broker_network_policy(n: &str) -> String {
        format!("{n}-broker-ingress")
    }
    /// NetworkPolicy of the instance's other Pods.
    pub fn internal_network_policy(n: &str) -> String {
        format!("{n}-internal")
    }
    /// The console's Deployment, Service, ServiceAccount, Role, RoleBinding and
    /// NetworkPolicy.
    pub fn console(n: &str) -> String {
        format!("{n}-console")
    }
    /// Runtime ServiceAccount, Role and RoleBinding.
    pub fn runtime(n: &str) -> String {
        format!("{n}-runtime")
    }
    /// The broker StatefulSet.
    pub fn stateful_set(n: &str) -> String {
        n.to_string()
    }
    /// Broker Pod of `ordinal`.
    pub fn pod(n: &str, ordinal: i32) -> String {
        format!("{n}-{ordinal}")
    }
}

/// Labels every child carries.
pub fn object_labels(instance: &str, component: &str) -> BTreeMap<String, String> {
    let mut l = selector_labels(instance, component);
    l.insert(labels::MANAGED_BY.into(), labels::FIELD_MANAGER.into());
    l
}

/// The labels that select the children of one component (stable: never changes with the spec).
pub fn selector_labels(instance: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::NAME.to_string(), labels::APP_NAME.to_string()),
        (labels::INSTANCE.to_string(), instance.to_string()),
        (labels::COMPONENT.to_string(), component.to_string()),
    ])
}

/// The `key=value` selector string for broker Pods and PVCs of `instance`.
pub fn broker_selector(instance: &str) -> String {
    selector_labels(instance, labels::COMPONENT_BROKER)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Observed facts that flow into the broker objects.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerInputs {
    /// StatefulSet replicas to apply.
    pub replicas: i32,
    /// Name of the auth Secret (generated or user-provided).
    pub auth_secret_name: String,
    /// resourceVersion of the auth Secret: rotating tokens rolls the Pods.
    pub auth_secret_revision: String,
    /// Size of the claim template: the existing StatefulSet's (immutable), else the spec's.
    pub claim_size: String,
    /// Storage feature level floor from status (levels are never lowered).
    pub feature_level_floor: u32,
    /// resourceVersion of the tiering credentials Secret: rotating the key pair rolls the Pods
    /// (the broker reads it at start).
    pub tiering_secret_revision: Option<String>,
}

/// Every object the operator keeps applied for one RustQueue.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// `<n>-config`.
    pub config_map: ConfigMap,
    /// `<n>-runtime`.
    pub service_account: ServiceAccount,
    /// `<n>-runtime`.
    pub role: Role,
    /// `<n>-runtime`.
    pub role_binding: RoleBinding,
    /// `<n>-brokers`.
    pub service: Service,
    /// `<n>`.
    pub stateful_set: StatefulSet,
    /// `<n>-brokers`.
    pub pdb: PodDisruptionBudget,
    /// `<n>-broker-ingress`.
    pub broker_network_policy: NetworkPolicy,
    /// `<n>-internal`.
    pub internal_network_policy: NetworkPolicy,
    /// `<n>-discovery` Service.
    pub discovery_service: Service,
    /// `<n>-discovery` Deployment.
    pub discovery: Deployment,
    /// `<n>-discovery-pdb`.
    pub discovery_pdb: PodDisruptionBudget,
    /// `<n>-gateway` Service.
    pub gateway_service: Service,
    /// `<n>-gateway` DaemonSet.
    pub gateway: DaemonSet,
    /// The Kodo Gateway objects, when the layout keeps them.
    pub kodo: Option<KodoObjects>,
    /// The console's objects, while `spec.console.enabled`.
    pub console: Option<ConsoleObjects>,
}

impl Children {
    /// Render all children; the runtime workloads (discovery, gateways) run `runtime_image`,
    /// discovery and the Kodo Gateways as `layout` says.
    pub fn render(
        owner: &Owner<'_>,
        spec: &RustQueueSpec,
        inputs: &BrokerInputs,
        runtime_image: &str,
        layout: &KodoLayout,
    ) -> Self {
        let toml = broker_toml(owner, spec, inputs);
        let discovery =
            discovery_deployment(owner, spec, &inputs.auth_secret_name, runtime_image, layout);
        let discovery_svc = discovery_service(owner, layout);
        Self {
            console: ConsoleObjects::render(owner, spec, &inputs.auth_secret_name, runtime_image),
            kodo: layout
                .gateway_replicas
                .map(|r| KodoObjects::render(owner, spec, runtime_image, r)),
            discovery,
            discovery_service: discovery_svc,
            discovery_pdb: discovery_pdb(owner),
            gateway: gateway_daemon_set(owner, spec, runtime_image),
            gateway_service: gateway_service(owner),
            stateful_set: stateful_set(owner, spec, inputs, &toml),
            config_map: config_map(owner, &toml),
            service_account: service_account(owner),
            role: role(owner),
            role_binding: role_binding(owner),
            service: headless_service(owner),
            pdb: pod_disruption_budget(owner, inputs.replicas),
            broker_network_policy: broker_network_policy(owner),
            internal_network_policy: internal_network_policy(owner),
        }
    }

    /// The pod-template revision the StatefulSet carries.
    #[cfg(test)]
    pub fn revision(&self) -> &str {
        self.stateful_set
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(labels::REVISION_ANNOTATION))
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The objects as JSON in the order they are applied (config and the brokers' policy
    /// before the Pods, RBAC before the ServiceAccount's users, the Service last).
    #[cfg(test)]
    pub fn in_apply_order(&self) -> Vec<serde_json::Value> {
        fn j<T: serde::Serialize>(t: &T) -> serde_json::Value {
            serde_json::to_value(t).expect("k8s objects serialize")
        }
        let mut out = vec![
            j(&self.config_map),
            j(&self.broker_network_policy),
            j(&self.stateful_set),
            j(&self.pdb),
            j(&self.service_account),
            j(&self.role),
            j(&self.role_binding),
            j(&self.internal_network_policy),
            j(&self.service),
            j(&self.discovery_service),
            j(&self.gateway_service),
        ];
        // the Gateways before discovery, which may advertise them
        if let Some(k) = &self.kodo {
            out.extend([
                j(&k.network_policy),
                j(&k.headless_service),
                j(&k.publish_service),
                j(&k.stateful_set),
                j(&k.pdb),
            ]);
        }
        out.extend([j(&self.discovery), j(&self.gateway), j(&self.discovery_pdb)]);
        if let Some(c) = &self.console {
            out.extend([
                j(&c.service_account),
                j(&c.role),
                j(&c.role_binding),
                j(&c.network_policy),
                j(&c.service),
                j(&c.deployment),
            ]);
        }
        out
    }
}

/// A Pod template of `component` (labels: the selector's plus the common ones) around `spec`.
fn pod_template(instance: &str, component: &str, spec: PodSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(object_labels(instance, component)),
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}

/// `matchLabels` only: every selector the operator renders.
fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub fn owner() -> Owner<'static> {
        Owner {
            name: "queue",
            namespace: "ns",
            uid: "uid-1",
        }
    }

    pub fn inputs() -> BrokerInputs {
        BrokerInputs {
            replicas: 3,
            auth_secret_name: "queue-auth".into(),
            auth_secret_revision: "100".into(),
            claim_size: "100Gi".into(),
            feature_level_floor: 1,
            tiering_secret_revision: None,
        }
    }

    pub fn spec() -> RustQueueSpec {
        RustQueueSpec::with_image("rustqueue:dev")
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn every_child_is_owned_by_the_rustqueue_as_controller() {
        let c = Children::render(
            &owner(),
            &spec(),
            &inputs(),
            "rustqueue:dev",
            &KodoLayout::default(),
        );
        let objs = c.in_apply_order();
        assert_eq!(objs.len(), 20);
        for o in objs {
            let refs = &o["metadata"]["ownerReferences"];
            assert_eq!(refs[0]["uid"], "uid-1", "{}", o["kind"]);
            assert_eq!(refs[0]["controller"], true);
            assert_eq!(o["metadata"]["namespace"], "ns");
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                "rustqueue-operator"
            );
            assert!(
                o["apiVersion"].is_string() && o["kind"].is_string(),
                "SSA needs both"
            );
        }
    }

    #[test]
    fn apply_order_puts_config_before_the_statefulset_and_the_service_last() {
        let kinds: Vec<String> = Children::render(
            &owner(),
            &spec(),
            &inputs(),
            "rustqueue:dev",
            &KodoLayout::default(),
        )
        .in_apply_order()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "NetworkPolicy",
                "StatefulSet",
                "PodDisruptionBudget",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "NetworkPolicy",
                "Service",
                "Service",
                "Service",
                "Deployment",
                "DaemonSet",
                "PodDisruptionBudget",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "NetworkPolicy",
                "Service",
                "Deployment"
            ]
        );
    }

    #[test]
    fn the_kodo_gateways_are_owned_and_applied_before_discovery_when_the_layout_keeps_them() {
        let layout = KodoLayout {
            gateway_replicas: Some(3),
            ..KodoLayout::default()
        };
        let objs = Children::render(&owner(), &spec(), &inputs(), "img", &layout).in_apply_order();
        assert_eq!(objs.len(), 25);
        let at = |name: &str| {
            objs.iter()
                .position(|o| o["metadata"]["name"] == name && o["kind"] != "Service")
                .unwrap()
        };
        assert!(at("queue-kodo-gateway") < at("queue-discovery"));
        for o in &objs {
            assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        }
    }

    #[test]
    fn broker_selector_is_stable_label_text() {
        assert_eq!(
            broker_selector("q"),
            "app.kubernetes.io/component=broker,app.kubernetes.io/instance=q,app.kubernetes.io/name=rustqueue"
        );
    }
}
