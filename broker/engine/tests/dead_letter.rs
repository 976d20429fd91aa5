//! Dead-lettering (docs/storage-format.md, "Dead letters"): with the default 16 attempts a message is delivered
//! 15 times, then moved to `<topic>.<channel>.DLQ` and finished on its source channel; long
//! names fall back to a hashed valid name; a crash in the move never loses the message.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{cfg, wait_for};
use rustqueue_engine::{
    Bytes, Consumer, ConsumerOptions, Counter, Delivery, Engine, EngineConfig, valid_name,
};
use rustqueue_storage::simfs::SimFs;

async fn next(c: &mut Consumer) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("a delivery within 5 s")
        .expect("not closed")
}

fn depth(e: &Engine, topic: &str, channel: &str) -> u64 {
    e.stats(Some(topic), Some(channel)).topics[0].channels[0].depth
}

/// Messages the channel still owes: ready, deferred (a recovered REQ) or in flight.
fn pending(e: &Engine, topic: &str, channel: &str) -> u64 {
    let s = &e.stats(Some(topic), Some(channel)).topics[0].channels[0];
    s.depth + s.deferred_count + s.in_flight_count
}

fn message_count(e: &Engine, topic: &str) -> Option<u64> {
    e.stats(Some(topic), None)
        .topics
        .first()
        .map(|t| t.message_count)
}

/// Every body the topic holds, read through a fresh durable channel.
async fn bodies(e: &Engine, topic: &str) -> Vec<Bytes> {
    let n = message_count(e, topic).unwrap_or(0);
    if n == 0 {
        return Vec::new();
    }
    let mut c = e
        .subscribe(topic, "inspect", ConsumerOptions::default())
        .unwrap();
    c.set_ready(100);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next(&mut c).await.body);
    }
    out
}

#[tokio::test]
async fn with_default_attempts_a_message_is_delivered_15_times_then_moved_and_finished() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(EngineConfig::default().max_delivery_attempts, 16);
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![Bytes::from_static(b"poison")], None)
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    for attempt in 1..=15 {
        let d = next(&mut c).await;
        assert_eq!(d.attempts, attempt);
        c.requeue(d.id, Duration::ZERO).await.unwrap();
    }
    // The 16th attempt is a move, not a delivery.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c.next())
            .await
            .is_err(),
        "a 16th delivery"
    );
    wait_for(5, "the source is finished after the move", || {
        depth(&e, "t", "c") == 0 && message_count(&e, "t.c.DLQ") == Some(1)
    })
    .await;
    assert_eq!(e.metrics().get(Counter::DeadLetters), 1);
    assert_eq!(
        bodies(&e, "t.c.DLQ").await,
        vec![Bytes::from_static(b"poison")]
    );
    drop(c);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(depth(&e, "t", "c"), 0, "the source FIN is durable");
    assert_eq!(
        bodies(&e, "t.c.DLQ").await,
        vec![Bytes::from_static(b"poison")]
    );
}

