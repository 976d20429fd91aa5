//! `rustqueue-storage`: the synchronous durable storage of one RustQueue broker.
//!
//! It owns the bytes on disk and nothing else (no tokio, no delivery policy):
//!
//! ```text
//! Store ── directory lock, FORMAT, COMPATIBILITY, broker.meta (id reservation), topics/
//!   ├─ TopicLog      append-only CRC'd segments, per-topic positions, sealed-segment index, GC
//!   ├─ ChannelWal    FIN/REQ/... command frames + periodic checkpoint of a ChannelState
//!   └─ TieredRecord  which sealed segments are in the bucket (tiered storage)
//! restore          the files of a data directory rebuilt from the bucket (`storage restore`)
//! ```
//!
//! The engine sees only the types re-exported here; the modules behind them are private.
//! All file I/O goes through [`Fs`]: [`RealFs`] for durable data, [`MemFs`] for logs that
//! never outlive the process (`#ephemeral` topics). Tests (feature `test-support`) add
//! `simfs::SimFs`, which simulates crashes and failures.
//! Any write, fsync or read failure trips the shared [`Fault`]: from then on every write is
//! refused ("isolated") so a restart runs normal recovery. Data that fails its checksum at
//! rest is not a failure of that kind: it is quarantined ([`Quarantine`]) and everything else
//! keeps working. Byte layouts: docs/storage-format.md.

// Storage failures must surface as errors (and isolate storage), never as panics.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod audit;
mod channel;
mod failpoint;
mod fs;
mod levels;
mod log;
mod memfs;
mod meta;
pub mod offline;
mod quarantine;
mod record;
pub mod restore;
#[cfg(any(test, feature = "test-support"))]
pub mod simfs;
mod store;
mod tiered;
mod tiered_deleted;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

// The face the engine sees: everything else is private to this crate.
pub use audit::EvictionAudit;
pub use channel::{ChannelCommand, ChannelState};
pub use failpoint::crash_failpoint;
pub use fs::{Fs, FsFile, RealFs};
pub use levels::{LARGE_RECORDS_LEVEL, LOCAL_RETENTION_LEVEL, MAX_FEATURE_LEVEL};
pub use log::scrub::{RebuiltIndex, ScrubReport, SealedSegment, verify_segment};
pub use log::{
    AppendBatch, BodyLocation, DEFAULT_CACHE_BYTES, DamageSink, Entry, IndexWrite, LocalSealed,
    OldestSegment, PageCache, RemoteSegment, SealedFiles, SyncHandle, Synced, TopicLog,
    ZERO_AHEAD_BYTES, ZERO_AHEAD_MARGIN, ZeroWrite, body_matches, is_damaged_body,
    read_bodies_from, read_body_from,
};
pub use memfs::MemFs;
pub use meta::{Compatibility, Manifest, read_compatibility, read_json, write_json_at};
/// How a topic or channel name becomes a directory name on disk (lowercase hex of its bytes),
/// and back; the tiering layer's object keys use the same names.
pub use meta::{hex, unhex};
pub use quarantine::{
    DamageKind, Detector, Finding, Quarantine, QuarantineRecord, QuarantineSummary,
};
pub use record::{MAX_BATCH, payload_len};
pub use store::{RecoveredChannel, RecoveredTopic, Store, StoreOptions};
pub use tiered::{TIERED_FILE, TieredObject, TieredRecord, TieredSegment};
pub use tiered_deleted::{DELETED_DIR, DeletedIncarnation, ListedIntent};
pub use wal::ChannelWal;

/// On-disk details that tests inspect or damage on purpose (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    pub use crate::audit::list as list_audits;
    pub use crate::meta::{BrokerMeta, hex, read_checked, read_json, write_checked};
    pub use crate::record::{HEADER_LEN, decode_header};
    pub use crate::wal::{CHECKPOINT_EVERY, paths as wal_paths};
}

