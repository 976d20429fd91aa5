//! Error types of the engine API, one enum per operation; the server maps each variant to an
//! NSQ error code (docs/architecture.md, "Errors on the wire").
//!
//! Every operation that reaches storage shares one cause, [`StorageFault`]: it is `Clone`
//! because one group commit answers many waiters with the same failure.

use std::sync::Arc;

use rustqueue_storage::StorageError;

/// Why a storage step failed. Any of these means storage is isolated (or the work was cut off
/// by a shutdown); the request may be retried on a restarted broker.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StorageFault {
    /// A storage call failed; the store's fail-closed switch has tripped.
    #[error(transparent)]
    Storage(Arc<StorageError>),
    /// An earlier failure isolated storage; no writes are accepted until restart.
    #[error("storage is isolated after an earlier failure ({0}); restart the broker")]
    Isolated(String),
    /// A blocking storage task panicked or was cancelled.
    #[error("{task} task failed: {cause}")]
    Task {
        /// Which task (commit, sync, eviction...).
        task: &'static str,
        /// The join error.
        cause: String,
    },
    /// The channel's WAL worker has stopped (channel deleted or engine shut down).
    #[error("channel closed")]
    ChannelClosed,
}

impl StorageFault {
    /// A failed `spawn_blocking` of the named storage task.
    pub(crate) fn task(task: &'static str, e: &tokio::task::JoinError) -> Self {
        StorageFault::Task {
            task,
            cause: e.to_string(),
        }
    }
}

impl From<StorageError> for StorageFault {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Isolated(why) => StorageFault::Isolated(why),
            e => StorageFault::Storage(Arc::new(e)),
        }
    }
}

/// Two faults are equal when they report the same failure (the I/O error inside is not
/// comparable, its message is).
impl PartialEq for StorageFault {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for StorageFault {}

/// Why the engine could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Recovery or the directory lock failed (the message names file, offset and remedy).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The recovery task panicked or was cancelled.
    #[error(transparent)]
    Recovery(StorageFault),
    /// The configuration is invalid.
    #[error("invalid engine configuration: {0}")]
    Config(#[from] ConfigError),
    /// The tiering bucket configuration cannot work (the message says what to change).
    #[error("invalid [tiering] configuration: {0}")]
    Tiering(#[from] rustqueue_tier::Error),
}

/// An engine configuration the storage cannot serve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `max_message_bytes` is above what the storage feature level can store.
    #[error(
        "max_message_bytes {max_message_bytes} needs a higher storage feature level than {feature_level}"
    )]
    MessageTooBigForLevel {
        /// The configured message limit.
        max_message_bytes: u64,
        /// The configured storage feature level.
        feature_level: u8,
    },
    /// `max_segment_bytes` cannot hold the largest message.
    #[error("max_segment_bytes is too small")]
    SegmentTooSmall,
    /// Local retention is configured below the level that fences its evictions from older
    /// releases.
    #[error(
        "local retention (tiering.local_retention_bytes / local_retention_seconds) needs storage \
         feature level {needed}, so that a release that cannot read evicted segments refuses the \
         data directory instead of dropping their messages; storage.feature_level is \
         {feature_level}: set storage.feature_level = {needed} (docs/tiering.md)"
    )]
    LocalRetentionNeedsLevel {
        /// The configured storage feature level.
        feature_level: u8,
        /// The level local retention needs.
        needed: u8,
    },
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
    BadBatch(BadBatch),
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
    StorageFault(#[from] StorageFault),
    /// The engine is shutting down (`E_CLOSING` / 503).
    #[error("shutting down")]
    ShuttingDown,
}

/// What is wrong with a batch as a whole.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadBatch {
    /// No bodies, or more than one record may hold.
    #[error("{0} messages (allowed 1..=65536)")]
    Count(usize),
    /// The bodies together exceed one record.
    #[error("{0} exceeds one record")]
    TooLarge(u64),
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
    StorageFault(#[from] StorageFault),
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
    StorageFault(#[from] StorageFault),
    /// The engine is shutting down (503).
    #[error("shutting down")]
    ShuttingDown,
}

impl From<StorageError> for EngineError {
    fn from(e: StorageError) -> Self {
        EngineError::StorageFault(e.into())
    }
}

impl From<StorageError> for PublishError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::BatchTooLarge(n) => PublishError::BadBatch(BadBatch::TooLarge(n)),
            e => PublishError::StorageFault(e.into()),
        }
    }
}

/// A topic that could not be had for a publish: each management refusal as its publish
/// refusal.
impl From<EngineError> for PublishError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::TooManyTopics => PublishError::TopicLimit,
            EngineError::BadName(n) => PublishError::BadTopic(n),
            EngineError::ShuttingDown => PublishError::ShuttingDown,
            EngineError::StorageFault(f) => PublishError::StorageFault(f),
            // get_or_create_topic returns neither of these.
            EngineError::TopicNotFound
            | EngineError::ChannelNotFound
            | EngineError::TooManyChannels => PublishError::TopicLimit,
        }
    }
}
