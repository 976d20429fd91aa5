//! Helpers of the tiering tests: an engine configuration uploading to a real versitygw
//! (`rustqueue_tier::test_server`), and the topic's tiered record and segment files on disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustqueue_engine::{Backoff, EngineConfig, TieringOptions};
use rustqueue_storage::{RealFs, TieredRecord};
use rustqueue_tier::test_server::TestServer;
use rustqueue_tier::{Bucket, BucketConfig, Checksum, RetryPolicy, Timeouts};

/// The bucket prefix of every tiering test.
pub const PREFIX: &str = "cluster-a";

/// The bucket configuration of `server` under [`PREFIX`].
pub fn bucket_config(server: &TestServer) -> BucketConfig {
    server.bucket_config(PREFIX)
}

/// [`bucket_config`] with the bucket's own retries kept short (two attempts) and short
/// timeouts, so an outage shows at once as failed uploads or reads, which the engine must
/// ride out itself.
pub fn impatient(server: &TestServer) -> BucketConfig {
    let mut c = bucket_config(server);
    c.retry = RetryPolicy {
        first_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
        max_attempts: 2,
        max_elapsed: Duration::from_secs(10),
    };
    c.timeouts = Timeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(2),
    };
    c
}

/// 4 KiB segments (a 1 KiB message seals one about every four), GC off for the test's length
/// (a 90 s bootstrap window keeps every segment), tiering on with quick scans and back-off.
pub fn tiered(dir: &Path, bucket: BucketConfig) -> EngineConfig {
    let mut tiering = TieringOptions::new(bucket);
    tiering.scan_interval = Duration::from_millis(50);
    tiering.backoff = Backoff {
        first: Duration::from_millis(100),
        max: Duration::from_secs(1),
    };
    EngineConfig {
        max_segment_bytes: 4_096,
        tiering: Some(tiering),
        ..super::cfg(dir)
    }
}

/// A client of the same bucket and prefix, to look at what the broker uploaded.
pub fn bucket(server: &TestServer) -> Bucket {
    Bucket::new(bucket_config(server)).unwrap()
}

/// The topic `t`'s directory.
pub fn topic_dir(dir: &Path) -> PathBuf {
    dir.join("topics")
        .join(rustqueue_storage::testing::hex("t"))
}

/// The topic `t`'s tiered record (empty when there is none yet).
pub fn record(dir: &Path) -> TieredRecord {
    try_record(dir).unwrap()
}

/// The topic `t`'s tiered record, empty when there is none yet, or the error reading it.
pub fn try_record(dir: &Path) -> Result<TieredRecord, rustqueue_storage::StorageError> {
    let path = topic_dir(dir).join(rustqueue_storage::TIERED_FILE);
    if !path.exists() {
        return Ok(TieredRecord::new("t", "", None, ""));
    }
    rustqueue_storage::testing::read_checked(&RealFs, &path)
}

/// Base log indexes of `t`'s sealed segments on disk (every `.rqlog` with its `.rqidx`).
pub fn sealed_bases(dir: &Path) -> Vec<u64> {
    let segments = topic_dir(dir).join("segments");
    let mut bases: Vec<u64> = std::fs::read_dir(&segments)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let base = name.strip_prefix("segment-")?.strip_suffix(".rqidx")?;
            base.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

/// The CRC-32C and length of a local file.
pub fn checksum(path: &Path) -> Checksum {
    Checksum::of(&std::fs::read(path).unwrap())
}

/// The local files of sealed segment `base`: `.rqlog`, `.rqidx`.
pub fn segment_paths(dir: &Path, base: u64) -> [PathBuf; 2] {
    let segments = topic_dir(dir).join("segments");
    ["rqlog", "rqidx"].map(|ext| segments.join(format!("segment-{base:020}.{ext}")))
}
