//! Storage feature levels and the `/v1/capabilities` document (docs/api.md, "Storage feature
//! levels").
//!
//! The binary reads levels `1..=MAX_STORAGE_FEATURE_LEVEL` and writes up to the same ceiling.
//! The ceiling is a build-time option, `RUSTQUEUE_MAX_STORAGE_FEATURE_LEVEL` (1, 2 or 3,
//! default 3), so tests can build an "older" binary. A process can also lower it at run time with the
//! environment variable [`MAX_FEATURE_LEVEL_ENV`] (a testing/compatibility knob): the binary
//! then reports and enforces the lower ceiling the way an older release would, so one build
//! can play both sides of an upgrade. The data directory's `COMPATIBILITY` file is read through
//! the engine ([`Engine::read_compatibility`]); [`preflight`] refuses a directory behind this binary's
//! rollback fence before the engine opens it.

use std::path::Path;

use rustqueue_api::contract::{BinaryCapabilities, DATA_FORMAT, StorageCapabilities};
use rustqueue_engine::Engine;

/// Lowest storage feature level any build reads.
pub const MIN_STORAGE_FEATURE_LEVEL: u32 = 1;

/// Highest storage feature level this build reads and writes (the storage crate's build-time
/// ceiling, so the reported and the enforced level are one constant).
pub const MAX_STORAGE_FEATURE_LEVEL: u32 = rustqueue_engine::MAX_FEATURE_LEVEL as u32;

/// Environment variable that lowers the feature-level ceiling at run time (1 up to the build's
/// ceiling). See docs/configuration.md.
pub const MAX_FEATURE_LEVEL_ENV: &str = "RUSTQUEUE_MAX_FEATURE_LEVEL";

/// The binary version reported everywhere (`RUSTQUEUE_BUILD_VERSION` at build time, else the
/// crate version).
pub const BINARY_VERSION: &str = match option_env!("RUSTQUEUE_BUILD_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// Errors of the capability checks.
#[derive(Debug, thiserror::Error)]
pub enum CapabilityError {
    /// The configured level is outside what this binary can write.
    #[error("storage feature level {level} is outside this binary's writer range 1..={max}")]
    LevelOutOfRange {
        /// Configured level.
        level: u32,
        /// This binary's ceiling.
        max: u32,
    },
    /// The directory needs a newer reader than this binary.
    #[error(
        "data directory needs reader level {needed} but this binary reads at most {max} (rollback fence); run a newer broker"
    )]
    BehindReaderFence {
        /// `minimum_reader_feature_level` of the directory.
        needed: u32,
        /// This binary's maximum reader level.
        max: u32,
    },
    /// The directory's data format differs.
    #[error("data directory has data format {0}, this binary reads {DATA_FORMAT}")]
    DataFormat(u32),
    /// `COMPATIBILITY` could not be read.
    #[error("reading COMPATIBILITY: {0}")]
    Read(String),
    /// [`MAX_FEATURE_LEVEL_ENV`] is not a level this build can be lowered to.
    #[error(
        "{MAX_FEATURE_LEVEL_ENV}={0:?} is not a feature level in {MIN_STORAGE_FEATURE_LEVEL}..={MAX_STORAGE_FEATURE_LEVEL}"
    )]
    InvalidCeiling(String),
}

/// The ceiling this process reports and enforces: the build's, or the lower one
/// [`MAX_FEATURE_LEVEL_ENV`] sets.
pub fn ceiling() -> Result<u32, CapabilityError> {
    ceiling_from(std::env::var(MAX_FEATURE_LEVEL_ENV).ok().as_deref())
}

fn ceiling_from(value: Option<&str>) -> Result<u32, CapabilityError> {
    let Some(v) = value else {
        return Ok(MAX_STORAGE_FEATURE_LEVEL);
    };
    match v.trim().parse::<u32>() {
        Ok(l) if (MIN_STORAGE_FEATURE_LEVEL..=MAX_STORAGE_FEATURE_LEVEL).contains(&l) => Ok(l),
        _ => Err(CapabilityError::InvalidCeiling(v.to_owned())),
    }
}

