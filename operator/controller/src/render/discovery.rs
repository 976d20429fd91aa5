//! Discovery: the Deployment `<n>-discovery` running `rustqueue-discovery` (nsqlookupd's HTTP
//! API built from the brokers' EndpointSlices and registries, docs/discovery.md), its Service
//! on port 4161 (what consumers give as their lookupd address) and its PDB.
//!
//! These are runtime objects: they are applied even while a broker rollout is blocked, with the
//! image the brokers run (see `plan`), so lookups keep working whatever the target image does.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, Service, ServiceSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::labels::{self, DISCOVERY_HTTP_PORT, DISCOVERY_PUBLISHER_MODE, env};

use super::kodo::{self, KodoLayout};
use super::pod;
use super::{Owner, match_labels, names, pod_template, selector_labels};

/// Where the registry token is mounted; the only key of the auth Secret discovery sees.
const TOKEN_DIR: &str = "/run/secrets/rustqueue";
const TOKEN_KEY: &str = "registry-token";
/// The discovery Deployment, running `image` in the publisher mode and with the soak
/// `layout` gives (the Pods carry the mode label; the selector stays the component's, it is
/// immutable: only the Service selector tells the modes apart).
pub fn discovery_deployment(
    owner: &Owner<'_>,
    spec: &RustQueueSpec,
    auth_secret: &str,
    image: &str,
    layout: &KodoLayout,
) -> Deployment {
    let n = owner.name;
    let component = labels::COMPONENT_DISCOVERY;
    let mut pod = pod_spec(spec, n, auth_secret, image);
    if let Some(c) = pod.containers.first_mut() {
        c.env
            .get_or_insert_with(Vec::new)
            .extend(kodo::discovery_env(owner, layout));
    }
    let mut template = pod_template(n, component, pod);
    if let Some(m) = template.metadata.as_mut() {
        m.labels.get_or_insert_with(BTreeMap::new).insert(
            DISCOVERY_PUBLISHER_MODE.into(),
            layout.discovery_mode.as_str().into(),
        );
    }
    let (min_ready, progress_deadline) = kodo::discovery_soak(layout);
    Deployment {
        metadata: owner.metadata(&names::discovery(n), labels::COMPONENT_DISCOVERY),
        spec: DeploymentSpec {
            replicas: Some(spec.discovery_replicas.max(2)),
            min_ready_seconds: Some(min_ready),
            progress_deadline_seconds: Some(progress_deadline),
            selector: match_labels(selector_labels(n, component)),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::String("100%".into())),
                }),
            }),
            template,
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// Watches EndpointSlices as `<n>-runtime` (the only Pod of the instance that talks to the
/// API server, so the only one that gets a token); no fsGroup, nothing to write.
fn pod_spec(spec: &RustQueueSpec, n: &str, auth_secret: &str, image: &str) -> PodSpec {
    PodSpec {
        topology_spread_constraints: Some(pod::spread(selector_labels(
            n,
            labels::COMPONENT_DISCOVERY,
        ))),
        service_account_name: Some(names::runtime(n)),
        automount_service_account_token: Some(true),
        termination_grace_period_seconds: Some(30),
        security_context: Some(pod::pod_security()),
        containers: vec![Container {
            name: "discovery".into(),
            image: Some(image.into()),
            image_pull_policy: Some(spec.image_pull_policy.clone()),
            command: Some(vec!["rustqueue-discovery".into()]),
            ports: Some(vec![pod::container_port("http", DISCOVERY_HTTP_PORT)]),
            // the Pod IP, not 0.0.0.0: where Pods share a network namespace (the testbed) two
            // replicas would take each other's port (docs/e2e.md)
            env: Some(vec![
                pod::field_env(env::POD_NAMESPACE, "metadata.namespace"),
                pod::field_env(env::POD_IP, "status.podIP"),
                pod::env(
                    "RUSTQUEUE_DISCOVERY_ADDRESS",
                    format!("$(POD_IP):{DISCOVERY_HTTP_PORT}"),
                ),
                pod::env("RUSTQUEUE_BROKER_SERVICE", names::brokers_service(n)),
                pod::env(
                    "RUSTQUEUE_REGISTRY_TOKEN_FILE",
                    format!("{TOKEN_DIR}/{TOKEN_KEY}"),
                ),
                pod::env(rustqueue_api::telemetry::LOG_FORMAT_ENV, "json"),
            ]),
            volume_mounts: Some(vec![pod::mount("auth", TOKEN_DIR)]),
            readiness_probe: Some(pod::http_probe("/v1/health", 2, 2, 1)),
            liveness_probe: Some(pod::http_probe("/ping", 10, 3, 2)),
            resources: Some(pod::requests("50m", "64Mi")),
            security_context: Some(pod::container_security()),
            ..Container::default()
        }],
        volumes: Some(vec![pod::one_key_secret("auth", auth_secret, TOKEN_KEY)]),
        ..PodSpec::default()
    }
}

