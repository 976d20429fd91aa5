//! The desired broker set, rendered before any decision: the effective spec (the image to run,
//! the feature level never below the floor), the broker config and its ConfigMap name, and the
//! pod-template revision every broker Pod must end up carrying. `plan` compares Pods with it;
//! the applier renders the children from it, so both see the same revision.

use rustqueue_api::crd::RustQueueSpec;

use k8s_openapi::api::core::v1::Pod;

use super::{
    BrokerInputs, Children, KodoLayout, Owner, broker_toml, names, pod_template_revision,
    probe_fingerprint, probe_pod, probe_pod_name,
};

/// What the cluster should run.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// RustQueue name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// The spec with `image` = the effective image (`rollout.rollbackToImage` if set) and
    /// `storageFeatureLevel` = the effective level.
    pub spec: RustQueueSpec,
    /// Inputs of the broker objects (replicas are decided by `plan`, not here).
    pub inputs: BrokerInputs,
    /// The broker TOML.
    pub broker_toml: String,
    /// The ConfigMap holding [`Self::broker_toml`].
    pub config_map: String,
    /// Pod-template revision of the target StatefulSet.
    pub revision: String,
    /// What every broker claim should request (`spec.storageSize`).
    pub claim_size: String,
    /// Effective storage feature level: max(spec, floor, 1).
    pub feature_level: u32,
    /// Name of the capability probe Pod of this target (image, config, retry nonce).
    pub probe_pod: String,
    /// The Kodo cutover grace in effect: `spec.kodoCompatibility.cutoverGraceSeconds`, unless
    /// the operator was started with a lower cap for tests (docs/kodo.md).
    pub kodo_grace_seconds: u64,
}

/// Observed facts the desired set depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredInputs {
    /// Name of the auth Secret.
    pub auth_secret_name: String,
    /// resourceVersion of the auth Secret.
    pub auth_secret_revision: String,
    /// Claim-template size of the existing StatefulSet (immutable), if any.
    pub claim_template_size: Option<String>,
    /// Feature-level floor: status and the running brokers' active writer levels.
    pub feature_level_floor: u32,
    /// resourceVersion of `spec.tiering.credentialsSecret` (`None`: no tiering, or missing).
    pub tiering_secret_revision: Option<String>,
}

impl Desired {
    /// Render the desired set of RustQueue `owner` from `spec`.
    pub fn render(owner: &Owner<'_>, spec: &RustQueueSpec, d: &DesiredInputs) -> Self {
        let mut effective = spec.clone();
        if let Some(img) = &spec.rollout.rollback_to_image {
            effective.image = img.clone();
        }
        let feature_level = spec.storage_feature_level.max(d.feature_level_floor).max(1);
        effective.storage_feature_level = feature_level;
        let inputs = BrokerInputs {
            replicas: 0,
            auth_secret_name: d.auth_secret_name.clone(),
            auth_secret_revision: d.auth_secret_revision.clone(),
            claim_size: d
                .claim_template_size
                .clone()
                .unwrap_or_else(|| spec.storage_size.clone()),
            feature_level_floor: d.feature_level_floor,
            tiering_secret_revision: d.tiering_secret_revision.clone(),
        };
        let toml = broker_toml(owner, &effective, &inputs);
        let config_map = names::config_map(owner.name, &toml);
        let fingerprint = probe_fingerprint(
            owner.uid,
            &effective.image,
            &effective.image_pull_policy,
            &config_map,
            &spec.rollout.retry_nonce,
        );
        Self {
            probe_pod: probe_pod_name(owner.name, &fingerprint),
            kodo_grace_seconds: spec.kodo_compatibility.cutover_grace_seconds,
            name: owner.name.to_string(),
            namespace: owner.namespace.to_string(),
            revision: pod_template_revision(&effective, &inputs, &toml),
            config_map,
            broker_toml: toml,
            claim_size: spec.storage_size.clone(),
            feature_level,
            spec: effective,
            inputs,
        }
    }

    /// The children with `replicas` brokers, the runtime workloads running `runtime_image`,
    /// discovery and the Kodo Gateways as `layout` says.
    pub fn children(
        &self,
        owner: &Owner<'_>,
        replicas: i32,
        runtime_image: &str,
        layout: &KodoLayout,
    ) -> Children {
        let inputs = BrokerInputs {
            replicas,
            ..self.inputs.clone()
        };
        Children::render(owner, &self.spec, &inputs, runtime_image, layout)
    }

    /// The revision Kodo Gateway Pods running `image` carry.
    pub fn kodo_gateway_revision(&self, image: &str) -> String {
        let owner = Owner {
            name: &self.name,
            namespace: &self.namespace,
            uid: "",
        };
        super::kodo::gateway_revision(&owner, &self.spec, image)
    }

    /// The capability probe Pod of this target.
    pub fn probe(&self, owner: &Owner<'_>) -> Pod {
        probe_pod(
            owner,
            &self.probe_pod,
            &self.spec.image,
            &self.spec.image_pull_policy,
            &self.config_map,
            &self.inputs.auth_secret_name,
            self.spec.client_tls_secret_name.as_deref(),
            self.spec.tiering.as_ref().map(|t| &t.credentials_secret),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn inputs() -> DesiredInputs {
        DesiredInputs {
            tiering_secret_revision: None,
            auth_secret_name: "queue-auth".into(),
            auth_secret_revision: "100".into(),
            claim_template_size: None,
            feature_level_floor: 1,
        }
    }

    #[test]
    fn the_rendered_statefulset_carries_the_desired_revision_and_config_map() {
        let d = Desired::render(&owner(), &spec(), &inputs());
        let c = d.children(&owner(), 3, "img", &KodoLayout::default());
        assert_eq!(c.revision(), d.revision);
        assert_eq!(c.config_map.metadata.name.as_deref(), Some(&*d.config_map));
        assert_eq!(c.stateful_set.spec.replicas, Some(3));
        assert_eq!(
            d.revision,
            Desired::render(&owner(), &spec(), &inputs())
                .children(&owner(), 5, "img", &KodoLayout::default())
                .revision(),
            "replicas never change the revision"
        );
    }

    #[test]
    fn a_rollback_image_and_a_raised_floor_change_what_runs() {
        let base = Desired::render(&owner(), &spec(), &inputs());
        let mut s = spec();
        s.rollout.rollback_to_image = Some("rustqueue:old".into());
        let back = Desired::render(&owner(), &s, &inputs());
        assert_eq!(back.spec.image, "rustqueue:old");
        assert_ne!(back.revision, base.revision);
        let floor = Desired::render(
            &owner(),
            &spec(),
            &DesiredInputs {
                feature_level_floor: 2,
                ..inputs()
            },
        );
        assert_eq!(floor.feature_level, 2);
        assert_ne!(floor.config_map, base.config_map, "the config says level 2");
    }

    #[test]
    fn the_claim_template_keeps_its_size_while_claims_target_the_spec() {
        let mut s = spec();
        s.storage_size = "2Gi".into();
        let d = Desired::render(
            &owner(),
            &s,
            &DesiredInputs {
                claim_template_size: Some("1Gi".into()),
                ..inputs()
            },
        );
        assert_eq!(d.inputs.claim_size, "1Gi");
        assert_eq!(d.claim_size, "2Gi");
    }
}
