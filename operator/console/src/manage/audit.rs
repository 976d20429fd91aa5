//! The audit trail: one structured log line per management request, and Kubernetes Events
//! on the RustQueue when an operation is accepted, succeeds or fails.
//!
//! Each operation Event is recorded exactly once, whenever the console dies: its name follows
//! from what it is about ([`event_key`]), so a second record finds it (AlreadyExists) instead
//! of doubling it; and the reconciler records it *before* the catalog write that moves the
//! operation past it (clearing it, or marking it `FAILED`), so a console that dies in between
//! leaves the operation where the next console records the Event again. While the Event
//! cannot be recorded for a reason that may pass, that write waits for a later poll.

use rustqueue_api::crd::{CatalogAction, CatalogOperation};
use sha2::{Digest as _, Sha256};

use super::Manager;
use super::apply::Accepted;
use super::http::Caller;
use crate::cluster::{CatalogStore, NewEvent, StoreError};

/// Event reason of an accepted apply.
pub const ACCEPTED: &str = "ConsoleManagementAccepted";
/// Event reason of a finished operation.
pub const SUCCEEDED: &str = "ConsoleManagementSucceeded";
/// Event reason of a failed operation.
pub const FAILED: &str = "ConsoleManagementFailed";

/// `lastError` code of an operation waiting for its Event to be recorded.
pub const EVENT_UNAVAILABLE: &str = "E_EVENT_UNAVAILABLE";

/// Logs a management request and its result (`ok` or the error code).
pub fn log(caller: &Caller, action: &str, result: String) {
    tracing::info!(
        target: "rustqueue_console::audit",
        source_ip = %caller.ip,
        user_agent = %caller.user_agent,
        action,
        result,
        "console management request"
    );
}

/// What an operation Event is about, as 32 hex digits of SHA-256 over the length-prefixed
/// reason, operation id and attempt. An operation succeeds once whichever attempt does it, so
/// [`SUCCEEDED`] leaves the attempt out; each attempt (a retry adds one) is accepted, and may
/// fail, once.
pub fn event_key(reason: &str, operation_id: &str, attempt: u32) -> String {
    let attempt = match reason {
        SUCCEEDED => String::new(),
        _ => attempt.to_string(),
    };
    let mut h = Sha256::new();
    for part in [reason, operation_id, &attempt] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize().get(..16).unwrap_or_default())
}

fn action_name(a: CatalogAction) -> String {
    format!("{a:?}").to_lowercase()
}

fn attempt_note(attempt: u32) -> String {
    match attempt {
        0 | 1 => String::new(),
        n => format!(", attempt {n}"),
    }
}

/// An Event of `op` with `reason`, keyed by both ([`event_key`]).
fn operation_event(
    type_: &'static str,
    reason: &'static str,
    op: &CatalogOperation,
    message: String,
) -> NewEvent {
    NewEvent {
        key: event_key(reason, &op.id, op.attempt),
        type_,
        reason,
        message,
    }
}

/// The Event of operation `op` on `target` (`topic <t>`, `channel <t>/<c>`) being accepted.
pub fn accepted_event(target: &str, op: &CatalogOperation) -> NewEvent {
    let message = format!(
        "{} of {target} accepted ({}{})",
        action_name(op.action),
        op.id,
        attempt_note(op.attempt)
    );
    operation_event("Normal", ACCEPTED, op, message)
}

/// The Event of operation `op` on `target` done on every owner.
pub fn succeeded_event(target: &str, op: &CatalogOperation) -> NewEvent {
    let message = format!(
        "{} of {target} done on every owner ({})",
        action_name(op.action),
        op.id
    );
    operation_event("Normal", SUCCEEDED, op, message)
}

/// The Event of operation `op` on `target` failing for `why`.
pub fn failed_event(target: &str, op: &CatalogOperation, why: &str) -> NewEvent {
    let message = format!(
        "{} of {target} failed ({}{}): {why}",
        action_name(op.action),
        op.id,
        attempt_note(op.attempt)
    );
    operation_event("Warning", FAILED, op, message)
}

/// What one try to record an Event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The Event exists: recorded now, or found recorded by an earlier try (AlreadyExists).
    Yes,
    /// It never will be: the API server refuses it as such (403, 422, ...) or the RustQueue is
    /// gone. Logged; what waits on it goes ahead without it rather than stall forever.
    Never(String),
    /// Not known (network, 5xx, a timeout, a lost reply: it may even exist): try again.
    Unknown(String),
}

/// Sorts the answer to a record: the decision every Event's caller acts on.
pub fn settle(r: Result<(), StoreError>) -> Recorded {
    match r {
        Ok(()) | Err(StoreError::Conflict(_)) => Recorded::Yes,
        Err(e @ (StoreError::Refused(_) | StoreError::NotFound(_))) => {
            Recorded::Never(e.to_string())
        }
        Err(e @ StoreError::Other(_)) => Recorded::Unknown(e.to_string()),
    }
}

