//! Bad input over real TCP: each gets the documented error, and other connections carry on.

mod common;

use std::time::Duration;

use common::{Broker, Client};
use rustqueue_protocol::command::encode_mpub_body;
use tokio::io::AsyncWriteExt;

/// A healthy publisher/consumer pair that must keep working while others misbehave, and no
/// panic anywhere in the broker.
async fn assert_others_unaffected(b: &Broker, n: u32) {
    assert_eq!(
        common::panics(),
        0,
        "something panicked (see the output above)"
    );
    let mut p = b.client().await;
    p.publish("healthy", format!("ok-{n}").as_bytes()).await;
    let mut c = b.client().await;
    c.subscribe("healthy", &format!("c{n}"), 100).await;
    let (id, _, _) = c.expect_message().await;
    c.fin(&id).await;
}

#[tokio::test]
async fn wrong_magic_gets_bad_protocol_then_close() {
    let b = Broker::start().await;
    let mut c = Client::raw(b.tcp).await.with_patience(common::T);
    c.send(b"  V1").await;
    c.expect_error("E_BAD_PROTOCOL").await;
    c.expect_closed().await;
    b.stop().await;
}

#[tokio::test]
async fn every_malformed_command_gets_its_error_code_and_closes() {
    let b = Broker::start().await;
    // Acknowledged before the barrage; every one must still be there after it.
    let mut keep = b.client().await;
    keep.cmd("SUB backlog keep").await;
    keep.expect_ok().await;
    keep.cmd("CLS").await;
    let mut p = b.client().await;
    for i in 0..20 {
        p.publish("backlog", format!("kept-{i}").as_bytes()).await;
    }
    let long = format!("PUB {}\n", "x".repeat(2000));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"BOGUS\n".to_vec(), "E_INVALID invalid command BOGUS"),
        (long.into_bytes(), "E_INVALID command line exceeds limit"),
        (
            b"\x00\x01garbage\xff\n".to_vec(),
            "E_INVALID invalid command",
        ),
        (b"PUB bad/topic\n".to_vec(), "E_BAD_TOPIC"),
        (
            format!("PUB {}\n", "x".repeat(65)).into_bytes(),
            "E_BAD_TOPIC",
        ),
        (b"SUB t bad!\n".to_vec(), "E_BAD_CHANNEL"),
        (
            b"SUB t\n".to_vec(),
            "E_INVALID SUB insufficient number of parameters",
        ),
        (
            b"PUB t\n\x00\x00\x00\x00".to_vec(),
            "E_BAD_MESSAGE PUB invalid body size 0",
        ),
        (
            b"PUB t\n\x01\x40\x00\x01".to_vec(),
            "E_BAD_MESSAGE PUB message too big",
        ),
        (
            b"MPUB t\n\x00\x00\x00\x00".to_vec(),
            "E_BAD_BODY MPUB invalid body size 0",
        ),
        (
            b"MPUB t\n\x05\x00\x00\x01".to_vec(),
            "E_BAD_BODY MPUB body too big",
        ),
        (b"DPUB t 99999999999\n".to_vec(), "E_INVALID DPUB timeout"),
        (b"RDY 1\n".to_vec(), "E_INVALID cannot RDY in current state"),
        (
            b"FIN 0000000000000001\n".to_vec(),
            "E_INVALID cannot FIN in current state",
        ),
        (b"FIN xyz\n".to_vec(), "E_INVALID invalid message ID"),
        (b"CLS\n".to_vec(), "E_INVALID cannot CLS in current state"),
        (b"AUTH\n\x00\x00\x00\x01s".to_vec(), "E_AUTH_DISABLED"),
        (b"IDENTIFY\n\x00\x00\x00\x01{".to_vec(), "E_BAD_BODY"),
        (
            b"IDENTIFY\n\x00\x00\x00\x00".to_vec(),
            "E_BAD_BODY IDENTIFY invalid body size 0",
        ),
    ];
    for (i, (input, want)) in cases.into_iter().enumerate() {
        let mut c = b.client().await;
        c.send(&input).await;
        let got = c.expect_error(want.split(' ').next().unwrap()).await;
        assert!(
            got.starts_with(want),
            "case {i}: want {want:?}, got {got:?}"
        );
        c.expect_closed().await;
    }
    assert_others_unaffected(&b, 0).await;
    let mut c = b.client().await;
    c.subscribe("backlog", "keep", 100).await;
    let mut got = Vec::new();
    for _ in 0..20 {
        let (id, _, body) = c.expect_message().await;
        got.push(String::from_utf8(body).unwrap());
        c.fin(&id).await;
    }
    got.sort_by_key(|s| s[5..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..20).map(|i| format!("kept-{i}")).collect();
    assert_eq!(got, want, "acknowledged messages lost to bad input");
    b.stop().await;
}

