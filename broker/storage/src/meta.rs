//! Small JSON metadata files and the atomic write they share.
//!
//! `FORMAT`, `COMPATIBILITY`, `broker.meta` and each topic `manifest` are replaced with
//! [`atomic_write`]: write a temp file, full fsync, rename over the target, fsync the directory.
//! A crash leaves either the old or the new file, never a mix.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::failpoint::crash_failpoint;
use crate::fs::Fs;
use crate::{StorageError, io_err};

/// Storage format version written to `FORMAT`.
pub const FORMAT_VERSION: u32 = 7;
/// Message-id sequences are reserved durably in blocks of this size.
pub const ID_BLOCK: u64 = 1 << 20;
/// Largest sequence number; ids are `node_id << 48 | sequence`.
pub const MAX_SEQUENCE: u64 = (1 << 48) - 1;
/// Metadata files larger than this are refused.
pub const MAX_META_BYTES: usize = 64 << 20;

/// Contents of `FORMAT`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FormatFile {
    /// Always [`FORMAT_VERSION`].
    pub version: u32,
}

/// Contents of `COMPATIBILITY`: the feature-level fence.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Compatibility {
    /// Always [`FORMAT_VERSION`].
    pub data_format: u32,
    /// Highest feature level any writer has used on this directory.
    pub active_writer_feature_level: u8,
    /// Oldest binary feature level allowed to read it.
    pub minimum_reader_feature_level: u8,
    /// Bumped on every change.
    pub generation: u64,
}

/// Contents of `broker.meta`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BrokerMeta {
    /// Always [`FORMAT_VERSION`].
    pub format: u32,
    /// Node id this directory belongs to.
    pub node_id: u16,
    /// First sequence not yet reserved: restarts resume here, so ids are never reused.
    pub next_sequence: u64,
    /// Bumped on open and on every topic/channel create or delete.
    pub registry_revision: u64,
}

/// Contents of a topic `manifest`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Always [`FORMAT_VERSION`].
    pub format: u32,
    /// Topic name (the directory is its hex encoding).
    pub name: String,
    /// Whether deliveries are paused.
    pub paused: bool,
    /// A deleted topic found at startup is removed.
    pub deleted: bool,
    /// Lower bound for the next position (positions are never reused, even after GC).
    pub next_position: u64,
    /// Present while the topic has no durable channel: GC never deletes from here on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrouted_from_position: Option<u64>,
}

impl Manifest {
    /// The manifest of a newly created topic: nothing published yet, and no durable channel,
    /// so GC keeps everything from position 1 until a channel routes it.
    pub fn new(name: impl Into<String>) -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            name: name.into(),
            paused: false,
            deleted: false,
            next_position: 1,
            unrouted_from_position: Some(1),
        }
    }
}

/// Writes `bytes` to `path` atomically (temp, fsync, rename, fsync dir).
pub fn atomic_write(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    atomic_write_at(fs, path, bytes, "meta_after_file_fsync_before_rename")
}

/// [`atomic_write`] with a named failpoint between the temp fsync and the rename.
pub fn atomic_write_at(
    fs: &dyn Fs,
    path: &Path,
    bytes: &[u8],
    failpoint: &str,
) -> Result<(), StorageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    if fs.exists(&tmp) {
        fs.remove_file(&tmp)
            .map_err(io_err("remove stale temp", &tmp))?;
    }
    let f = fs.open(&tmp, true).map_err(io_err("create", &tmp))?;
    f.append(&[std::io::IoSlice::new(bytes)])
        .map_err(io_err("write", &tmp))?;
    f.sync_all().map_err(io_err("fsync", &tmp))?;
    crash_failpoint(failpoint);
    fs.rename(&tmp, path).map_err(io_err("rename", path))?;
    fs.sync_dir(dir).map_err(io_err("fsync directory", dir))?;
    Ok(())
}

