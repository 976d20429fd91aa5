//! The Kodo profile's objects (docs/kodo.md): the Gateway StatefulSet `<n>-kodo-gateway` (three
//! `rustqueue-gateway` Pods in Kodo mode), the Services `<n>-kodo-publish` (the one address
//! Kodo producers are given: three TCP identities and three stats shards) and
//! `<n>-kodo-gateways` (headless), the PDB `<n>-kodo-gateway-pdb` and the NetworkPolicy
//! `<n>-kodo-gateway-ingress`; and what the discovery publisher mode asks of discovery: its
//! Kodo env ([`discovery_env`]) and its soak ([`discovery_soak`]), which `discovery.rs` builds
//! into the Deployment with the mode label and the Service selector. The Gateway Pod is the
//! shared gateway Pod of `gateway.rs` with Kodo's ports, switches and limits.
//!
//! What to render is decided by `plan` (the cutover) and handed over as a [`KodoLayout`];
//! nothing here decides.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{EnvVar, PodSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::gateway::env as gateway_env;
use rustqueue_api::labels::{self, DISCOVERY_HTTP_PORT, env};
use sha2::{Digest, Sha256};

use super::gateway::{GatewayContainer, gateway_pod_spec};
use super::pod;
use super::{Owner, match_labels, pod_template, selector_labels};

// The Gateways' ports, limits and grace are the contract's: the gateway checks the same ones.
pub use rustqueue_api::gateway::kodo::{
    GATEWAYS, MAX_BODY_BYTES, MAX_INFLIGHT_BYTES, MAX_MESSAGE_BYTES, METRICS_PORT,
    SHUTDOWN_GRACE_SECONDS, STATS_PORTS, TCP_IDENTITY_PORTS, TCP_PORT, TERMINATION_GRACE_SECONDS,
};
/// How long a discovery rollout may make no progress beyond its soak before the Deployment
/// reports it stalled.
const PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// Soak of a new discovery Pod outside the profile.
pub const DEFAULT_MIN_READY_SECONDS: i32 = 30;

/// Which publishers discovery's `/nodes` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryMode {
    /// The brokers.
    Direct,
    /// The three Kodo Gateway identities.
    Kodo,
}

impl DiscoveryMode {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Kodo => "kodo",
        }
    }

    /// From a label value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "direct" => Some(Self::Direct),
            "kodo" => Some(Self::Kodo),
            _ => None,
        }
    }

    /// The other mode.
    pub fn other(self) -> Self {
        match self {
            Self::Direct => Self::Kodo,
            Self::Kodo => Self::Direct,
        }
    }
}

/// What `plan` decided about the Kodo objects and the discovery mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KodoLayout {
    /// Replicas of the Gateway StatefulSet; `None`: no Gateway object is rendered (the profile
    /// is off and nothing is retained).
    pub gateway_replicas: Option<i32>,
    /// Mode of the discovery Pod template.
    pub discovery_mode: DiscoveryMode,
    /// Mode the discovery Service selects; `None`: no mode in the selector (while unlabeled
    /// Pods are being adopted).
    pub route: Option<DiscoveryMode>,
    /// `minReadySeconds` of the discovery Deployment.
    pub discovery_min_ready_seconds: i32,
}

impl Default for KodoLayout {
    /// The profile off on a cluster that never had it.
    fn default() -> Self {
        Self {
            gateway_replicas: None,
            discovery_mode: DiscoveryMode::Direct,
            route: Some(DiscoveryMode::Direct),
            discovery_min_ready_seconds: DEFAULT_MIN_READY_SECONDS,
        }
    }
}

/// Names of the Kodo objects of RustQueue `n`.
pub mod names {
    /// Gateway StatefulSet (Pods `<n>-kodo-gateway-0..2`).
    pub fn gateway(n: &str) -> String {
        format!("{n}-kodo-gateway")
    }
    /// The producers' Service.
    pub fn publish(n: &str) -> String {
        format!("{n}-kodo-publish")
    }
    /// Headless Service (the StatefulSet's serviceName).
    pub fn gateways(n: &str) -> String {
        format!("{n}-kodo-gateways")
    }
    /// Gateway PDB.
    pub fn pdb(n: &str) -> String {
        format!("{n}-kodo-gateway-pdb")
    }
    /// Gateway NetworkPolicy.
    pub fn network_policy(n: &str) -> String {
        format!("{n}-kodo-gateway-ingress")
    }
    /// What discovery in Kodo mode advertises: the publish Service's DNS name.
    pub fn gateway_address(n: &str, ns: &str) -> String {
        format!("{}.{ns}.svc", publish(n))
    }
}

