//! Tiered storage, as far as it goes today: uploads of sealed segments to an S3-compatible
//! bucket, each recorded durably once its objects are stored, checkpoints of each topic's
//! head and channels on their own period, and the offline restore of a lost volume from them
//! (docs/tiering.md). Object keys: `keys.rs`.
//!
//! ```text
//! upload_loop: one task per engine, one upload at a time
//!   scan    every durable topic: TopicLog::sealed_files() + its TieredRecord ─▶ plan::Queue
//!   upload  Queue::next ─▶ Bucket::put_file(.rqlog), put_file(.rqidx)      (CRC-32C metadata)
//!   record  under the gate: Store::write_tiered (checksummed atomic write)  ─▶ metrics
//!   failure the segment stays queued; plan::Backoff (+ jitter) beyond the bucket's own retries
//!   period  checkpoint::upload: each changed topic's checkpoint, then the node's catalog
//!
//!   retain  local retention (retain.rs): the oldest uploaded segments' .rqlog removed,
//!           recorded `evicted` in the tiered record first; under disk pressure every
//!           uploaded one may go, also while an upload waits for the bucket
//!   purge   deleted topics' lives (their intents in tiered-deleted/): every object deleted
//!           once a catalog without them is up
//! read      consumers reaching a remote-only segment: RemoteReads::read_bodies (read.rs),
//!           ranged GETs in chunks with read-ahead, every body checked against its CRC-32C
//!
//! restore::restore_from_bucket (offline): catalog ─▶ checkpoints ─▶ segments, checked ─▶ files
//! verify::check_remote_segments (offline, storage verify --remote): evicted objects, ranged CRC
//! ```
//!
//! Publishing and delivery never wait for it: it takes a topic's log lock only to list the
//! sealed segments, and the only files it writes are a topic's record and, removing it, a
//! deleted topic's intent. GC goes on deleting segments while one uploads (protective eviction
//! does not run with tiering); an upload whose files vanished is
//! dropped without a record, and a record is written only after every object of its segment
//! is in the bucket, so it never names an object that is not there. The gate orders record
//! writes against topic deletion and shutdown: a record is never written into a deleted
//! topic's directory, a recreated topic's, or a directory this process no longer holds.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rustqueue_tier::{Bucket, BucketConfig};

mod checkpoint;
mod keys;
mod plan;
mod read;
pub mod restore;
mod retain;
mod uploader;
mod verify;

pub use checkpoint::{CHECKPOINT_FORMAT, Catalog, CatalogTopic, TopicCheckpoint};

pub use plan::Backoff;
pub(crate) use read::{RemoteFail, RemoteReads, prefetch, read_bodies};
pub use retain::LocalRetention;
pub(crate) use uploader::{PressureEviction, upload_loop};
pub use verify::{RemoteCheck, check_remote_segments};

/// The default `checkpoint_upload_seconds`: a lost volume loses at most about this much of its
/// channels' progress (redelivered after a restore) and of the head the loss is counted from.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// Where and when sealed segments are uploaded (`[tiering]`, docs/configuration.md).
#[derive(Clone, Debug)]
pub struct TieringOptions {
    /// The bucket, its prefix, credentials, and the retry policy of each request.
    pub bucket: BucketConfig,
    /// How long after it is first seen sealed a segment is uploaded (`upload_after_seconds`).
    pub upload_after: Duration,
    /// The wait after a failed upload, beyond the bucket's own retries.
    pub backoff: Backoff,
    /// How often the logs are looked at for newly sealed segments when nothing is due.
    pub scan_interval: Duration,
    /// How often each topic's checkpoint (head, channels, uploaded segments) and the node's
    /// catalog are uploaded when they changed (`checkpoint_upload_seconds`).
    pub checkpoint_interval: Duration,
    /// Local retention (`local_retention_bytes` / `_seconds`): when uploaded segments' local
    /// copies are removed. `LocalRetention::KEEP` keeps every one.
    pub local_retention: LocalRetention,
}

impl TieringOptions {
    /// Uploads to `bucket` as soon as a segment is sealed, the default back-off, a scan a second.
    pub fn new(bucket: BucketConfig) -> Self {
        Self {
            bucket,
            upload_after: Duration::ZERO,
            backoff: Backoff::default(),
            scan_interval: Duration::from_secs(1),
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            local_retention: LocalRetention::KEEP,
        }
    }
}

/// What the uploader has done so far (also exported as metrics, docs/monitoring.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TieringStatus {
    /// Sealed segments not yet recorded as uploaded.
    pub backlog_segments: u64,
    /// Their `.rqlog` bytes.
    pub backlog_bytes: u64,
    /// Segments uploaded and recorded since open.
    pub uploaded_segments: u64,
    /// Segment uploads that failed since open (each is tried again later).
    pub failed_uploads: u64,
    /// Bucket requests that failed and were retried by the bucket's own policy.
    pub failed_requests: u64,
    /// Scans of the logs completed since open.
    pub scans: u64,
    /// Topic checkpoints and catalogs uploaded since open.
    pub checkpoint_uploads: u64,
    /// Their uploads that failed (each tried again at the next period).
    pub checkpoint_failures: u64,
    /// Uploaded segments whose local copy local retention removed since open.
    pub evicted_segments: u64,
    /// Their `.rqlog` bytes.
    pub evicted_bytes: u64,
    /// Bytes read from the bucket for consumers of remote-only segments since open.
    pub read_through_bytes: u64,
    /// Those reads that failed after the bucket's own retries (each tried again).
    pub remote_read_failures: u64,
}

/// The uploader's share of the engine: the bucket, the options, and the gate.
pub(crate) struct Tiering {
    pub bucket: Bucket,
    pub opts: TieringOptions,
    /// Held while a record is written, while a topic directory is removed and before the
    /// directory lock is released at shutdown.
    pub gate: Mutex<()>,
    /// Scans completed.
    pub scans: AtomicU64,
    /// Checkpoints and catalogs uploaded.
    pub checkpoint_uploads: AtomicU64,
    /// Checkpoint and catalog uploads that failed.
    pub checkpoint_failures: AtomicU64,
    /// Consumers' reads of remote-only segments, with their read-ahead.
    pub reads: RemoteReads,
}

impl Tiering {
    /// Checks the bucket configuration (contacting nothing).
    pub(crate) fn new(opts: TieringOptions) -> Result<Self, rustqueue_tier::Error> {
        Ok(Self {
            reads: RemoteReads::default(),
            bucket: Bucket::new(opts.bucket.clone())?,
            opts,
            gate: Mutex::new(()),
            scans: AtomicU64::new(0),
            checkpoint_uploads: AtomicU64::new(0),
            checkpoint_failures: AtomicU64::new(0),
        })
    }
}