#[tokio::test]
async fn invalid_identify_values_get_bad_body_and_both_compressions_fail() {
    let b = Broker::start().await;
    for json in [
        r#"{"heartbeat_interval":10}"#,
        r#"{"output_buffer_size":1}"#,
        r#"{"output_buffer_timeout":1}"#,
        r#"{"sample_rate":100}"#,
        r#"{"msg_timeout":900001}"#,
    ] {
        let mut c = b.client().await;
        c.send_identify(json).await;
        c.expect_error("E_BAD_BODY").await;
        c.expect_closed().await;
    }
    let mut c = b.client().await;
    c.send_identify(r#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#)
        .await;
    c.expect_error("E_IDENTIFY_FAILED").await;
    c.expect_closed().await;
    let mut c = b.client().await;
    c.cmd("NOP").await;
    c.send_identify("{}").await;
    c.expect_error("E_INVALID cannot IDENTIFY in current state")
        .await;
    b.stop().await;
}

#[tokio::test]
async fn rdy_above_the_maximum_and_sub_without_heartbeats_are_fatal() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 2501).await;
    c.expect_error("E_INVALID RDY count 2501 out of range 0-2500")
        .await;
    c.expect_closed().await;
    let mut c = b.client().await;
    c.send_identify(r#"{"heartbeat_interval":-1}"#).await;
    c.expect_ok().await;
    c.cmd("SUB t ch").await;
    c.expect_error("E_INVALID cannot SUB with heartbeats disabled")
        .await;
    b.stop().await;
}

#[tokio::test]
async fn fin_of_an_unknown_message_is_not_fatal() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 1).await;
    c.cmd("FIN 00000000000000ff").await;
    c.expect_error("E_FIN_FAILED").await;
    c.cmd("REQ 00000000000000ff 10").await;
    c.expect_error("E_REQ_FAILED").await;
    c.cmd("TOUCH 00000000000000ff").await;
    c.expect_error("E_TOUCH_FAILED").await;
    let mut p = b.client().await;
    p.publish("t", b"still works").await;
    assert_eq!(c.expect_message().await.2, b"still works");
    b.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_mid_body_is_timed_out_without_publishing() {
    let b = Broker::start_with(|c| c.limits.tcp_command_timeout_ms = 500).await;
    let mut c = b.client().await;
    c.cmd("NOP").await;
    c.send(b"PUB t\n\x00\x00\x00\x10half").await;
    c.expect_error("E_INVALID command read timed out").await;
    c.expect_closed().await;
    assert_others_unaffected(&b, 1).await;
    let stats: serde_json::Value = b.get_json("/stats?format=json&topic=t").await;
    assert!(
        stats["topics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["message_count"] == 0)
    );
    b.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_and_others_keep_working() {
    let b = Broker::start_with(|c| c.limits.max_connections = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = b.client().await;
        c.cmd("NOP").await;
        held.push(c);
    }
    let mut extra = b.client().await;
    extra.expect_error("E_INVALID too many connections").await;
    extra.expect_closed().await;
    held[0].publish("t", b"x").await;
    drop(held);
    common::eventually(async || {
        let mut c = common::connect(b.tcp).await;
        c.cmd_body("PUB t", b"y").await;
        matches!(
            c.answer().await,
            Some(rustqueue_protocol::Frame::Response(_))
        )
    })
    .await;
    b.stop().await;
}

#[tokio::test]
async fn a_consumer_that_never_fins_loses_its_messages_to_others_after_the_timeout() {
    let b = Broker::start().await;
    let mut lazy = b.client().await;
    lazy.send_identify(r#"{"msg_timeout":1000}"#).await;
    lazy.expect_ok().await;
    lazy.subscribe("t", "ch", 10).await;
    let mut p = b.client().await;
    p.cmd_body("MPUB t", &encode_mpub_body(&[b"1", b"2"])).await;
    p.expect_ok().await;
    lazy.expect_message().await;
    lazy.expect_message().await;
    let mut good = b.client().await;
    good.subscribe("t", "ch", 10).await;
    let mut got = Vec::new();
    for _ in 0..2 {
        let (id, attempts, body) = good.expect_message().await;
        assert_eq!(attempts, 2);
        got.push(body);
        good.fin(&id).await;
    }
    got.sort();
    assert_eq!(got, vec![b"1".to_vec(), b"2".to_vec()]);
    b.stop().await;
}

#[tokio::test]
async fn a_client_disconnecting_mid_stream_returns_its_messages_at_once() {
    let b = Broker::start().await;
    let mut p = b.client().await;
    p.publish("t", b"m").await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 1).await;
    c.expect_message().await;
    c.io.shutdown().await.unwrap();
    drop(c);
    let mut other = b.client().await;
    other.subscribe("t", "ch", 1).await;
    let start = std::time::Instant::now();
    let (_, attempts, _) = other.expect_message().await;
    assert_eq!(attempts, 2);
    assert!(start.elapsed() < Duration::from_secs(30));
    b.stop().await;
}

/// A client that streams an oversized body in one write (as go-nsq does) reads the
/// E_BAD_MESSAGE that explains the refusal, instead of a connection reset in mid-write.
#[tokio::test]
async fn oversized_body_sent_in_full_still_gets_its_error() {
    let b = Broker::start_with(|c| c.queue.max_message_bytes = 1024 * 1024).await;
    let body = vec![b'x'; 16 * 1024 * 1024];
    for _ in 0..3 {
        let mut c = b.client().await;
        c.cmd_body("PUB big", &body).await;
        let got = c.expect_error("E_BAD_MESSAGE").await;
        assert_eq!(
            got,
            format!("E_BAD_MESSAGE PUB message too big {} > 1048576", body.len())
        );
        c.expect_closed().await;
    }
    assert_others_unaffected(&b, 1).await;
    b.stop().await;
}