/// Serializes `value` as JSON and writes it atomically.
pub fn write_json<T: Serialize>(fs: &dyn Fs, path: &Path, value: &T) -> Result<(), StorageError> {
    write_json_at(fs, path, value, "meta_after_file_fsync_before_rename")
}

/// [`write_json`] with a named failpoint between the temp fsync and the rename.
pub fn write_json_at<T: Serialize>(
    fs: &dyn Fs,
    path: &Path,
    value: &T,
    failpoint: &str,
) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| StorageError::Corrupt {
        file: path.to_path_buf(),
        offset: 0,
        detail: format!("cannot encode: {e}"),
    })?;
    atomic_write_at(fs, path, &bytes, failpoint)
}

/// The `COMPATIBILITY` file of a data directory, read before opening it (capabilities and the
/// rollback fence); `Ok(None)` for a fresh directory without one.
pub fn read_compatibility(fs: &dyn Fs, root: &Path) -> Result<Option<Compatibility>, StorageError> {
    let path = root.join("COMPATIBILITY");
    match read_meta(fs, &path)? {
        MetaRead::Missing => Ok(None),
        MetaRead::Intact(c) | MetaRead::FromTemp(c, _) => Ok(Some(c)),
        MetaRead::Damaged(detail) => Err(StorageError::Incompatible(compatibility_damaged(
            &path, &detail,
        ))),
    }
}

/// The refusal when `COMPATIBILITY` is damaged with nothing whole to replace it.
pub fn compatibility_damaged(path: &Path, detail: &str) -> String {
    format!(
        "{} is damaged ({detail}): the feature-level fence of this data directory cannot be \
         read, and it is not derivable from the data. Restore the file from a backup, or stop \
         every broker on this directory and run `rustqueued storage repair \
         --rebuild-compatibility --feature-level <L>` with L the feature level the broker last \
         ran with (storage.feature_level; 1 unless it was raised; without --feature-level, \
         repair writes the lowest level the stored records need). See docs/operations.md",
        path.display()
    )
}

/// The refusal when `COMPATIBILITY` is missing from a directory that holds data.
pub fn compatibility_missing(path: &Path) -> String {
    format!(
        "{} is missing while the directory holds data (broker.meta, topics): the feature-level \
         fence is not recreated at level 1, since the stored data may need level 2 or 3. Restore \
         the file from a backup, or stop every broker on this directory and run `rustqueued \
         storage repair --rebuild-compatibility --feature-level <L>` with L the feature level \
         the broker last ran with (without --feature-level, repair writes the lowest level the \
         stored records need). See docs/operations.md",
        path.display()
    )
}

/// Whether `root` already holds a broker's data: `broker.meta` (or its temp, both written
/// after `COMPATIBILITY` at the first start) or a topic.
pub fn holds_data(fs: &dyn Fs, root: &Path) -> Result<bool, StorageError> {
    let bm = root.join("broker.meta");
    if fs.exists(&bm) || fs.exists(&temp_sibling(&bm)) {
        return Ok(true);
    }
    let topics = root.join("topics");
    Ok(fs.exists(&topics)
        && !fs
            .list(&topics)
            .map_err(crate::io_err("list", &topics))?
            .is_empty())
}

/// The refusal when `broker.meta` is damaged or missing with nothing whole to replace it.
pub fn broker_meta_damaged(path: &Path, detail: &str) -> String {
    format!(
        "{} is damaged ({detail}): the node id and the message-id sequence of this data \
         directory cannot be read, and a node id is never guessed. Restore the file from a \
         backup, or, if this directory belongs to the configured node, stop the broker and run \
         `rustqueued storage repair --rebuild-broker-meta --node-id <N>`: it checks that every \
         stored message id is node N's and resumes ids past the highest stored one. See \
         docs/operations.md",
        path.display()
    )
}

