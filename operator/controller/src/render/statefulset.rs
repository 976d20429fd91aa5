//! The broker StatefulSet `<n>`: one broker per eligible Node, each on its own retained PVC.
//!
//! `OnDelete` because the operator, not the StatefulSet controller, decides when a broker may
//! be disrupted; PVCs are retained on delete and scale-down because they hold the only copy of
//! their messages. Listeners bind to the Pod IP (not 0.0.0.0) so several Pods can share a host
//! network namespace, as on the e2e testbed.

use k8s_openapi::api::apps::v1::StatefulSet;
use rustqueue_api::crd::RustQueueSpec;
use rustqueue_api::labels::{self, env};

use super::{BrokerInputs, Owner, names, pod_template_revision, selector_labels, typed};

const RUN_AS: i64 = 65532;

fn field_env(name: &str, path: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

fn resources(spec: &RustQueueSpec) -> serde_json::Value {
    let r = &spec.broker_resources;
    let mut limits = serde_json::Map::new();
    if let Some(cpu) = &r.cpu_limit {
        limits.insert("cpu".into(), cpu.clone().into());
    }
    if let Some(mem) = &r.memory_limit {
        limits.insert("memory".into(), mem.clone().into());
    }
    let mut out = serde_json::json!({
        "requests": {"cpu": r.cpu_request, "memory": r.memory_request},
    });
    if !limits.is_empty() {
        out["limits"] = limits.into();
    }
    out
}

/// Split `key=value` (validated by the CRD pattern) into a nodeSelector map.
fn node_selector(selector: &str) -> serde_json::Value {
    let (k, v) = selector.split_once('=').unwrap_or((selector, ""));
    serde_json::json!({ k.trim(): v.trim() })
}

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
    let sched = &spec.broker_scheduling;
    let mut pod_spec = serde_json::json!({
        "serviceAccountName": names::runtime(n),
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": 45,
        "nodeSelector": node_selector(&spec.eligible_node_selector),
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": selector},
            "topologyKey": sched.topology_key,
        }]}},
        "tolerations": sched.tolerations,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "broker",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            "command": ["rustqueued"],
            "args": ["--config", format!("{}/{}", labels::CONFIG_DIR, labels::CONFIG_FILE)],
            "ports": [
                {"name": "tcp", "containerPort": labels::BROKER_TCP_PORT, "protocol": "TCP"},
                {"name": "http", "containerPort": labels::BROKER_HTTP_PORT, "protocol": "TCP"},
            ],
            "env": [
                field_env(env::POD_NAME, "metadata.name"),
                field_env(env::POD_NAMESPACE, "metadata.namespace"),
                field_env(env::POD_IP, "status.podIP"),
                {"name": env::TCP_ADDRESS, "value": format!("$(POD_IP):{}", labels::BROKER_TCP_PORT)},
                {"name": env::HTTP_ADDRESS, "value": format!("$(POD_IP):{}", labels::BROKER_HTTP_PORT)},
                {"name": env::BROADCAST_ADDRESS,
                 "value": format!("$(POD_NAME).{}.$(POD_NAMESPACE).svc", names::brokers_service(n))},
                {"name": env::DATA_PATH, "value": labels::DATA_PATH},
                {"name": env::MESSAGE_INDEX_CACHE_BYTES, "value": spec.message_index_cache_bytes.to_string()},
            ],
            "volumeMounts": [
                {"name": "data", "mountPath": labels::DATA_PATH},
                {"name": "config", "mountPath": labels::CONFIG_DIR, "readOnly": true},
                {"name": "auth", "mountPath": labels::SECRETS_DIR, "readOnly": true},
            ],
            "readinessProbe": {
                "httpGet": {"path": "/v1/health", "port": "http"},
                "periodSeconds": 2, "failureThreshold": 2, "timeoutSeconds": 1,
            },
            "livenessProbe": {
                "httpGet": {"path": "/ping", "port": "http"},
                "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 2,
            },
            "resources": resources(spec),
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "privileged": false,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
        "volumes": [
            {"name": "config", "configMap": {"name": names::config_map(n, toml)}},
            {"name": "auth", "secret": {"secretName": inputs.auth_secret_name}},
        ],
    });
    if let Some(pc) = &sched.priority_class_name {
        pod_spec["priorityClassName"] = pc.clone().into();
    }
    if let Some(tls) = &spec.client_tls_secret_name {
        pod_spec["volumes"]
            .as_array_mut()
            .expect("volumes is an array")
            .push(serde_json::json!({"name": "client-tls", "secret": {"secretName": tls}}));
        pod_spec["containers"][0]["volumeMounts"]
            .as_array_mut()
            .expect("mounts is an array")
            .push(serde_json::json!({"name": "client-tls", "mountPath": "/run/tls/rustqueue", "readOnly": true}));
    }
    let mut pod_labels = super::object_labels(n, labels::COMPONENT_BROKER);
    pod_labels.extend(selector.clone());
    typed(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": owner.metadata(&names::stateful_set(n), labels::COMPONENT_BROKER),
        "spec": {
            "replicas": inputs.replicas,
            "serviceName": names::brokers_service(n),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {labels::REVISION_ANNOTATION: revision},
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data", "labels": selector},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": spec.storage_class_name,
                    "resources": {"requests": {"storage": inputs.claim_size}},
                },
            }],
        },
    }))
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
}
