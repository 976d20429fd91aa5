//! The pod-template revision: a hash over everything that should roll a broker Pod when it
//! changes (image, config, mounted Secrets, scheduling, resources), and nothing that should
//! not (replica count, PDB, Service).

use rustqueue_api::crd::RustQueueSpec;
use sha2::{Digest, Sha256};

use super::BrokerInputs;

/// 32 hex characters: the first 16 bytes of SHA-256 over the rolling inputs as JSON.
///
/// The material is a JSON literal on purpose, not a rendered object: its bytes must stay the
/// same across operator releases, or an upgrade of the operator alone would roll every broker.
pub fn pod_template_revision(spec: &RustQueueSpec, inputs: &BrokerInputs, toml: &str) -> String {
    let mut material = serde_json::json!({
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "config": toml,
        "secretName": inputs.auth_secret_name,
        "mountedSecretRevision": inputs.auth_secret_revision,
        "clientTlsSecretName": spec.client_tls_secret_name,
        "messageIndexCacheBytes": spec.message_index_cache_bytes,
        "eligibleNodeSelector": spec.eligible_node_selector,
        "brokerScheduling": spec.broker_scheduling,
        "brokerResources": spec.broker_resources,
    });
    // Only with tiering, so the revision of a RustQueue without it stays what it was.
    if let Some(t) = &spec.tiering {
        material["tieringCredentials"] = serde_json::json!({
            "secret": t.credentials_secret,
            "revision": inputs.tiering_secret_revision,
        });
    }
    // Only with tracing, likewise: its variables are in the broker container's environment.
    if let Some(t) = &spec.tracing {
        material["tracing"] = serde_json::to_value(t).unwrap_or_default();
    }
    let digest = Sha256::digest(material.to_string().as_bytes());
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn revision_changes_with_what_rolls_a_pod_and_not_with_replicas() {
        let base = pod_template_revision(&spec(), &inputs(), "a");
        assert_eq!(base.len(), 32);
        assert_eq!(
            base,
            pod_template_revision(&spec(), &inputs(), "a"),
            "deterministic"
        );

        let mut more = inputs();
        more.replicas = 7;
        assert_eq!(base, pod_template_revision(&spec(), &more, "a"));

        let mut rotated = inputs();
        rotated.auth_secret_revision = "101".into();
        let mut image = spec();
        image.image = "rustqueue:next".into();
        let mut res = spec();
        res.broker_resources.memory_request = "1Gi".into();
        for changed in [
            pod_template_revision(&spec(), &rotated, "a"),
            pod_template_revision(&image, &inputs(), "a"),
            pod_template_revision(&res, &inputs(), "a"),
            pod_template_revision(&spec(), &inputs(), "b"),
        ] {
            assert_ne!(base, changed);
        }
    }

    #[test]
    fn tracing_rolls_the_pods_and_each_of_its_fields_counts() {
        let base = pod_template_revision(&spec(), &inputs(), "a");
        let traced = |edit: fn(&mut rustqueue_api::crd::Tracing)| {
            let mut t = rustqueue_api::crd::Tracing {
                otlp_endpoint: "http://collector:4318".into(),
                sampler: None,
                sampler_arg: None,
            };
            edit(&mut t);
            let mut s = spec();
            s.tracing = Some(t);
            pod_template_revision(&s, &inputs(), "a")
        };
        let on = traced(|_| {});
        assert_ne!(base, on, "turning tracing on rolls");
        assert_ne!(on, traced(|t| t.otlp_endpoint = "http://other:4318".into()));
        assert_ne!(
            on,
            traced(|t| t.sampler = Some(rustqueue_api::crd::TraceSampler::AlwaysOff))
        );
    }

    #[test]
    fn tiering_and_its_rotated_credentials_roll_the_pods_and_no_tiering_keeps_old_revisions() {
        // Without tiering the material is what it was before the field existed.
        let mut rotated = inputs();
        rotated.tiering_secret_revision = Some("9".into());
        let base = pod_template_revision(&spec(), &inputs(), "a");
        assert_eq!(base, pod_template_revision(&spec(), &rotated, "a"));
        let mut s = spec();
        s.tiering = Some(
            serde_json::from_value(serde_json::json!({
                "bucket": "rq-bucket", "endpoint": "https://s3", "credentialsSecret": {"name": "s3"}
            }))
            .unwrap(),
        );
        let tiered = pod_template_revision(&s, &inputs(), "a");
        assert_ne!(base, tiered);
        assert_ne!(tiered, pod_template_revision(&s, &rotated, "a"));
    }
}
