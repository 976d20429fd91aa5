//! One segment of a restore: downloaded next to its final name, checked, renamed into place.

use std::path::Path;
use std::sync::Arc;

use rustqueue_storage::restore::{self as files, SegmentSummary};
use rustqueue_storage::{Fs, StorageError, TieredObject, TieredSegment};
use rustqueue_tier::Bucket;

use super::plan::Candidate;
use super::{DamagedObject, RestoreError, key, object_fault};

pub(super) enum Fetched {
    Restored(TieredSegment, SegmentSummary),
    /// Only positions below the checkpoint's first position: collected, not restored.
    Collected,
    Damaged(DamagedObject),
}

/// Downloads one candidate segment into `<file>.tmp` (index first: its header says whether
/// the segment was collected before the checkpoint), checks it, and renames it into place.
pub(super) async fn fetch_segment(
    bucket: &Bucket,
    fs: &Arc<dyn Fs>,
    sdir: &Path,
    c: &Candidate,
    keys: &[String; 2],
    expected_base: Option<u64>,
    first_position: u64,
) -> Result<Fetched, RestoreError> {
    let damaged = |key: &str, detail: String| {
        Ok(Fetched::Damaged(DamagedObject {
            key: key.to_owned(),
            detail,
        }))
    };
    let (Some(log), Some(idx)) = (&c.log, &c.index) else {
        let which = if c.log.is_none() { &keys[0] } else { &keys[1] };
        return damaged(which, "recorded as uploaded but not in the bucket".into());
    };
    if let Some(want) = expected_base
        && want != c.base
    {
        return damaged(
            &log.key,
            format!(
                "segment base {} does not follow the last restored record (log index {want}): \
                 the segments between are missing",
                c.base
            ),
        );
    }
    let tmp = |ext: &str| files::segment_file(sdir, c.base, &format!("{ext}.tmp"));
    let (log_tmp, idx_tmp) = (tmp("rqlog"), tmp("rqidx"));
    let clean = || {
        let _ = std::fs::remove_file(&idx_tmp);
        let _ = std::fs::remove_file(&log_tmp);
    };
    let mut stored = Vec::with_capacity(2);
    for (object, path) in [(idx, &idx_tmp), (log, &log_tmp)] {
        match bucket.get_file(&key(&object.key)?, path).await {
            Ok(v) => {
                if let Some(want) = object.recorded_crc32c
                    && want != v.checksum.crc32c
                {
                    clean();
                    return damaged(
                        &object.key,
                        format!(
                            "CRC-32C {:08x} differs from the {want:08x} the broker recorded at upload",
                            v.checksum.crc32c
                        ),
                    );
                }
                stored.push(TieredObject {
                    key: object.key.clone(),
                    size: v.checksum.size,
                    crc32c: v.checksum.crc32c,
                });
            }
            Err(e) if object_fault(&e) => {
                clean();
                return damaged(&object.key, e.to_string());
            }
            Err(e) => {
                clean();
                return Err(e.into());
            }
        }
        if stored.len() == 1 && expected_base.is_none() {
            let bytes = std::fs::read(&idx_tmp).map_err(|e| io("read", &idx_tmp, e))?;
            let summary = files::index_summary(&bytes, c.base, log.size);
            if summary.is_some_and(|s| s.last_position.is_some_and(|p| p < first_position)) {
                clean();
                return Ok(Fetched::Collected);
            }
        }
    }
    let checked = {
        let (fs, l, i, base) = (fs.clone(), log_tmp.clone(), idx_tmp.clone(), c.base);
        tokio::task::spawn_blocking(move || files::check_segment(fs.as_ref(), &l, base, Some(&i)))
            .await
            .map_err(|e| StorageError::Incompatible(e.to_string()))?
    };
    let summary = match checked {
        Ok(s) => s,
        Err(detail) => {
            clean();
            return damaged(&log.key, detail);
        }
    };
    stored.reverse(); // the .rqlog, then the .rqidx, as the tiered record lists them
    let segment = TieredSegment {
        base: c.base,
        objects: stored,
        evicted: false,
    };
    place_segment(fs, sdir, c.base).await?;
    Ok(Fetched::Restored(segment, summary))
}

/// Renames a checked segment's `.tmp` files into place, durably.
async fn place_segment(fs: &Arc<dyn Fs>, sdir: &Path, base: u64) -> Result<(), RestoreError> {
    let (fs2, sdir2) = (fs.clone(), sdir.to_path_buf());
    tokio::task::spawn_blocking(move || -> Result<(), StorageError> {
        for ext in ["rqlog", "rqidx"] {
            let from = files::segment_file(&sdir2, base, &format!("{ext}.tmp"));
            let to = files::segment_file(&sdir2, base, ext);
            let f = fs2.open(&from, false).map_err(|e| io("open", &from, e))?;
            f.sync_all().map_err(|e| io("fsync", &from, e))?;
            fs2.rename(&from, &to).map_err(|e| io("rename", &to, e))?;
        }
        fs2.sync_dir(&sdir2)
            .map_err(|e| io("fsync directory", &sdir2, e))
    })
    .await
    .map_err(|e| StorageError::Incompatible(e.to_string()))??;
    Ok(())
}

fn io(op: &'static str, file: &Path, source: std::io::Error) -> StorageError {
    StorageError::Io {
        op,
        file: file.to_path_buf(),
        source,
    }
}
