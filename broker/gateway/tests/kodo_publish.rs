//! Publishing through a Kodo gateway to real `rustqueued` brokers: exactly-once landing,
//! 100 MiB messages byte for byte, drain retries, a broker killed mid-write, the in-flight
//! budget, and the health port following the publish pool.

mod kodo_support;
mod support;

use std::time::Duration;

use kodo_support::*;
use rustqueue_protocol::Frame;
use rustqueue_protocol::command::encode_mpub_body;

async fn ready(gw: &rustqueue_gateway::KodoGateway, n: usize) {
    wait_until(Duration::from_secs(10), || {
        gw.observe().pools().publish_count() == n
    })
    .await;
}

/// The `n` messages of `topic` on `broker`, through a channel created before publishing,
/// and then nothing more for `quiet`.
async fn consume(broker: &Broker, topic: &str, n: usize, quiet: Duration) -> Vec<Vec<u8>> {
    let mut c = Client::connect(broker.tcp).await;
    c.subscribe(topic, "audit", 100).await;
    let got = c.receive(n).await;
    c.expect_no_message(quiet).await;
    got
}

async fn create_channel(brokers: &[&Broker], topic: &str) {
    for b in brokers {
        let r = b
            .post(&format!("/channel/create?topic={topic}&channel=audit"), "")
            .await;
        assert!(r.status().is_success(), "{}", r.status());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_mpub_and_dpub_land_exactly_once() {
    let (b1, b2) = (Broker::start(1).await, Broker::start(2).await);
    create_channel(&[&b1, &b2], "orders").await;
    let d = FakeDiscovery::start(vec![b1.listed(), b2.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 2).await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.identify(r#"{"client_id":"kodo","feature_negotiation":true}"#)
        .await;
    c.cmd_body("PUB orders", b"one").await;
    c.expect_ok().await;
    c.cmd_body("MPUB orders", &encode_mpub_body(&[b"two", b"three"]))
        .await;
    c.expect_ok().await;
    c.cmd_body("DPUB orders 200", b"four").await;
    c.expect_ok().await;
    let (n1, n2) = (b1.count("orders").await, b2.count("orders").await);
    assert_eq!(n1 + n2, 4);
    let mut seen = consume(&b1, "orders", n1 as usize, Duration::from_millis(800)).await;
    seen.extend(consume(&b2, "orders", n2 as usize, Duration::from_millis(800)).await);
    seen.sort();
    let want: Vec<Vec<u8>> = ["four", "one", "three", "two"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(seen, want);
    assert_eq!(metric(&gw, "rustqueue_gateway_producer_retries_total"), 0.0);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_100_mib_minus_100_bytes_arrives_byte_for_byte() {
    let b = Broker::start(1).await;
    create_channel(&[&b], "big").await;
    let d = FakeDiscovery::start(vec![b.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 1).await;
    let body = payload(7, 104_857_500);
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("PUB big", &body).await;
    c.expect_ok().await;
    let got = consume(&b, "big", 1, Duration::from_secs(3)).await;
    assert!(
        got[0] == body,
        "the consumed body differs from the published one"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_broker_sends_the_next_pub_and_dpub_to_another_broker() {
    let (b1, b2) = (Broker::start(1).await, Broker::start(2).await);
    let d = FakeDiscovery::start(vec![b1.listed(), b2.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 2).await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("PUB jobs", b"first").await;
    c.expect_ok().await;
    let (owner, other) = if b1.count("jobs").await == 1 {
        (&b1, &b2)
    } else {
        (&b2, &b1)
    };
    assert_eq!(owner.count("jobs").await, 1);
    let r = owner.post("/v1/drain", r#"{"enabled":true}"#).await;
    assert!(r.status().is_success(), "{}", r.status());
    // Still listed by discovery and still the producer's session: the broker says
    // E_DRAINING, which is pre-commit, and the gateway retries on the other broker.
    c.cmd_body("PUB jobs", b"second").await;
    c.expect_ok().await;
    c.cmd_body("DPUB jobs 100", b"third").await;
    c.expect_ok().await;
    assert_eq!(
        owner.count("jobs").await,
        1,
        "nothing more on the draining broker"
    );
    assert_eq!(other.count("jobs").await, 2);
    assert!(metric(&gw, "rustqueue_gateway_producer_retries_total") >= 1.0);
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
        0.0
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_while_a_large_pub_is_written_costs_a_retry_not_a_message() {
    let (mut b1, mut b2) = (Broker::start(1).await, Broker::start(2).await);
    let d = FakeDiscovery::start(vec![b1.listed(), b2.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 2).await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("PUB ledger", b"small").await;
    c.expect_ok().await;
    let first_on_1 = b1.count("ledger").await == 1;
    let (victim, survivor) = if first_on_1 {
        (&mut b1, &mut b2)
    } else {
        (&mut b2, &mut b1)
    };
    // The victim stops reading: the gateway's write of 64 MiB blocks in the socket
    // buffers; the SIGKILL then resets the connection while the body is incomplete.
    victim.pause().await;
    let body = payload(3, 64 * 1024 * 1024);
    let mut head = b"PUB ledger\n".to_vec();
    head.extend_from_slice(&(body.len() as u32).to_be_bytes());
    c.send(&head).await;
    c.send(&body).await;
    // The gateway has started writing the PUB to the victim; 64 MiB cannot fit the socket
    // buffers, so the write is still in progress.
    wait_until(Duration::from_secs(30), || victim.unread_bytes() > 0).await;
    victim.kill();
    match c.answer().await {
        Some(Frame::Response(r)) if &r[..] == b"OK" => {}
        other => panic!("a pre-commit failure is retried and acknowledged, got {other:?}"),
    }
    assert_eq!(metric(&gw, "rustqueue_gateway_producer_retries_total"), 1.0);
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
        0.0
    );
    assert_eq!(
        survivor.count("ledger").await,
        1,
        "the large message is on the survivor"
    );
    victim.restart().await;
    assert_eq!(
        victim.count("ledger").await,
        1,
        "only the small message on the killed broker"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_after_a_whole_pub_was_sent_gives_e_ambiguous_and_no_retry() {
    let (mut b1, mut b2) = (Broker::start(1).await, Broker::start(2).await);
    let d = FakeDiscovery::start(vec![b1.listed(), b2.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 2).await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("PUB unsure", b"warm").await;
    c.expect_ok().await;
    let first_on_1 = b1.count("unsure").await == 1;
    let (victim, survivor) = if first_on_1 {
        (&mut b1, &mut b2)
    } else {
        (&mut b2, &mut b1)
    };
    // A small PUB fits the socket buffers: written and flushed whole, then the broker dies
    // before answering. The gateway cannot know whether it was stored.
    victim.pause().await;
    c.cmd_body("PUB unsure", b"maybe").await;
    // The whole PUB has reached the victim: line, size and body.
    let whole = ("PUB unsure\n".len() + 4 + b"maybe".len()) as u64;
    wait_until(Duration::from_secs(30), || victim.unread_bytes() == whole).await;
    victim.kill();
    let text = c.expect_error("E_AMBIGUOUS").await;
    assert!(text.contains("automatic retry is unsafe"), "{text}");
    c.expect_closed().await;
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
        1.0
    );
    assert_eq!(metric(&gw, "rustqueue_gateway_producer_retries_total"), 0.0);
    assert_eq!(
        survivor.count("unsure").await,
        0,
        "an ambiguous publish is never retried"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pub_whose_working_set_does_not_fit_the_budget_closes_its_connection() {
    let b = Broker::start(1).await;
    let d = FakeDiscovery::start(vec![b.listed()]).await;
    // The smallest budget Kodo mode accepts: one worst-case MPUB (136 MiB).
    let gw = kodo_gateway(&d, &["--max-inflight-bytes", "142606336"]).await;
    ready(&gw, 1).await;
    let idle = gw.observe().budget_available();
    // A producer announces 100 MiB and sends only the start: the 100 MiB stay reserved.
    let mut slow = Client::connect(gw.tcp_address).await;
    let mut head = b"PUB t\n".to_vec();
    head.extend_from_slice(&104_857_600u32.to_be_bytes());
    slow.send(&head).await;
    slow.send(&payload(1, 1024 * 1024)).await;
    wait_until(Duration::from_secs(10), || {
        gw.observe().budget_available() == idle - 104_857_600
    })
    .await;
    // 40 MiB more does not fit: closed before its body is read, without an answer.
    let mut refused = Client::connect(gw.tcp_address).await;
    let mut head = b"PUB t\n".to_vec();
    head.extend_from_slice(&(40u32 * 1024 * 1024).to_be_bytes());
    refused.send(&head).await;
    refused.expect_closed().await;
    assert_eq!(
        metric(&gw, "rustqueue_gateway_kodo_budget_closes_total"),
        1.0
    );
    assert_eq!(b.count("t").await, 0);
    // A /stats call reserves 96 MiB of the same budget: refused while the 100 MiB are held.
    let stats = format!("http://{}/stats", gw.shard_addresses[0]);
    let r = rustqueue_api::http_client::get(&stats).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(metric(&gw, "rustqueue_gateway_http_throttled_total"), 1.0);
    // The slow producer leaves; its reservation comes back and 40 MiB now fit.
    drop(slow);
    wait_until(Duration::from_secs(10), || {
        gw.observe().budget_available() == idle
    })
    .await;
    let mut next = Client::connect(gw.tcp_address).await;
    next.cmd_body("PUB t", &payload(2, 40 * 1024 * 1024)).await;
    next.expect_ok().await;
    assert_eq!(b.count("t").await, 1);
    assert_eq!(
        rustqueue_api::http_client::get(&stats)
            .await
            .unwrap()
            .status(),
        200
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_the_publish_in_progress_and_runs_no_queued_command() {
    let b = Broker::start(1).await;
    let d = FakeDiscovery::start(vec![b.listed()]).await;
    let gw = kodo_gateway(&d, &[]).await;
    ready(&gw, 1).await;
    let tcp = gw.tcp_address;
    let idle = gw.observe().budget_available();
    let mut c = Client::connect(tcp).await;
    c.cmd_body("PUB late", b"warm").await;
    c.expect_ok().await;
    // The broker holds its answer while it is paused: the first PUB is in progress at the
    // gateway (all of it written to the broker), the second waits in the queue behind it
    // (read, its body reserved from the budget beside the first's).
    b.pause().await;
    c.cmd_body("PUB late", b"in-progress").await;
    c.cmd_body("PUB late", b"queued").await;
    let in_progress = ("PUB late\n".len() + 4 + b"in-progress".len()) as u64;
    wait_until(Duration::from_secs(30), || {
        b.unread_bytes() == in_progress
            && idle - gw.observe().budget_available() == b"in-progress".len() + b"queued".len()
    })
    .await;
    let stopping = tokio::spawn(gw.shutdown());
    // No new producer connection once shutdown began: the listener closes.
    wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(tcp).is_err()
    })
    .await;
    b.resume();
    c.expect_ok().await;
    c.expect_closed().await;
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        b.count("late").await,
        2,
        "warm and in-progress stored, queued never sent"
    );
}
