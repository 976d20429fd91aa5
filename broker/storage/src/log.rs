//! One topic's append-only log: a directory of segments `segment-<20-digit base index>.rqlog`
//! plus `.rqidx` indexes for sealed ones.
//!
//! Positions are per topic, 1-based and never reused; every message has an [`Entry`] of
//! metadata so readers fetch a body with one positional read. The active segment's entries
//! stay in memory; a sealed segment keeps only a small [`index::Summary`] and its entries are
//! paged in from its index on demand through a bounded [`PageCache`] shared by the store's logs (`sealed.rs`), so
//! opening a log reads a header per sealed segment, not an entry per message. Appends become durable
//! only after [`TopicLog::sync`] (or after a [`SyncHandle`] synced outside the log lock and
//! handed back to [`TopicLog::mark_synced`], as the engine does so appends and readers are not
//! blocked by the fsync).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::failpoint::crash_failpoint;
use crate::fs::{Fs, FsFile};
use crate::quarantine::{DamageKind, Detector, Finding, Quarantine};
use crate::{Fault, StorageError, io_err, meta};

mod append;
pub(crate) mod index;
mod oldest;
mod pages;
mod recover;
pub(crate) mod scan;
pub mod scrub;
mod sealed;
#[cfg(test)]
mod tests;
pub use oldest::OldestSegment;
pub use pages::{DEFAULT_CACHE_BYTES, PageCache};

/// Metadata of one stored message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Topic position.
    pub position: u64,
    /// Broker-wide message id (`node_id << 48 | sequence`).
    pub id: u64,
    /// Publish time (ns since the epoch).
    pub timestamp_ns: i64,
    /// Earliest delivery time (ms since the epoch).
    pub available_at_ms: i64,
    /// Absolute offset of the body in its segment file.
    pub body_offset: u64,
    /// Body length.
    pub body_len: u32,
    /// CRC-32C (Castagnoli) of the body, checked on every read for delivery.
    pub body_crc: u32,
    /// Base log index of the segment holding the body.
    pub segment: u64,
}

/// Where a log reports the damage it finds: the store's quarantine ledger, under its topic.
#[derive(Clone, Debug)]
pub struct DamageSink {
    quarantine: Quarantine,
    topic: String,
    /// Who finds damage while the log opens (the startup scan, or `storage repair`).
    opening: Detector,
}

impl DamageSink {
    /// Reports to `quarantine` for `topic`; damage found while opening is `opening`'s.
    pub fn new(quarantine: Quarantine, topic: impl Into<String>, opening: Detector) -> Self {
        DamageSink {
            quarantine,
            topic: topic.into(),
            opening,
        }
    }

    /// A sink that writes nothing (logs without a data directory, tests).
    pub fn detached(fs: Arc<dyn Fs>, topic: impl Into<String>) -> Self {
        Self::new(Quarantine::detached(fs), topic, Detector::Startup)
    }

    /// The ledger.
    pub fn quarantine(&self) -> &Quarantine {
        &self.quarantine
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn report_segment(
        &self,
        file: &Path,
        d: &scan::Damage,
        detected_by: Detector,
        action: &str,
    ) -> Result<(), StorageError> {
        let action = if d.recovered {
            "only the record's length field was damaged: read whole, nothing lost".to_string()
        } else {
            action.to_string()
        };
        self.quarantine
            .report(Finding {
                kind: DamageKind::SegmentRecord,
                topic: self.topic.clone(),
                channel: None,
                file: file.to_path_buf(),
                range: d.range,
                positions: d.positions.clone(),
                ids: d.ids.clone(),
                action,
                detected_by,
            })
            .map(|_| ())
    }

    pub(crate) fn report(&self, f: Finding) -> Result<(), StorageError> {
        self.quarantine.report(f).map(|_| ())
    }

    pub(crate) fn finding(
        &self,
        kind: DamageKind,
        file: &Path,
        range: (u64, u64),
        detected_by: Detector,
        action: &str,
    ) -> Finding {
        Finding {
            kind,
            topic: self.topic.clone(),
            channel: None,
            file: file.to_path_buf(),
            range,
            positions: Vec::new(),
            ids: Vec::new(),
            action: action.to_string(),
            detected_by,
        }
    }

    pub(crate) fn opening(&self) -> Detector {
        self.opening
    }
}

/// The files of a sealed segment, for copying them elsewhere (tiered storage uploads them).
/// They never change once sealed, but GC may delete them at any time: a reader of the paths
/// must expect them to be gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedFiles {
    /// The segment's base log index.
    pub base: u64,
    /// The `.rqlog` file.
    pub log_path: PathBuf,
    /// Its length (records only, as sealed).
    pub log_len: u64,
    /// The `.rqidx` file.
    pub index_path: PathBuf,
}

/// A sealed segment whose `.rqlog` is on the volume ([`TopicLog::local_sealed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalSealed {
    /// Its base log index.
    pub base: u64,
    /// Its `.rqlog` bytes.
    pub bytes: u64,
    /// Publish time (ns) of its newest message.
    pub newest_timestamp_ns: i64,
}

/// A batch to append: one PUB/DPUB (one body) or one MPUB (many), stored as one record.
pub struct AppendBatch<'a, B: AsRef<[u8]>> {
    /// Id of the first message (the rest follow contiguously).
    pub first_id: u64,
    /// Bodies in order.
    pub bodies: &'a [B],
    /// Publish time (ns); forced non-decreasing.
    pub timestamp_ns: i64,
    /// Earliest delivery time (ms).
    pub available_at_ms: i64,
}

/// A sealed segment whose `.rqlog` is only in the bucket (evicted by local retention, as the
/// topic's tiered record says); its `.rqidx` stays local, so its entries are read as before
/// and only bodies come from the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSegment {
    /// The `.rqlog` object's key, relative to the bucket prefix.
    pub key: String,
    /// Its length in bytes (the segment's records, as sealed).
    pub size: u64,
}