#[tokio::test]
async fn too_long_topic_and_channel_names_dead_letter_to_a_valid_hashed_topic() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        max_delivery_attempts: 2,
        ..cfg(dir.path())
    })
    .await
    .unwrap();
    let topic = "t".repeat(60);
    let chans = [
        format!("{}1", "c".repeat(40)),
        format!("{}2", "c".repeat(40)),
    ];
    for ch in &chans {
        e.create_channel(&topic, ch).unwrap();
    }
    e.publish(&topic, vec![Bytes::from_static(b"poison")], None)
        .await
        .unwrap();
    for ch in &chans {
        let mut c = e.subscribe(&topic, ch, ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        let d = next(&mut c).await;
        c.requeue(d.id, Duration::ZERO).await.unwrap();
        // The next take is the move.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), c.next())
                .await
                .is_err(),
            "a second delivery"
        );
        wait_for(5, "moved", || depth(&e, &topic, ch) == 0).await;
    }
    let dlqs: Vec<String> = e.topics().into_iter().filter(|t| *t != topic).collect();
    assert_eq!(dlqs.len(), 2, "one dead-letter topic per channel: {dlqs:?}");
    for d in &dlqs {
        assert!(valid_name(d) && d.len() <= 64, "{d:?} is a valid name");
        assert!(d.ends_with(".DLQ"), "{d:?}");
        let hash = &d[d.len() - 13..d.len() - 4];
        assert!(
            hash.starts_with('.') && hash[1..].chars().all(|c| c.is_ascii_hexdigit()),
            "{d:?} ends with .<8 hex>.DLQ"
        );
        assert!(
            topic.starts_with(&d[..d.len() - 13]),
            "{d:?} keeps a topic prefix"
        );
        assert_eq!(bodies(&e, d).await, vec![Bytes::from_static(b"poison")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_anywhere_in_a_dead_letter_move_keeps_the_message_in_the_dlq_or_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let conf = || EngineConfig {
        max_delivery_attempts: 2,
        ..cfg(dir.path())
    };
    let poison = Bytes::from_static(b"poison");
    let mut duplicates = 0;
    let mut moved = 0;
    let mut budget = 0;
    loop {
        let fs = SimFs::new();
        let e = Engine::open_with_fs(conf(), Arc::new(fs.clone()))
            .await
            .unwrap();
        e.create_channel("t", "c").unwrap();
        e.publish("t", vec![poison.clone()], None).await.unwrap();
        let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        let d = next(&mut c).await;
        fs.fail_after(budget);
        // The requeue and then the move (on the next take) run until the injected failure.
        let _ = c.requeue(d.id, Duration::ZERO).await;
        let _ = tokio::time::timeout(Duration::from_millis(50), c.next()).await;
        wait_for(5, "the move completes or storage fails", || {
            fs.failed() || (depth(&e, "t", "c") == 0 && message_count(&e, "t.c.DLQ") == Some(1))
        })
        .await;
        let completed = !fs.failed();
        drop(c);
        drop(e);
        fs.crash(&mut |n| n / 2);
        // Reopened with the default attempts, so a message left on the source is delivered.
        let e = Engine::open_with_fs(cfg(dir.path()), Arc::new(fs.clone()))
            .await
            .unwrap();
        let in_dlq = bodies(&e, "t.c.DLQ").await;
        assert!(
            in_dlq.iter().all(|b| *b == poison),
            "budget {budget}: {in_dlq:?}"
        );
        let in_source = pending(&e, "t", "c");
        if in_source == 1 {
            let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
            c.set_ready(1);
            assert_eq!(next(&mut c).await.body, poison, "budget {budget}");
        }
        assert!(
            in_source + in_dlq.len() as u64 >= 1,
            "budget {budget}: the message is lost"
        );
        assert!(in_dlq.len() <= 1 && in_source <= 1, "budget {budget}");
        duplicates += u32::from(in_source == 1 && in_dlq.len() == 1);
        moved += u32::from(in_source == 0 && in_dlq.len() == 1);
        e.shutdown().await;
        if completed {
            break;
        }
        budget += 1;
    }
    println!("dead-letter crash points: {budget}, duplicates {duplicates}, moved {moved}");
    assert!(
        budget >= 8,
        "the move took only {budget} mutating operations"
    );
    assert!(
        duplicates >= 1,
        "no crash landed between the DLQ append and the source FIN"
    );
}

#[tokio::test]
async fn a_dead_letter_topic_is_never_dead_lettered_itself() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        max_delivery_attempts: 2,
        ..cfg(dir.path())
    })
    .await
    .unwrap();
    e.publish("t.c.DLQ", vec![Bytes::from_static(b"poison")], None)
        .await
        .unwrap();
    let mut c = e
        .subscribe("t.c.DLQ", "inspect", ConsumerOptions::default())
        .unwrap();
    c.set_ready(1);
    for attempt in 1..=4 {
        let d = next(&mut c).await;
        assert_eq!(d.attempts, attempt, "delivered past max_delivery_attempts");
        c.requeue(d.id, Duration::ZERO).await.unwrap();
    }
    assert_eq!(e.topics(), vec!["t.c.DLQ".to_string()], "no DLQ of a DLQ");
    assert_eq!(e.metrics().get(Counter::DeadLetters), 0);
}
