//! Delivery semantics of the engine against a real data directory.

mod common;

use std::time::{Duration, Instant};

use common::wait_for;
use rustqueue_engine::{
    AckMode, BatchLimit, Bytes, ConsumerOptions, Counter, DeliveryError, Engine, EngineConfig,
    OpenError, Timer,
};

fn cfg(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        message_timeout: Duration::from_secs(30),
        // Explicit disk guard: a CI host above the default 85 % must not throttle this test.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

async fn next(c: &mut rustqueue_engine::Consumer) -> rustqueue_engine::Delivery {
    tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("a delivery within 5 s")
        .expect("not closed")
}

async fn next_batch(
    c: &mut rustqueue_engine::Consumer,
    limit: BatchLimit,
) -> Vec<rustqueue_engine::Delivery> {
    tokio::time::timeout(Duration::from_secs(5), c.next_batch(limit))
        .await
        .expect("a batch within 5 s")
        .expect("not closed")
}

async fn none_within(c: &mut rustqueue_engine::Consumer, ms: u64) {
    if let Ok(d) = tokio::time::timeout(Duration::from_millis(ms), c.next()).await {
        panic!("unexpected delivery {:?}", d.map(|d| d.body));
    }
}

/// Shuts `e` down, opens `dir` again and subscribes to channel `c` of topic `t` with `rdy`.
async fn restarted(
    e: Engine,
    dir: &std::path::Path,
    rdy: u32,
) -> (Engine, rustqueue_engine::Consumer) {
    e.shutdown().await;
    let e = Engine::open(cfg(dir)).await.unwrap();
    let c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(rdy);
    (e, c)
}

#[tokio::test]
async fn published_messages_are_delivered_in_order_and_finished_ones_stay_finished_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("one")], None).await.unwrap();
    e.publish("t", vec![b("two"), b("three")], None)
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(10);
    let got: Vec<_> = [next(&mut c).await, next(&mut c).await, next(&mut c).await].to_vec();
    assert_eq!(
        got.iter().map(|d| d.body.clone()).collect::<Vec<_>>(),
        vec![b("one"), b("two"), b("three")]
    );
    assert!(got.iter().all(|d| d.attempts == 1));
    c.finish(got[0].id).await.unwrap();
    c.finish(got[2].id).await.unwrap();
    assert_eq!(c.finish(got[0].id).await, Err(DeliveryError::NotInFlight));
    drop(c);
    let (e, mut c) = restarted(e, dir.path(), 10).await;
    let d = next(&mut c).await;
    assert_eq!((d.body, d.id), (b("two"), got[1].id));
    none_within(&mut c, 200).await;
    e.publish("t", vec![b("four")], None).await.unwrap();
    let d4 = next(&mut c).await;
    assert!(
        d4.id.to_u64().unwrap() > got[2].id.to_u64().unwrap(),
        "ids are never reused"
    );
}

#[tokio::test]
async fn a_consumer_never_has_more_than_its_rdy_count_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", (0..5).map(|i| b(&i.to_string())).collect(), None)
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    none_within(&mut c, 100).await;
    c.set_ready(2);
    let a = next(&mut c).await;
    next(&mut c).await;
    none_within(&mut c, 150).await;
    assert_eq!(c.in_flight(), 2);
    c.finish(a.id).await.unwrap();
    next(&mut c).await;
    assert_eq!(c.in_flight(), 2);
}

#[tokio::test]
async fn an_expired_delivery_returns_with_its_attempts_and_a_late_fin_fails() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("x")], None).await.unwrap();
    let opts = ConsumerOptions {
        msg_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let mut c = e.subscribe("t", "c", opts).unwrap();
    c.set_ready(1);
    let first = next(&mut c).await;
    let again = next(&mut c).await;
    assert_eq!((again.id, again.attempts), (first.id, 2));
    let s = e.stats(Some("t"), Some("c"));
    assert_eq!(s.topics[0].channels[0].timeout_count, 1);
    c.touch(again.id).unwrap();
    c.finish(again.id).await.unwrap();
    assert_eq!(c.touch(again.id), Err(DeliveryError::NotInFlight));
}

