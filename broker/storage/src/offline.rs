//! Offline tools over the data directory of a stopped broker (docs/operations.md):
//! [`verify`] reads every file and reports what it finds without writing anything;
//! [`repair`] runs the recovery a start would run (quarantining damage, rebuilding indexes,
//! checkpointing damaged channels, rebuilding manifests), then scrubs every sealed segment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::fs::Fs;
use crate::log::index;
use crate::log::scan::walk;
use crate::meta::{self, BrokerMeta, Compatibility, FormatFile, unhex};
use crate::quarantine::{self, Detector, QuarantineRecord};
use crate::store::{Store, StoreOptions};
use crate::wal;
use crate::{StorageError, io_err};

/// What verify found in one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Every check passed.
    Ok,
    /// A partial record or frame at the end of an active file: a start cuts it off.
    TornTail,
    /// An index that a start will not trust (missing, stale or damaged header): rebuilt by a
    /// scan at the next start.
    Rebuilt,
    /// Damage: a start or `storage repair` quarantines it.
    Damaged,
    /// Damage already on record in `audit/` (quarantined earlier); nothing more to do.
    Quarantined,
    /// A segment whose local file local retention evicted: only its object in the bucket holds
    /// its records (listed in [`VerifyReport::remote_segments`]; `--remote` checks them).
    Remote,
}

/// A remote-only segment: what its topic's tiered record says of its `.rqlog` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RemoteSegmentReport {
    /// The local `.rqlog` path it had, relative to the data directory.
    pub file: String,
    /// The topic.
    pub topic: String,
    /// Its base log index.
    pub base: u64,
    /// The bucket and key prefix of the record, and the object's key under that prefix.
    pub bucket: String,
    /// The key prefix (`None`: the bucket's root).
    pub prefix: Option<String>,
    /// The object's key.
    pub key: String,
    /// Its recorded size.
    pub size: u64,
    /// Its recorded CRC-32C.
    pub crc32c: u32,
}

/// One file's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct FileReport {
    /// Path relative to the data directory.
    pub file: String,
    /// `format`, `compatibility`, `broker_meta`, `manifest`, `segment`, `index`,
    /// `channel_wal`, `channel_checkpoint`.
    pub kind: &'static str,
    /// The verdict.
    pub status: FileStatus,
    /// What was checked or found.
    pub detail: String,
    /// Messages that would be lost (positions), for damaged segments.
    pub lost_positions: Vec<u64>,
}

/// The whole verify report.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Every file checked, in directory order.
    pub files: Vec<FileReport>,
    /// Files with [`FileStatus::Damaged`].
    pub damaged_files: usize,
    /// Quarantine records already on disk.
    pub quarantine_on_record: Vec<QuarantineRecord>,
    /// Remote-only segments: their local indexes are checked here, their objects only by a
    /// caller with the bucket (`storage verify --remote`).
    pub remote_segments: Vec<RemoteSegmentReport>,
}

struct Reporter<'a> {
    root: &'a Path,
    files: Vec<FileReport>,
    remote: Vec<RemoteSegmentReport>,
    /// `(file, offset_start)` of every quarantine record on disk.
    known: std::collections::HashSet<(String, u64)>,
}

impl Reporter<'_> {
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn add(&mut self, path: &Path, kind: &'static str, status: FileStatus, detail: String) {
        self.add_lost(path, kind, status, detail, Vec::new());
    }

    fn add_lost(
        &mut self,
        path: &Path,
        kind: &'static str,
        status: FileStatus,
        detail: String,
        lost_positions: Vec<u64>,
    ) {
        self.files.push(FileReport {
            file: self.relative(path),
            kind,
            status,
            detail,
            lost_positions,
        });
    }
}