/// The Gateway objects of one RustQueue.
#[derive(Debug, Clone, PartialEq)]
pub struct KodoObjects {
    /// `<n>-kodo-gateway`.
    pub stateful_set: StatefulSet,
    /// `<n>-kodo-publish`.
    pub publish_service: Service,
    /// `<n>-kodo-gateways`.
    pub headless_service: Service,
    /// `<n>-kodo-gateway-pdb`.
    pub pdb: PodDisruptionBudget,
    /// `<n>-kodo-gateway-ingress`.
    pub network_policy: NetworkPolicy,
}

impl KodoObjects {
    /// All Gateway objects, `replicas` Gateways running `image`.
    pub fn render(owner: &Owner<'_>, spec: &RustQueueSpec, image: &str, replicas: i32) -> Self {
        Self {
            stateful_set: gateway_stateful_set(owner, spec, image, replicas),
            publish_service: publish_service(owner),
            headless_service: headless_service(owner),
            pdb: gateway_pdb(owner),
            network_policy: gateway_network_policy(owner, spec),
        }
    }
}

fn component_labels(n: &str) -> BTreeMap<String, String> {
    selector_labels(n, labels::COMPONENT_KODO_GATEWAY)
}

/// The revision every Gateway Pod carries (annotation `rustqueue.io/revision`): a hash of its
/// Pod spec, so `plan` knows a Ready Pod runs what was rendered now, not an older template.
pub fn gateway_revision(owner: &Owner<'_>, spec: &RustQueueSpec, image: &str) -> String {
    revision_of(&kodo_gateway_pod_spec(owner, spec, image))
}

fn revision_of(pod: &PodSpec) -> String {
    let json = serde_json::to_string(pod).expect("a PodSpec serializes");
    hex::encode(&Sha256::digest(json.as_bytes())[..16])
}

/// `<n>-kodo-gateway`: `replicas` Gateways (0..2 by ordinal), started in parallel, replaced one
/// at a time.
pub fn gateway_stateful_set(
    owner: &Owner<'_>,
    spec: &RustQueueSpec,
    image: &str,
    replicas: i32,
) -> StatefulSet {
    let n = owner.name;
    let pod = kodo_gateway_pod_spec(owner, spec, image);
    let mut template = pod_template(n, labels::COMPONENT_KODO_GATEWAY, pod.clone());
    if let Some(m) = template.metadata.as_mut() {
        m.annotations = Some(BTreeMap::from([(
            labels::REVISION_ANNOTATION.to_string(),
            revision_of(&pod),
        )]));
    }
    StatefulSet {
        metadata: owner.metadata(&names::gateway(n), labels::COMPONENT_KODO_GATEWAY),
        spec: StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(names::gateways(n)),
            pod_management_policy: Some("Parallel".into()),
            selector: match_labels(component_labels(n)),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..StatefulSetUpdateStrategy::default()
            }),
            template,
            ..StatefulSetSpec::default()
        },
        ..StatefulSet::default()
    }
}

fn metrics_probe(
    path: &str,
    period: i32,
    failures: i32,
    timeout: i32,
) -> k8s_openapi::api::core::v1::Probe {
    let mut p = pod::http_probe(path, period, failures, timeout);
    if let Some(h) = p.http_get.as_mut() {
        h.port = IntOrString::String("metrics".into());
    }
    p
}

/// The Kodo Gateway Pod: the shared gateway Pod ([`gateway_pod_spec`]) with the three stats
/// ports and the probe port, Kodo mode on, `POD_NAME` for the ordinal (the shard), and the
/// contract's limits and grace.
fn kodo_gateway_pod_spec(owner: &Owner<'_>, spec: &RustQueueSpec, image: &str) -> PodSpec {
    let mut ports = vec![pod::container_port("tcp", TCP_PORT)];
    ports.extend(
        STATS_PORTS
            .iter()
            .enumerate()
            .map(|(k, p)| pod::container_port(&stats_port_name(k), *p)),
    );
    ports.push(pod::container_port("metrics", METRICS_PORT));
    gateway_pod_spec(GatewayContainer {
        spec,
        image,
        ports,
        tcp_port: TCP_PORT,
        http_port: STATS_PORTS[0],
        discovery_urls: format!(
            "http://{}.{}.svc:{DISCOVERY_HTTP_PORT}",
            super::names::discovery(owner.name),
            owner.namespace
        ),
        identity_env: vec![pod::field_env(env::POD_NAME, "metadata.name")],
        mode_env: vec![
            pod::env(gateway_env::KODO_COMPATIBILITY_ENABLED, "true"),
            pod::env(gateway_env::KODO_CLEANUP_ENABLED, "false"),
        ],
        limits_env: vec![
            pod::env(
                gateway_env::MAX_MESSAGE_BYTES,
                MAX_MESSAGE_BYTES.to_string(),
            ),
            pod::env(gateway_env::MAX_BODY_BYTES, MAX_BODY_BYTES.to_string()),
            pod::env(
                gateway_env::MAX_INFLIGHT_BYTES,
                MAX_INFLIGHT_BYTES.to_string(),
            ),
            pod::env(
                gateway_env::SHUTDOWN_GRACE_SECONDS,
                SHUTDOWN_GRACE_SECONDS.to_string(),
            ),
        ],
        probes: (
            metrics_probe("/v1/health", 2, 2, 1),
            metrics_probe("/ping", 10, 3, 2),
        ),
        resources: pod::requests("100m", "256Mi"),
        termination_grace_seconds: TERMINATION_GRACE_SECONDS,
    })
}

