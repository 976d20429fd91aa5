//! Error types of the engine API; the server maps each variant to an NSQ error code.

use rustqueue_storage::StorageError;

/// Why the engine could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Recovery or the directory lock failed (the message names file, offset and remedy).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The configuration is invalid.
    #[error("invalid engine configuration: {0}")]
    Config(String),
}

/// Why a PUB/MPUB/DPUB failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    /// A body exceeds `max_message_bytes` (`E_BAD_MESSAGE`).
    #[error("message of {size} bytes exceeds the {max} byte limit")]
    TooBig {
        /// Offending size.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// A body is empty (`E_BAD_MESSAGE`).
    #[error("message body is empty")]
    EmptyBody,
    /// No bodies, or more than one record can hold (`E_BAD_BODY`).
    #[error("invalid batch: {0}")]
    BadBatch(String),
    /// Invalid topic name (`E_BAD_TOPIC`).
    #[error("invalid topic name {0:?}")]
    BadTopic(String),
    /// DPUB defer outside 0..=max_defer (`E_INVALID`).
    #[error("defer outside the allowed range")]
    InvalidDefer,
    /// Memory budget exhausted or disk pressure (`E_THROTTLED` / 429); retry later.
    #[error("publish throttled; retry later")]
    Throttled,
    /// The topic limit is reached (`E_PUB_FAILED` / 429).
    #[error("too many topics")]
    TopicLimit,
    /// Storage is isolated after an I/O or integrity failure (`E_PUB_RETRY` / 503).
    #[error("storage fault: {0}")]
    StorageFault(String),
    /// The engine is shutting down (`E_CLOSING` / 503).
    #[error("shutting down")]
    ShuttingDown,
}

/// Why FIN/REQ/TOUCH failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeliveryError {
    /// The id is not in flight for this consumer (`E_FIN_FAILED`/`E_REQ_FAILED`/`E_TOUCH_FAILED`).
    #[error("message not in flight")]
    NotInFlight,
    /// REQ delay outside 0..=max_defer (`E_INVALID`).
    #[error("requeue delay outside the allowed range")]
    InvalidDelay,
    /// The channel WAL could not be written (storage isolated).
    #[error("storage fault: {0}")]
    StorageFault(String),
}

/// Why a management call failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    /// No such topic (404).
    #[error("topic not found")]
    TopicNotFound,
    /// No such channel (404).
    #[error("channel not found")]
    ChannelNotFound,
    /// Invalid topic or channel name (`E_BAD_TOPIC`/`E_BAD_CHANNEL`, 400).
    #[error("invalid name {0:?}")]
    BadName(String),
    /// `max_topics` reached (429).
    #[error("too many topics")]
    TooManyTopics,
    /// 1,024 channels on this topic already (429).
    #[error("too many channels")]
    TooManyChannels,
    /// Storage is isolated (503).
    #[error("storage fault: {0}")]
    StorageFault(String),
    /// The engine is shutting down (503).
    #[error("shutting down")]
    ShuttingDown,
}

impl From<StorageError> for EngineError {
    fn from(e: StorageError) -> Self {
        EngineError::StorageFault(e.to_string())
    }
}

impl From<StorageError> for PublishError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::BatchTooLarge(n) => {
                PublishError::BadBatch(format!("{n} exceeds one record"))
            }
            StorageError::SequenceExhausted => PublishError::StorageFault(e.to_string()),
            e => PublishError::StorageFault(e.to_string()),
        }
    }
}
