//! `rustqueued storage verify --remote`: the objects of remote-only segments read back from
//! the bucket and checked against what their topic's tiered record says (docs/tiering.md,
//! "Local retention and read-through"). Each object is read in ranges, one at a time, each
//! streamed through the CRC-32C: nothing is held whole in memory, and an outage in the middle
//! costs one range's retries.

use futures::StreamExt;
use rustqueue_storage::offline::RemoteSegmentReport;
use rustqueue_tier::{Bucket, BucketConfig, Checksum, Error, ObjectKey};
use serde::Serialize;

/// The bytes read per request.
const RANGE: u64 = 8 << 20;

/// What the check found for one remote-only segment's object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RemoteCheck {
    /// The local `.rqlog` path the segment had, relative to the data directory.
    pub file: String,
    /// The object's key under the record's prefix.
    pub key: String,
    /// `None` when its size and CRC-32C are the recorded ones; otherwise what is wrong.
    pub problem: Option<String>,
}

/// Reads every object of `segments` from the bucket `config` names and checks it. A segment
/// recorded for another bucket or prefix is reported, not read. `Err` only when the bucket
/// cannot be set up.
pub async fn check_remote_segments(
    config: BucketConfig,
    segments: &[RemoteSegmentReport],
) -> Result<Vec<RemoteCheck>, Error> {
    let bucket = Bucket::new(config.clone())?;
    let mut checks = Vec::with_capacity(segments.len());
    for s in segments {
        let problem = if s.bucket != config.bucket || s.prefix != config.prefix {
            Some(format!(
                "recorded in bucket {} under prefix {:?}, but [tiering] names bucket {} under \
                 prefix {:?}: not read (run with the configuration it was uploaded with)",
                s.bucket, s.prefix, config.bucket, config.prefix
            ))
        } else {
            check_one(&bucket, s).await.err()
        };
        checks.push(RemoteCheck {
            file: s.file.clone(),
            key: s.key.clone(),
            problem,
        });
    }
    Ok(checks)
}

async fn check_one(bucket: &Bucket, s: &RemoteSegmentReport) -> Result<(), String> {
    let key = ObjectKey::new(s.key.clone()).map_err(|e| e.to_string())?;
    // A listing names whole path segments: the object's directory, then the object in it.
    let parent = key.as_str().rsplit_once('/').map(|(dir, _)| dir);
    let listed = bucket.list(parent).await.map_err(|e| e.to_string())?;
    let Some(object) = listed.iter().find(|l| l.key == key) else {
        return Err("missing from the bucket: its messages are lost".into());
    };
    if object.size != s.size {
        return Err(format!(
            "{} bytes in the bucket, {} recorded",
            object.size, s.size
        ));
    }
    let mut read = Checksum::EMPTY;
    let mut at = 0;
    while at < s.size {
        let end = (at + RANGE).min(s.size);
        let mut body = bucket
            .get_range(&key, at..end)
            .await
            .map_err(|e| e.to_string())?;
        while let Some(chunk) = body.next().await {
            read = read.append(&chunk.map_err(|e| e.to_string())?);
        }
        if read.size != end {
            return Err(format!(
                "a read of bytes {at}..{end} ended at {}",
                read.size
            ));
        }
        at = end;
    }
    if read.crc32c != s.crc32c {
        return Err(format!(
            "CRC-32C {:08x} read, {:08x} recorded: the object is damaged",
            read.crc32c, s.crc32c
        ));
    }
    Ok(())
}
