//! The capability probe Pod: the target image run once as
//! `rustqueued --config <target config> --capabilities-output /dev/termination-log`, so the
//! operator learns what the new binary can read and write (and that it accepts the target
//! config) before any broker Pod is touched. One Pod per contract: its name carries a
//! fingerprint of everything the answer depends on, so a change of any of them probes again.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use rustqueue_api::crd::TieringCredentials;
use sha2::{Digest, Sha256};

use super::{Owner, pod};

/// Where the probe writes its capabilities: the kubelet returns it as the termination message.
const TERMINATION_LOG: &str = "/dev/termination-log";

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
    tiering: Option<&TieringCredentials>,
) -> Pod {
    let (volumes, mounts) = pod::broker_inputs(config_map, auth_secret, client_tls_secret, tiering);
    let mut args = pod::config_args();
    args.extend(["--capabilities-output".into(), TERMINATION_LOG.into()]);
    Pod {
        metadata: owner.metadata(name, COMPONENT_PROBE),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            security_context: Some(pod::pod_security()),
            containers: vec![Container {
                name: "probe".into(),
                image: Some(image.into()),
                image_pull_policy: Some(pull_policy.into()),
                command: Some(vec!["rustqueued".into()]),
                args: Some(args),
                termination_message_path: Some(TERMINATION_LOG.into()),
                volume_mounts: Some(mounts),
                resources: Some(pod::requests("10m", "32Mi")),
                security_context: Some(pod::container_security()),
                ..Container::default()
            }],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
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
    fn the_probe_runs_as_restricted_as_a_broker_and_mounts_client_tls_like_one() {
        let p = probe_pod(
            &owner(),
            "p",
            "img",
            "Always",
            "cm",
            "auth",
            Some("tls"),
            None,
        );
        let spec = p.spec.unwrap();
        let psc = spec.security_context.unwrap();
        assert_eq!(
            (psc.run_as_user, psc.run_as_non_root),
            (Some(65532), Some(true))
        );
        let c = &spec.containers[0];
        let csc = c.security_context.clone().unwrap();
        assert_eq!(csc.read_only_root_filesystem, Some(true));
        assert_eq!(csc.privileged, Some(false));
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        let mounts: Vec<&str> = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/etc/rustqueue",
                "/run/secrets/rustqueue",
                "/run/tls/rustqueue"
            ]
        );
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
