//! Releases that must not go through: an image that cannot start is stopped by the preflight
//! probe before any broker is touched; a release that starts failing after the probe times
//! out into a sticky `RolloutFailed` that only a new `retryNonce` clears.

use std::time::Duration;

use crate::cluster::{BROKEN, Cluster, FLAKY, FLAKY_FIXED, LONG, NS, RQ};
use rustqueue_e2e::{Poll, eventually};

use crate::rollout::{
    argocd_health_at, assert_withdrawn, brokers, no_broker_touched_for, operation, pod_revisions,
    rolled_to, template,
};

/// An image whose binary cannot start -> `PreflightBlocked` (Degraded), no broker Pod touched;
/// restoring the image recovers.
pub async fn an_image_that_cannot_start_is_blocked_by_preflight(c: &Cluster, good: &str) {
    c.ready(3).await;
    let revs = pod_revisions(c).await;
    c.patch_spec_ok(&format!(r#"{{"image":"{}"}}"#, *BROKEN));
    let rq = c
        .until("PreflightBlocked", LONG, |rq| {
            rq.phase() == "PreflightBlocked"
        })
        .await;
    assert!(
        rq.condition_true("Degraded") && !rq.condition_true("Ready"),
        "PreflightBlocked should be Degraded and not Ready: {rq:?}"
    );
    argocd_health_at("preflight-blocked", &rq, "Degraded");
    assert!(
        rq.message().contains(BROKEN.as_str()),
        "the message should name the image: {:?}",
        rq.message()
    );
    no_broker_touched_for(c, Duration::from_secs(5), "while preflight is blocked").await;
    assert_eq!(revs, pod_revisions(c).await, "a broker changed revision");
    let blocked = c.rq().await.expect("RustQueue").operation().clone();
    assert_eq!(
        (&blocked["kind"], &blocked["phase"]),
        (&"Rollout".into(), &"Blocked".into()),
        "{blocked}"
    );

    // Restoring the image withdraws the blocked rollout: Ready, and no operation current.
    c.patch_spec_ok(&format!(r#"{{"image":"{good}"}}"#));
    let rq = c.ready(3).await;
    assert_eq!(revs, pod_revisions(c).await, "going back rolled a broker");
    assert_withdrawn(&rq, &blocked, "the good image restored");
}

/// The leader's `/metrics` says `phase` for the RustQueue (what the RustQueueRolloutFailed
/// alert of config/prometheus reads).
async fn leader_exports_phase(c: &Cluster, phase: &str) {
    let line =
        format!("rustqueue_operator_phase{{name=\"{RQ}\",namespace=\"{NS}\",phase=\"{phase}\"}} 1");
    eventually(
        &format!("the leader exporting {line}"),
        Duration::from_secs(30),
        || async {
            let Some(leader) = c.leader().await else {
                return Poll::Saw("no leader".to_string());
            };
            let ip = c.pod_ip(&leader).await;
            match rustqueue_api::http_client::get(format!("http://{ip}:8080/metrics")).await {
                Ok(r) => {
                    let text = r.text().await.unwrap_or_default();
                    let ours: Vec<&str> = text
                        .lines()
                        .filter(|l| l.starts_with("rustqueue_operator_phase{"))
                        .collect();
                    if ours.contains(&line.as_str()) && ours.len() == 1 {
                        Poll::Done(())
                    } else {
                        Poll::Saw(format!("{leader}: {ours:?}"))
                    }
                }
                Err(e) => Poll::Saw(format!("{leader}: {e}")),
            }
        },
    )
    .await;
}

/// A release that passes preflight but whose brokers fail: after `timeoutSeconds` the
/// rollout is `RolloutFailed`; it stays failed even once the broker recovers; a new
/// `retryNonce` starts a new operation that completes.
pub async fn a_timed_out_rollout_fails_until_a_new_retry_nonce(c: &Cluster) {
    c.ready(3).await;
    c.patch_spec_ok(&format!(
        r#"{{"image":"{FLAKY}","rollout":{{"timeoutSeconds":10}}}}"#
    ));
    let rq = c
        .until("RolloutFailed", 2 * LONG, |rq| {
            rq.phase() == "RolloutFailed"
        })
        .await;
    assert!(
        rq.condition_true("Degraded"),
        "RolloutFailed not Degraded: {rq:?}"
    );
    argocd_health_at("rollout-failed", &rq, "Degraded");
    leader_exports_phase(c, "RolloutFailed").await;
    let failed = rq.operation().clone();
    assert_eq!(failed["phase"], "Failed", "{rq:?}");

    // The release is fixed in place: the crash-looping broker comes up, yet the failed
    // operation stays failed (sticky) until someone asks for a retry.
    std::fs::write(c.scratch.path().join(FLAKY_FIXED), "").unwrap();
    eventually(
        "every broker Ready again on the fixed release",
        LONG,
        || async {
            let mut down = Vec::new();
            for b in brokers() {
                if c.ready_pod_uid(&b).await.is_none() {
                    down.push(b);
                }
            }
            if down.is_empty() {
                Poll::Done(())
            } else {
                Poll::Saw(down)
            }
        },
    )
    .await;
    // A hold, not a synchronisation: the failure must still stand 5 s after every broker is back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rq = c.rq().await.expect("RustQueue");
    assert_eq!(
        rq.phase(),
        "RolloutFailed",
        "the failure was not sticky: {rq:?}"
    );
    assert_eq!(rq.operation()["id"], failed["id"], "{rq:?}");

    // The retry gets a realistic timeout in the same change: its clock starts again with the
    // new operation and covers a fresh capability probe, which a loaded machine can hold
    // longer than the 10 s that made the first attempt fail.
    c.patch_spec_ok(r#"{"rollout":{"retryNonce":"retry-1","timeoutSeconds":600}}"#);
    let (rev, _) = template(c).await;
    let rev = rev.expect("template revision");
    let (rq, _) = rolled_to(c, &rev, 2 * LONG).await;
    let op = operation(&rq, "Rollout", &rev).expect("the retried rollout");
    assert_ne!(
        op["id"], failed["id"],
        "the retry did not start a new operation"
    );
    assert_eq!(op["phase"], "Completed", "{rq:?}");
    c.ready(3).await;
}
