//! Every Kubernetes API call the operator makes, as (API group, resource, verb). The RBAC in
//! `config/rbac` must grant exactly these: `tests/config_manifests.rs` compares the two, so a
//! new call without its permission (or a permission nothing uses) fails the build's tests.
//!
//! Server-side apply of an object that may not exist yet needs both `create` and `patch`.

/// Namespaced calls, in every namespace the operator manages (`ClusterRole`).
pub const NAMESPACED: &[(&str, &str, &[&str])] = &[
    // controller: the RustQueue watch; status: merge of the status subresource. `get`: held
    // so the operator may grant it to the console's Role.
    ("rustqueue.io", "rustqueues", &["get", "list", "watch"]),
    ("rustqueue.io", "rustqueues/status", &["patch"]),
    // observe: broker, probe, Kodo Gateway and discovery Pods (and the controller's Pod
    // watch); apply: DeletePod, CreateProbePod, DeleteProbePod. `get`: held for the console's
    // Role.
    ("", "pods", &["get", "list", "watch", "create", "delete"]),
    // observe: broker claims; apply: PatchClaim. `get`, `watch`: held for the console's Role.
    (
        "",
        "persistentvolumeclaims",
        &["get", "list", "watch", "patch"],
    ),
    // observe: the auth Secret; apply: CreateAuthSecret.
    ("", "secrets", &["get", "create"]),
    // observe: broker ConfigMaps; apply: ApplyBrokerSet (SSA), DeleteConfigMap.
    ("", "configmaps", &["list", "create", "patch", "delete"]),
    // controller: owns Services; observe: get (the discovery selector's mode); apply:
    // ApplyRuntime (SSA), DeleteKodoGateways (get, then delete).
    (
        "",
        "services",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // apply: ApplyRuntime (SSA); DeleteConsole (get, then delete).
    ("", "serviceaccounts", &["get", "create", "patch", "delete"]),
    // observe: get (brokers, Kodo Gateways); controller: owns; apply: ApplyBrokerSet and
    // ApplyRuntime (SSA), DeleteKodoGateways (get, then delete: only the Gateways', never the
    // brokers'; `apply::kodo_gateway_objects`).
    (
        "apps",
        "statefulsets",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // observe: get (is the runtime available); controller: owns; apply: ApplyRuntime, the
    // discovery and console Deployments and the gateway DaemonSet (SSA); DeleteConsole (get,
    // then delete).
    (
        "apps",
        "deployments",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        "apps",
        "daemonsets",
        &["get", "list", "watch", "create", "patch"],
    ),
    // apply: ApplyBrokerSet and ApplyRuntime (the brokers', discovery's and the Kodo
    // Gateways' PDB), SSA; DeleteKodoGateways (get, then delete).
    (
        "policy",
        "poddisruptionbudgets",
        &["get", "create", "patch", "delete"],
    ),
    // apply: ApplyBrokerSet (the brokers' policy) and ApplyRuntime (the internal one and the
    // Kodo Gateways'), SSA; DeleteKodoGateways (get, then delete).
    (
        "networking.k8s.io",
        "networkpolicies",
        &["get", "create", "patch", "delete"],
    ),
    // apply: ApplyRuntime (SSA, the runtime's and the console's); DeleteConsole (get, then
    // delete).
    (
        "rbac.authorization.k8s.io",
        "roles",
        &["get", "create", "patch", "delete"],
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["get", "create", "patch", "delete"],
    ),
    // Not called: held so the operator may grant it to the brokers' runtime Role.
    (
        "discovery.k8s.io",
        "endpointslices",
        &["get", "list", "watch"],
    ),
    // apply: record_transition (the Event recorder creates, then patches a series).
    ("events.k8s.io", "events", &["create", "patch"]),
    // Not called: held for the console's Role (it lists Events and, with management, records
    // its own).
    ("", "events", &["get", "list", "watch", "create", "patch"]),
    // Not called: held so the operator may grant them to the console's Role (management).
    (
        "rustqueue.io",
        "rustqueuetopics",
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    ),
    (
        "rustqueue.io",
        "rustqueuechannels",
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
    ),
];

/// Cluster-scoped reads (`ClusterRole`).
pub const CLUSTER: &[(&str, &str, &[&str])] = &[
    // observe: eligible Nodes (metadata list).
    ("", "nodes", &["list"]),
    // observe: the StorageClass of the claims (allowVolumeExpansion).
    ("storage.k8s.io", "storageclasses", &["get"]),
];

/// Calls in the operator's own namespace only (`Role`).
pub const OWN_NAMESPACE: &[(&str, &str, &[&str])] = &[
    // leader: get, create, replace (update); release on SIGTERM is a replace too.
    (
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    ),
];
