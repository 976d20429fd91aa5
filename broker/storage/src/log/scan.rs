//! Record-by-record walk of a segment: the active segment at every open, a sealed one whose
//! index is missing or invalid, and the scrub.
//!
//! A record that fails its check does not stop the walk: it resynchronises at the next offset
//! where a whole record (magic, layout, CRC, a log index not below the expected one) starts,
//! and the bytes in between become a [`Damage`]. If those bytes are one record whose only
//! fault is its length field (the CRC matches once the length says where the next record
//! starts) the record is read whole and nothing is lost.

use std::path::Path;

use super::{Entry, Segment, TopicLog};
use crate::fs::FsFile;
use crate::record::{self, DecodeError, HEADER_LEN, Item, RecordHeader};
use crate::{StorageError, io_err};

/// Damaged bytes of a segment and the messages they held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Damaged byte range `[start, end)`.
    pub(crate) range: (u64, u64),
    /// Positions lost, ascending (empty when nothing was lost or they cannot be known).
    pub(crate) positions: Vec<u64>,
    /// Their ids when recoverable (same length as `positions`), else empty.
    pub(crate) ids: Vec<u64>,
    /// Only the length field was damaged: the record was read whole.
    pub(crate) recovered: bool,
    /// The damage runs to the end of the segment (no whole record after it).
    pub(crate) tail: bool,
}

/// What a walk of one segment found.
pub(crate) struct Walk {
    pub(crate) entries: Vec<Entry>,
    /// End of the last whole record (the walk's end when nothing follows the last damage).
    pub(crate) end: u64,
    pub(crate) last_log_index: Option<u64>,
    pub(crate) last_ts: i64,
    pub(crate) records: u64,
    pub(crate) damages: Vec<Damage>,
    /// The walk stopped at a torn tail of zeros only (the active segment's zeros ahead of its
    /// tail, nothing written over them).
    pub(crate) zero_tail: bool,
}

/// One whole record at an offset.
struct Whole {
    header: RecordHeader,
    items: Vec<Item>,
    payload: Vec<u8>,
}

fn read_whole(
    file: &dyn FsFile,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Result<Whole, DecodeError>, StorageError> {
    if len - offset < HEADER_LEN as u64 {
        return Ok(Err(DecodeError::Short));
    }
    let mut hbuf = [0u8; HEADER_LEN];
    file.read_exact_at(&mut hbuf, offset)
        .map_err(io_err("read", path))?;
    let h = match record::decode_header(&hbuf) {
        Ok(h) => h,
        Err(e) => return Ok(Err(e)),
    };
    let end = offset + HEADER_LEN as u64 + u64::from(h.payload_len);
    if end > len {
        return Ok(Err(DecodeError::Short));
    }
    let mut payload = vec![0u8; h.payload_len as usize];
    file.read_exact_at(&mut payload, offset + HEADER_LEN as u64)
        .map_err(io_err("read", path))?;
    Ok(
        record::decode_payload(&hbuf, &h, &payload).map(|items| Whole {
            header: h,
            items,
            payload,
        }),
    )
}

/// The next offset after `from` where a whole record with a log index of at least
/// `min_index` starts.
fn resync(
    file: &dyn FsFile,
    path: &Path,
    from: u64,
    len: u64,
    min_index: u64,
) -> Result<Option<(u64, Whole)>, StorageError> {
    const CHUNK: u64 = 1 << 20;
    let mut at = from;
    while at + (HEADER_LEN as u64) <= len {
        let n = CHUNK.min(len - at);
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, at)
            .map_err(io_err("read", path))?;
        for i in 0..buf.len().saturating_sub(3) {
            if &buf[i..i + 4] != record::MAGIC {
                continue;
            }
            let cand = at + i as u64;
            if let Ok(w) = read_whole(file, path, cand, len)?
                && w.header.log_index >= min_index
            {
                return Ok(Some((cand, w)));
            }
        }
        at += n.saturating_sub(3).max(1);
    }
    Ok(None)
}

fn entries_of(w: &Whole, offset: u64, segment: u64) -> impl Iterator<Item = Entry> + '_ {
    w.items.iter().map(move |it| Entry {
        position: it.position,
        id: it.id,
        timestamp_ns: w.header.timestamp_ns,
        available_at_ms: w.header.available_at_ms,
        body_offset: offset + HEADER_LEN as u64 + u64::from(it.body_offset),
        body_len: it.body_len,
        body_crc: body_crc(&w.payload, it),
        segment,
    })
}

/// CRC-32C of one item's body inside a checked payload.
pub(super) fn body_crc(payload: &[u8], it: &Item) -> u32 {
    let start = it.body_offset as usize;
    payload
        .get(start..start + it.body_len as usize)
        .map_or(0, crc32c::crc32c)
}

