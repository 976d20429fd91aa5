//! The HTTP side over real sockets: forwarding, the ambiguity rule with a broker that hangs
//! up mid-request, retries of idempotent requests, and every documented refusal.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn http_brokers(n: u32) -> Vec<Listed> {
    let mut out = Vec::new();
    for id in 1..=n {
        out.push(Listed {
            node_id: id,
            tcp_port: dead_port().await,
            http_port: http_broker(id).await,
        });
    }
    out
}

fn client() -> reqwest::Client {
    rustqueue_api::http_client::builder()
        .no_proxy()
        .build()
        .unwrap()
}

fn url(gw: &rustqueue_gateway::Gateway, target: &str) -> String {
    format!("http://{}{}", gw.http_address, target)
}

async fn error_code(resp: reqwest::Response) -> (u16, String, Option<String>) {
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: serde_json::Value = resp.json().await.unwrap();
    (status, body["message"].as_str().unwrap().to_string(), retry)
}

#[tokio::test]
async fn publishes_are_forwarded_to_brokers_and_answers_passed_back() {
    let d = FakeDiscovery::start(http_brokers(2).await).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    let mut nodes = std::collections::BTreeSet::new();
    for i in 0..40 {
        let resp = client()
            .post(url(&gw, "/pub?topic=orders"))
            .body(format!("m{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        nodes.insert(resp.headers()["x-node"].to_str().unwrap().to_string());
        assert_eq!(resp.headers()["x-nsq-content-type"], "nsq; version=1.0");
        let text = resp.text().await.unwrap();
        assert!(
            text.ends_with(&format!("POST /pub?topic=orders m{i}")),
            "{text}"
        );
    }
    assert_eq!(nodes.len(), 2, "shuffled over both brokers: {nodes:?}");
    // Unknown routes are forwarded too, and the broker's answer is passed back as it is.
    let resp = client().get(url(&gw, "/missing?x=1")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.text().await.unwrap(), r#"{"message":"NOT_FOUND"}"#);
    // HEAD: the length the broker's answer declares ("node=N HEAD /h "), no body.
    let head = client().head(url(&gw, "/h")).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"],
        "node=1 HEAD /h ".len().to_string().as_str()
    );
    assert!(head.bytes().await.unwrap().is_empty());
    let resp = client()
        .get(url(&gw, "/some/route?a=%20b"))
        .send()
        .await
        .unwrap();
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("GET /some/route?a=%20b")
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn local_routes_answer_without_brokers() {
    let d = FakeDiscovery::start(vec![]).await;
    let gw = gateway(&[&d], &[]).await;
    let resp = client().get(url(&gw, "/ping")).send().await.unwrap();
    assert_eq!(
        (resp.status().as_u16(), resp.text().await.unwrap()),
        (200, "OK".to_string())
    );
    let resp = client().get(url(&gw, "/v1/health")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    d.set(http_brokers(1).await);
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let body: serde_json::Value = client()
        .get(url(&gw, "/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let publishers = gw.observe().pools().publish_backends();
    let address = format!("{}:{}", publishers[0].host, publishers[0].tcp_port);
    assert_eq!(
        body,
        serde_json::json!({
            "status": "ready",
            "brokers": 1,
            "revision": 2,
            "publishers": [{"node_id": publishers[0].node_id, "address": address}],
        }),
        "health names the discovery revision it routes by and the brokers in its pool"
    );
    let text = client()
        .get(url(&gw, "/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&gw, "rustqueue_gateway_discovery_revision"), 2.0);
    for name in [
        "rustqueue_gateway_backend_duration_seconds",
        "rustqueue_gateway_discovery_poll_duration_seconds",
        "rustqueue_gateway_tcp_connection_rotations_total",
        "rustqueue_gateway_producer_ambiguous_failures_total",
        "rustqueue_gateway_publish_backends 1",
        "rustqueue_gateway_broker_backends 1",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn no_publish_ready_broker_is_503_with_retry_after() {
    let d = FakeDiscovery::start(vec![]).await;
    let gw = gateway(&[&d], &[]).await;
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(resp).await,
        (503, "E_NO_BROKER".into(), Some("1".into()))
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_publish_to_a_broker_that_hangs_up_is_ambiguous_counted_and_never_retried() {
    let seen = Arc::new(AtomicUsize::new(0));
    let mut listed = Vec::new();
    for id in 1..=2 {
        listed.push(Listed {
            node_id: id,
            tcp_port: dead_port().await,
            http_port: hangup_broker(seen.clone()).await,
        });
    }
    let d = FakeDiscovery::start(listed).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    for (n, (method, target)) in [
        ("POST", "/pub?topic=t"),
        ("POST", "/mpub?topic=t"),
        ("PUT", "/x"),
        ("DELETE", "/y"),
    ]
    .into_iter()
    .enumerate()
    {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let resp = client()
            .request(m, url(&gw, target))
            .body("payload")
            .send()
            .await
            .unwrap();
        let (status, code, _) = error_code(resp).await;
        assert_eq!(
            (status, code.as_str()),
            (502, "E_AMBIGUOUS"),
            "{method} {target}"
        );
        // A hold, not a synchronisation: the broker counted the request before it hung up,
        // so `seen` already holds it; watch a little longer for a retry that must not come.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            seen.load(Ordering::SeqCst),
            n + 1,
            "exactly one broker saw {method} {target}"
        );
        assert_eq!(
            metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
            (n + 1) as f64
        );
    }
    assert_eq!(metric(&gw, "rustqueue_gateway_producer_retries_total"), 0.0);
    gw.shutdown().await;
}

#[tokio::test]
async fn idempotent_requests_try_a_second_broker() {
    let seen = Arc::new(AtomicUsize::new(0));
    let listed = vec![
        Listed {
            node_id: 1,
            tcp_port: dead_port().await,
            http_port: hangup_broker(seen.clone()).await,
        },
        Listed {
            node_id: 2,
            tcp_port: dead_port().await,
            http_port: http_broker(2).await,
        },
    ];
    let d = FakeDiscovery::start(listed).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    for _ in 0..20 {
        let resp = client()
            .get(url(&gw, "/stats?format=json"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-node"], "2");
    }
    let hung = seen.load(Ordering::SeqCst);
    assert!(
        hung > 0,
        "the shuffle never chose the broken broker first in 20 tries"
    );
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_retries_total"),
        hung as f64
    );
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
        0.0
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_publish_that_could_not_connect_is_not_ambiguous() {
    let listed = vec![Listed {
        node_id: 1,
        tcp_port: dead_port().await,
        http_port: dead_port().await,
    }];
    let d = FakeDiscovery::start(listed).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(resp).await.1, "E_BAD_GATEWAY");
    assert_eq!(
        metric(&gw, "rustqueue_gateway_producer_ambiguous_failures_total"),
        0.0
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn oversized_bodies_are_413_declared_or_streamed() {
    let d = FakeDiscovery::start(http_brokers(1).await).await;
    let gw = gateway(
        &[&d],
        &["--max-body-bytes", "1000", "--max-message-bytes", "1000"],
    )
    .await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body(vec![b'x'; 1001])
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(resp).await.0, 413);
    let chunked = raw_http(
        &gw,
        format!(
            "POST /pub?topic=t HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
             3e8\r\n{}\r\n3e8\r\n{}\r\n0\r\n\r\n",
            "y".repeat(1000),
            "z".repeat(1000)
        )
        .as_bytes(),
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    assert!(chunked.contains("E_BAD_BODY"), "{chunked}");
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body(vec![b'x'; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "a body at the limit passes");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_slow_body_is_408() {
    let d = FakeDiscovery::start(http_brokers(1).await).await;
    let gw = gateway(&[&d], &["--http-body-timeout-ms", "300"]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(gw.http_address)
        .await
        .unwrap();
    s.write_all(b"POST /pub?topic=t HTTP/1.1\r\nHost: g\r\nContent-Length: 10\r\n\r\nab")
        .await
        .unwrap();
    let mut out = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("E_BODY_TIMEOUT"), "{text}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_spent_budget_is_429_with_retry_after() {
    let d = FakeDiscovery::start(http_brokers(1).await).await;
    let flags = [
        "--max-body-bytes",
        "1000",
        "--max-message-bytes",
        "1000",
        "--max-inflight-bytes",
        "1500",
    ];
    let gw = gateway(&[&d], &flags).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    // One slow request holds 1000 of the 1500 bytes while its body trickles in.
    let mut holder = tokio::net::TcpStream::connect(gw.http_address)
        .await
        .unwrap();
    holder
        .write_all(b"POST /pub?topic=t HTTP/1.1\r\nHost: g\r\nContent-Length: 1000\r\n\r\nab")
        .await
        .unwrap();
    wait_until(Duration::from_secs(10), || {
        gw.observe().budget_available() == 500
    })
    .await;
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body(vec![b'x'; 600])
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(resp).await,
        (429, "E_THROTTLED".into(), Some("1".into()))
    );
    // Undeclared length reserves the whole body limit: refused too.
    let chunked = raw_http(
        &gw,
        b"POST /pub?topic=t HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n",
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 429"), "{chunked}");
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body(vec![b'x'; 500])
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "what fits in the rest of the budget passes"
    );
    assert_eq!(metric(&gw, "rustqueue_gateway_http_throttled_total"), 2.0);
    // The holder finishes; its bytes come back to the budget.
    holder.write_all(&[b'x'; 998]).await.unwrap();
    let mut out = vec![0u8; 4096];
    let n = holder.read(&mut out).await.unwrap();
    assert!(String::from_utf8_lossy(&out[..n]).starts_with("HTTP/1.1 200"));
    let resp = client()
        .post(url(&gw, "/pub?topic=t"))
        .body(vec![b'x'; 1000])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn absolute_form_targets_are_400_and_nothing_is_forwarded() {
    let d = FakeDiscovery::start(http_brokers(1).await).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    for target in [
        "http://other.example/pub?topic=t",
        "http://127.0.0.1:1/ping",
    ] {
        let answer = raw_http(
            &gw,
            format!("POST {target} HTTP/1.1\r\nHost: g\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx").as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
        assert!(answer.contains("E_BAD_REQUEST"), "{answer}");
    }
    let garbage = raw_http(&gw, b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(
        garbage.is_empty() || garbage.starts_with("HTTP/1.1 400"),
        "{garbage}"
    );
    let resp = client().get(url(&gw, "/ping")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "still serving");
    gw.shutdown().await;
}

/// The HTTP connection cap (`--max-http-connections`) works like the TCP one: a connection
/// above it is closed at once, the open ones keep being served, a freed slot is usable again.
#[tokio::test]
async fn http_connections_above_the_cap_are_closed_while_open_ones_keep_working() {
    let d = FakeDiscovery::start(http_brokers(1).await).await;
    let gw = gateway(&[&d], &["--max-http-connections", "2"]).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(gw.http_address)
            .await
            .unwrap();
        assert!(ping_answered(&mut s).await, "a connection within the cap");
        held.push(s);
    }
    for i in 0..20 {
        let mut s = tokio::net::TcpStream::connect(gw.http_address)
            .await
            .unwrap();
        let _ = s.write_all(b"GET /ping HTTP/1.1\r\nHost: g\r\n\r\n").await;
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "connection {i} above the cap was served: {n:?}"
        );
    }
    for (i, s) in held.iter_mut().enumerate() {
        assert!(ping_answered(s).await, "held connection {i} harmed");
    }
    assert_eq!(
        metric(&gw, "rustqueue_gateway_http_refused_connections_total"),
        20.0
    );
    drop(held.pop());
    // The slot frees once the gateway sees the close: retry until a new connection is
    // served, within a bound meant for a loaded machine, not a count of tries.
    let freed = Instant::now();
    let again = loop {
        let mut s = tokio::net::TcpStream::connect(gw.http_address)
            .await
            .unwrap();
        if ping_answered(&mut s).await {
            break s;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(10),
            "a freed slot is usable again within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop((held, again));
    gw.shutdown().await;
}

/// Send `GET /ping` on a kept-alive connection; true when `OK` comes back.
async fn ping_answered(s: &mut tokio::net::TcpStream) -> bool {
    if s.write_all(b"GET /ping HTTP/1.1\r\nHost: g\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    while !got.ends_with(b"OK") {
        match tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&b[..n]),
            _ => return false,
        }
    }
    String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200")
}
