//! An object damaged at rest in the bucket is caught by `verify`.

use rustqueue_tier::test_server::TestServer;
use rustqueue_tier::{Bucket, Error, ObjectKey};

#[tokio::test]
async fn an_object_overwritten_in_the_servers_directory_fails_verification() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("damaged")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let file = dir.path().join("segment");
    std::fs::write(&file, &data).unwrap();
    let key = ObjectKey::new("topics/t/7.seg").unwrap();
    bucket.put_file(&key, &file).await.unwrap();
    bucket.verify(&key).await.unwrap();

    // One byte flipped in place: same length, same metadata (kept in extended attributes).
    let stored = server.object_file("damaged/topics/t/7.seg");
    let mut bytes = std::fs::read(&stored).unwrap();
    assert_eq!(
        bytes, data,
        "the posix backend keeps the object as a plain file"
    );
    bytes[123_456] ^= 0x40;
    std::fs::write(&stored, &bytes).unwrap();

    let error = bucket.verify(&key).await.unwrap_err();
    let Error::Corrupt { recorded, read, .. } = &error else {
        panic!("expected a damaged object, got {error}");
    };
    assert_eq!(recorded.size, read.size);
    assert_ne!(recorded.crc32c, read.crc32c);
    assert!(error.to_string().contains("damaged"), "{error}");
}

#[tokio::test]
async fn a_truncated_object_fails_verification() {
    let server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("truncated")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("segment");
    std::fs::write(&file, vec![7u8; 50_000]).unwrap();
    let key = ObjectKey::new("topics/t/8.seg").unwrap();
    bucket.put_file(&key, &file).await.unwrap();

    let stored = server.object_file("truncated/topics/t/8.seg");
    std::fs::write(&stored, vec![7u8; 49_999]).unwrap();
    let error = bucket.verify(&key).await.unwrap_err();
    assert!(
        matches!(&error, Error::Corrupt { recorded, read, .. } if recorded.size == 50_000 && read.size == 49_999),
        "{error}"
    );
}
