//! Uploads of sealed segments against a real versitygw (docs/tiering.md): every sealed segment
//! and its index land in the bucket under the documented keys with their CRC-32C, the durable
//! record lists exactly those objects, and a restart uploads nothing twice.

mod common;

use std::time::{Duration, SystemTime};

use common::tiering::{
    PREFIX, bucket, bucket_config, checksum, record, sealed_bases, segment_paths, tiered,
};
use common::wait_for;
use rustqueue_engine::{Bytes, ConsumerOptions, Engine, TieringStatus};
use rustqueue_tier::ObjectKey;
use rustqueue_tier::test_server::TestServer;

fn status(e: &Engine) -> TieringStatus {
    e.tiering_status().expect("tiering is on")
}

async fn publish(e: &Engine, from: u32, to: u32) {
    for i in from..to {
        let body = format!("{i:06}").repeat(170).into_bytes();
        e.publish("t", vec![Bytes::from(body)], None).await.unwrap();
    }
}

/// Waits until every sealed segment on disk is recorded and nothing is queued.
async fn wait_all_uploaded(e: &Engine, dir: &std::path::Path) {
    wait_for(60, "every sealed segment uploaded and recorded", || {
        let sealed = sealed_bases(dir);
        // A damaged record (one test's doing) is "not yet", until the uploader replaces it.
        let recorded = common::tiering::try_record(dir)
            .map(|r| r.segments.iter().map(|s| s.base).collect::<Vec<u64>>());
        status(e).backlog_segments == 0 && !sealed.is_empty() && recorded.ok() == Some(sealed)
    })
    .await;
}

/// Every recorded object is in the bucket, whole, with the CRC-32C and size of its local file.
async fn check_bucket_matches_disk(server: &TestServer, dir: &std::path::Path) {
    let bucket = bucket(server);
    let rec = record(dir);
    assert_eq!(rec.bucket, rustqueue_tier::test_server::BUCKET);
    assert_eq!(rec.prefix.as_deref(), Some(PREFIX));
    for seg in &rec.segments {
        let paths = segment_paths(dir, seg.base);
        assert_eq!(
            seg.objects.len(),
            2,
            "segment {}: .rqlog and .rqidx",
            seg.base
        );
        for (object, path) in seg.objects.iter().zip(&paths) {
            let name = path.file_name().unwrap().to_string_lossy();
            assert_eq!(
                object.key,
                format!(
                    "nodes/1/topics/74/{}/segments/{name}",
                    rec.incarnation.as_deref().unwrap()
                ),
                "the documented key layout"
            );
            let local = checksum(path);
            assert_eq!((object.size, object.crc32c), (local.size, local.crc32c));
            let verified = bucket
                .verify(&ObjectKey::new(object.key.clone()).unwrap())
                .await
                .unwrap();
            assert_eq!(verified.checksum, local, "{} in the bucket", object.key);
        }
    }
    let segments = format!(
        "nodes/1/topics/74/{}/segments",
        rec.incarnation.as_deref().unwrap()
    );
    let listed: Vec<String> = bucket
        .list(Some(&segments))
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key.to_string())
        .collect();
    let mut recorded: Vec<String> = rec
        .segments
        .iter()
        .flat_map(|s| s.objects.iter().map(|o| o.key.clone()))
        .collect();
    recorded.sort();
    assert_eq!(
        listed, recorded,
        "the bucket holds the recorded objects, no more"
    );
}