/// Where a body is read from: an open local file, or a remote-only segment's object.
#[derive(Clone)]
pub enum BodyLocation {
    /// The segment's local file (kept open, so GC or eviction unlinking it does not matter).
    Local(Arc<dyn FsFile>),
    /// The segment's `.rqlog` object in the bucket, with the segment's base.
    Remote(u64, Arc<RemoteSegment>),
}

/// Where a segment's records are.
#[derive(Clone)]
enum Stored {
    Local(Arc<dyn FsFile>),
    Remote(Arc<RemoteSegment>),
}

struct Segment {
    base: u64,
    path: PathBuf,
    file: Stored,
    /// Bytes of records.
    len: u64,
    /// The file's length: `len`, then zeros written ahead of the tail (active segment only).
    zeroed: u64,
    last_log_index: Option<u64>,
    last_position: Option<u64>,
    /// Set once the segment is sealed (every segment but the last).
    summary: Option<index::Summary>,
    /// A sealed segment's encoded index while its `.rqidx` is being written outside the log
    /// lock ([`TopicLog::take_index_writes`]): pages are read from here until then, and
    /// nothing that needs the file (upload, scrub, GC, eviction) takes the segment yet.
    unwritten_index: Option<Arc<Vec<u8>>>,
}

impl Segment {
    /// The local file; an error for a remote-only segment (never the active one).
    fn local(&self) -> std::io::Result<&Arc<dyn FsFile>> {
        match &self.file {
            Stored::Local(f) => Ok(f),
            Stored::Remote(_) => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the segment is only in the bucket (evicted by local retention)",
            )),
        }
    }

    fn is_remote(&self) -> bool {
        matches!(self.file, Stored::Remote(_))
    }

    /// Whether its index is on disk (always, unless a deferred write is still running):
    /// only then may anything that needs the `.rqidx` file (upload, scrub, GC, eviction) take
    /// the segment.
    fn index_on_disk(&self) -> bool {
        self.unwritten_index.is_none()
    }

    /// Truncates the zeros written ahead of the tail (not synced): the file is its records.
    fn cut_zeros(&mut self) -> std::io::Result<()> {
        if self.zeroed > self.len {
            self.local()?.truncate(self.len)?;
            self.zeroed = self.len;
        }
        Ok(())
    }
}

/// Zeros written ahead of the active segment's tail each time a record reaches past them
/// ([`Fs::zero_fill_ahead`]): the fdatasync after that writes them and the inode once, and the
/// records that land on them later are synced without a metadata write.
pub const ZERO_AHEAD_BYTES: usize = 1 << 20;
/// Deferred zeros ([`TopicLog::defer_zero_writes`]) are asked for while the tail is within
/// this of the zeroed end (once a segment holds this much), so the next step is under way well
/// before an append reaches it: where fresh page-cache pages are slow to come by (100 MB/s on
/// a VM whose free memory the host takes back), a step can take longer to write than the
/// appends take to cross one.
pub const ZERO_AHEAD_MARGIN: u64 = 2 * ZERO_AHEAD_BYTES as u64;
/// Zeros are written ahead only while syncs cover less than this on average. Zeros double the
/// bytes written (about 0.8 ms per MiB at the benchmark disk's 1,285 MiB/s synced bandwidth)
/// and save the inode write of each sync (80-165 µs there, more for larger groups), so they
/// pay while a MiB takes more than about five syncs, groups of up to about 200 KiB. At 256 KiB
/// the `mixed` case's durable writers (two MPUBs of 64 KiB, groups of 128-256 KiB on average)
/// read 13-17 % more than at 64 KiB (two A/B sets, rounds alternating), and MPUB 64 x 1 KiB
/// durable (about 400 KiB groups) is unchanged (docs/benchmarks.md, notes).
const ZERO_AHEAD_MAX_GROUP: u64 = 256 * 1024;
static ZEROS: [u8; ZERO_AHEAD_BYTES] = [0; ZERO_AHEAD_BYTES];

/// Most record bytes a log with deferred appends ([`TopicLog::defer_appends`]) keeps
/// unwritten: the append that would pass it writes them, with its own records, at once.
pub const UNWRITTEN_MAX_BYTES: u64 = 64 * 1024;

/// Records appended to the active segment and not yet written to its file
/// ([`TopicLog::defer_appends`]): the bytes as they will be written. They always end at the
/// active segment's length (a seal writes them first), so where they start is that length
/// less theirs ([`TopicLog::unwritten_from`]).
#[derive(Default)]
struct Unwritten {
    /// Whether appends leave their records here (else each append writes its own).
    on: bool,
    buf: Vec<u8>,
}

/// Most bytes of recent bodies a log keeps in memory ([`TopicLog::recent_body`]). Consumers
/// that keep up trail the newest append by about one publish group, far less than this; it
/// is per topic, so 1,000 busy topics hold at most 125 MiB here.
pub const RECENT_BODY_BYTES: usize = 128 * 1024;
/// Bodies larger than this are never kept (one would evict hundreds of small ones).
const RECENT_BODY_MAX: usize = 64 * 1024;

/// Copies of the bodies of the latest appends, by position, within [`RECENT_BODY_BYTES`]:
/// a consumer that keeps up with publishers is served from here without reading the file.
/// They are the bytes that were appended, so they need no checksum; positions are never
/// reused, and a lookup also matches the entry's id and length.
#[derive(Default)]
pub(crate) struct Recent {
    bodies: VecDeque<(u64, u64, bytes::Bytes)>,
    bytes: usize,
}

impl Recent {
    fn push(&mut self, position: u64, id: u64, body: &[u8]) {
        if body.len() > RECENT_BODY_MAX {
            // Keep the positions contiguous: a gap ends what is kept.
            self.clear();
            return;
        }
        if self
            .bodies
            .back()
            .is_some_and(|&(last, _, _)| last + 1 != position)
        {
            self.clear();
        }
        self.bytes += body.len();
        self.bodies
            .push_back((position, id, bytes::Bytes::copy_from_slice(body)));
        while self.bytes > RECENT_BODY_BYTES {
            match self.bodies.pop_front() {
                Some((_, _, b)) => self.bytes -= b.len(),
                None => break,
            }
        }
    }

