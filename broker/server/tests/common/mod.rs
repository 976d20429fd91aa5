//! Test fixtures: an in-process broker on ephemeral loopback ports with a temp data dir, and
//! a hand-written NSQ V2 client built on `rustqueue-protocol`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use rustqueue_protocol::Frame;
use rustqueue_server::config::{Config, ConfigFile};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A broker running inside the test process.
pub struct Broker {
    pub running: Option<rustqueue_server::Running>,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
    pub dir: tempfile::TempDir,
}

/// Disk-guard settings that keep a test broker out of disk pressure whatever the host disk
/// holds (a CI host above the default 85 % must not throttle it): pressure only on a full disk.
pub const DISK_GUARD_TOML: &str = "[storage]\ndisk_high_watermark_percent = 100\n\
     disk_low_watermark_percent = 99\nmin_free_bytes = 1\n";

/// Points a spawned `rustqueued` at a config file holding [`DISK_GUARD_TOML`]; keep the
/// returned directory alive as long as the process may read it.
pub fn with_disk_guard(cmd: &mut std::process::Command) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk-guard.toml");
    std::fs::write(&path, DISK_GUARD_TOML).unwrap();
    cmd.env("RUSTQUEUE_CONFIG", path);
    dir
}

/// Config on 127.0.0.1:0 with a fresh data dir; `tweak` adjusts it. The watermarks are set
/// explicitly so the host's disk use never throttles a test (see [`DISK_GUARD_TOML`]).
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut cfg = Config::default();
    cfg.network.tcp_address = "127.0.0.1:0".into();
    cfg.network.http_address = "127.0.0.1:0".into();
    cfg.storage.data_path = dir.to_path_buf();
    cfg.storage.disk_high_watermark_percent = 100;
    cfg.storage.disk_low_watermark_percent = 99;
    cfg.storage.min_free_bytes = 1;
    cfg.shutdown.grace_seconds = 5;
    cfg
}

impl Broker {
    pub async fn start() -> Broker {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Broker {
        Self::start_in(tempfile::tempdir().unwrap(), tweak).await
    }

    /// Starts on an existing data directory (a restart).
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config)) -> Broker {
        count_panics();
        let mut cfg = test_config(dir.path());
        tweak(&mut cfg);
        cfg.validate().unwrap();
        let running = rustqueue_server::start(cfg).await.unwrap();
        let tcp = running.shared.tcp_addr;
        let http = running.shared.http_addr;
        Broker {
            running: Some(running),
            tcp,
            http,
            dir,
        }
    }

    pub async fn client(&self) -> Client<TcpStream> {
        Client::connect(self.tcp).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    /// The Prometheus text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        self.get_text("/metrics").await
    }

    /// The body of `GET path` as text.
    pub async fn get_text(&self, path: &str) -> String {
        reqwest::get(self.url(path))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The body of `GET path` as JSON.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        reqwest::get(self.url(path))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    /// Graceful shutdown that hands back the data directory for a restart.
    pub async fn stop_keep_dir(mut self) -> tempfile::TempDir {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        self.dir
    }
}

pub const T: Duration = Duration::from_secs(10);

/// A free loopback port: bound and released, for a spawned broker to take next.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A spawned process that is killed and reaped when dropped, also when a test fails.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts every panic in this test process, including ones inside the broker's own tasks
/// (tokio catches those, so without the hook a session that panicked would only look closed).
fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// Panics seen so far in this process (test assertions that failed count too).
pub fn panics() -> usize {
    PANICS.load(std::sync::atomic::Ordering::SeqCst)
}

/// A minimal V2 client.
pub struct Client<S> {
    pub io: S,
    pub buf: BytesMut,
}

impl Client<TcpStream> {
    pub async fn connect(addr: SocketAddr) -> Self {
        let mut io = TcpStream::connect(addr).await.unwrap();
        io.write_all(b"  V2").await.unwrap();
        Client {
            io,
            buf: BytesMut::new(),
        }
    }

    pub async fn raw(addr: SocketAddr) -> Self {
        Client {
            io: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
    }

    pub async fn cmd(&mut self, line: &str) {
        self.send(format!("{line}\n").as_bytes()).await;
    }

    pub async fn cmd_body(&mut self, line: &str, body: &[u8]) {
        let mut v = format!("{line}\n").into_bytes();
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        self.send(&v).await;
    }

    /// The next frame; `None` when the server closed the connection.
    pub async fn frame(&mut self) -> Option<Frame> {
        tokio::time::timeout(T, async {
            loop {
                if let Some(f) = Frame::decode(&mut self.buf, 200 << 20).unwrap() {
                    return Some(f);
                }
                match self.io.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("timed out waiting for a frame")
    }

    /// Next frame that is not a heartbeat.
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            match self.frame().await {
                Some(Frame::Response(r)) if &r[..] == b"_heartbeat_" => {
                    self.cmd("NOP").await;
                }
                other => return other,
            }
        }
    }

    pub async fn expect_ok(&mut self) {
        match self.next().await {
            Some(Frame::Response(r)) => {
                assert_eq!(&r[..], b"OK", "{}", String::from_utf8_lossy(&r))
            }
            other => panic!("expected OK, got {other:?}"),
        }
    }

    pub async fn expect_response(&mut self) -> Vec<u8> {
        match self.next().await {
            Some(Frame::Response(r)) => r.to_vec(),
            other => panic!("expected a response, got {other:?}"),
        }
    }

    /// Expects an error frame starting with `code`; returns its text.
    pub async fn expect_error(&mut self, code: &str) -> String {
        match self.next().await {
            Some(Frame::Error(e)) => {
                let text = String::from_utf8_lossy(&e).into_owned();
                assert!(text.starts_with(code), "expected {code}, got {text}");
                text
            }
            other => panic!("expected {code}, got {other:?}"),
        }
    }

    pub async fn expect_closed(&mut self) {
        match self.frame().await {
            None => {}
            other => panic!("expected the connection to close, got {other:?}"),
        }
    }

    /// Expects a message; returns (id, attempts, body).
    pub async fn expect_message(&mut self) -> ([u8; 16], u16, Vec<u8>) {
        match self.next().await {
            Some(Frame::Message {
                id, attempts, body, ..
            }) => (id, attempts, body.to_vec()),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    pub async fn identify(&mut self, json: &str) {
        self.cmd_body("IDENTIFY", json.as_bytes()).await;
    }

    pub async fn publish(&mut self, topic: &str, body: &[u8]) {
        self.cmd_body(&format!("PUB {topic}"), body).await;
        self.expect_ok().await;
    }

    pub async fn subscribe(&mut self, topic: &str, channel: &str, rdy: u32) {
        self.cmd(&format!("SUB {topic} {channel}")).await;
        self.expect_ok().await;
        self.cmd(&format!("RDY {rdy}")).await;
    }

    pub async fn fin(&mut self, id: &[u8; 16]) {
        self.cmd(&format!("FIN {}", std::str::from_utf8(id).unwrap()))
            .await;
    }
}

/// Polls `f` until it returns true (10 s).
/// The value of the unlabelled series `name` in Prometheus text, if present.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

pub async fn eventually(mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + T;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {T:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