fn modified(server: &TestServer, key: &str) -> SystemTime {
    std::fs::metadata(server.object_file(&format!("{PREFIX}/{key}")))
        .unwrap()
        .modified()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_are_uploaded_with_their_checksums_recorded_and_never_twice() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    publish(&e, 0, 40).await;
    wait_all_uploaded(&e, dir.path()).await;
    let first = sealed_bases(dir.path());
    assert!(first.len() >= 8, "40 KiB in 4 KiB segments: {first:?}");
    assert_eq!(status(&e).uploaded_segments, first.len() as u64);
    assert_eq!(status(&e).failed_uploads, 0);
    check_bucket_matches_disk(&server, dir.path()).await;
    let stamps: Vec<(String, SystemTime)> = record(dir.path())
        .segments
        .iter()
        .flat_map(|s| s.objects.iter())
        .map(|o| (o.key.clone(), modified(&server, &o.key)))
        .collect();
    e.shutdown().await;
    drop(e);

    // A restart reads the record: the scans find nothing to upload, and no object is rewritten.
    let e = Engine::open(tiered(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    wait_for(30, "three scans after the restart", || {
        status(&e).scans >= 3
    })
    .await;
    assert_eq!(status(&e).uploaded_segments, 0, "nothing uploaded twice");
    assert_eq!(status(&e).backlog_segments, 0);
    for (key, stamp) in &stamps {
        assert_eq!(modified(&server, key), *stamp, "{key} not rewritten");
    }
    // What is sealed after the restart is uploaded, and only that.
    publish(&e, 40, 60).await;
    wait_all_uploaded(&e, dir.path()).await;
    let now = sealed_bases(dir.path());
    assert_eq!(
        status(&e).uploaded_segments,
        (now.len() - first.len()) as u64
    );
    check_bucket_matches_disk(&server, dir.path()).await;
    // Delivery is untouched: every message, in order.
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    for i in 0..60u32 {
        let d = tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&d.body[..6], format!("{i:06}").as_bytes());
        c.finish(d.id).await.unwrap();
    }
    drop(c);
    e.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tiering_nothing_is_recorded_and_the_metrics_stay_zero() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = rustqueue_engine::EngineConfig {
        max_segment_bytes: 4_096,
        ..common::cfg(dir.path())
    };
    let e = Engine::open(cfg).await.unwrap();
    publish(&e, 0, 20).await;
    // No uploader runs (no status), and the record is looked for only once the engine has
    // stopped, so nothing could still write one afterwards: no time is waited out.
    assert_eq!(e.tiering_status(), None);
    assert!(sealed_bases(dir.path()).len() >= 3);
    for c in rustqueue_engine::Counter::ALL
        .iter()
        .filter(|c| c.name().starts_with("rustqueue_tiering_"))
    {
        assert_eq!(e.counter(*c), 0, "{}", c.name());
    }
    e.shutdown().await;
    drop(e);
    assert!(
        !common::tiering::topic_dir(dir.path())
            .join(rustqueue_storage::TIERED_FILE)
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_damaged_record_means_uploading_again_never_trusting_it() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(tiered(dir.path(), bucket_config(&server)))
        .await
        .unwrap();
    publish(&e, 0, 20).await;
    wait_all_uploaded(&e, dir.path()).await;
    let sealed = sealed_bases(dir.path()).len() as u64;
    e.shutdown().await;
    drop(e);
    let path = common::tiering::topic_dir(dir.path()).join(rustqueue_storage::TIERED_FILE);
    // A crash between the objects and the record leaves no record (or the previous one);
    // damage leaves one that fails its checksum. Either way the segments go up again.
    let damage: [fn(&std::path::Path); 2] = [
        |p| std::fs::remove_file(p).unwrap(),
        |p| {
            let mut bytes = std::fs::read(p).unwrap();
            let at = bytes.iter().position(|b| *b == b'0').unwrap();
            bytes[at] = b'1';
            std::fs::write(p, bytes).unwrap();
        },
    ];
    for damage in damage {
        damage(&path);
        let e = Engine::open(tiered(dir.path(), bucket_config(&server)))
            .await
            .unwrap();
        wait_all_uploaded(&e, dir.path()).await;
        assert_eq!(status(&e).uploaded_segments, sealed);
        check_bucket_matches_disk(&server, dir.path()).await;
        e.shutdown().await;
    }
}
