//! The read side of sealed segments: summaries at open (or a record scan plus a rewritten
//! index when the index is missing or invalid), and entries paged in from `.rqidx` files
//! through the shared [`PageCache`](super::PageCache).

use std::sync::Arc;

use super::index;
use super::{Entry, Segment, TopicLog, find, segment_path};
use crate::quarantine::{DamageKind, Detector};
use crate::{StorageError, io_err, meta};

impl TopicLog {
    /// Sealed segments: every segment but the last.
    fn sealed(&self) -> &[Segment] {
        &self.segments[..self.segments.len().saturating_sub(1)]
    }

    /// Summary of the oldest sealed segment holding a message.
    pub(super) fn first_sealed(&self) -> Option<&index::Summary> {
        self.sealed()
            .iter()
            .filter_map(|s| s.summary.as_ref())
            .find(|s| s.count > 0)
    }

    /// The validated summary from `seg`'s index, or `None` when there is no usable index.
    pub(super) fn read_summary(&self, seg: &Segment) -> Option<index::Summary> {
        let path = segment_path(&self.dir, seg.base, "rqidx");
        let file = self.fs.open(&path, false).ok()?;
        index::read_summary(file.as_ref(), seg.base, seg.len)
            .ok()
            .flatten()
    }

    /// Scans a sealed segment whose index is missing or invalid, quarantines damaged
    /// records, writes a fresh index atomically (so the next open is fast again) and returns
    /// its summary, with damage at its end whose lost positions the next segment tells.
    pub(super) fn reindex(
        &self,
        seg: &Segment,
    ) -> Result<(index::Summary, Option<super::recover::OpenTail>), StorageError> {
        let scan = self.walk_segment(seg, false)?;
        let prev = self
            .segments
            .iter()
            .filter_map(|s| s.last_position)
            .next_back();
        let mut open_tail = None;
        for d in &scan.damages {
            if d.tail && !d.recovered && d.positions.is_empty() {
                open_tail = Some(super::recover::OpenTail {
                    file: seg.path.clone(),
                    range: d.range,
                    prev: scan.entries.last().map(|e| e.position).or(prev),
                });
                continue;
            }
            self.damage.report_segment(
                &seg.path,
                d,
                self.damage.opening(),
                "damaged bytes skipped; the segment's index was rebuilt without them",
            )?;
        }
        let last_log_index = scan.last_log_index.unwrap_or(seg.base.saturating_sub(1));
        let (bytes, summary) = index::encode(seg.base, seg.len, last_log_index, &scan.entries);
        let path = segment_path(&self.dir, seg.base, "rqidx");
        meta::atomic_write(self.fs.as_ref(), &path, &bytes)?;
        Ok((summary, open_tail))
    }

    /// The sealed segment that would hold `position`, with its summary.
    fn sealed_holding(&self, position: u64) -> Option<(&Segment, &index::Summary)> {
        let sealed = self.sealed();
        let i = sealed.partition_point(|s| s.last_position.is_none_or(|l| l < position));
        let seg = sealed.get(i)?;
        Some((seg, seg.summary.as_ref()?))
    }

    pub(super) fn sealed_entry(&self, position: u64) -> Option<Entry> {
        let (seg, summary) = self.sealed_holding(position)?;
        let page = self.page(seg, summary, summary.page_of(position)?)?;
        find(page.len(), |i| page[i], position)
    }

    /// Page `k` of a sealed segment, from the cache or its index. A page that fails its CRC
    /// is rebuilt from the segment (and the index rewritten, the damage quarantined) when the
    /// segment still yields the same index; a failed read, or a segment that no longer
    /// matches, trips the fault (storage is isolated) and yields `None`.
    fn page(&self, seg: &Segment, summary: &index::Summary, k: usize) -> Option<Arc<[Entry]>> {
        let key = (self.log_id, seg.base, k as u32);
        if let Some(page) = self.cache.get(key) {
            return Some(page);
        }
        let loaded = match self.load_page(seg, summary, k) {
            Err(StorageError::Corrupt { file, offset, .. }) => {
                self.rebuild_page(seg, summary, k).and_then(|page| {
                    let end = offset + (summary.page_len(k) * index::ENTRY_LEN) as u64;
                    self.damage.report(self.damage.finding(
                        DamageKind::SegmentIndex,
                        &file,
                        (offset, end),
                        Detector::Read,
                        "index page failed its CRC; the index was rebuilt from its segment",
                    ))?;
                    Ok(page)
                })
            }
            other => other,
        };
        match loaded {
            Ok(page) => {
                let page: Arc<[Entry]> = page.into();
                self.cache.insert(key, page.clone());
                Some(page)
            }
            Err(e) => {
                self.fault.trip(e.to_string());
                None
            }
        }
    }