/// Reads and parses a JSON metadata file.
pub fn read_json<T: DeserializeOwned>(fs: &dyn Fs, path: &Path) -> Result<T, StorageError> {
    let bytes = fs.read(path).map_err(io_err("read", path))?;
    if bytes.len() > MAX_META_BYTES {
        return Err(StorageError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            detail: "metadata file too large".into(),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| StorageError::Corrupt {
        file: path.to_path_buf(),
        offset: e.column() as u64,
        detail: format!("invalid JSON: {e}"),
    })
}

/// Key of the checksum in `FORMAT`, `COMPATIBILITY`, `broker.meta` and each manifest: CRC-32C
/// of the file's compact JSON without this key.
pub(crate) const CHECKSUM: &str = "crc32c";

fn value_crc(value: &serde_json::Value) -> u32 {
    crc32c::crc32c(&serde_json::to_vec(value).unwrap_or_default())
}

/// Writes `value` as JSON with its checksum, atomically.
pub fn write_checked<T: Serialize>(
    fs: &dyn Fs,
    path: &Path,
    value: &T,
) -> Result<(), StorageError> {
    write_checked_at(fs, path, value, "meta_after_file_fsync_before_rename")
}

/// [`write_checked`] with a named failpoint between the temp fsync and the rename.
pub fn write_checked_at<T: Serialize>(
    fs: &dyn Fs,
    path: &Path,
    value: &T,
    failpoint: &str,
) -> Result<(), StorageError> {
    let bad = |e: serde_json::Error| StorageError::Corrupt {
        file: path.to_path_buf(),
        offset: 0,
        detail: format!("cannot encode: {e}"),
    };
    let mut json = serde_json::to_value(value).map_err(bad)?;
    let crc = value_crc(&json);
    if let serde_json::Value::Object(map) = &mut json {
        map.insert(CHECKSUM.into(), crc.into());
    }
    let bytes = serde_json::to_vec_pretty(&json).map_err(bad)?;
    atomic_write_at(fs, path, &bytes, failpoint)
}

/// Reads a file written by [`write_checked`]; `Corrupt` when it does not parse or fails its
/// checksum (a file written before the checksum existed has none and is taken as it is: the
/// root metadata files and the manifests; see [`read_checked_strict`] for the others).
pub fn read_checked<T: DeserializeOwned>(fs: &dyn Fs, path: &Path) -> Result<T, StorageError> {
    read_checked_as(fs, path, false)
}

/// [`read_checked`] for a kind of file that never existed without its checksum (the tiered
/// record, `tiering.volume`): one without it is damage, such as a flipped bit in the key.
pub fn read_checked_strict<T: DeserializeOwned>(
    fs: &dyn Fs,
    path: &Path,
) -> Result<T, StorageError> {
    read_checked_as(fs, path, true)
}

fn read_checked_as<T: DeserializeOwned>(
    fs: &dyn Fs,
    path: &Path,
    required: bool,
) -> Result<T, StorageError> {
    let mut value: serde_json::Value = read_json(fs, path)?;
    let bad = |detail: String| StorageError::Corrupt {
        file: path.to_path_buf(),
        offset: 0,
        detail,
    };
    let stored = match &mut value {
        serde_json::Value::Object(map) => map.remove(CHECKSUM),
        _ => None,
    };
    match stored {
        Some(stored) => {
            let crc = value_crc(&value);
            if stored.as_u64() != Some(u64::from(crc)) {
                return Err(bad("checksum mismatch".into()));
            }
        }
        None if required => return Err(bad(format!("no `{CHECKSUM}` key (its checksum)"))),
        None => {}
    }
    serde_json::from_value(value).map_err(|e| bad(format!("invalid content: {e}")))
}

/// Writes a topic manifest atomically, with its checksum.
pub fn write_manifest(fs: &dyn Fs, path: &Path, m: &Manifest) -> Result<(), StorageError> {
    write_checked(fs, path, m)
}

/// Reads a topic manifest; `Corrupt` when it does not parse or fails its checksum.
pub fn read_manifest(fs: &dyn Fs, path: &Path) -> Result<Manifest, StorageError> {
    read_checked(fs, path)
}

/// The atomic-write temp sibling of `path` (`<name>.tmp`).
pub fn temp_sibling(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    tmp.into()
}

/// What reading one of the root metadata files found.
#[derive(Debug)]
pub enum MetaRead<T> {
    /// No such file.
    Missing,
    /// The file, intact.
    Intact(T),
    /// The file is damaged, but its atomic-write temp sibling is whole and passes its
    /// checksum: an interrupted replacement of it, to be completed (renamed over it).
    FromTemp(T, String),
    /// The file is damaged and nothing whole replaces it.
    Damaged(String),
}

impl<T> MetaRead<T> {
    /// The content, if there is a trustworthy one.
    pub fn content(&self) -> Option<&T> {
        match self {
            MetaRead::Intact(t) | MetaRead::FromTemp(t, _) => Some(t),
            _ => None,
        }
    }
}

/// Reads `FORMAT`, `COMPATIBILITY` or `broker.meta` (see [`MetaRead`]); a read error other
/// than damage is returned as it is.
pub fn read_meta<T: DeserializeOwned>(
    fs: &dyn Fs,
    path: &Path,
) -> Result<MetaRead<T>, StorageError> {
    if !fs.exists(path) {
        return Ok(MetaRead::Missing);
    }
    match read_checked(fs, path) {
        Ok(t) => Ok(MetaRead::Intact(t)),
        Err(StorageError::Corrupt { detail, .. }) => {
            let tmp = temp_sibling(path);
            // Only a temp with its checksum counts: one without could be a torn write.
            let whole = fs.exists(&tmp)
                && fs.read(&tmp).is_ok_and(|b| {
                    serde_json::from_slice::<serde_json::Value>(&b)
                        .is_ok_and(|v| v.get(CHECKSUM).is_some())
                });
            match whole.then(|| read_checked(fs, &tmp)) {
                Some(Ok(t)) => Ok(MetaRead::FromTemp(t, detail)),
                _ => Ok(MetaRead::Damaged(detail)),
            }
        }
        Err(e) => Err(e),
    }
}

/// Lowercase hex of a name (directory and file names on disk).
pub fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Inverse of [`hex`].
pub fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    #[test]
    fn a_strict_read_refuses_a_file_without_its_checksum_and_the_lenient_one_takes_it() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let checked = Path::new("/d/checked");
        write_checked(&fs, checked, &FormatFile { version: 3 }).unwrap();
        let plain = Path::new("/d/plain");
        write_json(&fs, plain, &FormatFile { version: 3 }).unwrap();
        // (path, strict, accepted)
        let cases = [
            (checked, false, true),
            (checked, true, true),
            (plain, false, true),
            (plain, true, false),
        ];
        for (path, strict, accepted) in cases {
            let got: Result<FormatFile, _> = if strict {
                read_checked_strict(&fs, path)
            } else {
                read_checked(&fs, path)
            };
            assert_eq!(
                got.is_ok(),
                accepted,
                "{} strict={strict}: {got:?}",
                path.display()
            );
            if let Err(e) = got {
                assert!(e.to_string().contains("crc32c"), "{e}");
            }
        }
    }

    #[test]
    fn names_round_trip_through_hex() {
        assert_eq!(hex("ab.c"), "61622e63");
        assert_eq!(unhex("61622e63").as_deref(), Some("ab.c"));
        assert_eq!(unhex("6"), None);
    }

    #[test]
    fn atomic_write_leaves_old_or_new_content_after_a_crash_at_any_step() {
        for step in 0..6 {
            let fs = SimFs::new();
            let p = Path::new("/d/m.json");
            fs.create_dir_all(Path::new("/d")).unwrap();
            write_json(&fs, p, &FormatFile { version: 1 }).unwrap();
            fs.fail_after(step);
            let ok = write_json(&fs, p, &FormatFile { version: 2 }).is_ok();
            fs.crash(&mut |n| n);
            let got: FormatFile = read_json(&fs, p).unwrap();
            assert!(
                got.version == 2 || (!ok && got.version == 1),
                "step {step}: {got:?}"
            );
        }
    }
}
