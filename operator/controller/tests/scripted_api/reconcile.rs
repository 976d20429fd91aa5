//! `reconcile`: observe → plan → apply → status for RustQueue `q`, against the scripted API.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action as Requeue;
use rustqueue_api::crd::RustQueue;
use rustqueue_operator::testing::{CAPABLE, error_policy, reconcile};
use rustqueue_operator::{Context, Error};
use serde_json::{Value, json};

use super::api::ScriptedApi;
use super::{FIELD_MANAGER, UID, assert_every_call_is_listed, cluster_with, context, rustqueue};

const RQ: &str = "/apis/rustqueue.io/v1alpha1/namespaces/ns/rustqueues/q";

/// The RustQueue as the API holds it now (what the next watch event would carry).
fn current(api: &ScriptedApi) -> RustQueue {
    serde_json::from_value(api.get(RQ).expect("the RustQueue")).expect("a RustQueue")
}

/// Reconcile twice (the auth Secret, then the probe Pod and the runtime), then finish the
/// probe Pod as the kubelet would: its container exits reporting a capable binary.
async fn preflight_passed(api: &ScriptedApi, ctx: &Arc<Context>) {
    for _ in 0..2 {
        reconcile(Arc::new(current(api)), ctx.clone())
            .await
            .unwrap();
    }
    let probes = api.paths_under("/api/v1/namespaces/ns/pods/q-preflight-");
    let [probe] = probes.as_slice() else {
        panic!("one probe Pod: {probes:?}");
    };
    api.edit(probe, |pod| {
        pod["status"] = json!({
            "phase": "Succeeded",
            "containerStatuses": [{
                "name": "probe", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 0, "message": CAPABLE}},
            }],
        });
    });
}

