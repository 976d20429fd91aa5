//! Storage through the operator: claims grow through StorageClass expansion, a shrink is
//! refused with a message, and a scale-down drains the highest ordinal to empty, removes it
//! and keeps its PVC (listed in `orphanedPvcs`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use rustqueue_e2e::tools::pynsq_consume;
use rustqueue_e2e::{Poll, eventually};

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::rollout::brokers;

fn claim_sizes(pvc: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> (String, String) {
    let req = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    let cap = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    (req, cap)
}

/// `storageSize` 1Gi -> 2Gi: every broker claim is patched and reaches 2Gi capacity before
/// the cluster is Ready again with `StorageReady`; 2Gi -> 1Gi is refused at `kubectl patch`
/// time by the CRD's CEL rule, with its message.
pub async fn claims_grow_with_storage_size_and_never_shrink(c: &Cluster) {
    c.ready(3).await;
    c.patch_spec_ok(r#"{"storageSize":"2Gi"}"#);
    let rq = c
        .until("Ready with 2Gi claims", LONG, |rq| {
            rq.is_ready() && rq.condition_true("StorageReady")
        })
        .await;
    for b in brokers() {
        let pvc = c.pvcs.get(&format!("data-{b}")).await.unwrap();
        assert_eq!(
            claim_sizes(&pvc),
            ("2Gi".into(), "2Gi".into()),
            "data-{b} (request, capacity) while the RustQueue says {rq:?}"
        );
    }

    let refused = c.patch_spec(r#"{"storageSize":"1Gi"}"#);
    assert!(!refused.success, "storageSize 2Gi -> 1Gi was accepted");
    assert!(
        refused.stderr.contains("storageSize cannot shrink"),
        "the shrink was refused without the CEL message: {}",
        refused.stderr
    );
    for b in brokers() {
        let pvc = c.pvcs.get(&format!("data-{b}")).await.unwrap();
        assert_eq!(claim_sizes(&pvc).0, "2Gi", "data-{b} was shrunk");
    }
    c.ready(3).await;
}

/// With level 2 active, `storageFeatureLevel` 2 -> 1 is refused at `kubectl patch` time by
/// the CRD's CEL rule, with a message naming the floor; the brokers stay at level 2 and the
/// cluster stays Ready. (Taking back a raise that never activated is allowed: the levels step
/// does it.)
pub async fn the_feature_level_is_never_lowered_below_the_active_one(c: &Cluster) {
    let rq = c.ready(3).await;
    assert_eq!(rq.status()["activeStorageFeatureLevel"], 2, "{rq:?}");
    let refused = c.patch_spec(r#"{"storageFeatureLevel":1}"#);
    assert!(!refused.success, "storageFeatureLevel 2 -> 1 was accepted");
    assert!(
        refused
            .stderr
            .contains("spec.storageFeatureLevel cannot be lowered below status.activeStorageFeatureLevel, the floor"),
        "the lowering was refused without the CEL message naming the floor: {}",
        refused.stderr
    );
    c.ready(3).await;
    for b in brokers() {
        let caps = c.broker_get(&b, "/v1/capabilities").await;
        assert_eq!(
            caps["storage"]["active_writer_feature_level"], 2,
            "{b}: {caps}"
        );
    }
}

/// `maxBrokers` 3 -> 2: the highest ordinal is drained (publishing refused, consumers still
/// served) and stays until empty, then the StatefulSet shrinks; its PVC is retained and listed.
pub async fn a_scale_down_drains_the_highest_broker_to_empty_and_keeps_its_claim(c: &Cluster) {
    c.ready(3).await;
    let token = c.admin_token().await;
    let ip2 = c.pod_ip(&format!("{RQ}-2")).await;
    let url = |p: &str| format!("http://{ip2}:4151{p}");
    // What earlier steps left on queue-2 (a publish the ledger's producer sent as it stopped,
    // say) would hold the drain forever, as it must: the operator never discards a backlog.
    // Empty it first, as a user would before scaling down; this step's own 5 messages are then
    // consumed by a client.
    let stats = c.broker_get(&format!("{RQ}-2"), "/stats?format=json").await;
    for t in stats["topics"].as_array().into_iter().flatten() {
        // `#ephemeral` names must not start a URL fragment.
        let topic = t["topic_name"]
            .as_str()
            .unwrap_or_default()
            .replace('#', "%23");
        let channels = t["channels"].as_array().cloned().unwrap_or_default();
        if channels.is_empty() {
            let empty = url(&format!("/topic/empty?topic={topic}"));
            assert_eq!(http_post(&empty, Some(&token), "").await, 200, "{empty}");
        }
        for ch in channels {
            let channel = ch["channel_name"]
                .as_str()
                .unwrap_or_default()
                .replace('#', "%23");
            let empty = url(&format!("/channel/empty?topic={topic}&channel={channel}"));
            assert_eq!(http_post(&empty, Some(&token), "").await, 200, "{empty}");
        }
    }
    assert_eq!(
        http_post(
            &url("/channel/create?topic=leftover&channel=c"),
            Some(&token),
            ""
        )
        .await,
        200
    );
    for i in 0..5 {
        assert_eq!(
            http_post(&url("/pub?topic=leftover"), None, &format!("l{i}")).await,
            200
        );
    }
    c.patch_spec_ok(r#"{"minBrokers":2,"maxBrokers":2}"#);
    let rq = c
        .until("Draining queue-2", LONG, |rq| rq.phase() == "Draining")
        .await;
    assert_eq!(rq.operation()["kind"], "ScaleDown", "{rq:?}");
    assert_eq!(rq.operation()["target"], format!("{RQ}-2"), "{rq:?}");
    // A draining broker is unready on purpose (Services stop sending it publishes); what must
    // hold is that it stays, and the set keeps 3 replicas, while its backlog is unconsumed.
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), NS);
    // A hold, not a synchronisation: nothing may remove queue-2 for 3 s while it has a backlog.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        c.pods.get_opt(&format!("{RQ}-2")).await.unwrap().is_some(),
        "queue-2 was removed with 5 messages still on it"
    );
    assert_eq!(
        sts.get(RQ).await.unwrap().spec.replicas,
        Some(3),
        "the set shrank before queue-2 was empty"
    );
    let code = http_post(&url("/pub?topic=leftover"), None, "late").await;
    assert_ne!(code, 200, "a draining broker accepted a publish");
    let mut got = pynsq_consume(
        &format!("{ip2}:4150"),
        "leftover",
        "c",
        5,
        Duration::from_secs(30),
    );
    got.sort();
    assert_eq!(got, ["l0", "l1", "l2", "l3", "l4"]);

    let rq = c.ready(2).await;
    let replicas = sts.get(RQ).await.unwrap().spec.replicas;
    assert_eq!(replicas, Some(2), "{rq:?}");
    assert_eq!(rq.operation()["kind"], "ScaleDown", "{rq:?}");
    assert_eq!(rq.operation()["phase"], "Completed", "{rq:?}");
    eventually("queue-2 gone", LONG, || async {
        match c.pods.get_opt(&format!("{RQ}-2")).await {
            Ok(None) => Poll::Done(()),
            other => Poll::Saw(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        c.pvcs
            .get_opt(&format!("data-{RQ}-2"))
            .await
            .unwrap()
            .is_some(),
        "the scaled-down broker's PVC was deleted"
    );
    assert_eq!(
        rq.status()["orphanedPvcs"],
        serde_json::json!([format!("data-{RQ}-2")]),
        "{rq:?}"
    );
    assert!(rq.condition_true("OrphanedPVCs"), "{rq:?}");
}
