//! What a [`crate::Bucket`] is built from. Plain data: the future `[tiering]` section of the
//! broker configuration will fill it (credentials read from files or the environment).

use std::fmt;

use crate::http::Timeouts;
use crate::retry::RetryPolicy;

/// The smallest part S3 accepts, for every part but the last.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;
/// The default part size: files larger than this are uploaded in parts of this size.
pub const DEFAULT_PART_SIZE: usize = 8 * 1024 * 1024;

/// An access key pair for SigV4 signing.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key. Never printed: `Debug` shows it redacted.
    pub secret_access_key: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// Where the bucket is and how to talk to it.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The S3 endpoint, `https://host:port` (path-style requests: `endpoint/bucket/key`).
    pub endpoint: String,
    /// The region requests are signed for (`us-east-1` for most S3-compatible servers).
    pub region: String,
    /// The bucket's name. It must exist: this layer never creates buckets.
    pub bucket: String,
    /// Every key is stored under this prefix (`cluster/broker-0`), or at the root when `None`.
    /// Checked with the key rules ([`crate::ObjectKey::new`]).
    pub prefix: Option<String>,
    /// The access key pair.
    pub credentials: Credentials,
    /// Whether an `http://` endpoint is accepted. Off, only `https://` is: the credentials'
    /// signatures and the data would cross the network in clear.
    pub allow_http: bool,
    /// Files larger than this are uploaded in parts of this size (at least [`MIN_PART_SIZE`]).
    pub part_size: usize,
    /// When to retry, and when to give up.
    pub retry: RetryPolicy,
    /// Connect and request timeouts.
    pub timeouts: Timeouts,
}

impl BucketConfig {
    /// A configuration with the defaults: 8 MiB parts, [`RetryPolicy::default`],
    /// [`Timeouts::default`], `https://` only, no prefix.
    pub fn new(
        endpoint: impl Into<String>,
        region: impl Into<String>,
        bucket: impl Into<String>,
        credentials: Credentials,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            region: region.into(),
            bucket: bucket.into(),
            prefix: None,
            credentials,
            allow_http: false,
            part_size: DEFAULT_PART_SIZE,
            retry: RetryPolicy::default(),
            timeouts: Timeouts::default(),
        }
    }

    /// Why this configuration cannot work, or `None`.
    pub(crate) fn problem(&self) -> Option<String> {
        let scheme_ok = self.endpoint.starts_with("https://")
            || (self.allow_http && self.endpoint.starts_with("http://"));
        if !scheme_ok {
            return Some(if self.endpoint.starts_with("http://") {
                format!(
                    "the endpoint {} is plain http; use https, or allow_http for a test server",
                    self.endpoint
                )
            } else {
                format!("the endpoint {:?} is not an https:// URL", self.endpoint)
            });
        }
        if self.bucket.is_empty() {
            return Some("the bucket name is empty".into());
        }
        if self.region.is_empty() {
            return Some("the region is empty (most S3-compatible servers take us-east-1)".into());
        }
        if self.credentials.access_key_id.is_empty()
            || self.credentials.secret_access_key.is_empty()
        {
            return Some("the access key id or the secret is empty".into());
        }
        if self.part_size < MIN_PART_SIZE {
            return Some(format!(
                "the part size {} is below S3's minimum of {MIN_PART_SIZE} bytes",
                self.part_size
            ));
        }
        if self.retry.max_attempts == 0 {
            return Some("the retry policy allows no attempt at all (max_attempts = 0)".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BucketConfig {
        BucketConfig::new(
            "https://s3.example.test",
            "us-east-1",
            "b",
            Credentials {
                access_key_id: "AK".into(),
                secret_access_key: "very-secret".into(),
            },
        )
    }

    #[test]
    fn configurations_that_cannot_work_are_refused_with_the_reason() {
        type Edit = fn(&mut BucketConfig);
        let cases: &[(Edit, Option<&str>)] = &[
            (|_| {}, None),
            (
                |c| c.endpoint = "http://127.0.0.1:9000".into(),
                Some("plain http"),
            ),
            (
                |c| {
                    c.endpoint = "http://127.0.0.1:9000".into();
                    c.allow_http = true;
                },
                None,
            ),
            (
                |c| c.endpoint = "s3.example.test".into(),
                Some("not an https:// URL"),
            ),
            (|c| c.bucket.clear(), Some("bucket name is empty")),
            (|c| c.region.clear(), Some("region is empty")),
            (
                |c| c.credentials.secret_access_key.clear(),
                Some("secret is empty"),
            ),
            (
                |c| c.part_size = MIN_PART_SIZE - 1,
                Some("below S3's minimum"),
            ),
            (|c| c.part_size = MIN_PART_SIZE, None),
            (|c| c.retry.max_attempts = 0, Some("no attempt at all")),
        ];
        for (i, (edit, want)) in cases.iter().enumerate() {
            let mut c = config();
            edit(&mut c);
            match (c.problem(), want) {
                (None, None) => {}
                (Some(problem), Some(want)) => {
                    assert!(problem.contains(want), "case {i}: {problem}")
                }
                (got, want) => panic!("case {i}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_secret_is_never_printed() {
        let printed = format!("{:?}", config());
        assert!(!printed.contains("very-secret"), "{printed}");
        assert!(printed.contains("<redacted>"));
    }
}