    fn clear(&mut self) {
        self.bodies = VecDeque::new();
        self.bytes = 0;
    }

    fn get(&self, e: &Entry) -> Option<bytes::Bytes> {
        let &(first, _, _) = self.bodies.front()?;
        let i = usize::try_from(e.position.checked_sub(first)?).ok()?;
        let (position, id, body) = self.bodies.get(i)?;
        (*position == e.position && *id == e.id && body.len() == e.body_len as usize)
            .then(|| body.clone())
    }
}

/// The log of one topic.
pub struct TopicLog {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    fault: Fault,
    max_segment_bytes: u64,
    segments: Vec<Segment>,
    /// Entries of the active (last) segment only.
    active: VecDeque<Entry>,
    /// Copies of the latest bodies appended.
    recent: Recent,
    cache: Arc<PageCache>,
    log_id: u64,
    next_index: u64,
    next_position: u64,
    last_ts: i64,
    durable_position: u64,
    /// Record bytes appended since open, and how many of them are durable: unsynced bytes are
    /// exact even when appends go on while an fsync runs.
    appended_bytes: u64,
    durable_bytes: u64,
    /// Record bytes per sync, a moving average (decides [`ZERO_AHEAD_MAX_GROUP`], and the
    /// engine's hold of an fdatasync for returning publishers).
    sync_group_bytes: u64,
    damage: DamageSink,
    /// Whether an append that seals a segment leaves its index for the caller to write
    /// ([`TopicLog::defer_index_writes`]).
    defer_index: bool,
    /// Indexes sealed by appends and not yet taken by the caller.
    index_writes: Vec<IndexWrite>,
    /// Zeros ahead of the tail written by the caller ([`TopicLog::defer_zero_writes`]).
    zeros: DeferredZeros,
    /// Records appended and not yet written ([`TopicLog::defer_appends`]).
    unwritten: Unwritten,
}

/// The state of zeros written outside the log lock.
#[derive(Default)]
struct DeferredZeros {
    /// Whether the caller writes them (else an append does, in its own write).
    on: bool,
    /// The zero write an append asked for and the caller has not taken yet.
    asked: Option<ZeroWrite>,
    /// The zero write handed out and not yet settled ([`TopicLog::zeros_written`]).
    out: Option<ZeroRange>,
    /// Shared with the zero write handed out: what it is to write, what it wrote.
    state: Arc<std::sync::Mutex<ZeroState>>,
}

/// The range of an active segment a zero write covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ZeroRange {
    base: u64,
    start: u64,
    end: u64,
}

/// A deferred zero write's state, behind its own mutex: the writer holds it for the whole
/// write, so whoever takes it under the log lock (an append that reaches the range, a seal)
/// either cancels a write not begun or waits for one under way.
#[derive(Default)]
struct ZeroState {
    /// To be written (cleared when written or cancelled).
    pending: Option<ZeroRange>,
    /// Written (or tried: a failed write may have grown the file), not yet recorded.
    done: Option<ZeroRange>,
}

fn lock_zeros(m: &std::sync::Mutex<ZeroState>) -> std::sync::MutexGuard<'_, ZeroState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Zeros ahead of the active segment's tail, written by the caller after releasing the log
/// lock ([`TopicLog::take_zero_write`]).
///
/// Writing them inside the append made that append's lock hold a megabyte of fresh page-cache
/// pages long, during which every publisher and consumer of the topic waited. On a virtual
/// machine whose free memory the host takes back, first touches of fresh pages are host
/// faults: such holds took 2.5-25 ms there against well under 250 µs for the appends
/// between them (docs/benchmarks.md, notes). Nothing depends on the zeros but the speed of
/// later fdatasyncs: a write cancelled, failed or cut short leaves the appends that reach its
/// range writing past the end of the file, as they would without zeros. A failed write is not
/// reported: the appends that follow write the same file and fail closed on their own
/// error.
pub struct ZeroWrite {
    file: Arc<dyn FsFile>,
    fault: Fault,
    range: ZeroRange,
    state: Arc<std::sync::Mutex<ZeroState>>,
}

impl ZeroWrite {
    /// Writes the zeros unless an append or a seal cancelled them meanwhile; report it with
    /// [`TopicLog::zeros_written`].
    pub fn run(&self) {
        let mut st = lock_zeros(&self.state);
        if st.pending != Some(self.range) || self.fault.check().is_err() {
            return;
        }
        let len = (self.range.end - self.range.start) as usize;
        let _ = self
            .file
            .write_at(&[std::io::IoSlice::new(&ZEROS[..len])], self.range.start);
        st.pending = None;
        st.done = Some(self.range);
    }
}

/// The index of a segment an append just sealed, encoded under the log lock and written to
/// its `.rqidx` by the caller after releasing it ([`TopicLog::take_index_writes`]).
///
/// The seal itself (zeros cut, segment fsynced, next segment created) is done by then, so
/// nothing acknowledged depends on this write: a crash before it leaves a sealed segment
/// without an index, which the next open scans and indexes. Writing it under the lock held
/// every publisher and reader of the topic for the index's encode, write and fsync (about
/// 5 MiB for a full 100 MB segment of 1 KiB messages: 4 to 14 ms on a loaded machine).
pub struct IndexWrite {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    base: u64,
    bytes: Arc<Vec<u8>>,
}

impl IndexWrite {
    /// The sealed segment's base log index.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Writes the index atomically (temp file, fsync, rename, directory fsync); report the
    /// result with [`TopicLog::index_written`].
    pub fn run(&self) -> Result<(), StorageError> {
        meta::atomic_write(self.fs.as_ref(), &self.path, &self.bytes)
    }
}

fn segment_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("segment-{base:020}.{ext}"))
}

