//! `put_file`: a file into the bucket with its checksum, in one PUT or in parts.
//!
//! The checksum goes into the object's metadata, which S3 takes only when an upload starts, so
//! the file is read twice: once for its CRC-32C and length, once to send it. The bytes sent are
//! checksummed again and compared before the upload is completed, so a file that changed in
//! between is never stored under the first checksum.
//!
//! A multipart upload goes through object_store's low-level `MultipartStore` calls rather than
//! its `WriteMultipart` helper, because only they let a failed part be sent again under the
//! same part number: each part is retried on its own ([`crate::retry`]), so an outage in the
//! middle of a large file costs one part, not the whole file. When the upload fails anyway it
//! is aborted (best effort), and the next `put_file` starts a new one.

use std::path::Path;

use bytes::Bytes;
use object_store::multipart::{MultipartStore, PartId};
use object_store::{
    GetOptions, MultipartId, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
};
use tokio::io::AsyncReadExt;

use crate::bucket::{Bucket, Uploaded};
use crate::checksum::Checksum;
use crate::error::{Error, Op};

/// S3's limit on the parts of one upload.
const MAX_PARTS: u64 = 10_000;
/// The read size of the checksum pass.
const CHECKSUM_CHUNK: usize = 1024 * 1024;

/// Maps an error reading the local file of an upload.
fn local_file<'a>(
    key: &'a crate::ObjectKey,
    file: &'a Path,
) -> impl Fn(std::io::Error) -> Error + Copy + 'a {
    move |source| Error::LocalFile {
        op: Op::Put,
        key: key.to_string(),
        path: file.to_owned(),
        source,
    }
}

pub(crate) async fn put_bytes(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    bytes: Bytes,
) -> Result<Uploaded, Error> {
    let checksum = Checksum::of(&bytes);
    put_single(bucket, key, bytes, checksum).await
}

/// One PUT of `bytes`, whose CRC-32C and length are `checksum`, stored with the object.
async fn put_single(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    bytes: Bytes,
    checksum: Checksum,
) -> Result<Uploaded, Error> {
    let options = PutOptions::from(checksum.to_attributes());
    let path = bucket.path(key);
    let (_, retries) = bucket
        .retried(Op::Put, key.as_str(), || {
            bucket
                .store
                .put_opts(&path, PutPayload::from(bytes.clone()), options.clone())
        })
        .await?;
    Ok(Uploaded {
        checksum,
        parts: 0,
        retries,
    })
}

pub(crate) async fn put_file(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    file: &Path,
) -> Result<Uploaded, Error> {
    let local = local_file(key, file);
    let checksum = checksum_file(file).await.map_err(local)?;
    if checksum.size <= bucket.part_size as u64 {
        let bytes = Bytes::from(tokio::fs::read(file).await.map_err(local)?);
        ensure_unchanged(key, file, checksum, Checksum::of(&bytes))?;
        return put_single(bucket, key, bytes, checksum).await;
    }
    let parts = checksum.size.div_ceil(bucket.part_size as u64);
    if parts > MAX_PARTS {
        return Err(Error::TooLarge {
            op: Op::Put,
            key: key.to_string(),
            size: checksum.size,
            part_size: bucket.part_size,
        });
    }
    put_multipart(bucket, key, file, checksum).await
}

async fn put_multipart(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    file: &Path,
    checksum: Checksum,
) -> Result<Uploaded, Error> {
    let path = bucket.path(key);
    let options = PutMultipartOptions::from(checksum.to_attributes());
    let (id, created_retries) = bucket
        .retried(Op::Put, key.as_str(), || {
            bucket.store.create_multipart_opts(&path, options.clone())
        })
        .await?;
    match send_parts(bucket, key, file, checksum, &id).await {
        Ok(uploaded) => Ok(Uploaded {
            retries: uploaded.retries + created_retries,
            ..uploaded
        }),
        Err(error) => {
            // Best effort: an upload left behind costs storage until the bucket's lifecycle
            // rule removes it, never correctness (it is invisible until completed).
            if let Err(abort) = bucket.store.abort_multipart(&path, &id).await {
                tracing::warn!(key = %key, error = %abort, "could not abort a failed multipart upload");
            }
            Err(error)
        }
    }
}

