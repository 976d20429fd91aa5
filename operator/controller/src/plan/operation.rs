//! Operation bookkeeping: one operation per id. The same id keeps its `startedAt` (so the
//! timeout spans reconciles and leader changes), except that leaving a human wait (paused,
//! awaiting approval, blocked) restarts the clock; a new id moves the old operation into the
//! history (newest last, at most [`HISTORY`]), as `Superseded` when it had not ended. An
//! operation the spec no longer asks for is [`withdraw`]n: `Withdrawn` in the history, and
//! nothing current.

use rustqueue_api::crd::{OperationKind, OperationPhase, OperationStatus};
use sha2::{Digest, Sha256};

/// Most operations kept in `status.operationHistory`.
pub const HISTORY: usize = 20;

/// An operation as one reconcile decides it, before bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Operation id.
    pub id: String,
    /// Kind.
    pub kind: OperationKind,
    /// Phase.
    pub phase: OperationPhase,
    /// What it acts on.
    pub target: String,
    /// Target pod-template revision (rollouts).
    pub revision: String,
    /// Detail.
    pub message: String,
    /// Image before a rollout.
    pub previous_image: Option<String>,
    /// Broker acted on.
    pub current_broker: Option<String>,
}

/// A stable id: `<kind>-<16 hex>` over the parts.
pub fn operation_id(kind: OperationKind, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    format!(
        "{}-{}",
        kind.as_str().to_ascii_lowercase(),
        hex::encode(&h.finalize()[..8])
    )
}

/// Seconds since the epoch of an RFC 3339 time written by the operator.
pub fn unix_seconds(rfc3339: &str) -> Option<u64> {
    let t: jiff::Timestamp = rfc3339.parse().ok()?;
    u64::try_from(t.as_second()).ok()
}

fn human_wait(p: OperationPhase) -> bool {
    matches!(
        p,
        OperationPhase::Paused | OperationPhase::AwaitingCanaryApproval | OperationPhase::Blocked
    )
}

/// The operation after `step` and the history, given the previous operation.
pub fn advance(
    previous: Option<&OperationStatus>,
    history: &[OperationStatus],
    step: Step,
    now: &str,
) -> (OperationStatus, Vec<OperationStatus>) {
    let same = previous.filter(|p| p.id == step.id);
    let history = match (previous, same) {
        (Some(p), None) => closed(history, p, OperationPhase::Superseded, None, now),
        _ => history.to_vec(),
    };
    // Leaving a human wait restarts the clock; otherwise the same id keeps its start.
    let resumed = same.is_some_and(|p| human_wait(p.phase) && !human_wait(step.phase));
    let started_at = match same {
        Some(p) if !resumed => p.started_at.clone(),
        _ => now.to_string(),
    };
    let completed_at = step.phase.is_finished().then(|| {
        same.filter(|p| p.phase == step.phase)
            .and_then(|p| p.completed_at.clone())
            .unwrap_or_else(|| now.to_string())
    });
    let unchanged = same.is_some_and(|p| {
        p.phase == step.phase
            && p.message == step.message
            && p.current_broker == step.current_broker
            && p.started_at == started_at
    });
    let op = OperationStatus {
        updated_at: match same {
            Some(p) if unchanged => p.updated_at.clone(),
            _ => now.to_string(),
        },
        id: step.id,
        kind: step.kind,
        phase: step.phase,
        target: step.target,
        revision: step.revision,
        message: step.message,
        started_at,
        completed_at,
        previous_image: step
            .previous_image
            .or_else(|| same.and_then(|p| p.previous_image.clone())),
        current_broker: step.current_broker,
    };
    (op, history)
}

/// The history after `previous`, which the spec no longer asks for, is withdrawn: it moves
/// there as `Withdrawn` (saying `why`), and `status.currentOperation` is cleared.
pub fn withdraw(
    previous: &OperationStatus,
    history: &[OperationStatus],
    why: &str,
    now: &str,
) -> Vec<OperationStatus> {
    closed(history, previous, OperationPhase::Withdrawn, Some(why), now)
}

