//! The runtime identity of broker Pods: a ServiceAccount with a Role that can only read
//! EndpointSlices (discovery builds its view from them). Brokers need nothing else.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use rustqueue_api::labels;

use super::{Owner, names, typed};

/// `<n>-runtime` ServiceAccount.
pub fn service_account(owner: &Owner<'_>) -> ServiceAccount {
    typed(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": owner.metadata(&names::runtime(owner.name), labels::COMPONENT_RUNTIME),
        "automountServiceAccountToken": false,
    }))
}

/// `<n>-runtime` Role: EndpointSlices get/list/watch.
pub fn role(owner: &Owner<'_>) -> Role {
    typed(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": owner.metadata(&names::runtime(owner.name), labels::COMPONENT_RUNTIME),
        "rules": [{
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        }],
    }))
}

/// `<n>-runtime` RoleBinding of the Role to the ServiceAccount.
pub fn role_binding(owner: &Owner<'_>) -> RoleBinding {
    let name = names::runtime(owner.name);
    typed(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": owner.metadata(&name, labels::COMPONENT_RUNTIME),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }))
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
