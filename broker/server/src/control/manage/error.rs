//! Why a management request failed, and its HTTP answer (docs/api.md, "Management").

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rustqueue_api::contract::codes;
use rustqueue_engine::{EngineError, StorageError};

use super::fences::Refusal;

/// A refused or failed management request.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The body does not parse, or a field is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// The last path segment is not an action (400).
    #[error("{0}")]
    BadAction(String),
    /// Invalid topic name (400) or no such topic (404).
    #[error("{detail}")]
    BadTopic {
        /// 400 or 404.
        status: StatusCode,
        /// What was wrong.
        detail: String,
    },
    /// Invalid channel name (400) or no such channel (404).
    #[error("{detail}")]
    BadChannel {
        /// 400 or 404.
        status: StatusCode,
        /// What was wrong.
        detail: String,
    },
    /// Delete/tombstone without a future `tombstone_until_ms` (400).
    #[error("delete and tombstone need tombstone_until_ms in the future (ms since the Unix epoch)")]
    BadTombstone,
    /// `expected_revision` is stale (409).
    #[error("expected_revision {expected} is not the registry revision {current}; re-read it")]
    RevisionConflict {
        /// What the request named.
        expected: u64,
        /// What the broker has.
        current: u64,
    },
    /// The id was used for another request (409).
    #[error("operation_id {0} was used for another request; use a new id")]
    OperationConflict(String),
    /// Fences not synced, or another operation on the topic is pending (503).
    #[error("{0}")]
    Unavailable(String),
    /// A fence refuses it (409).
    #[error("{}", .0.detail())]
    Fenced(Refusal),
    /// Too many topics or channels (429).
    #[error("{0}")]
    Throttled(String),
    /// Storage failed (503); the operation stays pending, resend the same request.
    #[error("storage failed: {0}; resend the same request once the broker is healthy")]
    Storage(String),
}

impl ManageError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::BadAction(_) | Self::BadTombstone => {
                StatusCode::BAD_REQUEST
            }
            Self::BadTopic { status, .. } | Self::BadChannel { status, .. } => *status,
            Self::RevisionConflict { .. } | Self::OperationConflict(_) => StatusCode::CONFLICT,
            Self::Fenced(Refusal::Unavailable) | Self::Unavailable(_) | Self::Storage(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Fenced(_) => StatusCode::CONFLICT,
            Self::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The contract error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => codes::BAD_REQUEST,
            Self::BadAction(_) => codes::BAD_ACTION,
            Self::BadTopic { .. } => codes::BAD_TOPIC,
            Self::BadChannel { .. } => codes::BAD_CHANNEL,
            Self::BadTombstone => codes::BAD_TOMBSTONE,
            Self::RevisionConflict { .. } => codes::REVISION_CONFLICT,
            Self::OperationConflict(_) => codes::OPERATION_CONFLICT,
            Self::Unavailable(_) => codes::MANAGEMENT_UNAVAILABLE,
            Self::Fenced(r) => r.code(),
            Self::Throttled(_) => "E_THROTTLED",
            Self::Storage(_) => "E_STORAGE",
        }
    }

    /// No such topic.
    pub fn no_topic(topic: &str) -> ManageError {
        Self::BadTopic {
            status: StatusCode::NOT_FOUND,
            detail: format!("topic {topic:?} does not exist on this broker"),
        }
    }

    /// No such channel.
    pub fn no_channel(topic: &str, channel: &str) -> ManageError {
        Self::BadChannel {
            status: StatusCode::NOT_FOUND,
            detail: format!("channel {channel:?} of topic {topic:?} does not exist on this broker"),
        }
    }
}

impl From<StorageError> for ManageError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e.to_string())
    }
}

/// An engine failure on `topic` / `channel`.
pub fn engine(e: EngineError, topic: &str, channel: Option<&str>) -> ManageError {
    match e {
        EngineError::TopicNotFound => ManageError::no_topic(topic),
        EngineError::ChannelNotFound => ManageError::no_channel(topic, channel.unwrap_or("")),
        EngineError::BadName(n) => ManageError::BadRequest(format!("invalid name {n:?}")),
        EngineError::TooManyTopics | EngineError::TooManyChannels => {
            ManageError::Throttled(e.to_string())
        }
        EngineError::StorageFault(f) => ManageError::Storage(f.to_string()),
        EngineError::ShuttingDown => ManageError::Unavailable("the broker is shutting down".into()),
    }
}

impl IntoResponse for ManageError {
    fn into_response(self) -> Response {
        crate::control::routes::error(self.status(), self.code(), self.to_string())
    }
}
