//! `Applier::carry_out`: each action makes exactly the calls it names, and a refusal comes
//! back as the `Error` kind that decides the retry.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::controller::Action as Requeue;
use rustqueue_operator::Error;
use rustqueue_operator::testing::{
    Action, Applier, Desired, DesiredInputs, Observed, Owner, error_policy,
};
use serde_json::json;

use super::api::ScriptedApi;
use super::{FIELD_MANAGER, NS, UID, assert_every_call_is_listed, context, named, rustqueue};

const OWNER: Owner<'static> = Owner {
    name: "q",
    namespace: NS,
    uid: UID,
};

fn desired() -> Desired {
    let inputs = DesiredInputs {
        tiering_secret_revision: None,
        auth_secret_name: "q-auth".into(),
        auth_secret_revision: "1".into(),
        claim_template_size: None,
        feature_level_floor: 1,
    };
    Desired::render(&OWNER, &rustqueue(1).spec, &inputs)
}

/// Carry out `action` for RustQueue `q`, decided from `observed`, against `api`.
async fn carry_out(api: &ScriptedApi, observed: &Observed, action: Action) -> Result<(), Error> {
    let ctx = context(api);
    let desired = desired();
    let applier = Applier {
        ctx: &ctx,
        owner: &OWNER,
        desired: &desired,
        observed,
        tokens: None,
    };
    applier.carry_out(&action).await.map(drop)
}

fn three_brokers() -> Observed {
    Observed::test().brokers(3).build()
}

/// `name` in `ns`, controller-owned by the RustQueue of `owner_uid`.
fn owned(name: &str, owner_uid: &str) -> kube::api::ObjectMeta {
    let mut meta = named(name);
    meta.namespace = Some(NS.into());
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "rustqueue.io/v1alpha1".into(),
        kind: "RustQueue".into(),
        name: "q".into(),
        uid: owner_uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    meta
}

/// How long `reconcile` waits after `e`, as the controller's error policy says.
fn back_off(api: &ScriptedApi, e: &Error) -> Requeue {
    error_policy(std::sync::Arc::new(rustqueue(1)), e, context(api))
}

#[tokio::test]
async fn deleting_a_pod_issues_exactly_one_delete_of_that_pod_and_a_gone_pod_is_no_error() {
    let api = ScriptedApi::new();
    api.put(&Pod {
        metadata: owned("q-1", UID),
        ..Pod::default()
    });
    let delete = || Action::DeletePod { pod: "q-1".into() };

    carry_out(&api, &three_brokers(), delete()).await.unwrap();
    let calls = api.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].method, "DELETE");
    assert_eq!(calls[0].path, "/api/v1/namespaces/ns/pods/q-1");
    assert!(
        calls[0].body["preconditions"].is_null(),
        "a broker Pod is deleted whatever it is now: the StatefulSet recreates it"
    );
    assert!(api.get("/api/v1/namespaces/ns/pods/q-1").is_none());

    carry_out(&api, &three_brokers(), delete()).await.unwrap();
    assert_eq!(api.writes(), ["DELETE pods/q-1", "DELETE pods/q-1"]);
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn a_refused_pod_delete_names_the_pod_and_waits_a_minute_for_a_person() {
    let api = ScriptedApi::new();
    api.fail("DELETE", "/api/v1/namespaces/ns/pods/q-1", 403);

    let e = carry_out(
        &api,
        &three_brokers(),
        Action::DeletePod { pod: "q-1".into() },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().starts_with("delete Pod q-1: "), "{e}");
    assert_eq!(e.metric_label(), "api_refused");
    assert_eq!(
        back_off(&api, &e),
        Requeue::requeue(Duration::from_secs(60))
    );
}

