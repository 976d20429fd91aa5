//! `status`: the RustQueue's status as a person reads it. Pure: a function of the object and
//! the time, so every line is tested without a cluster.

use std::fmt::Write as _;

use jiff::Timestamp;
use rustqueue_api::crd::{OperationPhase, RustQueue};

use crate::table::Table;

/// How long ago `rfc3339` was, as `1h2m`, `3m4s` or `5s` (`?` when unreadable).
pub fn age(rfc3339: &str, now: Timestamp) -> String {
    let Ok(t) = rfc3339.parse::<Timestamp>() else {
        return "?".into();
    };
    let secs = now.as_second().saturating_sub(t.as_second()).max(0);
    human_secs(secs.unsigned_abs())
}

/// `3725` -> `1h2m`, `185` -> `3m5s`, `9` -> `9s`, `90061` -> `1d1h`.
pub fn human_secs(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

/// The revision a waiting canary needs approved, if one waits.
pub fn revision_to_approve(rq: &RustQueue) -> Option<&str> {
    let op = rq.status.as_ref()?.current_operation.as_ref()?;
    (op.phase == OperationPhase::AwaitingCanaryApproval && !op.revision.is_empty())
        .then_some(op.revision.as_str())
}

/// The whole summary.
pub fn render(rq: &RustQueue, now: Timestamp) -> String {
    let mut out = String::new();
    let name = rq.metadata.name.as_deref().unwrap_or("?");
    let ns = rq.metadata.namespace.as_deref().unwrap_or("?");
    let generation = rq.metadata.generation.unwrap_or(0);
    let _ = writeln!(out, "RustQueue {ns}/{name}");
    let Some(s) = rq.status.as_ref() else {
        let _ = writeln!(out, "Phase:      (no status yet: is the operator running?)");
        let _ = writeln!(out, "Image:      {}", rq.spec.image);
        return out;
    };
    let phase = s.phase.as_deref().unwrap_or("Unknown");
    let message = s.message.as_deref().unwrap_or("");
    let _ = writeln!(out, "Phase:      {phase}  {message}");
    let observed = s.observed_generation.unwrap_or(0);
    if observed != generation {
        let _ = writeln!(
            out,
            "Generation: {generation} (status is of generation {observed}: the operator has not caught up)"
        );
    }
    let ready = s.ready_brokers.unwrap_or(0);
    let desired = s.desired_brokers.unwrap_or(0);
    let _ = writeln!(out, "Brokers:    {ready}/{desired} ready");
    let image = match rq.spec.rollout.rollback_to_image.as_deref() {
        Some(back) => format!("{back} (rolling back from {})", rq.spec.image),
        None => rq.spec.image.clone(),
    };
    let _ = writeln!(out, "Image:      {image}");
    if rq.spec.rollout.paused {
        let _ = writeln!(
            out,
            "Rollout:    paused (`rustqueuectl rollout resume` continues)"
        );
    }
    if let Some(m) = &rq.spec.maintenance {
        let state = if m.enabled { "requested" } else { "disabled" };
        let _ = writeln!(out, "Maintenance: {} {state}", m.broker);
    }
    operation_lines(&mut out, rq, now);
    let _ = writeln!(out, "Conditions:");
    let mut t = Table::new(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]);
    for c in &s.conditions {
        t.row([
            c.type_.clone(),
            format!("{:?}", c.status),
            c.reason.clone(),
            age(&c.last_transition_time, now),
            c.message.clone(),
        ]);
    }
    for line in t.render().lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

fn operation_lines(out: &mut String, rq: &RustQueue, now: Timestamp) {
    let Some(op) = rq
        .status
        .as_ref()
        .and_then(|s| s.current_operation.as_ref())
    else {
        let _ = writeln!(out, "Operation:  none");
        return;
    };
    let running = match &op.completed_at {
        Some(done) => format!("finished {} ago", age(done, now)),
        None => format!("running for {}", age(&op.started_at, now)),
    };
    let _ = writeln!(
        out,
        "Operation:  {} {:?} ({running}, id {})",
        op.kind.as_str(),
        op.phase,
        op.id
    );
    if !op.target.is_empty() {
        let _ = writeln!(out, "  target:   {}", op.target);
    }
    if !op.revision.is_empty() {
        let _ = writeln!(out, "  revision: {}", op.revision);
    }
    if let Some(b) = &op.current_broker {
        let _ = writeln!(out, "  broker:   {b}");
    }
    if !op.message.is_empty() {
        let _ = writeln!(out, "  message:  {}", op.message);
    }
    if let Some(rev) = revision_to_approve(rq) {
        let _ = writeln!(
            out,
            "Approve:    the canary runs revision {rev}; `rustqueuectl rollout approve` lets the rollout finish"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{QueueExt, condition, operation, queue};

    fn noon_plus(secs: i64) -> Timestamp {
        Timestamp::from_second(
            "2026-01-01T12:00:00Z"
                .parse::<Timestamp>()
                .unwrap()
                .as_second()
                + secs,
        )
        .unwrap()
    }

    #[test]
    fn ages_read_like_kubectls() {
        assert_eq!(human_secs(9), "9s");
        assert_eq!(human_secs(185), "3m5s");
        assert_eq!(human_secs(3725), "1h2m");
        assert_eq!(human_secs(90_061), "1d1h");
        assert_eq!(age("2026-01-01T12:00:00Z", noon_plus(65)), "1m5s");
        assert_eq!(age("garbage", noon_plus(0)), "?");
    }

    #[test]
    fn a_waiting_canary_is_named_with_its_revision_and_how_to_approve_it() {
        let rq = queue()
            .with_phase(
                "RolloutAwaitingApproval",
                "canary queue-2 runs abc123",
                3,
                3,
            )
            .with_operation(operation("Rollout", "AwaitingCanaryApproval", "abc123"))
            .with_condition(condition(
                "Ready",
                false,
                "RolloutAwaitingApproval",
                "waiting",
            ));
        let text = render(&rq, noon_plus(133));
        assert!(text.starts_with("RustQueue prod/queue\n"), "{text}");
        assert!(
            text.contains("Phase:      RolloutAwaitingApproval  canary queue-2 runs abc123"),
            "{text}"
        );
        assert!(text.contains("Brokers:    3/3 ready"), "{text}");
        assert!(
            text.contains(
                "Operation:  Rollout AwaitingCanaryApproval (running for 2m13s, id op-1)"
            ),
            "{text}"
        );
        assert!(text.contains("  broker:   queue-2"), "{text}");
        assert!(
            text.contains("Approve:    the canary runs revision abc123;"),
            "{text}"
        );
        let ready = text.lines().find(|l| l.starts_with("  Ready ")).unwrap();
        let cells: Vec<&str> = ready.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "Ready",
                "False",
                "RolloutAwaitingApproval",
                "2m13s",
                "waiting"
            ]
        );
        assert_eq!(revision_to_approve(&rq), Some("abc123"));
    }

    #[test]
    fn a_ready_queue_has_no_approval_line_and_says_when_the_status_is_stale() {
        let mut rq = queue()
            .with_phase("Ready", "all brokers ready", 3, 3)
            .with_condition(condition("Ready", true, "Ready", ""));
        rq.metadata.generation = Some(5);
        let text = render(&rq, noon_plus(5));
        assert!(!text.contains("Approve:"), "{text}");
        assert!(text.contains("Operation:  none"), "{text}");
        assert!(text.contains("status is of generation 4"), "{text}");
        assert_eq!(revision_to_approve(&rq), None);
    }

    #[test]
    fn no_status_says_the_operator_has_not_written_one() {
        let text = render(&queue(), noon_plus(0));
        assert!(text.contains("no status yet"), "{text}");
    }

    #[test]
    fn a_finished_operation_says_how_long_ago() {
        let mut op = operation("Rollout", "Completed", "abc");
        op.completed_at = Some("2026-01-01T12:00:00Z".into());
        let rq = queue().with_phase("Ready", "", 3, 3).with_operation(op);
        let text = render(&rq, noon_plus(7));
        assert!(
            text.contains("Rollout Completed (finished 7s ago"),
            "{text}"
        );
    }
}
