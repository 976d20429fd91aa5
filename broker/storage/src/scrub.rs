//! Background integrity check of sealed segments.
//!
//! Sealed segments are immutable, so a scrub can verify them without the topic lock: the
//! length must be unchanged and every record must decode with a valid CRC. The caller paces
//! the reads (`pace` is told how many bytes were just read) and trips the store fault on error.

use std::path::PathBuf;
use std::sync::Arc;

use crate::fs::FsFile;
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
    Ok(records)
}
