//! Size limits end to end: a 100 MiB message at feature level 2 and a full 65,536-message MPUB.

use std::time::Duration;

use rustqueue_engine::{Bytes, ConsumerOptions, Engine, EngineConfig, OpenError, PublishError};

#[tokio::test]
async fn a_100_mib_message_round_trips_at_feature_level_2_and_is_refused_at_level_1() {
    let dir = tempfile::tempdir().unwrap();
    let level1 = EngineConfig {
        data_path: dir.path().to_path_buf(),
        max_message_bytes: 100 << 20,
        ..EngineConfig::default()
    };
    assert!(matches!(
        Engine::open(level1).await,
        Err(OpenError::Config(_))
    ));
    let cfg = EngineConfig {
        data_path: dir.path().to_path_buf(),
        feature_level: 2,
        max_message_bytes: 100 << 20,
        max_segment_bytes: 256 << 20,
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    };
    let e = Engine::open(cfg.clone()).await.unwrap();
    e.create_channel("big", "c").unwrap();
    let body: Bytes = (0..100u32 << 20)
        .map(|i| (i % 253) as u8)
        .collect::<Vec<u8>>()
        .into();
    e.publish("big", vec![body.clone()], None).await.unwrap();
    let too_big = Bytes::from(vec![0u8; (100 << 20) + 1]);
    assert!(matches!(
        e.publish("big", vec![too_big], None).await,
        Err(PublishError::TooBig { .. })
    ));
    e.shutdown().await;
    let e = Engine::open(cfg).await.unwrap();
    let mut c = e.subscribe("big", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let d = tokio::time::timeout(Duration::from_secs(30), c.next())
        .await
        .unwrap()
        .unwrap();
    assert!(d.body == body, "100 MiB body intact after restart");
    c.finish(d.id).await.unwrap();
}

#[tokio::test]
async fn a_full_size_mpub_is_one_atomic_batch_delivered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        data_path: dir.path().to_path_buf(),
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    e.create_channel("t", "c").unwrap();
    let bodies: Vec<Bytes> = (0..65_536u32)
        .map(|i| Bytes::from(i.to_be_bytes().to_vec()))
        .collect();
    e.publish("t", bodies, None).await.unwrap();
    let over: Vec<Bytes> = vec![Bytes::from_static(b"x"); 65_537];
    assert!(matches!(
        e.publish("t", over, None).await,
        Err(PublishError::BadBatch(_))
    ));
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(65_536);
    let mut last = 0;
    for i in 0..65_536u32 {
        let d = tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.body.as_ref(), i.to_be_bytes());
        let id = d.id.to_u64().unwrap();
        assert!(id > last, "ids contiguous and increasing");
        last = id;
    }
    assert_eq!(c.in_flight(), 65_536);
    assert_eq!(e.stats(None, None).topics[0].message_count, 65_536);
}
