//! Storage through the operator: claims grow through StorageClass expansion and a shrink is
//! refused with a message.

use crate::cluster::{Cluster, LONG};
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