impl TopicLog {
    fn create_segment(&mut self) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, self.next_index, "rqlog");
        let file = self
            .fs
            .open(&path, true)
            .map_err(io_err("create segment", &path))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(io_err("fsync directory", &self.dir))?;
        self.segments.push(Segment {
            base: self.next_index,
            path,
            file: Stored::Local(file),
            len: 0,
            zeroed: 0,
            last_log_index: None,
            last_position: None,
            summary: None,
            unwritten_index: None,
        });
        Ok(())
    }

    /// Seals the active segment (full fsync + index) and starts a new one; the sealed
    /// segment's entries leave memory (its summary stays, pages come back on demand). With
    /// `defer` the index is left for the caller to write ([`IndexWrite`]).
    fn rotate(&mut self, defer: bool) -> Result<(), StorageError> {
        self.write_unwritten()?;
        self.settle_zeros();
        let Some(active) = self.segments.last_mut() else {
            return self.create_segment();
        };
        // A sealed segment is exactly its records (its index records that length).
        active
            .cut_zeros()
            .map_err(io_err("truncate zeros", &active.path))?;
        active
            .local()
            .and_then(|f| f.sync_all())
            .map_err(io_err("fsync", &active.path))?;
        let (base, len, last_log_index) = (active.base, active.len, active.last_log_index);
        let (bytes, summary) = index::encode(
            base,
            len,
            last_log_index.unwrap_or(0),
            self.active.make_contiguous(),
        );
        let index_path = segment_path(&self.dir, base, "rqidx");
        if !defer {
            meta::atomic_write(self.fs.as_ref(), &index_path, &bytes)?;
        }
        self.mark_durable(self.next_position - 1, self.appended_bytes);
        self.create_segment()?;
        // Only now is it sealed: until the new segment exists it stays the active one.
        let n = self.segments.len();
        self.segments[n - 2].summary = Some(summary);
        if defer {
            let bytes = Arc::new(bytes);
            self.segments[n - 2].unwritten_index = Some(bytes.clone());
            self.index_writes.push(IndexWrite {
                fs: self.fs.clone(),
                path: index_path,
                base,
                bytes,
            });
        }
        // Free the buffer too: an idle topic must not keep its last full segment's capacity.
        self.active = VecDeque::new();
        Ok(())
    }

    /// Whether appending records totalling `bytes` would seal the active segment (an fsync
    /// and an index write) or create the first one, rather than only write to the page cache.
    pub fn append_needs_io(&self, bytes: u64) -> bool {
        self.segments
            .last()
            .is_none_or(|s| s.len > 0 && s.len + bytes > self.max_segment_bytes)
    }

    /// The active segment and how far the log reaches now, to fdatasync outside the lock.
    /// Unwritten records are written first; if that fails, storage is isolated and the
    /// handle's sync fails, so it never reports them durable.
    pub fn sync_handle(&mut self) -> Option<SyncHandle> {
        let _ = self.write_unwritten();
        let s = self.segments.last()?;
        Some(SyncHandle {
            file: s.local().ok()?.clone(),
            path: s.path.clone(),
            fault: self.fault.clone(),
            covers: Synced {
                through: self.next_position - 1,
                appended_bytes: self.appended_bytes,
            },
        })
    }

    /// Record bytes per sync, a moving average over the last few syncs (about eight).
    pub fn sync_group_bytes(&self) -> u64 {
        self.sync_group_bytes
    }

    /// Records what a completed [`SyncHandle::sync`] made durable.
    pub fn mark_synced(&mut self, synced: Synced) {
        if let Some(group) = synced.appended_bytes.checked_sub(self.durable_bytes)
            && group > 0
        {
            self.sync_group_bytes = (self.sync_group_bytes * 7 + group) / 8;
        }
        self.mark_durable(synced.through, synced.appended_bytes);
    }

    /// Everything through `position` (`appended_bytes` of records) is on stable storage.
    fn mark_durable(&mut self, position: u64, appended_bytes: u64) {
        self.durable_position = self.durable_position.max(position);
        self.durable_bytes = self.durable_bytes.max(appended_bytes);
    }

    /// fdatasync of the active segment; everything appended so far becomes durable.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.fault.check()?;
        let Some(handle) = self.sync_handle() else {
            return Ok(());
        };
        let synced = handle.sync()?;
        self.mark_synced(synced);
        Ok(())
    }

    /// Metadata of the message at `position`, if stored. A sealed segment's entry may need a
    /// page read from its index; if that read fails storage is isolated (the fault trips) and
    /// the answer is `None`.
    pub fn entry(&self, position: u64) -> Option<Entry> {
        match self.active.front() {
            Some(front) if position >= front.position => {
                find(self.active.len(), |i| self.active[i], position)
            }
            _ => self.sealed_entry(position),
        }
    }

    /// The body of `e` if it is among the latest appended ([`RECENT_BODY_BYTES`]): no read,
    /// no checksum needed (the bytes are the ones appended).
    pub fn recent_body(&self, e: &Entry) -> Option<bytes::Bytes> {
        self.recent.get(e)
    }

    /// The local file to read a body from without holding the log lock (`None` when the
    /// segment is gone or only in the bucket: see [`TopicLog::body_location`]).
    pub fn body_source(&self, e: &Entry) -> Option<Arc<dyn FsFile>> {
        match self.body_location(e)? {
            BodyLocation::Local(f) => Some(f),
            BodyLocation::Remote(..) => None,
        }
    }

    /// Where to read the body of `e` from without holding the log lock: its local file, or
    /// its segment's object when the segment is remote-only. `None`: the segment is gone.
    pub fn body_location(&self, e: &Entry) -> Option<BodyLocation> {
        let seg = self.segment(e.segment)?;
        Some(match &seg.file {
            Stored::Local(f) => BodyLocation::Local(f.clone()),
            Stored::Remote(r) => BodyLocation::Remote(seg.base, r.clone()),
        })
    }

    fn segment(&self, base: u64) -> Option<&Segment> {
        let i = self
            .segments
            .partition_point(|s| s.base <= base)
            .checked_sub(1)?;
        self.segments.get(i).filter(|s| s.base == base)
    }

    /// Reads the body of `e`, checked against its CRC-32C (see [`read_body_from`]); a body
    /// not yet written comes from memory.
    pub fn read_body(&self, e: &Entry) -> Result<Vec<u8>, StorageError> {
        if let Some(body) = self.unwritten_body(e) {
            return Ok(body.to_vec());
        }
        let file = self.body_source(e).ok_or_else(|| StorageError::Corrupt {
            file: self.dir.clone(),
            offset: e.body_offset,
            detail: format!("segment {} of position {} is gone", e.segment, e.position),
        })?;
        read_body_from(file.as_ref(), e).map_err(io_err("read", &self.dir))
    }

    /// Quarantines the message of `e`, whose body failed its CRC-32C when read for delivery
    /// (the audit record is durable when this returns; an error is a failed write). For a
    /// remote-only segment the finding names its object (`bucket:<key>`) as the file.
    pub fn quarantine_body(&self, e: &Entry) -> Result<(), StorageError> {
        let remote = self.segment(e.segment).and_then(|s| match &s.file {
            Stored::Remote(r) => Some(r.key.clone()),
            Stored::Local(_) => None,
        });
        let (file, action) = match remote {
            Some(key) => (
                PathBuf::from(format!("bucket:{key}")),
                "body read from the bucket failed its CRC-32C, or the object is short or \
                 missing: never delivered, finished on the channel that read it",
            ),
            None => (
                segment_path(&self.dir, e.segment, "rqlog"),
                "body failed its CRC-32C on read: never delivered, finished on the channel that read it",
            ),
        };
        let end = e.body_offset + u64::from(e.body_len);
        self.damage.report(Finding {
            positions: vec![e.position],
            ids: vec![e.id],
            ..self.damage.finding(
                DamageKind::MessageBody,
                &file,
                (e.body_offset, end),
                Detector::Read,
                action,
            )
        })
    }

    /// First stored position (or the next position when empty).
    pub fn first_position(&self) -> u64 {
        self.first_sealed()
            .map(|s| s.first_position)
            .or_else(|| self.active.front().map(|e| e.position))
            .unwrap_or(self.next_position)
    }

    /// Next position to be assigned.
    pub fn next_position(&self) -> u64 {
        self.next_position
    }

    /// Raises the next position (e.g. above positions channels reference after a lost tail).
    pub fn ensure_next_position(&mut self, p: u64) {
        if p > self.next_position {
            self.next_position = p;
            self.durable_position = self.durable_position.max(p - 1);
        }
    }

    /// Highest position known to be on stable storage.
    pub fn durable_position(&self) -> u64 {
        self.durable_position
    }

    /// Appended-but-unsynced messages and record bytes.
    pub fn unsynced(&self) -> (u64, u64) {
        (
            (self.next_position - 1).saturating_sub(self.durable_position),
            self.appended_bytes - self.durable_bytes,
        )
    }

    /// Base log index of the oldest segment (local or remote-only): every segment of a
    /// lower base was deleted by GC or protective eviction.
    pub fn first_base(&self) -> u64 {
        self.segments.first().map_or(self.next_index, |s| s.base)
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Bytes of records over all segments, local or remote-only (zeros written ahead of the
    /// tail excluded).
    pub fn segment_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// Bytes of records in local segment files (remote-only segments excluded).
    pub fn local_segment_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter(|s| !s.is_remote())
            .map(|s| s.len)
            .sum()
    }

    /// The sealed segments whose `.rqlog` is still local, oldest first, with the publish time
    /// of their newest message: what local retention may evict (if uploaded).
    pub fn local_sealed(&self) -> Vec<LocalSealed> {
        let n = self.segments.len().saturating_sub(1);
        self.segments[..n]
            .iter()
            .filter(|s| !s.is_remote() && s.index_on_disk())
            .filter_map(|s| {
                Some(LocalSealed {
                    base: s.base,
                    bytes: s.len,
                    newest_timestamp_ns: s.summary.as_ref()?.last_timestamp_ns,
                })
            })
            .collect()
    }

    /// Removes the local `.rqlog` of the sealed segment `base`, which is read from `remote`
    /// from now on (its `.rqidx` stays). The caller must have recorded the segment as
    /// evicted in the topic's tiered record first (durably): a crash after that record and
    /// before this finishes is finished by the next open. The active segment, and a segment
    /// not found, are left alone (`Ok(false)`).
    pub fn evict_local(&mut self, base: u64, remote: RemoteSegment) -> Result<bool, StorageError> {
        self.fault.check()?;
        let n = self.segments.len().saturating_sub(1);
        let Some(seg) = self.segments[..n].iter_mut().find(|s| s.base == base) else {
            return Ok(false);
        };
        if seg.is_remote() {
            return Ok(false);
        }
        if remote.size != seg.len {
            return Err(StorageError::Corrupt {
                file: seg.path.clone(),
                offset: 0,
                detail: format!(
                    "the uploaded object {} is {} bytes but the sealed segment is {}: not evicted",
                    remote.key, remote.size, seg.len
                ),
            });
        }
        seg.file = Stored::Remote(Arc::new(remote));
        let path = seg.path.clone();
        let r = (|| {
            crash_failpoint("evict_before_segment_remove");
            self.fs
                .remove_file(&path)
                .map_err(io_err("remove", &path))?;
            self.fs
                .sync_dir(&self.dir)
                .map_err(io_err("fsync directory", &self.dir))
        })();
        self.fault.guard(r)?;
        Ok(true)
    }

    /// Deletes whole sealed segments whose every position is below `floor` (a prefix only;
    /// the active segment is never deleted). The caller persists the manifest first.
    pub fn gc(&mut self, floor: u64) -> Result<usize, StorageError> {
        self.fault.check()?;
        let mut removed = 0;
        // A segment whose index is still being written waits for the next round: the write
        // would otherwise leave an index behind the deleted segment.
        while self.segments.len() > 1
            && self.segments[0].index_on_disk()
            && self.segments[0].last_position.is_none_or(|p| p < floor)
        {
            let seg = self.segments.remove(0);
            self.cache.forget(self.log_id, seg.base, seg.base);
            let r = self.delete_segment(&seg);
            self.fault.guard(r)?;
            removed += 1;
        }
        Ok(removed)
    }

    fn delete_segment(&self, seg: &Segment) -> Result<(), StorageError> {
        crash_failpoint("gc_before_segment_delete");
        let idx = segment_path(&self.dir, seg.base, "rqidx");
        if self.fs.exists(&idx) {
            self.fs.remove_file(&idx).map_err(io_err("remove", &idx))?;
        }
        if !seg.is_remote() {
            self.fs
                .remove_file(&seg.path)
                .map_err(io_err("remove", &seg.path))?;
        }
        crash_failpoint("gc_after_segment_delete_before_dir_fsync");
        self.fs
            .sync_dir(&self.dir)
            .map_err(io_err("fsync directory", &self.dir))
    }

    /// The sealed (immutable) segments with a local file, pinned for a scrub (a remote-only
    /// segment's bodies are checked when read through).
    pub fn sealed_segments(&self) -> Vec<scrub::SealedSegment> {
        let n = self.segments.len().saturating_sub(1);
        self.segments[..n]
            .iter()
            .enumerate()
            .filter(|(_, s)| s.index_on_disk())
            .filter_map(|(i, s)| Some((i, s, s.local().ok()?.clone())))
            .map(|(i, s, file)| scrub::SealedSegment {
                path: s.path.clone(),
                file,
                len: s.len,
                base: s.base,
                prev_position: self.segments[..i]
                    .iter()
                    .filter_map(|p| p.last_position)
                    .next_back(),
                index: s.summary.clone().map(|summary| scrub::SealedIndex {
                    fs: self.fs.clone(),
                    path: segment_path(&self.dir, s.base, "rqidx"),
                    segment_base: s.base,
                    summary,
                }),
            })
            .collect()
    }

    /// The sealed segments' files, oldest first (the active segment is never listed, nor a
    /// sealed one without its index or whose index is still being written, nor a
    /// remote-only one).
    pub fn sealed_files(&self) -> Vec<SealedFiles> {
        let n = self.segments.len().saturating_sub(1);
        self.segments[..n]
            .iter()
            .filter(|s| s.summary.is_some() && s.index_on_disk() && !s.is_remote())
            .map(|s| SealedFiles {
                base: s.base,
                log_path: s.path.clone(),
                log_len: s.len,
                index_path: segment_path(&self.dir, s.base, "rqidx"),
            })
            .collect()
    }

    /// Adopts an index the scrub rewrote for the sealed segment `base` (its pages are read
    /// again from the new file).
    pub fn adopt_index(&mut self, rebuilt: scrub::RebuiltIndex) {
        let scrub::RebuiltIndex { base, summary } = rebuilt;
        if let Some(i) = self.segments[..self.segments.len().saturating_sub(1)]
            .iter()
            .position(|s| s.base == base)
        {
            self.cache.forget(self.log_id, base, base);
            self.segments[i].summary = Some(summary);
        }
    }

    /// Where this log reports damage.
    pub fn damage_sink(&self) -> &DamageSink {
        &self.damage
    }

    /// Forces the current active segment to be sealed (used by tests and spill).
    pub fn seal_active(&mut self) -> Result<(), StorageError> {
        self.fault.check()?;
        if self.segments.last().is_some_and(|s| s.len > 0) {
            let r = self.rotate(false);
            self.fault.guard(r)?;
        }
        Ok(())
    }

    /// From now on an append that seals a segment leaves writing its index to the caller,
    /// who takes it with [`TopicLog::take_index_writes`] after releasing the log lock and
    /// reports it with [`TopicLog::index_written`] (the engine does; a log that is never told
    /// this writes each index inside the append, as before).
    pub fn defer_index_writes(&mut self) {
        self.defer_index = true;
    }

    /// From now on zeros ahead of the active segment's tail are not written inside an append:
    /// an append that brings the tail near their end ([`ZERO_AHEAD_MARGIN`]) asks for the next
    /// step, which the caller takes with [`TopicLog::take_zero_write`] after releasing the log
    /// lock, runs, and reports with [`TopicLog::zeros_written`] (the engine does; a log never
    /// told this writes them inside the append, as before).
    pub fn defer_zero_writes(&mut self) {
        self.zeros.on = true;
    }

    /// From now on an append that fits beside the records already waiting (up to
    /// [`UNWRITTEN_MAX_BYTES`]) leaves its records in memory instead of writing them: they
    /// reach the file, in one write with the others, when [`TopicLog::write_unwritten`] is
    /// called, when an append would pass the bound, and before anything that needs them on
    /// file (an fdatasync's handle, a seal, a read past them, closing the log). Reads of their
    /// bodies are served from memory meanwhile. Only for zeros written by the caller
    /// ([`TopicLog::defer_zero_writes`]); the engine turns it on for the relaxed ack modes,
    /// whose promise (docs/durability.md) already leaves the unsynced tail to a crash.
    pub fn defer_appends(&mut self) {
        self.unwritten.on = true;
    }

    /// Whether appended records are waiting to be written ([`TopicLog::defer_appends`]).
    pub fn has_unwritten(&self) -> bool {
        !self.unwritten.buf.is_empty()
    }

    /// Whether the body of `e` is among the records not yet written: write them
    /// ([`TopicLog::write_unwritten`]) before reading it from the file.
    pub fn is_unwritten(&self, e: &Entry) -> bool {
        self.unwritten_body(e).is_some()
    }

    /// The active segment and the offset in it where the unwritten records start (`None`:
    /// nothing waits). They end at its length, since a seal writes them first; if that ever
    /// failed to hold, writing them anywhere would be wrong, so it is an error.
    fn unwritten_from(&self) -> Result<Option<(&Segment, u64)>, StorageError> {
        let len = self.unwritten.buf.len() as u64;
        if len == 0 {
            return Ok(None);
        }
        self.segments
            .last()
            .and_then(|seg| Some((seg, seg.len.checked_sub(len)?)))
            .map(Some)
            .ok_or_else(|| {
                StorageError::Isolated("unwritten records outlived their segment".into())
            })
    }

    /// The body of `e` if it is among the unwritten records.
    fn unwritten_body(&self, e: &Entry) -> Option<&[u8]> {
        let (seg, from) = self.unwritten_from().ok()??;
        if e.segment != seg.base {
            return None;
        }
        let start = usize::try_from(e.body_offset.checked_sub(from)?).ok()?;
        self.unwritten.buf.get(start..start + e.body_len as usize)
    }

    /// Writes the records appends left in memory ([`TopicLog::defer_appends`]) to the
    /// active segment in one positional write. A failure isolates storage; the records stay
    /// in memory (their bodies are still served from there) and are never written.
    pub fn write_unwritten(&mut self) -> Result<(), StorageError> {
        if self.unwritten.buf.is_empty() {
            return Ok(());
        }
        self.fault.check()?;
        let r = self.unwritten_from().and_then(|at| {
            let Some((seg, from)) = at else {
                return Ok(());
            };
            seg.local()
                .and_then(|f| f.write_at(&[IoSlice::new(&self.unwritten.buf)], from))
                .map_err(io_err("append", &seg.path))
        });
        self.fault.guard(r)?;
        self.unwritten.buf = Vec::new();
        Ok(())
    }

    /// The zero write the appends since the last call asked for, to run outside the lock.
    pub fn take_zero_write(&mut self) -> Option<ZeroWrite> {
        self.zeros.asked.take()
    }

    /// Records what a zero write wrote (after [`ZeroWrite::run`]); nothing if an append or a
    /// seal settled it already.
    pub fn zeros_written(&mut self, z: &ZeroWrite) {
        if self.zeros.out == Some(z.range) {
            self.settle_zeros();
        }
    }

    /// Ends the zero write handed out, if any, before anything touches the file past the
    /// tail: one not begun is cancelled, one under way is waited for, and what was written is
    /// recorded in the active segment's `zeroed`.
    fn settle_zeros(&mut self) {
        if self.zeros.out.is_none() {
            return;
        }
        self.zeros.asked = None;
        let done = {
            let mut st = lock_zeros(&self.zeros.state);
            st.pending = None;
            st.done.take()
        };
        self.zeros.out = None;
        if let (Some(done), Some(seg)) = (done, self.segments.last_mut())
            && seg.base == done.base
            && done.start <= seg.zeroed
        {
            seg.zeroed = seg.zeroed.max(done.end);
        }
    }

    /// Whether this log writes zeros ahead of its tail now, inside appends or deferred: on a
    /// disk file system, while syncs cover less than [`ZERO_AHEAD_MAX_GROUP`] on average.
    pub(super) fn zeros_wanted(&self) -> bool {
        self.sync_group_bytes < ZERO_AHEAD_MAX_GROUP && self.fs.zero_fill_ahead()
    }

    /// After an append (deferred zeros only): asks for the next [`ZERO_AHEAD_BYTES`] of zeros
    /// once the tail is within [`ZERO_AHEAD_MARGIN`] of the zeroed end (or has reached it,
    /// while the segment holds less than that margin of records).
    fn ask_for_zeros(&mut self) {
        if !self.zeros.on || self.zeros.out.is_some() || !self.zeros_wanted() {
            return;
        }
        let Some(seg) = self.segments.last() else {
            return;
        };
        let Ok(file) = seg.local() else {
            return;
        };
        // A segment's first records keep at most one step of zeros ahead, as inline zeros
        // did, so a topic with little in it holds no more on disk; past that the zeros stay
        // the margin ahead.
        let margin = if seg.len < ZERO_AHEAD_MARGIN {
            0
        } else {
            ZERO_AHEAD_MARGIN
        };
        if seg.len + margin < seg.zeroed {
            return;
        }
        let start = seg.zeroed.max(seg.len);
        let end = self.max_segment_bytes.min(start + ZERO_AHEAD_BYTES as u64);
        if end <= start {
            return;
        }
        let range = ZeroRange {
            base: seg.base,
            start,
            end,
        };
        lock_zeros(&self.zeros.state).pending = Some(range);
        self.zeros.asked = Some(ZeroWrite {
            file: file.clone(),
            fault: self.fault.clone(),
            range,
            state: self.zeros.state.clone(),
        });
        self.zeros.out = Some(range);
    }

    /// The indexes appends sealed since the last call, to write outside the lock.
    pub fn take_index_writes(&mut self) -> Vec<IndexWrite> {
        std::mem::take(&mut self.index_writes)
    }

    /// Whether a sealed segment's index is still being written.
    pub fn index_writes_pending(&self) -> bool {
        self.segments.iter().any(|s| !s.index_on_disk())
    }

    /// Records how writing the index of segment `base` went: written, its pages are read
    /// from the file from now on; failed, storage is isolated (as a failed seal is), unless
    /// the topic's directory is gone (the topic was deleted meanwhile).
    pub fn index_written(&mut self, base: u64, result: Result<(), StorageError>) {
        let Some(seg) = self.segments.iter_mut().find(|s| s.base == base) else {
            return;
        };
        match result {
            Ok(()) => seg.unwritten_index = None,
            Err(_) if !self.fs.exists(&self.dir) => {}
            Err(e) => self.fault.trip(e.to_string()),
        }
    }
}