fn stats_port_name(k: usize) -> String {
    if k == 0 {
        "http".into()
    } else {
        format!("stats-{k}")
    }
}

fn port(name: &str, port: u16, target: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: port.into(),
        target_port: Some(IntOrString::Int(target.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// `<n>-kodo-publish`: TCP identities 4150/4152/4153 (all onto a Gateway's 4150) and the
/// `/stats` shards 4151/4154/4155 — what discovery's `/nodes` lists in Kodo mode.
pub fn publish_service(owner: &Owner<'_>) -> Service {
    let mut ports: Vec<ServicePort> = TCP_IDENTITY_PORTS
        .iter()
        .enumerate()
        .map(|(k, p)| port(&format!("tcp-{k}"), *p, TCP_PORT))
        .collect();
    ports.extend(
        STATS_PORTS
            .iter()
            .enumerate()
            .map(|(k, p)| port(&format!("http-{k}"), *p, *p)),
    );
    Service {
        metadata: owner.metadata(&names::publish(owner.name), labels::COMPONENT_KODO_GATEWAY),
        spec: Some(ServiceSpec {
            selector: Some(component_labels(owner.name)),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `<n>-kodo-gateways`: stable Pod DNS names for the StatefulSet.
pub fn headless_service(owner: &Owner<'_>) -> Service {
    Service {
        metadata: owner.metadata(&names::gateways(owner.name), labels::COMPONENT_KODO_GATEWAY),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(component_labels(owner.name)),
            ports: Some(vec![
                port("tcp", TCP_PORT, TCP_PORT),
                port("metrics", METRICS_PORT, METRICS_PORT),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `<n>-kodo-gateway-pdb`: a node drain takes at most one Gateway at a time.
pub fn gateway_pdb(owner: &Owner<'_>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owner.metadata(&names::pdb(owner.name), labels::COMPONENT_KODO_GATEWAY),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(match_labels(component_labels(owner.name))),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

/// `<n>-kodo-gateway-ingress`: the producer ports 4150-4155 only from the Kodo Pods
/// (`allowedPodSelector`, in the namespaces of `allowedNamespaceSelector`, else this one);
/// the probe and metrics port 4160 from this namespace.
pub fn gateway_network_policy(owner: &Owner<'_>, spec: &RustQueueSpec) -> NetworkPolicy {
    let k = &spec.kodo_compatibility;
    let pods = if k.allowed_pod_selector.is_empty() {
        rustqueue_api::crd::KodoCompatibility::default().allowed_pod_selector
    } else {
        k.allowed_pod_selector.clone()
    };
    let producers = NetworkPolicyPeer {
        pod_selector: Some(match_labels(pods)),
        namespace_selector: (!k.allowed_namespace_selector.is_empty())
            .then(|| match_labels(k.allowed_namespace_selector.clone())),
        ..NetworkPolicyPeer::default()
    };
    let same_namespace = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    };
    NetworkPolicy {
        metadata: owner.metadata(
            &names::network_policy(owner.name),
            labels::COMPONENT_KODO_GATEWAY,
        ),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(component_labels(owner.name))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: Some(vec![producers]),
                    ports: Some(vec![NetworkPolicyPort {
                        protocol: Some("TCP".into()),
                        port: Some(IntOrString::Int(TCP_PORT.into())),
                        end_port: Some(STATS_PORTS[2].into()),
                    }]),
                },
                NetworkPolicyIngressRule {
                    from: Some(vec![same_namespace]),
                    ports: Some(vec![NetworkPolicyPort {
                        protocol: Some("TCP".into()),
                        port: Some(IntOrString::Int(METRICS_PORT.into())),
                        end_port: None,
                    }]),
                },
            ]),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// Discovery's soak for `layout`, and the progress deadline the API server then requires
/// (above `minReadySeconds`).
pub fn discovery_soak(layout: &KodoLayout) -> (i32, i32) {
    let soak = layout.discovery_min_ready_seconds;
    (soak, soak.saturating_add(PROGRESS_DEADLINE_SECONDS))
}

/// The env discovery's Pods get in `layout`: Kodo mode's switches and the address it
/// advertises in `/nodes`, or nothing in direct mode.
pub fn discovery_env(owner: &Owner<'_>, layout: &KodoLayout) -> Vec<EnvVar> {
    if layout.discovery_mode != DiscoveryMode::Kodo {
        return Vec::new();
    }
    vec![
        pod::env(gateway_env::KODO_COMPATIBILITY_ENABLED, "true"),
        pod::env(gateway_env::KODO_CLEANUP_ENABLED, "false"),
        pod::env(
            gateway_env::KODO_GATEWAY_ADDRESS,
            names::gateway_address(owner.name, owner.namespace),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{discovery_deployment, discovery_service};
    use super::*;
    use rustqueue_api::labels::DISCOVERY_PUBLISHER_MODE;

    fn env_of(s: &PodSpec) -> BTreeMap<String, String> {
        s.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| {
                let v = e
                    .value
                    .unwrap_or_else(|| e.value_from.unwrap().field_ref.unwrap().field_path);
                (e.name, v)
            })
            .collect()
    }

    #[test]
    fn the_gateways_are_three_kodo_mode_pods_with_the_contract_env_and_ports() {
        let o = KodoObjects::render(&owner(), &spec(), "rustqueue:running", 3);
        let sts = o.stateful_set;
        assert_eq!(sts.metadata.name.as_deref(), Some("queue-kodo-gateway"));
        let s = sts.spec;
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.service_name.as_deref(), Some("queue-kodo-gateways"));
        let tmpl = s.template;
        let rev = tmpl
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[labels::REVISION_ANNOTATION]
            .clone();
        assert_eq!(
            rev,
            gateway_revision(&owner(), &spec(), "rustqueue:running")
        );
        assert_ne!(rev, gateway_revision(&owner(), &spec(), "rustqueue:other"));
        let pod = tmpl.spec.unwrap();
        assert_eq!(pod.termination_grace_period_seconds, Some(75));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let env = env_of(&pod);
        assert_eq!(env["POD_NAME"], "metadata.name");
        assert_eq!(env["RUSTQUEUE_KODO_COMPATIBILITY_ENABLED"], "true");
        assert_eq!(env["RUSTQUEUE_KODO_CLEANUP_ENABLED"], "false");
        assert_eq!(env["RUSTQUEUE_GATEWAY_TCP_ADDRESS"], "$(POD_IP):4150");
        assert_eq!(env["RUSTQUEUE_GATEWAY_HTTP_ADDRESS"], "$(POD_IP):4151");
        assert_eq!(
            env["RUSTQUEUE_DISCOVERY_URLS"],
            "http://queue-discovery.ns.svc:4161"
        );
        assert_eq!(env["RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES"], "104857600");
        assert_eq!(env["RUSTQUEUE_GATEWAY_MAX_BODY_BYTES"], "134217728");
        assert_eq!(env["RUSTQUEUE_GATEWAY_MAX_INFLIGHT_BYTES"], "536870912");
        let c = &pod.containers[0];
        assert_eq!(c.command, Some(vec!["rustqueue-gateway".to_string()]));
        assert_eq!(c.image.as_deref(), Some("rustqueue:running"));
        let ports: Vec<i32> = c
            .ports
            .clone()
            .unwrap()
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [4150, 4151, 4154, 4155, 4160]);
        let ready = c.readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(ready.path.as_deref(), Some("/v1/health"));
        assert_eq!(ready.port, IntOrString::String("metrics".into()));
        let live = c.liveness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(live.path.as_deref(), Some("/ping"));
    }

    #[test]
    fn the_publish_service_maps_three_identities_and_three_shards_onto_the_gateways() {
        let o = KodoObjects::render(&owner(), &spec(), "img", 3);
        let pod_labels = o
            .stateful_set
            .spec
            .template
            .metadata
            .unwrap()
            .labels
            .unwrap();
        let s = o.publish_service.spec.unwrap();
        assert_eq!(
            o.publish_service.metadata.name.as_deref(),
            Some("queue-kodo-publish")
        );
        for (k, v) in s.selector.unwrap() {
            assert_eq!(pod_labels.get(&k), Some(&v), "{k}");
        }
        let ports: Vec<(i32, IntOrString)> = s
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.port, p.target_port.unwrap()))
            .collect();
        let i = IntOrString::Int;
        assert_eq!(
            ports,
            [
                (4150, i(4150)),
                (4152, i(4150)),
                (4153, i(4150)),
                (4151, i(4151)),
                (4154, i(4154)),
                (4155, i(4155))
            ]
        );
        let h = o.headless_service.spec.unwrap();
        assert_eq!(h.cluster_ip.as_deref(), Some("None"));
        assert_eq!(
            o.pdb.spec.unwrap().max_unavailable,
            Some(IntOrString::Int(1))
        );
        assert_eq!(
            o.pdb.metadata.name.as_deref(),
            Some("queue-kodo-gateway-pdb")
        );
    }

    #[test]
    fn only_the_kodo_pods_reach_the_producer_ports() {
        let mut s = spec();
        let p = gateway_network_policy(&owner(), &s).spec.unwrap();
        let rules = p.ingress.unwrap();
        let producers = &rules[0];
        let from = &producers.from.as_ref().unwrap()[0];
        assert_eq!(
            from.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/name"],
            "kodo"
        );
        assert!(
            from.namespace_selector.is_none(),
            "same namespace by default"
        );
        let ports = &producers.ports.as_ref().unwrap()[0];
        assert_eq!(ports.port, Some(IntOrString::Int(4150)));
        assert_eq!(ports.end_port, Some(4155));
        let metrics = &rules[1].ports.as_ref().unwrap()[0];
        assert_eq!(metrics.port, Some(IntOrString::Int(4160)));
        s.kodo_compatibility.allowed_namespace_selector =
            BTreeMap::from([("team".into(), "kodo".into())]);
        s.kodo_compatibility.allowed_pod_selector.clear();
        let p = gateway_network_policy(&owner(), &s).spec.unwrap();
        let from = &p.ingress.unwrap()[0].from.clone().unwrap()[0];
        assert_eq!(
            from.namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["team"],
            "kodo"
        );
        assert_eq!(
            from.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/name"],
            "kodo",
            "an empty selector falls back to the default"
        );
    }

    #[test]
    fn discovery_carries_the_mode_label_and_kodo_env_and_the_service_selects_one_mode() {
        let layout = KodoLayout {
            gateway_replicas: Some(3),
            discovery_mode: DiscoveryMode::Kodo,
            route: Some(DiscoveryMode::Direct),
            discovery_min_ready_seconds: 660,
        };
        let d = discovery_deployment(&owner(), &spec(), "queue-auth", "img", &layout);
        let s = d.spec;
        assert_eq!(s.min_ready_seconds, Some(660));
        assert_eq!(
            s.progress_deadline_seconds,
            Some(1260),
            "the API server wants it above minReadySeconds"
        );
        assert!(
            !s.selector
                .match_labels
                .unwrap()
                .contains_key(DISCOVERY_PUBLISHER_MODE),
            "the Deployment selector is immutable"
        );
        assert_eq!(
            s.template.metadata.unwrap().labels.unwrap()[DISCOVERY_PUBLISHER_MODE],
            "kodo"
        );
        let env = env_of(&s.template.spec.unwrap());
        assert_eq!(env["RUSTQUEUE_KODO_COMPATIBILITY_ENABLED"], "true");
        assert_eq!(env["RUSTQUEUE_KODO_CLEANUP_ENABLED"], "false");
        assert_eq!(
            env["RUSTQUEUE_KODO_GATEWAY_ADDRESS"],
            "queue-kodo-publish.ns.svc"
        );
        let svc = discovery_service(&owner(), &layout);
        assert_eq!(
            svc.spec.unwrap().selector.unwrap()[DISCOVERY_PUBLISHER_MODE],
            "direct"
        );

        let direct = KodoLayout::default();
        let d = discovery_deployment(&owner(), &spec(), "queue-auth", "img", &direct);
        let s = d.spec;
        assert_eq!(s.min_ready_seconds, Some(30));
        let env = env_of(&s.template.spec.unwrap());
        assert!(!env.contains_key("RUSTQUEUE_KODO_COMPATIBILITY_ENABLED"));
        let adopting = KodoLayout {
            route: None,
            ..KodoLayout::default()
        };
        let svc = discovery_service(&owner(), &adopting);
        assert!(
            !svc.spec
                .unwrap()
                .selector
                .unwrap()
                .contains_key(DISCOVERY_PUBLISHER_MODE)
        );
    }
}
