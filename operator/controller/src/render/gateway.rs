//! The producer gateway: the DaemonSet `<n>-gateway` running `rustqueue-gateway` (an NSQ TCP
//! tunnel and an HTTP forwarder onto the publish-ready brokers it learns from discovery,
//! docs/gateway.md) on every Node `proxyNodeSelector` selects, and its Service — the one
//! address producers are given (TCP 4150, HTTP 4151).
//!
//! [`gateway_pod_spec`] is the gateway Pod both front-ends share: the Kodo Gateways
//! (`kodo.rs`) give it their ports, switches and limits.
//!
//! Runtime objects, like discovery: applied even while a broker rollout is blocked, with the
//! image the brokers run, so publishing keeps working whatever the target image does.

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, PodSpec, Probe, ResourceRequirements, Service, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::gateway::env as gateway_env;
use rustqueue_api::labels::{self, DISCOVERY_HTTP_PORT, GATEWAY_HTTP_PORT, GATEWAY_TCP_PORT, env};

use super::pod;
use super::{EffectiveLimits, Owner, match_labels, names, pod_template, selector_labels};

/// Seconds the gateway lets open requests and tunnels finish after SIGTERM.
const SHUTDOWN_GRACE_SECONDS: i64 = 30;

/// The gateway DaemonSet, running `image`.
pub fn gateway_daemon_set(owner: &Owner<'_>, spec: &RustQueueSpec, image: &str) -> DaemonSet {
    let n = owner.name;
    let component = labels::COMPONENT_GATEWAY;
    DaemonSet {
        metadata: owner.metadata(&names::gateway(n), labels::COMPONENT_GATEWAY),
        spec: DaemonSetSpec {
            selector: match_labels(selector_labels(n, component)),
            // A new gateway Pod starts beside the old one on its Node and the old one stops only
            // once the new one is Ready: a Node never goes without a gateway during a rollout.
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: pod_template(n, component, pod_spec(spec, n, image)),
            ..DaemonSetSpec::default()
        },
        ..DaemonSet::default()
    }
}

/// What a gateway container differs in between the standard and the Kodo gateway; the rest
/// (the binary, the listen addresses on the Pod IP, discovery, no API token, the security
/// settings, `proxyNodeSelector`) [`gateway_pod_spec`] writes once for both.
pub(super) struct GatewayContainer<'a> {
    /// The cluster's spec (pull policy, node selector).
    pub spec: &'a RustQueueSpec,
    /// The image.
    pub image: &'a str,
    /// The container ports.
    pub ports: Vec<ContainerPort>,
    /// The producer TCP port (`$(POD_IP):<port>`).
    pub tcp_port: u16,
    /// The HTTP port (`$(POD_IP):<port>`).
    pub http_port: u16,
    /// `RUSTQUEUE_DISCOVERY_URLS`.
    pub discovery_urls: String,
    /// Field env before `POD_IP` (the Kodo gateway's `POD_NAME`).
    pub identity_env: Vec<EnvVar>,
    /// The mode's switches, before the listen addresses.
    pub mode_env: Vec<EnvVar>,
    /// Limits and grace, after the discovery URLs.
    pub limits_env: Vec<EnvVar>,
    /// Readiness and liveness.
    pub probes: (Probe, Probe),
    /// CPU and memory requests.
    pub resources: ResourceRequirements,
    /// The Pod's termination grace (the gateway's own grace plus time to exit).
    pub termination_grace_seconds: i64,
}

