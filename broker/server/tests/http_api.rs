//! The nsqd-compatible HTTP API over real HTTP.

mod common;

use common::Broker;
use rustqueue_protocol::command::encode_mpub_body;
use serde_json::Value;

async fn post(url: String, body: impl Into<reqwest::Body>) -> (u16, String, Option<String>) {
    let r = rustqueue_api::http_client::client()
        .post(url)
        .body(body)
        .send()
        .await
        .unwrap();
    let header = r
        .headers()
        .get("x-nsq-content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), r.text().await.unwrap(), header)
}

#[tokio::test]
async fn ping_info_and_the_nsq_content_type_header() {
    let b = Broker::start().await;
    let r = rustqueue_api::http_client::get(b.url("/ping"))
        .await
        .unwrap();
    assert_eq!(r.headers()["x-nsq-content-type"], "nsq; version=1.0");
    assert_eq!(r.text().await.unwrap(), "OK");
    let info: Value = b.get_json("/info").await;
    assert_eq!(info["tcp_port"], b.tcp.port());
    assert_eq!(info["http_port"], b.http.port());
    assert_eq!(info["max_heartbeat_interval"], 60_000_000_000u64);
    b.stop().await;
}

#[tokio::test]
async fn pub_and_mpub_deliver_over_tcp() {
    let b = Broker::start().await;
    assert_eq!(post(b.url("/pub?topic=t"), "one").await.1, "OK");
    assert_eq!(post(b.url("/mpub?topic=t"), "two\n\nthree\n").await.1, "OK");
    let bin = encode_mpub_body(&[b"four", b"five\nwith newline"]);
    assert_eq!(post(b.url("/mpub?topic=t&binary=true"), bin).await.1, "OK");
    // nsqd reads any value but "false"/"0" as binary, an empty one included.
    let bin = encode_mpub_body(&[b"six"]);
    assert_eq!(post(b.url("/mpub?topic=t&binary="), bin).await.1, "OK");
    let mut c = b.client().await;
    c.subscribe("t", "ch", 10).await;
    let mut got = Vec::new();
    for _ in 0..6 {
        let (id, _, body) = c.expect_message().await;
        got.push(String::from_utf8(body).unwrap());
        c.fin(&id).await;
    }
    assert_eq!(
        got,
        ["one", "two", "three", "four", "five\nwith newline", "six"]
    );
    b.stop().await;
}

#[tokio::test]
async fn publish_errors_use_nsqd_status_codes_and_json_bodies() {
    let b = Broker::start_with(|c| c.queue.max_message_bytes = 10).await;
    let cases = [
        ("/pub", "x", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=bad/name", "x", 400, "INVALID_TOPIC"),
        ("/pub?topic=t", "", 400, "MSG_EMPTY"),
        ("/pub?topic=t", "01234567890", 413, "MSG_TOO_BIG"),
        ("/pub?topic=t&defer=-1", "x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=3600001", "x", 400, "INVALID_DEFER"),
        ("/mpub?topic=t", "ok\n01234567890", 413, "MSG_TOO_BIG"),
        (
            "/mpub?topic=t&binary=true",
            "\x00\x00\x00\x05",
            413,
            "BAD_BODY",
        ),
        ("/topic/create", "", 400, "MISSING_ARG_TOPIC"),
        ("/channel/create?topic=t", "", 400, "MISSING_ARG_CHANNEL"),
        ("/topic/delete?topic=missing", "", 404, "TOPIC_NOT_FOUND"),
        ("/nope", "", 404, "NOT_FOUND"),
    ];
    for (path, body, status, code) in cases {
        let (got_status, text, header) = post(b.url(path), body).await;
        assert_eq!(got_status, status, "{path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: {text}"));
        assert_eq!(v["message"], code, "{path}");
        assert_eq!(header.as_deref(), Some("nsq; version=1.0"));
    }
    let r = rustqueue_api::http_client::client()
        .get(b.url("/pub?topic=t"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    b.stop().await;
}

#[tokio::test]
async fn topic_and_channel_admin_and_the_lookupd_view() {
    let b = Broker::start().await;
    assert_eq!(post(b.url("/topic/create?topic=a"), "").await.0, 200);
    assert_eq!(
        post(b.url("/channel/create?topic=a&channel=c1"), "")
            .await
            .0,
        200
    );
    let topics: Value = b.get_json("/topics").await;
    assert_eq!(topics["topics"], serde_json::json!(["a"]));
    let lookup: Value = b.get_json("/lookup?topic=a").await;
    assert_eq!(lookup["channels"], serde_json::json!(["c1"]));
    assert_eq!(lookup["producers"][0]["tcp_port"], b.tcp.port());
    let nodes: Value = b.get_json("/nodes").await;
    assert_eq!(nodes["producers"][0]["topics"], serde_json::json!(["a"]));
    let chans: Value = b.get_json("/channels?topic=a").await;
    assert_eq!(chans["channels"], serde_json::json!(["c1"]));
    for action in ["pause", "unpause", "empty"] {
        assert_eq!(
            post(b.url(&format!("/topic/{action}?topic=a")), "").await.0,
            200,
            "{action}"
        );
        assert_eq!(
            post(b.url(&format!("/channel/{action}?topic=a&channel=c1")), "")
                .await
                .0,
            200,
            "{action}"
        );
    }
    assert_eq!(
        post(b.url("/channel/delete?topic=a&channel=c1"), "")
            .await
            .0,
        200
    );
    assert_eq!(
        post(b.url("/channel/delete?topic=a&channel=c1"), "")
            .await
            .0,
        404
    );
    assert_eq!(post(b.url("/topic/delete?topic=a"), "").await.0, 200);
    let topics: Value = b.get_json("/topics").await;
    assert_eq!(topics["topics"], serde_json::json!([]));
    b.stop().await;
}

#[tokio::test]
async fn paused_channel_holds_messages_until_unpaused() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 1).await;
    assert_eq!(
        post(b.url("/channel/pause?topic=t&channel=ch"), "").await.0,
        200
    );
    post(b.url("/pub?topic=t"), "held").await;
    let early = tokio::time::timeout(std::time::Duration::from_millis(400), c.answer()).await;
    assert!(early.is_err(), "delivered while paused: {early:?}");
    assert_eq!(
        post(b.url("/channel/unpause?topic=t&channel=ch"), "")
            .await
            .0,
        200
    );
    assert_eq!(c.expect_message().await.2, b"held");
    b.stop().await;
}

#[tokio::test]
async fn stats_text_and_json_list_topics_and_channels() {
    let b = Broker::start().await;
    post(b.url("/pub?topic=t"), "x").await;
    post(b.url("/channel/create?topic=t&channel=ch"), "").await;
    let text = b.get_text("/stats").await;
    assert!(text.contains("[t"), "{text}");
    assert!(text.contains("[ch"), "{text}");
    assert!(text.contains("\nProducers: None\n"), "{text}");
    // A named TCP producer and an anonymous consumer show up like nsqd prints them.
    let mut p = b.client().await;
    p.send_identify(r#"{"hostname":"pub-host","user_agent":"agent/1.0"}"#)
        .await;
    p.expect_ok().await;
    p.publish("t", b"y").await;
    let mut c = b.client().await;
    c.subscribe("t", "ch", 1).await;
    c.expect_message().await;
    let text = b.get_text("/stats").await;
    for want in [
        "\nuptime ",
        "\nMemory:\n   heap_objects ",
        "\nTopics:\n   [t              ] depth: ",
        "\n      [ch                       ] depth: ",
        "\n        [V2 127.0.0.1:",
        "] state: 3 inflt: 1    rdy: 1    fin: 0 ",
        "\nProducers:\n   [V2 pub-host:",
        " agent/1.0",
        "] msgs: 1        topics: t=1 connected: ",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let v: Value = b.get_json("/stats?format=json").await;
    let producer = &v["producers"][0];
    assert_eq!(producer["hostname"], "pub-host", "{v}");
    assert_eq!(producer["user_agent"], "agent/1.0", "{v}");
    let consumer = &v["topics"][0]["channels"][0]["clients"][0];
    assert_eq!(consumer["hostname"], "127.0.0.1", "{v}");
    assert_eq!(consumer["client_id"], "127.0.0.1", "{v}");
    let v: Value = b.get_json("/stats?format=json").await;
    assert_eq!(v["health"], "OK");
    assert_eq!(v["topics"][0]["topic_name"], "t");
    assert_eq!(
        v["topics"][0]["message_count"], 2,
        "one HTTP and one TCP publish"
    );
    b.stop().await;
}

#[tokio::test]
async fn http_pub_with_defer_arrives_after_the_delay() {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.subscribe("deferred", "ch", 2).await;
    c.cmd("NOP").await;
    let t0 = std::time::Instant::now();
    assert_eq!(
        post(b.url("/pub?topic=deferred&defer=300"), "later")
            .await
            .0,
        200
    );
    assert_eq!(post(b.url("/pub?topic=deferred"), "now").await.0, 200);
    let (id, _, body) = c.expect_message().await;
    assert_eq!(body, b"now");
    c.fin(&id).await;
    let (_, _, body) = c.expect_message().await;
    assert_eq!(body, b"later");
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(280),
        "defer=300 delivered after {:?}",
        t0.elapsed()
    );
    b.stop().await;
}

#[tokio::test]
async fn channel_empty_drops_the_backlog_and_topic_pause_holds_delivery() {
    let b = Broker::start().await;
    let depth = async |b: &Broker| -> u64 {
        let v: Value = b.get_json("/stats?format=json&topic=e").await;
        v["topics"][0]["channels"][0]["depth"].as_u64().unwrap()
    };
    post(b.url("/channel/create?topic=e&channel=c"), "").await;
    post(b.url("/mpub?topic=e"), "1\n2\n3").await;
    assert_eq!(depth(&b).await, 3);
    assert_eq!(
        post(b.url("/channel/empty?topic=e&channel=c"), "").await.0,
        200
    );
    assert_eq!(depth(&b).await, 0);
    let mut c = b.client().await;
    c.subscribe("e", "c", 10).await;
    post(b.url("/pub?topic=e"), "fresh").await;
    assert_eq!(
        c.expect_message().await.2,
        b"fresh",
        "an emptied message came back"
    );

    let mut p = b.client().await;
    p.subscribe("p", "c", 1).await;
    assert_eq!(post(b.url("/topic/pause?topic=p"), "").await.0, 200);
    post(b.url("/pub?topic=p"), "held").await;
    let early = tokio::time::timeout(std::time::Duration::from_millis(400), p.answer()).await;
    assert!(
        early.is_err(),
        "delivered while the topic was paused: {early:?}"
    );
    assert_eq!(post(b.url("/topic/unpause?topic=p"), "").await.0, 200);
    assert_eq!(p.expect_message().await.2, b"held");
    b.stop().await;
}
