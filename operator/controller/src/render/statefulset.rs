//! The broker StatefulSet `<n>`: one broker per eligible Node, each on its own retained PVC.
//!
//! `OnDelete` because the operator, not the StatefulSet controller, decides when a broker may
//! be disrupted; PVCs are retained on delete and scale-down because they hold the only copy of
//! their messages. Listeners bind to the Pod IP (not 0.0.0.0) so several Pods can share a host
//! network namespace, as on the e2e testbed.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm,
    PodAntiAffinity, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rustqueue_api::contract::RESTORE_CONTAINER;
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::labels::{self, env};

use super::pod::{self, RUN_AS};
use super::{BrokerInputs, Owner, match_labels, names, pod_template_revision, selector_labels};

/// The broker StatefulSet.
pub fn stateful_set(
    owner: &Owner<'_>,
    spec: &RustQueueSpec,
    inputs: &BrokerInputs,
    toml: &str,
) -> StatefulSet {
    let n = owner.name;
    let selector = selector_labels(n, labels::COMPONENT_BROKER);
    let revision = pod_template_revision(spec, inputs, toml);
    StatefulSet {
        metadata: owner.metadata(&names::stateful_set(n), labels::COMPONENT_BROKER),
        spec: StatefulSetSpec {
            replicas: Some(inputs.replicas),
            service_name: Some(names::brokers_service(n)),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..StatefulSetUpdateStrategy::default()
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".into()),
                    when_scaled: Some("Retain".into()),
                },
            ),
            selector: match_labels(selector.clone()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(super::object_labels(n, labels::COMPONENT_BROKER)),
                    annotations: Some(BTreeMap::from([(
                        labels::REVISION_ANNOTATION.to_string(),
                        revision,
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(spec, inputs, toml, n)),
            },
            volume_claim_templates: Some(vec![data_claim(spec, inputs, selector)]),
            ..StatefulSetSpec::default()
        },
        ..StatefulSet::default()
    }
}

/// One broker per topology value, on eligible Nodes only, as [`RUN_AS`] with fsGroup so the
/// data volume is writable.
fn pod_spec(spec: &RustQueueSpec, inputs: &BrokerInputs, toml: &str, n: &str) -> PodSpec {
    let sched = &spec.broker_scheduling;
    let (volumes, input_mounts) = pod::broker_inputs(
        &names::config_map(n, toml),
        &inputs.auth_secret_name,
        spec.client_tls_secret_name.as_deref(),
        spec.tiering.as_ref().map(|t| &t.credentials_secret),
    );
    let mut security = pod::pod_security();
    security.fs_group = Some(RUN_AS);
    security.fs_group_change_policy = Some("OnRootMismatch".into());
    PodSpec {
        service_account_name: Some(names::runtime(n)),
        automount_service_account_token: Some(false),
        termination_grace_period_seconds: Some(45),
        node_selector: Some(node_selector(&spec.eligible_node_selector)),
        affinity: Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(match_labels(selector_labels(
                        n,
                        labels::COMPONENT_BROKER,
                    ))),
                    topology_key: sched.topology_key.clone(),
                    ..PodAffinityTerm::default()
                }]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        }),
        tolerations: Some(sched.tolerations.iter().map(toleration).collect()),
        priority_class_name: sched.priority_class_name.clone(),
        security_context: Some(security),
        init_containers: spec
            .tiering
            .as_ref()
            .map(|_| vec![restore_container(spec, n, input_mounts.clone())]),
        containers: vec![broker_container(spec, n, input_mounts)],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// `rustqueued` with listeners on the Pod IP, the data volume and the read-only inputs.
fn broker_container(spec: &RustQueueSpec, n: &str, input_mounts: Vec<VolumeMount>) -> Container {
    let port = pod::container_port;
    let mut mounts = vec![VolumeMount {
        name: "data".into(),
        mount_path: labels::DATA_PATH.into(),
        ..VolumeMount::default()
    }];
    mounts.extend(input_mounts);
    Container {
        name: "broker".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        command: Some(vec!["rustqueued".into()]),
        args: Some(pod::config_args()),
        ports: Some(vec![
            port("tcp", labels::BROKER_TCP_PORT),
            port("http", labels::BROKER_HTTP_PORT),
        ]),
        env: Some(broker_env(spec, n)),
        volume_mounts: Some(mounts),
        readiness_probe: Some(pod::http_probe("/v1/health", 2, 2, 1)),
        liveness_probe: Some(pod::http_probe("/ping", 10, 3, 2)),
        resources: Some(resources(spec)),
        security_context: Some(pod::container_security()),
        ..Container::default()
    }
}

