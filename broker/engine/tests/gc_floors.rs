//! Retention floors (docs/storage-format.md, "Retention"): GC never deletes a segment still inside the bootstrap
//! window or holding an in-flight or deferred message, and collects it once that is finished.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{segment_files, wait_for};
use rustqueue_engine::{Bytes, Consumer, ConsumerOptions, Delivery, Engine, EngineConfig, Timer};

fn cfg(dir: &Path, bootstrap: Duration) -> EngineConfig {
    EngineConfig {
        max_segment_bytes: 4_096,
        bootstrap_retention: bootstrap,
        gc_interval: Duration::from_millis(20),
        ..common::cfg(dir)
    }
}

fn kib(tag: &str) -> Bytes {
    let mut b = tag.as_bytes().to_vec();
    b.resize(1_024, b'.');
    Bytes::from(b)
}

async fn next(c: &mut Consumer) -> Delivery {
    next_within(c, Duration::from_secs(5)).await
}

async fn next_within(c: &mut Consumer, limit: Duration) -> Delivery {
    tokio::time::timeout(limit, c.next())
        .await
        .unwrap_or_else(|_| panic!("a delivery within {limit:?}"))
        .expect("not closed")
}

/// How long the held message is deferred: it must stay deferred while 30 fillers are
/// published, delivered and finished and three GC passes run. 1.5 s was not enough for a
/// debug build beside the e2e stages of `make test` (the held message came due mid-fill).
const HOLD: Duration = Duration::from_secs(5);

/// Waits until `n` more GC passes have completed.
async fn gc_passes(e: &Engine, n: u64) {
    let start = e.metrics().histogram(Timer::Gc).count;
    wait_for(5, "GC passes", || {
        e.metrics().histogram(Timer::Gc).count >= start + n
    })
    .await;
}

/// Publishes 30 filler messages and finishes them on `c` (and any earlier pending ones except
/// those whose body starts with `keep`).
async fn fill_and_finish(e: &Engine, c: &mut Consumer, n: usize, keep: &str) {
    for i in 0..n {
        e.publish("t", vec![kib(&format!("fill{i}"))], None)
            .await
            .unwrap();
    }
    let mut done = 0;
    while done < n {
        let d = next(c).await;
        assert!(
            !d.body.starts_with(keep.as_bytes()),
            "held message redelivered"
        );
        c.finish(d.id).await.unwrap();
        done += 1;
    }
}

#[tokio::test]
async fn the_default_bootstrap_window_keeps_fully_finished_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path(), Duration::from_secs(90)))
        .await
        .unwrap();
    e.create_channel("t", "c").unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    fill_and_finish(&e, &mut c, 40, "none").await;
    let before = segment_files(dir.path());
    assert!(before.len() >= 8, "{before:?}");
    assert_eq!(e.stats(Some("t"), Some("c")).topics[0].channels[0].depth, 0);
    gc_passes(&e, 5).await;
    assert_eq!(
        segment_files(dir.path()),
        before,
        "messages younger than 90 s stay for later channels"
    );
}

#[tokio::test]
async fn an_in_flight_message_pins_its_segment_until_it_is_finished() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path(), Duration::ZERO)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    // An ephemeral channel's in-flight message pins too, though its channel has no floor.
    let mut eph = e
        .subscribe("t", "x#ephemeral", ConsumerOptions::default())
        .unwrap();
    eph.set_ready(1);
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    e.publish("t", vec![kib("held")], None).await.unwrap();
    let held = next(&mut c).await;
    let eph_held = next(&mut eph).await;
    assert_eq!(held.id, eph_held.id);
    c.set_ready(2);
    fill_and_finish(&e, &mut c, 30, "held").await;
    let first = segment_files(dir.path())[0].clone();
    gc_passes(&e, 3).await;
    let now = segment_files(dir.path());
    assert_eq!(now[0], first, "the in-flight message's segment is kept");
    // Finish on the durable channel: the ephemeral in-flight delivery still pins it.
    c.finish(held.id).await.unwrap();
    gc_passes(&e, 3).await;
    assert_eq!(
        segment_files(dir.path())[0],
        first,
        "an ephemeral channel's in-flight message is kept"
    );
    eph.finish(eph_held.id).await.unwrap();
    wait_for(5, "segment collected after FIN", || {
        segment_files(dir.path())[0] != first
    })
    .await;
}

