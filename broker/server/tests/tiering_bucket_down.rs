//! The bucket down for a minute under load (docs/tiering.md, "Uploads of sealed segments"):
//! a producer publishes at a steady rate and a consumer reads along while versitygw is
//! SIGSTOPped for 60 s (its port still accepts connections, which are never answered: the
//! worst kind of outage). Publishing never stalls, every acknowledged message is delivered
//! once and in order, the upload backlog shows the segments sealed meanwhile (refreshed while
//! the uploader's request hangs), and once the bucket answers again every one is uploaded.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Broker, Client, metric};
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_protocol::Frame;
use rustqueue_tier::test_server::{self, TestServer};
use tokio::sync::watch;

/// How long the bucket is down.
const OUTAGE: Duration = Duration::from_secs(60);
/// Messages per second the producer publishes, each of [`BODY`] bytes: about 1 MiB/s, so a
/// 1 MiB segment seals about every second.
const RATE: u64 = 500;
const BODY: usize = 2048;
/// The longest a publish may wait for its acknowledgement, outage or not: a loaded machine's
/// slowest fsync, far below the bucket's request timeout a publish waiting on it would show.
const ACK_BOUND: Duration = Duration::from_secs(5);

fn body(i: u64) -> Vec<u8> {
    i.to_le_bytes().repeat(BODY / 8)
}

async fn counter(b: &Broker, name: &str) -> f64 {
    metric(&b.metrics().await, name).unwrap_or_else(|| panic!("{name} is exported"))
}

/// Sealed segments of topic `t` on disk (each has its index; the active one has none yet).
fn sealed(b: &Broker) -> usize {
    let dir = b
        .dir
        .path()
        .join("topics")
        .join(rustqueue_storage::testing::hex("t"))
        .join("segments");
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".rqidx")
        })
        .count()
}

/// What the producer has had acknowledged, and whether it has stopped publishing.
#[derive(Clone, Copy, Default)]
struct Acked {
    count: u64,
    done: bool,
}

/// The longest the reader waits for the producer's next acknowledgement: the consumer's
/// patience, far above [`ACK_BOUND`].
const PATIENCE: Duration = Duration::from_secs(30);

/// Publishes at [`RATE`] until `stop`, announcing each acknowledgement on `acked` and, after
/// the last one, that it is done; returns the slowest acknowledgement.
async fn produce(mut p: Client, acked: watch::Sender<Acked>, stop: Arc<AtomicBool>) -> Duration {
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let due = start + Duration::from_secs_f64(i as f64 / RATE as f64);
        tokio::time::sleep_until(due.into()).await;
        let sent = Instant::now();
        p.publish("t", &body(i)).await;
        slowest = slowest.max(sent.elapsed());
        i += 1;
        acked.send_modify(|a| a.count = i);
    }
    acked.send_modify(|a| a.done = true);
    slowest
}

/// Reads and FINs in order until the producer is done and everything it had acknowledged has
/// arrived; returns how many. It waits for a frame only while an acknowledged message is
/// owed, and otherwise for the producer's next acknowledgement, so it never waits on a message
/// the producer did not send; a message sent but not yet acknowledged waits in the socket
/// until its acknowledgement is announced.
async fn read(mut consumer: Client, mut acked: watch::Receiver<Acked>) -> u64 {
    let mut next = 0u64;
    loop {
        let Acked { count, done } = *acked.borrow_and_update();
        if next == count {
            if done {
                break;
            }
            tokio::time::timeout(PATIENCE, acked.changed())
                .await
                .unwrap_or_else(|_| {
                    panic!("no acknowledgement after message {next} within {PATIENCE:?}")
                })
                .expect("the producer announces that it is done before it ends");
            continue;
        }
        match consumer.answer().await {
            Some(Frame::Message { id, body: got, .. }) => {
                assert!(
                    got[..] == body(next)[..],
                    "message {next} once, in order, intact"
                );
                consumer.fin(&id).await;
                next += 1;
            }
            other => panic!("message {next}: {other:?}"),
        }
    }
    consumer.expect_no_message(Duration::from_millis(500)).await;
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_without_the_bucket_under_load_loses_nothing_and_uploads_catch_up() {
    let mut server = TestServer::start();
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(keys.path().join("secret"), test_server::SECRET_KEY).unwrap();
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: server.endpoint(),
        prefix: Some("bucket-down".into()),
        allow_http: true,
        access_key_file: Some(keys.path().join("access")),
        secret_key_file: Some(keys.path().join("secret")),
        checkpoint_upload_seconds: 1,
        ..TieringConfig::default()
    };
    let b = Broker::start_with(move |cfg| {
        cfg.tiering = Some(tiering);
        cfg.storage.max_segment_bytes = 1 << 20;
        cfg.limits.max_body_bytes = 1 << 19;
        cfg.queue.max_message_bytes = 1 << 19;
    })
    .await;

    // The consumer reads along from the first message.
    let mut consumer = b.client().await.with_patience(Duration::from_secs(30));
    consumer.subscribe("t", "c", 200).await;
    let (acked, published) = watch::channel(Acked::default());
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(b.client().await, acked, stop.clone()));
    let reader = tokio::spawn(read(consumer, published.clone()));

    // Uploads work before the outage.
    common::eventually(async || counter(&b, "rustqueue_tiering_uploads_total").await >= 2.0).await;
    let failures_before = counter(&b, "rustqueue_tiering_bucket_request_failures_total").await
        + counter(&b, "rustqueue_tiering_upload_failures_total").await;
    server.pause();
    let down = Instant::now();
    let at_pause = published.borrow().count;
    tokio::time::sleep(OUTAGE).await;
    let during = published.borrow().count - at_pause;
    let failures_during = counter(&b, "rustqueue_tiering_bucket_request_failures_total").await
        + counter(&b, "rustqueue_tiering_upload_failures_total").await;
    let backlog = counter(&b, "rustqueue_tiering_upload_backlog_segments").await;
    server.resume();
    eprintln!(
        "bucket down {:?}: {during} messages acknowledged meanwhile, {} bucket failures counted, \
         {backlog} segments waiting",
        down.elapsed(),
        failures_during - failures_before
    );
    // At the steady rate, give or take a slow second on a loaded machine.
    assert!(
        during as f64 >= 0.9 * (RATE * OUTAGE.as_secs()) as f64,
        "publishing went on at its rate while the bucket was down: {during}"
    );
    // The uploader's request hangs (up to its timeout), so failures may not be counted yet;
    // the backlog must show, refreshed while that request waits.
    assert!(
        backlog >= 10.0,
        "the segments sealed meanwhile show as waiting: {backlog}"
    );

    // Once the bucket answers, every segment sealed meanwhile is uploaded, while publishing
    // goes on.
    common::eventually_within(Duration::from_secs(120), async || {
        counter(&b, "rustqueue_tiering_upload_backlog_segments").await == 0.0
            && counter(&b, "rustqueue_tiering_uploads_total").await >= sealed(&b) as f64
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let slowest = producer.await.unwrap();
    assert!(
        slowest < ACK_BOUND,
        "no publish waited on the bucket: the slowest took {slowest:?}"
    );
    let total = published.borrow().count;
    let read = reader.await.unwrap();
    assert_eq!(read, total, "every acknowledged message delivered");
    b.stop().await;
}
