//! The Argo CD health check in docs/argocd.md, evaluated by gopher-lua (Lua 5.1, the engine
//! Argo CD embeds, through config/argocd/health) against statuses that the operator's own
//! status writer produces, and against statuses captured from the testbed
//! (config/argocd/testdata).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustqueue_api::crd::{RustQueueSpec, RustQueueStatus};
use rustqueue_operator::testing::{
    Desired, DesiredInputs, Observed, Owner, error_status, next_status, plan,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The evaluator `scripts/deps.sh argocd-health` builds (`$RUSTQUEUE_ARGOCD_HEALTH` overrides).
fn evaluator() -> PathBuf {
    if let Some(p) = std::env::var_os("RUSTQUEUE_ARGOCD_HEALTH") {
        return p.into();
    }
    let cache = std::env::var_os("RUSTQUEUE_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/rustqueue"),
        PathBuf::from,
    );
    let bin = cache.join("argocd-health");
    assert!(
        bin.exists(),
        "{} is missing: run `scripts/deps.sh argocd-health` (make unit does)",
        bin.display()
    );
    bin
}

/// Evaluate the health check for a RustQueue object the way Argo CD does: (status, message).
fn health(obj: &serde_json::Value) -> (String, String) {
    let mut child = Command::new(evaluator())
        .arg("-doc")
        .arg(repo().join("docs/argocd.md"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Argo CD health evaluator");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(obj.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "health check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        hs["status"].as_str().unwrap().to_string(),
        hs["message"].as_str().unwrap().to_string(),
    )
}

fn object(generation: i64, status: Option<&RustQueueStatus>) -> serde_json::Value {
    let mut o = serde_json::json!({
        "apiVersion": "rustqueue.io/v1alpha1",
        "kind": "RustQueue",
        "metadata": {"name": "q", "namespace": "ns", "generation": generation},
        "spec": {"image": "rustqueue:dev"},
    });
    if let Some(s) = status {
        o["status"] = serde_json::to_value(s).unwrap();
    }
    o
}

fn desired(spec: &RustQueueSpec) -> Desired {
    let owner = Owner {
        name: "q",
        namespace: "ns",
        uid: "u",
    };
    let inputs = DesiredInputs {
        tiering_secret_revision: None,
        auth_secret_name: "q-auth".into(),
        auth_secret_revision: "1".into(),
        claim_template_size: None,
        feature_level_floor: 1,
    };
    let mut d = Desired::render(&owner, spec, &inputs);
    d.probe_pod = "q-preflight-target".into();
    d
}

/// Three brokers on the target revision, `ready` of them Ready, `nodes` eligible Nodes.
fn observed(spec: &RustQueueSpec, ready: usize, nodes: i32) -> Observed {
    let mut b = Observed::test()
        .brokers(3)
        .at_revision(&desired(spec).revision)
        .nodes(nodes);
    for i in ready..3 {
        b = b.unready(i);
    }
    b.build()
}

fn status_for(spec: &RustQueueSpec, obs: &Observed) -> RustQueueStatus {
    let p = plan(
        spec,
        obs,
        &desired(spec),
        &RustQueueStatus::default(),
        1_000,
    );
    next_status(
        &RustQueueStatus::default(),
        &p,
        Some(2),
        "2026-11-30T05:00:00Z",
    )
    .0
}

#[test]
fn no_status_yet_is_progressing() {
    assert_eq!(health(&object(1, None)).0, "Progressing");
}

#[test]
fn all_brokers_ready_is_healthy() {
    let s = status_for(
        &RustQueueSpec::with_image("rustqueue:dev"),
        &observed(&RustQueueSpec::with_image("rustqueue:dev"), 3, 3),
    );
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Healthy");
    assert!(m.starts_with("3/3 brokers ready; revision "), "{m}");
}

#[test]
fn an_unready_broker_is_progressing_with_the_reason() {
    let s = status_for(
        &RustQueueSpec::with_image("rustqueue:dev"),
        &observed(&RustQueueSpec::with_image("rustqueue:dev"), 2, 3),
    );
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Progressing");
    assert!(
        m.starts_with("WaitingForBrokers: 2/3 brokers ready; waiting for q-2"),
        "{m}"
    );
}

#[test]
fn a_status_from_an_older_generation_is_progressing_even_if_it_says_ready() {
    let s = status_for(
        &RustQueueSpec::with_image("rustqueue:dev"),
        &observed(&RustQueueSpec::with_image("rustqueue:dev"), 3, 3),
    );
    let (h, m) = health(&object(3, Some(&s)));
    assert_eq!(h, "Progressing");
    assert!(m.contains("observe generation 3"), "{m}");
}

#[test]
fn insufficient_nodes_and_invalid_specs_are_degraded() {
    let mut spec = RustQueueSpec::with_image("rustqueue:dev");
    spec.min_brokers = 3;
    let s = status_for(&spec, &observed(&spec, 3, 1));
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Degraded");
    assert!(m.starts_with("InsufficientNodes: 1 eligible nodes"), "{m}");

    spec.eligible_node_selector = "no-value".into();
    let s = status_for(
        &spec,
        &observed(&RustQueueSpec::with_image("rustqueue:dev"), 3, 3),
    );
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Degraded");
    assert!(
        m.starts_with("InvalidSpec: invalid spec: spec.eligibleNodeSelector"),
        "{m}"
    );
}

#[test]
fn a_failed_reconcile_is_degraded() {
    let ok = status_for(
        &RustQueueSpec::with_image("rustqueue:dev"),
        &observed(&RustQueueSpec::with_image("rustqueue:dev"), 3, 3),
    );
    let (s, _) = error_status(&ok, "apply StatefulSet q: forbidden", Some(2), "t");
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Degraded");
    assert_eq!(
        m,
        "ReconcileError: reconciliation failed: apply StatefulSet q: forbidden"
    );
}

#[test]
fn a_paused_or_approval_waiting_rollout_is_suspended_with_the_revision_to_approve() {
    let mut spec = RustQueueSpec::with_image("rustqueue:dev");
    spec.rollout.require_canary_approval = true;
    let d = desired(&spec);
    // One broker (the canary) already runs the target revision; the others do not.
    let obs = Observed::test()
        .brokers(3)
        .at_revision("old")
        .revision_of(2, &d.revision)
        .build();
    let s = status_for(&spec, &obs);
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Suspended");
    assert!(
        m.contains(&format!(
            "set spec.rollout.approvedRevision to {}",
            d.revision
        )),
        "{m}"
    );
}

#[test]
fn a_rollout_in_progress_is_progressing_not_healthy() {
    let spec = RustQueueSpec::with_image("rustqueue:dev");
    let obs = Observed::test().brokers(3).at_revision("old").build();
    let s = status_for(&spec, &obs);
    let (h, m) = health(&object(2, Some(&s)));
    assert_eq!(h, "Progressing");
    assert!(
        m.starts_with("Rolling: draining queue-2") || m.starts_with("Rolling: draining q-2"),
        "{m}"
    );
}
