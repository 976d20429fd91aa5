//! Rollouts: an image change rolls the brokers one at a time under a steady official-client
//! load with nothing lost; the human gates (pause, canary approval) hold.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use rustqueue_e2e::ledger::{Ledger, write_addresses};
use rustqueue_e2e::unready::{PodView, UnreadyWatch};
use rustqueue_e2e::{Poll, eventually};
use serde_json::Value;

use crate::cluster::{BROKERS, Cluster, LONG, NEXT, NS, RQ, Rq};
use crate::ctl::{
    ctl_refuses_to_approve_a_paused_rollout, ctl_resumes_the_rollout,
    ctl_status_names_the_canary_and_approve_approves_it, ctl_waits_until_ready,
};

/// What a rollout cost, measured from the spec change.
#[derive(Debug)]
pub struct Timing {
    /// Until the StatefulSet's Pod template carried the change.
    pub first_applied: Duration,
    /// Until the RustQueue was Ready again on the new revision.
    pub ready: Duration,
}

/// The broker names of a 3-broker cluster.
pub fn brokers() -> Vec<String> {
    (0..3).map(|i| format!("{RQ}-{i}")).collect()
}

/// The revision annotation of the broker StatefulSet's Pod template and its image.
pub async fn template(c: &Cluster) -> (Option<String>, Option<String>) {
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), NS);
    let Ok(s) = sts.get(RQ).await else {
        return (None, None);
    };
    let t = s.spec.template;
    let rev = t
        .metadata
        .and_then(|m| m.annotations)
        .and_then(|a| a.get("rustqueue.io/revision").cloned());
    let image = t
        .spec
        .and_then(|s| s.containers.into_iter().find(|c| c.name == "broker"))
        .and_then(|c| c.image);
    (rev, image)
}

/// Each broker Pod's revision annotation.
pub async fn pod_revisions(c: &Cluster) -> BTreeMap<String, Option<String>> {
    let lp = kube::api::ListParams::default().labels(BROKERS);
    c.pods
        .list(&lp)
        .await
        .expect("listing broker Pods")
        .items
        .into_iter()
        .map(|p| {
            let rev = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("rustqueue.io/revision").cloned());
            (p.metadata.name.unwrap_or_default(), rev)
        })
        .collect()
}

fn ready_addresses(pods: &BTreeMap<String, PodView>) -> Vec<String> {
    pods.values()
        .filter(|p| p.ready)
        .filter_map(|p| p.ip.as_ref().map(|ip| format!("{ip}:4150")))
        .collect()
}

/// The operation of `kind` on `revision`, as current operation or in the history.
pub fn operation(rq: &Rq, kind: &str, revision: &str) -> Option<Value> {
    std::iter::once(rq.operation().clone())
        .chain(rq.history())
        .find(|o| o["kind"] == kind && o["revision"] == revision)
}

/// Asserts that the operation `blocked` (taken from `status.currentOperation` while it was
/// blocked) is no longer current and was moved to the history as `Withdrawn`.
pub fn assert_withdrawn(rq: &Rq, blocked: &Value, why: &str) {
    assert!(
        rq.operation().is_null(),
        "{why}: status.currentOperation should be empty once the spec withdrew {}: {rq:?}",
        blocked["id"]
    );
    let last = rq.history().pop().unwrap_or_default();
    assert!(
        last["id"] == blocked["id"] && last["phase"] == "Withdrawn",
        "{why}: the newest history entry should be {} Withdrawn: {rq:?}",
        blocked["id"]
    );
}

/// Waits until the StatefulSet's template carries `image`; returns how long that took from
/// `since`.
pub async fn template_applied(c: &Cluster, image: &str, since: Instant) -> Duration {
    eventually(
        &format!("the StatefulSet template on {image}"),
        LONG,
        || async {
            match template(c).await {
                (_, Some(i)) if i == image => Poll::Done(since.elapsed()),
                other => Poll::Saw(other),
            }
        },
    )
    .await
}