/// The condition `type_` of the status the API holds.
fn condition(api: &ScriptedApi, type_: &str) -> Value {
    let status = &api.get(RQ).unwrap()["status"];
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

#[tokio::test]
async fn a_fresh_rustqueue_gets_its_auth_secret_and_a_status_stamped_with_its_generation() {
    let rq = rustqueue(3);
    let api = cluster_with(&rq, 3);
    let ctx = context(&api);

    let requeue = reconcile(Arc::new(rq), ctx).await.unwrap();
    assert_eq!(requeue, Requeue::requeue(Duration::from_secs(1)));
    let writes = api.writes();
    assert_eq!(
        writes[..2],
        ["POST secrets/q-auth", "PATCH rustqueues/q/status"]
    );
    assert!(
        writes[2..].iter().all(|w| w.starts_with("POST events/")),
        "then the phase change as an Event: {writes:?}"
    );

    let secret = api.get("/api/v1/namespaces/ns/secrets/q-auth").unwrap();
    let owner = &secret["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["uid"].as_str(), owner["controller"].as_bool()),
        (Some(UID), Some(true))
    );
    let status_patch = api
        .calls()
        .into_iter()
        .find(|c| c.target.subresource.as_deref() == Some("status"))
        .unwrap();
    assert!(status_patch.is_forced_apply_by(FIELD_MANAGER));
    assert_eq!(status_patch.body["kind"], "RustQueue");
    let status = &status_patch.body["status"];
    assert_eq!(status["observedGeneration"], 3);
    assert_eq!(status["phase"], "Scaling");
    assert_eq!(condition(&api, "Ready")["status"], "False");
    assert_eq!(condition(&api, "Ready")["observedGeneration"], 3);
    assert_eq!(condition(&api, "Progressing")["status"], "True");
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn with_its_secret_in_place_the_image_is_probed_and_the_runtime_applied_by_one_field_manager()
{
    let rq = rustqueue(1);
    let api = cluster_with(&rq, 3);
    let ctx = context(&api);
    reconcile(Arc::new(rq), ctx.clone()).await.unwrap();
    api.clear_calls();

    let requeue = reconcile(Arc::new(current(&api)), ctx).await.unwrap();
    assert_eq!(
        requeue,
        Requeue::requeue(Duration::from_secs(2)),
        "preflight is active"
    );
    let writes = api.writes();
    let probe = writes[1].strip_prefix("POST pods/").unwrap();
    assert!(probe.starts_with("q-preflight-"), "{writes:?}");
    let config_map = writes[0].strip_prefix("PATCH configmaps/").unwrap();
    assert!(
        config_map.starts_with("q-config-"),
        "the probe mounts it: {writes:?}"
    );
    assert_eq!(
        writes[2..writes.len() - 1],
        [
            "PATCH serviceaccounts/q-runtime",
            "PATCH roles/q-runtime",
            "PATCH rolebindings/q-runtime",
            "PATCH networkpolicies/q-internal",
            "PATCH services/q-brokers",
            "PATCH services/q-discovery",
            "PATCH services/q-gateway",
            "PATCH deployments/q-discovery",
            "PATCH daemonsets/q-gateway",
            "PATCH poddisruptionbudgets/q-discovery-pdb",
            "PATCH serviceaccounts/q-console",
            "PATCH roles/q-console",
            "PATCH rolebindings/q-console",
            "PATCH networkpolicies/q-console",
            "PATCH services/q-console",
            "PATCH deployments/q-console",
            "PATCH rustqueues/q/status",
        ],
        "no broker StatefulSet before the image passed its preflight"
    );
    assert!(
        api.calls()
            .iter()
            .filter(|c| c.method == "PATCH")
            .all(|c| c.is_forced_apply_by(FIELD_MANAGER)),
        "every apply and the status are forced server-side applies by the operator"
    );
    assert_eq!(api.get(RQ).unwrap()["status"]["phase"], "Preflight");
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn once_the_probe_finds_the_image_capable_the_broker_set_is_applied_config_first() {
    let rq = rustqueue(1);
    let api = cluster_with(&rq, 3);
    let ctx = context(&api);
    preflight_passed(&api, &ctx).await;
    api.clear_calls();

    reconcile(Arc::new(current(&api)), ctx).await.unwrap();
    let writes = api.writes();
    let at = |kind: &str| {
        writes
            .iter()
            .position(|w| w.starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind} in {writes:?}"))
    };
    assert!(
        at("PATCH configmaps/") < at("PATCH networkpolicies/q-broker-ingress"),
        "{writes:?}"
    );
    assert!(
        at("PATCH networkpolicies/q-broker-ingress") < at("PATCH statefulsets/q"),
        "{writes:?}"
    );
    assert!(
        at("PATCH statefulsets/q") < at("PATCH poddisruptionbudgets/q-brokers"),
        "{writes:?}"
    );
    let sts = api
        .get("/apis/apps/v1/namespaces/ns/statefulsets/q")
        .unwrap();
    assert_eq!(sts["spec"]["replicas"], 3, "one broker per eligible Node");
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(sts["metadata"]["ownerReferences"][0]["uid"], UID);
    assert_every_call_is_listed(&api);
}

#[tokio::test]
async fn a_reconcile_that_decides_what_the_status_says_writes_no_status() {
    let rq = rustqueue(1);
    let api = cluster_with(&rq, 1);
    let ctx = context(&api);
    for _ in 0..3 {
        reconcile(Arc::new(current(&api)), ctx.clone())
            .await
            .unwrap();
    }
    let settled = api.get(RQ).unwrap()["status"].clone();
    api.clear_calls();

    reconcile(Arc::new(current(&api)), ctx).await.unwrap();
    assert!(
        !api.writes().iter().any(|w| w.ends_with("/status")),
        "{:?}",
        api.writes()
    );
    assert_eq!(api.get(RQ).unwrap()["status"], settled);
}

#[tokio::test]
async fn an_apply_that_loses_a_race_is_an_api_conflict_retried_at_once_and_shown_in_status() {
    let rq = rustqueue(2);
    let api = cluster_with(&rq, 3);
    let ctx = context(&api);
    preflight_passed(&api, &ctx).await;
    api.fail("PATCH", "/apis/apps/v1/namespaces/ns/statefulsets/q", 409);

    let rq = Arc::new(current(&api));
    let e = reconcile(rq.clone(), ctx.clone()).await.unwrap_err();
    assert!(e.to_string().starts_with("apply StatefulSet q: "), "{e}");
    assert_eq!(e.metric_label(), "api_conflict");
    assert_eq!(
        error_policy(rq, &e, ctx.clone()),
        Requeue::requeue(Duration::from_secs(1))
    );
    let status = api.get(RQ).unwrap()["status"].clone();
    assert_eq!(status["phase"], "ReconcileError");
    assert_eq!(status["observedGeneration"], 2);
    let degraded = condition(&api, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("apply StatefulSet q"),
        "{degraded}"
    );
    assert!(
        ctx.metrics
            .render()
            .contains(r#"rustqueue_operator_reconcile_errors_total{reason="api_conflict"} 1"#),
        "{}",
        ctx.metrics.render()
    );
}

#[tokio::test]
async fn each_api_failure_reaches_the_error_policy_as_its_kind_and_nothing_is_applied() {
    let cases = [
        (409, "api_conflict", 1),
        (429, "api_throttled", 20),
        (403, "api_refused", 60),
        (500, "api_unavailable", 10),
        (503, "api_unavailable", 10),
    ];
    for (code, label, secs) in cases {
        let rq = rustqueue(1);
        let api = cluster_with(&rq, 3);
        let ctx = context(&api);
        api.fail("GET", "/api/v1/nodes", code);

        let rq = Arc::new(rq);
        let e: Error = reconcile(rq.clone(), ctx.clone()).await.unwrap_err();
        assert!(e.to_string().starts_with("list eligible Nodes: "), "{e}");
        assert_eq!(e.metric_label(), label, "{code}");
        assert_eq!(
            error_policy(rq, &e, ctx),
            Requeue::requeue(Duration::from_secs(secs)),
            "{code}"
        );
        let writes = api.writes();
        assert_eq!(writes[0], "PATCH rustqueues/q/status", "{code}: {writes:?}");
        assert!(
            writes[1..].iter().all(|w| w.starts_with("POST events/")),
            "{code}: only the status and its Event: {writes:?}"
        );
    }
}