/// `history` with `op` appended (once), closed as `phase` unless it had already ended, and
/// trimmed to the newest [`HISTORY`].
fn closed(
    history: &[OperationStatus],
    op: &OperationStatus,
    phase: OperationPhase,
    why: Option<&str>,
    now: &str,
) -> Vec<OperationStatus> {
    let mut history = history.to_vec();
    let mut op = op.clone();
    if !op.phase.is_outcome() {
        op.message = match why {
            Some(why) => format!("{why} (it was {:?}: {})", op.phase, op.message),
            None => format!(
                "a newer operation took its place (it was {:?}: {})",
                op.phase, op.message
            ),
        };
        op.phase = phase;
        op.completed_at = Some(now.to_string());
        op.updated_at = now.to_string();
        op.current_broker = None;
    }
    if history.last().is_none_or(|h| h.id != op.id) {
        history.push(op);
    }
    if history.len() > HISTORY {
        history.drain(..history.len() - HISTORY);
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, phase: OperationPhase) -> Step {
        Step {
            id: id.into(),
            kind: OperationKind::Rollout,
            phase,
            target: "img".into(),
            revision: "b".into(),
            message: String::new(),
            previous_image: None,
            current_broker: None,
        }
    }

    #[test]
    fn the_same_id_keeps_its_start_and_a_new_id_goes_to_history() {
        let (a, h) = advance(None, &[], step("a", OperationPhase::Draining), "T1");
        assert_eq!((a.started_at.as_str(), h.len()), ("T1", 0));
        let (a2, h) = advance(Some(&a), &h, step("a", OperationPhase::Replacing), "T2");
        assert_eq!(
            (a2.started_at.as_str(), a2.updated_at.as_str()),
            ("T1", "T2")
        );
        assert!(h.is_empty());
        let (done, _) = advance(Some(&a2), &h, step("a", OperationPhase::Completed), "T3");
        let (done2, _) = advance(Some(&done), &h, step("a", OperationPhase::Completed), "T4");
        assert_eq!(done2.completed_at.as_deref(), Some("T3"), "stamped once");
        assert_eq!(done2.updated_at, "T3", "nothing changed, nothing to write");
        let (b, h) = advance(Some(&done2), &h, step("b", OperationPhase::Draining), "T5");
        assert_eq!((b.started_at.as_str(), h.len()), ("T5", 1));
        assert_eq!(h[0].id, "a");
    }

    #[test]
    fn an_unfinished_operation_replaced_by_a_new_one_is_superseded_in_the_history() {
        let (blocked, _) = advance(None, &[], step("a", OperationPhase::Blocked), "T1");
        let (b, h) = advance(
            Some(&blocked),
            &[],
            step("b", OperationPhase::Draining),
            "T2",
        );
        assert_eq!(b.id, "b");
        assert_eq!(
            (h[0].id.as_str(), h[0].phase, h[0].completed_at.as_deref()),
            ("a", OperationPhase::Superseded, Some("T2"))
        );
        assert!(
            h[0].message
                .contains("a newer operation took its place (it was Blocked")
        );
        // One that had ended keeps how it ended.
        let (done, _) = advance(Some(&b), &[], step("b", OperationPhase::Completed), "T3");
        let (_, h) = advance(Some(&done), &[], step("c", OperationPhase::Draining), "T4");
        assert_eq!(h[0].phase, OperationPhase::Completed);
    }

    #[test]
    fn a_withdrawn_operation_moves_to_the_history_once() {
        let (blocked, _) = advance(None, &[], step("a", OperationPhase::Blocked), "T1");
        let h = withdraw(&blocked, &[], "the spec no longer asks for it", "T2");
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].phase, OperationPhase::Withdrawn);
        assert_eq!(h[0].completed_at.as_deref(), Some("T2"));
        assert!(
            h[0].message
                .starts_with("the spec no longer asks for it (it was Blocked")
        );
        assert_eq!(withdraw(&blocked, &h, "again", "T3"), h, "never twice");
    }

    #[test]
    fn leaving_a_human_wait_restarts_the_timeout_clock() {
        for wait in [
            OperationPhase::Paused,
            OperationPhase::AwaitingCanaryApproval,
            OperationPhase::Blocked,
        ] {
            let (w, _) = advance(None, &[], step("a", wait), "T1");
            let (still, _) = advance(Some(&w), &[], step("a", wait), "T2");
            assert_eq!(still.started_at, "T1");
            let (go, _) = advance(Some(&still), &[], step("a", OperationPhase::Draining), "T3");
            assert_eq!(go.started_at, "T3", "{wait:?}");
        }
    }

    #[test]
    fn history_is_capped_at_twenty_newest_last() {
        let mut prev: Option<OperationStatus> = None;
        let mut history = Vec::new();
        for i in 0..30 {
            let (op, h) = advance(
                prev.as_ref(),
                &history,
                step(&format!("op{i}"), OperationPhase::Completed),
                "T",
            );
            prev = Some(op);
            history = h;
        }
        assert_eq!(history.len(), HISTORY);
        assert_eq!(history.last().unwrap().id, "op28");
        assert_eq!(history[0].id, "op9");
    }

    #[test]
    fn ids_depend_on_every_part_and_name_the_kind() {
        let a = operation_id(OperationKind::Rollout, &["img", "rev:"]);
        assert!(a.starts_with("rollout-") && a.len() == "rollout-".len() + 16);
        assert_ne!(a, operation_id(OperationKind::Rollout, &["img", "rev:1"]));
        assert_ne!(a, operation_id(OperationKind::Rollout, &["im", "grev:"]));
        assert_eq!(unix_seconds("1970-01-01T00:01:40Z"), Some(100));
    }
}
