//! Sealed-segment index (`.rqidx`): the per-message metadata of a sealed segment, so startup
//! reads one small file per segment instead of scanning every record.
//!
//! Layout (big-endian): 48-byte header `RQI7` · u8 version 1 · 3 zero · u64 segment_len ·
//! u64 first_log_index · u64 last_log_index · u32 count · u32 body CRC-32 · u32 header CRC-32
//! (bytes 0..40) · 4 zero; then `count` 44-byte entries `u64 position · u64 id · i64 timestamp_ns ·
//! i64 available_at_ms · u64 body_offset · u32 body_len`. The index is trusted only when its
//! `segment_len` equals the segment file's length and both CRCs match; otherwise the segment is
//! scanned (and the index rewritten when it is sealed again).

use crate::log::Entry;

const MAGIC: &[u8; 4] = b"RQI7";
const HEADER_LEN: usize = 48;
const ENTRY_LEN: usize = 44;

/// Encodes the index of a sealed segment.
pub fn encode(
    segment_base: u64,
    segment_len: u64,
    last_log_index: u64,
    entries: &[Entry],
) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for e in entries {
        body.extend_from_slice(&e.position.to_be_bytes());
        body.extend_from_slice(&e.id.to_be_bytes());
        body.extend_from_slice(&e.timestamp_ns.to_be_bytes());
        body.extend_from_slice(&e.available_at_ms.to_be_bytes());
        body.extend_from_slice(&e.body_offset.to_be_bytes());
        body.extend_from_slice(&e.body_len.to_be_bytes());
    }
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0, 0, 0]);
    out.extend_from_slice(&segment_len.to_be_bytes());
    out.extend_from_slice(&segment_base.to_be_bytes());
    out.extend_from_slice(&last_log_index.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    let hcrc = crc32fast::hash(&out[0..40]);
    out.extend_from_slice(&hcrc.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&body);
    out
}

/// A decoded, validated index.
pub struct Decoded {
    /// Log index of the segment's last record.
    pub last_log_index: u64,
    /// Message metadata in position order.
    pub entries: Vec<Entry>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

/// Decodes `bytes` if it is a valid index for a segment with this base and length.
pub fn decode(bytes: &[u8], segment_base: u64, segment_len: u64) -> Option<Decoded> {
    if bytes.len() < HEADER_LEN || &bytes[0..4] != MAGIC || bytes[4] != 1 {
        return None;
    }
    if u32_at(bytes, 40) != crc32fast::hash(&bytes[0..40]) {
        return None;
    }
    if u64_at(bytes, 8) != segment_len || u64_at(bytes, 16) != segment_base {
        return None;
    }
    let last_log_index = u64_at(bytes, 24);
    let count = u32_at(bytes, 32) as usize;
    let body = &bytes[HEADER_LEN..];
    if body.len() != count * ENTRY_LEN || crc32fast::hash(body) != u32_at(bytes, 36) {
        return None;
    }
    let entries = body
        .chunks_exact(ENTRY_LEN)
        .map(|c| Entry {
            position: u64_at(c, 0),
            id: u64_at(c, 8),
            timestamp_ns: u64_at(c, 16) as i64,
            available_at_ms: u64_at(c, 24) as i64,
            body_offset: u64_at(c, 32),
            body_len: u32_at(c, 40),
            segment: segment_base,
        })
        .collect();
    Some(Decoded {
        last_log_index,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: u64) -> Entry {
        Entry {
            position: p,
            id: 100 + p,
            timestamp_ns: 5,
            available_at_ms: 6,
            body_offset: 72 * p,
            body_len: 3,
            segment: 9,
        }
    }

    #[test]
    fn index_round_trips_and_rejects_a_length_mismatch_or_bit_flip() {
        let bytes = encode(9, 1000, 12, &[entry(1), entry(2)]);
        let d = decode(&bytes, 9, 1000).unwrap();
        assert_eq!(d.last_log_index, 12);
        assert_eq!(d.entries, vec![entry(1), entry(2)]);
        assert!(decode(&bytes, 9, 1001).is_none());
        let mut bad = bytes.clone();
        let n = bad.len() - 1;
        bad[n] ^= 0x10;
        assert!(decode(&bad, 9, 1000).is_none());
    }
}
