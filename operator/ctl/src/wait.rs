//! `wait`: when the RustQueue is Ready or its operation is done. Judging one observation is
//! pure ([`judge`]); the loop prints a progress line whenever what it sees changes.

use rustqueue_api::crd::{ConditionStatus, OperationPhase, RustQueue};

use crate::cli::WaitFor;

/// What one look at the RustQueue says.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// What was waited for holds.
    Done,
    /// It can no longer hold without a person (a failed or blocked operation).
    Stuck(String),
    /// Not yet.
    Pending,
}

/// Judges one observation.
pub fn judge(rq: &RustQueue, what: WaitFor) -> Verdict {
    let Some(s) = rq.status.as_ref() else {
        return Verdict::Pending;
    };
    if s.observed_generation != rq.metadata.generation {
        return Verdict::Pending;
    }
    match what {
        WaitFor::Ready => {
            let ready = s
                .condition("Ready")
                .is_some_and(|c| c.status == ConditionStatus::True);
            if ready {
                Verdict::Done
            } else {
                Verdict::Pending
            }
        }
        WaitFor::OperationDone => match &s.current_operation {
            None => Verdict::Done,
            Some(op) => match op.phase {
                OperationPhase::Completed
                | OperationPhase::Withdrawn
                | OperationPhase::Superseded => Verdict::Done,
                OperationPhase::Failed | OperationPhase::Blocked => Verdict::Stuck(format!(
                    "the {} operation is {:?}: {}",
                    op.kind.as_str(),
                    op.phase,
                    op.message
                )),
                _ => Verdict::Pending,
            },
        },
    }
}

/// The progress line for an observation: phase, message and the operation's phase.
pub fn progress(rq: &RustQueue) -> String {
    let Some(s) = rq.status.as_ref() else {
        return "no status yet".into();
    };
    let mut line = format!("phase {}", s.phase.as_deref().unwrap_or("Unknown"));
    if let Some(op) = &s.current_operation {
        line.push_str(&format!(" ({} {:?}", op.kind.as_str(), op.phase));
        if let Some(b) = &op.current_broker {
            line.push_str(&format!(" on {b}"));
        }
        line.push(')');
    }
    if let (Some(r), Some(d)) = (s.ready_brokers, s.desired_brokers) {
        line.push_str(&format!(", {r}/{d} brokers ready"));
    }
    if let Some(m) = s.message.as_deref().filter(|m| !m.is_empty()) {
        line.push_str(&format!(": {m}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{QueueExt, condition, operation, queue};

    #[test]
    fn ready_needs_the_condition_for_the_current_generation() {
        assert_eq!(judge(&queue(), WaitFor::Ready), Verdict::Pending);
        let rq = queue()
            .with_phase("Ready", "", 3, 3)
            .with_condition(condition("Ready", true, "Ready", ""));
        assert_eq!(judge(&rq, WaitFor::Ready), Verdict::Done);
        let mut newer = rq.clone();
        newer.metadata.generation = Some(5);
        assert_eq!(
            judge(&newer, WaitFor::Ready),
            Verdict::Pending,
            "stale status"
        );
        let rolling = queue()
            .with_phase("Rolling", "", 2, 3)
            .with_condition(condition("Ready", false, "Rolling", ""));
        assert_eq!(judge(&rolling, WaitFor::Ready), Verdict::Pending);
    }

    #[test]
    fn an_operation_is_done_when_it_ended_and_stuck_when_it_failed() {
        let table = [
            (None, Verdict::Done),
            (Some("Completed"), Verdict::Done),
            (Some("Superseded"), Verdict::Done),
            (Some("Draining"), Verdict::Pending),
            (Some("AwaitingCanaryApproval"), Verdict::Pending),
            (
                Some("Failed"),
                Verdict::Stuck("the Rollout operation is Failed: Rollout Failed".into()),
            ),
        ];
        for (phase, want) in table {
            let mut rq = queue().with_phase("Rolling", "", 3, 3);
            if let Some(p) = phase {
                rq = rq.with_operation(operation("Rollout", p, "abc"));
            }
            assert_eq!(judge(&rq, WaitFor::OperationDone), want, "{phase:?}");
        }
    }

    #[test]
    fn progress_names_phase_operation_and_brokers() {
        let rq = queue()
            .with_phase("Rolling", "replacing queue-2", 2, 3)
            .with_operation(operation("Rollout", "Replacing", "abc"));
        assert_eq!(
            progress(&rq),
            "phase Rolling (Rollout Replacing on queue-2), 2/3 brokers ready: replacing queue-2"
        );
        assert_eq!(progress(&queue()), "no status yet");
    }
}