/// The gateway Pod: talks to discovery and the brokers only, so no API token, nothing to
/// write; its listeners bind the Pod IP, not 0.0.0.0: where Pods share a network namespace
/// (the testbed) a wildcard bind would take the brokers' ports (docs/e2e.md).
pub(super) fn gateway_pod_spec(c: GatewayContainer<'_>) -> PodSpec {
    let mut env = c.identity_env;
    env.push(pod::field_env(env::POD_IP, "status.podIP"));
    env.extend(c.mode_env);
    env.extend([
        pod::env(
            gateway_env::TCP_ADDRESS,
            format!("$(POD_IP):{}", c.tcp_port),
        ),
        pod::env(
            gateway_env::HTTP_ADDRESS,
            format!("$(POD_IP):{}", c.http_port),
        ),
        pod::env(gateway_env::DISCOVERY_URLS, c.discovery_urls),
        pod::env(rustqueue_api::telemetry::LOG_FORMAT_ENV, "json"),
    ]);
    env.extend(c.limits_env);
    let (readiness, liveness) = c.probes;
    PodSpec {
        automount_service_account_token: Some(false),
        termination_grace_period_seconds: Some(c.termination_grace_seconds),
        node_selector: (!c.spec.proxy_node_selector.is_empty())
            .then(|| c.spec.proxy_node_selector.clone()),
        security_context: Some(pod::pod_security()),
        containers: vec![Container {
            name: "gateway".into(),
            image: Some(c.image.into()),
            image_pull_policy: Some(c.spec.image_pull_policy.clone()),
            command: Some(vec!["rustqueue-gateway".into()]),
            ports: Some(c.ports),
            env: Some(env),
            readiness_probe: Some(readiness),
            liveness_probe: Some(liveness),
            resources: Some(c.resources),
            security_context: Some(pod::container_security()),
            ..Container::default()
        }],
        ..PodSpec::default()
    }
}

/// The standard gateway: tunnels and forwarding, the brokers' own limits.
fn pod_spec(spec: &RustQueueSpec, n: &str, image: &str) -> PodSpec {
    gateway_pod_spec(GatewayContainer {
        spec,
        image,
        ports: vec![
            pod::container_port("tcp", GATEWAY_TCP_PORT),
            pod::container_port("http", GATEWAY_HTTP_PORT),
        ],
        tcp_port: GATEWAY_TCP_PORT,
        http_port: GATEWAY_HTTP_PORT,
        discovery_urls: format!("http://{}:{DISCOVERY_HTTP_PORT}", names::discovery(n)),
        identity_env: Vec::new(),
        mode_env: Vec::new(),
        limits_env: vec![
            pod::env(
                gateway_env::TCP_MAX_CONNECTION_AGE_SECONDS,
                spec.proxy_tcp_max_connection_age_seconds.to_string(),
            ),
            pod::env(
                gateway_env::SHUTDOWN_GRACE_SECONDS,
                SHUTDOWN_GRACE_SECONDS.to_string(),
            ),
            // the brokers' own limits, so the gateway refuses what they would refuse
            pod::env(
                gateway_env::MAX_MESSAGE_BYTES,
                spec.max_message_bytes.to_string(),
            ),
            pod::env(
                gateway_env::MAX_BODY_BYTES,
                EffectiveLimits::new(spec, 1).max_body_bytes.to_string(),
            ),
        ],
        probes: (
            pod::http_probe("/v1/health", 2, 2, 1),
            pod::http_probe("/ping", 10, 3, 2),
        ),
        resources: pod::requests("50m", "64Mi"),
        termination_grace_seconds: SHUTDOWN_GRACE_SECONDS + 15,
    })
}