impl Drop for TopicLog {
    fn drop(&mut self) {
        // A clean close leaves the active segment exactly its records, as older builds expect
        // (not synced here: that would also sync records nobody asked to; a crash before the
        // kernel writes it leaves zeros, which the next open cuts). Never a write once storage
        // is isolated. Unwritten records are written first (a clean close loses none).
        let _ = self.write_unwritten();
        self.settle_zeros();
        if self.fault.check().is_ok()
            && let Some(seg) = self.segments.last_mut()
        {
            let _ = seg.cut_zeros();
        }
        self.cache.forget(self.log_id, 0, u64::MAX);
    }
}

/// The entry at `position` among `len` entries in position order, `get(i)` being the i-th:
/// usually at `position - first` (unless positions were skipped), else a binary search.
fn find(len: usize, get: impl Fn(usize) -> Entry, position: u64) -> Option<Entry> {
    let first = (len > 0).then(|| get(0).position)?;
    let guess = usize::try_from(position.checked_sub(first)?).ok()?;
    if guess < len && get(guess).position == position {
        return Some(get(guess));
    }
    let (mut lo, mut hi) = (0, len.min(guess.saturating_add(1)));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let e = get(mid);
        match e.position.cmp(&position) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(e),
        }
    }
    None
}

/// Reads one body given its source file and checks it against its CRC-32C: a body that
/// fails is never returned. A mismatch is an error of kind `InvalidData` (see
/// [`is_damaged_body`]); any other error is a failed read.
pub fn read_body_from(file: &dyn FsFile, e: &Entry) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; e.body_len as usize];
    file.read_exact_at(&mut buf, e.body_offset)?;
    if !body_matches(e, &buf) {
        return Err(damaged(e));
    }
    Ok(buf)
}

