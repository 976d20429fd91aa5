//! Tiered storage through the operator (docs/tiering.md, "The operator's part"): a real
//! versitygw started by this test in the testbed's network namespace (every container shares
//! it, so the brokers reach it on loopback), `spec.tiering` naming a credentials Secret that
//! does not exist yet (a clear `InvalidSpec`, no broker touched), the Secret created (one
//! rollout turns tiering on), then a broker's PVC and Pod deleted once its sealed segment and
//! a checkpoint are up: the new Pod's restore init container rebuilds the volume from the
//! bucket before the broker starts, the operator records the report, and every message of the
//! uploaded segment is delivered while exactly the rest is counted lost. `spec.tracing` goes in
//! with the same rollout: the broker Pods carry the OpenTelemetry variables and run with them.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::pynsq_consume;
use rustqueue_e2e::{Poll, eventually};
use rustqueue_tier::ObjectKey;
use rustqueue_tier::test_server::{self, TestServer};
use serde_json::Value;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::rollout::{no_broker_touched_for, rolled_to, template};

/// The Secret `spec.tiering.credentialsSecret` names.
const SECRET: &str = "queue-bucket";
/// The key prefix of this RustQueue in the bucket.
const PREFIX: &str = "e2e";
/// The broker whose volume is lost (node id 1).
const LOST: &str = "queue-0";
/// The topic and channel of the step.
const TOPIC: &str = "tiered";
const CHANNEL: &str = "ledger";
/// Messages per MPUB and their body size: 34 batches of 50 x 64 KiB, about 106 MiB, so the
/// first 100 MiB segment (the operator's `max_segment_bytes`) seals and is uploaded.
const BATCHES: usize = 34;
const PER_BATCH: usize = 50;
const BODY: usize = 64 * 1024;

fn body(i: usize) -> String {
    let head = format!("m-{i:06}-");
    format!("{head}{}", "x".repeat(BODY - head.len()))
}

/// Where `spec.tracing` points the brokers (nothing listens: the step checks the Pods get
/// the variables and the brokers run with them; docs/observability.md has the spans, and
/// broker/server/tests/otlp_traces.rs their arrival at a real collector).
const OTLP_ENDPOINT: &str = "http://127.0.0.1:4318";

/// `spec.tiering`, and `spec.tracing` in the same apply (one rollout for both).
fn tiering_spec(server: &TestServer) -> String {
    format!(
        r#"{{"tiering":{{"bucket":"{}","endpoint":"{}","allowHttp":true,"prefix":"{PREFIX}","credentialsSecret":{{"name":"{SECRET}"}},"checkpointUploadSeconds":1}},"tracing":{{"otlpEndpoint":"{OTLP_ENDPOINT}","sampler":"traceidratio","samplerArg":"0.5"}}}}"#,
        test_server::BUCKET,
        server.endpoint()
    )
}

/// `spec.tiering` naming a Secret that does not exist: `InvalidSpec`, Degraded naming the
/// Secret and its keys, nothing touched; the Secret created: one rollout renders `[tiering]`
/// (the credentials only as mounted files) and the cluster is Ready with the restore init
/// container in every broker Pod.
pub async fn tiering_waits_for_its_credentials_secret_then_rolls_once(
    c: &Cluster,
    server: &TestServer,
) {
    c.ready(3).await;
    let (before, _) = template(c).await;
    c.patch_spec_ok(&tiering_spec(server));
    let missing = format!("Secret {SECRET} named by spec.tiering.credentialsSecret does not exist");
    let rq = c
        .until("InvalidSpec naming the missing Secret", LONG, |rq| {
            rq.phase() == "InvalidSpec" && rq.message().contains(&missing)
        })
        .await;
    let degraded = rq.condition("Degraded").cloned().unwrap_or_default();
    assert!(
        degraded["status"] == "True"
            && degraded["message"]
                .as_str()
                .is_some_and(|m| m.contains(&missing) && m.contains("access-key-id")),
        "{degraded}"
    );
    assert_eq!(
        rq.condition("Ready").map(|r| r["status"].clone()),
        Some("False".into())
    );
    no_broker_touched_for(c, Duration::from_secs(3), "with its Secret missing").await;
    assert_eq!(template(c).await.0, before, "the template changed");

    let data = BTreeMap::from([
        (
            "access-key-id".to_owned(),
            ByteString(test_server::ACCESS_KEY.into()),
        ),
        (
            "secret-access-key".to_owned(),
            ByteString(test_server::SECRET_KEY.into()),
        ),
    ]);
    let mut secret = Secret {
        data: Some(data),
        ..Secret::default()
    };
    secret.metadata.name = Some(SECRET.into());
    Api::<Secret>::namespaced(c.client.clone(), NS)
        .patch(
            SECRET,
            &PatchParams::apply("rustqueue-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("applying the bucket Secret");
    let revision = eventually("a broker revision with tiering", LONG, || async {
        match template(c).await.0 {
            Some(r) if Some(&r) != before.as_ref() => Poll::Done(r),
            other => Poll::Saw(other),
        }
    })
    .await;
    rolled_to(c, &revision, LONG).await;
    let pod = c.pods.get(LOST).await.expect("the broker Pod");
    let spec = pod.spec.expect("Pod spec");
    let init = spec.init_containers.unwrap_or_default();
    assert_eq!(init.first().map(|i| i.name.as_str()), Some("restore"));
    let env: BTreeMap<String, String> = spec
        .containers
        .first()
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect();
    for (name, want) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", OTLP_ENDPOINT),
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ("OTEL_SERVICE_NAME", "rustqueued"),
    ] {
        assert_eq!(
            env.get(name).map(String::as_str),
            Some(want),
            "{name}: {env:?}"
        );
    }
    let toml = c.broker_get(LOST, "/v1/capabilities").await;
    assert!(toml.is_object(), "{toml}");
}

/// The checkpoint of `TOPIC` for node 1 in the bucket, through the catalog.
async fn checkpoint(server: &TestServer) -> Option<Value> {
    let bucket = rustqueue_tier::Bucket::new(server.bucket_config(PREFIX)).ok()?;
    let get = |key: String| {
        let bucket = bucket.clone();
        async move {
            let (bytes, _) = bucket.get_verified(&ObjectKey::new(key).ok()?).await.ok()?;
            serde_json::from_slice::<Value>(&bytes).ok()
        }
    };
    let catalog = get("nodes/1/catalog.json".into()).await?;
    let entry = catalog["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic"] == TOPIC)?
        .clone();
    let hex: String = TOPIC.bytes().map(|b| format!("{b:02x}")).collect();
    let incarnation = entry["incarnation"].as_str()?;
    get(format!(
        "nodes/1/topics/{hex}/{incarnation}/checkpoint.json"
    ))
    .await
}

