//! `rustqueue-engine`: the broker's queueing engine on top of `rustqueue-storage`.
//!
//! ```text
//! Engine ── topics ── Topic: TopicLog (shared by all channels) + publish group-commit worker
//!                      └─ Channel: cursor + in-flight/deadline index + requeue/deferred sets
//!                               + FIN/REQ group-commit worker owning the channel WAL
//!        ── Consumer: RDY, next(), finish/requeue/touch; drop = disconnect
//!        ── maintenance: retention GC of whole sealed segments
//!        ── tiering (optional): uploads of sealed segments to a bucket, recorded durably
//! ```
//!
//! Payloads are stored once per topic; each channel is an independent cursor over the log.
//! Publishing resolves only when the batch is durable per [`AckMode`]; FIN/REQ resolve after the
//! channel WAL fsync. A storage failure isolates the store and shows in [`Engine::health`].

// Storage failures must surface as errors (and isolate storage), never as panics.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod budget;
mod channel;
mod config;
mod consumer;
mod disk;
mod dlq;
mod engine;
mod error;
mod evict;
mod gauges;
mod gc;
mod group;
mod lock;
pub mod metrics;
mod registry;
mod scrub;
mod shared;
mod sync_thread;
mod tiering;
mod topic;
mod trace;
mod types;

pub use bytes::Bytes;
pub use config::{AckMode, EngineConfig, feature_level_message_cap};
pub use consumer::{Ack, AppliedAcks, BatchLimit, Consumer, Durable};
pub use engine::Engine;
pub use error::{
    BadBatch, ConfigError, DeliveryError, EngineError, OpenError, PublishError, StorageFault,
};
pub use gauges::{QueueGauges, TopicGauges};
pub use metrics::{Counter, EngineMetrics, HistogramSnapshot, Kind, Timer};
/// What the engine reports about a data directory and this build's storage.
pub use rustqueue_storage::Compatibility;
/// Offline tools over a stopped broker's data directory (`rustqueued storage ...`).
pub use rustqueue_storage::offline;
pub use rustqueue_storage::{
    DamageKind, Detector, LARGE_RECORDS_LEVEL, LOCAL_RETENTION_LEVEL, MAX_FEATURE_LEVEL,
    QuarantineRecord, QuarantineSummary, RealFs, StorageError,
};
/// Tiered storage: where and when sealed segments are uploaded (docs/tiering.md).
pub use rustqueue_tier::{BucketConfig, Credentials, ObjectKey};
pub use tiering::restore;
pub use tiering::{
    Backoff, CHECKPOINT_FORMAT, Catalog, CatalogTopic, DEFAULT_CHECKPOINT_INTERVAL, LocalRetention,
    RemoteCheck, TieringOptions, TieringStatus, TopicCheckpoint, check_remote_segments,
};
pub use trace::{CommitTimes, CommitTrace};
/// Small durable files beside the data (the server's management catalog and fences): JSON
/// written atomically (temp, fsync, rename, directory fsync) and read back, and the
/// compile-time failpoints of real SIGKILL tests (feature `crash-injection`).
pub mod durable {
    pub use rustqueue_storage::{Fs, crash_failpoint, read_json, write_json_at};
}
pub use types::{
    ChannelStats, ClientInfo, ClientStats, ConsumerOptions, Delivery, EngineHealth, EngineStats,
    MessageId, TopicStats, valid_name,
};
