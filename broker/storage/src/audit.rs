//! Audit records of protective eviction (docs/storage-format.md, "Protective eviction audit"): one JSON file per evicted
//! segment, `audit/eviction-<020 created_ms>-<hex topic>-<020 through_position>.json`,
//! written atomically (temp, fsync, rename, fsync dir) *before* anything is deleted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fs::Fs;
use crate::meta::{self, hex};
use crate::{StorageError, io_err};

/// What a protective eviction deleted (or is about to delete).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictionAudit {
    /// Topic name.
    pub topic: String,
    /// First evicted position.
    pub first_position: u64,
    /// Last evicted position.
    pub through_position: u64,
    /// Evicted messages.
    pub messages: u64,
    /// Segment file name.
    pub segment: String,
    /// When the eviction started (ms since the epoch).
    pub created_at_ms: u64,
}

impl EvictionAudit {
    /// The record's file name.
    pub fn file_name(&self) -> String {
        format!(
            "eviction-{:020}-{}-{:020}.json",
            self.created_at_ms,
            hex(&self.topic),
            self.through_position
        )
    }
}

/// Writes `audit` under `<root>/audit/` atomically; returns its path.
pub fn write(fs: &dyn Fs, root: &Path, audit: &EvictionAudit) -> Result<PathBuf, StorageError> {
    let dir = root.join("audit");
    if !fs.exists(&dir) {
        fs.create_dir_all(&dir)
            .map_err(io_err("create directory", &dir))?;
        fs.sync_dir(root).map_err(io_err("fsync directory", root))?;
    }
    let path = dir.join(audit.file_name());
    meta::write_json(fs, &path, audit)?;
    Ok(path)
}

/// Every audit record under `<root>/audit/`, oldest first.
#[cfg(any(test, feature = "test-support"))]
pub fn list(fs: &dyn Fs, root: &Path) -> Result<Vec<EvictionAudit>, StorageError> {
    let dir = root.join("audit");
    if !fs.exists(&dir) {
        return Ok(Vec::new());
    }
    let mut names = fs.list(&dir).map_err(io_err("list", &dir))?;
    names.retain(|n| n.starts_with("eviction-") && n.ends_with(".json"));
    names.sort();
    names
        .iter()
        .map(|n| meta::read_json(fs, &dir.join(n)))
        .collect()
}
