//! Console test helpers: real `rustqueued` brokers on their own loopback addresses (one HTTP
//! port for all, as Pods share a port on different IPs), an in-memory cluster pointing at
//! them, a fake discovery health endpoint, the console served on loopback, a browser-like
//! management client, and a minimal NSQ consumer.
#![allow(dead_code, reason = "each test file uses a different part")]

mod browser;
pub mod manage;
mod nsq;

#[allow(unused_imports, reason = "each test file uses a different part")]
pub use browser::{Browser, body_path};
#[allow(unused_imports, reason = "each test file uses a different part")]
pub use nsq::Consumer;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use rustqueue_console::Console;
use rustqueue_console::cluster::BrokerPod;
use rustqueue_console::config::Config;
use rustqueue_console::memory::MemoryCluster;
use rustqueue_test_client::spawn::{self, KillOnDrop, PortTaken};
use serde_json::Value;

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
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for_or(what, secs, &std::sync::Mutex::new(String::new()), check).await
}

/// [`wait_for`], whose timeout message adds what `seen` holds (what the last check saw).
pub async fn wait_for_or<T, F, Fut>(
    what: &str,
    secs: u64,
    seen: &std::sync::Mutex<String>,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            let seen = seen.lock().unwrap();
            let last = match seen.is_empty() {
                true => String::new(),
                false => format!("; last seen: {seen}"),
            };
            panic!("timed out waiting for {what}{last}");
        }
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
    child: KillOnDrop,
    data: tempfile::TempDir,
}

impl Broker {
    /// Starts broker `ordinal` at `ip:http_port`, with console management as asked. `Err`:
    /// one of its ports was taken between [`spawn::free_port`] finding it free and the
    /// broker's bind (other suites' processes bind ports too, some on every address); the
    /// caller picks new ones. Any other early exit fails the test with the broker's stderr.
    async fn start(
        ordinal: u32,
        ip: IpAddr,
        http_port: u16,
        tokens: &std::path::Path,
        management: bool,
    ) -> Result<Broker, PortTaken> {
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
        let ports = spawn::Ports {
            tcp: (ip, spawn::free_port(ip)).into(),
            http: (ip, http_port).into(),
        };
        let mut cmd = Command::new(rustqueued());
        cmd.env("RUSTQUEUE_CONFIG", &config)
            .env("RUSTQUEUE_DATA_PATH", &data_dir)
            .env("RUSTQUEUE_NODE_ID", (ordinal + 1).to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        let name = format!("q-{ordinal}");
        // Healthy, and itself: someone else's broker on this HTTP port answers `/ping` too,
        // but names its own TCP port in `/info`.
        let startup = spawn::Startup {
            name: &format!("broker {name}"),
            ready: "/ping",
            within: Duration::from_secs(20),
            poll: Duration::from_millis(25),
        };
        let log = data.path().join("stderr.log");
        let started = spawn::start_once(&mut cmd, ports, &log, &startup).await?;
        Ok(Broker {
            name,
            ip,
            tcp: started.ports.tcp,
            http: started.ports.http,
            child: started.child,
            data,
        })
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
        rustqueue_api::http_client::client()
            .post(self.url(&format!("/pub?topic={topic}")))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// A POST to an NSQ admin route (`/topic/create?topic=...`).
    pub async fn admin(&self, path_and_query: &str) -> StatusCode {
        rustqueue_api::http_client::client()
            .post(self.url(path_and_query))
            .send()
            .await
            .unwrap()
            .status()
    }

    /// `GET /v1/stats` as JSON.
    pub async fn stats(&self) -> Value {
        rustqueue_api::http_client::get(self.url("/v1/stats"))
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
        rustqueue_api::http_client::client()
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
        // Its stderr goes to a file (startup reads it); a failing test still shows it.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.data.path().join("stderr.log"));
            eprintln!("broker {} stderr:\n{}", self.name, log.unwrap_or_default());
        }
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
        // Ports are found free, then bound by the brokers: another process may take one in
        // between. Then every broker starts again on new ones (they share the HTTP port).
        let mut attempts = 0;
        let (brokers, http_port) = 'start: loop {
            attempts += 1;
            let http_port = spawn::free_port(ips[0]);
            let mut brokers = Vec::new();
            for (i, ip) in ips.iter().enumerate() {
                match Broker::start(i as u32, *ip, http_port, &token_file, management).await {
                    Ok(b) => brokers.push(b),
                    Err(PortTaken) => {
                        assert!(
                            attempts < spawn::PORT_ATTEMPTS,
                            "brokers' ports taken {attempts} times in a row"
                        );
                        eprintln!("starting the brokers again on new ports");
                        continue 'start;
                    }
                }
            }
            break (brokers, http_port);
        };
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

    /// Replaces the console token file's content (the brokers and the console both read it).
    pub fn write_token(&self, token: &str) {
        std::fs::write(self.tokens.path().join("console-token"), token).unwrap();
    }

    /// Stops the fake discovery (its health check then fails).
    pub fn stop_discovery(&self) {
        self.discovery_task.abort();
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
        let r = rustqueue_api::http_client::get(format!("{}/api/v1/snapshot", self.url))
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }

    /// A browser-like client of this console.
    pub fn browser(&self) -> Browser {
        Browser::new(&self.url)
    }
}
