//! Opening a topic log: list the segment directory, drop leftovers, restore each sealed
//! segment from its index summary (or rebuild it) and rescan the last one, cutting a torn tail.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use super::{
    DamageSink, DeferredZeros, PageCache, Recent, RemoteSegment, Segment, Stored, TopicLog,
    Unwritten, index, pages, segment_path,
};
use crate::fs::Fs;
use crate::quarantine::Detector;
use crate::quarantine::{DamageKind, Finding};
use crate::{Fault, StorageError, io_err};

/// Damage at the end of a sealed segment whose lost positions are known only once the next
/// segment's first position is.
pub(super) struct OpenTail {
    pub(super) file: std::path::PathBuf,
    pub(super) range: (u64, u64),
    pub(super) prev: Option<u64>,
}

/// Removes the `.rqlog` of each segment the tiered record calls evicted (`remote_bases`)
/// that is still in `bases`: a crash cut its eviction short, which is finished now.
fn finish_evictions(
    fs: &dyn Fs,
    dir: &Path,
    bases: &mut Vec<u64>,
    remote_bases: &[u64],
) -> Result<(), StorageError> {
    for &base in remote_bases {
        if let Ok(i) = bases.binary_search(&base) {
            bases.remove(i);
            let p = segment_path(dir, base, "rqlog");
            fs.remove_file(&p)
                .map_err(io_err("remove evicted segment", &p))?;
            fs.sync_dir(dir).map_err(io_err("fsync directory", dir))?;
        }
    }
    Ok(())
}

fn parse_name(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("segment-")?;
    let (num, ext) = rest.split_once('.')?;
    if num.len() != 20 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, ext))
}