async fn send_parts(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    file: &Path,
    checksum: Checksum,
    id: &MultipartId,
) -> Result<Uploaded, Error> {
    let local = local_file(key, file);
    let path = bucket.path(key);
    let mut reader = tokio::fs::File::open(file).await.map_err(local)?;
    let mut sent = Checksum::EMPTY;
    let mut part_ids: Vec<PartId> = Vec::new();
    let mut retries = 0;
    while sent.size < checksum.size {
        let want = (checksum.size - sent.size).min(bucket.part_size as u64) as usize;
        let mut buffer = vec![0; want];
        match reader.read_exact(&mut buffer).await {
            Ok(_) => {}
            // Shorter than at the checksum pass: it changed (the bytes read so far stand for
            // what was found).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(changed(key, file, checksum, sent));
            }
            Err(e) => return Err(local(e)),
        }
        sent = sent.append(&buffer);
        let part = Bytes::from(buffer);
        let index = part_ids.len();
        let (part_id, part_retries) = bucket
            .retried(Op::Put, key.as_str(), || {
                bucket
                    .store
                    .put_part(&path, id, index, PutPayload::from(part.clone()))
            })
            .await?;
        part_ids.push(part_id);
        retries += part_retries;
    }
    // A file that grew since the checksum pass: the tail was not sent, and must not be
    // silently dropped.
    let mut probe = [0u8; 1];
    let grown = reader.read(&mut probe).await.map_err(local)? > 0;
    let after = if grown { sent.append(&probe) } else { sent };
    ensure_unchanged(key, file, checksum, after)?;

    let parts = part_ids.len();
    let completed = bucket
        .retried(Op::Put, key.as_str(), || {
            bucket.store.complete_multipart(&path, id, part_ids.clone())
        })
        .await;
    match completed {
        Ok((_, complete_retries)) => Ok(Uploaded {
            checksum,
            parts,
            retries: retries + complete_retries,
        }),
        // A complete whose answer was lost completes the upload all the same; its retry then
        // finds no such upload. The object with our checksum being there is the success.
        Err(Error::NotFound { .. }) if stored_checksum(bucket, key).await == Some(checksum) => {
            Ok(Uploaded {
                checksum,
                parts,
                retries: retries + 1,
            })
        }
        Err(error) => Err(error),
    }
}

/// The checksum recorded on `key`, if it exists and has one.
async fn stored_checksum(bucket: &Bucket, key: &crate::ObjectKey) -> Option<Checksum> {
    let path = bucket.path(key);
    let head = GetOptions::new().with_head(true);
    let result = bucket.store.get_opts(&path, head).await.ok()?;
    Checksum::from_attributes(&result.attributes)
}

fn changed(key: &crate::ObjectKey, file: &Path, before: Checksum, after: Checksum) -> Error {
    Error::FileChanged {
        op: Op::Put,
        key: key.to_string(),
        path: file.to_owned(),
        before,
        after,
    }
}

fn ensure_unchanged(
    key: &crate::ObjectKey,
    file: &Path,
    before: Checksum,
    after: Checksum,
) -> Result<(), Error> {
    if before == after {
        return Ok(());
    }
    Err(changed(key, file, before, after))
}

/// The CRC-32C and length of the file at `path`, read on a blocking thread.
async fn checksum_file(path: &Path) -> std::io::Result<Checksum> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut buffer = vec![0; CHECKSUM_CHUNK];
        let mut checksum = Checksum::EMPTY;
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                return Ok(checksum);
            }
            checksum = checksum.append(buffer.get(..n).unwrap_or_default());
        }
    })
    .await
    .map_err(std::io::Error::other)?
}
