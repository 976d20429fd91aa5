//! Console test helpers: real `rustqueued` brokers on their own loopback addresses (one HTTP
//! port for all, as Pods share a port on different IPs), an in-memory cluster pointing at
//! them, a fake discovery health endpoint, the console served on loopback, a browser-like
//! management client, and a minimal NSQ consumer.
#![allow(dead_code, reason = "each test file uses a different part")]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use rustqueue_console::Console;
use rustqueue_console::cluster::BrokerPod;
use rustqueue_console::config::Config;
use rustqueue_console::memory::MemoryCluster;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The console token the brokers accept.
pub const TOKEN: &str = "console-secret";

/// The broker binary: `RUSTQUEUED_BIN`, else `rustqueued` beside this test's target directory
/// (`cargo build -p rustqueue-server --bin rustqueued` builds it).
pub fn rustqueued() -> PathBuf {
    if let Ok(p) = std::env::var("RUSTQUEUED_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = dir.join("rustqueued");
    assert!(
        bin.exists(),
        "no rustqueued at {}: run `cargo build -p rustqueue-server --bin rustqueued` (or set RUSTQUEUED_BIN)",
        bin.display()
    );
    bin
}

/// Polls `check` until it returns `Some`, for at most `secs` seconds.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A loopback address of its own for this process and `n`.
fn loopback(n: u32) -> IpAddr {
    let pid = std::process::id();
    format!("127.{}.{}.{}", 1 + pid % 200, (pid / 200) % 250, n)
        .parse()
        .unwrap()
}

fn free_port(ip: IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real `rustqueued` process, killed when dropped.
pub struct Broker {
    /// Pod name (`q-<ordinal>`).
    pub name: String,
    /// Its loopback address (the "Pod IP").
    pub ip: IpAddr,
    /// NSQ TCP address.
    pub tcp: SocketAddr,
    /// HTTP address.
    pub http: SocketAddr,
    child: Child,
    _data: tempfile::TempDir,
}

impl Broker {
    /// Starts broker `ordinal` at `ip:http_port`, with console management as asked.
    async fn start(
        ordinal: u32,
        ip: IpAddr,
        http_port: u16,
        tokens: &std::path::Path,
        management: bool,
    ) -> Broker {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("broker.toml");
        let toml = format!(
            "[storage]\ndisk_high_watermark_percent = 100\ndisk_low_watermark_percent = 99\nmin_free_bytes = 1\n\
             [security]\nconsole_token_file = {:?}\nconsole_management_enabled = {management}\n",
            tokens.display().to_string()
        );
        std::fs::write(&config, toml).unwrap();
        let data_dir = data.path().join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let tcp: SocketAddr = (ip, free_port(ip)).into();
        let http: SocketAddr = (ip, http_port).into();
        let child = Command::new(rustqueued())
            .env("RUSTQUEUE_CONFIG", &config)
            .env("RUSTQUEUE_DATA_PATH", &data_dir)
            .env("RUSTQUEUE_NODE_ID", (ordinal + 1).to_string())
            .env("RUSTQUEUE_TCP_ADDRESS", tcp.to_string())
            .env("RUSTQUEUE_HTTP_ADDRESS", http.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut b = Broker {
            name: format!("q-{ordinal}"),
            ip,
            tcp,
            http,
            child,
            _data: data,
        };
        let ping = b.url("/ping");
        let start = Instant::now();
        while !reqwest::get(&ping)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            if let Some(status) = b.child.try_wait().unwrap() {
                panic!("broker {} exited at startup: {status}", b.name);
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "broker {} did not start",
                b.name
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        b
    }

    /// `http://<ip>:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    /// The Pod the in-memory cluster lists for it.
    pub fn pod(&self) -> BrokerPod {
        BrokerPod {
            uid: format!("uid-{}", self.name),
            name: self.name.clone(),
            node_name: Some("node-1".into()),
            pod_ip: Some(self.ip.to_string()),
            phase: "Running".into(),
            ready: true,
            image: "rustqueue:test".into(),
            ..BrokerPod::default()
        }
    }

    /// `POST /pub?topic=` with `body`; the status.
    pub async fn publish(&self, topic: &str, body: &str) -> StatusCode {
        reqwest::Client::new()
            .post(self.url(&format!("/pub?topic={topic}")))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// A POST to an NSQ admin route (`/topic/create?topic=...`).
    pub async fn admin(&self, path_and_query: &str) -> StatusCode {
        reqwest::Client::new()
            .post(self.url(path_and_query))
            .send()
            .await
            .unwrap()
            .status()
    }

    /// `GET /v1/stats` as JSON.
    pub async fn stats(&self) -> Value {
        reqwest::get(self.url("/v1/stats"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The topic in `/v1/stats`, if held.
    pub async fn topic(&self, topic: &str) -> Option<Value> {
        let s = self.stats().await;
        s["topics"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == topic)
            .cloned()
    }

    /// The channel in `/v1/stats`, if held.
    pub async fn channel(&self, topic: &str, channel: &str) -> Option<Value> {
        let t = self.topic(topic).await?;
        t["channels"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == channel)
            .cloned()
    }

    /// `GET /v1/observe/head` with the console token.
    pub async fn head(&self) -> Value {
        reqwest::Client::new()
            .get(self.url("/v1/observe/head"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Brokers, the in-memory cluster, a fake discovery and the token file.
pub struct Cluster {
    /// The brokers, `q-0`...
    pub brokers: Vec<Broker>,
    /// The in-memory Kubernetes.
    pub mem: MemoryCluster,
    /// The brokers' shared HTTP port.
    pub http_port: u16,
    /// Discovery's base URL.
    pub discovery: String,
    tokens: tempfile::TempDir,
    discovery_task: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.discovery_task.abort();
    }
}

static NEXT_IP: AtomicU32 = AtomicU32::new(2);

impl Cluster {
    /// `n` brokers (management on or off) and a RustQueue `q` in `ns` wanting `n`.
    pub async fn start(n: u32, management: bool) -> Cluster {
        let tokens = tempfile::tempdir().unwrap();
        let token_file = tokens.path().join("console-token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let ips: Vec<IpAddr> = (0..n)
            .map(|_| loopback(NEXT_IP.fetch_add(1, Ordering::SeqCst)))
            .collect();
        let http_port = free_port(ips[0]);
        let mut brokers = Vec::new();
        for (i, ip) in ips.into_iter().enumerate() {
            brokers.push(Broker::start(i as u32, ip, http_port, &token_file, management).await);
        }
        let mem = MemoryCluster::new(rustqueue_console::fixtures::rustqueue(n as i32));
        mem.set_pods(brokers.iter().map(Broker::pod).collect());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let discovery = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route("/v1/health", axum::routing::get(|| async { "OK" }));
        let discovery_task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Cluster {
            brokers,
            mem,
            http_port,
            discovery,
            tokens,
            discovery_task,
        }
    }

    /// The console configuration for this cluster (poll 1 s, full observation at least every
    /// second).
    pub fn config(&self, management: bool) -> Config {
        let vars = [
            ("POD_NAMESPACE", "ns".to_string()),
            ("RUSTQUEUE_NAME", "q".to_string()),
            ("RUSTQUEUE_CONSOLE_ADDRESS", "127.0.0.1:0".to_string()),
            (
                "RUSTQUEUE_CONSOLE_TOKEN_FILE",
                self.tokens
                    .path()
                    .join("console-token")
                    .display()
                    .to_string(),
            ),
            ("RUSTQUEUE_CONSOLE_STATIC_DIR", "/nonexistent".to_string()),
            ("RUSTQUEUE_CONSOLE_POLL_SECONDS", "1".to_string()),
            ("RUSTQUEUE_CONSOLE_CATALOG_REFRESH_SECONDS", "1".to_string()),
            ("RUSTQUEUE_BROKER_HTTP_PORT", self.http_port.to_string()),
            (
                "RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED",
                management.to_string(),
            ),
            ("RUSTQUEUE_CONSOLE_DISCOVERY_URL", self.discovery.clone()),
        ];
        Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
    }

    /// The broker named `name`.
    pub fn broker(&self, name: &str) -> &Broker {
        self.brokers.iter().find(|b| b.name == name).unwrap()
    }
}

/// A console served on loopback. Collection and reconcile run only when the test steps them
/// ([`Served::tick`]), or in the background after [`Served::run_loops`].
pub struct Served {
    /// The console.
    pub console: Arc<Console>,
    /// Its base URL.
    pub url: String,
    collector: tokio::sync::Mutex<rustqueue_console::collector::Collector>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Served {
    /// Serves a console over `cluster`'s in-memory Kubernetes.
    pub async fn start(cluster: &Cluster, management: bool) -> Served {
        Self::start_with(cluster, cluster.config(management)).await
    }

    /// Serves a console with `config` over `cluster`'s in-memory Kubernetes.
    pub async fn start_with(cluster: &Cluster, config: Config) -> Served {
        let console = Arc::new(Console::new(
            config,
            Arc::new(cluster.mem.clone()),
            Arc::new(cluster.mem.clone()),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let c = console.clone();
        let server = tokio::spawn(async move {
            c.serve(listener).await.unwrap();
        });
        Served {
            collector: tokio::sync::Mutex::new(console.collector()),
            console,
            url,
            tasks: vec![server],
        }
    }

    /// Runs the collector and reconciler loops in the background.
    pub fn run_loops(&mut self) {
        let collector = self.console.collector();
        let reconciler = self.console.reconciler();
        self.tasks.push(tokio::spawn(collector.run()));
        self.tasks.push(tokio::spawn(reconciler.run()));
    }

    /// One collection.
    pub async fn collect(&self) {
        self.collector.lock().await.collect_once().await;
    }

    /// One collection, then one reconciler pass.
    pub async fn tick(&self) {
        self.collect().await;
        self.console.reconciler().tick().await;
    }

    /// `GET /api/v1/snapshot` (status, JSON).
    pub async fn snapshot(&self) -> (StatusCode, Value) {
        let r = reqwest::get(format!("{}/api/v1/snapshot", self.url))
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }

    /// A browser-like client of this console.
    pub fn browser(&self) -> Browser {
        Browser {
            url: self.url.clone(),
            http: reqwest::Client::new(),
            cookie: None,
            csrf: None,
        }
    }
}

/// A same-origin client holding the session cookie and CSRF token after unlock.
pub struct Browser {
    url: String,
    http: reqwest::Client,
    /// `rustqueue_console_session=<id>`.
    pub cookie: Option<String>,
    /// The CSRF token.
    pub csrf: Option<String>,
}

impl Browser {
    /// A POST with `Origin` = the console and a JSON body; returns status and JSON.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.post_with(path, body, &self.url, "application/json", true)
            .await
    }

    /// A POST with a chosen `Origin`, content type and whether to send cookie and CSRF.
    pub async fn post_with(
        &self,
        path: &str,
        body: &Value,
        origin: &str,
        content_type: &str,
        credentials: bool,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.url))
            .header("Origin", origin)
            .header("Content-Type", content_type)
            .body(body.to_string());
        if credentials {
            if let Some(c) = &self.cookie {
                req = req.header("Cookie", c);
            }
            if let Some(t) = &self.csrf {
                req = req.header("X-RustQueue-CSRF", t);
            }
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let cookie = r
            .headers()
            .get("set-cookie")
            .map(|v| v.to_str().unwrap().to_string());
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if let Some(c) = cookie {
            assert!(
                c.contains("HttpOnly")
                    && c.contains("SameSite=Strict")
                    && c.contains("Path=/api/v1/management"),
                "{c}"
            );
        }
        (status, v)
    }

    /// Unlocks with `<ns>/<queue>` and keeps the cookie and CSRF token.
    pub async fn unlock(&mut self) {
        let r = self
            .http
            .post(format!("{}/api/v1/management/unlock", self.url))
            .header("Origin", &self.url)
            .header("Content-Type", "application/json")
            .body(json!({"confirmation": "ns/q"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
        self.cookie = Some(cookie.split(';').next().unwrap().to_string());
        let v: Value = r.json().await.unwrap();
        self.csrf = Some(v["csrf_token"].as_str().unwrap().to_string());
    }

    /// Preview then apply (with the typed confirmation when asked); returns the apply's
    /// status and body.
    pub async fn act(
        &self,
        kind: &str,
        action: &str,
        topic: &str,
        channel: Option<&str>,
    ) -> (StatusCode, Value) {
        let req = json!({"kind": kind, "action": action, "topic": topic, "channel": channel});
        let (status, preview) = self.post("/api/v1/management/preview", &req).await;
        if status != StatusCode::OK {
            return (status, preview);
        }
        let mut apply = req.clone();
        apply["action_token"] = preview["action_token"].clone();
        if preview["confirmation_required"] == true {
            apply["confirmation"] = json!(channel.unwrap_or(topic));
        }
        self.post("/api/v1/management/apply", &apply).await
    }
}

/// The first JSON path holding a `body` key, if any.
pub fn body_path(v: &Value, path: &str) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let p = format!("{path}.{k}");
            if k == "body" {
                Some(p)
            } else {
                body_path(v, &p)
            }
        }),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| body_path(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// A minimal NSQ V2 consumer: SUB, RDY, FIN every message it reads.
pub struct Consumer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Consumer {
    /// Subscribes to `topic`/`channel` on `addr` with `rdy` in flight.
    pub async fn subscribe(addr: SocketAddr, topic: &str, channel: &str, rdy: u32) -> Consumer {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"  V2").await.unwrap();
        stream
            .write_all(format!("SUB {topic} {channel}\n").as_bytes())
            .await
            .unwrap();
        let mut c = Consumer {
            stream,
            buf: Vec::new(),
        };
        let (kind, data) = c.frame().await;
        assert_eq!(
            (kind, data.as_slice()),
            (0, b"OK".as_slice()),
            "SUB answered {}",
            String::from_utf8_lossy(&data)
        );
        c.stream
            .write_all(format!("RDY {rdy}\n").as_bytes())
            .await
            .unwrap();
        c
    }

    async fn frame(&mut self) -> (u32, Vec<u8>) {
        loop {
            if self.buf.len() >= 8 {
                let size = u32::from_be_bytes(self.buf[0..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + size {
                    let kind = u32::from_be_bytes(self.buf[4..8].try_into().unwrap());
                    let data = self.buf[8..4 + size].to_vec();
                    self.buf.drain(..4 + size);
                    return (kind, data);
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the broker closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads and finishes `n` messages (answering heartbeats), within 20 s.
    pub async fn finish(&mut self, n: usize) {
        let mut done = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while done < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let (kind, data) = tokio::time::timeout(left, self.frame())
                .await
                .expect("messages in time");
            match kind {
                0 if data == b"_heartbeat_" => self.stream.write_all(b"NOP\n").await.unwrap(),
                2 => {
                    let id = &data[10..26];
                    let mut cmd = b"FIN ".to_vec();
                    cmd.extend_from_slice(id);
                    cmd.push(b'\n');
                    self.stream.write_all(&cmd).await.unwrap();
                    done += 1;
                }
                0 => {}
                _ => panic!("error frame: {}", String::from_utf8_lossy(&data)),
            }
        }
    }
}