/// `<n>-gateway`: the producers' address (TCP 4150, HTTP 4151).
pub fn gateway_service(owner: &Owner<'_>) -> Service {
    Service {
        metadata: owner.metadata(&names::gateway(owner.name), labels::COMPONENT_GATEWAY),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(owner.name, labels::COMPONENT_GATEWAY)),
            ports: Some(vec![
                pod::service_port("tcp", GATEWAY_TCP_PORT),
                pod::service_port("http", GATEWAY_HTTP_PORT),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::*;

    fn env_of(d: &DaemonSet) -> BTreeMap<String, String> {
        let pod = d.spec.clone().template.spec.unwrap();
        pod.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn the_gateway_runs_the_given_image_against_the_discovery_service_without_a_token() {
        let mut s = spec();
        s.proxy_tcp_max_connection_age_seconds = 2;
        let d = gateway_daemon_set(&owner(), &s, "rustqueue:running");
        assert_eq!(d.metadata.name.as_deref(), Some("queue-gateway"));
        let env = env_of(&d);
        assert_eq!(
            env["RUSTQUEUE_DISCOVERY_URLS"],
            "http://queue-discovery:4161"
        );
        assert_eq!(env["RUSTQUEUE_GATEWAY_TCP_ADDRESS"], "$(POD_IP):4150");
        assert_eq!(env["RUSTQUEUE_GATEWAY_HTTP_ADDRESS"], "$(POD_IP):4151");
        assert_eq!(
            env["RUSTQUEUE_LOG_FORMAT"], "json",
            "a log pipeline reads JSON lines"
        );
        let order: Vec<String> = d.spec.template.spec.clone().unwrap().containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        let at = |n: &str| order.iter().position(|e| e == n).unwrap();
        assert!(
            at("POD_IP") < at("RUSTQUEUE_GATEWAY_TCP_ADDRESS"),
            "$(POD_IP) only expands when defined earlier"
        );
        assert_eq!(env["RUSTQUEUE_GATEWAY_TCP_MAX_CONNECTION_AGE_SECONDS"], "2");
        assert_eq!(env["RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES"], "20971520");
        assert_eq!(env["RUSTQUEUE_GATEWAY_MAX_BODY_BYTES"], "67108864");
        let ds = d.spec;
        let roll = ds.update_strategy.unwrap().rolling_update.unwrap();
        assert_eq!(roll.max_unavailable, Some(IntOrString::Int(0)));
        let pod = ds.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert!(pod.service_account_name.is_none(), "the default account");
        assert!(pod.node_selector.is_none(), "every Node by default");
        assert!(pod.volumes.is_none());
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("rustqueue:running"));
        assert_eq!(c.command, Some(vec!["rustqueue-gateway".to_string()]));
        let csc = c.security_context.clone().unwrap();
        assert_eq!(csc.read_only_root_filesystem, Some(true));
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        let ready = c.readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(ready.path.as_deref(), Some("/v1/health"));
        assert_eq!(ready.port, IntOrString::String("http".into()));
    }

    #[test]
    fn proxy_node_selector_places_the_gateway_pods() {
        let mut s = spec();
        s.proxy_node_selector = BTreeMap::from([("pool".into(), "edge".into())]);
        let d = gateway_daemon_set(&owner(), &s, "img");
        let pod = d.spec.template.spec.unwrap();
        assert_eq!(pod.node_selector.unwrap()["pool"], "edge");
    }

    #[test]
    fn the_service_selects_the_gateway_pods_on_their_named_ports() {
        let d = gateway_daemon_set(&owner(), &spec(), "img");
        let tmpl = d.spec.template;
        let pod_labels = tmpl.metadata.unwrap().labels.unwrap();
        let container_ports: Vec<String> = tmpl.spec.unwrap().containers[0]
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .filter_map(|p| p.name)
            .collect();
        let svc = gateway_service(&owner());
        assert_eq!(svc.metadata.name.as_deref(), Some("queue-gateway"));
        let s = svc.spec.unwrap();
        for (k, v) in s.selector.unwrap() {
            assert_eq!(pod_labels.get(&k), Some(&v), "{k}");
        }
        let ports = s.ports.unwrap();
        assert_eq!(
            ports.iter().map(|p| p.port).collect::<Vec<_>>(),
            [4150, 4151]
        );
        for p in ports {
            let IntOrString::String(target) = p.target_port.unwrap() else {
                panic!("target ports are named");
            };
            assert!(container_ports.contains(&target), "{target}");
        }
    }
}