/// What this binary supports, given the configured size limits and the [`ceiling`]. An invalid
/// [`MAX_FEATURE_LEVEL_ENV`] reports the lowest level (and [`preflight`] refuses to start).
pub fn binary(max_message_bytes: u64, max_batch_bytes: u64) -> BinaryCapabilities {
    let ceiling = ceiling().unwrap_or(MIN_STORAGE_FEATURE_LEVEL);
    binary_with_ceiling(ceiling, max_message_bytes, max_batch_bytes)
}

fn binary_with_ceiling(
    ceiling: u32,
    max_message_bytes: u64,
    max_batch_bytes: u64,
) -> BinaryCapabilities {
    BinaryCapabilities {
        binary_version: BINARY_VERSION.to_owned(),
        data_format: DATA_FORMAT,
        minimum_reader_feature_level: MIN_STORAGE_FEATURE_LEVEL,
        maximum_reader_feature_level: ceiling,
        maximum_writer_feature_level: ceiling,
        maximum_message_bytes: max_message_bytes,
        maximum_batch_bytes: max_batch_bytes,
    }
}

/// Reads the directory's `COMPATIBILITY` file; `Ok(None)` when it does not exist yet (a
/// fresh directory, created at level 1 on first open).
pub fn read_storage(data_path: &Path) -> Result<Option<StorageCapabilities>, CapabilityError> {
    let Some(c) =
        Engine::read_compatibility(data_path).map_err(|e| CapabilityError::Read(e.to_string()))?
    else {
        return Ok(None);
    };
    Ok(Some(StorageCapabilities {
        data_format: c.data_format,
        active_writer_feature_level: u32::from(c.active_writer_feature_level),
        minimum_reader_feature_level: u32::from(c.minimum_reader_feature_level),
        generation: c.generation,
    }))
}