/// With tiering, before every broker start: `rustqueued storage restore --from-bucket
/// --if-empty` on the data volume, as the broker (same image, config, credentials, node id
/// from `POD_NAME`). A volume holding data, or an empty one whose node has nothing in the
/// bucket (a new broker), is left alone at once; an empty volume of a node the bucket knows (a
/// replaced PVC) is restored before the broker opens it (docs/tiering.md). Its summary is the
/// termination message the operator reads; a failure's log tail is the message instead.
fn restore_container(spec: &RustQueueSpec, n: &str, input_mounts: Vec<VolumeMount>) -> Container {
    let mut mounts = vec![VolumeMount {
        name: "data".into(),
        mount_path: labels::DATA_PATH.into(),
        ..VolumeMount::default()
    }];
    mounts.extend(input_mounts);
    let mut args = pod::config_args();
    args.extend(
        [
            "storage",
            "restore",
            "--from-bucket",
            "--if-empty",
            "--summary-file",
            RESTORE_SUMMARY,
        ]
        .map(String::from),
    );
    Container {
        name: RESTORE_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        command: Some(vec!["rustqueued".into()]),
        args: Some(args),
        env: Some(broker_env(spec, n)),
        volume_mounts: Some(mounts),
        termination_message_path: Some(RESTORE_SUMMARY.into()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        resources: Some(resources(spec)),
        security_context: Some(pod::container_security()),
        ..Container::default()
    }
}

/// Where the restore writes its summary: the container's termination message.
const RESTORE_SUMMARY: &str = "/dev/termination-log";

/// The Pod's identity from the downward API first: `$(POD_IP)` only expands in variables
/// defined after it.
fn broker_env(spec: &RustQueueSpec, n: &str) -> Vec<EnvVar> {
    let field = pod::field_env;
    let value = |name: &str, v: String| pod::env(name, v);
    vec![
        field(env::POD_NAME, "metadata.name"),
        field(env::POD_NAMESPACE, "metadata.namespace"),
        field(env::POD_IP, "status.podIP"),
        value(
            env::TCP_ADDRESS,
            format!("$(POD_IP):{}", labels::BROKER_TCP_PORT),
        ),
        value(
            env::HTTP_ADDRESS,
            format!("$(POD_IP):{}", labels::BROKER_HTTP_PORT),
        ),
        value(
            env::BROADCAST_ADDRESS,
            format!(
                "$(POD_NAME).{}.$(POD_NAMESPACE).svc",
                names::brokers_service(n)
            ),
        ),
        value(env::DATA_PATH, labels::DATA_PATH.into()),
        value(
            env::MESSAGE_INDEX_CACHE_BYTES,
            spec.message_index_cache_bytes.to_string(),
        ),
    ]
    .into_iter()
    .chain(tracing_env(spec, n))
    .collect()
}

/// `spec.tracing` as the standard OpenTelemetry variables (docs/observability.md), after the
/// Pod's identity, which the resource attributes name.
fn tracing_env(spec: &RustQueueSpec, n: &str) -> Vec<EnvVar> {
    let Some(t) = &spec.tracing else {
        return Vec::new();
    };
    let mut out = vec![
        pod::env("OTEL_EXPORTER_OTLP_ENDPOINT", t.otlp_endpoint.clone()),
        pod::env("OTEL_SERVICE_NAME", "rustqueued"),
        pod::env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!(
                "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),\
                 service.instance.id=$(POD_NAME),rustqueue.cluster={n}"
            ),
        ),
    ];
    if let Some(sampler) = t.sampler {
        out.push(pod::env("OTEL_TRACES_SAMPLER", sampler.as_env()));
    }
    if let Some(arg) = &t.sampler_arg {
        out.push(pod::env("OTEL_TRACES_SAMPLER_ARG", arg.clone()));
    }
    out
}

/// Requests always; limits only when given.
fn resources(spec: &RustQueueSpec) -> ResourceRequirements {
    let r = &spec.broker_resources;
    let quantities = |pairs: [(&str, Option<&String>); 2]| {
        let map: BTreeMap<String, Quantity> = pairs
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), Quantity(v?.clone()))))
            .collect();
        (!map.is_empty()).then_some(map)
    };
    ResourceRequirements {
        requests: quantities([
            ("cpu", Some(&r.cpu_request)),
            ("memory", Some(&r.memory_request)),
        ]),
        limits: quantities([
            ("cpu", r.cpu_limit.as_ref()),
            ("memory", r.memory_limit.as_ref()),
        ]),
        ..ResourceRequirements::default()
    }
}

/// Split `key=value` (validated by the CRD pattern) into a nodeSelector map.
fn node_selector(selector: &str) -> BTreeMap<String, String> {
    let (k, v) = selector.split_once('=').unwrap_or((selector, ""));
    BTreeMap::from([(k.trim().to_string(), v.trim().to_string())])
}

fn toleration(t: &rustqueue_api::crd::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone(),
        operator: t.operator.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
        toleration_seconds: t.toleration_seconds,
    }
}

