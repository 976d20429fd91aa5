//! Errors of the bucket operations: each says which operation on which key failed, and what
//! to do about it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::checksum::Checksum;

/// The bucket operation an error comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `put_file`: a PUT, or a multipart upload's create, part, complete or abort.
    Put,
    /// `get_range`.
    Get,
    /// `verify`.
    Verify,
    /// `list`.
    List,
    /// `delete`.
    Delete,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Put => "upload of",
            Op::Get => "read of",
            Op::Verify => "verification of",
            Op::List => "listing of",
            Op::Delete => "deletion of",
        })
    }
}

/// A failed bucket operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The [`crate::BucketConfig`] cannot work.
    #[error("invalid bucket configuration: {0}")]
    Config(String),
    /// A key or prefix breaks the key rules ([`crate::ObjectKey::new`]).
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The refused key.
        key: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An empty or reversed byte range was asked for.
    #[error("read of {key}: the range {start}..{end} is empty")]
    EmptyRange {
        /// The object.
        key: String,
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
    },
    /// The local file to upload could not be read.
    #[error("{op} {key}: cannot read the local file {}: {source}", path.display())]
    LocalFile {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// The local file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The local file changed between the checksum pass and the upload: nothing was stored.
    #[error(
        "{op} {key}: {} changed while it was uploaded ({before}, then {after}); only sealed, \
         immutable files may be uploaded", path.display()
    )]
    FileChanged {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// The local file.
        path: PathBuf,
        /// The checksum the upload was started with.
        before: Checksum,
        /// The checksum of the bytes actually sent.
        after: Checksum,
    },
    /// The file needs more parts than S3's limit of 10,000.
    #[error(
        "{op} {key}: {size} bytes need more than 10,000 parts of {part_size} bytes; raise the part size"
    )]
    TooLarge {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// The file's size.
        size: u64,
        /// The configured part size.
        part_size: usize,
    },
    /// 401 or 403: the credentials are wrong or lack permission. Not retried.
    #[error(
        "{op} {key}: the bucket refused the request ({source}); check the access key, the \
         secret and the bucket's policy"
    )]
    Denied {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// 404 where the object must exist. Not retried.
    #[error("{op} {key}: no such object in the bucket ({source})")]
    NotFound {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// Any other failure that would fail again the same way (a 400, a malformed answer).
    #[error("{op} {key}: {source}")]
    Refused {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// Transient failures outlasted the retry policy: the bucket is down, unreachable or
    /// overloaded. Safe to retry the whole operation later.
    #[error(
        "{op} {key}: gave up after {attempts} attempts in {elapsed:.1?}, the bucket may be \
         down or unreachable; the last failure: {source}"
    )]
    GaveUp {
        /// The operation.
        op: Op,
        /// The object.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// Time from the first attempt to giving up.
        elapsed: Duration,
        /// The last failure.
        source: object_store::Error,
    },
    /// A streamed read broke off after it had started (the caller may read the rest again).
    #[error("read of {key}: the body broke off: {source}")]
    Stream {
        /// The object.
        key: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// The object carries no CRC-32C metadata: it was not written by [`crate::Bucket::put_file`].
    #[error(
        "verification of {key}: the object has no {} metadata, so it was not uploaded by put_file",
        crate::checksum::CRC32C_METADATA
    )]
    NoChecksum {
        /// The object.
        key: String,
    },
    /// The object's bytes do not match the checksum recorded when it was uploaded: it is
    /// damaged and must not be served.
    #[error("verification of {key}: the object is damaged: recorded {recorded}, read {read}")]
    Corrupt {
        /// The object.
        key: String,
        /// What `put_file` recorded.
        recorded: Checksum,
        /// What the bucket returned.
        read: Checksum,
    },
}

impl Error {
    /// The permanent error for a store failure that [`crate::retry`] will not retry.
    pub(crate) fn from_store(op: Op, key: &str, source: object_store::Error) -> Self {
        let key = key.to_owned();
        if crate::retry::refuses_credentials(&source) {
            return Self::Denied { op, key, source };
        }
        match source {
            object_store::Error::NotFound { .. } => Self::NotFound { op, key, source },
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Self::Denied { op, key, source },
            source => Self::Refused { op, key, source },
        }
    }

    /// Whether retrying the same operation later may succeed: the bucket was unreachable or a
    /// read broke off. Everything else fails again the same way.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::GaveUp { .. } | Self::Stream { .. })
    }
}
