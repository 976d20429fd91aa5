//! Test helpers: a fake discovery replica whose broker list the test changes, fake brokers
//! (a TCP one that greets with its node id then echoes, an HTTP one that says who answered,
//! and a raw one that reads a request and hangs up), and the gateway started in-process.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use clap::Parser;
use rustqueue_gateway::Cli;
use rustqueue_gateway::Gateway;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A broker as the fake discovery lists it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub node_id: u32,
    pub tcp_port: u16,
    pub http_port: u16,
}

fn producer(b: &Listed) -> Value {
    json!({
        "remote_address": format!("127.0.0.1:{}", b.tcp_port),
        "hostname": "127.0.0.1",
        "broadcast_address": "127.0.0.1",
        "tcp_port": b.tcp_port,
        "http_port": b.http_port,
        "version": "test",
        "node_id": b.node_id,
    })
}

#[derive(Debug, Default)]
pub struct DiscoveryState {
    pub revision: u64,
    pub publishers: Vec<Listed>,
}

/// A fake rustqueue-discovery replica.
#[derive(Clone)]
pub struct FakeDiscovery {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<DiscoveryState>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl FakeDiscovery {
    pub async fn start(publishers: Vec<Listed>) -> FakeDiscovery {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(DiscoveryState {
            revision: 1,
            publishers,
        }));
        let app = Router::new()
            .route("/v1/publishers/head", get(head))
            .route("/v1/publishers", get(list))
            .route("/v1/brokers", get(list))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscovery {
            addr,
            state,
            task: Arc::new(task),
        }
    }

    /// Stop answering (connections refused from now on).
    pub fn stop(&self) {
        self.task.abort();
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Publish another broker list (a new revision).
    pub fn set(&self, publishers: Vec<Listed>) {
        let mut s = self.state.lock().unwrap();
        s.revision += 1;
        s.publishers = publishers;
    }
}

async fn head(State(s): State<Arc<Mutex<DiscoveryState>>>) -> axum::Json<Value> {
    let s = s.lock().unwrap();
    axum::Json(json!({ "revision": s.revision, "broker_count": s.publishers.len() }))
}

async fn list(State(s): State<Arc<Mutex<DiscoveryState>>>) -> axum::Json<Value> {
    let s = s.lock().unwrap();
    let producers: Vec<Value> = s.publishers.iter().map(producer).collect();
    axum::Json(json!({ "revision": s.revision, "producers": producers }))
}

/// A TCP broker: greets every connection with `node-<id>\n`, then echoes.
pub async fn tcp_broker(node_id: u32) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if s.write_all(format!("node-{node_id}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// An HTTP broker: every request is answered 200 `node=<id> <METHOD> <target> <body>` with
/// header `x-node: <id>`, except `/missing`, answered like a broker's unknown route.
pub async fn http_broker(node_id: u32) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new().fallback(move |req: axum::extract::Request| async move {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        if parts.uri.path() == "/missing" {
            return (
                axum::http::StatusCode::NOT_FOUND,
                [("x-node", node_id.to_string())],
                r#"{"message":"NOT_FOUND"}"#.to_string(),
            );
        }
        let text = format!(
            "node={node_id} {} {} {}",
            parts.method,
            parts.uri,
            String::from_utf8_lossy(&body)
        );
        (
            axum::http::StatusCode::OK,
            [("x-node", node_id.to_string())],
            text,
        )
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// A broker that reads each request's head and hangs up without answering (as a broker
/// killed mid-request); `seen` counts the requests it received.
pub async fn hangup_broker(seen: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                drop(s);
            });
        }
    });
    port
}

/// A loopback port that refuses connections for the rest of this test process. It stays bound
/// (never listening): a port only found free and released could be handed to the next
/// `bind("127.0.0.1:0")` of a test running beside this one, whose server would then answer
/// (seen: a hang-up broker of one test took another test's "dead" port).
pub async fn dead_port() -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // Without SO_REUSEADDR, so a listener asking for this port cannot share it either.
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    // Kept bound until the process exits: one descriptor per call.
    std::mem::forget(socket);
    port
}

/// Start a gateway on loopback with `extra` flags, discovering through `discovery`.
pub async fn gateway(discovery: &[&FakeDiscovery], extra: &[&str]) -> Gateway {
    let urls: Vec<String> = discovery.iter().map(|d| d.url()).collect();
    let urls = urls.join(",");
    let mut args = vec![
        "rustqueue-gateway",
        "--tcp-address",
        "127.0.0.1:0",
        "--http-address",
        "127.0.0.1:0",
        "--discovery-urls",
        &urls,
    ];
    args.extend_from_slice(extra);
    let cfg = Cli::try_parse_from(args).unwrap().validate().unwrap();
    Gateway::start(cfg).await.unwrap()
}

/// Wait (at most `within`) until `cond` holds.
pub async fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "condition not met within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Open a tunnel and read the broker's greeting line.
pub async fn tunnel(gw: &Gateway) -> (TcpStream, String) {
    let mut s = TcpStream::connect(gw.tcp_address).await.unwrap();
    let line = read_line(&mut s).await.expect("a greeting from the broker");
    (s, line)
}

/// Read one `\n`-terminated line (None on EOF or reset before one).
pub async fn read_line(s: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await {
            Ok(Ok(1)) if b[0] == b'\n' => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(1)) => out.push(b[0]),
            Ok(_) => return None,
            Err(_) => panic!("no line within 5 s"),
        }
    }
}

/// Whether the tunnel still carries bytes both ways.
pub async fn echoes(s: &mut TcpStream, text: &str) -> bool {
    if s.write_all(format!("{text}\n").as_bytes()).await.is_err() {
        return false;
    }
    read_line(s).await.as_deref() == Some(text)
}

/// Send raw bytes to the gateway's HTTP port and read the whole answer (the connection is
/// asked to close).
pub async fn raw_http(gw: &Gateway, request: &[u8]) -> String {
    let mut s = TcpStream::connect(gw.http_address).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A metric's value from `/metrics` text.
pub fn metric(gw: &Gateway, name: &str) -> f64 {
    gw.observe()
        .metrics_text()
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("metric {name} not exported"))
}