/// Everything that can go wrong in storage. Each variant says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An I/O call failed; storage is isolated until restart.
    #[error("storage I/O error: {op} {file}: {source}; storage is isolated, restart the broker")]
    Io {
        /// The operation that failed.
        op: &'static str,
        /// The file it failed on.
        file: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A complete record or file is invalid; startup refuses rather than guess.
    #[error(
        "corrupt data in {file} at offset {offset}: {detail}; restore the file or remove the topic to start"
    )]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A previous failure isolated storage; no writes are accepted until restart.
    #[error("storage is isolated after an earlier failure ({0}); restart the broker")]
    Isolated(String),
    /// Another process holds the data directory lock.
    #[error("data directory {0} is locked by another process; stop it or use another data path")]
    Locked(PathBuf),
    /// The directory is not a compatible RustQueue data directory.
    #[error("incompatible data directory: {0}")]
    Incompatible(String),
    /// The batch does not fit in one record.
    #[error("batch too large: {0} payload bytes exceed the record limit")]
    BatchTooLarge(u64),
    /// Message-id space exhausted for this node.
    #[error("message id sequence exhausted; retry on another broker")]
    SequenceExhausted,
}

/// Builds a `map_err` closure that records operation and file.
pub(crate) fn io_err<'a>(
    op: &'static str,
    file: &'a Path,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        op,
        file: file.to_path_buf(),
        source,
    }
}

/// The fail-closed switch shared by every writer of one store.
#[derive(Clone, Debug, Default)]
pub struct Fault(Arc<FaultState>);

#[derive(Debug, Default)]
struct FaultState {
    reason: Mutex<Option<String>>,
    /// Set once `reason` is: every append and WAL write of the store checks the switch, and
    /// reading a flag costs them no shared lock while it is untripped.
    tripped: AtomicBool,
    errors: AtomicU64,
}

impl Fault {
    /// `Err(Isolated)` once tripped.
    pub fn check(&self) -> Result<(), StorageError> {
        if !self.0.tripped.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*self.0.reason.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(StorageError::Isolated(why.clone())),
            None => Ok(()),
        }
    }
    /// Trips the switch (first reason wins); every call counts as one storage error.
    pub fn trip(&self, why: String) {
        self.0.errors.fetch_add(1, Ordering::Relaxed);
        self.close(why);
    }
    /// Refuses further writes without counting an error (graceful close).
    pub fn close(&self, why: String) {
        let mut g = self.0.reason.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(why);
            self.0.tripped.store(true, Ordering::Release);
        }
    }
    /// Storage errors seen so far (`rustqueue_storage_errors_total`).
    pub fn errors(&self) -> u64 {
        self.0.errors.load(Ordering::Relaxed)
    }
    /// The reason, if tripped. Every publish asks first: while untripped that is a read of
    /// the flag, not a hold of the lock all of the store's writers share.
    pub fn reason(&self) -> Option<String> {
        if !self.0.tripped.load(Ordering::Acquire) {
            return None;
        }
        self.0
            .reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// Runs a write step; any error trips the switch.
    pub fn guard<T>(&self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(e) = &r
            && !matches!(
                e,
                StorageError::BatchTooLarge(_) | StorageError::SequenceExhausted
            )
        {
            self.trip(e.to_string());
        }
        r
    }
}

#[cfg(test)]
mod fault_tests {
    use super::*;

    #[test]
    fn the_switch_reports_the_first_reason_once_tripped() {
        let f = Fault::default();
        assert_eq!(f.reason(), None);
        assert!(f.check().is_ok());
        f.trip("disk gone".into());
        f.close("shutting down".into());
        assert_eq!(f.reason().as_deref(), Some("disk gone"));
        assert!(matches!(f.check(), Err(StorageError::Isolated(why)) if why == "disk gone"));
        assert_eq!(f.errors(), 1);
        // A clone shares the switch.
        assert_eq!(f.clone().reason().as_deref(), Some("disk gone"));
    }
}
