//! Sealed-segment index (`.rqidx`): the per-message metadata of a sealed segment, cut into
//! fixed-size pages, so startup reads one small header and page directory per segment and a
//! reader pages in only the metadata it needs.
//!
//! Layout (big-endian): 80-byte header `RQI7` · u8 version 3 · 3 zero · u64 segment_len ·
//! u64 first_log_index · u64 last_log_index · u32 count · u32 page_entries ·
//! u64 first_position · u64 last_position · i64 first_timestamp_ns · i64 last_timestamp_ns ·
//! u32 directory CRC-32 · u32 header CRC-32 (over bytes 0..76); then one 20-byte directory
//! entry per page `u64 first_position · i64 first_timestamp_ns · u32 page CRC-32`; then
//! `count` 48-byte entries `u64 position · u64 id · i64 timestamp_ns · i64 available_at_ms ·
//! u64 body_offset · u32 body_len · u32 body CRC-32C`, page `k` holding entries `k * page_entries ..`.
//!
//! The index is trusted at open only when its `segment_len` equals the segment file's length
//! and the header and directory CRCs match (otherwise the segment is scanned and the index
//! rewritten); each page is checked against its own CRC when it is read.

use std::io;

use crate::fs::FsFile;
use crate::log::Entry;
use crate::record::{u32_at, u64_at};

const MAGIC: &[u8; 4] = b"RQI7";
/// Version 3 adds each body's CRC-32C to its entry; an older index is rebuilt by a scan.
const VERSION: u8 = 3;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 80;
/// Bytes of one page-directory entry.
pub const DIR_ENTRY_LEN: usize = 20;
/// Bytes of one encoded entry.
pub const ENTRY_LEN: usize = 48;
/// Entries per page (the last page of a segment may hold fewer).
pub const PAGE_ENTRIES: usize = 4_096;

/// Where one page starts and its CRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageDir {
    /// Position of the page's first entry.
    pub first_position: u64,
    /// Publish time of the page's first entry.
    pub first_timestamp_ns: i64,
    /// CRC-32 of the page's encoded entries.
    pub crc: u32,
}

/// What a sealed segment holds, read from its index header and directory alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Log index of the segment's last record.
    pub last_log_index: u64,
    /// Messages in the segment.
    pub count: u32,
    /// First and last position (0 when `count` is 0).
    pub first_position: u64,
    /// Last position (0 when `count` is 0).
    pub last_position: u64,
    /// Publish time of the first message.
    pub first_timestamp_ns: i64,
    /// Publish time of the last message.
    pub last_timestamp_ns: i64,
    /// One entry per page.
    pub pages: Box<[PageDir]>,
}

impl Summary {
    /// The number of entries page `k` holds.
    pub fn page_len(&self, k: usize) -> usize {
        (self.count as usize)
            .saturating_sub(k * PAGE_ENTRIES)
            .min(PAGE_ENTRIES)
    }

    /// Byte offset of page `k` in the index file.
    pub fn page_offset(&self, k: usize) -> u64 {
        (HEADER_LEN + self.pages.len() * DIR_ENTRY_LEN + k * PAGE_ENTRIES * ENTRY_LEN) as u64
    }

    /// Index of the page that would hold `position` (the last page starting at or before it).
    pub fn page_of(&self, position: u64) -> Option<usize> {
        self.pages
            .partition_point(|p| p.first_position <= position)
            .checked_sub(1)
    }
}

/// One entry as its 48 bytes: built on the stack and copied once (a segment's seal encodes
/// up to ~100,000 of them under the log lock).
fn encode_entry(out: &mut Vec<u8>, e: &Entry) {
    let mut b = [0u8; ENTRY_LEN];
    b[0..8].copy_from_slice(&e.position.to_be_bytes());
    b[8..16].copy_from_slice(&e.id.to_be_bytes());
    b[16..24].copy_from_slice(&e.timestamp_ns.to_be_bytes());
    b[24..32].copy_from_slice(&e.available_at_ms.to_be_bytes());
    b[32..40].copy_from_slice(&e.body_offset.to_be_bytes());
    b[40..44].copy_from_slice(&e.body_len.to_be_bytes());
    b[44..48].copy_from_slice(&e.body_crc.to_be_bytes());
    out.extend_from_slice(&b);
}