/// A record whose only damage is its length field: whole once it says `bytes.len()` (or,
/// with nothing whole after it, where the zeros ahead of the tail begin), and the record
/// the log expects next.
fn whole_but_length(bytes: &[u8], nonzero: usize, last: bool, next_index: u64) -> Option<Whole> {
    let n = [bytes.len(), nonzero].into_iter().find(|&n| {
        n >= HEADER_LEN + 4 && record::whole_with_length(&bytes[..n], &bytes[HEADER_LEN..n])
    })?;
    if n != bytes.len() && !last {
        return None;
    }
    let bytes = &bytes[..n];
    let mut h = record::header_unchecked(bytes);
    h.payload_len = (bytes.len() - HEADER_LEN) as u32;
    let items = record::decode_items(&h, &bytes[HEADER_LEN..]).ok()?;
    (h.log_index == next_index).then(|| Whole {
        header: h,
        items,
        payload: bytes[HEADER_LEN..].to_vec(),
    })
}

/// Walks every record of a segment. In the `last` segment a partial record with nothing
/// whole after it ends the walk (a torn tail, not damage). Only I/O errors and a whole record
/// out of log-index order are errors; everything else is reported in [`Walk::damages`].
pub(crate) fn walk(
    file: &dyn FsFile,
    path: &Path,
    base: u64,
    len: u64,
    last: bool,
    prev_position: Option<u64>,
    pace: &mut dyn FnMut(u64),
) -> Result<Walk, StorageError> {
    let mut out = Walk {
        entries: Vec::new(),
        end: 0,
        last_log_index: None,
        last_ts: 0,
        records: 0,
        damages: Vec::new(),
        zero_tail: false,
    };
    let mut next_index = base;
    let mut prev = prev_position;
    let mut offset = 0u64;
    while offset < len {
        let failed = match read_whole(file, path, offset, len)? {
            Ok(w) => {
                if w.header.log_index != next_index {
                    return Err(StorageError::Corrupt {
                        file: path.to_path_buf(),
                        offset,
                        detail: format!(
                            "log index {} where {next_index} was expected",
                            w.header.log_index
                        ),
                    });
                }
                let n = HEADER_LEN as u64 + u64::from(w.header.payload_len);
                accept(&mut out, &w, offset, base);
                prev = w.items.last().map(|i| i.position).or(prev);
                next_index += 1;
                pace(n);
                offset += n;
                continue;
            }
            Err(e) => e,
        };
        let next = resync(file, path, offset + 1, len, next_index)?;
        let end = next.as_ref().map_or(len, |(at, _)| *at);
        let mut bytes = vec![0u8; (end - offset) as usize];
        file.read_exact_at(&mut bytes, offset)
            .map_err(io_err("read", path))?;
        pace(end - offset);
        let nonzero = nonzero_len(&bytes);
        if let Some(w) = whole_but_length(&bytes, nonzero, next.is_none(), next_index) {
            let end = offset + HEADER_LEN as u64 + u64::from(w.header.payload_len);
            accept(&mut out, &w, offset, base);
            prev = w.items.last().map(|i| i.position).or(prev);
            next_index += 1;
            out.damages.push(Damage {
                range: (offset, end),
                positions: Vec::new(),
                ids: Vec::new(),
                recovered: true,
                tail: next.is_none(),
            });
            offset = end;
            continue;
        }
        if next.is_none() && last && (e_is_short(&failed) || reaches_zeros(&bytes, nonzero)) {
            out.zero_tail = nonzero == 0;
            break; // a torn tail: the caller cuts it off
        }
        let after = next
            .as_ref()
            .and_then(|(_, w)| w.items.first().map(|i| i.position));
        let (positions, ids) = lost(&bytes, prev, after);
        // Zeros ahead of the active segment's tail are not part of the damage.
        let end = if next.is_none() && last {
            offset + nonzero as u64
        } else {
            end
        };
        out.damages.push(Damage {
            range: (offset, end),
            positions,
            ids,
            recovered: false,
            tail: next.is_none(),
        });
        match next {
            Some((at, w)) => {
                let n = HEADER_LEN as u64 + u64::from(w.header.payload_len);
                accept(&mut out, &w, at, base);
                prev = w.items.last().map(|i| i.position).or(prev);
                next_index = w.header.log_index + 1;
                pace(n);
                offset = at + n;
            }
            None => break,
        }
    }
    out.end = offset.min(len);
    Ok(out)
}

/// Whether a failed record (its bytes through the end of the segment are `bytes`, the first `nonzero` of them up to the last non-zero byte) reaches into zeros that
/// run to the end of the file: the active segment's zeros ahead of its tail, which a write
/// that never finished left partly unwritten. That is a torn tail, like a record cut short by
/// the end of the file; nothing after it is whole. (A whole record ending in zero bytes is
/// read by its CRC before this is asked.)
fn reaches_zeros(bytes: &[u8], nonzero: usize) -> bool {
    if nonzero == bytes.len() {
        return false; // no zeros at the end
    }
    let claimed = if bytes.len() >= HEADER_LEN {
        HEADER_LEN + record::header_unchecked(bytes).payload_len as usize
    } else {
        bytes.len()
    };
    nonzero < claimed.max(HEADER_LEN)
}

