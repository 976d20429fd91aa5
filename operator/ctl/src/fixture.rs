//! Test builders: a RustQueue in the shapes the operator writes.

use rustqueue_api::crd::{
    Condition, ConditionStatus, OperationStatus, RustQueue, RustQueueSpec, RustQueueStatus,
};

/// RustQueue `queue` in `prod` with image `rq:1`, generation 4, no status yet.
pub fn queue() -> RustQueue {
    let mut rq = RustQueue::new("queue", RustQueueSpec::with_image("rq:1"));
    rq.metadata.namespace = Some("prod".into());
    rq.metadata.generation = Some(4);
    rq
}

/// An operation of `kind` in `phase` rolling to `revision`, started at 12:00:00.
pub fn operation(kind: &str, phase: &str, revision: &str) -> OperationStatus {
    serde_json::from_value(serde_json::json!({
        "id": "op-1", "kind": kind, "phase": phase, "target": "rq:2", "revision": revision,
        "message": format!("{kind} {phase}"), "startedAt": "2026-01-01T12:00:00Z",
        "updatedAt": "2026-01-01T12:01:00Z", "currentBroker": "queue-2",
    }))
    .expect("a valid operation")
}

/// A condition at 12:00:00.
pub fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: ConditionStatus::from(status),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(4),
        last_transition_time: "2026-01-01T12:00:00Z".into(),
    }
}

/// Builder methods over [`RustQueue`].
pub trait QueueExt {
    /// With this status phase, message and brokers ready/desired (observed generation 4).
    fn with_phase(self, phase: &str, message: &str, ready: i32, desired: i32) -> Self;
    /// With this current operation.
    fn with_operation(self, op: OperationStatus) -> Self;
    /// With this condition added.
    fn with_condition(self, c: Condition) -> Self;
}

impl QueueExt for RustQueue {
    fn with_phase(mut self, phase: &str, message: &str, ready: i32, desired: i32) -> Self {
        let s = self.status.get_or_insert_with(RustQueueStatus::default);
        s.phase = Some(phase.into());
        s.message = Some(message.into());
        s.ready_brokers = Some(ready);
        s.desired_brokers = Some(desired);
        s.observed_generation = Some(4);
        self
    }

    fn with_operation(mut self, op: OperationStatus) -> Self {
        self.status
            .get_or_insert_with(RustQueueStatus::default)
            .current_operation = Some(op);
        self
    }

    fn with_condition(mut self, c: Condition) -> Self {
        self.status
            .get_or_insert_with(RustQueueStatus::default)
            .conditions
            .push(c);
        self
    }
}
