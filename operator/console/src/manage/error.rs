//! Errors of the management API: JSON `{code, detail}` with the status each code goes with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};

/// The console's management error codes (docs/console.md lists when each is returned).
pub mod codes {
    /// 400: the `Origin` host is not the `Host` (or is missing).
    pub const ORIGIN: &str = "E_ORIGIN";
    /// 400: the body is not `application/json`.
    pub const CONTENT_TYPE: &str = "E_CONTENT_TYPE";
    /// 400: the body does not parse, or a name or field is invalid.
    pub const BAD_REQUEST: &str = "E_BAD_REQUEST";
    /// 400: the typed confirmation is not the expected text.
    pub const CONFIRMATION_MISMATCH: &str = "E_CONFIRMATION_MISMATCH";
    /// 401: no unlocked session, or a missing or wrong CSRF header.
    pub const MANAGEMENT_LOCKED: &str = "E_MANAGEMENT_LOCKED";
    /// 404: no such topic or channel in the catalog.
    pub const NOT_FOUND: &str = "E_NOT_FOUND";
    /// 409: `#ephemeral` topics and channels are observed, never managed.
    pub const EPHEMERAL_UNMANAGED: &str = "E_EPHEMERAL_UNMANAGED";
    /// 409: create of something that exists and is not tombstoned.
    pub const ALREADY_EXISTS: &str = "E_ALREADY_EXISTS";
    /// 409: retry of something that did not fail.
    pub const RETRY_NOT_FAILED: &str = "E_RETRY_NOT_FAILED";
    /// 409: the target has an operation that has not finished.
    pub const OPERATION_IN_PROGRESS: &str = "E_OPERATION_IN_PROGRESS";
    /// 409: a channel of the topic has an operation that has not finished.
    pub const CHANNEL_OPERATION_IN_PROGRESS: &str = "E_CHANNEL_OPERATION_IN_PROGRESS";
    /// 409: the channel's topic is not ACTIVE.
    pub const TOPIC_OPERATION_IN_PROGRESS: &str = "E_TOPIC_OPERATION_IN_PROGRESS";
    /// 409: empty or delete of something held by more than one broker.
    pub const MIGRATION_IN_PROGRESS: &str = "E_MIGRATION_IN_PROGRESS";
    /// 409: the action token is unknown, used or expired.
    pub const ACTION_TOKEN_EXPIRED: &str = "E_ACTION_TOKEN_EXPIRED";
    /// 409: the apply does not match what the token was issued for.
    pub const ACTION_TOKEN_MISMATCH: &str = "E_ACTION_TOKEN_MISMATCH";
    /// 409: the object (or the catalog) changed since the preview, or its owners did.
    pub const RESOURCE_CHANGED: &str = "E_RESOURCE_CHANGED";
    /// 503: the snapshot is stale or incomplete, the catalog or discovery is unavailable.
    pub const MANAGEMENT_UNAVAILABLE: &str = "E_MANAGEMENT_UNAVAILABLE";
    /// 503: an owner is not healthy, or no broker can take a new topic.
    pub const OWNER_UNAVAILABLE: &str = "E_OWNER_UNAVAILABLE";
}

/// A refused management request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// One of [`codes`].
    pub code: &'static str,
    /// In words.
    pub detail: String,
}

impl ApiError {
    /// An error with the status its code goes with.
    pub fn new(code: &'static str, detail: impl Into<String>) -> Self {
        use codes::*;
        let status = match code {
            ORIGIN | CONTENT_TYPE | BAD_REQUEST | CONFIRMATION_MISMATCH => StatusCode::BAD_REQUEST,
            MANAGEMENT_LOCKED => StatusCode::UNAUTHORIZED,
            NOT_FOUND => StatusCode::NOT_FOUND,
            MANAGEMENT_UNAVAILABLE | OWNER_UNAVAILABLE => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::CONFLICT,
        };
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code, "detail": self.detail});
        (self.status, Json(body)).into_response()
    }
}