/// Whether `body` is the body of `e`: its length and CRC-32C (Castagnoli) are the entry's.
/// Every read for delivery checks this, local or from the bucket.
pub fn body_matches(e: &Entry, body: &[u8]) -> bool {
    body.len() == e.body_len as usize && crc32c::crc32c(body) == e.body_crc
}

/// Reads the bodies of `entries`, records of one segment file in file order, with one read
/// of the span from the first body to the end of the last (the record headers between them
/// are read and skipped): a consumer draining a backlog costs one system call per run of
/// records instead of one per message. Each body is checked against its CRC-32C like
/// [`read_body_from`]; the bodies share the one buffer. The outer error is a failed read; an
/// inner one (kind `InvalidData`) a damaged body, which is never returned.
pub fn read_bodies_from(
    file: &dyn FsFile,
    entries: &[Entry],
) -> std::io::Result<Vec<std::io::Result<bytes::Bytes>>> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Ok(Vec::new());
    };
    let start = first.body_offset;
    let end = last.body_offset + u64::from(last.body_len);
    let in_order = entries
        .windows(2)
        .all(|w| w[1].body_offset >= w[0].body_offset + u64::from(w[0].body_len));
    if !in_order || end < start {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a run of bodies must be in file order and must not overlap",
        ));
    }
    let len = usize::try_from(end - start)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, start)?;
    let buf = bytes::Bytes::from(buf);
    Ok(entries
        .iter()
        .map(|e| {
            let at = (e.body_offset - start) as usize;
            let body = buf.slice(at..at + e.body_len as usize);
            if body_matches(e, &body) {
                Ok(body)
            } else {
                Err(damaged(e))
            }
        })
        .collect())
}

