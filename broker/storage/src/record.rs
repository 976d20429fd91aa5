//! Segment records (`.rqlog`): a 48-byte header plus a publish-batch payload.
//!
//! One record per PUB/DPUB and one atomic record per MPUB. Encoding produces header buffers
//! that are written with vectored I/O next to the caller's bodies, so bodies are never copied.
//! All integers are big-endian; the checksum is CRC-32 (IEEE) over header bytes 0..44 followed
//! by the payload.

/// Record magic.
pub const MAGIC: &[u8; 4] = b"RQV7";
/// Record format version.
pub const VERSION: u8 = 7;
/// Header length.
pub const HEADER_LEN: usize = 48;
/// Per-message item header length inside a batch payload.
pub const ITEM_LEN: usize = 20;
/// Record kind of a publish batch.
pub const KIND_PUBLISH: u8 = 1;
/// Maximum messages in one batch.
pub const MAX_BATCH: usize = 65_536;
/// Largest payload one record may carry (160 MiB).
pub const MAX_PAYLOAD: u64 = 160 << 20;

/// The fixed fields of a record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Log index, contiguous across the topic's segments.
    pub log_index: u64,
    /// Publish time in nanoseconds since the Unix epoch (non-decreasing per topic).
    pub timestamp_ns: i64,
    /// ID of the first message; the others follow contiguously.
    pub first_id: u64,
    /// Earliest delivery time (ms since the epoch; now + DPUB defer).
    pub available_at_ms: i64,
    /// Payload length.
    pub payload_len: u32,
    /// CRC-32 over header bytes 0..44 and the payload.
    pub crc: u32,
}

/// One message inside a decoded batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Topic position.
    pub position: u64,
    /// Broker-wide message id.
    pub id: u64,
    /// Offset of the body within the payload.
    pub body_offset: u32,
    /// Body length.
    pub body_len: u32,
}

/// Why a record could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Not enough bytes: a torn tail if at the end of the last segment.
    Short,
    /// A complete record that is invalid (bad magic, version, kind, CRC or layout).
    Corrupt(&'static str),
}

/// Total encoded payload bytes for bodies of the given lengths.
pub fn payload_len(body_lens: impl IntoIterator<Item = usize>) -> u64 {
    4 + body_lens
        .into_iter()
        .map(|l| (ITEM_LEN + l) as u64)
        .sum::<u64>()
}

/// Encodes the item header of one message.
pub fn item_header(position: u64, id: u64, body_len: u32) -> [u8; ITEM_LEN] {
    let mut b = [0u8; ITEM_LEN];
    b[0..8].copy_from_slice(&position.to_be_bytes());
    b[8..16].copy_from_slice(&id.to_be_bytes());
    b[16..20].copy_from_slice(&body_len.to_be_bytes());
    b
}

/// Encodes a record header; `crc_rest` is a hasher already fed the whole payload.
pub fn encode_header(h: &RecordHeader, payload: &[&[u8]]) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4] = VERSION;
    b[5] = KIND_PUBLISH;
    b[8..16].copy_from_slice(&h.log_index.to_be_bytes());
    b[16..24].copy_from_slice(&h.timestamp_ns.to_be_bytes());
    b[24..32].copy_from_slice(&h.first_id.to_be_bytes());
    b[32..40].copy_from_slice(&h.available_at_ms.to_be_bytes());
    b[40..44].copy_from_slice(&h.payload_len.to_be_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&b[0..44]);
    for p in payload {
        hasher.update(p);
    }
    b[44..48].copy_from_slice(&hasher.finalize().to_be_bytes());
    b
}

/// The big-endian `u64` at `at` (records and the sealed-segment index share the layout rule).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// The big-endian `u32` at `at`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

/// Decodes a header without checking the CRC (that needs the payload).
pub fn decode_header(b: &[u8]) -> Result<RecordHeader, DecodeError> {
    if b.len() < HEADER_LEN {
        return Err(DecodeError::Short);
    }
    if &b[0..4] != MAGIC {
        return Err(DecodeError::Corrupt("bad record magic"));
    }
    if b[4] != VERSION {
        return Err(DecodeError::Corrupt("unknown record version"));
    }
    if b[5] != KIND_PUBLISH {
        return Err(DecodeError::Corrupt("unknown record kind"));
    }
    let h = header_unchecked(b);
    if u64::from(h.payload_len) > MAX_PAYLOAD || (h.payload_len as usize) < 4 {
        return Err(DecodeError::Corrupt("record payload length out of range"));
    }
    Ok(h)
}

/// Checks the CRC and decodes the batch items of a complete record.
pub fn decode_payload(
    header_bytes: &[u8],
    h: &RecordHeader,
    payload: &[u8],
) -> Result<Vec<Item>, DecodeError> {
    if !crc_matches(&header_bytes[0..44], payload, h.crc) {
        return Err(DecodeError::Corrupt("record CRC mismatch"));
    }
    decode_items(h, payload)
}

fn crc_matches(header: &[u8], payload: &[u8], crc: u32) -> bool {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header);
    hasher.update(payload);
    hasher.finalize() == crc
}

