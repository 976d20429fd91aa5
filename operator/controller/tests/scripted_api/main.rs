//! `reconcile` and the `Applier` against a scripted API ([`api::ScriptedApi`]): kube builds
//! each request for real, the test says what the API holds or refuses, and the assertions
//! name the exact calls made. The e2e scenarios run the same code against a real API server;
//! these pin down its requests, their order and its error handling without one.

mod api;
mod carry_out;
mod reconcile;
mod spans;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ObjectMeta;
use kube::runtime::events::{Recorder, Reporter};
use rustqueue_api::crd::{RustQueue, RustQueueSpec};
use rustqueue_operator::calls::{CLUSTER, NAMESPACED};
use rustqueue_operator::{Context, Metrics, broker_http_client};

use api::{Call, ScriptedApi};

/// The namespace every test's RustQueue lives in.
const NS: &str = "ns";
/// The RustQueue's UID (what its children's controller reference names).
const UID: &str = "rq-uid";
/// The operator's field manager.
const FIELD_MANAGER: &str = rustqueue_api::labels::FIELD_MANAGER;

/// RustQueue `q` in `ns` at `generation`, as the API server would hand it to the controller.
fn rustqueue(generation: i64) -> RustQueue {
    let mut rq = RustQueue::new("q", RustQueueSpec::with_image("rustqueue:a"));
    rq.metadata.namespace = Some(NS.into());
    rq.metadata.uid = Some(UID.into());
    rq.metadata.generation = Some(generation);
    rq
}

/// An API server holding `rq`, the StorageClass its spec names and `nodes` eligible Nodes.
fn cluster_with(rq: &RustQueue, nodes: usize) -> ScriptedApi {
    let api = ScriptedApi::new();
    api.put(rq);
    api.put(&StorageClass {
        metadata: named(&rq.spec.storage_class_name),
        provisioner: "testbed".into(),
        allow_volume_expansion: Some(true),
        ..StorageClass::default()
    });
    let (key, value) = rustqueue_api::labels::DEFAULT_ELIGIBLE_NODE_SELECTOR
        .split_once('=')
        .expect("the default selector is key=value");
    for n in 0..nodes {
        let mut meta = named(&format!("node-{n}"));
        meta.labels = Some([(key.to_string(), value.to_string())].into());
        api.put(&Node {
            metadata: meta,
            ..Node::default()
        });
    }
    api
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

/// The shared state of reconciles, every client pointed at `api`.
fn context(api: &ScriptedApi) -> Arc<Context> {
    let client = api.client();
    Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "rustqueue-operator".into(),
                instance: Some("test".into()),
            },
        ),
        client,
        http: broker_http_client(),
        metrics: Metrics::new(),
        kodo_max_grace_seconds: None,
    })
}

/// Whether `calls.rs` (and so the RBAC the tests compare it with) grants `call`. A
/// server-side apply creates the object when it is missing, so it needs `create` too (not
/// on a subresource, whose object exists).
fn granted(call: &Call) -> bool {
    let t = &call.target;
    let resource = match &t.subresource {
        Some(sub) => format!("{}/{sub}", t.resource),
        None => t.resource.clone(),
    };
    let verbs: &[&str] = match (call.method.as_str(), &t.name) {
        ("GET", Some(_)) => &["get"],
        ("GET", None) => &["list"],
        ("POST", _) => &["create"],
        ("PATCH", _)
            if call.content_type == "application/apply-patch+yaml" && t.subresource.is_none() =>
        {
            &["create", "patch"]
        }
        ("PATCH", _) => &["patch"],
        ("DELETE", _) => &["delete"],
        (m, _) => panic!("unexpected method {m}"),
    };
    let table = if t.namespace.is_some() {
        NAMESPACED
    } else {
        CLUSTER
    };
    table.iter().any(|(g, r, granted)| {
        *g == t.group && *r == resource && verbs.iter().all(|v| granted.contains(v))
    })
}

/// Fails naming every call `api` saw that `calls.rs` does not list.
fn assert_every_call_is_listed(api: &ScriptedApi) {
    let missing: Vec<String> = api
        .calls()
        .iter()
        .filter(|c| !granted(c))
        .map(|c| format!("{} {}", c.method, c.path))
        .collect();
    assert!(
        missing.is_empty(),
        "calls missing from calls.rs: {missing:?}"
    );
}
