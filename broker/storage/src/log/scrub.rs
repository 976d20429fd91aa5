//! Background integrity check of sealed segments.
//!
//! Sealed segments are immutable, so a scrub can verify them without the topic lock: the
//! length must be unchanged and every record must decode with a valid CRC; then the segment's
//! index must still match the header and page directory in use and every page its CRC. A
//! record that fails is quarantined (its bodies checked one by one against the index's
//! CRC-32C) and the walk goes on; a damaged index is rewritten from the segment. The caller
//! paces the reads (`pace` is told how many bytes were just read) and trips the store fault
//! only on an I/O error or a changed length.

use std::path::PathBuf;
use std::sync::Arc;

use super::index::{self, Summary};
use super::{DamageSink, Entry, scan};
use crate::fs::{Fs, FsFile};
use crate::quarantine::{DamageKind, Detector};
use crate::{StorageError, io_err, meta};

/// A sealed segment pinned for verification (the open handle keeps it readable even if GC
/// unlinks it meanwhile).
pub struct SealedSegment {
    /// Its path, for error messages.
    pub path: PathBuf,
    /// The open file.
    pub file: Arc<dyn FsFile>,
    /// Its length when sealed.
    pub len: u64,
    /// Its base log index.
    pub base: u64,
    /// The last position before it (to count what damage at its start lost).
    pub prev_position: Option<u64>,
    /// Its `.rqidx`, checked after the records when present.
    pub index: Option<SealedIndex>,
}

/// The index of a sealed segment as the log knows it (the summary read at open or sealing).
pub struct SealedIndex {
    /// File system holding it.
    pub fs: Arc<dyn Fs>,
    /// Its path.
    pub path: PathBuf,
    /// Base log index of the segment.
    pub segment_base: u64,
    /// Header and page directory the log uses.
    pub summary: Summary,
}

/// What a scrub of one sealed segment found.
#[derive(Debug, Default)]
pub struct ScrubReport {
    /// Whole records checked.
    pub records: u64,
    /// New quarantine records written (findings already on record are not repeated).
    pub findings: u64,
    /// The index was damaged and rewritten from the segment: the log must adopt this summary
    /// ([`TopicLog::adopt_index`](super::TopicLog::adopt_index)).
    pub rebuilt_index: Option<RebuiltIndex>,
}

/// An index the scrub rewrote, for the log to adopt.
#[derive(Debug)]
pub struct RebuiltIndex {
    pub(crate) base: u64,
    pub(crate) summary: Summary,
}

/// Verifies one sealed segment: every record, then its index. Damage is quarantined through
/// `sink` and the walk goes on; only I/O errors, a changed length and an index that cannot be
/// rebuilt are errors (they isolate storage).
pub fn verify_segment(
    seg: &SealedSegment,
    sink: &DamageSink,
    pace: &mut dyn FnMut(u64),
) -> Result<ScrubReport, StorageError> {
    let corrupt = |offset: u64, detail: String| StorageError::Corrupt {
        file: seg.path.clone(),
        offset,
        detail,
    };
    let detected_by = match sink.opening() {
        Detector::Repair => Detector::Repair,
        _ => Detector::Scrub,
    };
    let len = seg.file.len().map_err(io_err("stat", &seg.path))?;
    if len != seg.len {
        return Err(corrupt(
            0,
            format!("sealed segment length changed from {} to {len}", seg.len),
        ));
    }
    let walk = scan::walk(
        seg.file.as_ref(),
        &seg.path,
        seg.base,
        len,
        false,
        seg.prev_position,
        pace,
    )?;
    let mut report = ScrubReport {
        records: walk.records,
        ..ScrubReport::default()
    };
    let indexed = match &seg.index {
        Some(idx) => index_entries(idx, seg.len, pace)?,
        None => None,
    };
    for d in &walk.damages {
        let (positions, ids, action) = match &indexed {
            // The index knows every message of the damaged bytes and the CRC-32C of its body:
            // a body that still matches is intact and stays deliverable.
            Some(entries) => {
                let mut lost = (Vec::new(), Vec::new());
                let mut intact = 0u64;
                for e in entries
                    .iter()
                    .filter(|e| e.body_offset >= d.range.0 && e.body_offset < d.range.1)
                {
                    if crate::log::read_body_from(seg.file.as_ref(), e).is_ok() {
                        intact += 1;
                    } else {
                        lost.0.push(e.position);
                        lost.1.push(e.id);
                    }
                }
                let action = format!(
                    "record failed its check; {} bodies no longer match their CRC-32C and are never delivered, {intact} still match and stay deliverable",
                    lost.0.len()
                );
                (lost.0, lost.1, action)
            }
            None => (
                d.positions.clone(),
                d.ids.clone(),
                "record failed its check; its messages are never delivered".to_string(),
            ),
        };
        let damage = scan::Damage {
            positions,
            ids,
            ..d.clone()
        };
        let before = sink.quarantine().records().len();
        sink.report_segment(&seg.path, &damage, detected_by, &action)?;
        report.findings += (sink.quarantine().records().len() - before) as u64;
    }
    if let (Some(idx), None) = (&seg.index, &indexed) {
        // A damaged index is rebuilt from the segment (which was just walked).
        let last = walk.last_log_index.unwrap_or(seg.base.saturating_sub(1));
        let (bytes, summary) = index::encode(seg.base, seg.len, last, &walk.entries);
        meta::atomic_write(idx.fs.as_ref(), &idx.path, &bytes)?;
        let before = sink.quarantine().records().len();
        sink.report(sink.finding(
            DamageKind::SegmentIndex,
            &idx.path,
            (0, bytes.len() as u64),
            detected_by,
            "index failed its checks; rebuilt from its segment",
        ))?;
        report.findings += (sink.quarantine().records().len() - before) as u64;
        report.rebuilt_index = Some(RebuiltIndex {
            base: seg.base,
            summary,
        });
    }
    Ok(report)
}

/// Every entry of an index, checked against the summary the log pages with; `None` when
/// the index is damaged (header, directory or any page).
fn index_entries(
    idx: &SealedIndex,
    segment_len: u64,
    pace: &mut dyn FnMut(u64),
) -> Result<Option<Vec<Entry>>, StorageError> {
    let Ok(file) = idx.fs.open(&idx.path, false) else {
        return Ok(None);
    };
    let on_disk = index::read_summary(file.as_ref(), idx.segment_base, segment_len)
        .map_err(io_err("read index", &idx.path))?;
    if on_disk.as_ref() != Some(&idx.summary) {
        return Ok(None);
    }
    pace(idx.summary.page_offset(0));
    let mut entries = Vec::with_capacity(idx.summary.count as usize);
    for k in 0..idx.summary.pages.len() {
        match index::read_page(file.as_ref(), &idx.summary, idx.segment_base, k)
            .map_err(io_err("read index", &idx.path))?
        {
            Some(page) => {
                pace((page.len() * index::ENTRY_LEN) as u64);
                entries.extend(page);
            }
            None => return Ok(None),
        }
    }
    Ok(Some(entries))
}
