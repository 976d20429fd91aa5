//! The audit trail: one structured log line per management request, and Kubernetes Events
//! on the RustQueue when an operation is accepted, succeeds or fails.

use super::Manager;
use super::apply::Accepted;
use super::http::Caller;
use crate::cluster::{CatalogStore, NewEvent};

/// Event reason of an accepted apply.
pub const ACCEPTED: &str = "ConsoleManagementAccepted";
/// Event reason of a finished operation.
pub const SUCCEEDED: &str = "ConsoleManagementSucceeded";
/// Event reason of a failed operation.
pub const FAILED: &str = "ConsoleManagementFailed";

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

/// Records the Event of an accepted apply.
pub async fn accepted(m: &Manager, action: &str, a: &Accepted) {
    let message = format!("{action} of {} accepted as {}", a.target, a.operation_id);
    event(m.store.as_ref(), "Normal", ACCEPTED, message).await;
}

/// Records an Event; a failure to record is logged, never fatal.
pub async fn event(
    store: &dyn CatalogStore,
    type_: &'static str,
    reason: &'static str,
    message: String,
) {
    tracing::info!(target: "rustqueue_console::audit", reason, %message, "console management event");
    if let Err(e) = store
        .record_event(NewEvent {
            type_,
            reason,
            message,
        })
        .await
    {
        tracing::warn!(error = %e, reason, "recording the Event failed");
    }
}