/// `bytes` without its trailing zeros.
fn nonzero_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

fn e_is_short(e: &DecodeError) -> bool {
    matches!(e, DecodeError::Short)
}

fn accept(out: &mut Walk, w: &Whole, offset: u64, base: u64) {
    out.last_ts = out.last_ts.max(w.header.timestamp_ns);
    out.entries.extend(entries_of(w, offset, base));
    out.last_log_index = Some(w.header.log_index);
    out.records += 1;
}

/// How many messages the damaged record at the start of `bytes` held, read leniently: one
/// flipped bit damages one field, so either the batch count agrees with a walk of the item
/// lengths, or a walk that ignores the count reaches the payload's end, or (a length damaged)
/// the count is intact.
fn lenient_count(bytes: &[u8]) -> Option<u64> {
    let h = record::header_unchecked(bytes.get(..HEADER_LEN)?);
    let plen = (h.payload_len as usize).min(bytes.len() - HEADER_LEN);
    let payload = &bytes[HEADER_LEN..HEADER_LEN + plen];
    let count = u64::from(record::u32_at(payload.get(..4)?, 0));
    let mut at = 4usize;
    let mut walked = 0u64;
    while at + record::ITEM_LEN <= payload.len() {
        at += record::ITEM_LEN + record::u32_at(payload, at + 16) as usize;
        walked += 1;
    }
    if at == payload.len() && walked > 0 {
        return Some(walked);
    }
    (1..=record::MAX_BATCH as u64)
        .contains(&count)
        .then_some(count)
}

/// The positions (and ids when the damaged bytes still frame one record) lost in `bytes`,
/// between the last good position `prev` and the first position after them, `after`.
fn lost(bytes: &[u8], prev: Option<u64>, after: Option<u64>) -> (Vec<u64>, Vec<u64>) {
    let framed: Vec<Item> = (bytes.len() >= HEADER_LEN + 4)
        .then(|| {
            let mut h = record::header_unchecked(bytes);
            let plen = (h.payload_len as usize).min(bytes.len() - HEADER_LEN);
            h.payload_len = plen as u32;
            record::decode_items(&h, &bytes[HEADER_LEN..HEADER_LEN + plen]).ok()
        })
        .flatten()
        .unwrap_or_default();
    let count = (bytes.len() >= HEADER_LEN + 4)
        .then(|| lenient_count(bytes))
        .flatten();
    let first = match (prev, after, count) {
        (Some(p), _, _) => p + 1,
        (None, Some(a), Some(n)) => a.saturating_sub(n).max(1),
        (None, _, _) => framed.first().map_or(1, |i| i.position),
    };
    let end = match (after, count) {
        (Some(a), _) => a,
        (None, Some(n)) => first + n,
        (None, None) => first,
    };
    let range: Vec<u64> = (first..end.max(first)).collect();
    let same =
        framed.len() == range.len() && framed.iter().zip(&range).all(|(i, p)| i.position == *p);
    let ids = if same {
        framed.iter().map(|i| i.id).collect()
    } else {
        Vec::new()
    };
    (range, ids)
}

impl TopicLog {
    /// Walks `seg` (which must start at `self.next_index`), with the last position before it.
    pub(super) fn walk_segment(&self, seg: &Segment, last: bool) -> Result<Walk, StorageError> {
        let prev = self
            .segments
            .iter()
            .filter(|s| s.base < seg.base)
            .filter_map(|s| s.last_position)
            .next_back();
        let file = seg.local().map_err(io_err("read", &seg.path))?;
        walk(
            file.as_ref(),
            &seg.path,
            seg.base,
            seg.len,
            last,
            prev,
            &mut |_| {},
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_positions_come_from_the_gap_and_ids_only_from_a_whole_frame() {
        assert_eq!(lost(&[0u8; 10], Some(4), Some(7)), (vec![5, 6], vec![]));
        assert_eq!(lost(&[0u8; 10], None, Some(2)), (vec![1], vec![]));
        assert_eq!(lost(&[0u8; 10], Some(4), None), (vec![], vec![]));
        // A tail record whose count field is damaged: the item walk still counts two.
        let mut rec = vec![0u8; HEADER_LEN];
        rec[40..44].copy_from_slice(&50u32.to_be_bytes());
        rec.extend_from_slice(&77u32.to_be_bytes());
        for p in [5u64, 6] {
            rec.extend_from_slice(&record::item_header(p, p + 100, 3));
            rec.extend_from_slice(b"abc");
        }
        assert_eq!(lost(&rec, Some(4), None), (vec![5, 6], vec![]));
    }
}