/// Refuses to start when [`MAX_FEATURE_LEVEL_ENV`] is invalid, the configured level is beyond
/// this binary or the directory is behind its rollback fence. Lowering the active level is
/// refused by the storage layer itself when the engine opens the directory.
pub fn preflight(
    data_path: &Path,
    configured_level: u32,
    binary: &BinaryCapabilities,
) -> Result<(), CapabilityError> {
    ceiling()?;
    if configured_level < binary.minimum_reader_feature_level
        || configured_level > binary.maximum_writer_feature_level
    {
        return Err(CapabilityError::LevelOutOfRange {
            level: configured_level,
            max: binary.maximum_writer_feature_level,
        });
    }
    if let Some(storage) = read_storage(data_path)? {
        if storage.data_format != binary.data_format {
            return Err(CapabilityError::DataFormat(storage.data_format));
        }
        if !storage.readable_by(binary) {
            return Err(CapabilityError::BehindReaderFence {
                needed: storage.minimum_reader_feature_level,
                max: binary.maximum_reader_feature_level,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rustqueue_engine::Compatibility;

    use super::*;

    fn write_compat(dir: &Path, active: u8, min_reader: u8) {
        let c = Compatibility {
            data_format: 7,
            active_writer_feature_level: active,
            minimum_reader_feature_level: min_reader,
            generation: 3,
        };
        std::fs::write(
            dir.join("COMPATIBILITY"),
            serde_json::to_vec_pretty(&c).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn the_reported_ceiling_is_the_one_storage_enforces() {
        assert_eq!(
            MAX_STORAGE_FEATURE_LEVEL,
            u32::from(rustqueue_engine::MAX_FEATURE_LEVEL)
        );
        assert!((1..=3).contains(&MAX_STORAGE_FEATURE_LEVEL));
    }

    #[test]
    fn binary_capabilities_report_the_ceiling_and_limits() {
        let b = binary(100, 200);
        assert_eq!(b.maximum_reader_feature_level, MAX_STORAGE_FEATURE_LEVEL);
        assert_eq!(b.maximum_writer_feature_level, MAX_STORAGE_FEATURE_LEVEL);
        assert_eq!(b.minimum_reader_feature_level, 1);
        assert_eq!((b.maximum_message_bytes, b.maximum_batch_bytes), (100, 200));
        assert_eq!(b.data_format, 7);
    }

    #[test]
    fn the_ceiling_can_only_be_lowered_at_run_time() {
        assert_eq!(ceiling_from(None).unwrap(), MAX_STORAGE_FEATURE_LEVEL);
        assert_eq!(ceiling_from(Some("1")).unwrap(), 1);
        assert_eq!(
            ceiling_from(Some(&MAX_STORAGE_FEATURE_LEVEL.to_string())).unwrap(),
            MAX_STORAGE_FEATURE_LEVEL
        );
        let above = (MAX_STORAGE_FEATURE_LEVEL + 1).to_string();
        for bad in ["0", above.as_str(), "two", ""] {
            let err = ceiling_from(Some(bad)).unwrap_err();
            assert!(
                matches!(err, CapabilityError::InvalidCeiling(_)),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(MAX_FEATURE_LEVEL_ENV), "{err}");
        }
    }

    #[test]
    fn a_lowered_ceiling_is_reported_and_enforced_like_an_older_build() {
        let old = binary_with_ceiling(1, 10, 20);
        assert_eq!(old.maximum_reader_feature_level, 1);
        assert_eq!(old.maximum_writer_feature_level, 1);
        assert_eq!(old.minimum_reader_feature_level, 1);
        let dir = tempfile::tempdir().unwrap();
        preflight(dir.path(), 1, &old).unwrap();
        assert!(matches!(
            preflight(dir.path(), 2, &old).unwrap_err(),
            CapabilityError::LevelOutOfRange { level: 2, max: 1 }
        ));
        write_compat(dir.path(), 2, 2);
        assert!(matches!(
            preflight(dir.path(), 1, &old).unwrap_err(),
            CapabilityError::BehindReaderFence { needed: 2, max: 1 }
        ));
    }

    #[test]
    fn the_compatibility_file_is_read_with_storage_types() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_storage(dir.path()).unwrap(), None);
        write_compat(dir.path(), 1, 1);
        let s = read_storage(dir.path()).unwrap().unwrap();
        assert_eq!(s.active_writer_feature_level, 1);
        assert_eq!(s.generation, 3);
    }

    #[test]
    fn preflight_refuses_a_directory_behind_the_reader_fence() {
        let dir = tempfile::tempdir().unwrap();
        let old = BinaryCapabilities {
            maximum_reader_feature_level: 1,
            maximum_writer_feature_level: 1,
            ..binary(1, 1)
        };
        preflight(dir.path(), 1, &old).unwrap();
        write_compat(dir.path(), 2, 2);
        let err = preflight(dir.path(), 1, &old).unwrap_err();
        assert!(
            matches!(
                err,
                CapabilityError::BehindReaderFence { needed: 2, max: 1 }
            ),
            "{err}"
        );
        assert!(matches!(
            preflight(dir.path(), 2, &old).unwrap_err(),
            CapabilityError::LevelOutOfRange { level: 2, max: 1 }
        ));
        let new = BinaryCapabilities {
            maximum_reader_feature_level: 2,
            maximum_writer_feature_level: 2,
            ..binary(1, 1)
        };
        preflight(dir.path(), 2, &new).unwrap();
    }

    #[test]
    fn the_contract_and_storage_agree_on_the_level_local_retention_needs() {
        assert_eq!(
            rustqueue_api::contract::LOCAL_RETENTION_FEATURE_LEVEL,
            u32::from(rustqueue_engine::LOCAL_RETENTION_LEVEL)
        );
    }

    #[test]
    fn a_release_reading_up_to_level_two_refuses_a_directory_fenced_for_local_retention() {
        let dir = tempfile::tempdir().unwrap();
        write_compat(dir.path(), 3, 3);
        let older = binary_with_ceiling(2, 10, 20);
        assert!(matches!(
            preflight(dir.path(), 2, &older).unwrap_err(),
            CapabilityError::BehindReaderFence { needed: 3, max: 2 }
        ));
        preflight(dir.path(), 3, &binary_with_ceiling(3, 10, 20)).unwrap();
    }
}
