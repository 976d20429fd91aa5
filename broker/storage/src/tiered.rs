//! The durable record of a topic's sealed segments that were uploaded to the bucket
//! (`topics/<hex topic>/tiered`, docs/storage-format.md "Tiered record").
//!
//! The uploader writes it only after every object of a segment is stored in the bucket with
//! its checksum, so a crash before the write means the segment is uploaded again, never a
//! record without its objects. It is replaced whole by the checksummed atomic write
//! ([`meta::write_checked`]): a crash leaves the old record or the new one.
//!
//! It is also the durable word on which segments are *remote-only*: local retention marks a
//! segment `evicted` here before it deletes the local `.rqlog`, so a crash in between leaves a
//! segment the record calls evicted (the open finishes the deletion), and a `.rqlog` missing
//! that the record does not call evicted is damage, never taken for a remote copy.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fs::Fs;
use crate::{StorageError, meta};

/// The record's file name inside a topic directory.
pub const TIERED_FILE: &str = "tiered";
/// The version of the record's layout. 2 added `incarnation`; a format-1 record (written
/// before it, its objects under keys without one) is still read, and started over by the
/// uploader. 3 added a segment's `evicted` (its local `.rqlog` was removed): a build that
/// reads only 2 refuses the record rather than taking an evicted segment's absence for loss.
pub const TIERED_FORMAT: u32 = 3;

/// One object in the bucket: a file of a sealed segment as uploaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredObject {
    /// Its key, relative to the bucket prefix of the record.
    pub key: String,
    /// Its length in bytes.
    pub size: u64,
    /// CRC-32C of its bytes (also recorded as the object's metadata).
    pub crc32c: u32,
}

/// A sealed segment whose files are all in the bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredSegment {
    /// The segment's base log index (its file name).
    pub base: u64,
    /// Its objects: the `.rqlog`, then the `.rqidx`.
    pub objects: Vec<TieredObject>,
    /// Its local `.rqlog` was removed by local retention (or is about to be: the record is
    /// written first): it is read from the bucket. Its `.rqidx` stays on the volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
}

impl TieredSegment {
    /// Its `.rqlog` object (the first one).
    pub fn log_object(&self) -> Option<&TieredObject> {
        self.objects.first()
    }
}

/// What a topic has in the bucket. Segments are in base order, each listed once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieredRecord {
    /// Always [`TIERED_FORMAT`].
    pub format: u32,
    /// The topic.
    pub topic: String,
    /// The bucket the objects are in.
    pub bucket: String,
    /// The key prefix of the bucket configuration (`None`: the bucket's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// This life of the topic: chosen when the record is started, part of every object key,
    /// so a topic deleted and created again never writes over (nor restores) the objects of
    /// the one before. `None` only in a format-1 record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// The uploaded segments.
    pub segments: Vec<TieredSegment>,
}

impl TieredRecord {
    /// An empty record for `topic` in `bucket` under `prefix`, for its life `incarnation`.
    pub fn new(
        topic: impl Into<String>,
        bucket: impl Into<String>,
        prefix: Option<String>,
        incarnation: impl Into<String>,
    ) -> Self {
        Self {
            format: TIERED_FORMAT,
            topic: topic.into(),
            bucket: bucket.into(),
            prefix,
            incarnation: Some(incarnation.into()),
            segments: Vec::new(),
        }
    }

    /// Whether the segment `base` is recorded as uploaded.
    pub fn contains(&self, base: u64) -> bool {
        self.segments
            .binary_search_by_key(&base, |s| s.base)
            .is_ok()
    }

    /// The segment `base`, when recorded.
    pub fn get(&self, base: u64) -> Option<&TieredSegment> {
        let i = self.segments.binary_search_by_key(&base, |s| s.base).ok()?;
        self.segments.get(i)
    }

    /// Marks the recorded segment `base` as evicted; `false` when it is not recorded.
    pub fn mark_evicted(&mut self, base: u64) -> bool {
        match self.segments.binary_search_by_key(&base, |s| s.base) {
            Ok(i) => {
                self.segments[i].evicted = true;
                true
            }
            Err(_) => false,
        }
    }

    /// Drops the segment `base` from the record (its objects were deleted from the bucket).
    pub fn remove(&mut self, base: u64) {
        if let Ok(i) = self.segments.binary_search_by_key(&base, |s| s.base) {
            self.segments.remove(i);
        }
    }

    /// The evicted segments' `.rqlog` objects, by base: what a log reads from the bucket.
    pub fn remote_segments(&self) -> std::collections::BTreeMap<u64, crate::RemoteSegment> {
        self.segments
            .iter()
            .filter(|s| s.evicted)
            .filter_map(|s| {
                let o = s.log_object()?;
                Some((
                    s.base,
                    crate::RemoteSegment {
                        key: o.key.clone(),
                        size: o.size,
                    },
                ))
            })
            .collect()
    }

    /// Records `segment` (replacing an entry of the same base), keeping base order.
    pub fn insert(&mut self, segment: TieredSegment) {
        match self
            .segments
            .binary_search_by_key(&segment.base, |s| s.base)
        {
            Ok(i) => self.segments[i] = segment,
            Err(i) => self.segments.insert(i, segment),
        }
    }
}

