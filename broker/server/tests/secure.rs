//! TLS (and mTLS), Snappy, Deflate and AUTH over real sockets.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use common::{Broker, Client};
use rustqueue_protocol::Frame;
use rustqueue_server::testing::Compression;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    ca_der: rustls::pki_types::CertificateDer<'static>,
    client_chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    client_key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "worker-7");
    let client = client_params.signed_by(&client_key, &ca).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).unwrap();
    Pki {
        ca_der: ca.der().clone(),
        client_chain: vec![client.der().clone()],
        client_key: rustls::pki_types::PrivateKeyDer::Pkcs8(client_key.serialize_der().into()),
        dir,
        ca,
    }
}

fn tls_config(p: &Pki, required: bool, mtls: bool) -> rustqueue_server::TlsConfig {
    rustqueue_server::TlsConfig {
        certificate_file: p.dir.path().join("server.pem"),
        private_key_file: p.dir.path().join("server.key"),
        client_ca_file: mtls.then(|| p.dir.path().join("ca.pem")),
        require_client_certificate: mtls,
        required,
        min_version: None,
    }
}

async fn tls_upgrade(
    p: &Pki,
    mut c: Client<tokio::net::TcpStream>,
    with_cert: bool,
) -> Client<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    c.send_identify(r#"{"feature_negotiation":true,"tls_v1":true}"#)
        .await;
    let reply: serde_json::Value = serde_json::from_slice(&c.expect_response().await).unwrap();
    assert_eq!(reply["tls_v1"], true);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(p.ca_der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = if with_cert {
        builder
            .with_client_auth_cert(p.client_chain.clone(), p.client_key.clone_key())
            .unwrap()
    } else {
        builder.with_no_client_auth()
    };
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let io = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, c.io)
        .await
        .unwrap();
    let mut tls = Client::over(io).with_patience(common::T);
    tls.expect_ok().await;
    tls
}

#[tokio::test]
async fn tls_upgrade_then_publish_and_consume() {
    let p = pki();
    let b = Broker::start_with(|c| c.security.tls = Some(tls_config(&p, false, false))).await;
    let mut c = tls_upgrade(&p, b.client().await, false).await;
    c.publish("t", b"secret").await;
    c.subscribe("t", "ch", 1).await;
    assert_eq!(c.expect_message().await.2, b"secret");
    b.stop().await;
}

#[tokio::test]
async fn tls_required_refuses_plaintext_commands() {
    let p = pki();
    let b = Broker::start_with(|c| c.security.tls = Some(tls_config(&p, true, false))).await;
    let mut c = b.client().await;
    c.cmd_body("PUB t", b"x").await;
    c.expect_error("E_TLS_REQUIRED").await;
    c.expect_closed().await;
    let mut c = tls_upgrade(&p, b.client().await, false).await;
    c.publish("t", b"ok over tls").await;
    b.stop().await;
}