#[tokio::test]
async fn requeue_with_delay_redelivers_later_and_attempts_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("x")], None).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let d = next(&mut c).await;
    let t0 = Instant::now();
    c.requeue(d.id, Duration::from_millis(300)).await.unwrap();
    let d2 = next(&mut c).await;
    assert!(
        t0.elapsed() >= Duration::from_millis(290),
        "REQ delay honoured"
    );
    assert_eq!(d2.attempts, 2);
    c.requeue(d2.id, Duration::ZERO).await.unwrap();
    assert_eq!(e.stats(None, None).topics[0].channels[0].requeue_count, 2);
    assert_eq!(
        c.requeue(d2.id, Duration::from_secs(100_000)).await,
        Err(DeliveryError::InvalidDelay)
    );
    drop(c);
    let (e, mut c) = restarted(e, dir.path(), 1).await;
    let d3 = next(&mut c).await;
    assert_eq!((d3.id, d3.attempts), (d.id, 3));
    assert_eq!(
        e.stats(None, None).topics[0].channels[0].requeue_count,
        2,
        "counters survive restart"
    );
}

#[tokio::test]
async fn deferred_publish_is_not_delivered_before_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    let t0 = Instant::now();
    e.publish("t", vec![b("later")], Some(Duration::from_millis(300)))
        .await
        .unwrap();
    e.publish("t", vec![b("now")], None).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(5);
    assert_eq!(next(&mut c).await.body, b("now"));
    assert_eq!(e.stats(None, None).topics[0].channels[0].deferred_count, 1);
    assert_eq!(next(&mut c).await.body, b("later"));
    assert!(t0.elapsed() >= Duration::from_millis(290));
}

#[tokio::test]
async fn every_channel_gets_every_message_with_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "a").unwrap();
    e.create_channel("t", "b").unwrap();
    e.publish("t", vec![b("m")], None).await.unwrap();
    let mut a = e.subscribe("t", "a", ConsumerOptions::default()).unwrap();
    let mut bb = e.subscribe("t", "b", ConsumerOptions::default()).unwrap();
    a.set_ready(1);
    bb.set_ready(1);
    let (da, db) = (next(&mut a).await, next(&mut bb).await);
    assert_eq!((da.id, da.body), (db.id, db.body));
}

#[tokio::test]
async fn the_first_channel_receives_messages_published_before_it_existed() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.publish("t", vec![b("early")], None).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    assert_eq!(next(&mut c).await.body, b("early"));
}

#[tokio::test]
async fn ephemeral_channels_start_at_the_tail_and_vanish_with_their_last_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.publish("t", vec![b("old")], None).await.unwrap();
    let mut c = e
        .subscribe("t", "x#ephemeral", ConsumerOptions::default())
        .unwrap();
    c.set_ready(1);
    none_within(&mut c, 100).await;
    e.publish("t", vec![b("new")], None).await.unwrap();
    assert_eq!(next(&mut c).await.body, b("new"));
    assert_eq!(e.channels("t").unwrap(), vec!["x#ephemeral".to_string()]);
    drop(c);
    assert!(e.channels("t").unwrap().is_empty());
    let mut et = e
        .subscribe("e#ephemeral", "c", ConsumerOptions::default())
        .unwrap();
    et.set_ready(1);
    e.publish("e#ephemeral", vec![b("m")], None).await.unwrap();
    assert_eq!(next(&mut et).await.body, b("m"));
    drop(et);
    e.delete_channel("e#ephemeral", "c").await.unwrap();
    assert_eq!(e.topics(), vec!["t".to_string()]);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(
        e.topics(),
        vec!["t".to_string()],
        "ephemeral topics are never persisted"
    );
}

