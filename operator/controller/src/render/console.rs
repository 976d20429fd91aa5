//! The console `<n>-console` (docs/console.md): `rustqueue-console` in a one-replica Deployment
//! (`Recreate`: it is the catalog's single writer), its Service on 4180, a ServiceAccount whose
//! Role reads the RustQueue, its Pods, claims and Events (and, with management, writes the
//! RustQueueTopic/RustQueueChannel catalog and records Events), and a NetworkPolicy that lets it be
//! reached on 4180 and reach only the brokers' HTTP port, discovery, the API server and DNS.
//!
//! A runtime object like discovery: it runs the runtime image, so a blocked rollout never
//! takes the console down with it. Rendered only while `spec.console.enabled`; the applier
//! deletes these objects when it is turned off.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, PodSpec, ResourceRequirements, Service, ServiceAccount, ServiceSpec,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustqueue_api::crd::{ConsoleResources, RustQueueSpec};
use rustqueue_api::labels::{
    self, BROKER_HTTP_PORT, CONSOLE_HTTP_PORT, DISCOVERY_HTTP_PORT, SECRETS_DIR, console_env as e,
    env,
};

use super::{Owner, match_labels, names, pod, pod_template, selector_labels};

/// The only key of the auth Secret the console sees.
const TOKEN_KEY: &str = "console-token";
/// Ports the API server may listen on (the `kubernetes` Service's 443, a control plane's 6443).
const API_SERVER_PORTS: [u16; 2] = [443, 6443];

/// The console's objects, all named `<n>-console`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleObjects {
    /// Its identity.
    pub service_account: ServiceAccount,
    /// What it may read (and, with management, write).
    pub role: Role,
    /// The Role bound to the ServiceAccount.
    pub role_binding: RoleBinding,
    /// Ingress on 4180; egress to the brokers, discovery, the API server and DNS.
    pub network_policy: NetworkPolicy,
    /// ClusterIP on 4180 (`http`).
    pub service: Service,
    /// One replica of `rustqueue-console`.
    pub deployment: Deployment,
}

impl ConsoleObjects {
    /// The console objects for `spec`, the Pod running `image` and mounting the auth Secret
    /// `auth_secret`; `None` when `spec.console.enabled` is false.
    pub fn render(
        owner: &Owner<'_>,
        spec: &RustQueueSpec,
        auth_secret: &str,
        image: &str,
    ) -> Option<Self> {
        spec.console.enabled.then(|| Self {
            service_account: service_account(owner),
            role: role(owner, spec.console_management_enabled),
            role_binding: role_binding(owner),
            network_policy: network_policy(owner),
            service: service(owner),
            deployment: deployment(owner, spec, auth_secret, image),
        })
    }
}

fn service_account(owner: &Owner<'_>) -> ServiceAccount {
    ServiceAccount {
        metadata: owner.metadata(&names::console(owner.name), labels::COMPONENT_CONSOLE),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const RECORD: &[&str] = &["create", "patch"];

/// `<n>-console` Role: its own RustQueue (by name), the Pods, claims and Events of the
/// namespace; with `management`, the catalog and the Events it records (core group).
pub fn role(owner: &Owner<'_>, management: bool) -> Role {
    let mut rules = vec![
        PolicyRule {
            resource_names: Some(vec![owner.name.into()]),
            ..rule(labels::GROUP, &["rustqueues"], &["get"])
        },
        rule("", &["pods", "persistentvolumeclaims", "events"], READ),
    ];
    if management {
        rules.extend([
            rule(
                labels::GROUP,
                &["rustqueuetopics", "rustqueuechannels"],
                WRITE,
            ),
            rule("", &["events"], RECORD),
        ]);
    }
    Role {
        metadata: owner.metadata(&names::console(owner.name), labels::COMPONENT_CONSOLE),
        rules: Some(rules),
    }
}

fn role_binding(owner: &Owner<'_>) -> RoleBinding {
    let name = names::console(owner.name);
    RoleBinding {
        metadata: owner.metadata(&name, labels::COMPONENT_CONSOLE),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: Some(owner.namespace.into()),
            ..Subject::default()
        }]),
    }
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(port.into())),
        ..NetworkPolicyPort::default()
    }
}

fn pods_of(owner: &Owner<'_>, component: &str) -> Vec<NetworkPolicyPeer> {
    vec![NetworkPolicyPeer {
        pod_selector: Some(match_labels(selector_labels(owner.name, component))),
        ..NetworkPolicyPeer::default()
    }]
}

