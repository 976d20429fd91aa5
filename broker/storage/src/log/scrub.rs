//! Background integrity check of sealed segments.
//!
//! Sealed segments are immutable, so a scrub can verify them without the topic lock: the
//! length must be unchanged and every record must decode with a valid CRC; then the segment's
//! index must still match the header and page directory in use and every page its CRC. The caller paces
//! the reads (`pace` is told how many bytes were just read) and trips the store fault on error.

use std::path::PathBuf;
use std::sync::Arc;

use super::index::{self, Summary};
use crate::fs::{Fs, FsFile};
use crate::record::{self, HEADER_LEN};
use crate::{StorageError, io_err};

/// A sealed segment pinned for verification (the open handle keeps it readable even if GC
/// unlinks it meanwhile).
pub struct SealedSegment {
    /// Its path, for error messages.
    pub path: PathBuf,
    /// The open file.
    pub file: Arc<dyn FsFile>,
    /// Its length when sealed.
    pub len: u64,
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

/// Verifies one sealed segment; returns the number of records checked.
pub fn verify_segment(seg: &SealedSegment, pace: &mut dyn FnMut(u64)) -> Result<u64, StorageError> {
    let corrupt = |offset: u64, detail: String| StorageError::Corrupt {
        file: seg.path.clone(),
        offset,
        detail,
    };
    let len = seg.file.len().map_err(io_err("stat", &seg.path))?;
    if len != seg.len {
        return Err(corrupt(
            0,
            format!("sealed segment length changed from {} to {len}", seg.len),
        ));
    }
    let mut offset = 0u64;
    let mut records = 0u64;
    let mut hbuf = [0u8; HEADER_LEN];
    while offset < len {
        if len - offset < HEADER_LEN as u64 {
            return Err(corrupt(offset, "partial record in a sealed segment".into()));
        }
        seg.file
            .read_exact_at(&mut hbuf, offset)
            .map_err(io_err("read", &seg.path))?;
        let h = record::decode_header(&hbuf).map_err(|e| corrupt(offset, format!("{e:?}")))?;
        let mut payload = vec![0u8; h.payload_len as usize];
        seg.file
            .read_exact_at(&mut payload, offset + HEADER_LEN as u64)
            .map_err(io_err("read", &seg.path))?;
        record::decode_payload(&hbuf, &h, &payload)
            .map_err(|e| corrupt(offset, format!("{e:?}")))?;
        let n = HEADER_LEN as u64 + u64::from(h.payload_len);
        pace(n);
        offset += n;
        records += 1;
    }
    if let Some(idx) = &seg.index {
        verify_index(idx, seg.len, pace)?;
    }
    Ok(records)
}

/// Checks an index against the summary the log pages with. A mismatch removes the index (it
/// is derived from the segment, which just verified) so the restart the fault asks for scans
/// the segment and writes a good one.
fn verify_index(
    idx: &SealedIndex,
    segment_len: u64,
    pace: &mut dyn FnMut(u64),
) -> Result<(), StorageError> {
    let file = idx
        .fs
        .open(&idx.path, false)
        .map_err(io_err("open index", &idx.path))?;
    let bad = |offset: u64, detail: String| {
        let _ = idx.fs.remove_file(&idx.path);
        StorageError::Corrupt {
            file: idx.path.clone(),
            offset,
            detail,
        }
    };
    let on_disk = index::read_summary(file.as_ref(), idx.segment_base, segment_len)
        .map_err(io_err("read index", &idx.path))?;
    if on_disk.as_ref() != Some(&idx.summary) {
        return Err(bad(
            0,
            "index header or page directory changed since it was read".into(),
        ));
    }
    pace(idx.summary.page_offset(0));
    for k in 0..idx.summary.pages.len() {
        match index::read_page(file.as_ref(), &idx.summary, idx.segment_base, k)
            .map_err(io_err("read index", &idx.path))?
        {
            Some(page) => pace((page.len() * index::ENTRY_LEN) as u64),
            None => {
                return Err(bad(
                    idx.summary.page_offset(k),
                    format!("index page {k} does not match its CRC"),
                ));
            }
        }
    }
    Ok(())
}
