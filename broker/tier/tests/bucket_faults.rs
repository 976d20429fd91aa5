//! The bucket misbehaving while we talk to it: killed, paused, refusing our credentials.
//!
//! Outcomes are asserted, never speed: each fault must end in a complete, intact object (or a
//! clear, immediate refusal), however long the retries took on a loaded machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustqueue_tier::test_server::TestServer;
use rustqueue_tier::{Bucket, Checksum, Credentials, Error, ObjectKey};

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn write(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("segment");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Whether a part of a multipart upload has landed in the bucket's directory (versitygw keeps
/// parts in `<bucket>/.sgwtmp/multipart/<object>/<upload id>/<part number>`).
fn a_part_has_landed(bucket_dir: &Path) -> bool {
    let Ok(objects) = bucket_dir.join(".sgwtmp/multipart").read_dir() else {
        return false;
    };
    objects.flatten().any(|object| {
        object.path().read_dir().is_ok_and(|uploads| {
            uploads.flatten().any(|upload| {
                upload.path().read_dir().is_ok_and(|parts| {
                    parts
                        .flatten()
                        .any(|p| p.file_name().to_string_lossy().parse::<u32>().is_ok())
                })
            })
        })
    })
}

/// Waits (at most 60 s) until one more of `bucket`'s attempts than `failed` has failed and
/// been retried.
async fn until_a_retry(bucket: &Bucket, failed: u64, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while bucket.failed_attempts() <= failed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no attempt against {what} failed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Killed between parts and restarted, the server finds the upload where it was: the part in
/// flight fails (reset or refused), is retried under the same part number once the server is
/// back, and the upload completes with the file's exact bytes. So an upload retries and
/// completes; it does not fail and need a re-run.
#[tokio::test]
async fn an_upload_survives_the_server_being_killed_and_restarted_mid_upload() {
    let mut server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("killed")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(64 * 1024 * 1024);
    let file = write(dir.path(), &data);
    let key = ObjectKey::new("topics/t/1.seg").unwrap();

    let upload = tokio::spawn({
        let bucket = bucket.clone();
        let key = key.clone();
        async move { bucket.put_file(&key, &file).await }
    });
    let bucket_dir = server.bucket_dir();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !a_part_has_landed(&bucket_dir) {
        assert!(
            !upload.is_finished(),
            "the upload ended before a part was seen: {:?}",
            upload.await
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "no part landed within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let failed = bucket.failed_attempts();
    server.kill();
    // Down until the part in flight has failed and been retried at least once.
    until_a_retry(&bucket, failed, "the killed server").await;
    server.restart();

    let uploaded = upload.await.unwrap().unwrap();
    assert!(
        uploaded.retries >= 1,
        "the kill cost no retry: it came too late to test anything"
    );
    assert_eq!(uploaded.checksum, Checksum::of(&data));
    assert_eq!(
        bucket.verify(&key).await.unwrap().checksum,
        Checksum::of(&data)
    );
}

/// A stopped server accepts connections (the kernel does) but never answers: requests time out
/// and are retried until it continues.
#[tokio::test]
async fn requests_to_a_paused_server_time_out_and_complete_once_it_resumes() {
    let mut server = TestServer::start();
    let bucket = Bucket::new(server.bucket_config("paused")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(300_000);
    let file = write(dir.path(), &data);
    let key = ObjectKey::new("topics/t/2.seg").unwrap();

    server.pause();
    let failed = bucket.failed_attempts();
    let upload = tokio::spawn({
        let bucket = bucket.clone();
        let key = key.clone();
        async move { bucket.put_file(&key, &file).await }
    });
    // Paused until an attempt has timed out (the test configuration's 5 s) and been retried.
    until_a_retry(&bucket, failed, "the paused server").await;
    assert!(
        !upload.is_finished(),
        "an upload to a stopped server finished: {:?}",
        upload.await
    );
    server.resume();

    let uploaded = upload.await.unwrap().unwrap();
    assert!(uploaded.retries >= 1, "{uploaded:?}");
    assert_eq!(
        bucket.verify(&key).await.unwrap().checksum,
        Checksum::of(&data)
    );

    // A read started while paused also completes after the pause.
    server.pause();
    let failed = bucket.failed_attempts();
    let verify = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.verify(&key).await }
    });
    until_a_retry(&bucket, failed, "the paused server").await;
    server.resume();
    let verified = verify.await.unwrap().unwrap();
    assert!(verified.retries >= 1, "{verified:?}");
}

#[tokio::test]
async fn wrong_credentials_fail_at_once_with_a_clear_error() {
    let server = TestServer::start();
    let mut config = server.bucket_config("denied");
    config.credentials = Credentials {
        access_key_id: config.credentials.access_key_id.clone(),
        secret_access_key: "not-the-secret".into(),
    };
    let bucket = Bucket::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), b"payload");
    let key = ObjectKey::new("topics/t/3.seg").unwrap();

    for error in [
        bucket.put_file(&key, &file).await.unwrap_err(),
        bucket.verify(&key).await.unwrap_err(),
        bucket.list(None).await.unwrap_err(),
    ] {
        // Denied is returned by the first attempt: GaveUp would mean it was retried.
        assert!(matches!(error, Error::Denied { .. }), "{error}");
        assert!(
            error.to_string().contains("check the access key"),
            "{error}"
        );
    }

    let mut unknown = server.bucket_config("denied");
    unknown.credentials.access_key_id = "nobody".into();
    let error = Bucket::new(unknown)
        .unwrap()
        .put_file(&key, &file)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Denied { .. }), "{error}");
}

#[tokio::test]
async fn a_server_that_is_down_is_given_up_on_within_the_policy() {
    let mut server = TestServer::start();
    let mut config = server.bucket_config("down");
    config.retry.max_attempts = 3;
    let bucket = Bucket::new(config).unwrap();
    server.kill();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), b"payload");
    let error = bucket
        .put_file(&ObjectKey::new("topics/t/4.seg").unwrap(), &file)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::GaveUp { attempts: 3, .. }),
        "{error}"
    );
    assert!(error.is_transient());
    assert!(
        error.to_string().contains("may be down or unreachable"),
        "{error}"
    );
}
