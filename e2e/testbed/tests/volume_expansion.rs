//! Claim expansion on the testbed, end to end as a CSI driver and the external-resizer report
//! it: the default StorageClass allows expansion; a bound claim whose request grows passes
//! through `Resizing` / `ControllerResizeInProgress` and ends with the PV's capacity, the
//! claim's `status.capacity` and `allocatedResources` at the new size; the API server refuses
//! a shrink below the capacity, and (admission plugin `PersistentVolumeClaimResize`) any growth
//! of a claim whose class does not allow expansion.

mod support;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rustqueue_testbed::STORAGE_CLASS;
use serde_json::json;
use support::{TOOLS, is_ready, wait_pod};

const NS: &str = "expansion";
const LONG: Duration = Duration::from_secs(120);

fn claim(name: &str, class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))
    .unwrap()
}

fn pod_using(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"rustqueue.io/eligible": "true"},
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c",
                "image": TOOLS,
                "command": ["sleep", "600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
    .unwrap()
}

fn grow(to: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": to}}}}))
}

fn capacity(pvc: &PersistentVolumeClaim) -> Option<String> {
    let s = pvc.status.as_ref()?;
    Some(s.capacity.as_ref()?.get("storage")?.0.clone())
}

/// What a watch saw of the claim's status while it was resized.
#[derive(Debug, Default)]
struct Seen {
    resizing_condition: bool,
    in_progress: bool,
    statuses: Vec<String>,
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn a_bound_claim_grows_through_the_resizer_and_cannot_shrink() {
    support::run(async {
        let bed = support::start().await;
        let client = bed.client();
        bed.create_namespace(NS).await.unwrap();

        let sc = Api::<StorageClass>::all(client.clone())
            .get(STORAGE_CLASS)
            .await
            .unwrap();
        assert_eq!(sc.allow_volume_expansion, Some(true), "{sc:?}");

        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let pp = PostParams::default();
        pvcs.create(&pp, &claim("data", STORAGE_CLASS))
            .await
            .unwrap();
        pods.create(&pp, &pod_using("user", "data")).await.unwrap();
        wait_pod(&pods, "user", "Ready on its claim", LONG, is_ready).await;
        let bound = pvcs.get("data").await.unwrap();
        assert_eq!(
            capacity(&bound).as_deref(),
            Some("1Gi"),
            "{:?}",
            bound.status
        );
        let volume = bound.spec.unwrap().volume_name.expect("bound to a PV");

        // Every status the claim passes through, from a watch started before the change.
        let mut events = watcher(
            pvcs.clone(),
            watcher::Config::default().fields("metadata.name=data"),
        )
        .boxed();
        let seen = async {
            let mut seen = Seen::default();
            while let Some(ev) = events.next().await {
                let Ok(watcher::Event::Apply(pvc) | watcher::Event::InitApply(pvc)) = ev else {
                    continue;
                };
                let status = pvc.status.clone().unwrap_or_default();
                seen.statuses.push(format!(
                    "capacity {:?} allocated {:?} statuses {:?} conditions {:?}",
                    capacity(&pvc),
                    status.allocated_resources,
                    status.allocated_resource_statuses,
                    status
                        .conditions
                        .as_ref()
                        .map(|cs| cs.iter().map(|c| c.type_.clone()).collect::<Vec<_>>()),
                ));
                seen.resizing_condition |= status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Resizing" && c.status == "True");
                seen.in_progress |= status
                    .allocated_resource_statuses
                    .as_ref()
                    .and_then(|s| s.get("storage"))
                    .is_some_and(|s| s == "ControllerResizeInProgress");
                if capacity(&pvc).as_deref() == Some("2Gi") {
                    return (seen, pvc);
                }
            }
            panic!("the watch ended: {seen:?}");
        };
        pvcs.patch("data", &PatchParams::default(), &grow("2Gi"))
            .await
            .unwrap();
        let (seen, grown) = tokio::time::timeout(LONG, seen)
            .await
            .expect("claim capacity reaches 2Gi");
        assert!(
            seen.resizing_condition && seen.in_progress,
            "the claim never showed Resizing / ControllerResizeInProgress: {:#?}",
            seen.statuses
        );
        let status = grown.status.unwrap();
        assert_eq!(
            status
                .allocated_resources
                .as_ref()
                .map(|a| a["storage"].0.as_str()),
            Some("2Gi"),
            "allocatedResources after the resize: {status:?}"
        );
        assert!(
            !status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Resizing"),
            "Resizing left behind: {status:?}"
        );
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get(&volume)
            .await
            .unwrap();
        assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "2Gi");

        // Below the capacity is refused by the API server's validation.
        let shrink = pvcs
            .patch("data", &PatchParams::default(), &grow("1Gi"))
            .await;
        assert!(
            matches!(&shrink, Err(kube::Error::Api(s)) if s.code == 422),
            "shrinking a 2Gi claim to 1Gi: {shrink:?}"
        );

        // A class without allowVolumeExpansion: the resize admission plugin refuses growth.
        let fixed: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "testbed-fixed"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": false,
        }))
        .unwrap();
        Api::<StorageClass>::all(client.clone())
            .create(&pp, &fixed)
            .await
            .unwrap();
        let dir = bed.dir().join("fixed-volume");
        std::fs::create_dir_all(&dir).unwrap();
        let static_pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "fixed"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "testbed-fixed",
                "hostPath": {"path": dir.to_string_lossy()},
                "claimRef": {"namespace": NS, "name": "fixed"},
            },
        }))
        .unwrap();
        Api::<PersistentVolume>::all(client.clone())
            .create(&pp, &static_pv)
            .await
            .unwrap();
        pvcs.create(&pp, &claim("fixed", "testbed-fixed"))
            .await
            .unwrap();
        let mut last = None;
        for _ in 0..240 {
            let pvc = pvcs.get("fixed").await.unwrap();
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
                last = None;
                break;
            }
            last = Some(pvc.status);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(last.is_none(), "claim fixed never bound: {last:?}");
        let refused = pvcs
            .patch("fixed", &PatchParams::default(), &grow("2Gi"))
            .await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("resize")),
            "growing a claim of a class without allowVolumeExpansion: {refused:?}"
        );

        bed.shutdown();
    });
}
