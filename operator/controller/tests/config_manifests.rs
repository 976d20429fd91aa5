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
fn config_crd_holds_every_generated_crd() {
    let kustomization = config("crd/kustomization.yaml");
    for (file, yaml) in rustqueue_operator::crd_files() {
        assert!(
            config(&format!("crd/{file}")) == yaml,
            "config/crd/{file} is stale: run `make crds`"
        );
        assert!(
            kustomization.contains(&format!("- {file}")),
            "config/crd/kustomization.yaml does not list {file}"
        );
    }
}

#[test]
fn the_sample_is_valid_under_the_crd_rules() {
    let rq: RustQueue =
        serde_norway::from_str(&config("samples/rustqueue_v1alpha1_rustqueue.yaml")).unwrap();
    assert_eq!(rq.spec.min_brokers, 3);
    assert_eq!(rq.spec.max_brokers, 3);
    rq.validate_cel().expect("sample passes CEL");
    assert!(rustqueue_operator::testing::validate("queue", &rq.spec).is_empty());
}

#[test]
fn the_tiering_sample_is_valid_and_names_its_credentials_secret() {
    let rq: RustQueue =
        serde_norway::from_str(&config("samples/rustqueue_v1alpha1_rustqueue_tiering.yaml"))
            .unwrap();
    let t = rq
        .spec
        .tiering
        .as_ref()
        .expect("the sample turns tiering on");
    assert_eq!(t.credentials_secret.name, "queue-bucket");
    assert_eq!(t.credentials_secret.access_key_id_key, "access-key-id");
    assert!(
        !t.local_retention(),
        "the sample can still turn tiering off"
    );
    rq.validate_cel().expect("sample passes CEL");
    assert!(rustqueue_operator::testing::validate("queue", &rq.spec).is_empty());
}

type Grants = std::collections::BTreeSet<(String, String, String)>;

fn grants(rules: &[k8s_openapi::api::rbac::v1::PolicyRule]) -> Grants {
    let mut out = Grants::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    assert!(v != "*" && res != "*", "no wildcards: {r:?}");
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

fn calls(table: &[&[(&str, &str, &[&str])]]) -> Grants {
    table
        .iter()
        .flat_map(|t| t.iter())
        .flat_map(|(g, r, verbs)| {
            verbs
                .iter()
                .map(|v| (g.to_string(), r.to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn the_cluster_role_grants_exactly_the_calls_the_operator_makes() {
    use rustqueue_operator::calls::{CLUSTER, NAMESPACED};
    let role: ClusterRole = serde_norway::from_str(&config("rbac/cluster_role.yaml")).unwrap();
    let granted = grants(&role.rules.unwrap());
    let called = calls(&[NAMESPACED, CLUSTER]);
    let unused: Vec<_> = granted.difference(&called).collect();
    let missing: Vec<_> = called.difference(&granted).collect();
    assert!(
        unused.is_empty() && missing.is_empty(),
        "granted but not called: {unused:?}; called but not granted: {missing:?}"
    );
}

#[test]
fn the_namespaced_role_grants_exactly_the_lease_calls() {
    use rustqueue_operator::calls::OWN_NAMESPACE;
    let role: Role = serde_norway::from_str(&config("rbac/role.yaml")).unwrap();
    assert_eq!(grants(&role.rules.unwrap()), calls(&[OWN_NAMESPACE]));
}

#[test]
fn the_operator_never_deletes_claims_or_secrets() {
    use rustqueue_operator::calls::NAMESPACED;
    let called = calls(&[NAMESPACED]);
    for res in ["persistentvolumeclaims", "secrets"] {
        assert!(
            !called.contains(&(String::new(), res.to_string(), "delete".to_string())),
            "{res}"
        );
    }
}

/// StatefulSets may be deleted (RBAC cannot name them) only as the Kodo Gateways' removal:
/// the one StatefulSet it deletes is `<n>-kodo-gateway`, never the brokers' `<n>`.
#[test]
fn the_only_statefulset_the_operator_deletes_is_the_kodo_gateways() {
    use rustqueue_operator::{KodoObjectKind, kodo_gateway_objects};
    let sets: Vec<String> = kodo_gateway_objects("q")
        .into_iter()
        .filter(|(k, _)| *k == KodoObjectKind::StatefulSet)
        .map(|(_, n)| n)
        .collect();
    assert_eq!(sets, ["q-kodo-gateway"]);
}

#[test]
fn the_manager_runs_two_replicas_of_the_operator() {
    let d: Deployment = serde_norway::from_str(&config("manager/deployment.yaml")).unwrap();
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
    let watch = env.iter().find(|e| e.name == "WATCH_NAMESPACES").unwrap();
    assert_eq!(
        watch.value.as_deref(),
        Some(""),
        "every namespace by default"
    );
    let bind = env
        .iter()
        .find(|e| e.name == "RUSTQUEUE_OPERATOR_HTTP_ADDRESS")
        .unwrap();
    assert_eq!(bind.value.as_deref(), Some("$(POD_IP):8080"));
}

/// RBAC refuses to let the operator grant what it does not hold: every rule of the Roles it
/// renders (the runtime's, the console's with and without management) is in its ClusterRole.
#[test]
fn the_operator_holds_every_permission_it_grants_its_children() {
    use rustqueue_operator::testing::{ConsoleObjects, Owner, role};
    let cluster_role: ClusterRole =
        serde_norway::from_str(&config("rbac/cluster_role.yaml")).unwrap();
    let held = grants(&cluster_role.rules.unwrap());
    let owner = Owner {
        name: "queue",
        namespace: "ns",
        uid: "u",
    };
    let mut granted = grants(&role(&owner).rules.unwrap());
    for management in [false, true] {
        let mut spec = rustqueue_api::crd::RustQueueSpec::with_image("rustqueue:dev");
        spec.console_management_enabled = management;
        let console = ConsoleObjects::render(&owner, &spec, "queue-auth", "rustqueue:dev").unwrap();
        granted.extend(grants(&console.role.rules.unwrap()));
    }
    let missing: Vec<_> = granted.difference(&held).collect();
    assert!(
        missing.is_empty(),
        "granted to a child but not held: {missing:?}"
    );
}
