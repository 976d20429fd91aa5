//! [`Bucket`]: one S3-compatible bucket (and prefix) and the operations tiering needs on it.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::checksum::Checksum;
use crate::config::BucketConfig;
use crate::error::{Error, Op};
use crate::http::Connector;
use crate::key::{ObjectKey, bucket_path, key_of, key_problem};
use crate::retry::{self, RetryPolicy};
use crate::{download, upload};

/// A stream of an object's bytes, in order.
pub type ByteStream = BoxStream<'static, Result<Bytes, Error>>;

/// What `put_file` stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// The checksum recorded with the object (the file's CRC-32C and length).
    pub checksum: Checksum,
    /// Parts of a multipart upload, or 0 for a single PUT.
    pub parts: usize,
    /// Requests that failed transiently and were made again.
    pub retries: u32,
}

/// What `verify` read back: the object matches its recorded checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The checksum, recorded and recomputed alike.
    pub checksum: Checksum,
    /// Requests that failed transiently and were made again.
    pub retries: u32,
}

/// An object found by `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its key, relative to the bucket's prefix.
    pub key: ObjectKey,
    /// Its size in bytes.
    pub size: u64,
}

/// One bucket under one prefix. Cheap to clone; every operation retries transient failures
/// by [`BucketConfig::retry`] and returns permanent ones at once.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub(crate) store: Arc<AmazonS3>,
    pub(crate) prefix: Option<ObjectKey>,
    pub(crate) retry: RetryPolicy,
    /// Attempts that failed and were retried, by this bucket and its clones.
    pub(crate) failed_attempts: Arc<AtomicU64>,
    pub(crate) part_size: usize,
}

impl Bucket {
    /// How many attempts of this bucket's operations (and its clones') have failed and been
    /// retried so far: a bucket that is slow or down shows here before any operation ends.
    pub fn failed_attempts(&self) -> u64 {
        self.failed_attempts.load(Ordering::Relaxed)
    }

    /// Runs one operation on `key` under the bucket's retry policy, counting its failed
    /// attempts in [`Bucket::failed_attempts`]; also returns how many retries it took.
    pub(crate) async fn retried<T, F, Fut>(
        &self,
        op: Op,
        key: &str,
        attempt: F,
    ) -> Result<(T, u32), Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, object_store::Error>>,
    {
        retry::run(&self.retry, &self.failed_attempts, op, key, attempt).await
    }

    /// A client for the bucket `config` names. Checks the configuration, contacts nothing:
    /// a wrong endpoint or credentials show at the first operation.
    pub fn new(config: BucketConfig) -> Result<Self, Error> {
        if let Some(problem) = config.problem() {
            return Err(Error::Config(problem));
        }
        let prefix = config.prefix.map(ObjectKey::new).transpose()?;
        let store = AmazonS3Builder::new()
            .with_endpoint(&config.endpoint)
            .with_region(&config.region)
            .with_bucket_name(&config.bucket)
            .with_access_key_id(&config.credentials.access_key_id)
            .with_secret_access_key(&config.credentials.secret_access_key)
            .with_allow_http(config.allow_http)
            .with_virtual_hosted_style_request(false)
            // crate::retry is the one retry policy: object_store makes each request once.
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .with_http_connector(Connector {
                timeouts: config.timeouts,
            })
            .build()
            .map_err(|error| Error::Config(error.to_string()))?;
        Ok(Self {
            store: Arc::new(store),
            prefix,
            retry: config.retry,
            failed_attempts: Arc::default(),
            part_size: config.part_size,
        })
    }

    /// Uploads the file at `path` as `key`, with its CRC-32C and length as metadata. Files
    /// larger than the part size go up in parts (one at a time, each retried on its own); a
    /// failed multipart upload is aborted, so a new `put_file` starts clean. Replaces an
    /// existing object of that key. The file must not change meanwhile: it is read twice
    /// (checksum, then upload) and a difference fails the upload before it completes.
    pub async fn put_file(&self, key: &ObjectKey, path: &Path) -> Result<Uploaded, Error> {
        upload::put_file(self, key, path).await
    }

    /// Stores `bytes` as `key` in one PUT, with their CRC-32C and length as metadata (small
    /// objects: a checkpoint, a catalog). Replaces an existing object of that key.
    pub async fn put_bytes(&self, key: &ObjectKey, bytes: Bytes) -> Result<Uploaded, Error> {
        upload::put_bytes(self, key, bytes).await
    }

