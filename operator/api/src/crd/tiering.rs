//! `spec.tiering`: the brokers' `[tiering]` section (docs/tiering.md), with the bucket's
//! credentials from a Secret. Every field is a key of [`TieringConfig`] with the bounds the
//! broker checks, refused at `kubectl apply` by the schema and the CEL rules below (the bucket
//! name's `..` and the prefix's `.` segments by rule, the rest by the schema).
//!
//! [`TieringConfig`]: crate::broker_config::TieringConfig

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::broker_config::{DEFAULT_CHECKPOINT_UPLOAD_SECONDS, MAX_CHECKPOINT_UPLOAD_SECONDS};

/// The largest `localRetentionSeconds` the broker accepts: ten years.
pub const MAX_LOCAL_RETENTION_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Uploads of sealed segments and checkpoints to an S3-compatible bucket, local retention,
/// and the restore of an empty volume from the bucket before its broker starts.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[x_kube(
    validation = Rule::new("!self.bucket.contains('..')")
        .message("tiering.bucket must not contain '..' (S3 bucket naming rules)"),
    validation = Rule::new("self.allowHttp || self.endpoint.startsWith('https://')")
        .message("tiering.endpoint is plain http: the data and the request signatures would cross the network in clear; use https, or set tiering.allowHttp for a test server on a trusted network"),
    validation = Rule::new("!has(self.prefix) || !self.prefix.split('/').exists(s, s == '.' || s == '..')")
        .message("tiering.prefix must not have a '.' or '..' segment"),
)]
#[serde(rename_all = "camelCase")]
pub struct Tiering {
    /// The bucket's name; it must exist (the broker never creates buckets). S3 naming rules:
    /// 3 to 63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit.
    #[schemars(
        length(min = 3, max = 63),
        regex(pattern = r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
    )]
    pub bucket: String,
    /// The S3 endpoint, `https://host[:port]` (path-style requests).
    #[schemars(length(max = 2048), regex(pattern = r"^https?://[^\s/]+(/\S*)?$"))]
    pub endpoint: String,
    /// The region requests are signed for.
    #[serde(default = "us_east_1")]
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
    /// Keys go under `<prefix>/nodes/<node id>/` (the bucket's root when unset), so several
    /// RustQueues may share a bucket with different prefixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 512),
        regex(pattern = r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    )]
    pub prefix: Option<String>,
    /// Accept a plain `http://` endpoint (a test server on a trusted network).
    #[serde(default)]
    pub allow_http: bool,
    /// The Secret holding the access key pair; mounted into the broker Pods as files, never
    /// copied into the config.
    pub credentials_secret: TieringCredentials,
    /// Seconds a sealed segment waits before it is uploaded; 0 = at once.
    #[serde(default)]
    pub upload_after_seconds: u64,
    /// Seconds between uploads of the topics' checkpoints and the node's catalog (what a
    /// restore counts its losses from).
    #[serde(default = "checkpoint_upload_seconds")]
    #[schemars(range(min = 1, max = MAX_CHECKPOINT_UPLOAD_SECONDS))]
    pub checkpoint_upload_seconds: u64,
    /// Local retention by space: most bytes of sealed segment files kept on each broker's
    /// volume; the oldest uploaded segments' local copies go above it (read from the bucket
    /// since). Unset: every local copy is kept. Once set, tiering stays on (see status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_retention_bytes: Option<u64>,
    /// Local retention by age: an uploaded segment whose newest message is older loses its
    /// local copy. Unset: no age limit. Once set, tiering stays on (see status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_LOCAL_RETENTION_SECONDS))]
    pub local_retention_seconds: Option<u64>,
}

/// Where the bucket's access key pair is: two keys of one Secret in the RustQueue's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TieringCredentials {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key holding the access key id.
    #[serde(default = "access_key_id_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub access_key_id_key: String,
    /// The key holding the secret access key.
    #[serde(default = "secret_access_key_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub secret_access_key_key: String,
}

impl Tiering {
    /// Local retention is set: evicted segments may exist only in the bucket.
    pub fn local_retention(&self) -> bool {
        self.local_retention_bytes.is_some() || self.local_retention_seconds.is_some()
    }
}

fn us_east_1() -> String {
    "us-east-1".into()
}

fn checkpoint_upload_seconds() -> u64 {
    DEFAULT_CHECKPOINT_UPLOAD_SECONDS
}

fn access_key_id_key() -> String {
    "access-key-id".into()
}

fn secret_access_key_key() -> String {
    "secret-access-key".into()
}

impl TieringCredentials {
    /// The Secret `name` with the default keys.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            access_key_id_key: access_key_id_key(),
            secret_access_key_key: secret_access_key_key(),
        }
    }
}