fn damaged(e: &Entry) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "body of position {} at offset {} fails its CRC-32C",
            e.position, e.body_offset
        ),
    )
}

/// Whether an error from [`read_body_from`] means the stored body is damaged (quarantine it)
/// rather than that the read failed (isolate storage).
pub fn is_damaged_body(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidData
}

/// The active segment of a log as it stood when taken, to fdatasync without holding the log:
/// earlier segments were synced when sealed, so syncing it makes the whole log durable up to
/// that point.
pub struct SyncHandle {
    file: Arc<dyn FsFile>,
    path: PathBuf,
    fault: Fault,
    covers: Synced,
}

/// What a completed fdatasync covered; give it back to [`TopicLog::mark_synced`].
#[derive(Debug, Clone, Copy)]
pub struct Synced {
    /// Last position appended when the handle was taken.
    pub through: u64,
    appended_bytes: u64,
}

impl SyncHandle {
    /// fdatasync of the segment; a failure isolates storage.
    pub fn sync(self) -> Result<Synced, StorageError> {
        self.fault.check()?;
        let r = self
            .file
            .sync_data()
            .map_err(io_err("fdatasync", &self.path));
        self.fault.guard(r)?;
        crash_failpoint("publish_after_fsync_before_reply");
        Ok(self.covers)
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;

    fn entry(position: u64, id: u64, len: usize) -> Entry {
        Entry {
            position,
            id,
            timestamp_ns: 0,
            available_at_ms: 0,
            body_offset: 0,
            body_len: len as u32,
            body_crc: 0,
            segment: 1,
        }
    }

    #[test]
    fn recent_bodies_are_kept_within_their_byte_bound_and_matched_exactly() {
        let mut r = Recent::default();
        let body = vec![7u8; 1024];
        let n = RECENT_BODY_BYTES / 1024 + 10;
        for p in 1..=n as u64 {
            r.push(p, 100 + p, &body);
        }
        assert!(r.bytes <= RECENT_BODY_BYTES);
        assert_eq!(r.bytes, r.bodies.len() * 1024);
        // The oldest ten fell out; the newest is there with its bytes.
        assert!(r.get(&entry(10, 110, 1024)).is_none());
        assert_eq!(
            r.get(&entry(n as u64, 100 + n as u64, 1024)).as_deref(),
            Some(&body[..])
        );
        // A different id or length at a kept position is not this message.
        assert!(r.get(&entry(n as u64, 1, 1024)).is_none());
        assert!(r.get(&entry(n as u64, 100 + n as u64, 1000)).is_none());
        assert!(r.get(&entry(n as u64 + 1, 101 + n as u64, 1024)).is_none());
        // A gap in positions, or a body over the per-body bound, starts over.
        r.push(n as u64 + 5, 1, b"after a gap");
        assert_eq!(r.bodies.len(), 1);
        r.push(n as u64 + 6, 2, &vec![0u8; RECENT_BODY_MAX + 1]);
        assert_eq!((r.bodies.len(), r.bytes), (0, 0));
    }
}
