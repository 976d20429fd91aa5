//! Every V2 command over real TCP against an in-process broker.

mod common;

use common::{Broker, eventually};
use rustqueue_protocol::Frame;
use rustqueue_protocol::command::encode_mpub_body;
use std::time::{Duration, Instant};

#[tokio::test]
async fn publish_subscribe_finish_round_trip() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    p.publish("orders", b"first").await;
    let mut c = b.client().await;
    c.subscribe("orders", "ch", 1).await;
    let (id, attempts, body) = c.expect_message().await;
    assert_eq!((attempts, &body[..]), (1, &b"first"[..]));
    c.fin(&id).await;
    c.cmd("NOP").await;
    p.publish("orders", b"second").await;
    let (_, _, body) = c.expect_message().await;
    assert_eq!(body, b"second");
    b.stop().await;
}

#[tokio::test]
async fn identify_with_feature_negotiation_replies_with_the_nsqd_keys() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.send_identify(r#"{"feature_negotiation":true,"client_id":"t","heartbeat_interval":2000,"msg_timeout":5000,"output_buffer_size":-1}"#).await;
    let reply: serde_json::Value = serde_json::from_slice(&c.expect_response().await).unwrap();
    assert_eq!(reply["max_rdy_count"], 2500);
    assert_eq!(reply["msg_timeout"], 5000);
    assert_eq!(reply["output_buffer_size"], 1);
    assert_eq!(reply["output_buffer_timeout"], 0);
    assert_eq!(reply["auth_required"], false);
    assert_eq!(reply["tls_v1"], false);
    let mut plain = b.client().await;
    plain.send_identify("{}").await;
    plain.expect_ok().await;
    b.stop().await;
}

#[tokio::test]
async fn mpub_is_delivered_in_order_and_dpub_waits_for_its_deferral() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    p.cmd_body("MPUB t", &encode_mpub_body(&[b"a", b"b", b"c"]))
        .await;
    p.expect_ok().await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 10).await;
    for want in [b"a", b"b", b"c"] {
        let (id, _, body) = c.expect_message().await;
        assert_eq!(&body, want);
        c.fin(&id).await;
    }
    let start = Instant::now();
    p.cmd_body("DPUB t 600", b"later").await;
    p.expect_ok().await;
    let (_, _, body) = c.expect_message().await;
    assert_eq!(body, b"later");
    assert!(
        start.elapsed() >= Duration::from_millis(550),
        "deferred only {:?}",
        start.elapsed()
    );
    b.stop().await;
}

/// The consumer's message timeout, and the TOUCH pace: a TOUCH every 100 ms for 6 s, longer
/// than the 5 s timeout, so the check holds its premise (each TOUCH inside the timeout of the
/// one before) through a stall of almost five seconds. The broker runs on the test's one
/// thread, so a stall of it delays the TOUCHes and the expiry alike, and after the stall the
/// expiry runs first: with a 1 s timeout and 400 ms pacing a 600 ms stall once let the
/// timeout win, and at 100 ms pacing, in `make test`'s busiest minutes, once more.
const MSG_TIMEOUT: Duration = Duration::from_secs(5);
const TOUCH_EVERY: Duration = Duration::from_millis(100);
const TOUCHES: u32 = 60;

#[tokio::test]
async fn req_redelivers_with_attempts_and_touch_keeps_a_message_in_flight() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    p.publish("t", b"m").await;
    let mut c = b.client().await;
    c.send_identify(&format!(r#"{{"msg_timeout":{}}}"#, MSG_TIMEOUT.as_millis()))
        .await;
    c.expect_ok().await;
    c.subscribe("t", "ch", 1).await;
    let (id, attempts, _) = c.expect_message().await;
    assert_eq!(attempts, 1);
    c.cmd(&format!("REQ {} 0", std::str::from_utf8(&id).unwrap()))
        .await;
    let (id, attempts, _) = c.expect_message().await;
    assert_eq!(attempts, 2);
    // TOUCH for longer than the timeout, yet no redelivery. The sleeps are the pacing under
    // test (each TOUCH within the timeout of the one before), not a synchronisation; a
    // redelivery would arrive before `next` below. The longest gap between two TOUCHes as
    // this side sent them goes into the failure message: a stall the test saw.
    assert!(TOUCH_EVERY * TOUCHES > MSG_TIMEOUT);
    let mut last = Instant::now();
    let mut longest = Duration::ZERO;
    for _ in 0..TOUCHES {
        tokio::time::sleep(TOUCH_EVERY).await;
        c.cmd(&format!("TOUCH {}", std::str::from_utf8(&id).unwrap()))
            .await;
        longest = longest.max(last.elapsed());
        last = Instant::now();
    }
    c.fin(&id).await;
    c.cmd("NOP").await;
    p.publish("t", b"next").await;
    let (_, attempts, body) = c.expect_message().await;
    assert_eq!(
        (attempts, &body[..]),
        (1, &b"next"[..]),
        "the touched message came back; longest gap between TOUCHes sent: {longest:?}"
    );
    b.stop().await;
}

#[tokio::test]
async fn rdy_bounds_the_messages_in_flight() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    for i in 0..5 {
        p.publish("t", format!("m{i}").as_bytes()).await;
    }
    let mut c = b.client().await;
    c.subscribe("t", "ch", 2).await;
    let first = c.expect_message().await;
    let _second = c.expect_message().await;
    // No third message while two are in flight.
    let extra = tokio::time::timeout(Duration::from_millis(500), c.answer()).await;
    assert!(extra.is_err(), "got a third message with RDY 2: {extra:?}");
    c.fin(&first.0).await;
    c.expect_message().await;
    c.cmd("RDY 0").await;
    b.stop().await;
}