/// The restore init container's termination message, once it ended.
async fn restore_summary(c: &Cluster, uid: &str) -> Option<Value> {
    let pod = c.pods.get(LOST).await.ok()?;
    if pod.metadata.uid.as_deref() == Some(uid) {
        return None;
    }
    let status = pod.status?;
    let init = status
        .init_container_statuses?
        .into_iter()
        .find(|s| s.name == "restore")?;
    let done = init.state?.terminated?;
    serde_json::from_str(done.message.as_deref()?.trim()).ok()
}

/// Publishes about 106 MiB to `queue-0` (one 100 MiB segment seals), waits until the bucket
/// holds that segment and a checkpoint of every message, deletes the broker's PVC and Pod,
/// and checks the restore: the broker comes back on a new, restored volume (phase
/// `RestoringFromBucket` while the init container runs, when a reconcile sees it), Ready again;
/// `status.restores` and an Event carry the counts; the channel delivers exactly the messages
/// of the uploaded segment, intact, then a message published after the restore; the lost count
/// is every other message, exactly.
#[allow(
    clippy::too_many_lines,
    reason = "one story on one bucket: publish, upload, lose the volume, restore, deliver"
)]
pub async fn a_broker_whose_volume_is_lost_is_restored_from_the_bucket(
    c: &Cluster,
    server: &TestServer,
) {
    c.ready(3).await;
    let token = c.admin_token().await;
    let ip = c.pod_ip(LOST).await;
    let create = format!("http://{ip}:4151/channel/create?topic={TOPIC}&channel={CHANNEL}");
    assert_eq!(http_post(&create, Some(&token), "").await, 200, "{create}");
    let total = BATCHES * PER_BATCH;
    for batch in 0..BATCHES {
        let bodies: Vec<String> = (batch * PER_BATCH..(batch + 1) * PER_BATCH)
            .map(body)
            .collect();
        let url = format!("http://{ip}:4151/mpub?topic={TOPIC}");
        assert_eq!(
            http_post(&url, Some(&token), &bodies.join("\n")).await,
            200,
            "batch {batch}"
        );
    }
    let cp = eventually(
        "a checkpoint of every message with an uploaded segment",
        LONG,
        || async {
            match checkpoint(server).await {
                Some(cp)
                    if cp["head"] == total
                        && cp["segments"].as_array().is_some_and(|s| !s.is_empty()) =>
                {
                    Poll::Done(cp)
                }
                other => Poll::Saw(other.map(|cp| cp["head"].clone())),
            }
        },
    )
    .await;
    assert!(
        cp["channels"]
            .as_array()
            .is_some_and(|ch| ch.iter().any(|c| c["name"] == CHANNEL)),
        "the channel is in the checkpoint: {}",
        cp["channels"]
    );

    let old_pvc = c
        .pvcs
        .get(&format!("data-{LOST}"))
        .await
        .expect("the claim");
    let old_uid = old_pvc.metadata.uid.clone().unwrap_or_default();
    let pod_uid = c
        .pods
        .get(LOST)
        .await
        .expect("Pod")
        .metadata
        .uid
        .unwrap_or_default();
    let lost_at = Instant::now();
    c.pvcs
        .delete(&format!("data-{LOST}"), &DeleteParams::default())
        .await
        .expect("deleting the claim");
    c.pods
        .delete(LOST, &DeleteParams::default())
        .await
        .expect("deleting the Pod");
    // The claim goes once no Pod uses it; a Pod the StatefulSet recreated before that refers
    // to a claim that is gone and is deleted again, as a person would.
    eventually("a new, bound claim for the broker", LONG, || async {
        match c.pvcs.get_opt(&format!("data-{LOST}")).await {
            Ok(Some(p)) if p.metadata.uid.as_deref() != Some(old_uid.as_str()) => {
                let bound = p.status.and_then(|s| s.phase).as_deref() == Some("Bound");
                if bound {
                    Poll::Done(())
                } else {
                    Poll::Saw("new claim not bound yet".to_string())
                }
            }
            Ok(None) => {
                if let Ok(Some(pod)) = c.pods.get_opt(LOST).await
                    && pod.metadata.uid.as_deref() != Some(pod_uid.as_str())
                    && pod.metadata.deletion_timestamp.is_none()
                {
                    let _ = c.pods.delete(LOST, &DeleteParams::default()).await;
                }
                Poll::Saw("no claim".to_string())
            }
            Ok(Some(_)) => Poll::Saw("the old claim still terminating".to_string()),
            Err(e) => Poll::Saw(e.to_string()),
        }
    })
    .await;

    let phases = RefCell::new(Vec::<String>::new());
    let summary = eventually("the restore init container's summary", LONG, || async {
        if let Some(rq) = c.rq().await {
            let mut seen = phases.borrow_mut();
            if seen.last().map(String::as_str) != Some(rq.phase()) {
                seen.push(rq.phase().to_owned());
            }
        }
        match restore_summary(c, &pod_uid).await {
            Some(s) => Poll::Done(s),
            None => Poll::Saw(phases.borrow().clone()),
        }
    })
    .await;
    let phases = phases.into_inner();
    eprintln!("restore summary: {summary}");
    assert_eq!(summary["outcome"], "restored", "{summary}");
    let restored = summary["messages_restored"].as_u64().expect("a count") as usize;
    let lost = summary["lost_messages"].as_u64().expect("a count") as usize;
    assert!(restored > 0 && lost > 0, "{summary}");
    assert_eq!(
        restored + lost,
        total,
        "every message restored or counted lost: {summary}"
    );
    assert_eq!(summary["damaged_objects"], 0);

    let rq = c
        .until("Ready with the restore recorded", LONG, |rq| {
            rq.is_ready()
                && rq.ready_brokers() == Some(3)
                && rq.status()["restores"].as_array().is_some_and(|r| {
                    r.iter()
                        .any(|r| r["broker"] == LOST && r["phase"] == "Restored")
                })
        })
        .await;
    figure(
        "broker PVC and Pod deleted -> restored from the bucket and Ready (106 MiB)",
        lost_at.elapsed().as_secs_f64(),
        "s",
    );
    eprintln!("phases while restoring: {phases:?}");
    let record = rq.status()["restores"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["broker"] == LOST).cloned())
        .unwrap_or_default();
    assert_eq!(record["lostMessages"], lost, "{record}");
    assert_eq!(record["messagesRestored"], restored, "{record}");
    let events: Api<Event> = Api::namespaced(c.client.clone(), NS);
    let counted = format!("{lost} messages lost");
    eventually(
        "an Event RestoredFromBucket with the lost count",
        LONG,
        || async {
            let fields = format!("involvedObject.name={RQ}");
            let list = events.list(&ListParams::default().fields(&fields)).await;
            let found = list.iter().flat_map(|l| l.items.iter()).any(|e| {
                e.reason.as_deref() == Some("RestoredFromBucket")
                    && e.message.as_deref().is_some_and(|m| m.contains(&counted))
            });
            if found {
                Poll::Done(())
            } else {
                Poll::Saw("no such Event yet")
            }
        },
    )
    .await;

    // The ledger: exactly the uploaded segment's messages, intact, then one published now.
    let ip = c.pod_ip(LOST).await;
    let marker = "published after the restore";
    let url = format!("http://{ip}:4151/pub?topic={TOPIC}");
    assert_eq!(http_post(&url, Some(&token), marker).await, 200);
    let got = pynsq_consume(&format!("{ip}:4150"), TOPIC, CHANNEL, restored + 1, LONG);
    let want: BTreeSet<String> = (0..restored).map(body).chain([marker.to_owned()]).collect();
    let got: BTreeSet<String> = got.into_iter().collect();
    assert_eq!(
        got.len(),
        restored + 1,
        "duplicates among what was delivered"
    );
    assert!(
        got == want,
        "delivered messages differ from the first {restored} published and the marker"
    );
}