fn check_meta<T: serde::de::DeserializeOwned>(
    fs: &dyn Fs,
    r: &mut Reporter<'_>,
    path: &Path,
    kind: &'static str,
) -> Result<(), StorageError> {
    match meta::read_meta::<T>(fs, path)? {
        meta::MetaRead::Missing => {}
        meta::MetaRead::Intact(_) => r.add(path, kind, FileStatus::Ok, "checksum matches".into()),
        meta::MetaRead::FromTemp(_, detail) => r.add(
            path,
            kind,
            FileStatus::Rebuilt,
            format!("{detail}; its whole temp sibling replaces it at the next start"),
        ),
        meta::MetaRead::Damaged(detail) => r.add(path, kind, FileStatus::Damaged, detail),
    }
    Ok(())
}

/// Reads every file of the data directory `root` and reports on each; writes nothing.
pub fn verify(fs: &dyn Fs, root: &Path) -> Result<VerifyReport, StorageError> {
    let on_record = quarantine::list(fs, root);
    let mut r = Reporter {
        root,
        files: Vec::new(),
        remote: Vec::new(),
        known: on_record
            .iter()
            .map(|q| (q.file.clone(), q.offset_start))
            .collect(),
    };
    check_meta::<FormatFile>(fs, &mut r, &root.join("FORMAT"), "format")?;
    let compatibility = root.join("COMPATIBILITY");
    check_meta::<Compatibility>(fs, &mut r, &compatibility, "compatibility")?;
    if !r.files.iter().any(|f| f.kind == "compatibility") && meta::holds_data(fs, root)? {
        r.add(
            &compatibility,
            "compatibility",
            FileStatus::Damaged,
            meta::compatibility_missing(&compatibility),
        );
    }
    check_meta::<BrokerMeta>(fs, &mut r, &root.join("broker.meta"), "broker_meta")?;
    let topics = root.join("topics");
    let mut names = if fs.exists(&topics) {
        fs.list(&topics).map_err(io_err("list", &topics))?
    } else {
        Vec::new()
    };
    names.sort();
    for name in names {
        verify_topic(fs, &mut r, &topics.join(&name))?;
    }
    let damaged_files = r
        .files
        .iter()
        .filter(|f| f.status == FileStatus::Damaged)
        .count();
    Ok(VerifyReport {
        files: r.files,
        damaged_files,
        quarantine_on_record: on_record,
        remote_segments: r.remote,
    })
}

/// Verifies one topic directory: its manifest, its segments (and their indexes), its channels.
fn verify_topic(fs: &dyn Fs, r: &mut Reporter<'_>, dir: &Path) -> Result<(), StorageError> {
    let mpath = dir.join("manifest");
    match meta::read_manifest(fs, &mpath) {
        Ok(_) => r.add(
            &mpath,
            "manifest",
            FileStatus::Ok,
            "checksum matches".into(),
        ),
        Err(e) => r.add(&mpath, "manifest", FileStatus::Damaged, e.to_string()),
    }
    let record = match crate::tiered::read(fs, dir) {
        Ok(record) => record,
        Err(e) => {
            r.add(
                &crate::tiered::path(dir),
                "tiered_record",
                FileStatus::Damaged,
                format!("{e}; it names no evicted segment, so theirs count as lost"),
            );
            None
        }
    };
    verify_segments(fs, r, &dir.join("segments"), record.as_ref())?;
    verify_channels(fs, r, &dir.join("channels"))
}