#[tokio::test]
async fn fan_out_gives_each_channel_every_message() {
    let b = Broker::start().await;
    let mut c1 = b.client().await;
    c1.subscribe("t", "one", 5).await;
    let mut c2 = b.client().await;
    c2.subscribe("t", "two", 5).await;
    let mut p = b.client().await;
    p.publish("t", b"x").await;
    assert_eq!(c1.expect_message().await.2, b"x");
    assert_eq!(c2.expect_message().await.2, b"x");
    b.stop().await;
}

#[tokio::test]
async fn cls_answers_close_wait_and_the_server_closes_when_nothing_is_in_flight() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    p.publish("t", b"x").await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 1).await;
    let (id, _, _) = c.expect_message().await;
    c.cmd("CLS").await;
    assert_eq!(c.expect_response().await, b"CLOSE_WAIT");
    c.cmd_body("PUB t", b"x").await;
    c.expect_error("E_CLOSING").await;
    c.fin(&id).await;
    c.expect_closed().await;
    b.stop().await;
}

#[tokio::test]
async fn heartbeats_arrive_and_a_silent_client_is_disconnected() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.send_identify(r#"{"heartbeat_interval":1000}"#).await;
    c.expect_ok().await;
    let start = Instant::now();
    match c.frame().await {
        Some(Frame::Response(r)) => assert_eq!(&r[..], b"_heartbeat_"),
        other => panic!("expected a heartbeat, got {other:?}"),
    }
    // Not answering: closed after ~2 intervals.
    loop {
        match c.frame().await {
            Some(Frame::Response(r)) if &r[..] == b"_heartbeat_" => continue,
            None => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(start.elapsed() >= Duration::from_millis(1500));
    b.stop().await;
}

#[tokio::test]
async fn stats_show_the_subscribed_client_and_the_producer() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.send_identify(r#"{"client_id":"consumer-1"}"#).await;
    c.expect_ok().await;
    c.subscribe("t", "ch", 1).await;
    let mut p = b.client().await;
    p.publish("t", b"x").await;
    c.expect_message().await;
    eventually(async || {
        let v: serde_json::Value = b.get_json("/stats?format=json").await;
        let ch = &v["topics"][0]["channels"][0];
        ch["clients"][0]["client_id"] == "consumer-1"
            && ch["clients"][0]["message_count"] == 1
            && v["producers"][0]["pub_counts"][0]["count"] == 1
            && v["memory"]["heap_in_use_bytes"].as_u64().unwrap_or(0) > 0
    })
    .await;
    b.stop().await;
}

#[tokio::test]
async fn ten_thousand_fins_in_one_write_all_take_effect_and_the_session_goes_on() {
    // More FINs than a session lets wait for their WAL fsync at once (8,192): the rest wait
    // unread, then run; none is lost and the connection keeps working.
    let b = Broker::start_with(|c| c.limits.max_rdy_count = 10_000).await;
    let mut p = b.client().await;
    let bodies: Vec<Vec<u8>> = (0..10_000).map(|i| format!("m{i}").into_bytes()).collect();
    for chunk in bodies.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        p.cmd_body("MPUB t", &encode_mpub_body(&refs)).await;
        p.expect_ok().await;
    }
    let mut c = b.client().await;
    c.subscribe("t", "ch", 10_000).await;
    let mut fins = Vec::new();
    for _ in 0..10_000 {
        let (id, _, _) = c.expect_message().await;
        fins.extend_from_slice(b"FIN ");
        fins.extend_from_slice(&id);
        fins.push(b'\n');
    }
    c.send(&fins).await;
    p.publish("t", b"after").await;
    let (id, attempts, body) = c.expect_message().await;
    assert_eq!((attempts, &body[..]), (1, &b"after"[..]));
    c.fin(&id).await;
    c.cmd("CLS").await;
    assert_eq!(c.expect_response().await, b"CLOSE_WAIT");
    c.expect_closed().await;
    let mut again = b.client().await;
    again.subscribe("t", "ch", 10).await;
    again.cmd("NOP").await;
    let quiet = tokio::time::timeout(Duration::from_millis(300), again.answer()).await;
    assert!(quiet.is_err(), "nothing is redelivered: {quiet:?}");
    b.stop().await;
}

#[tokio::test]
async fn a_consumer_with_nothing_left_to_work_on_gets_buffered_messages_without_the_buffer_timeout()
{
    let b = Broker::start().await;
    let mut p = b.client().await;
    // RDY 1: the one message fills the consumer, so it is flushed at once (nsqd does the same).
    let mut one = b.client().await;
    one.send_identify(r#"{"output_buffer_timeout":1000}"#).await;
    one.expect_ok().await;
    one.subscribe("buffered", "one", 1).await;
    one.cmd("NOP").await;
    let t0 = Instant::now();
    p.publish("buffered", b"now").await;
    let (_, _, body) = one.expect_message().await;
    assert_eq!(body, b"now");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "RDY 1 consumer waited {:?} for a message it could not add to",
        t0.elapsed()
    );
    // RDY 2, both slots used: a message that arrives while the client still works on one is
    // batched, but once the client has finished everything it was sent it gets it at once.
    let mut two = b.client().await;
    two.send_identify(r#"{"output_buffer_timeout":1000}"#).await;
    two.expect_ok().await;
    two.subscribe("pair", "two", 2).await;
    two.cmd("NOP").await;
    p.publish("pair", b"m1").await;
    p.publish("pair", b"m2").await;
    let (id1, _, _) = two.expect_message().await;
    let (id2, _, _) = two.expect_message().await;
    p.publish("pair", b"m3").await;
    two.fin(&id1).await;
    two.fin(&id2).await;
    let t0 = Instant::now();
    let (_, _, body) = two.expect_message().await;
    assert_eq!(body, b"m3");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "an idle RDY 2 consumer waited {:?} for the buffered message",
        t0.elapsed()
    );
    // RDY 10: an idle client gets a message at once; while it still holds one, the next is
    // batched until the 1 s output buffer timeout.
    let mut many = b.client().await;
    many.send_identify(r#"{"output_buffer_timeout":1000}"#)
        .await;
    many.expect_ok().await;
    many.subscribe("held", "many", 10).await;
    many.cmd("NOP").await;
    let t0 = Instant::now();
    p.publish("held", b"first").await;
    assert_eq!(many.expect_message().await.2, b"first");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "an idle consumer waited {:?}",
        t0.elapsed()
    );
    let t0 = Instant::now();
    p.publish("held", b"later").await;
    assert_eq!(many.expect_message().await.2, b"later");
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "output buffer timeout 1 s not honoured for a busy consumer: delivered after {:?}",
        t0.elapsed()
    );
    b.stop().await;
}

#[tokio::test]
async fn a_channel_takes_no_more_consumers_than_its_limit_like_nsqd() {
    let b = Broker::start_with(|c| c.limits.max_channel_consumers = 2).await;
    let mut first = b.client().await;
    first.subscribe("busy", "ch", 1).await;
    let mut second = b.client().await;
    second.subscribe("busy", "ch", 1).await;
    // nsqd: E_SUB_FAILED (fatal) naming the channel and the limit
    let mut third = b.client().await;
    third.cmd("SUB busy ch").await;
    let msg = third.expect_error("E_SUB_FAILED").await;
    assert!(
        msg.contains("consumers for busy:ch exceeds limit of 2"),
        "{msg}"
    );
    third.expect_closed().await;
    // another channel of the topic has its own count
    let mut elsewhere = b.client().await;
    elsewhere.subscribe("busy", "other", 1).await;
    // a consumer that leaves frees its place
    drop(first);
    eventually(async || {
        let mut again = b.client().await;
        again.cmd("SUB busy ch").await;
        matches!(again.frame().await, Some(Frame::Response(r)) if &r[..] == b"OK")
    })
    .await;
    b.stop().await;
}