/// Encodes the index of a sealed segment (`entries` in position order) and its summary.
pub fn encode(
    segment_base: u64,
    segment_len: u64,
    last_log_index: u64,
    entries: &[Entry],
) -> (Vec<u8>, Summary) {
    // Header and directory first, filled in once the pages' CRCs are known: the entries are
    // encoded in place, never copied.
    let body_start = HEADER_LEN + entries.len().div_ceil(PAGE_ENTRIES) * DIR_ENTRY_LEN;
    let mut out = Vec::with_capacity(body_start + entries.len() * ENTRY_LEN);
    out.resize(body_start, 0);
    let mut pages = Vec::with_capacity(entries.len().div_ceil(PAGE_ENTRIES));
    for page in entries.chunks(PAGE_ENTRIES) {
        let start = out.len();
        for e in page {
            encode_entry(&mut out, e);
        }
        pages.push(PageDir {
            first_position: page[0].position,
            first_timestamp_ns: page[0].timestamp_ns,
            crc: crc32fast::hash(&out[start..]),
        });
    }
    let mut dir = Vec::with_capacity(pages.len() * DIR_ENTRY_LEN);
    for p in &pages {
        dir.extend_from_slice(&p.first_position.to_be_bytes());
        dir.extend_from_slice(&p.first_timestamp_ns.to_be_bytes());
        dir.extend_from_slice(&p.crc.to_be_bytes());
    }
    let summary = Summary {
        last_log_index,
        count: entries.len() as u32,
        first_position: entries.first().map_or(0, |e| e.position),
        last_position: entries.last().map_or(0, |e| e.position),
        first_timestamp_ns: entries.first().map_or(0, |e| e.timestamp_ns),
        last_timestamp_ns: entries.last().map_or(0, |e| e.timestamp_ns),
        pages: pages.into(),
    };
    let mut head = Vec::with_capacity(HEADER_LEN);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&[VERSION, 0, 0, 0]);
    head.extend_from_slice(&segment_len.to_be_bytes());
    head.extend_from_slice(&segment_base.to_be_bytes());
    head.extend_from_slice(&last_log_index.to_be_bytes());
    head.extend_from_slice(&summary.count.to_be_bytes());
    head.extend_from_slice(&(PAGE_ENTRIES as u32).to_be_bytes());
    head.extend_from_slice(&summary.first_position.to_be_bytes());
    head.extend_from_slice(&summary.last_position.to_be_bytes());
    head.extend_from_slice(&summary.first_timestamp_ns.to_be_bytes());
    head.extend_from_slice(&summary.last_timestamp_ns.to_be_bytes());
    head.extend_from_slice(&crc32fast::hash(&dir).to_be_bytes());
    let hcrc = crc32fast::hash(&head[0..76]);
    head.extend_from_slice(&hcrc.to_be_bytes());
    out[..HEADER_LEN].copy_from_slice(&head);
    out[HEADER_LEN..body_start].copy_from_slice(&dir);
    (out, summary)
}

/// Reads and validates the header and page directory of the index in `file` for a segment
/// with this base and length. `Ok(None)` means the index is not usable (wrong version, length
/// or base, CRC mismatch, inconsistent layout): scan the segment instead.
/// The summary of an index whose segment is not at hand (its length is taken from the
/// index's own header): what an orphaned index says its lost segment held.
pub fn read_orphan_summary(file: &dyn FsFile, segment_base: u64) -> io::Result<Option<Summary>> {
    if file.len()? < HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut h = [0u8; HEADER_LEN];
    file.read_exact_at(&mut h, 0)?;
    read_summary(file, segment_base, u64_at(&h, 8))
}

pub fn read_summary(
    file: &dyn FsFile,
    segment_base: u64,
    segment_len: u64,
) -> io::Result<Option<Summary>> {
    let file_len = file.len()?;
    if file_len < HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut h = [0u8; HEADER_LEN];
    file.read_exact_at(&mut h, 0)?;
    if &h[0..4] != MAGIC || h[4] != VERSION || u32_at(&h, 76) != crc32fast::hash(&h[0..76]) {
        return Ok(None);
    }
    if u64_at(&h, 8) != segment_len
        || u64_at(&h, 16) != segment_base
        || u32_at(&h, 36) as usize != PAGE_ENTRIES
    {
        return Ok(None);
    }
    let count = u32_at(&h, 32);
    let pages = (count as usize).div_ceil(PAGE_ENTRIES);
    let expected = HEADER_LEN + pages * DIR_ENTRY_LEN + count as usize * ENTRY_LEN;
    if file_len != expected as u64 {
        return Ok(None);
    }
    let mut dir = vec![0u8; pages * DIR_ENTRY_LEN];
    file.read_exact_at(&mut dir, HEADER_LEN as u64)?;
    if crc32fast::hash(&dir) != u32_at(&h, 72) {
        return Ok(None);
    }
    let pages: Box<[PageDir]> = dir
        .chunks_exact(DIR_ENTRY_LEN)
        .map(|c| PageDir {
            first_position: u64_at(c, 0),
            first_timestamp_ns: u64_at(c, 8) as i64,
            crc: u32_at(c, 16),
        })
        .collect();
    let first_position = u64_at(&h, 40);
    if pages
        .first()
        .is_some_and(|p| p.first_position != first_position)
        || pages
            .windows(2)
            .any(|w| w[0].first_position >= w[1].first_position)
    {
        return Ok(None);
    }
    Ok(Some(Summary {
        last_log_index: u64_at(&h, 24),
        count,
        first_position,
        last_position: u64_at(&h, 48),
        first_timestamp_ns: u64_at(&h, 56) as i64,
        last_timestamp_ns: u64_at(&h, 64) as i64,
        pages,
    }))
}

