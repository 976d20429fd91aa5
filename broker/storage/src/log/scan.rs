//! Record-by-record scan of a segment: the active segment at every open, and a sealed one
//! whose index is missing or invalid.

use std::path::Path;

use super::{Entry, Segment, TopicLog};
use crate::record::{self, DecodeError, HEADER_LEN};
use crate::{StorageError, io_err};

/// What a record scan of one segment found.
pub(super) struct Scan {
    pub(super) entries: Vec<Entry>,
    /// End of the last complete record.
    pub(super) end: u64,
    pub(super) last_log_index: Option<u64>,
    pub(super) last_ts: i64,
}

impl TopicLog {
    /// Reads every record of `seg` (which must start at `self.next_index`), checking CRCs and
    /// log-index continuity. In the `last` segment a partial record ends the scan (a torn
    /// tail); anywhere else it is corruption.
    pub(super) fn scan(&self, seg: &Segment, last: bool) -> Result<Scan, StorageError> {
        let path = &seg.path;
        let len = seg.len;
        let mut out = Scan {
            entries: Vec::new(),
            end: 0,
            last_log_index: None,
            last_ts: 0,
        };
        let mut next_index = seg.base;
        let mut offset = 0u64;
        let mut hbuf = [0u8; HEADER_LEN];
        while offset < len {
            let torn = |detail: &str| -> Result<(), StorageError> {
                if last {
                    Ok(())
                } else {
                    Err(StorageError::Corrupt {
                        file: path.clone(),
                        offset,
                        detail: format!("{detail} in a sealed segment"),
                    })
                }
            };
            if len - offset < HEADER_LEN as u64 {
                torn("partial record header")?;
                break;
            }
            seg.file
                .read_exact_at(&mut hbuf, offset)
                .map_err(io_err("read", path))?;
            let h = record::decode_header(&hbuf).map_err(|e| corrupt(path, offset, e))?;
            if h.log_index != next_index {
                return Err(StorageError::Corrupt {
                    file: path.clone(),
                    offset,
                    detail: format!(
                        "log index {} where {} was expected",
                        h.log_index, next_index
                    ),
                });
            }
            let end = offset + HEADER_LEN as u64 + u64::from(h.payload_len);
            if end > len {
                torn("partial record payload")?;
                break;
            }
            let mut payload = vec![0u8; h.payload_len as usize];
            seg.file
                .read_exact_at(&mut payload, offset + HEADER_LEN as u64)
                .map_err(io_err("read", path))?;
            let items = record::decode_payload(&hbuf, &h, &payload)
                .map_err(|e| corrupt(path, offset, e))?;
            out.last_ts = out.last_ts.max(h.timestamp_ns);
            out.entries.extend(items.iter().map(|it| Entry {
                position: it.position,
                id: it.id,
                timestamp_ns: h.timestamp_ns,
                available_at_ms: h.available_at_ms,
                body_offset: offset + HEADER_LEN as u64 + u64::from(it.body_offset),
                body_len: it.body_len,
                segment: seg.base,
            }));
            out.last_log_index = Some(h.log_index);
            next_index += 1;
            offset = end;
        }
        out.end = offset;
        Ok(out)
    }
}

fn corrupt(path: &Path, offset: u64, e: DecodeError) -> StorageError {
    let detail = match e {
        DecodeError::Short => "record shorter than its header".to_string(),
        DecodeError::Corrupt(d) => d.to_string(),
    };
    StorageError::Corrupt {
        file: path.to_path_buf(),
        offset,
        detail,
    }
}