/// Engine with zero bootstrap window and one durable channel `c` consumed at RDY 1.
async fn open_with_consumer(dir: &Path) -> (Engine, Consumer) {
    let e = Engine::open(cfg(dir, Duration::ZERO)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    let c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1);
    (e, c)
}

/// With one deferred message (body `held...`) behind 30 finished fillers: its segment is kept
/// through GC passes, then collected once the message comes due and is finished.
async fn deferred_pins_until_finished(e: &Engine, c: &mut Consumer, dir: &Path) -> Delivery {
    fill_and_finish(e, c, 30, "held").await;
    let first = segment_files(dir)[0].clone();
    gc_passes(e, 3).await;
    assert_eq!(e.stats(None, None).topics[0].channels[0].deferred_count, 1);
    assert_eq!(
        segment_files(dir)[0],
        first,
        "the deferred message's segment is kept"
    );
    let d = next_within(c, HOLD + Duration::from_secs(5)).await;
    assert!(d.body.starts_with(b"held"));
    c.finish(d.id).await.unwrap();
    wait_for(5, "segment collected after FIN", || {
        segment_files(dir)[0] != first
    })
    .await;
    d
}

#[tokio::test]
async fn a_requeued_with_delay_message_pins_its_segment_until_it_is_finished() {
    let dir = tempfile::tempdir().unwrap();
    let (e, mut c) = open_with_consumer(dir.path()).await;
    e.publish("t", vec![kib("held")], None).await.unwrap();
    let held = next(&mut c).await;
    c.requeue(held.id, HOLD).await.unwrap();
    let again = deferred_pins_until_finished(&e, &mut c, dir.path()).await;
    assert_eq!((again.id, again.attempts), (held.id, 2));
}

#[tokio::test]
async fn a_deferred_publish_pins_its_segment_until_it_is_finished() {
    let dir = tempfile::tempdir().unwrap();
    let (e, mut c) = open_with_consumer(dir.path()).await;
    e.publish("t", vec![kib("held")], Some(HOLD)).await.unwrap();
    deferred_pins_until_finished(&e, &mut c, dir.path()).await;
}

#[tokio::test]
async fn an_ephemeral_channel_neither_satisfies_nor_clears_the_unrouted_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path(), Duration::ZERO)).await.unwrap();
    let mut eph = e
        .subscribe("t", "x#ephemeral", ConsumerOptions::default())
        .unwrap();
    eph.set_ready(100);
    for i in 0..20 {
        e.publish("t", vec![kib(&format!("m{i}"))], None)
            .await
            .unwrap();
    }
    for _ in 0..20 {
        let d = next(&mut eph).await;
        eph.finish(d.id).await.unwrap();
    }
    let before = segment_files(dir.path());
    gc_passes(&e, 3).await;
    assert_eq!(
        segment_files(dir.path()),
        before,
        "finished on an ephemeral channel only: still unrouted"
    );
    drop(eph);
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path(), Duration::ZERO)).await.unwrap();
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(100);
    for i in 0..20 {
        let d = next(&mut c).await;
        assert!(
            d.body.starts_with(format!("m{i}.").as_bytes()),
            "the first durable channel starts at the boundary"
        );
    }
}

#[tokio::test]
async fn deleting_the_last_durable_channel_moves_the_boundary_to_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path(), Duration::ZERO)).await.unwrap();
    e.create_channel("t", "c").unwrap();
    for i in 0..20 {
        e.publish("t", vec![kib(&format!("old{i}"))], None)
            .await
            .unwrap();
    }
    // Read while the channel still pins everything: GC may run right after the delete.
    let first = segment_files(dir.path())[0].clone();
    e.delete_channel("t", "c").await.unwrap();
    e.publish("t", vec![kib("new")], None).await.unwrap();
    wait_for(5, "segments before the boundary are collected", || {
        segment_files(dir.path())[0] != first
    })
    .await;
    e.shutdown().await;
    let e = Engine::open(cfg(dir.path(), Duration::ZERO)).await.unwrap();
    let mut d = e.subscribe("t", "d", ConsumerOptions::default()).unwrap();
    d.set_ready(100);
    let got = next(&mut d).await;
    assert!(
        got.body.starts_with(b"new"),
        "the next durable channel starts at the boundary, after the deleted channel's backlog"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), d.next())
            .await
            .is_err()
    );
}
