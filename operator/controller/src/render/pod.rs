//! Pieces every Pod the operator renders shares: the restricted security contexts (uid 65532,
//! no privilege, read-only root) and the broker's config, auth and client-TLS mounts, so the
//! capability probe runs the target image exactly as a broker would.

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    KeyToPath, ObjectFieldSelector, PodSecurityContext, Probe, ResourceRequirements,
    SeccompProfile, SecretVolumeSource, SecurityContext, ServicePort, TopologySpreadConstraint,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

use rustqueue_api::crd::TieringCredentials;
use rustqueue_api::labels;

/// A named TCP container port.
pub(super) fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port.into(),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}

/// A TCP Service port forwarding to the container port of the same name.
pub(super) fn service_port(name: &str, port: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: port.into(),
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// The nonroot user and group of the images.
pub(super) const RUN_AS: i64 = 65532;

/// Where the client TLS Secret is mounted (the broker config names files under it).
pub(super) const CLIENT_TLS_DIR: &str = "/run/tls/rustqueue";

/// An HTTP GET on the `http` port.
pub(super) fn http_probe(path: &str, period: i32, failures: i32, timeout: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(timeout),
        ..Probe::default()
    }
}

/// `rustqueued --config <mounted config>`.
pub(super) fn config_args() -> Vec<String> {
    vec![
        "--config".into(),
        format!("{}/{}", labels::CONFIG_DIR, labels::CONFIG_FILE),
    ]
}

/// CPU and memory requests, no limits.
pub(super) fn requests(cpu: &str, memory: &str) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(std::collections::BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ])),
        ..ResourceRequirements::default()
    }
}

/// Non-root as [`RUN_AS`], the runtime's default seccomp profile; no fsGroup.
pub(super) fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// Replicas spread over Nodes, then zones, by their selector `labels`: one Node going away
/// takes at most one. `ScheduleAnyway`, so a one-Node cluster still runs them all.
pub(super) fn spread(labels: BTreeMap<String, String>) -> Vec<TopologySpreadConstraint> {
    ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            }),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

/// Volume `name` holding only `key` of Secret `secret` (as a file named `key`): a Pod sees
/// the one token it needs, never the others of the auth Secret.
pub(super) fn one_key_secret(name: &str, secret: &str, key: &str) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(vec![KeyToPath {
                key: key.into(),
                path: key.into(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// No privilege, no capabilities, a read-only root file system.
pub(super) fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// An environment variable from the downward API (`metadata.name`, `status.podIP`, ...).
pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// A plain environment variable.
pub(super) fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

pub(super) fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

fn secret_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The read-only inputs of `rustqueued`: its config, the auth tokens, when the spec has
/// client TLS the certificate Secret (the broker refuses a config whose TLS files are missing),
/// and with tiering the bucket's two credential keys as the files `[tiering]` names (the
/// broker reads them when it loads its config, so the capability probe needs them too).
pub(super) fn broker_inputs(
    config_map: &str,
    auth_secret: &str,
    client_tls_secret: Option<&str>,
    tiering: Option<&TieringCredentials>,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map.into(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        secret_volume("auth", auth_secret),
    ];
    let mut mounts = vec![
        mount("config", labels::CONFIG_DIR),
        mount("auth", labels::SECRETS_DIR),
    ];
    if let Some(tls) = client_tls_secret {
        volumes.push(secret_volume("client-tls", tls));
        mounts.push(mount("client-tls", CLIENT_TLS_DIR));
    }
    if let Some(creds) = tiering {
        volumes.push(tiering_credentials(creds));
        mounts.push(mount(TIERING_VOLUME, labels::TIERING_SECRETS_DIR));
    }
    (volumes, mounts)
}

/// The volume of the bucket's credentials.
const TIERING_VOLUME: &str = "tiering-credentials";

/// The Secret's two keys as the files the rendered `[tiering]` names, and nothing else of it.
fn tiering_credentials(creds: &TieringCredentials) -> Volume {
    let item = |key: &str, path: &str| KeyToPath {
        key: key.into(),
        path: path.into(),
        ..KeyToPath::default()
    };
    Volume {
        name: TIERING_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(creds.name.clone()),
            items: Some(vec![
                item(&creds.access_key_id_key, labels::TIERING_ACCESS_KEY_FILE),
                item(
                    &creds.secret_access_key_key,
                    labels::TIERING_SECRET_KEY_FILE,
                ),
            ]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}
