//! The capability probe Pod: the target image run once as
//! `rustqueued --config <target config> --capabilities-output /dev/termination-log`, so the
//! operator learns what the new binary can read and write (and that it accepts the target
//! config) before any broker Pod is touched. One Pod per contract: its name carries a
//! fingerprint of everything the answer depends on, so a change of any of them probes again.

use k8s_openapi::api::core::v1::Pod;
use rustqueue_api::labels;
use sha2::{Digest, Sha256};

use super::{Owner, typed};

/// Component label of probe Pods.
pub const COMPONENT_PROBE: &str = "capability-preflight";

/// Fingerprint of a probe contract: RustQueue uid, image, pull policy, the target config
/// (its ConfigMap name is its content hash) and the retry nonce. 32 hex.
pub fn probe_fingerprint(
    uid: &str,
    image: &str,
    pull_policy: &str,
    config_map: &str,
    nonce: &str,
) -> String {
    let mut h = Sha256::new();
    for p in [uid, image, pull_policy, config_map, nonce] {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// `<n (at most 20 chars)>-preflight-<fingerprint>`: at most 63 characters.
pub fn probe_pod_name(n: &str, fingerprint: &str) -> String {
    let short: String = n.chars().take(20).collect();
    format!("{}-preflight-{fingerprint}", short.trim_end_matches('-'))
}

/// The probe Pod running `image` against the target config.
pub fn probe_pod(
    owner: &Owner<'_>,
    name: &str,
    image: &str,
    pull_policy: &str,
    config_map: &str,
    auth_secret: &str,
    client_tls_secret: Option<&str>,
) -> Pod {
    let mut pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": owner.metadata(name, COMPONENT_PROBE),
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": pull_policy,
                "command": ["rustqueued"],
                "args": [
                    "--config", format!("{}/{}", labels::CONFIG_DIR, labels::CONFIG_FILE),
                    "--capabilities-output", "/dev/termination-log",
                ],
                "terminationMessagePath": "/dev/termination-log",
                "volumeMounts": [
                    {"name": "config", "mountPath": labels::CONFIG_DIR, "readOnly": true},
                    {"name": "auth", "mountPath": labels::SECRETS_DIR, "readOnly": true},
                ],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": config_map}},
                {"name": "auth", "secret": {"secretName": auth_secret}},
            ],
        },
    });
    // The broker refuses a config whose TLS files are missing: mount them as the broker does.
    if let Some(tls) = client_tls_secret {
        pod["spec"]["volumes"]
            .as_array_mut()
            .expect("volumes is an array")
            .push(serde_json::json!({"name": "client-tls", "secret": {"secretName": tls}}));
        pod["spec"]["containers"][0]["volumeMounts"]
            .as_array_mut()
            .expect("mounts is an array")
            .push(serde_json::json!({"name": "client-tls", "mountPath": "/run/tls/rustqueue", "readOnly": true}));
    }
    typed(pod)
}

/// Name prefix of every probe Pod of `n`.
pub fn probe_prefix(n: &str) -> String {
    probe_pod_name(n, "")
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;

    #[test]
    fn a_probe_pod_runs_the_target_image_once_against_the_target_config() {
        let p = probe_pod(
            &owner(),
            "queue-preflight-x",
            "img:2",
            "Never",
            "queue-config-1",
            "queue-auth",
            None,
        );
        let spec = p.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("img:2"));
        assert_eq!(
            c.args.clone().unwrap(),
            [
                "--config",
                "/etc/rustqueue/rustqueue.toml",
                "--capabilities-output",
                "/dev/termination-log"
            ]
        );
        assert_eq!(
            p.metadata.labels.unwrap()["app.kubernetes.io/component"],
            "capability-preflight"
        );
        assert_eq!(p.metadata.owner_references.unwrap()[0].uid, "uid-1");
    }

    #[test]
    fn names_fit_63_characters_and_change_with_the_contract() {
        let fp = probe_fingerprint("u", "img", "IfNotPresent", "cm", "");
        assert_eq!(fp.len(), 32);
        assert_ne!(fp, probe_fingerprint("u", "img", "IfNotPresent", "cm", "1"));
        assert_ne!(fp, probe_fingerprint("u", "img2", "IfNotPresent", "cm", ""));
        let long = probe_pod_name(&"q".repeat(60), &fp);
        assert!(long.len() <= 63, "{long}");
        assert!(probe_pod_name("queue", &fp).starts_with(&probe_prefix("queue")));
    }
}