/// `<n>-console`: ingress on 4180 from any namespace (port-forwards and proxies); egress to the
/// brokers' HTTP port, discovery, the API server and the cluster DNS, nothing else.
pub fn network_policy(owner: &Owner<'_>) -> NetworkPolicy {
    let any_namespace = vec![NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    }];
    let dns = |protocol: &str| NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(53)),
        ..NetworkPolicyPort::default()
    };
    let egress = vec![
        NetworkPolicyEgressRule {
            to: Some(pods_of(owner, labels::COMPONENT_BROKER)),
            ports: Some(vec![tcp(BROKER_HTTP_PORT)]),
        },
        NetworkPolicyEgressRule {
            to: Some(pods_of(owner, labels::COMPONENT_DISCOVERY)),
            ports: Some(vec![tcp(DISCOVERY_HTTP_PORT)]),
        },
        // the API server is no Pod a selector could name: its ports, to any address
        NetworkPolicyEgressRule {
            to: None,
            ports: Some(API_SERVER_PORTS.iter().map(|p| tcp(*p)).collect()),
        },
        NetworkPolicyEgressRule {
            to: Some(any_namespace.clone()),
            ports: Some(vec![dns("UDP"), dns("TCP")]),
        },
    ];
    NetworkPolicy {
        metadata: owner.metadata(&names::console(owner.name), labels::COMPONENT_CONSOLE),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(selector_labels(
                owner.name,
                labels::COMPONENT_CONSOLE,
            ))),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(any_namespace),
                ports: Some(vec![tcp(CONSOLE_HTTP_PORT)]),
            }]),
            egress: Some(egress),
        }),
    }
}

