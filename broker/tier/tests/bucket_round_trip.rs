//! Objects go into a real versitygw and come back byte for byte, with their CRC-32C checked.

use std::path::Path;

use futures::TryStreamExt;
use rustqueue_tier::test_server::TestServer;
use rustqueue_tier::{Bucket, Checksum, DEFAULT_PART_SIZE, Error, ObjectKey};

/// Deterministic, non-repeating bytes (a repeated pattern would hide misplaced parts).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn key(k: &str) -> ObjectKey {
    ObjectKey::new(k).unwrap()
}

async fn read_all(bucket: &Bucket, key: &ObjectKey, range: std::ops::Range<u64>) -> Vec<u8> {
    let chunks: Vec<bytes::Bytes> = bucket
        .get_range(key, range)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    chunks.concat()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[tokio::test]
async fn a_small_object_round_trips_with_its_checksum() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("small")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(100_000, 1);
    let file = write(dir.path(), "segment", &data);
    let k = key("topics/t/00000000000000000000.seg");

    let uploaded = bucket.put_file(&k, &file).await.unwrap();
    assert_eq!(uploaded.checksum, Checksum::of(&data));
    assert_eq!(
        uploaded.parts, 0,
        "a file under the part size goes up in one PUT"
    );

    assert_eq!(read_all(&bucket, &k, 0..data.len() as u64).await, data);
    assert_eq!(read_all(&bucket, &k, 10..20).await, data[10..20]);
    let verified = bucket.verify(&k).await.unwrap();
    assert_eq!(verified.checksum, Checksum::of(&data));
}

#[tokio::test]
async fn a_40_mib_file_goes_up_in_parts_and_comes_back_byte_for_byte() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("large")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(40 * 1024 * 1024 + 12_345, 2);
    let file = write(dir.path(), "segment", &data);
    let k = key("topics/t/00000000000000000001.seg");

    let uploaded = bucket.put_file(&k, &file).await.unwrap();
    assert_eq!(uploaded.parts, data.len().div_ceil(DEFAULT_PART_SIZE));
    assert_eq!(uploaded.checksum, Checksum::of(&data));

    let back = read_all(&bucket, &k, 0..data.len() as u64).await;
    assert!(
        back == data,
        "the object differs from the file it was uploaded from"
    );
    // a range across a part boundary
    let boundary = DEFAULT_PART_SIZE as u64;
    assert_eq!(
        read_all(&bucket, &k, boundary - 3..boundary + 5).await,
        data[boundary as usize - 3..boundary as usize + 5]
    );
    assert_eq!(
        bucket.verify(&k).await.unwrap().checksum,
        Checksum::of(&data)
    );
    assert!(
        !server
            .bucket_dir()
            .join(".sgwtmp/multipart")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "no multipart upload is left behind"
    );
}

#[tokio::test]
async fn listing_shows_the_keys_under_a_prefix_and_delete_removes_them() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("cluster/broker-0")).unwrap();
    let other = Bucket::new(server.bucket_config("cluster/broker-1")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "f", b"payload");
    for k in ["topics/a/1.seg", "topics/a/2.seg", "topics/b/1.seg"] {
        bucket.put_file(&key(k), &file).await.unwrap();
    }
    other.put_file(&key("topics/a/9.seg"), &file).await.unwrap();

    let names = |listed: Vec<rustqueue_tier::Listed>| {
        listed
            .into_iter()
            .map(|l| (l.key.to_string(), l.size))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(bucket.list(None).await.unwrap()),
        [
            ("topics/a/1.seg".into(), 7),
            ("topics/a/2.seg".into(), 7),
            ("topics/b/1.seg".into(), 7)
        ]
    );
    assert_eq!(
        names(bucket.list(Some("topics/a")).await.unwrap()),
        [
            ("topics/a/1.seg".to_string(), 7),
            ("topics/a/2.seg".into(), 7)
        ]
    );

    bucket.delete(&key("topics/a/1.seg")).await.unwrap();
    bucket.delete(&key("topics/a/1.seg")).await.unwrap(); // a repeated delete is harmless
    assert_eq!(
        names(bucket.list(Some("topics/a")).await.unwrap()),
        [("topics/a/2.seg".to_string(), 7)]
    );
    assert_eq!(
        names(other.list(None).await.unwrap()),
        [("topics/a/9.seg".to_string(), 7)]
    );
}

#[tokio::test]
async fn a_missing_object_fails_at_once_as_not_found() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("missing")).unwrap();
    let k = key("topics/t/none.seg");
    let error = bucket
        .get_range(&k, 0..10)
        .await
        .err()
        .expect("no such object");
    assert!(matches!(error, Error::NotFound { .. }), "{error}");
    let error = bucket.verify(&k).await.unwrap_err();
    assert!(matches!(error, Error::NotFound { .. }), "{error}");
    assert!(error.to_string().contains("topics/t/none.seg"), "{error}");
}
