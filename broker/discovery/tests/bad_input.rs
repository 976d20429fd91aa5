//! Hostile requests over a real socket get the documented answers (docs/discovery.md,
//! "Errors") and leave the service answering: huge request lines, huge headers, huge and slow
//! bodies, garbage instead of HTTP, malformed query strings.

mod support;

use std::sync::Arc;
use std::time::Duration;

use rustqueue_discovery::{Shared, static_view};
use support::{FakeBroker, start_discovery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// Send `head` then `body_chunks` (ignoring write errors: the server may close early) and
/// return the status line.
async fn raw(addr: std::net::SocketAddr, head: Vec<u8>, body_chunks: usize) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(&head).await;
    let chunk = vec![b'a'; 64 * 1024];
    for _ in 0..body_chunks {
        if s.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_documented_errors() {
    let a = FakeBroker::start("127.0.0.1:0", 1, &["t"]).await;
    let (_tx, rx) = watch::channel(static_view(&[a.addr.to_string()]));
    let d = start_discovery(rx, Arc::new(Shared::default()), vec![]).await;
    d.wait_lookup("t", Some(vec![1]), Duration::from_secs(5))
        .await;

    let long_line = format!(
        "GET /lookup?topic={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100_000)
    );
    assert_eq!(
        raw(d.addr, long_line.into_bytes(), 0).await,
        "HTTP/1.1 414 URI Too Long"
    );

    let big_header = format!(
        "GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(2_000_000)
    );
    let status = raw(d.addr, big_header.into_bytes(), 0).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");

    let big_body = b"GET /topics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n".to_vec();
    assert_eq!(raw(d.addr, big_body, 64).await, "HTTP/1.1 200 OK");

    let post_body =
        b"POST /lookup?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n";
    assert_eq!(
        raw(d.addr, post_body.to_vec(), 64).await,
        "HTTP/1.1 405 Method Not Allowed"
    );

    // A body that never arrives does not hold the answer back.
    let slow = b"GET /lookup?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab".to_vec();
    assert_eq!(raw(d.addr, slow, 0).await, "HTTP/1.1 200 OK");

    assert_eq!(
        raw(d.addr, b"\x00\x01\x02garbage\r\n\r\n".to_vec(), 0).await,
        "HTTP/1.1 400 Bad Request"
    );

    for q in [
        "topic=%",
        "topic=%g1",
        "topic=a;b",
        "%%%&&&===",
        "topic=%ff%fe",
    ] {
        let (code, v) = d.get(&format!("/lookup?{q}")).await;
        assert!(code == 400 || code == 404, "{q}: {code} {v}");
        assert!(v["message"].is_string(), "{q}: {v}");
    }

    // Still serving.
    assert_eq!(d.lookup_nodes("t").await, Some(vec![1]));
}