/// `<n>-discovery`: the lookupd address consumers are given.
///
/// It selects the Pods of one publisher mode, `layout.route`, never both; with no route (the
/// layout is still being adopted) it selects every discovery Pod.
pub fn discovery_service(owner: &Owner<'_>, layout: &KodoLayout) -> Service {
    let mut selector = selector_labels(owner.name, labels::COMPONENT_DISCOVERY);
    if let Some(route) = layout.route {
        selector.insert(DISCOVERY_PUBLISHER_MODE.into(), route.as_str().into());
    }
    Service {
        metadata: owner.metadata(&names::discovery(owner.name), labels::COMPONENT_DISCOVERY),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![pod::service_port("http", DISCOVERY_HTTP_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `<n>-discovery-pdb`: a node drain never takes the last discovery Pod.
pub fn discovery_pdb(owner: &Owner<'_>) -> PodDisruptionBudget {
    super::policy::pdb(
        owner,
        &names::discovery_pdb(owner.name),
        labels::COMPONENT_DISCOVERY,
        1,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn discovery_runs_at_least_two_replicas_of_the_given_image_with_only_the_registry_token() {
        let mut s = spec();
        s.discovery_replicas = 1; // refused by the CRD; the renderer still never goes below 2
        let d = discovery_deployment(
            &owner(),
            &s,
            "queue-auth",
            "rustqueue:running",
            &KodoLayout::default(),
        );
        let spec = d.spec;
        assert_eq!(spec.replicas, Some(2));
        let roll = spec.strategy.unwrap().rolling_update.unwrap();
        assert_eq!(roll.max_unavailable, Some(IntOrString::Int(0)));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("rustqueue:running"));
        assert_eq!(c.command, Some(vec!["rustqueue-discovery".to_string()]));
        let env: BTreeMap<String, Option<String>> = c
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect();
        assert_eq!(env["RUSTQUEUE_LOG_FORMAT"].as_deref(), Some("json"));
        let spread: Vec<_> = pod
            .topology_spread_constraints
            .clone()
            .unwrap()
            .into_iter()
            .map(|t| (t.topology_key, t.when_unsatisfiable, t.max_skew))
            .collect();
        assert_eq!(
            spread,
            [
                ("kubernetes.io/hostname".into(), "ScheduleAnyway".into(), 1),
                (
                    "topology.kubernetes.io/zone".into(),
                    "ScheduleAnyway".into(),
                    1
                )
            ],
            "replicas spread over Nodes, then zones"
        );
        assert_eq!(
            env["RUSTQUEUE_BROKER_SERVICE"].as_deref(),
            Some("queue-brokers")
        );
        assert_eq!(
            env["RUSTQUEUE_DISCOVERY_ADDRESS"].as_deref(),
            Some("$(POD_IP):4161")
        );
        assert_eq!(
            env["RUSTQUEUE_REGISTRY_TOKEN_FILE"].as_deref(),
            Some("/run/secrets/rustqueue/registry-token")
        );
        let items = pod.volumes.unwrap()[0]
            .secret
            .clone()
            .unwrap()
            .items
            .unwrap();
        assert_eq!(items.len(), 1, "only the registry token is projected");
        assert_eq!(items[0].key, "registry-token");
        assert_eq!(pod.automount_service_account_token, Some(true));
        let csc = c.security_context.clone().unwrap();
        assert_eq!(csc.read_only_root_filesystem, Some(true));
        assert!(pod.security_context.unwrap().fs_group.is_none());
        let ready = c.readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(ready.path.as_deref(), Some("/v1/health"));
    }

    #[test]
    fn the_service_and_pdb_select_the_discovery_pods_only() {
        let d = discovery_deployment(
            &owner(),
            &spec(),
            "queue-auth",
            "img",
            &KodoLayout::default(),
        );
        let pod_labels = d.spec.template.metadata.unwrap().labels.unwrap();
        let svc = discovery_service(
            &owner(),
            &KodoLayout {
                route: None,
                ..KodoLayout::default()
            },
        );
        assert_eq!(svc.metadata.name.as_deref(), Some("queue-discovery"));
        let s = svc.spec.unwrap();
        assert_eq!(s.ports.unwrap()[0].port, 4161);
        for (k, v) in s.selector.unwrap() {
            assert_eq!(pod_labels.get(&k), Some(&v), "{k}");
        }
        let pdb = discovery_pdb(&owner());
        assert_eq!(pdb.metadata.name.as_deref(), Some("queue-discovery-pdb"));
        let sel = pdb.spec.unwrap().selector.unwrap().match_labels.unwrap();
        assert_eq!(sel["app.kubernetes.io/component"], "discovery");
    }
}
