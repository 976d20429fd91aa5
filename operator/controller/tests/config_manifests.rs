//! The checked-in `config/` kustomize bases: the sample passes the CRD's CEL rules, the
//! operator's RBAC covers every call it makes (and no more than the §7 table), and the
//! manager runs two replicas of `rustqueue-operator`.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use rustqueue_api::crd::RustQueue;

fn config(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn config_crd_is_the_generated_crd() {
    assert!(
        config("crd/rustqueue.io_rustqueues.yaml") == rustqueue_operator::crdgen::crd_yaml(),
        "config/crd is stale: run `make crds`"
    );
}

#[test]
fn the_sample_is_valid_under_the_crd_rules() {
    let rq: RustQueue =
        serde_yaml::from_str(&config("samples/rustqueue_v1alpha1_rustqueue.yaml")).unwrap();
    assert_eq!(rq.spec.min_brokers, 3);
    assert_eq!(rq.spec.max_brokers, 3);
    rq.validate_cel().expect("sample passes CEL");
    assert!(rustqueue_operator::plan::validate("queue", &rq.spec).is_empty());
}

fn allows(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn the_role_covers_every_call_the_operator_makes() {
    let role: Role = serde_yaml::from_str(&config("rbac/role.yaml")).unwrap();
    let rules = role.rules.unwrap();
    for (group, resource, verb) in [
        ("rustqueue.io", "rustqueues", "watch"),
        ("rustqueue.io", "rustqueues/status", "patch"),
        ("", "secrets", "create"),
        ("", "configmaps", "patch"),
        ("", "serviceaccounts", "patch"),
        ("", "services", "patch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "persistentvolumeclaims", "list"),
        ("apps", "statefulsets", "patch"),
        ("apps", "statefulsets", "watch"),
        ("policy", "poddisruptionbudgets", "patch"),
        ("rbac.authorization.k8s.io", "roles", "patch"),
        ("rbac.authorization.k8s.io", "rolebindings", "patch"),
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("events.k8s.io", "events", "create"),
    ] {
        assert!(
            allows(&rules, group, resource, verb),
            "{verb} {group}/{resource}"
        );
    }
}

#[test]
fn the_role_is_least_privilege() {
    let role: Role = serde_yaml::from_str(&config("rbac/role.yaml")).unwrap();
    let rules = role.rules.unwrap();
    for r in &rules {
        assert!(!r.verbs.iter().any(|v| v == "*"), "no wildcard verbs");
        assert!(
            !r.resources.iter().flatten().any(|x| x == "*"),
            "no wildcard resources"
        );
    }
    assert!(
        !allows(&rules, "", "secrets", "delete"),
        "never deletes Secrets"
    );
    assert!(
        !allows(&rules, "", "persistentvolumeclaims", "delete"),
        "never deletes PVCs"
    );
    let cluster: ClusterRole = serde_yaml::from_str(&config("rbac/cluster_role.yaml")).unwrap();
    for r in cluster.rules.unwrap() {
        assert_eq!(
            r.verbs,
            ["get", "list", "watch"],
            "cluster scope is read-only"
        );
    }
}

#[test]
fn the_manager_runs_two_replicas_of_the_operator() {
    let d: Deployment = serde_yaml::from_str(&config("manager/deployment.yaml")).unwrap();
    let spec = d.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("rustqueue-operator")
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("rustqueue:dev"));
    assert_eq!(c.command, Some(vec!["rustqueue-operator".to_string()]));
    let env = c.env.clone().unwrap();
    let bind = env
        .iter()
        .find(|e| e.name == "RUSTQUEUE_OPERATOR_HTTP_ADDRESS")
        .unwrap();
    assert_eq!(bind.value.as_deref(), Some("$(POD_IP):8080"));
}