/// The `data` claim template: the broker's only copy of its messages.
fn data_claim(
    spec: &RustQueueSpec,
    inputs: &BrokerInputs,
    selector: BTreeMap<String, String>,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            labels: Some(selector),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(spec.storage_class_name.clone()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(inputs.claim_size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pod(spec: &RustQueueSpec) -> (StatefulSet, PodSpec, Container) {
        let sts = stateful_set(&owner(), spec, &inputs(), "toml");
        let pod = sts.spec.template.spec.clone().unwrap();
        let c = pod.containers[0].clone();
        (sts, pod, c)
    }

    fn env_value(c: &Container, name: &str) -> Option<String> {
        c.env
            .as_ref()?
            .iter()
            .find(|e| e.name == name)?
            .value
            .clone()
    }

    #[test]
    fn the_statefulset_is_on_delete_parallel_and_retains_pvcs() {
        let (sts, _, _) = pod(&spec());
        let s = sts.spec;
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.service_name.as_deref(), Some("queue-brokers"));
        assert_eq!(
            s.update_strategy.unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        assert_eq!(s.pod_management_policy.as_deref(), Some("Parallel"));
        let ret = s.persistent_volume_claim_retention_policy.unwrap();
        assert_eq!(ret.when_deleted.as_deref(), Some("Retain"));
        assert_eq!(ret.when_scaled.as_deref(), Some("Retain"));
        let claim = &s.volume_claim_templates.unwrap()[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data"));
        let cs = claim.spec.clone().unwrap();
        assert_eq!(cs.storage_class_name.as_deref(), Some("local-path"));
        assert_eq!(
            cs.resources.unwrap().requests.unwrap()["storage"].0,
            "100Gi"
        );
    }

    #[test]
    fn the_broker_binds_to_its_pod_ip_and_runs_rustqueued_with_the_config() {
        let (_, _, c) = pod(&spec());
        assert_eq!(c.command, Some(vec!["rustqueued".to_string()]));
        assert_eq!(
            c.args,
            Some(vec![
                "--config".into(),
                "/etc/rustqueue/rustqueue.toml".into()
            ])
        );
        assert_eq!(
            env_value(&c, "RUSTQUEUE_TCP_ADDRESS").as_deref(),
            Some("$(POD_IP):4150")
        );
        assert_eq!(
            env_value(&c, "RUSTQUEUE_HTTP_ADDRESS").as_deref(),
            Some("$(POD_IP):4151")
        );
        let env = c.env.clone().unwrap();
        let pod_ip = env.iter().position(|e| e.name == "POD_IP").unwrap();
        let tcp = env
            .iter()
            .position(|e| e.name == "RUSTQUEUE_TCP_ADDRESS")
            .unwrap();
        assert!(pod_ip < tcp, "$(POD_IP) only expands when defined earlier");
        let field = env[pod_ip].value_from.clone().unwrap().field_ref.unwrap();
        assert_eq!(field.field_path, "status.podIP");
        assert_eq!(
            env_value(&c, "RUSTQUEUE_BROADCAST_ADDRESS").as_deref(),
            Some("$(POD_NAME).queue-brokers.$(POD_NAMESPACE).svc")
        );
    }

    #[test]
    fn tracing_reaches_the_brokers_as_the_standard_variables() {
        let (_, _, c) = pod(&spec());
        assert!(
            c.env.unwrap().iter().all(|e| !e.name.starts_with("OTEL_")),
            "no tracing unless asked"
        );
        let mut traced = spec();
        traced.tracing = Some(rustqueue_api::crd::Tracing {
            otlp_endpoint: "http://otel-collector.monitoring:4318".into(),
            sampler: Some(rustqueue_api::crd::TraceSampler::ParentbasedTraceidratio),
            sampler_arg: Some("0.01".into()),
        });
        let (_, _, c) = pod(&traced);
        for (name, want) in [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.monitoring:4318",
            ),
            ("OTEL_SERVICE_NAME", "rustqueued"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),\
                 service.instance.id=$(POD_NAME),rustqueue.cluster=queue",
            ),
        ] {
            assert_eq!(env_value(&c, name).as_deref(), Some(want), "{name}");
        }
        let env = c.env.unwrap();
        let at = |n: &str| env.iter().position(|e| e.name == n).unwrap();
        assert!(
            at("POD_NAME") < at("OTEL_RESOURCE_ATTRIBUTES"),
            "$(POD_NAME) expands"
        );
    }

    #[test]
    fn probes_use_the_contract_endpoints() {
        let (_, _, c) = pod(&spec());
        let ready = c.readiness_probe.unwrap().http_get.unwrap();
        assert_eq!(ready.path.as_deref(), Some("/v1/health"));
        let live = c.liveness_probe.unwrap().http_get.unwrap();
        assert_eq!(live.path.as_deref(), Some("/ping"));
    }

    #[test]
    fn pods_are_hardened() {
        let (_, p, c) = pod(&spec());
        let psc = p.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.fs_group, Some(65532));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let csc = c.security_context.unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        assert_eq!(csc.read_only_root_filesystem, Some(true));
        assert_eq!(
            csc.capabilities.unwrap().drop,
            Some(vec!["ALL".to_string()])
        );
    }

    #[test]
    fn scheduling_uses_the_eligible_label_and_one_broker_per_topology_value() {
        let mut s = spec();
        s.broker_scheduling.priority_class_name = Some("high".into());
        let (_, p, _) = pod(&s);
        assert_eq!(p.node_selector.unwrap()["rustqueue.io/eligible"], "true");
        let anti = p.affinity.unwrap().pod_anti_affinity.unwrap();
        let term = &anti
            .required_during_scheduling_ignored_during_execution
            .unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        assert_eq!(
            term.label_selector.clone().unwrap().match_labels.unwrap()["app.kubernetes.io/component"],
            "broker"
        );
        assert_eq!(p.priority_class_name.as_deref(), Some("high"));
    }

    #[test]
    fn limits_are_only_set_when_given() {
        let (_, _, c) = pod(&spec());
        let r = c.resources.unwrap();
        assert!(r.limits.is_none());
        assert_eq!(r.requests.unwrap()["cpu"].0, "100m");
        let mut s = spec();
        s.broker_resources.memory_limit = Some("1Gi".into());
        let (_, _, c) = pod(&s);
        let limits = c.resources.unwrap().limits.unwrap();
        assert_eq!(limits.len(), 1);
        assert_eq!(limits["memory"].0, "1Gi");
    }

    #[test]
    fn mounts_and_revision_annotation_are_in_the_template() {
        let mut s = spec();
        s.client_tls_secret_name = Some("tls".into());
        let (sts, p, c) = pod(&s);
        let mounts: Vec<String> = c
            .volume_mounts
            .unwrap()
            .iter()
            .map(|m| m.mount_path.clone())
            .collect();
        assert_eq!(
            mounts,
            [
                "/data",
                "/etc/rustqueue",
                "/run/secrets/rustqueue",
                "/run/tls/rustqueue"
            ]
        );
        let vols = p.volumes.unwrap();
        assert_eq!(
            vols[1].secret.clone().unwrap().secret_name.as_deref(),
            Some("queue-auth")
        );
        let ann = sts.spec.template.metadata.unwrap().annotations.unwrap();
        assert_eq!(ann["rustqueue.io/revision"].len(), 32);
    }

    #[test]
    fn tiering_mounts_the_credential_keys_and_restores_an_empty_volume_before_the_broker() {
        let (_, p, _) = pod(&spec());
        assert!(p.init_containers.is_none(), "no restore without tiering");
        let mut s = spec();
        s.tiering = Some(
            serde_json::from_value(serde_json::json!({
                "bucket": "rq-bucket",
                "endpoint": "https://s3.example",
                "credentialsSecret": {"name": "s3-creds", "accessKeyIdKey": "id", "secretAccessKeyKey": "key"},
            }))
            .unwrap(),
        );
        let (_, p, c) = pod(&s);
        let vol = p
            .volumes
            .clone()
            .unwrap()
            .into_iter()
            .find(|v| v.name == "tiering-credentials")
            .unwrap()
            .secret
            .unwrap();
        assert_eq!(vol.secret_name.as_deref(), Some("s3-creds"));
        let items: Vec<(String, String)> = vol
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        assert_eq!(
            items,
            [
                ("id".to_string(), "access-key-id".to_string()),
                ("key".to_string(), "secret-access-key".to_string())
            ],
            "only the two keys, as the files [tiering] names"
        );
        let mounted = |c: &Container| {
            c.volume_mounts
                .clone()
                .unwrap()
                .iter()
                .any(|m| m.mount_path == "/run/secrets/rustqueue-tiering")
        };
        assert!(mounted(&c));
        let init = &p.init_containers.unwrap()[0];
        assert_eq!(init.name, "restore");
        assert!(mounted(init));
        assert_eq!(init.image, c.image);
        assert_eq!(
            init.args.clone().unwrap()[2..],
            [
                "storage",
                "restore",
                "--from-bucket",
                "--if-empty",
                "--summary-file",
                "/dev/termination-log"
            ]
        );
        assert_eq!(
            init.volume_mounts.clone().unwrap()[0].mount_path,
            "/data",
            "the broker's own volume"
        );
        assert!(
            init.env
                .clone()
                .unwrap()
                .iter()
                .any(|e| e.name == "POD_NAME"),
            "the node id comes from the Pod name, as the broker's"
        );
        assert_eq!(
            init.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }
}