#[tokio::test]
async fn sampling_delivers_exactly_the_requested_share() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", (0..100).map(|i| b(&format!("m{i}"))).collect(), None)
        .await
        .unwrap();
    let mut c = e
        .subscribe(
            "t",
            "c",
            ConsumerOptions {
                sample_rate: 50,
                ..Default::default()
            },
        )
        .unwrap();
    c.set_ready(100);
    for _ in 0..50 {
        let d = next(&mut c).await;
        c.finish(d.id).await.unwrap();
    }
    none_within(&mut c, 300).await;
    assert_eq!(e.stats(None, None).topics[0].channels[0].depth, 0);
}

#[tokio::test]
async fn paused_channels_and_frozen_deliveries_hold_messages_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.pause_channel("t", "c", true).await.unwrap();
    e.publish("t", vec![b("m")], None).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    none_within(&mut c, 150).await;
    e.set_deliveries_frozen(true);
    e.pause_channel("t", "c", false).await.unwrap();
    none_within(&mut c, 150).await;
    e.set_deliveries_frozen(false);
    e.pause_topic("t", true).await.unwrap();
    none_within(&mut c, 150).await;
    e.pause_topic("t", false).await.unwrap();
    assert_eq!(next(&mut c).await.body, b("m"));
}

#[tokio::test]
async fn a_message_is_dead_lettered_instead_of_its_sixteenth_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        max_delivery_attempts: 3,
        ..cfg(dir.path())
    })
    .await
    .unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("poison")], None).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    for attempt in 1..=2 {
        let d = next(&mut c).await;
        assert_eq!(d.attempts, attempt);
        c.requeue(d.id, Duration::ZERO).await.unwrap();
    }
    none_within(&mut c, 300).await;
    let mut dlq = e
        .subscribe("t.c.DLQ", "inspect", ConsumerOptions::default())
        .unwrap();
    dlq.set_ready(1);
    assert_eq!(next(&mut dlq).await.body, b("poison"));
}

#[tokio::test]
async fn empty_and_delete_channel_drop_pending_messages_and_close_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("a"), b("b")], None).await.unwrap();
    e.empty_channel("t", "c").await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(5);
    none_within(&mut c, 100).await;
    e.delete_channel("t", "c").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), c.next())
            .await
            .unwrap()
            .is_none()
    );
    let rev = e.registry_revision();
    e.delete_topic("t").await.unwrap();
    assert!(e.registry_revision() > rev);
    assert!(e.topics().is_empty());
}

#[tokio::test]
async fn a_second_engine_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    let err = Engine::open(cfg(dir.path())).await.err().expect("locked");
    assert!(
        matches!(err, OpenError::Storage(_)) && err.to_string().contains("locked"),
        "{err}"
    );
    e.shutdown().await;
    Engine::open(cfg(dir.path()))
        .await
        .expect("lock released by shutdown");
}

#[tokio::test]
async fn publish_validates_names_sizes_and_defer() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        max_message_bytes: 10,
        ..cfg(dir.path())
    })
    .await
    .unwrap();
    use rustqueue_engine::PublishError::*;
    assert!(matches!(
        e.publish("bad topic", vec![b("x")], None).await,
        Err(BadTopic(_))
    ));
    assert!(matches!(
        e.publish("t", vec![b("01234567890")], None).await,
        Err(TooBig { .. })
    ));
    assert_eq!(
        e.publish("t", vec![Bytes::new()], None).await,
        Err(EmptyBody)
    );
    assert_eq!(
        e.publish("t", vec![b("x")], Some(Duration::from_secs(4000)))
            .await,
        Err(InvalidDefer)
    );
}