#[tokio::test]
async fn removing_the_console_deletes_only_what_this_rustqueue_controls_under_a_uid_precondition() {
    let api = ScriptedApi::new();
    api.put(&Service {
        metadata: owned("q-console", UID),
        ..Service::default()
    });
    // a Deployment of the same name that another RustQueue controls
    api.put(&Deployment {
        metadata: owned("q-console", "another-uid"),
        ..Deployment::default()
    });
    let service = "/api/v1/namespaces/ns/services/q-console";
    let service_uid = api.get(service).unwrap()["metadata"]["uid"].clone();

    carry_out(&api, &three_brokers(), Action::DeleteConsole)
        .await
        .unwrap();
    assert_eq!(api.writes(), ["DELETE services/q-console"]);
    let delete = api
        .calls()
        .into_iter()
        .find(|c| c.method == "DELETE")
        .unwrap();
    assert_eq!(delete.body["preconditions"]["uid"], service_uid);
    assert!(api.get(service).is_none());
    assert!(
        api.get("/apis/apps/v1/namespaces/ns/deployments/q-console")
            .is_some()
    );
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn growing_a_claim_merge_patches_only_its_storage_request() {
    let api = ScriptedApi::new();
    api.put(&PersistentVolumeClaim {
        metadata: owned("data-q-0", UID),
        ..PersistentVolumeClaim::default()
    });
    let grow = Action::PatchClaim {
        name: "data-q-0".into(),
        size: "200Gi".into(),
    };

    carry_out(&api, &three_brokers(), grow).await.unwrap();
    let calls = api.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0].path,
        "/api/v1/namespaces/ns/persistentvolumeclaims/data-q-0"
    );
    assert_eq!(calls[0].content_type, "application/merge-patch+json");
    assert_eq!(
        calls[0].body,
        json!({"spec": {"resources": {"requests": {"storage": "200Gi"}}}})
    );
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn an_existing_auth_secret_is_never_overwritten() {
    let api = ScriptedApi::new();
    let mut secret = Secret {
        metadata: owned("q-auth", UID),
        ..Secret::default()
    };
    secret.string_data = Some([("admin-token".to_string(), "kept".to_string())].into());
    api.put(&secret);
    let path = "/api/v1/namespaces/ns/secrets/q-auth";
    let before = api.get(path).unwrap();

    carry_out(
        &api,
        &three_brokers(),
        Action::CreateAuthSecret {
            name: "q-auth".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        api.writes(),
        ["POST secrets/q-auth"],
        "one create, answered 409, and nothing after it"
    );
    assert_eq!(api.get(path).unwrap(), before);
}

#[tokio::test]
async fn the_broker_set_is_applied_config_first_with_one_field_manager_and_stops_at_a_failure() {
    let api = ScriptedApi::new();
    let apply = || Action::ApplyBrokerSet { replicas: 3 };

    carry_out(&api, &three_brokers(), apply()).await.unwrap();
    let calls = api.calls();
    let resources: Vec<&str> = calls.iter().map(|c| c.target.resource.as_str()).collect();
    assert_eq!(
        resources,
        [
            "configmaps",
            "networkpolicies",
            "statefulsets",
            "poddisruptionbudgets"
        ]
    );
    assert!(calls.iter().all(|c| c.is_forced_apply_by(FIELD_MANAGER)));
    let sts = &calls[2];
    assert_eq!(sts.path, "/apis/apps/v1/namespaces/ns/statefulsets/q");
    assert_eq!(sts.body["spec"]["replicas"], 3);
    assert_eq!(sts.body["spec"]["updateStrategy"]["type"], "OnDelete");
    let owner = &sts.body["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["uid"], &owner["controller"]),
        (&json!(UID), &json!(true))
    );
    assert_every_call_is_listed(&api);

    api.clear_calls();
    api.fail("PATCH", "/apis/apps/v1/namespaces/ns/statefulsets/q", 500);
    let e = carry_out(&api, &three_brokers(), apply())
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("apply StatefulSet q: "), "{e}");
    assert_eq!(e.metric_label(), "api_unavailable");
    assert_eq!(
        back_off(&api, &e),
        Requeue::requeue(Duration::from_secs(10))
    );
    assert_eq!(
        api.calls().len(),
        3,
        "the PDB after the StatefulSet is not applied"
    );
}

#[tokio::test]
async fn a_drain_that_cannot_be_sent_is_a_broker_error_and_makes_no_call() {
    let api = ScriptedApi::new();
    let no_ip = Observed::test()
        .brokers(3)
        .broker(1, |b| b.ip = None)
        .build();
    let resume = || Action::Resume { pod: "q-1".into() };

    let e = carry_out(&api, &no_ip, resume()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "broker q-1: no Pod IP to send the drain request to"
    );
    assert_eq!(e.metric_label(), "broker");
    assert_eq!(back_off(&api, &e), Requeue::requeue(Duration::from_secs(5)));

    // an IP but no admin token (the tests' Applier holds none): refused before any request
    let e = carry_out(&api, &three_brokers(), resume())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "broker q-1: no admin token in the auth Secret"
    );
    assert!(api.calls().is_empty());
}