fn service(owner: &Owner<'_>) -> Service {
    Service {
        metadata: owner.metadata(&names::console(owner.name), labels::COMPONENT_CONSOLE),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(owner.name, labels::COMPONENT_CONSOLE)),
            ports: Some(vec![pod::service_port("http", CONSOLE_HTTP_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// One replica, `Recreate`: two consoles must never write the catalog at once.
fn deployment(
    owner: &Owner<'_>,
    spec: &RustQueueSpec,
    auth_secret: &str,
    image: &str,
) -> Deployment {
    let n = owner.name;
    Deployment {
        metadata: owner.metadata(&names::console(n), labels::COMPONENT_CONSOLE),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: match_labels(selector_labels(n, labels::COMPONENT_CONSOLE)),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            }),
            template: pod_template(
                n,
                labels::COMPONENT_CONSOLE,
                pod_spec(owner, spec, auth_secret, image),
            ),
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// Runs as `<n>-console` (it reads the API server), with only the console token mounted.
fn pod_spec(owner: &Owner<'_>, spec: &RustQueueSpec, auth_secret: &str, image: &str) -> PodSpec {
    PodSpec {
        service_account_name: Some(names::console(owner.name)),
        automount_service_account_token: Some(true),
        termination_grace_period_seconds: Some(30),
        security_context: Some(pod::pod_security()),
        containers: vec![Container {
            name: "console".into(),
            image: Some(image.into()),
            image_pull_policy: Some(spec.image_pull_policy.clone()),
            command: Some(vec!["rustqueue-console".into()]),
            ports: Some(vec![pod::container_port("http", CONSOLE_HTTP_PORT)]),
            env: Some(console_env(owner, spec)),
            volume_mounts: Some(vec![pod::mount("auth", SECRETS_DIR)]),
            readiness_probe: Some(pod::http_probe("/readyz", 2, 5, 1)),
            liveness_probe: Some(pod::http_probe("/healthz", 10, 3, 2)),
            resources: Some(resources(&spec.console.resources)),
            security_context: Some(pod::container_security()),
            ..Container::default()
        }],
        volumes: Some(vec![pod::one_key_secret("auth", auth_secret, TOKEN_KEY)]),
        ..PodSpec::default()
    }
}

/// The console's settings (docs/console.md); it binds its Pod IP, not 0.0.0.0, as discovery
/// does (Pods share a network namespace on the testbed, docs/e2e.md).
fn console_env(owner: &Owner<'_>, spec: &RustQueueSpec) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
    let c = &spec.console;
    vec![
        pod::field_env(env::POD_NAME, "metadata.name"),
        pod::field_env(env::POD_NAMESPACE, "metadata.namespace"),
        pod::field_env(env::POD_IP, "status.podIP"),
        pod::env(e::ADDRESS, format!("$(POD_IP):{CONSOLE_HTTP_PORT}")),
        pod::env(e::NAME, owner.name),
        pod::env(e::TOKEN_FILE, format!("{SECRETS_DIR}/{TOKEN_KEY}")),
        pod::env(e::POLL_SECONDS, c.poll_interval_seconds.to_string()),
        pod::env(e::HISTORY_MINUTES, c.history_minutes.to_string()),
        pod::env(
            e::CATALOG_REFRESH_SECONDS,
            c.catalog_refresh_seconds.to_string(),
        ),
        pod::env(e::BROKER_HTTP_PORT, BROKER_HTTP_PORT.to_string()),
        pod::env(
            e::MANAGEMENT_ENABLED,
            spec.console_management_enabled.to_string(),
        ),
        pod::env(
            e::MANAGEMENT_UNLOCK_SECONDS,
            c.management.unlock_seconds.to_string(),
        ),
        pod::env(
            e::TOMBSTONE_SECONDS,
            c.management.tombstone_seconds.to_string(),
        ),
        pod::env(rustqueue_api::telemetry::LOG_FORMAT_ENV, "json"),
    ]
}

fn resources(r: &ConsoleResources) -> ResourceRequirements {
    let pair = |cpu: Option<&String>, memory: Option<&String>| {
        let m: BTreeMap<String, Quantity> = [("cpu", cpu), ("memory", memory)]
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), Quantity(v?.clone()))))
            .collect();
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        requests: pair(Some(&r.cpu_request), Some(&r.memory_request)),
        limits: pair(r.cpu_limit.as_ref(), r.memory_limit.as_ref()),
        ..ResourceRequirements::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn objects(edit: impl FnOnce(&mut RustQueueSpec)) -> Option<ConsoleObjects> {
        let mut s = spec();
        edit(&mut s);
        ConsoleObjects::render(&owner(), &s, "queue-auth", "rustqueue:dev")
    }

    fn env_of(d: &Deployment) -> BTreeMap<String, String> {
        let c = &d.spec.template.spec.as_ref().unwrap().containers[0];
        c.env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect()
    }

    #[test]
    fn a_disabled_console_renders_nothing() {
        assert!(objects(|s| s.console.enabled = false).is_none());
    }

    #[test]
    fn the_console_runs_one_recreated_replica_with_only_the_console_token() {
        let d = objects(|_| {}).unwrap().deployment;
        assert_eq!(d.metadata.name.as_deref(), Some("queue-console"));
        assert_eq!(d.spec.replicas, Some(1));
        assert_eq!(
            d.spec.strategy.as_ref().unwrap().type_.as_deref(),
            Some("Recreate")
        );
        let pod = d.spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("queue-console"));
        let c = &pod.containers[0];
        assert_eq!(c.command, Some(vec!["rustqueue-console".to_string()]));
        assert_eq!(c.image.as_deref(), Some("rustqueue:dev"));
        let items = pod.volumes.as_ref().unwrap()[0]
            .secret
            .as_ref()
            .unwrap()
            .items
            .clone()
            .unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].key, "console-token");
        let mount = &c.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.mount_path, "/run/secrets/rustqueue");
        assert_eq!(mount.read_only, Some(true));
        let probe = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone()
        };
        assert_eq!(probe(&c.readiness_probe).as_deref(), Some("/readyz"));
        assert_eq!(probe(&c.liveness_probe).as_deref(), Some("/healthz"));
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
    }

    #[test]
    fn the_spec_reaches_the_console_environment() {
        let d = objects(|s| {
            s.console_management_enabled = true;
            s.console.poll_interval_seconds = 5;
            s.console.catalog_refresh_seconds = 60;
            s.console.history_minutes = 30;
            s.console.management.unlock_seconds = 600;
            s.console.management.tombstone_seconds = 120;
        })
        .unwrap()
        .deployment;
        let env = env_of(&d);
        for (k, v) in [
            ("RUSTQUEUE_CONSOLE_ADDRESS", "$(POD_IP):4180"),
            ("RUSTQUEUE_NAME", "queue"),
            (
                "RUSTQUEUE_CONSOLE_TOKEN_FILE",
                "/run/secrets/rustqueue/console-token",
            ),
            ("RUSTQUEUE_CONSOLE_POLL_SECONDS", "5"),
            ("RUSTQUEUE_CONSOLE_CATALOG_REFRESH_SECONDS", "60"),
            ("RUSTQUEUE_CONSOLE_HISTORY_MINUTES", "30"),
            ("RUSTQUEUE_BROKER_HTTP_PORT", "4151"),
            ("RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED", "true"),
            ("RUSTQUEUE_CONSOLE_MANAGEMENT_UNLOCK_SECONDS", "600"),
            ("RUSTQUEUE_CONSOLE_TOMBSTONE_SECONDS", "120"),
            ("RUSTQUEUE_LOG_FORMAT", "json"),
        ] {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        let off = env_of(&objects(|_| {}).unwrap().deployment);
        assert_eq!(off["RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED"], "false");
    }

    #[test]
    fn resources_default_to_requests_and_limits_and_a_null_limit_is_dropped() {
        let r = |edit: fn(&mut RustQueueSpec)| {
            let d = objects(edit).unwrap().deployment;
            d.spec.template.spec.unwrap().containers[0]
                .resources
                .clone()
                .unwrap()
        };
        let d = r(|_| {});
        assert_eq!(d.requests.unwrap()["memory"], Quantity("96Mi".into()));
        assert_eq!(d.limits.unwrap()["cpu"], Quantity("500m".into()));
        let no_cpu_limit = r(|s| s.console.resources.cpu_limit = None);
        let limits = no_cpu_limit.limits.unwrap();
        assert!(!limits.contains_key("cpu"));
        assert_eq!(limits["memory"], Quantity("256Mi".into()));
    }

    #[test]
    fn the_role_reads_only_its_own_rustqueue_and_writes_the_catalog_only_with_management() {
        let grants = |management: bool| -> Vec<(String, String, String)> {
            let mut out = Vec::new();
            for r in role(&owner(), management).rules.unwrap() {
                for g in r.api_groups.iter().flatten() {
                    for res in r.resources.iter().flatten() {
                        for v in &r.verbs {
                            out.push((g.clone(), res.clone(), v.clone()));
                        }
                    }
                }
            }
            out
        };
        let rules = role(&owner(), false).rules.unwrap();
        assert_eq!(rules[0].resource_names, Some(vec!["queue".to_string()]));
        assert_eq!(rules[0].verbs, ["get"]);
        let off = grants(false);
        assert!(off.iter().all(|(_, r, v)| r != "rustqueuetopics"
            && !["create", "patch", "update", "delete"].contains(&v.as_str())));
        let on = grants(true);
        for res in ["rustqueuetopics", "rustqueuechannels"] {
            for v in WRITE {
                assert!(
                    on.contains(&("rustqueue.io".into(), res.into(), v.to_string())),
                    "{res} {v}"
                );
            }
        }
        assert!(on.contains(&("".into(), "events".into(), "create".into())));
    }

    #[test]
    fn the_service_and_policy_open_4180_and_egress_reaches_only_what_the_console_calls() {
        let o = objects(|_| {}).unwrap();
        let svc = o.service.spec.unwrap();
        assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
        let port = &svc.ports.unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 4180));
        assert_eq!(
            svc.selector.unwrap()["app.kubernetes.io/component"],
            "console"
        );
        let p = o.network_policy.spec.unwrap();
        let ports = |ps: &Option<Vec<NetworkPolicyPort>>| -> Vec<IntOrString> {
            ps.iter().flatten().filter_map(|p| p.port.clone()).collect()
        };
        assert_eq!(
            ports(&p.ingress.unwrap()[0].ports),
            [IntOrString::Int(4180)]
        );
        let egress: Vec<Vec<IntOrString>> =
            p.egress.unwrap().iter().map(|r| ports(&r.ports)).collect();
        let i = IntOrString::Int;
        assert_eq!(
            egress,
            [
                vec![i(4151)],
                vec![i(4161)],
                vec![i(443), i(6443)],
                vec![i(53), i(53)]
            ]
        );
    }

    #[test]
    fn every_console_object_is_owned_and_named_for_the_console() {
        let o = objects(|_| {}).unwrap();
        let metas = [
            &o.service_account.metadata,
            &o.role.metadata,
            &o.role_binding.metadata,
            &o.network_policy.metadata,
            &o.service.metadata,
            &o.deployment.metadata,
        ];
        for m in metas {
            assert_eq!(m.name.as_deref(), Some("queue-console"));
            assert_eq!(m.owner_references.as_ref().unwrap()[0].uid, "uid-1");
            assert_eq!(
                m.labels.as_ref().unwrap()["app.kubernetes.io/component"],
                "console"
            );
        }
    }
}
