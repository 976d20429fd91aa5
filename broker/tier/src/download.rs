//! Whole objects back from the bucket, checked against the CRC-32C and length recorded when
//! they were stored: into memory (`get_verified`, small objects such as a checkpoint) or into a
//! local file (`get_file`, a segment). A mismatch is [`Error::Corrupt`], an object without a
//! recorded checksum [`Error::NoChecksum`]: nothing read back is used unchecked.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::{GetOptions, ObjectStore};
use tokio::io::AsyncWriteExt;

use crate::bucket::{Bucket, Verified};
use crate::checksum::Checksum;
use crate::error::{Error, Op};

fn checked(
    key: &crate::ObjectKey,
    recorded: Option<Checksum>,
    read: Checksum,
) -> Result<Checksum, Error> {
    match recorded {
        None => Err(Error::NoChecksum {
            key: key.to_string(),
        }),
        Some(recorded) if recorded != read => Err(Error::Corrupt {
            key: key.to_string(),
            recorded,
            read,
        }),
        Some(checksum) => Ok(checksum),
    }
}

pub(crate) async fn get_verified(
    bucket: &Bucket,
    key: &crate::ObjectKey,
) -> Result<(Bytes, Verified), Error> {
    let path = bucket.path(key);
    let ((recorded, bytes), retries) = bucket
        .retried(Op::Get, key.as_str(), || async {
            let result = bucket.store.get_opts(&path, GetOptions::new()).await?;
            let recorded = Checksum::from_attributes(&result.attributes);
            let mut body = result.into_stream();
            let mut bytes = BytesMut::new();
            while let Some(chunk) = body.next().await {
                bytes.extend_from_slice(&chunk?);
            }
            Ok((recorded, bytes.freeze()))
        })
        .await?;
    let checksum = checked(key, recorded, Checksum::of(&bytes))?;
    Ok((bytes, Verified { checksum, retries }))
}

pub(crate) async fn get_file(
    bucket: &Bucket,
    key: &crate::ObjectKey,
    file: &Path,
) -> Result<Verified, Error> {
    let path = bucket.path(key);
    let local = |source: std::io::Error| Error::LocalFile {
        op: Op::Get,
        key: key.to_string(),
        path: file.to_owned(),
        source,
    };
    // Each attempt writes the file from its start: a body cut off midway is read again whole.
    let ((recorded, read), retries) = bucket
        .retried(Op::Get, key.as_str(), || async {
            let result = bucket.store.get_opts(&path, GetOptions::new()).await?;
            let recorded = Checksum::from_attributes(&result.attributes);
            let mut out = match tokio::fs::File::create(file).await {
                Ok(out) => out,
                Err(e) => return Ok((recorded, Err(e))),
            };
            let mut read = Checksum::EMPTY;
            let mut body = result.into_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                read = read.append(&chunk);
                if let Err(e) = out.write_all(&chunk).await {
                    return Ok((recorded, Err(e)));
                }
            }
            if let Err(e) = out.flush().await {
                return Ok((recorded, Err(e)));
            }
            Ok((recorded, Ok(read)))
        })
        .await?;
    let read = read.map_err(local)?;
    let checksum = checked(key, recorded, read)?;
    Ok(Verified { checksum, retries })
}