/// The record's path in the topic directory `topic_dir`.
pub fn path(topic_dir: &Path) -> PathBuf {
    topic_dir.join(TIERED_FILE)
}

/// Reads a record; `Ok(None)` when there is none, `Corrupt` when it has no checksum or fails
/// it, does not parse, or is of another format. (Every record ever written has a checksum:
/// unlike the older metadata files, one without is damage, such as a flipped bit in the key
/// `crc32c`.)
pub fn read(fs: &dyn Fs, topic_dir: &Path) -> Result<Option<TieredRecord>, StorageError> {
    let path = path(topic_dir);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let record: TieredRecord = meta::read_checked_strict(fs, &path)?;
    if !(1..=TIERED_FORMAT).contains(&record.format) {
        return Err(StorageError::Corrupt {
            file: path,
            offset: 0,
            detail: format!(
                "tiered record format {} (this build reads {TIERED_FORMAT})",
                record.format
            ),
        });
    }
    Ok(Some(record))
}

/// Replaces the record atomically, with its checksum.
pub fn write(fs: &dyn Fs, topic_dir: &Path, record: &TieredRecord) -> Result<(), StorageError> {
    meta::write_checked_at(
        fs,
        &path(topic_dir),
        record,
        "tiered_after_file_fsync_before_rename",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    fn segment(base: u64) -> TieredSegment {
        TieredSegment {
            base,
            objects: vec![TieredObject {
                key: format!("k/{base}"),
                size: base * 10,
                crc32c: base as u32,
            }],
            evicted: false,
        }
    }

    #[test]
    fn segments_stay_in_base_order_and_listed_once() {
        let mut r = TieredRecord::new("t", "b", None, "i1");
        for base in [5, 1, 9, 5] {
            r.insert(segment(base));
        }
        let bases: Vec<u64> = r.segments.iter().map(|s| s.base).collect();
        assert_eq!(bases, [1, 5, 9]);
        assert!(r.contains(5) && !r.contains(2));
    }

    #[test]
    fn an_evicted_segment_is_remote_and_round_trips_while_others_omit_the_flag() {
        let dir = Path::new("/t");
        let fs = SimFs::new();
        fs.create_dir_all(dir).unwrap();
        let mut r = TieredRecord::new("t", "b", None, "i1");
        r.insert(segment(1));
        r.insert(segment(2));
        assert!(r.mark_evicted(1) && !r.mark_evicted(7));
        write(&fs, dir, &r).unwrap();
        let text = String::from_utf8(fs.read(&path(dir)).unwrap()).unwrap();
        assert_eq!(text.matches("evicted").count(), 1, "{text}");
        let back = read(&fs, dir).unwrap().unwrap();
        assert_eq!(back, r);
        let remote = back.remote_segments();
        assert_eq!(remote.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(remote[&1].key, "k/1");
        r.remove(1);
        assert!(r.remote_segments().is_empty() && r.get(2).is_some() && r.get(1).is_none());
    }

    #[test]
    fn a_record_survives_a_crash_at_any_step_as_old_or_new() {
        let dir = Path::new("/t");
        for step in 0..6 {
            let fs = SimFs::new();
            fs.create_dir_all(dir).unwrap();
            let mut old = TieredRecord::new("t", "b", Some("p".into()), "i1");
            old.insert(segment(1));
            write(&fs, dir, &old).unwrap();
            let mut new = old.clone();
            new.insert(segment(2));
            fs.fail_after(step);
            let ok = write(&fs, dir, &new).is_ok();
            fs.crash(&mut |n| n);
            let got = read(&fs, dir).unwrap().unwrap();
            assert!(got == new || (!ok && got == old), "step {step}: {got:?}");
        }
    }

    #[test]
    fn a_damaged_or_foreign_record_is_refused_and_a_missing_one_is_none() {
        let fs = SimFs::new();
        let dir = Path::new("/t");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(read(&fs, dir).unwrap(), None);
        let mut r = TieredRecord::new("t", "b", None, "i1");
        r.insert(segment(3));
        write(&fs, dir, &r).unwrap();
        let bytes = fs.read(&path(dir)).unwrap();
        let find = |needle: &[u8]| {
            bytes
                .windows(needle.len())
                .position(|w| w == needle)
                .unwrap()
                + needle.len()
                - 1
        };
        // A value, and the name of the checksum key (which would otherwise read as a record
        // written without one).
        for at in [find(b"\"base\": 3"), find(b"\"crc3")] {
            fs.corrupt(&path(dir), at, b'4');
            assert!(
                matches!(read(&fs, dir), Err(StorageError::Corrupt { .. })),
                "damage at {at}"
            );
            fs.corrupt(&path(dir), at, b'3');
            assert_eq!(read(&fs, dir).unwrap(), Some(r.clone()));
        }
        r.format = 99;
        write(&fs, dir, &r).unwrap();
        let err = read(&fs, dir).unwrap_err().to_string();
        assert!(err.contains("format 99"), "{err}");
    }
}
