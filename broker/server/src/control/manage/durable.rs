//! The management files are small JSON documents in the data root, each replaced whole with the
//! storage crate's atomic write (temp, fsync, rename, directory fsync): after a crash a reader
//! finds the old document or the new one, never a mix.

use std::path::{Path, PathBuf};

use rustqueue_engine::durable::{read_json, write_json_at};
use rustqueue_engine::{RealFs, StorageError};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The document at `path`, or the default when there is none yet.
pub fn read_or_default<T: DeserializeOwned + Default>(path: &Path) -> Result<T, StorageError> {
    if !path.exists() {
        return Ok(T::default());
    }
    read_json(&RealFs, path)
}

/// Replaces the document at `path` with `value` durably, off the async workers.
/// `failpoint` names the moment between the temp file's fsync and the rename (feature
/// `crash-injection`).
pub async fn write<T: Serialize + Send + 'static>(
    path: PathBuf,
    value: T,
    failpoint: &'static str,
) -> Result<(), StorageError> {
    let file = path.clone();
    tokio::task::spawn_blocking(move || write_json_at(&RealFs, &path, &value, failpoint))
        .await
        .map_err(|e| StorageError::Io {
            op: "write management file",
            file,
            source: std::io::Error::other(e.to_string()),
        })?
}
