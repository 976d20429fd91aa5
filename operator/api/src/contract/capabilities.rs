//! `GET /v1/capabilities` and `rustqueued --capabilities-output <file>`: what a binary can
//! read and write, and what the PVC it runs on has activated.

use serde::{Deserialize, Serialize};

/// Largest message an old binary that does not report `maximum_message_bytes` accepts.
pub const LEGACY_MAXIMUM_MESSAGE_BYTES: u64 = 32 * 1024 * 1024;
/// Largest batch an old binary that does not report `maximum_batch_bytes` accepts.
pub const LEGACY_MAXIMUM_BATCH_BYTES: u64 = 64 * 1024 * 1024;

/// The storage feature level local retention needs (`tiering.local_retention_bytes` /
/// `_seconds`): a directory at it fences out releases that read tiered record format 2 only
/// and would drop evicted segments. The operator refuses `spec.tiering` local retention below
/// it; the broker's storage crate holds the same number (a server test compares them).
pub const LOCAL_RETENTION_FEATURE_LEVEL: u32 = 3;

/// The whole capabilities document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// What the running binary supports.
    pub binary: BinaryCapabilities,
    /// What the data directory (PVC) has activated.
    pub storage: StorageCapabilities,
}

/// Facts about the binary, independent of any data directory. This is also what the
/// operator's preflight probe Pod writes to its termination log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinaryCapabilities {
    /// Build version string, e.g. `0.1.0`.
    pub binary_version: String,
    /// On-disk data format (always [`super::DATA_FORMAT`] for this generation).
    pub data_format: u32,
    /// Lowest storage feature level this binary can read.
    pub minimum_reader_feature_level: u32,
    /// Highest storage feature level this binary can read.
    pub maximum_reader_feature_level: u32,
    /// Highest storage feature level this binary can write (activate).
    pub maximum_writer_feature_level: u32,
    /// Largest single message the binary accepts.
    #[serde(default = "legacy_message_bytes")]
    pub maximum_message_bytes: u64,
    /// Largest publish batch (MPUB body) the binary accepts.
    #[serde(default = "legacy_batch_bytes")]
    pub maximum_batch_bytes: u64,
}

fn legacy_message_bytes() -> u64 {
    LEGACY_MAXIMUM_MESSAGE_BYTES
}

fn legacy_batch_bytes() -> u64 {
    LEGACY_MAXIMUM_BATCH_BYTES
}

impl BinaryCapabilities {
    /// Whether this binary can open a data directory and write at `level`.
    pub fn supports_level(&self, level: u32) -> bool {
        level >= self.minimum_reader_feature_level
            && level <= self.maximum_reader_feature_level
            && level <= self.maximum_writer_feature_level
    }
}

/// The PVC's `COMPATIBILITY` file as the broker read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageCapabilities {
    /// Data format of the directory.
    pub data_format: u32,
    /// Highest feature level activated on this directory (only ever raised).
    pub active_writer_feature_level: u32,
    /// Lowest reader level a binary needs to open this directory (the rollback fence).
    pub minimum_reader_feature_level: u32,
    /// Bumped each time the active level is raised.
    pub generation: u64,
}

impl StorageCapabilities {
    /// Whether `binary` may open this directory (it is not behind the rollback fence).
    pub fn readable_by(&self, binary: &BinaryCapabilities) -> bool {
        self.data_format == binary.data_format
            && self.minimum_reader_feature_level <= binary.maximum_reader_feature_level
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_binaries_without_size_limits_get_the_legacy_limits() {
        let json = r#"{"binary_version":"0.7.0","data_format":7,
            "minimum_reader_feature_level":1,"maximum_reader_feature_level":1,
            "maximum_writer_feature_level":1}"#;
        let b: BinaryCapabilities = serde_json::from_str(json).unwrap();
        assert_eq!(b.maximum_message_bytes, LEGACY_MAXIMUM_MESSAGE_BYTES);
        assert_eq!(b.maximum_batch_bytes, LEGACY_MAXIMUM_BATCH_BYTES);
    }

    #[test]
    fn capabilities_round_trip_with_wire_names() {
        let caps = Capabilities {
            binary: BinaryCapabilities {
                binary_version: "0.1.0".into(),
                data_format: 7,
                minimum_reader_feature_level: 1,
                maximum_reader_feature_level: 2,
                maximum_writer_feature_level: 2,
                maximum_message_bytes: 104_857_600,
                maximum_batch_bytes: 134_217_728,
            },
            storage: StorageCapabilities {
                data_format: 7,
                active_writer_feature_level: 1,
                minimum_reader_feature_level: 1,
                generation: 1,
            },
        };
        let v = serde_json::to_value(&caps).unwrap();
        assert_eq!(v["binary"]["maximum_writer_feature_level"], 2);
        assert_eq!(v["storage"]["active_writer_feature_level"], 1);
        assert_eq!(serde_json::from_value::<Capabilities>(v).unwrap(), caps);
    }

    #[test]
    fn level_support_needs_reader_and_writer_range() {
        let b = BinaryCapabilities {
            binary_version: "x".into(),
            data_format: 7,
            minimum_reader_feature_level: 1,
            maximum_reader_feature_level: 2,
            maximum_writer_feature_level: 1,
            maximum_message_bytes: 1,
            maximum_batch_bytes: 1,
        };
        assert!(b.supports_level(1));
        assert!(!b.supports_level(2), "readable but not writable");
        assert!(!b.supports_level(0));
        let fenced = StorageCapabilities {
            data_format: 7,
            active_writer_feature_level: 3,
            minimum_reader_feature_level: 3,
            generation: 2,
        };
        assert!(
            !fenced.readable_by(&b),
            "binary is behind the PVC rollback fence"
        );
    }
}
