//! The Kodo producer protocol at the gateway, with no broker needed: magic, IDENTIFY rules,
//! refused commands, size limits, heartbeats, the 4160 port and the refused HTTP publish.

mod kodo_support;
mod support;

use std::time::Duration;

use kodo_support::*;
use rustqueue_protocol::Frame;

async fn idle_gateway() -> (FakeDiscovery, rustqueue_gateway::KodoGateway) {
    let d = FakeDiscovery::start(vec![]).await;
    let gw = kodo_gateway(&d, &[]).await;
    (d, gw)
}

#[tokio::test]
async fn wrong_magic_gets_e_bad_protocol() {
    let (_d, gw) = idle_gateway().await;
    let mut c = Client::raw(gw.tcp_address).await;
    c.send(b"  V1PUB t\n").await;
    c.expect_error("E_BAD_PROTOCOL").await;
    c.expect_closed().await;
    gw.shutdown().await;
}

#[tokio::test]
async fn identify_answers_the_documented_values_once() {
    let (_d, gw) = idle_gateway().await;
    let mut c = Client::connect(gw.tcp_address).await;
    let reply = c
        .identify(r#"{"feature_negotiation":true,"msg_timeout":5000,"user_agent":"go-nsq/1.1.0"}"#)
        .await;
    let Frame::Response(json) = reply else {
        panic!("{reply:?}")
    };
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["max_rdy_count"], 2500);
    assert_eq!(v["max_msg_timeout"], 900_000);
    assert_eq!(v["msg_timeout"], 5000);
    assert_eq!(v["output_buffer_size"], 16_384);
    assert_eq!(v["output_buffer_timeout"], 250);
    for off in ["auth_required", "tls_v1", "snappy", "deflate"] {
        assert_eq!(v[off], false, "{off}");
    }
    c.send(b"NOP\n").await;
    c.identify(r#"{"feature_negotiation":true}"#).await;
    // The second IDENTIFY is answered E_INVALID (read above as the "answer") and closes.
    c.expect_closed().await;

    let mut plain = Client::connect(gw.tcp_address).await;
    match plain.identify(r#"{"client_id":"k"}"#).await {
        Frame::Response(r) => assert_eq!(&r[..], b"OK"),
        other => panic!("{other:?}"),
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn upgrades_auth_and_consumer_commands_are_refused_and_close() {
    let (_d, gw) = idle_gateway().await;
    for ask in [
        r#"{"tls_v1":true}"#,
        r#"{"snappy":true}"#,
        r#"{"deflate":true,"feature_negotiation":true}"#,
    ] {
        let mut c = Client::connect(gw.tcp_address).await;
        c.cmd_body("IDENTIFY", ask.as_bytes()).await;
        c.expect_error("E_IDENTIFY_FAILED").await;
        c.expect_closed().await;
    }
    for bad_hb in [
        r#"{"heartbeat_interval":999}"#,
        r#"{"heartbeat_interval":300001}"#,
    ] {
        let mut c = Client::connect(gw.tcp_address).await;
        c.cmd_body("IDENTIFY", bad_hb.as_bytes()).await;
        c.expect_error("E_BAD_BODY").await;
        c.expect_closed().await;
    }
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("AUTH", b"secret").await;
    c.expect_error("E_AUTH_DISABLED").await;
    c.expect_closed().await;
    for line in [
        "SUB t c\n",
        "RDY 1\n",
        "FIN 0123456789abcdef\n",
        "CLS\n",
        "HELLO\n",
    ] {
        let mut c = Client::connect(gw.tcp_address).await;
        c.send(line.as_bytes()).await;
        c.expect_error("E_INVALID").await;
        c.expect_closed().await;
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn size_limits_are_checked_before_the_body_is_read() {
    let (_d, gw) = idle_gateway().await;
    let cases: [(&str, u32, &str); 5] = [
        ("PUB t", 104_857_601, "E_BAD_MESSAGE"),
        ("DPUB t 10", 104_857_601, "E_BAD_MESSAGE"),
        ("MPUB t", 134_217_729, "E_BAD_BODY"),
        ("IDENTIFY", 1_048_577, "E_BAD_BODY"),
        ("PUB t", 0, "E_BAD_MESSAGE"),
    ];
    for (line, size, code) in cases {
        let mut c = Client::connect(gw.tcp_address).await;
        let mut head = format!("{line}\n").into_bytes();
        head.extend_from_slice(&size.to_be_bytes());
        c.send(&head).await;
        c.expect_error(code).await;
        c.expect_closed().await;
    }
    let mut c = Client::connect(gw.tcp_address).await;
    let body = rustqueue_protocol::command::encode_mpub_body(&[b"abcdef", &[0u8; 0]]);
    c.cmd_body("MPUB t", &body).await;
    c.expect_error("E_BAD_MESSAGE").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn idle_producers_get_heartbeats_at_the_negotiated_interval() {
    let (_d, gw) = idle_gateway().await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.identify(r#"{"heartbeat_interval":1000}"#).await;
    for _ in 0..2 {
        match c.frame_within(Duration::from_millis(1800)).await {
            Some(Frame::Response(r)) => assert_eq!(&r[..], b"_heartbeat_"),
            other => panic!("{other:?}"),
        }
        c.send(b"NOP\n").await;
    }
    let mut quiet = Client::connect(gw.tcp_address).await;
    quiet.identify(r#"{"heartbeat_interval":-1}"#).await;
    let silent = tokio::time::timeout(Duration::from_millis(1500), quiet.frame()).await;
    assert!(silent.is_err(), "no heartbeat when disabled: {silent:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn with_no_publish_ready_broker_a_pub_closes_without_an_answer() {
    let (_d, gw) = idle_gateway().await;
    let mut c = Client::connect(gw.tcp_address).await;
    c.cmd_body("PUB t", b"lost?").await;
    c.expect_closed().await;
    assert_eq!(metric(&gw, "rustqueue_gateway_publish_backends"), 0.0);
    gw.shutdown().await;
}

/// The 404 bodies are discovery's own (docs/discovery.md: `POST /channel/delete` is 404
/// `{"message":"E_NOT_FOUND Kodo cleanup compatibility is disabled"}` in both modes), so a
/// Kodo producer sees one answer whichever of the two it reaches.
#[tokio::test]
async fn http_publishing_is_refused_and_4160_serves_probes_and_metrics() {
    let (_d, gw) = idle_gateway().await;
    let http = rustqueue_api::http_client::client();
    assert_eq!(
        rustqueue_api::gateway::kodo::CLEANUP_DISABLED,
        "E_NOT_FOUND Kodo cleanup compatibility is disabled"
    );
    for addr in gw.shard_addresses {
        for (path, message) in [
            (
                "/pub?topic=t",
                "E_NOT_FOUND Kodo Gateway HTTP forwarding is disabled",
            ),
            (
                "/mpub?topic=t",
                "E_NOT_FOUND Kodo Gateway HTTP forwarding is disabled",
            ),
            (
                "/channel/delete?topic=t&channel=c",
                rustqueue_api::gateway::kodo::CLEANUP_DISABLED,
            ),
        ] {
            let r = http
                .post(format!("http://{addr}{path}"))
                .body("m")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "{addr}{path}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body, serde_json::json!({ "message": message }), "{path}");
        }
    }
    let ports: Vec<u16> = gw.shard_addresses.iter().map(|a| a.port()).collect();
    assert_eq!(ports, [4151, 4154, 4155]);
    assert_eq!(gw.metrics_address.port(), 4160);
    let base = format!("http://{}", gw.metrics_address);
    assert_eq!(
        http.get(format!("{base}/ping"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        http.get(format!("{base}/v1/health"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("rustqueue_gateway_kodo_gateway 1"), "{text}");
    assert!(
        text.contains("rustqueue_gateway_producer_retries_total 0"),
        "{text}"
    );
    gw.shutdown().await;
}