/// A segment present only as its index: remote-only when the tiered record calls it evicted
/// (its index must then be whole: a start does not rebuild it from the bucket), lost
/// otherwise, as a start decides (docs/tiering.md, "Local retention and read-through").
fn verify_index_only(
    fs: &dyn Fs,
    r: &mut Reporter<'_>,
    sdir: &Path,
    base: u64,
    idx: &Path,
    record: Option<&crate::TieredRecord>,
) -> Result<(), StorageError> {
    let log = sdir.join(format!("segment-{base:020}.rqlog"));
    let remote = record.and_then(|rec| {
        let seg = rec.get(base).filter(|s| s.evicted)?;
        Some((rec, seg.log_object()?.clone()))
    });
    let Some((rec, object)) = remote else {
        r.add(
            &log,
            "segment",
            FileStatus::Damaged,
            "missing though it was never evicted to the bucket: its messages are lost (a \
             start reports them and removes the orphaned index)"
                .into(),
        );
        return Ok(());
    };
    let file = fs.open(idx, false).map_err(io_err("open", idx))?;
    match index::read_summary(file.as_ref(), base, object.size).map_err(io_err("read", idx))? {
        Some(summary) => r.add(
            idx,
            "index",
            FileStatus::Ok,
            format!(
                "of a remote-only segment: log indexes {base}..={}, every CRC matches",
                summary.last_log_index
            ),
        ),
        None => r.add(
            idx,
            "index",
            FileStatus::Damaged,
            "of a remote-only segment, damaged: a start refuses it (it is not rebuilt from \
             the bucket)"
                .into(),
        ),
    }
    r.add(
        &log,
        "segment",
        FileStatus::Remote,
        format!(
            "remote-only (evicted): {} bytes in the bucket as {}",
            object.size, object.key
        ),
    );
    r.remote.push(RemoteSegmentReport {
        file: r.relative(&log),
        topic: rec.topic.clone(),
        base,
        bucket: rec.bucket.clone(),
        prefix: rec.prefix.clone(),
        key: object.key,
        size: object.size,
        crc32c: object.crc32c,
    });
    Ok(())
}

/// Every segment of a topic in log order, each with its index.
fn verify_segments(
    fs: &dyn Fs,
    r: &mut Reporter<'_>,
    sdir: &Path,
    record: Option<&crate::TieredRecord>,
) -> Result<(), StorageError> {
    let mut segs: BTreeMap<u64, (Option<PathBuf>, Option<PathBuf>)> = BTreeMap::new();
    if fs.exists(sdir) {
        for n in fs.list(sdir).map_err(io_err("list", sdir))? {
            let Some((base, ext)) = n
                .strip_prefix("segment-")
                .and_then(|rest| rest.split_once('.'))
                .and_then(|(num, ext)| Some((num.parse::<u64>().ok()?, ext)))
            else {
                continue;
            };
            let e = segs.entry(base).or_default();
            match ext {
                "rqlog" => e.0 = Some(sdir.join(&n)),
                "rqidx" => e.1 = Some(sdir.join(&n)),
                _ => {}
            }
        }
    }
    let last = segs
        .iter()
        .filter(|(_, (l, _))| l.is_some())
        .map(|(b, _)| *b)
        .next_back();
    let mut prev = None;
    for (base, (log, idx)) in &segs {
        let Some(log) = log else {
            if let Some(idx) = idx {
                verify_index_only(fs, r, sdir, *base, idx, record)?;
            }
            continue;
        };
        let file = fs.open(log, false).map_err(io_err("open", log))?;
        let len = file.len().map_err(io_err("stat", log))?;
        let is_last = Some(*base) == last;
        let w = walk(file.as_ref(), log, *base, len, is_last, prev, &mut |_| {})?;
        let (status, detail, lost) = segment_verdict(r, log, &w, len);
        r.add_lost(log, "segment", status, detail, lost);
        if let Some(p) = w.entries.last().map(|e| e.position) {
            prev = Some(p);
        }
        if let Some(idx) = idx {
            let damaged: Vec<(u64, u64)> = w.damages.iter().map(|d| d.range).collect();
            verify_index(fs, r, idx, *base, len, &w.entries, &damaged)?;
        } else if !is_last {
            r.add(
                &log.with_extension("rqidx"),
                "index",
                FileStatus::Rebuilt,
                "missing: rebuilt by a scan at the next start".into(),
            );
        }
    }
    Ok(())
}