/// Whether a record whose header fails to frame it is whole once its length field says
/// `payload.len()`: only the length field was damaged, so the record can be read exactly.
pub fn whole_with_length(header_bytes: &[u8], payload: &[u8]) -> bool {
    if header_bytes.len() < HEADER_LEN || payload.len() < 4 {
        return false;
    }
    let Ok(len) = u32::try_from(payload.len()) else {
        return false;
    };
    let mut patched = [0u8; 44];
    patched.copy_from_slice(&header_bytes[0..44]);
    patched[40..44].copy_from_slice(&len.to_be_bytes());
    &patched[0..4] == MAGIC
        && patched[4] == VERSION
        && patched[5] == KIND_PUBLISH
        && crc_matches(&patched, payload, u32_at(header_bytes, 44))
}

/// Header fields read without any check (for accounting of a damaged record).
pub fn header_unchecked(b: &[u8]) -> RecordHeader {
    RecordHeader {
        log_index: u64_at(b, 8),
        timestamp_ns: u64_at(b, 16) as i64,
        first_id: u64_at(b, 24),
        available_at_ms: u64_at(b, 32) as i64,
        payload_len: u32_at(b, 40),
        crc: u32_at(b, 44),
    }
}

/// Decodes the batch items of a payload without checking the CRC (layout checks only).
pub fn decode_items(h: &RecordHeader, payload: &[u8]) -> Result<Vec<Item>, DecodeError> {
    if payload.len() < 4 {
        return Err(DecodeError::Corrupt("batch count past payload end"));
    }
    let count = u32_at(payload, 0) as usize;
    if count == 0 || count > MAX_BATCH {
        return Err(DecodeError::Corrupt("batch count out of range"));
    }
    let mut items = Vec::with_capacity(count);
    let mut at = 4usize;
    for i in 0..count {
        if payload.len() < at + ITEM_LEN {
            return Err(DecodeError::Corrupt("batch item header past payload end"));
        }
        let position = u64_at(payload, at);
        let id = u64_at(payload, at + 8);
        let body_len = u32_at(payload, at + 16);
        if id != h.first_id + i as u64 {
            return Err(DecodeError::Corrupt("batch ids not contiguous"));
        }
        if let Some(prev) = items.last().map(|p: &Item| p.position)
            && position != prev + 1
        {
            return Err(DecodeError::Corrupt("batch positions not contiguous"));
        }
        at += ITEM_LEN;
        let end = at + body_len as usize;
        if payload.len() < end {
            return Err(DecodeError::Corrupt("batch body past payload end"));
        }
        items.push(Item {
            position,
            id,
            body_offset: at as u32,
            body_len,
        });
        at = end;
    }
    if at != payload.len() {
        return Err(DecodeError::Corrupt("trailing bytes in batch payload"));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(h: RecordHeader, bodies: &[&[u8]], first_pos: u64) -> Vec<u8> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&(bodies.len() as u32).to_be_bytes());
        for (i, b) in bodies.iter().enumerate() {
            payload.extend_from_slice(&item_header(
                first_pos + i as u64,
                h.first_id + i as u64,
                b.len() as u32,
            ));
            payload.extend_from_slice(b);
        }
        let h = RecordHeader {
            payload_len: payload.len() as u32,
            ..h
        };
        let mut out = encode_header(&h, &[&payload]).to_vec();
        out.extend_from_slice(&payload);
        out
    }

    fn header() -> RecordHeader {
        RecordHeader {
            log_index: 7,
            timestamp_ns: 99,
            first_id: 1000,
            available_at_ms: 5,
            payload_len: 0,
            crc: 0,
        }
    }

    #[test]
    fn publish_batch_round_trips_through_encode_and_decode() {
        let rec = encode(header(), &[b"one", b"", b"three"], 40);
        let h = decode_header(&rec).unwrap();
        assert_eq!((h.log_index, h.first_id, h.available_at_ms), (7, 1000, 5));
        assert_eq!(h.payload_len as u64, payload_len([3, 0, 5]));
        let items = decode_payload(&rec, &h, &rec[HEADER_LEN..]).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2].position, 42);
        assert_eq!(items[2].id, 1002);
        let body = &rec[HEADER_LEN + items[2].body_offset as usize..][..items[2].body_len as usize];
        assert_eq!(body, b"three");
    }

    #[test]
    fn a_flipped_payload_byte_is_a_crc_mismatch() {
        let mut rec = encode(header(), &[b"hello"], 1);
        let last = rec.len() - 1;
        rec[last] ^= 1;
        let h = decode_header(&rec).unwrap();
        assert_eq!(
            decode_payload(&rec, &h, &rec[HEADER_LEN..]),
            Err(DecodeError::Corrupt("record CRC mismatch"))
        );
    }

    #[test]
    fn a_partial_header_is_short_and_bad_magic_is_corrupt() {
        let rec = encode(header(), &[b"x"], 1);
        assert_eq!(decode_header(&rec[..20]), Err(DecodeError::Short));
        let mut bad = rec.clone();
        bad[0] = b'X';
        assert!(matches!(decode_header(&bad), Err(DecodeError::Corrupt(_))));
    }
}