    /// Rebuilds the index of `seg` from its records; succeeds only if it equals the summary
    /// in use (the segment is intact), then rewrites the file and returns page `k`.
    fn rebuild_page(
        &self,
        seg: &Segment,
        summary: &index::Summary,
        k: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        let path = segment_path(&self.dir, seg.base, "rqidx");
        let scan = self.walk_segment(seg, false)?;
        let last = scan.last_log_index.unwrap_or(seg.base.saturating_sub(1));
        let (bytes, rebuilt) = index::encode(seg.base, seg.len, last, &scan.entries);
        if &rebuilt != summary {
            return Err(StorageError::Corrupt {
                file: path,
                offset: summary.page_offset(k),
                detail: format!(
                    "index page {k} does not match its CRC and its segment no longer yields the same index"
                ),
            });
        }
        meta::atomic_write(self.fs.as_ref(), &path, &bytes)?;
        Ok(scan
            .entries
            .chunks(index::PAGE_ENTRIES)
            .nth(k)
            .map(<[Entry]>::to_vec)
            .unwrap_or_default())
    }

    fn load_page(
        &self,
        seg: &Segment,
        summary: &index::Summary,
        k: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        let path = segment_path(&self.dir, seg.base, "rqidx");
        if let Some(bytes) = &seg.unwritten_index {
            // Encoded a moment ago from the entries in memory: a page that does not decode is
            // a fault of this process, not damage on disk, so it isolates storage (`page`)
            // rather than rebuilding an index whose write is still running.
            return index::page_in(bytes, summary, seg.base, k).ok_or_else(|| StorageError::Io {
                op: "decode index page not yet written",
                file: path.clone(),
                source: std::io::Error::other(format!("page {k} does not match its CRC")),
            });
        }
        let file = self
            .fs
            .open(&path, false)
            .map_err(io_err("open index", &path))?;
        let page = index::read_page(file.as_ref(), summary, seg.base, k)
            .map_err(io_err("read index", &path))?;
        page.ok_or_else(|| {
            // The index header was valid at open but this page is not: remove the index so
            // the restart that the isolation asks for scans the segment and rewrites it.
            let _ = self.fs.remove_file(&path);
            StorageError::Corrupt {
                file: path.clone(),
                offset: summary.page_offset(k),
                detail: format!("index page {k} does not match its CRC"),
            }
        })
    }

    /// First position whose timestamp is at or after `ts_ns` (or the next position).
    /// Timestamps are non-decreasing along the log. If a needed page cannot be read, the
    /// answer errs low (the first position of that page), which only keeps more.
    pub fn first_position_since(&self, ts_ns: i64) -> u64 {
        let sealed = self.sealed();
        let i = sealed.partition_point(|s| {
            s.summary
                .as_ref()
                .is_none_or(|m| m.count == 0 || m.last_timestamp_ns < ts_ns)
        });
        let Some((seg, summary)) = sealed.get(i).and_then(|s| Some((s, s.summary.as_ref()?)))
        else {
            let j = self.active.partition_point(|e| e.timestamp_ns < ts_ns);
            return self
                .active
                .get(j)
                .map_or(self.next_position, |e| e.position);
        };
        let p = summary
            .pages
            .partition_point(|d| d.first_timestamp_ns < ts_ns);
        let Some(k) = p.checked_sub(1) else {
            return summary.first_position;
        };
        let Some(page) = self.page(seg, summary, k) else {
            return summary.pages[k].first_position;
        };
        let j = page.partition_point(|e| e.timestamp_ns < ts_ns);
        page.get(j)
            .map(|e| e.position)
            .or_else(|| summary.pages.get(p).map(|d| d.first_position))
            .unwrap_or(summary.last_position)
    }
}