/// Records `e` once: `Ok` when it exists (or never can: logged), `Err(why)` when a later try
/// must record it before anything that waits on it goes ahead.
pub async fn record(store: &dyn CatalogStore, e: NewEvent) -> Result<(), String> {
    let (reason, key) = (e.reason, e.key.clone());
    tracing::info!(target: "rustqueue_console::audit", reason, %key, message = %e.message, "console management event");
    match settle(store.record_event(e).await) {
        Recorded::Yes => Ok(()),
        Recorded::Never(why) => {
            tracing::error!(error = %why, reason, %key, "the Event cannot be recorded; going on without it");
            Ok(())
        }
        Recorded::Unknown(why) => {
            tracing::warn!(error = %why, reason, %key, "recording the Event failed; it is tried again");
            Err(why)
        }
    }
}

/// Records the Event of an accepted apply. Should that fail, the reconciler records it before
/// it moves the operation.
pub async fn accepted(m: &Manager, a: &Accepted) {
    let e = accepted_event(&a.target, &a.operation);
    let key = e.key.clone();
    if record(m.store.as_ref(), e).await.is_ok() {
        m.remember_event(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str, attempt: u32) -> CatalogOperation {
        CatalogOperation {
            id: id.into(),
            action: CatalogAction::Pause,
            completed_owners: Vec::new(),
            attempt,
            created_at_ms: 1,
            updated_at_ms: 1,
        }
    }

    #[test]
    fn an_event_key_names_its_reason_operation_and_attempt_but_success_has_no_attempt() {
        let id = "op-0123456789abcdef0123456789abcdef";
        let k = event_key(ACCEPTED, id, 1);
        assert_eq!(k.len(), 32);
        assert!(
            k.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(k, event_key(ACCEPTED, id, 1), "deterministic");
        assert_ne!(k, event_key(ACCEPTED, id, 2), "a retry is accepted again");
        assert_ne!(k, event_key(FAILED, id, 1));
        assert_ne!(k, event_key(ACCEPTED, "op-other", 1));
        assert_ne!(event_key(FAILED, id, 1), event_key(FAILED, id, 2));
        assert_eq!(
            event_key(SUCCEEDED, id, 1),
            event_key(SUCCEEDED, id, 2),
            "an operation succeeds once, whichever attempt does it"
        );
        // Length prefixes keep the parts apart.
        assert_ne!(event_key(FAILED, "op-1", 1), event_key(FAILED, "op-", 11));
    }

    #[test]
    fn an_operations_events_carry_its_keys_and_name_it() {
        let o = op("op-aaaaaaaaaaaaaaaa", 2);
        let a = accepted_event("topic orders", &o);
        assert_eq!((a.reason, a.type_), (ACCEPTED, "Normal"));
        assert_eq!(a.key, event_key(ACCEPTED, &o.id, 2));
        assert_eq!(
            a.message,
            "pause of topic orders accepted (op-aaaaaaaaaaaaaaaa, attempt 2)"
        );
        let s = succeeded_event("channel orders/billing", &o);
        assert_eq!((s.reason, s.type_), (SUCCEEDED, "Normal"));
        assert_eq!(s.key, event_key(SUCCEEDED, &o.id, 0));
        assert_eq!(
            s.message,
            "pause of channel orders/billing done on every owner (op-aaaaaaaaaaaaaaaa)"
        );
        let f = failed_event("topic orders", &op("op-bbbbbbbbbbbbbbbb", 1), "E_X: no");
        assert_eq!((f.reason, f.type_), (FAILED, "Warning"));
        assert_eq!(
            f.message,
            "pause of topic orders failed (op-bbbbbbbbbbbbbbbb): E_X: no"
        );
    }

    #[test]
    fn a_record_is_done_when_the_event_exists_or_never_can_and_tried_again_otherwise() {
        let table = [
            (Ok(()), Recorded::Yes),
            (
                Err(StoreError::Conflict("exists".into())),
                Recorded::Yes, // an earlier try recorded it (its reply lost, or another console)
            ),
            (
                Err(StoreError::Refused("forbidden".into())),
                Recorded::Never("refused: forbidden".into()),
            ),
            (
                Err(StoreError::NotFound("rustqueue".into())),
                Recorded::Never("not found: rustqueue".into()),
            ),
            (
                Err(StoreError::Other("timed out".into())),
                Recorded::Unknown("timed out".into()),
            ),
        ];
        for (answer, want) in table {
            assert_eq!(settle(answer.clone()), want, "{answer:?}");
        }
    }
}