    /// Reads `key` whole into memory, checked against the CRC-32C and length recorded when it
    /// was stored ([`Error::Corrupt`], [`Error::NoChecksum`]). For small objects.
    pub async fn get_verified(&self, key: &ObjectKey) -> Result<(Bytes, Verified), Error> {
        download::get_verified(self, key).await
    }

    /// Writes `key` whole to the local file `path` (created or truncated), checked against
    /// the CRC-32C and length recorded when it was stored: on [`Error::Corrupt`] or
    /// [`Error::NoChecksum`] the file holds the bytes read, which must not be used.
    pub async fn get_file(&self, key: &ObjectKey, path: &Path) -> Result<Verified, Error> {
        download::get_file(self, key, path).await
    }

    /// Streams bytes `range` of `key`. The request is retried until the body starts; if the
    /// body breaks off later the stream ends with [`Error::Stream`] and the caller asks again
    /// for the rest. Bytes are not checked here: `verify` checks whole objects.
    pub async fn get_range(&self, key: &ObjectKey, range: Range<u64>) -> Result<ByteStream, Error> {
        if range.start >= range.end {
            return Err(Error::EmptyRange {
                key: key.to_string(),
                start: range.start,
                end: range.end,
            });
        }
        let path = self.path(key);
        let options = GetOptions::new().with_range(Some(range));
        let (result, _) = self
            .retried(Op::Get, key.as_str(), || {
                self.store.get_opts(&path, options.clone())
            })
            .await?;
        let key = key.to_string();
        Ok(result
            .into_stream()
            .map_err(move |source| Error::Stream {
                key: key.clone(),
                source,
            })
            .boxed())
    }

    /// Reads `key` whole and checks it against the CRC-32C and length recorded at upload:
    /// [`Error::Corrupt`] when they differ, [`Error::NoChecksum`] when nothing was recorded.
    pub async fn verify(&self, key: &ObjectKey) -> Result<Verified, Error> {
        let path = self.path(key);
        let ((recorded, read), retries) = self
            .retried(Op::Verify, key.as_str(), || async {
                let result = self.store.get_opts(&path, GetOptions::new()).await?;
                let recorded = Checksum::from_attributes(&result.attributes);
                let mut read = Checksum::EMPTY;
                let mut body = result.into_stream();
                while let Some(chunk) = body.next().await {
                    read = read.append(&chunk?);
                }
                Ok((recorded, read))
            })
            .await?;
        let key = key.to_string();
        match recorded {
            None => Err(Error::NoChecksum { key }),
            Some(recorded) if recorded != read => Err(Error::Corrupt {
                key,
                recorded,
                read,
            }),
            Some(checksum) => Ok(Verified { checksum, retries }),
        }
    }

    /// Every object whose key starts with the segments of `prefix` (`None`: all of them),
    /// sorted by key. Objects whose names are not valid keys (put there by something else)
    /// are left out.
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<Listed>, Error> {
        let within = match prefix {
            None => None,
            Some(p) => match key_problem(p) {
                None => Some(self.path(&ObjectKey::new(p)?)),
                Some(reason) => {
                    return Err(Error::InvalidKey {
                        key: p.to_owned(),
                        reason,
                    });
                }
            },
        };
        let root = self
            .prefix
            .as_ref()
            .map(|p| object_store::path::Path::from(p.as_str()));
        let scope = within.or(root);
        let (metas, _) = self
            .retried(Op::List, prefix.unwrap_or("every key"), || {
                self.store.list(scope.as_ref()).try_collect::<Vec<_>>()
            })
            .await?;
        let mut listed: Vec<Listed> = metas
            .into_iter()
            .filter_map(|meta| {
                Some(Listed {
                    key: key_of(self.prefix.as_ref(), &meta.location)?,
                    size: meta.size,
                })
            })
            .collect();
        listed.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listed)
    }

    /// Deletes `key`. Deleting a key that does not exist succeeds (S3 answers 204 either
    /// way), so a retried or repeated delete is harmless.
    pub async fn delete(&self, key: &ObjectKey) -> Result<(), Error> {
        let path = self.path(key);
        self.retried(Op::Delete, key.as_str(), || self.store.delete(&path))
            .await?;
        Ok(())
    }

    pub(crate) fn path(&self, key: &ObjectKey) -> object_store::path::Path {
        bucket_path(self.prefix.as_ref(), key)
    }
}