/// What verify says of one walked segment: its status, the detail, and the positions lost
/// to damage.
fn segment_verdict(
    r: &Reporter<'_>,
    log: &Path,
    w: &crate::log::scan::Walk,
    len: u64,
) -> (FileStatus, String, Vec<u64>) {
    let lost: Vec<u64> = w
        .damages
        .iter()
        .flat_map(|d| d.positions.iter().copied())
        .collect();
    let (status, detail) = if !w.damages.is_empty() {
        let ranges: Vec<String> = w
            .damages
            .iter()
            .map(|d| {
                format!(
                    "bytes {}..{}{}",
                    d.range.0,
                    d.range.1,
                    if d.recovered {
                        " (length field only: read whole)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        let file = r.relative(log);
        let known = w
            .damages
            .iter()
            .all(|d| r.known.contains(&(file.clone(), d.range.0)));
        (
            if known {
                FileStatus::Quarantined
            } else {
                FileStatus::Damaged
            },
            format!("{} whole records; damaged {}", w.records, ranges.join(", ")),
        )
    } else if w.end < len {
        let what = if w.zero_tail {
            "zeros written ahead of the tail"
        } else {
            "partial record"
        };
        (
            FileStatus::TornTail,
            format!(
                "{} whole records; {what} from offset {} to {len} (cut off at start)",
                w.records, w.end
            ),
        )
    } else {
        (
            FileStatus::Ok,
            format!("{} records, every CRC matches", w.records),
        )
    };
    (status, detail, lost)
}

/// Every channel's checkpoint and WAL.
fn verify_channels(fs: &dyn Fs, r: &mut Reporter<'_>, cdir: &Path) -> Result<(), StorageError> {
    if fs.exists(cdir) {
        let mut stems: Vec<String> = fs
            .list(cdir)
            .map_err(io_err("list", cdir))?
            .into_iter()
            .filter_map(|n| n.rsplit_once('.').map(|(s, _)| s.to_string()))
            .collect();
        stems.sort();
        stems.dedup();
        for stem in stems {
            let Some(name) = unhex(&stem) else { continue };
            let (w, c) = wal::paths(cdir, &name);
            if fs.exists(&c) {
                let (status, detail) = match wal::verify_checkpoint(fs, &c, &name) {
                    Ok(()) => (FileStatus::Ok, "CRC matches".to_string()),
                    Err(e) => (FileStatus::Damaged, e),
                };
                r.add(&c, "channel_checkpoint", status, detail);
            }
            if fs.exists(&w) {
                let data = fs.read(&w).map_err(io_err("read", &w))?;
                let v = wal::verify_frames(&data);
                let (status, detail) = if !v.bad.is_empty() {
                    let ranges: Vec<String> = v
                        .bad
                        .iter()
                        .map(|(a, b)| format!("bytes {a}..{b}"))
                        .collect();
                    (
                        FileStatus::Damaged,
                        format!("{} whole frames; damaged {}", v.frames, ranges.join(", ")),
                    )
                } else if v.end < data.len() {
                    (
                        FileStatus::TornTail,
                        format!("{} whole frames; partial frame at {}", v.frames, v.end),
                    )
                } else {
                    (
                        FileStatus::Ok,
                        format!("{} frames, every CRC matches", v.frames),
                    )
                };
                r.add(&w, "channel_wal", status, detail);
            }
        }
    }
    Ok(())
}

fn verify_index(
    fs: &dyn Fs,
    r: &mut Reporter<'_>,
    path: &Path,
    base: u64,
    segment_len: u64,
    entries: &[crate::log::Entry],
    damaged: &[(u64, u64)],
) -> Result<(), StorageError> {
    let file = fs.open(path, false).map_err(io_err("open", path))?;
    let Some(summary) =
        index::read_summary(file.as_ref(), base, segment_len).map_err(io_err("read", path))?
    else {
        r.add(
            path,
            "index",
            FileStatus::Rebuilt,
            "header or directory not usable (damaged, stale or an older version): rebuilt by a scan at the next start".into(),
        );
        return Ok(());
    };
    let mut read = Vec::with_capacity(summary.count as usize);
    for k in 0..summary.pages.len() {
        match index::read_page(file.as_ref(), &summary, base, k).map_err(io_err("read", path))? {
            Some(page) => read.extend(page),
            None => {
                r.add(
                    path,
                    "index",
                    FileStatus::Damaged,
                    format!(
                        "page {k} fails its CRC (offset {}): rebuilt from its segment when read",
                        summary.page_offset(k)
                    ),
                );
                return Ok(());
            }
        }
    }
    // Entries of damaged records are the index's to keep (their bodies fail their CRC-32C
    // when read); every other entry must be exactly what the segment says.
    let (in_damage, read): (Vec<_>, Vec<_>) = read.into_iter().partition(|e| {
        damaged
            .iter()
            .any(|&(a, b)| e.body_offset >= a && e.body_offset < b)
    });
    if read != entries {
        r.add(
            path,
            "index",
            FileStatus::Damaged,
            "entries differ from the segment's records".into(),
        );
    } else {
        r.add(
            path,
            "index",
            FileStatus::Ok,
            format!(
                "{} entries match the segment, {} point into damaged records",
                read.len(),
                in_damage.len()
            ),
        );
    }
    Ok(())
}

/// What repair did.
#[derive(Clone, Debug, Serialize)]
pub struct RepairReport {
    /// Topics opened.
    pub topics: usize,
    /// Sealed segments scrubbed.
    pub segments_scrubbed: usize,
    /// Indexes rewritten by the scrub.
    pub indexes_rebuilt: usize,
    /// Quarantine records written by this repair.
    pub new_findings: Vec<QuarantineRecord>,
}

/// Opens `root` as a start would (its own node id and feature level, damage attributed to
/// [`Detector::Repair`]), scrubs every sealed segment, and closes it cleanly.
pub fn repair(fs: Arc<dyn Fs>, root: &Path) -> Result<RepairReport, StorageError> {
    let bm: BrokerMeta = match meta::read_meta(fs.as_ref(), &root.join("broker.meta"))? {
        meta::MetaRead::Intact(bm) | meta::MetaRead::FromTemp(bm, _) => bm,
        meta::MetaRead::Damaged(detail) => {
            return Err(StorageError::Incompatible(meta::broker_meta_damaged(
                &root.join("broker.meta"),
                &detail,
            )));
        }
        meta::MetaRead::Missing => {
            return Err(StorageError::Incompatible(meta::broker_meta_damaged(
                &root.join("broker.meta"),
                "missing",
            )));
        }
    };
    let level =
        meta::read_compatibility(fs.as_ref(), root)?.map_or(1, |c| c.active_writer_feature_level);
    let opts = StoreOptions {
        node_id: bm.node_id,
        feature_level: level,
        max_segment_bytes: 1 << 30,
        page_cache: Default::default(),
    };
    let before = quarantine::list(fs.as_ref(), root).len();
    let (store, topics) = Store::open_as(fs.clone(), root, opts, Detector::Repair)?;
    let mut report = RepairReport {
        topics: topics.len(),
        segments_scrubbed: 0,
        indexes_rebuilt: 0,
        new_findings: Vec::new(),
    };
    for mut t in topics {
        for seg in t.log.sealed_segments() {
            let r = crate::verify_segment(&seg, t.log.damage_sink(), &mut |_| {})?;
            report.segments_scrubbed += 1;
            if let Some(rebuilt) = r.rebuilt_index {
                t.log.adopt_index(rebuilt);
                report.indexes_rebuilt += 1;
            }
        }
        for c in t.channels {
            let mut w = c.wal;
            w.checkpoint(&c.state)?;
        }
    }
    store.fault().check()?;
    store.release_lock();
    report.new_findings = store.quarantine().records().split_off(before);
    Ok(report)
}

/// Sequences skipped past the highest stored id when `broker.meta` is rebuilt. Every id ever
/// handed out is below the lost file's `next_sequence`; ids handed out but not stored are
/// those of publishes lost with an unsynced tail or never acknowledged, far fewer than this
/// (an unsynced tail is bounded by `relaxed_sync_bytes`, one publish by
/// `limits.max_body_bytes`), and 2^32 of the 2^48 sequences is a small price for a rare repair.
pub const REBUILT_SEQUENCE_SKIP: u64 = 1 << 32;

/// Largest record payload a level-1 directory holds: the legacy v7 record bound (72 MiB). A
/// larger record (a message above 71 MiB, or an MPUB batch that large) needs level 2.
pub const LEVEL_ONE_MAX_RECORD_PAYLOAD: u64 = 72 << 20;
/// Largest message body a broker stores at level 1 (the engine's message cap at that level):
/// a larger body was stored at level 2.
pub const LEVEL_ONE_MAX_MESSAGE_BYTES: u64 = 20 << 20;

/// The lowest feature level the data stored in `root` needs, with the first file that needs
/// more than level 1 (file and why); `(1, None)` when every record fits level 1. A tiered
/// record listing a segment local retention evicted needs
/// [`LOCAL_RETENTION_LEVEL`](crate::LOCAL_RETENTION_LEVEL); a record above level 1's bounds
/// needs [`LARGE_RECORDS_LEVEL`](crate::LARGE_RECORDS_LEVEL).
pub fn lowest_safe_level(fs: &dyn Fs, root: &Path) -> Result<(u8, Option<String>), StorageError> {
    if let Some(evicted) = first_evicted(fs, root)? {
        return Ok((crate::LOCAL_RETENTION_LEVEL, Some(evicted)));
    }
    let mut evidence = None;
    walk_stored(fs, root, &mut |log, w, largest_payload| {
        if evidence.is_some() {
            return Ok(());
        }
        let largest_body = w.entries.iter().map(|e| u64::from(e.body_len)).max();
        evidence = if largest_payload > LEVEL_ONE_MAX_RECORD_PAYLOAD {
            Some(format!(
                "{} holds a record of {largest_payload} bytes, above level 1's {LEVEL_ONE_MAX_RECORD_PAYLOAD}",
                log.display()
            ))
        } else {
            largest_body
                .filter(|b| *b > LEVEL_ONE_MAX_MESSAGE_BYTES)
                .map(|b| {
                    format!(
                        "{} holds a message of {b} bytes, above level 1's {LEVEL_ONE_MAX_MESSAGE_BYTES}",
                        log.display()
                    )
                })
        };
        Ok(())
    })?;
    let level = if evidence.is_some() {
        crate::LARGE_RECORDS_LEVEL
    } else {
        1
    };
    Ok((level, evidence))
}

/// The first topic whose tiered record lists a segment local retention evicted, said as
/// evidence for [`lowest_safe_level`]. A damaged record lists none (the open reads it so too).
fn first_evicted(fs: &dyn Fs, root: &Path) -> Result<Option<String>, StorageError> {
    let topics = root.join("topics");
    if !fs.exists(&topics) {
        return Ok(None);
    }
    let mut names = fs.list(&topics).map_err(io_err("list", &topics))?;
    names.sort();
    for t in names {
        let dir = topics.join(&t);
        let record = match crate::tiered::read(fs, &dir) {
            Ok(Some(record)) => record,
            Ok(None) | Err(StorageError::Corrupt { .. }) => continue,
            Err(e) => return Err(e),
        };
        if let Some(base) = record.segments.iter().find(|s| s.evicted).map(|s| s.base) {
            return Ok(Some(format!(
                "{} lists segment {base} as evicted by local retention, which an older binary \
                 would drop",
                crate::tiered::path(&dir).display()
            )));
        }
    }
    Ok(None)
}

/// Rewrites a damaged or missing `COMPATIBILITY` with `level` as the active writer and minimum
/// reader level (the only states a broker ever writes have them equal): the level given, which
/// must be at least what the stored records need, or else the lowest level they need. Refuses
/// to overwrite a whole file. Returns what it wrote.
pub fn rebuild_compatibility(
    fs: Arc<dyn Fs>,
    root: &Path,
    level: Option<u8>,
) -> Result<String, StorageError> {
    let path = root.join("COMPATIBILITY");
    if let Some(level) = level.filter(|l| !(1..=crate::MAX_FEATURE_LEVEL).contains(l)) {
        return Err(StorageError::Incompatible(format!(
            "feature level {level} is outside 1..={}",
            crate::MAX_FEATURE_LEVEL
        )));
    }
    match meta::read_meta::<Compatibility>(fs.as_ref(), &path)? {
        meta::MetaRead::Damaged(_) | meta::MetaRead::Missing => {}
        _ => {
            return Err(StorageError::Incompatible(format!(
                "{} is whole (or has a whole temp sibling); nothing to rebuild",
                path.display()
            )));
        }
    }
    let (needed, evidence) = lowest_safe_level(fs.as_ref(), root)?;
    let why = evidence
        .as_deref()
        .unwrap_or("every stored record fits level 1");
    let level = match level {
        Some(level) if level < needed => {
            return Err(StorageError::Incompatible(format!(
                "feature level {level} is below what the stored records need ({needed}: {why}); \
                 COMPATIBILITY not rebuilt"
            )));
        }
        Some(level) => level,
        None if needed > crate::MAX_FEATURE_LEVEL => {
            return Err(StorageError::Incompatible(format!(
                "the stored records need feature level {needed} ({why}), above this binary's {}",
                crate::MAX_FEATURE_LEVEL
            )));
        }
        None => needed,
    };
    let c = Compatibility {
        data_format: meta::FORMAT_VERSION,
        active_writer_feature_level: level,
        minimum_reader_feature_level: level,
        generation: u64::from(level),
    };
    let damaged_len = fs.read(&path).map_or(0, |b| b.len() as u64);
    meta::write_checked(fs.as_ref(), &path, &c)?;
    let done = format!(
        "rewrote {} with feature level {level} (active writer and minimum reader; the stored \
         records need {needed}: {why})",
        path.display()
    );
    record_rebuild(fs, root, &path, damaged_len, &done)?;
    Ok(done)
}

/// The audit record of a metadata file rebuilt by repair.
fn record_rebuild(
    fs: Arc<dyn Fs>,
    root: &Path,
    path: &Path,
    damaged_len: u64,
    action: &str,
) -> Result<(), StorageError> {
    quarantine::Quarantine::load(fs, root).report(quarantine::Finding {
        kind: quarantine::DamageKind::Metadata,
        topic: String::new(),
        channel: None,
        file: path.to_path_buf(),
        range: (0, damaged_len),
        positions: Vec::new(),
        ids: Vec::new(),
        action: action.to_string(),
        detected_by: Detector::Repair,
    })?;
    Ok(())
}

/// Rewrites a damaged or missing `broker.meta` for `node_id`: refuses when any stored message
/// id belongs to another node (or the file is whole); the id sequence resumes
/// [`REBUILT_SEQUENCE_SKIP`] past the highest stored one, and the registry revision at the
/// current time in milliseconds (above any count of opens and registry changes).
pub fn rebuild_broker_meta(
    fs: Arc<dyn Fs>,
    root: &Path,
    node_id: u16,
) -> Result<String, StorageError> {
    let path = root.join("broker.meta");
    match meta::read_meta::<BrokerMeta>(fs.as_ref(), &path)? {
        meta::MetaRead::Damaged(_) | meta::MetaRead::Missing => {}
        _ => {
            return Err(StorageError::Incompatible(format!(
                "{} is whole (or has a whole temp sibling); nothing to rebuild",
                path.display()
            )));
        }
    }
    let (highest, messages) = highest_stored_sequence(fs.as_ref(), root, node_id)?;
    let bm = rebuilt_broker_meta(node_id, highest)?;
    let next_sequence = bm.next_sequence;
    let damaged_len = fs.read(&path).map_or(0, |b| b.len() as u64);
    meta::write_checked(fs.as_ref(), &path, &bm)?;
    let done = format!(
        "rewrote {} for node {node_id}: {messages} stored message ids checked (all node \
         {node_id}'s), highest sequence {highest}, ids resume at {next_sequence}",
        path.display()
    );
    record_rebuild(fs, root, &path, damaged_len, &done)?;
    Ok(done)
}

/// A `broker.meta` written anew for `node_id` (a rebuild or a restore): ids resume
/// [`REBUILT_SEQUENCE_SKIP`] past `highest`, the highest stored sequence, and the registry
/// revision is the time now.
pub(crate) fn rebuilt_broker_meta(node_id: u16, highest: u64) -> Result<BrokerMeta, StorageError> {
    let next_sequence = highest + 1 + REBUILT_SEQUENCE_SKIP;
    if next_sequence > meta::MAX_SEQUENCE {
        return Err(StorageError::SequenceExhausted);
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok(BrokerMeta {
        format: meta::FORMAT_VERSION,
        node_id,
        next_sequence,
        registry_revision: now_ms,
    })
}

/// The highest sequence of every message id stored in any segment, and how many ids were
/// read; refuses when an id names a node other than `node_id`.
pub(crate) fn highest_stored_sequence(
    fs: &dyn Fs,
    root: &Path,
    node_id: u16,
) -> Result<(u64, u64), StorageError> {
    let mut highest = 0;
    let mut count = 0;
    walk_stored(fs, root, &mut |log, w, _| {
        for e in &w.entries {
            let node = (e.id >> 48) as u16;
            if node != node_id {
                return Err(StorageError::Incompatible(format!(
                    "{} holds message id {:016x} of node {node}, not node {node_id}: this \
                     directory is not node {node_id}'s; broker.meta not rebuilt",
                    log.display(),
                    e.id
                )));
            }
            highest = highest.max(e.id & meta::MAX_SEQUENCE);
            count += 1;
        }
        Ok(())
    })?;
    Ok((highest, count))
}

/// Bytes of an item header inside a publish-batch payload: position, id, body length.
const ITEM_HEADER: u64 = 20;

/// The largest record payload among whole records' `entries`: the items of one record lie
/// back to back (an item header between two bodies), while two records are further apart (a
/// record header and the count as well), so each record's payload is its count field plus its
/// items.
fn largest_record_payload(entries: &[crate::log::Entry]) -> u64 {
    let mut largest = 0;
    let mut current = 0;
    let mut end = None;
    for e in entries {
        if end != Some(e.body_offset.saturating_sub(ITEM_HEADER)) {
            current = 4;
        }
        current += ITEM_HEADER + u64::from(e.body_len);
        largest = largest.max(current);
        end = Some(e.body_offset + u64::from(e.body_len));
    }
    largest
}

/// What [`walk_stored`] hands each segment's visitor: the segment file, its walk, and the
/// largest record payload in it.
type SegmentVisit<'a> =
    dyn FnMut(&Path, &crate::log::scan::Walk, u64) -> Result<(), StorageError> + 'a;

/// Walks every segment of every topic in log order, handing each to `visit`.
fn walk_stored(fs: &dyn Fs, root: &Path, visit: &mut SegmentVisit<'_>) -> Result<(), StorageError> {
    let topics = root.join("topics");
    if !fs.exists(&topics) {
        return Ok(());
    }
    for t in fs.list(&topics).map_err(io_err("list", &topics))? {
        let sdir = topics.join(&t).join("segments");
        if !fs.exists(&sdir) {
            continue;
        }
        let mut bases: Vec<(u64, PathBuf)> = fs
            .list(&sdir)
            .map_err(io_err("list", &sdir))?
            .into_iter()
            .filter_map(|n| {
                let base = n
                    .strip_prefix("segment-")?
                    .strip_suffix(".rqlog")?
                    .parse()
                    .ok()?;
                Some((base, sdir.join(n)))
            })
            .collect();
        bases.sort();
        let last = bases.last().map(|(b, _)| *b);
        let mut prev = None;
        for (base, log) in bases {
            let file = fs.open(&log, false).map_err(io_err("open", &log))?;
            let len = file.len().map_err(io_err("stat", &log))?;
            let w = walk(
                file.as_ref(),
                &log,
                base,
                len,
                Some(base) == last,
                prev,
                &mut |_| {},
            )?;
            visit(&log, &w, largest_record_payload(&w.entries))?;
            if let Some(p) = w.entries.last().map(|e| e.position) {
                prev = Some(p);
            }
        }
    }
    Ok(())
}
