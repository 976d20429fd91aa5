//! The durable intent to delete a deleted topic's objects from the bucket
//! (`tiered-deleted/<hex topic>.<incarnation>`, docs/storage-format.md "Deleted incarnations").
//!
//! Written before the topic's directory (and its tiered record) is removed, and removed only
//! once every object under the incarnation's key prefix is deleted: a crash or a restart in
//! between leaves the file, and the uploader finishes the deletion after the next start. An
//! incarnation is never reused, so deleting everything under its prefix touches no other life
//! of the topic.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fs::Fs;
use crate::meta::{self, hex};
use crate::{StorageError, io_err};

/// The directory of the data directory holding them.
pub const DELETED_DIR: &str = "tiered-deleted";
/// The layout's version.
pub const DELETED_FORMAT: u32 = 1;

/// A deleted topic's life whose objects are still in the bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletedIncarnation {
    /// Always [`DELETED_FORMAT`].
    pub format: u32,
    /// The topic.
    pub topic: String,
    /// The bucket its objects are in (the tiered record's).
    pub bucket: String,
    /// The key prefix of the bucket configuration (`None`: the bucket's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The life of the topic whose objects go.
    pub incarnation: String,
}

impl DeletedIncarnation {
    /// The intent for the life `record` describes; `None` for a format-1 record (no
    /// incarnation: its keys are not the object layout's of today).
    pub fn of(record: &crate::TieredRecord) -> Option<Self> {
        Some(Self {
            format: DELETED_FORMAT,
            topic: record.topic.clone(),
            bucket: record.bucket.clone(),
            prefix: record.prefix.clone(),
            incarnation: record.incarnation.clone()?,
        })
    }

    fn file_name(&self) -> String {
        format!("{}.{}", hex(&self.topic), self.incarnation)
    }
}

/// An intent's file, with the intent or the error reading it.
pub type ListedIntent = (PathBuf, Result<DeletedIncarnation, StorageError>);

/// Writes `d` (checksummed, atomic, fsynced, its directory created and synced first).
pub fn write(fs: &dyn Fs, root: &Path, d: &DeletedIncarnation) -> Result<(), StorageError> {
    let dir = root.join(DELETED_DIR);
    if !fs.exists(&dir) {
        fs.create_dir_all(&dir)
            .map_err(io_err("create directory", &dir))?;
        fs.sync_dir(root).map_err(io_err("fsync directory", root))?;
    }
    meta::write_checked_at(
        fs,
        &dir.join(d.file_name()),
        d,
        "tiered_deleted_after_file_fsync_before_rename",
    )
}

/// Every intent in the data directory, with its file: a damaged one as its error (the caller
/// logs it and leaves it).
pub fn list(fs: &dyn Fs, root: &Path) -> Result<Vec<ListedIntent>, StorageError> {
    let dir = root.join(DELETED_DIR);
    if !fs.exists(&dir) {
        return Ok(Vec::new());
    }
    let mut names = fs.list(&dir).map_err(io_err("list", &dir))?;
    names.sort();
    Ok(names
        .into_iter()
        .filter(|n| !n.ends_with(".tmp"))
        .map(|n| {
            let path = dir.join(n);
            let d = meta::read_checked_strict(fs, &path);
            (path, d)
        })
        .collect())
}

/// Removes an intent once its objects are gone.
pub fn remove(fs: &dyn Fs, root: &Path, d: &DeletedIncarnation) -> Result<(), StorageError> {
    let dir = root.join(DELETED_DIR);
    let path = dir.join(d.file_name());
    fs.remove_file(&path).map_err(io_err("remove", &path))?;
    fs.sync_dir(&dir).map_err(io_err("fsync directory", &dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    #[test]
    fn an_intent_round_trips_and_goes() {
        let root = Path::new("/d");
        let fs = SimFs::new();
        fs.create_dir_all(root).unwrap();
        let mut record = crate::TieredRecord::new("t", "b", Some("p".into()), "i1");
        let d = DeletedIncarnation::of(&record).unwrap();
        write(&fs, root, &d).unwrap();
        let listed = list(&fs, root).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].1.as_ref().unwrap(), &d);
        remove(&fs, root, &d).unwrap();
        assert!(list(&fs, root).unwrap().is_empty());
        record.incarnation = None;
        assert_eq!(
            DeletedIncarnation::of(&record),
            None,
            "format 1: nothing to name"
        );
    }
}