impl TopicLog {
    /// Opens (recovering) or creates the log in `dir`; `min_next_position` comes from the
    /// manifest. Sealed metadata pages go to `cache`, which every log of one store shares.
    /// Damaged records are quarantined through `damage` (docs/storage-format.md, "Damage at
    /// rest"); only I/O failures and impossible layouts refuse.
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: &Path,
        fault: Fault,
        max_segment_bytes: u64,
        min_next_position: u64,
        cache: Arc<PageCache>,
        damage: DamageSink,
    ) -> Result<TopicLog, StorageError> {
        Self::open_with_remote(
            fs,
            dir,
            fault,
            max_segment_bytes,
            min_next_position,
            cache,
            damage,
            &BTreeMap::new(),
        )
    }

    /// [`TopicLog::open`] for a topic whose tiered record calls the segments of `remote`
    /// evicted: each with its `.rqidx` is opened as remote-only (a `.rqlog` still there is what
    /// a crash left of its eviction, and removed now); one without its `.rqidx` was collected
    /// by GC. A `.rqidx` without its `.rqlog` that `remote` does not name is a lost segment:
    /// reported as damage (with the positions the index lists), never read from the bucket.
    #[allow(clippy::too_many_arguments)]
    pub fn open_with_remote(
        fs: Arc<dyn Fs>,
        dir: &Path,
        fault: Fault,
        max_segment_bytes: u64,
        min_next_position: u64,
        cache: Arc<PageCache>,
        damage: DamageSink,
        remote: &BTreeMap<u64, RemoteSegment>,
    ) -> Result<TopicLog, StorageError> {
        fs.create_dir_all(dir)
            .map_err(io_err("create directory", dir))?;
        let mut bases = Vec::new();
        let mut indexes = Vec::new();
        for name in fs.list(dir).map_err(io_err("list", dir))? {
            let path = dir.join(&name);
            match parse_name(&name) {
                Some((base, "rqlog")) => bases.push(base),
                Some((base, "rqidx")) => indexes.push(base),
                _ if name.ends_with(".tmp") => fs
                    .remove_file(&path)
                    .map_err(io_err("remove temp", &path))?,
                _ => {
                    return Err(StorageError::Corrupt {
                        file: path,
                        offset: 0,
                        detail: "unexpected file name in segments directory".into(),
                    });
                }
            }
        }
        bases.sort_unstable();
        let mut remote_bases = Vec::new();
        let mut lost = Vec::new();
        for base in indexes {
            if remote.contains_key(&base) {
                remote_bases.push(base);
            } else if bases.binary_search(&base).is_err() {
                report_lost_segment(fs.as_ref(), dir, base, &damage)?;
                lost.push(base);
            }
        }
        finish_evictions(fs.as_ref(), dir, &mut bases, &remote_bases)?;
        let first_base = bases
            .first()
            .copied()
            .into_iter()
            .chain(remote_bases.first().copied())
            .min();
        let mut log = TopicLog {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            fault,
            max_segment_bytes,
            segments: Vec::new(),
            active: VecDeque::new(),
            recent: Recent::default(),
            cache,
            log_id: pages::next_log_id(),
            next_index: first_base.unwrap_or(1),
            next_position: min_next_position.max(1),
            last_ts: 0,
            durable_position: 0,
            appended_bytes: 0,
            durable_bytes: 0,
            sync_group_bytes: 0,
            damage,
            defer_index: false,
            index_writes: Vec::new(),
            zeros: DeferredZeros::default(),
            unwritten: Unwritten::default(),
        };
        // Remote-only segments are sealed; the active segment is always local.
        let mut all: Vec<(u64, bool)> = bases.iter().map(|&b| (b, false)).collect();
        all.extend(remote_bases.iter().map(|&b| (b, true)));
        all.sort_unstable();
        let count = all.len();
        let mut open_tail: Option<OpenTail> = None;
        for (i, (base, is_remote)) in all.into_iter().enumerate() {
            // A gap where a lost segment was (reported above) is not a layout error.
            let after_loss = lost.iter().any(|&l| l >= log.next_index && l < base);
            if is_remote {
                if let Some(r) = remote.get(&base) {
                    log.open_remote_segment(base, r, i + 1 == count, after_loss)?;
                }
                if let Some(t) = open_tail.take() {
                    log.report_open_tail(t)?;
                }
                continue;
            }
            let tail =
                log.recover_segment(base, i + 1 == count, open_tail.is_some() || after_loss)?;
            if let Some(t) = open_tail.take() {
                log.report_open_tail(t)?;
            }
            open_tail = tail;
        }
        if log.segments.is_empty() {
            log.create_segment()?;
        }
        if let Some(last) = log.segments.iter().rev().find_map(|s| s.last_position) {
            log.next_position = log.next_position.max(last + 1);
        }
        log.durable_position = log.next_position - 1;
        Ok(log)
    }

    /// Opens the remote-only segment `base` from its local index.
    fn open_remote_segment(
        &mut self,
        base: u64,
        remote: &RemoteSegment,
        last: bool,
        after_loss: bool,
    ) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, base, "rqlog");
        let idx = segment_path(&self.dir, base, "rqidx");
        let refuse = |detail: String| StorageError::Corrupt {
            file: idx.clone(),
            offset: 0,
            detail,
        };
        if base != self.next_index
            && !self.segments.is_empty()
            && !(after_loss && base > self.next_index)
        {
            return Err(refuse(format!(
                "remote-only segment base {base} is not contiguous (expected {})",
                self.next_index
            )));
        }
        if last {
            return Err(refuse(
                "the newest segment is recorded as evicted to the bucket, but the active \
                 segment is never evicted: the segments directory lost its newer files"
                    .into(),
            ));
        }
        let file = self.fs.open(&idx, false).map_err(io_err("open", &idx))?;
        let summary = index::read_summary(file.as_ref(), base, remote.size)
            .map_err(io_err("read", &idx))?
            .ok_or_else(|| {
                refuse(format!(
                    "the index of remote-only segment {base} is damaged, and its segment is \
                     only in the bucket ({}); the index is not rebuilt from there",
                    remote.key
                ))
            })?;
        self.last_ts = self.last_ts.max(summary.last_timestamp_ns);
        self.next_index = summary.last_log_index + 1;
        self.segments.push(Segment {
            base,
            path,
            file: Stored::Remote(Arc::new(remote.clone())),
            len: remote.size,
            zeroed: remote.size,
            last_log_index: Some(summary.last_log_index),
            last_position: (summary.count > 0).then_some(summary.last_position),
            summary: Some(summary),
            unwritten_index: None,
        });
        Ok(())
    }

    /// Damage at the end of the previous sealed segment; the positions it lost are those
    /// below this segment's first.
    fn report_open_tail(&self, t: OpenTail) -> Result<(), StorageError> {
        let first = self
            .segments
            .last()
            .and_then(|s| s.summary.as_ref().map(|m| m.first_position))
            .filter(|&p| p > 0)
            .or_else(|| self.active.front().map(|e| e.position))
            .unwrap_or(self.next_position);
        let positions: Vec<u64> = t
            .prev
            .map_or(Vec::new(), |prev| (prev + 1..first).collect());
        self.damage.report(Finding {
            positions,
            ..self.damage.finding(
                DamageKind::SegmentRecord,
                &t.file,
                t.range,
                self.damage.opening(),
                "damaged bytes at the end of a sealed segment skipped; its index was rebuilt without them",
            )
        })
    }

    /// Opens one segment; returns damage at its end whose lost positions the next segment
    /// will tell. `after_damage`: the previous segment ended in damage, so records (log
    /// indexes) between them may be gone.
    fn recover_segment(
        &mut self,
        base: u64,
        last: bool,
        after_damage: bool,
    ) -> Result<Option<OpenTail>, StorageError> {
        let path = segment_path(&self.dir, base, "rqlog");
        if base < self.next_index || (base > self.next_index && !after_damage) {
            return Err(StorageError::Corrupt {
                file: path,
                offset: 0,
                detail: format!(
                    "segment base {base} is not contiguous (expected {})",
                    self.next_index
                ),
            });
        }
        let file = self.fs.open(&path, false).map_err(io_err("open", &path))?;
        let len = file.len().map_err(io_err("stat", &path))?;
        let mut seg = Segment {
            base,
            path: path.clone(),
            file: Stored::Local(file.clone()),
            len,
            zeroed: len,
            last_log_index: None,
            last_position: None,
            summary: None,
            unwritten_index: None,
        };
        self.next_index = base;
        if !last {
            let (summary, tail) = match self.read_summary(&seg) {
                Some(s) => (s, None),
                None => self.reindex(&seg)?,
            };
            seg.last_log_index = Some(summary.last_log_index);
            seg.last_position = (summary.count > 0).then_some(summary.last_position);
            self.last_ts = self.last_ts.max(summary.last_timestamp_ns);
            self.next_index = summary.last_log_index + 1;
            seg.summary = Some(summary);
            self.segments.push(seg);
            return Ok(tail);
        }
        let scan = self.walk_segment(&seg, true)?;
        for d in &scan.damages {
            let action = if d.tail {
                let kept = self.set_aside(&seg, d.range)?;
                format!("damaged tail copied to {kept} and cut from the active segment")
            } else {
                "damaged bytes skipped; the records around them are kept".to_string()
            };
            self.damage
                .report_segment(&seg.path, d, self.damage.opening(), &action)?;
        }
        if scan.end < len {
            // Torn (or set-aside damaged) tail of the last segment: cut it off durably.
            file.truncate(scan.end)
                .map_err(io_err("truncate torn tail", &path))?;
            file.sync_all().map_err(io_err("fsync", &path))?;
            seg.len = scan.end;
            seg.zeroed = scan.end;
        }
        seg.last_log_index = scan.last_log_index;
        seg.last_position = scan.entries.last().map(|e| e.position);
        if let Some(i) = scan.last_log_index {
            self.next_index = i + 1;
        }
        self.last_ts = self.last_ts.max(scan.last_ts);
        self.active = scan.entries.into();
        self.segments.push(seg);
        Ok(None)
    }

    /// Copies damaged bytes of `seg` to `<topic>/quarantine/` (durably) before they are cut
    /// off, so an operator can still look at them; returns the copy's name.
    fn set_aside(&self, seg: &Segment, range: (u64, u64)) -> Result<String, StorageError> {
        let topic_dir = self.dir.parent().unwrap_or(&self.dir);
        let qdir = topic_dir.join("quarantine");
        self.fs
            .create_dir_all(&qdir)
            .map_err(io_err("create directory", &qdir))?;
        let name = format!("segment-{:020}.rqlog.{:020}.damaged", seg.base, range.0);
        let path = qdir.join(&name);
        let mut bytes = vec![0u8; (range.1 - range.0) as usize];
        seg.local()
            .and_then(|f| f.read_exact_at(&mut bytes, range.0))
            .map_err(io_err("read", &seg.path))?;
        crate::meta::atomic_write(self.fs.as_ref(), &path, &bytes)?;
        self.fs
            .sync_dir(topic_dir)
            .map_err(io_err("fsync directory", topic_dir))?;
        Ok(format!("quarantine/{name}"))
    }
}

/// A `.rqidx` whose `.rqlog` is gone while the tiered record does not call the segment
/// evicted: the segment was lost (GC and eviction never leave an index alone). Reported as
/// damage with the positions the index lists; the index is then removed, as before.
fn report_lost_segment(
    fs: &dyn Fs,
    dir: &Path,
    base: u64,
    damage: &DamageSink,
) -> Result<(), StorageError> {
    let p = segment_path(dir, base, "rqidx");
    let summary = fs
        .open(&p, false)
        .ok()
        .and_then(|f| index::read_orphan_summary(f.as_ref(), base).ok().flatten());
    let positions = summary.filter(|s| s.count > 0).map_or(Vec::new(), |s| {
        (s.first_position..=s.last_position).collect()
    });
    let detected_by = match damage.opening() {
        Detector::Read => Detector::Startup,
        d => d,
    };
    damage.report(Finding {
        positions,
        ..damage.finding(
            DamageKind::SegmentRecord,
            &segment_path(dir, base, "rqlog"),
            (0, 0),
            detected_by,
            "the segment file is missing though it was never evicted to the bucket: its \
             messages are lost; its orphaned index was removed",
        )
    })?;
    fs.remove_file(&p)
        .map_err(io_err("remove orphan index", &p))
}
