//! `rustqueue-tier`: the object-store client layer of tiered storage (docs/tiering.md).
//!
//! Nothing in the broker uses it yet. It is the part the tiering feature builds on: a
//! [`Bucket`] on an S3-compatible server with the few operations tiering needs, each with a
//! checksum and a retry policy that a segment upload can rely on.
//!
//! ```text
//! Bucket ── put_file (PUT, or multipart in 8 MiB parts; CRC-32C + length as metadata)
//!   │       put_bytes · get_verified / get_file (whole objects, checked against that metadata)
//!   │       get_range (streamed) · verify (CRC-32C over the whole object) · list · delete
//!   ├─ retry      transient (connect, reset, timeout, 5xx, 408, 429) vs permanent; back-off
//!   ├─ http       object_store's HTTP client = a rustqueue_api::http_client reqwest (ring TLS)
//!   ├─ key        the key alphabet and `<prefix>/<key>` paths
//!   └─ checksum   the CRC-32C metadata encoding
//! ```
//!
//! object_store (the `aws-base` and `ring` features, no `reqwest` of its own) signs and
//! shapes the S3 requests; this crate chooses the client, the retries and the checks.
//! Tests (feature `test-support`) start a real S3 server with [`test_server`].

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod bucket;
mod checksum;
mod config;
mod download;
mod error;
mod http;
mod key;
pub mod retry;
#[cfg(any(test, feature = "test-support"))]
pub mod test_server;
mod upload;

pub use bucket::{Bucket, ByteStream, Listed, Uploaded, Verified};
pub use checksum::{CRC32C_METADATA, Checksum, SIZE_METADATA};
pub use config::{BucketConfig, Credentials, DEFAULT_PART_SIZE, MIN_PART_SIZE};
pub use error::{Error, Op};
pub use http::{ServerStatus, Timeouts};
pub use key::{MAX_KEY_BYTES, ObjectKey};
pub use retry::RetryPolicy;