/// Argo CD's health check (docs/argocd.md, evaluated the way Argo CD does) reads the live
/// object `rq` as `want` at `moment`. With `$RUSTQUEUE_ARGOCD_CAPTURE` set to a directory the
/// object is also saved there as `<moment>.json` (config/argocd/testdata holds such captures).
pub fn argocd_health_at(moment: &str, rq: &Rq, want: &str) {
    let (health, message) = crate::basics::argocd_health(&rq.0);
    assert_eq!(
        health, want,
        "Argo CD health at {moment}: {message}\n{:#}",
        rq.0
    );
    if let Some(dir) = std::env::var_os("RUSTQUEUE_ARGOCD_CAPTURE") {
        let mut obj = rq.0.clone();
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        let path = std::path::Path::new(&dir).join(format!("{moment}.json"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(&obj).unwrap() + "\n").unwrap();
    }
}

/// Waits for the rollout to `revision` to finish: Ready, every broker on it. Returns the
/// phases seen on the way (each once, in order). Argo CD reads the rollout as Progressing and
/// its end as Healthy.
pub async fn rolled_to(c: &Cluster, revision: &str, limit: Duration) -> (Rq, Vec<String>) {
    let phases = RefCell::new(Vec::<String>::new());
    let rq = c
        .until(
            &format!("every broker Ready on revision {revision}"),
            limit,
            |rq| {
                let mut p = phases.borrow_mut();
                if p.last().map(String::as_str) != Some(rq.phase()) {
                    p.push(rq.phase().to_owned());
                    if rq.phase() == "Rolling" {
                        argocd_health_at("rolling", rq, "Progressing");
                    }
                }
                rq.is_ready() && rq.ready_brokers() == Some(3)
            },
        )
        .await;
    argocd_health_at("ready", &rq, "Healthy");
    let revs = pod_revisions(c).await;
    assert!(
        revs.len() == 3 && revs.values().all(|r| r.as_deref() == Some(revision)),
        "Ready while the broker Pods are on {revs:?}, not all on {revision}"
    );
    (rq, phases.into_inner())
}

/// Image rollout across 3 brokers while pynsq publishes at a steady rate and FINs: never
/// more than one broker unready (from a Pod watch), every Pod ends on the new revision,
/// `Rolling` -> `Ready`, the operation `Completed`, and every acknowledged message delivered.
pub async fn an_image_rollout_disrupts_one_broker_at_a_time_and_loses_no_message(
    c: &Cluster,
) -> Timing {
    c.ready(3).await;
    let (old_rev, _) = template(c).await;
    let mut ips = Vec::new();
    for b in brokers() {
        ips.push(format!("{}:4150", c.pod_ip(&b).await));
    }
    let ledger = Ledger::start(&ips, "ledger", "c", 20);
    let file = ledger.address_file();
    let watch = UnreadyWatch::start(c.pods.clone(), BROKERS, brokers(), move |pods| {
        write_addresses(&file, &ready_addresses(pods));
    });
    eventually(
        "the ledger's messages flowing",
        Duration::from_secs(60),
        || async {
            let p = ledger.progress();
            if p.acked >= 20 && p.delivered >= 20 {
                Poll::Done(())
            } else {
                Poll::Saw(p)
            }
        },
    )
    .await;
    watch.reset();

    let t0 = Instant::now();
    c.patch_spec_ok(&format!(r#"{{"image":"{}"}}"#, *NEXT));
    let first_applied = template_applied(c, &NEXT, t0).await;
    let (new_rev, _) = template(c).await;
    let new_rev = new_rev.expect("the template has a revision");
    assert_ne!(
        Some(&new_rev),
        old_rev.as_ref(),
        "the image change did not change the revision"
    );
    let (rq, phases) = rolled_to(c, &new_rev, 2 * LONG).await;
    let ready = t0.elapsed();

    assert!(
        phases.iter().any(|p| p == "Rolling") && phases.last().map(String::as_str) == Some("Ready"),
        "phases seen during the rollout: {phases:?}"
    );
    let op = operation(&rq, "Rollout", &new_rev);
    assert!(
        op.as_ref().is_some_and(|o| o["phase"] == "Completed"),
        "no Completed Rollout to {new_rev}: current {:#} history {:#?}",
        rq.operation(),
        rq.history()
    );
    let worst = watch.worst();
    assert!(
        worst.unready <= 1,
        "{} brokers unready at once: {:?} ({} Pod events sampled)",
        worst.unready,
        worst.names,
        watch.events()
    );
    assert!(
        watch.events() > 0,
        "the Pod watch saw no event during the rollout"
    );
    drop(watch);
    let report = ledger.finish(Duration::from_secs(90)).await;
    eprintln!(
        "rollout: first applied object after {:.1}s, Ready after {:.1}s; ledger {report:?}",
        first_applied.as_secs_f64(),
        ready.as_secs_f64()
    );
    assert!(report.acked > 0, "nothing was acknowledged: {report:?}");
    assert!(
        report.missing.is_empty(),
        "{} acknowledged messages never delivered: {:?}",
        report.missing.len(),
        report.missing
    );
    Timing {
        first_applied,
        ready,
    }
}

/// Holds for `hold`: panics if any broker Pod changes revision or UID meanwhile.
pub async fn no_broker_touched_for(c: &Cluster, hold: Duration, why: &str) {
    let before = broker_uids(c).await;
    let revs = pod_revisions(c).await;
    tokio::time::sleep(hold).await;
    let after = broker_uids(c).await;
    assert_eq!(before, after, "{why}: a broker Pod was replaced");
    assert_eq!(
        revs,
        pod_revisions(c).await,
        "{why}: a broker Pod changed revision"
    );
}

/// Each broker Pod's UID.
pub async fn broker_uids(c: &Cluster) -> BTreeMap<String, String> {
    let lp = kube::api::ListParams::default().labels(BROKERS);
    c.pods
        .list(&lp)
        .await
        .expect("listing broker Pods")
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}

/// `paused` holds a rollout before any broker is touched; unpaused with
/// `requireCanaryApproval`, it replaces one broker (the canary) and waits, naming the revision
/// to approve; `approvedRevision` set to it lets the rollout finish. The person is
/// `kubectl rustqueue` (ctl.rs): `rollout approve` refused while paused, `rollout resume`,
/// `status` naming the canary's revision, `rollout approve` setting it, `wait` for Ready.
pub async fn paused_and_canary_rollouts_wait_for_a_human(c: &Cluster, image: &str) {
    c.ready(3).await;
    c.patch_spec_ok(&format!(
        r#"{{"image":"{image}","rollout":{{"paused":true,"requireCanaryApproval":true}}}}"#
    ));
    let rq = c
        .until("RolloutPaused", LONG, |rq| rq.phase() == "RolloutPaused")
        .await;
    assert!(!rq.condition_true("Ready"), "Ready while paused: {rq:?}");
    argocd_health_at("rollout-paused", &rq, "Suspended");
    no_broker_touched_for(c, Duration::from_secs(5), "while paused").await;
    ctl_refuses_to_approve_a_paused_rollout(c).await;

    ctl_resumes_the_rollout(c).await;
    let rq = c
        .until("RolloutAwaitingApproval", LONG, |rq| {
            rq.phase() == "RolloutAwaitingApproval"
        })
        .await;
    argocd_health_at("rollout-awaiting-approval", &rq, "Suspended");
    let (rev, _) = template(c).await;
    let rev = rev.expect("template revision");
    assert!(
        rq.message().contains(&rev),
        "the awaiting-approval message does not name revision {rev}: {:?}",
        rq.message()
    );
    let on_new = pod_revisions(c)
        .await
        .values()
        .filter(|r| r.as_deref() == Some(rev.as_str()))
        .count();
    assert_eq!(on_new, 1, "exactly the canary should run {rev}");
    no_broker_touched_for(c, Duration::from_secs(5), "while awaiting approval").await;

    ctl_status_names_the_canary_and_approve_approves_it(c, &rev).await;
    let (rq, _) = rolled_to(c, &rev, 2 * LONG).await;
    assert!(
        operation(&rq, "Rollout", &rev).is_some_and(|o| o["phase"] == "Completed"),
        "no Completed Rollout to {rev}: {rq:?}"
    );
    c.patch_spec_ok(r#"{"rollout":{"requireCanaryApproval":false,"approvedRevision":null}}"#);
    ctl_waits_until_ready(c).await;
    c.ready(3).await;
}

/// The leader operator is killed while it drains or replaces a broker: the standby continues
/// the same operation (same id and `startedAt`) to the end, and no second broker is disrupted
/// meanwhile.
pub async fn a_standby_continues_the_leaders_rollout(c: &Cluster, image: &str) {
    c.ready(3).await;
    let watch = UnreadyWatch::start(c.pods.clone(), BROKERS, brokers(), |_| {});
    c.patch_spec_ok(&format!(r#"{{"image":"{image}"}}"#));
    let rq = c
        .until("a rollout disrupting a broker", LONG, |rq| {
            rq.operation()["kind"] == "Rollout"
                && ["Draining", "Replacing"]
                    .contains(&rq.operation()["phase"].as_str().unwrap_or(""))
        })
        .await;
    let op = rq.operation().clone();
    c.replace_leader(Some(0)).await;
    let (rev, _) = template(c).await;
    let rev = rev.expect("template revision");
    let (rq, _) = rolled_to(c, &rev, 2 * LONG).await;
    let done = operation(&rq, "Rollout", &rev).expect("the rollout in status");
    assert_eq!(
        (&done["id"], &done["startedAt"], &done["phase"]),
        (&op["id"], &op["startedAt"], &serde_json::json!("Completed")),
        "the standby did not finish the leader's operation {op:#}: {done:#}"
    );
    let worst = watch.worst();
    assert!(
        worst.unready <= 1,
        "{} brokers unready at once across the failover: {:?}",
        worst.unready,
        worst.names
    );
}
