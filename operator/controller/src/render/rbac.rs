//! The runtime identity of broker Pods: a ServiceAccount with a Role that can only read
//! EndpointSlices (discovery builds its view from them). Brokers need nothing else.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use rustqueue_api::labels;

use super::{Owner, names};

/// `<n>-runtime` ServiceAccount.
pub fn service_account(owner: &Owner<'_>) -> ServiceAccount {
    ServiceAccount {
        metadata: owner.metadata(&names::runtime(owner.name), labels::COMPONENT_RUNTIME),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// `<n>-runtime` Role: EndpointSlices get/list/watch.
pub fn role(owner: &Owner<'_>) -> Role {
    Role {
        metadata: owner.metadata(&names::runtime(owner.name), labels::COMPONENT_RUNTIME),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["discovery.k8s.io".into()]),
            resources: Some(vec!["endpointslices".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    }
}

/// `<n>-runtime` RoleBinding of the Role to the ServiceAccount.
pub fn role_binding(owner: &Owner<'_>) -> RoleBinding {
    let name = names::runtime(owner.name);
    RoleBinding {
        metadata: owner.metadata(&name, labels::COMPONENT_RUNTIME),
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;

    #[test]
    fn the_runtime_role_only_reads_endpointslices() {
        let r = role(&owner());
        let rules = r.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["endpointslices".to_string()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "list", "watch"]);
    }

    #[test]
    fn the_binding_ties_the_role_to_the_runtime_service_account() {
        let b = role_binding(&owner());
        assert_eq!(b.role_ref.name, "queue-runtime");
        let s = &b.subjects.unwrap()[0];
        assert_eq!(
            (s.name.as_str(), s.namespace.as_deref()),
            ("queue-runtime", Some("ns"))
        );
        assert_eq!(
            service_account(&owner()).metadata.name.as_deref(),
            Some("queue-runtime")
        );
    }
}