#[tokio::test]
async fn relaxed_modes_ack_before_sync_and_sync_in_the_background() {
    for mode in [AckMode::WriteAck, AckMode::NsqRelaxed] {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig {
            ack_mode: mode,
            ..cfg(dir.path())
        })
        .await
        .unwrap();
        e.create_channel("t", "c").unwrap();
        e.publish("t", vec![b("m")], None).await.unwrap();
        let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        assert_eq!(next(&mut c).await.body, b("m"));
        let deadline = Instant::now() + Duration::from_secs(2);
        while e.stats(None, None).topics[0].unsynced_messages > 0 {
            assert!(Instant::now() < deadline, "background sync within 2 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(e.stats(None, None).topics[0].last_durable_position, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lone_relaxed_append_is_synced_on_the_interval_after_earlier_syncs() {
    // The append stage tells the sync stage only of the first unsynced append after a sync (and
    // of one at a threshold): each sync must re-arm that, or a later lone append would wait for
    // a threshold that never comes.
    for mode in [AckMode::WriteAck, AckMode::NsqRelaxed] {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig {
            ack_mode: mode,
            relaxed_sync_interval: Duration::from_millis(20),
            relaxed_sync_messages: u64::MAX,
            relaxed_sync_bytes: u64::MAX,
            ..cfg(dir.path())
        })
        .await
        .unwrap();
        for n in 1..=4u64 {
            e.publish("t", vec![b("m")], None).await.unwrap();
            wait_for(
                5,
                &format!("{mode:?}: append {n} synced on the interval"),
                || e.stats(None, None).topics[0].last_durable_position >= n,
            )
            .await;
            assert_eq!(e.stats(None, None).topics[0].unsynced_messages, 0);
        }
    }
}

#[tokio::test]
async fn relaxed_modes_sync_on_their_interval_not_after_every_append() {
    // Regression: the age of the unsynced tail was never reset while appends went on during a
    // sync, so once one interval had passed every append fsynced.
    let interval = Duration::from_millis(40);
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig {
        ack_mode: AckMode::NsqRelaxed,
        relaxed_sync_interval: interval,
        relaxed_sync_messages: u64::MAX,
        relaxed_sync_bytes: u64::MAX,
        ..cfg(dir.path())
    })
    .await
    .unwrap();
    let fsyncs = || e.metrics().histogram(Timer::PublishFsync).count;
    // The first publish creates the topic: its segment, its directory and the id block are
    // fsynced first, which under CI's parallel lanes once took the whole window (one publish
    // in 400 ms). The window counts the appends and syncs that follow, from here.
    e.publish("t", vec![b("m")], None).await.unwrap();
    let before = fsyncs();
    let started = Instant::now();
    let mut published = 0u64;
    while started.elapsed() < Duration::from_millis(400) {
        e.publish("t", vec![b("m")], None).await.unwrap();
        published += 1;
    }
    let synced = fsyncs() - before;
    let allowed = (started.elapsed().as_millis() / interval.as_millis()) as u64 + 2;
    assert!(published > 100, "only {published} publishes");
    assert!(
        synced <= allowed,
        "{synced} fsyncs for {published} publishes; at most {allowed} expected"
    );
    // And the tail is synced on the interval: at least one fsync fell due during the 400 ms
    // and one more for what followed it. Counted once they complete, however long the disk
    // takes (an fdatasync under CI's parallel lanes took over 300 ms, and this once read 0).
    wait_for(10, "the tail is synced on the interval (2 fsyncs)", || {
        fsyncs() - before >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_messages_reach_the_consumer_with_room_while_full_ones_wait() {
    // Only consumers that could take a message wait for arrivals; a full one must not absorb
    // the wake-up meant for another (the message would then wait for the 1 s fallback tick).
    let dir = tempfile::tempdir().unwrap();
    let e = std::sync::Arc::new(Engine::open(cfg(dir.path())).await.unwrap());
    e.create_channel("t", "c").unwrap();
    e.publish("t", (0..4).map(|i| b(&format!("held {i}"))).collect(), None)
        .await
        .unwrap();
    let mut full = Vec::new();
    for _ in 0..4 {
        let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        let held = next(&mut c).await;
        full.push(tokio::spawn(async move {
            let more = c.next().await;
            (held, more)
        }));
    }
    let mut free = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    free.set_ready(100);
    // Only `free` can take a message, so only its looks find nothing: each empty look is
    // `free` about to wait for the next arrival (it registers before it looks).
    let mut empty_looks = e.counter(Counter::FetchEmpty);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let receiver = tokio::spawn(async move {
        while let Some(d) = free.next().await {
            if tx.send(d.body).is_err() {
                break;
            }
        }
    });
    for i in 0..10 {
        // Every consumer is waiting again before each publish: the full ones since they
        // took their message, `free` since its last look found nothing.
        wait_for(10, "the free consumer to wait again", || {
            e.counter(Counter::FetchEmpty) > empty_looks
        })
        .await;
        empty_looks = e.counter(Counter::FetchEmpty);
        let body = b(&format!("new {i}"));
        e.publish("t", vec![body.clone()], None).await.unwrap();
        let got = tokio::time::timeout(Duration::from_millis(500), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("message {i} not delivered within 500 ms"));
        assert_eq!(got, Some(body));
    }
    for f in &full {
        assert!(
            !f.is_finished(),
            "a full consumer got a message beyond its RDY"
        );
    }
    receiver.abort();
    for f in full {
        f.abort();
    }
}

#[tokio::test]
async fn a_timed_out_delivery_returns_to_its_full_consumer_promptly_not_at_the_fallback_tick() {
    // The consumer's only RDY slot is held by the message that times out: it must take it
    // again once the deadline passes, not after the 1 s idle tick.
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    e.publish("t", vec![b("x")], None).await.unwrap();
    let timeout = Duration::from_millis(50);
    let opts = ConsumerOptions {
        msg_timeout: Some(timeout),
        ..Default::default()
    };
    let mut c = e.subscribe("t", "c", opts).unwrap();
    c.set_ready(1);
    let first = next(&mut c).await;
    for attempt in 2..=4 {
        let t0 = Instant::now();
        let again = next(&mut c).await;
        let waited = t0.elapsed();
        assert_eq!((again.id, again.attempts), (first.id, attempt));
        assert!(
            waited < timeout + Duration::from_millis(400),
            "redelivered {waited:?} after a {timeout:?} timeout"
        );
    }
}

/// `next()` is raced against other work in a session's `select!`, so a call dropped while it
/// reads a large body must not lose the delivery it had already claimed: the next call
/// returns that same message (no timeout to wait out, no skipped message, RDY respected).
#[tokio::test]
async fn a_next_call_dropped_mid_read_keeps_its_claimed_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    let big = |fill: u8| Bytes::from(vec![fill; 4 << 20]);
    e.publish("t", vec![big(1), big(2), big(3)], None)
        .await
        .unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    let mut dropped = 0;
    for fill in 1..=3 {
        // Each call polled once: it claims the message and starts its read, and is dropped
        // while the read runs off the runtime (on a busy machine a read may finish within
        // the one poll: then that call delivered it, as it should).
        let mut got = None;
        for _ in 0..5 {
            match poll_once(c.next()) {
                None => dropped += 1,
                Some(d) => {
                    got = d;
                    break;
                }
            }
        }
        let d = match got {
            Some(d) => d,
            None => next(&mut c).await,
        };
        assert_eq!(d.body, big(fill), "the claimed message, not a later one");
        assert_eq!(d.attempts, 1, "delivered once, not after a timeout");
        none_within(&mut c, 100).await; // RDY 1: the one in flight is the only one
        c.finish(d.id).await.unwrap();
    }
    assert!(
        dropped > 0,
        "no call was dropped mid-read: nothing was tested"
    );
}

/// Polls `fut` exactly once and drops it: its output if it finished in that poll.
fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

#[tokio::test]
async fn one_batch_takes_what_rdy_and_the_limit_allow_read_from_disk_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    let bodies: Vec<Bytes> = (0..10).map(|i| b(&format!("body-{i}"))).collect();
    e.publish("t", bodies.clone(), None).await.unwrap();
    // Reopened: no body is among the recent appends, so each batch is read from the segment.
    let (e, mut c) = restarted(e, dir.path(), 4).await;
    let limit = BatchLimit {
        messages: 100,
        bytes: 1 << 20,
    };
    let first = next_batch(&mut c, limit).await;
    assert_eq!(
        first.iter().map(|d| d.body.clone()).collect::<Vec<_>>(),
        bodies[..4],
        "RDY 4: four messages, in order, in one call"
    );
    assert_eq!(c.in_flight(), 4);
    c.finish(first[0].id).await.unwrap();
    c.finish(first[1].id).await.unwrap();
    let second = next_batch(&mut c, limit).await;
    assert_eq!(
        second.iter().map(|d| d.body.clone()).collect::<Vec<_>>(),
        bodies[4..6]
    );
    // The byte limit stops a batch after the message that reaches it, and never before one.
    c.set_ready(10);
    let one = next_batch(
        &mut c,
        BatchLimit {
            messages: 100,
            bytes: 1,
        },
    )
    .await;
    assert_eq!(one.len(), 1);
    let rest = next_batch(
        &mut c,
        BatchLimit {
            messages: 2,
            bytes: 1 << 20,
        },
    )
    .await;
    assert_eq!(
        rest.iter().map(|d| d.body.clone()).collect::<Vec<_>>(),
        bodies[7..9]
    );
    let m = e.metrics();
    assert_eq!(m.get(Counter::FetchMessages), 9);
    assert_eq!(m.get(Counter::FetchBatches), 4, "one take per batch");
}

#[tokio::test]
async fn a_batch_mixes_requeued_and_new_messages_each_with_its_own_body() {
    // A batch's entries are read from the log in one short hold of its lock, from the
    // channel's cursor on; a requeued message lies behind the cursor and is looked up on its
    // own. Both kinds, from the segment file (after a restart) and from the recent appends,
    // must come with their own bodies and attempt counts.
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    e.create_channel("t", "c").unwrap();
    let bodies: Vec<Bytes> = (0..9).map(|i| b(&format!("body-{i}"))).collect();
    e.publish("t", bodies[..6].to_vec(), None).await.unwrap();
    let (e, mut c) = restarted(e, dir.path(), 20).await;
    let limit = |messages| BatchLimit {
        messages,
        bytes: 1 << 20,
    };
    let first = next_batch(&mut c, limit(3)).await;
    assert_eq!(
        first.iter().map(|d| d.body.clone()).collect::<Vec<_>>(),
        bodies[..3]
    );
    c.requeue(first[1].id, Duration::ZERO).await.unwrap();
    c.finish(first[0].id).await.unwrap();
    c.finish(first[2].id).await.unwrap();
    // Read from the file: the requeued message first, then the rest from the cursor on.
    let second = next_batch(&mut c, limit(2)).await;
    let got: Vec<_> = second
        .iter()
        .map(|d| (d.body.clone(), d.attempts))
        .collect();
    assert_eq!(got, vec![(bodies[1].clone(), 2), (bodies[3].clone(), 1)]);
    c.requeue(second[1].id, Duration::ZERO).await.unwrap();
    c.finish(second[0].id).await.unwrap();
    // New appends (recent bodies) behind a requeued message read from the file.
    e.publish("t", bodies[6..].to_vec(), None).await.unwrap();
    let mut rest = Vec::new();
    while rest.len() < 6 {
        rest.extend(
            next_batch(&mut c, limit(100))
                .await
                .into_iter()
                .map(|d| (d.body, d.attempts)),
        );
    }
    let want: Vec<_> = [3, 4, 5, 6, 7, 8]
        .iter()
        .map(|&i| (bodies[i].clone(), if i == 3 { 2 } else { 1 }))
        .collect();
    assert_eq!(rest, want);
    none_within(&mut c, 100).await;
}