/// Reads page `k` of the index in `file`; `Ok(None)` when its bytes do not match the
/// directory (CRC, first position or order).
pub fn read_page(
    file: &dyn FsFile,
    summary: &Summary,
    segment_base: u64,
    k: usize,
) -> io::Result<Option<Vec<Entry>>> {
    if summary.pages.get(k).is_none() {
        return Ok(None);
    }
    let mut buf = vec![0u8; summary.page_len(k) * ENTRY_LEN];
    file.read_exact_at(&mut buf, summary.page_offset(k))?;
    Ok(decode_page(&buf, summary, segment_base, k))
}

/// Page `k` of an encoded index held in memory (a sealed segment's index not yet written,
/// see `IndexWrite`), checked as [`read_page`] checks one read from the file.
pub fn page_in(index: &[u8], summary: &Summary, segment_base: u64, k: usize) -> Option<Vec<Entry>> {
    let start = usize::try_from(summary.page_offset(k)).ok()?;
    let buf = index.get(start..start + summary.page_len(k) * ENTRY_LEN)?;
    decode_page(buf, summary, segment_base, k)
}

/// Decodes page `k` from its bytes; `None` unless it matches its CRC and is in order.
fn decode_page(buf: &[u8], summary: &Summary, segment_base: u64, k: usize) -> Option<Vec<Entry>> {
    let dir = summary.pages.get(k)?;
    if crc32fast::hash(buf) != dir.crc {
        return None;
    }
    let entries: Vec<Entry> = buf
        .chunks_exact(ENTRY_LEN)
        .map(|c| Entry {
            position: u64_at(c, 0),
            id: u64_at(c, 8),
            timestamp_ns: u64_at(c, 16) as i64,
            available_at_ms: u64_at(c, 24) as i64,
            body_offset: u64_at(c, 32),
            body_len: u32_at(c, 40),
            body_crc: u32_at(c, 44),
            segment: segment_base,
        })
        .collect();
    let ordered = entries.windows(2).all(|w| w[0].position < w[1].position);
    if !ordered || entries.first().map(|e| e.position) != Some(dir.first_position) {
        return None;
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Fs;
    use crate::simfs::SimFs;
    use std::path::Path;

    fn entry(p: u64) -> Entry {
        Entry {
            position: p,
            id: 100 + p,
            timestamp_ns: 5 + p as i64,
            available_at_ms: 6,
            body_offset: 72 * p,
            body_len: 3,
            body_crc: p as u32,
            segment: 9,
        }
    }

    fn stored(bytes: &[u8]) -> (SimFs, std::sync::Arc<dyn FsFile>) {
        let fs = SimFs::new();
        let f = fs.open(Path::new("/i"), true).unwrap();
        f.append(&[io::IoSlice::new(bytes)]).unwrap();
        (fs, f)
    }

    #[test]
    fn index_round_trips_page_by_page_and_rejects_a_length_mismatch() {
        let entries: Vec<Entry> = (1..=2 * PAGE_ENTRIES as u64 + 7).map(entry).collect();
        let (bytes, encoded) = encode(9, 1000, 12, &entries);
        let (_fs, f) = stored(&bytes);
        let s = read_summary(f.as_ref(), 9, 1000).unwrap().unwrap();
        assert_eq!(s, encoded);
        assert_eq!(s.last_log_index, 12);
        assert_eq!(s.count as usize, entries.len());
        assert_eq!(
            (s.first_position, s.last_position),
            (1, entries.len() as u64)
        );
        assert_eq!(s.pages.len(), 3);
        assert_eq!(s.page_of(PAGE_ENTRIES as u64 + 1), Some(1));
        let mut back = Vec::new();
        for k in 0..3 {
            back.extend(read_page(f.as_ref(), &s, 9, k).unwrap().unwrap());
        }
        assert_eq!(back, entries);
        assert!(read_summary(f.as_ref(), 9, 1001).unwrap().is_none());
        assert!(read_summary(f.as_ref(), 8, 1000).unwrap().is_none());
    }

    #[test]
    fn a_flipped_bit_fails_the_header_directory_or_page_check() {
        let entries: Vec<Entry> = (1..=PAGE_ENTRIES as u64 + 1).map(entry).collect();
        let (bytes, _) = encode(9, 1000, 12, &entries);
        for (at, header_fails) in [(20, true), (HEADER_LEN + 3, true), (bytes.len() - 1, false)] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let (_fs, f) = stored(&bad);
            match read_summary(f.as_ref(), 9, 1000).unwrap() {
                None => assert!(header_fails, "byte {at}"),
                Some(s) => {
                    assert!(!header_fails, "byte {at}");
                    assert!(read_page(f.as_ref(), &s, 9, 0).unwrap().is_some());
                    assert!(read_page(f.as_ref(), &s, 9, 1).unwrap().is_none());
                }
            }
        }
    }
}