#[tokio::test]
async fn mtls_rejects_a_client_without_a_certificate() {
    let p = pki();
    let b = Broker::start_with(|c| c.security.tls = Some(tls_config(&p, true, true))).await;
    let mut good = tls_upgrade(&p, b.client().await, true).await;
    good.publish("t", b"x").await;
    let mut c = b.client().await;
    c.send_identify(r#"{"feature_negotiation":true,"tls_v1":true}"#)
        .await;
    c.expect_response().await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(p.ca_der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let outcome = async {
        let mut io = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, c.io)
            .await?;
        let mut buf = [0u8; 64];
        // TLS 1.3 reports the rejected certificate on the first read.
        match io.read(&mut buf).await? {
            0 => Err(std::io::Error::other("closed")),
            _ => Ok(()),
        }
    }
    .await;
    assert!(
        outcome.is_err(),
        "a client without a certificate got through"
    );
    b.stop().await;
}

/// A client speaking through a compression layer.
struct Compressed<S> {
    io: S,
    tx: Compression,
    rx: Compression,
    raw: BytesMut,
    plain: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Compressed<S> {
    async fn send(&mut self, data: &[u8]) {
        let mut wire = Vec::new();
        self.tx.encode(data, &mut wire);
        self.io.write_all(&wire).await.unwrap();
    }

    async fn frame(&mut self) -> Frame {
        tokio::time::timeout(common::T, async {
            loop {
                self.rx.decode(&mut self.raw, &mut self.plain).unwrap();
                if let Some(f) = Frame::decode(&mut self.plain, 1 << 24).unwrap() {
                    if !matches!(&f, Frame::Response(r) if &r[..] == b"_heartbeat_") {
                        return f;
                    }
                    continue;
                }
                assert!(self.io.read_buf(&mut self.raw).await.unwrap() > 0, "closed");
            }
        })
        .await
        .unwrap()
    }
}

async fn compressed_round_trip(identify: &str, make: fn() -> Compression) {
    let b = Broker::start().await;
    let mut c = b.client().await;
    c.send_identify(identify).await;
    c.expect_response().await;
    let mut z = Compressed {
        io: c.io,
        tx: make(),
        rx: make(),
        raw: c.buf,
        plain: BytesMut::new(),
    };
    assert_eq!(
        z.frame().await,
        Frame::Response(bytes::Bytes::from_static(b"OK"))
    );
    let big = "compressible ".repeat(5000);
    let mut cmd = b"PUB t\n".to_vec();
    cmd.extend_from_slice(&(big.len() as u32).to_be_bytes());
    cmd.extend_from_slice(big.as_bytes());
    z.send(&cmd).await;
    assert_eq!(
        z.frame().await,
        Frame::Response(bytes::Bytes::from_static(b"OK"))
    );
    z.send(b"SUB t ch\n").await;
    z.frame().await;
    z.send(b"RDY 1\n").await;
    match z.frame().await {
        Frame::Message { body, .. } => assert_eq!(body, big.as_bytes()),
        other => panic!("expected a message, got {other:?}"),
    }
    b.stop().await;
}

#[tokio::test]
async fn snappy_stream_carries_commands_and_messages() {
    compressed_round_trip(
        r#"{"feature_negotiation":true,"snappy":true}"#,
        Compression::snappy,
    )
    .await;
}

#[tokio::test]
async fn deflate_stream_carries_commands_and_messages() {
    compressed_round_trip(
        r#"{"feature_negotiation":true,"deflate":true,"deflate_level":3}"#,
        || Compression::deflate(3),
    )
    .await;
}

/// A tiny nsqd-style auth server: secret "good" may publish/subscribe on ^allowed, "none"
/// has no grants, anything else is 403. Counts requests.
async fn auth_server(ttl: u64) -> (String, Arc<AtomicUsize>) {
    use axum::extract::Query;
    use axum::http::StatusCode;
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/auth",
        axum::routing::get(move |Query(q): Query<HashMap<String, String>>| {
            let h = h.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                match q.get("secret").map(String::as_str) {
                    Some("good") => Ok(axum::Json(serde_json::json!({
                        "ttl": ttl, "identity": "alice", "identity_url": "",
                        "authorizations": [{"permissions": ["publish", "subscribe"], "topic": "^allowed", "channels": [".*"]}],
                    }))),
                    Some("none") => Ok(axum::Json(serde_json::json!({"ttl": ttl, "authorizations": []}))),
                    _ => Err(StatusCode::FORBIDDEN),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr.to_string(), hits)
}

#[tokio::test]
async fn auth_grants_denials_and_ttl_refresh() {
    let (addr, hits) = auth_server(1).await;
    let b = Broker::start_with(|c| c.security.auth_http_addresses = vec![addr]).await;

    let mut c = b.client().await;
    c.send_identify(r#"{"feature_negotiation":true}"#).await;
    let reply: serde_json::Value = serde_json::from_slice(&c.expect_response().await).unwrap();
    assert_eq!(reply["auth_required"], true);
    c.cmd_body("PUB allowed", b"x").await;
    c.expect_error("E_AUTH_FIRST").await;

    let mut c = b.client().await;
    let authed = std::time::Instant::now();
    c.cmd_body("AUTH", b"good").await;
    let reply: serde_json::Value = serde_json::from_slice(&c.expect_response().await).unwrap();
    assert_eq!(reply["identity"], "alice");
    assert_eq!(reply["permission_count"], 1);
    c.publish("allowed-topic", b"x").await;
    let before = hits.load(Ordering::SeqCst);
    // Publish until a PUB refreshes the AUTH: exactly once, and not before its 1 s TTL.
    let refreshed = loop {
        c.publish("allowed-topic", b"after ttl").await;
        let now = hits.load(Ordering::SeqCst);
        if now != before {
            assert_eq!(now, before + 1, "one expired AUTH, one refresh");
            break authed.elapsed();
        }
        assert!(
            authed.elapsed() < std::time::Duration::from_secs(10),
            "the expired AUTH was not refreshed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        refreshed >= std::time::Duration::from_secs(1),
        "AUTH refreshed {refreshed:?} after it was granted, within its 1 s TTL"
    );
    c.cmd_body("PUB other", b"x").await;
    c.expect_error("E_UNAUTHORIZED AUTH failed for PUB on \"other\"")
        .await;
    c.expect_closed().await;

    let mut c = b.client().await;
    c.cmd_body("AUTH", b"wrong").await;
    c.expect_error("E_AUTH_FAILED").await;
    c.expect_closed().await;

    let mut c = b.client().await;
    c.cmd_body("AUTH", b"none").await;
    c.expect_error("E_UNAUTHORIZED AUTH no authorizations found")
        .await;
    b.stop().await;
}

/// A TLS client connection to `addr` trusting the test CA, offering only `versions`.
async fn tls_connect(
    p: &Pki,
    addr: std::net::SocketAddr,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(p.ca_der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
}

/// One HTTP/1.1 request over `io`; the status code and the body.
async fn http_over(
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    io.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = io.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

#[tokio::test]
async fn the_https_listener_serves_the_http_api_with_the_broker_certificate() {
    let p = pki();
    let b = Broker::start_with(|c| {
        c.security.tls = Some(tls_config(&p, false, false));
        c.network.https_address = Some("127.0.0.1:0".into());
    })
    .await;
    let addr = b.running.as_ref().unwrap().https_addr().unwrap();
    let all = rustls::DEFAULT_VERSIONS;
    let io = tls_connect(&p, addr, all).await.unwrap();
    assert_eq!(
        http_over(io, "POST", "/pub?topic=s", "over https").await.0,
        200
    );
    let io = tls_connect(&p, addr, all).await.unwrap();
    let (status, stats) = http_over(io, "GET", "/stats?format=json", "").await;
    assert_eq!(status, 200, "{stats}");
    assert!(stats.contains("\"topic_name\":\"s\""), "{stats}");
    // a client that never finishes its handshake holds up nobody
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io = tls_connect(&p, addr, all).await.unwrap();
    assert_eq!(http_over(io, "GET", "/ping", "").await, (200, "OK".into()));
    // plain HTTP on the HTTPS port is not answered as HTTP
    let plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_ne!(http_over(plain, "GET", "/ping", "").await.0, 200);
    b.stop().await;
}

/// The HTTPS API through reqwest, as the operator or a user's tool reaches it: a client from
/// rustqueue_api::http_client (TLS on ring, no process-wide provider needed) that trusts the
/// broker's CA and presents a client certificate where the broker requires one.
#[tokio::test]
async fn a_reqwest_client_on_ring_reaches_the_https_api_with_our_ca_and_a_client_certificate() {
    use rustqueue_api::http_client;
    let p = pki();
    let b = Broker::start_with(|c| {
        c.security.tls = Some(tls_config(&p, false, true));
        c.network.https_address = Some("127.0.0.1:0".into());
    })
    .await;
    let addr = b.running.as_ref().unwrap().https_addr().unwrap();
    let url = format!("https://localhost:{}/ping", addr.port());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(p.ca_der.clone()).unwrap();
    let client = |roots: rustls::RootCertStore, identity| {
        http_client::builder_with_tls(http_client::tls_config(roots, identity).unwrap())
            .resolve("localhost", addr)
            .no_proxy()
            .build()
            .unwrap()
    };
    let identity = (p.client_chain.clone(), p.client_key.clone_key());
    let r = client(roots.clone(), Some(identity))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "OK");
    // the broker requires a client certificate
    let refused = client(roots, None).get(&url).send().await;
    assert!(refused.is_err(), "{refused:?}");
    // the default roots (Mozilla's) do not trust our CA
    let refused = client(http_client::mozilla_roots(), None)
        .get(&url)
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    b.stop().await;
}

#[tokio::test]
async fn tls_min_version_1_3_refuses_a_tls_1_2_client() {
    let p = pki();
    let b = Broker::start_with(|c| {
        let mut tls = tls_config(&p, false, false);
        tls.min_version = Some("tls1.3".into());
        c.security.tls = Some(tls);
        c.network.https_address = Some("127.0.0.1:0".into());
    })
    .await;
    let addr = b.running.as_ref().unwrap().https_addr().unwrap();
    assert!(
        tls_connect(&p, addr, &[&rustls::version::TLS12])
            .await
            .is_err(),
        "a TLS 1.2 client got through a tls1.3 minimum"
    );
    let io = tls_connect(&p, addr, &[&rustls::version::TLS13])
        .await
        .unwrap();
    assert_eq!(http_over(io, "GET", "/ping", "").await.0, 200);
    b.stop().await;
}

/// The certificate the HTTPS listener presents to a new client.
async fn served_certificate(p: &Pki, addr: std::net::SocketAddr) -> Vec<u8> {
    let io = tls_connect(p, addr, rustls::DEFAULT_VERSIONS)
        .await
        .unwrap();
    let cert = io.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let _ = http_over(io, "GET", "/ping", "").await;
    cert
}

/// A new server certificate and key for `localhost`, signed by the test CA, written over the
/// files the broker was started with (as the kubelet does when cert-manager renews a Secret).
fn renew(p: &Pki) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &p.ca)
        .unwrap();
    std::fs::write(p.dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(p.dir.path().join("server.key"), key.serialize_pem()).unwrap();
    cert.der().to_vec()
}

#[tokio::test]
async fn a_renewed_certificate_serves_new_handshakes_while_old_connections_stay_up() {
    let p = pki();
    let b = Broker::start_with(|c| {
        c.security.tls = Some(tls_config(&p, false, false));
        c.network.https_address = Some("127.0.0.1:0".into());
    })
    .await;
    let addr = b.running.as_ref().unwrap().https_addr().unwrap();
    let first = served_certificate(&p, addr).await;
    // A client upgraded to TLS on the NSQ port before the renewal.
    let mut old = tls_upgrade(&p, b.client().await, false).await;

    let renewed = renew(&p);
    assert_ne!(first, renewed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while served_certificate(&p, addr).await != renewed {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewed certificate was not served within 10 s (reload interval 1 s)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The connection from before the renewal still works, over its old session.
    old.cmd_body("PUB renewed", b"still here").await;
    old.expect_ok().await;

    // A key that does not match the certificate (a file half replaced) is refused by the same
    // check the watcher runs, and the last good configuration stays in force.
    std::fs::write(
        p.dir.path().join("server.key"),
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let running = b.running.as_ref().unwrap();
    assert!(running.reload_tls_if_changed().is_err());
    assert_eq!(served_certificate(&p, addr).await, renewed);
    b.stop().await;
}
