//! Kodo gateway test helpers: real `rustqueued` broker processes (killable, restartable on
//! their data), a Kodo gateway on its own loopback address (its HTTP ports are fixed), and
//! the workspace's raw NSQ V2 test client (`rustqueue-test-client`).
#![allow(dead_code, unused_imports)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rustqueue_gateway::Cli;
use rustqueue_gateway::{KodoGateway, KodoSettings};
use rustqueue_test_client::spawn::{self, KillOnDrop, PortTaken};
use serde_json::Value;

pub use crate::support::{FakeDiscovery, Listed, wait_until};

const MIB: u64 = 1024 * 1024;

/// The broker binary: `RUSTQUEUED_BIN`, else `rustqueued` beside this test's target
/// directory (`cargo test --workspace` builds it; alone: `cargo build -p rustqueue-server`).
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

/// Broker settings for 100 MiB messages and 128 MiB batches, and a disk guard that never
/// throttles (a host disk above 85 % must not fail the test).
const BROKER_TOML: &str = "[storage]\ndisk_high_watermark_percent = 100\n\
disk_low_watermark_percent = 99\nmin_free_bytes = 1\nmax_segment_bytes = 268435456\nfeature_level = 2\n\
[queue]\nmax_message_bytes = 104857600\n\
[limits]\nmax_body_bytes = 134217728\nconnection_publish_inflight_bytes = 134217728\n\
node_publish_inflight_bytes = 536870912\nconnection_delivery_inflight_bytes = 134217728\n\
node_delivery_inflight_bytes = 536870912\n";

/// A real `rustqueued` process, killed when dropped.
pub struct Broker {
    pub node_id: u32,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
    child: Option<KillOnDrop>,
    data: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Broker {
    /// Starts broker `node_id` on free loopback ports. They are found free, then bound by the
    /// broker: a process of a suite running beside this one may take one in between. Then it
    /// is started again on new ones, up to [`spawn::PORT_ATTEMPTS`] times; any other early exit
    /// fails the test with the broker's stderr.
    pub async fn start(node_id: u32) -> Broker {
        let data = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        std::fs::write(config.path().join("broker.toml"), BROKER_TOML).unwrap();
        let name = format!("broker {node_id}");
        let mut cmd = command(node_id, &data, &config);
        let log = config.path().join("stderr.log");
        let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let started = spawn::start(&mut cmd, &log, &startup(&name), || {
            spawn::Ports::free(localhost)
        })
        .await;
        Broker {
            node_id,
            tcp: started.ports.tcp,
            http: started.ports.http,
            child: Some(started.child),
            data,
            config,
        }
    }

    /// How the fake discovery lists it.
    pub fn listed(&self) -> Listed {
        Listed {
            node_id: self.node_id,
            tcp_port: self.tcp.port(),
            http_port: self.http.port(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGSTOP: the process stops reading its sockets. Returns once it no longer answers
    /// `/ping` (the stop has taken effect).
    pub async fn pause(&self) {
        let ok = Command::new("kill")
            .args(["-STOP", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let client = rustqueue_api::http_client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let start = Instant::now();
        while client.get(self.url("/ping")).send().await.is_ok() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "broker {} still answers after SIGSTOP",
                self.node_id
            );
        }
    }

    /// Bytes that arrived on this broker's producer connections and that it has not read
    /// (the receive queues of its established TCP sockets, from `/proc/net/tcp`): while it is
    /// paused, what the gateway has written to it so far.
    pub fn unread_bytes(&self) -> u64 {
        let port = self.tcp.port();
        let mut total = 0;
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let Ok(text) = std::fs::read_to_string(table) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                // local_address is `ADDR:PORT` in hex, st 01 is ESTABLISHED, then
                // `tx_queue:rx_queue` in hex.
                let local_port = f[1].rsplit_once(':').map(|(_, p)| p);
                if local_port.and_then(|p| u16::from_str_radix(p, 16).ok()) != Some(port)
                    || f[3] != "01"
                {
                    continue;
                }
                let (_, rx) = f[4].split_once(':').unwrap();
                total += u64::from_str_radix(rx, 16).unwrap();
            }
        }
        total
    }

    /// SIGCONT after [`Broker::pause`].
    pub fn resume(&self) {
        let ok = Command::new("kill")
            .args(["-CONT", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        // The drop kills and reaps.
        self.child = None;
    }

    /// Start again on the same data and ports (after [`Broker::kill`]). The fake discovery
    /// lists those ports, so a port taken meanwhile fails the test: no new ones are picked.
    /// Its stderr is appended to the same file (startup reads what this run wrote; the drop
    /// prints all of it while a test panics).
    pub async fn restart(&mut self) {
        self.kill();
        let name = format!("broker {}", self.node_id);
        let mut cmd = command(self.node_id, &self.data, &self.config);
        let log = self.config.path().join("stderr.log");
        let ports = spawn::Ports {
            tcp: self.tcp,
            http: self.http,
        };
        match spawn::start_once(&mut cmd, ports, &log, &startup(&name)).await {
            Ok(started) => self.child = Some(started.child),
            Err(PortTaken) => panic!(
                "broker {} cannot restart: one of its ports ({} or {}) was taken",
                self.node_id, self.tcp, self.http
            ),
        }
    }

    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        rustqueue_api::http_client::client()
            .post(self.url(path))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn stats(&self) -> Value {
        rustqueue_api::http_client::get(self.url("/stats?format=json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// `message_count` of `topic` in this broker's `/stats` (0 when absent).
    pub async fn count(&self, topic: &str) -> u64 {
        topic_count(&self.stats().await, topic)
    }
}

/// The command that runs broker `node_id` on `data` with `config`'s `broker.toml` (the ports
/// are [`spawn`]'s to set).
fn command(node_id: u32, data: &tempfile::TempDir, config: &tempfile::TempDir) -> Command {
    let mut cmd = Command::new(rustqueued());
    cmd.env("RUSTQUEUE_CONFIG", config.path().join("broker.toml"))
        .env("RUSTQUEUE_DATA_PATH", data.path())
        .env("RUSTQUEUE_NODE_ID", node_id.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    cmd
}

/// A broker is up when `/ping` answers and `/info` names its TCP port, within 20 s.
fn startup(name: &str) -> spawn::Startup<'_> {
    spawn::Startup {
        name,
        ready: "/ping",
        within: Duration::from_secs(20),
        poll: Duration::from_millis(25),
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        // Its stderr goes to a file (startup reads it); a failing test still shows it.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.config.path().join("stderr.log"));
            eprintln!(
                "broker {} stderr:\n{}",
                self.node_id,
                log.unwrap_or_default()
            );
        }
    }
}

/// `message_count` of `topic` in a `/stats` document.
pub fn topic_count(stats: &Value, topic: &str) -> u64 {
    stats["topics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["topic_name"] == topic)
        .and_then(|t| t["message_count"].as_u64())
        .unwrap_or(0)
}

/// A loopback address no other gateway of this process uses (the HTTP ports are fixed).
pub fn loopback() -> std::net::IpAddr {
    static NEXT: AtomicU32 = AtomicU32::new(2);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    format!("127.{}.{}.{}", 100 + pid % 100, (pid / 100) % 250, n)
        .parse()
        .unwrap()
}

/// Start a Kodo gateway with `extra` flags, discovering through `discovery`.
pub async fn kodo_gateway(discovery: &FakeDiscovery, extra: &[&str]) -> KodoGateway {
    let http = format!("{}:4151", loopback());
    let tcp = format!("{}:0", http.rsplit_once(':').unwrap().0);
    let url = discovery.url();
    let mut args = vec![
        "rustqueue-gateway",
        "--kodo-compatibility-enabled",
        "--kodo-gateway-ordinal",
        "0",
        "--tcp-address",
        &tcp,
        "--http-address",
        &http,
        "--discovery-urls",
        &url,
        "--max-message-bytes",
        "104857600",
        "--max-body-bytes",
        "134217728",
        "--shutdown-grace-seconds",
        "5",
    ];
    args.extend_from_slice(extra);
    let cli = Cli::try_parse_from(args).unwrap();
    let kodo = KodoSettings::from_cli(&cli).unwrap();
    KodoGateway::start(cli.validate().unwrap(), kodo)
        .await
        .unwrap()
}

/// A metric's value from the gateway's exposition.
pub fn metric(gw: &KodoGateway, name: &str) -> f64 {
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

/// Bytes `len` long that depend on `seed` and position: a pseudo-random block of a prime
/// length, repeated (a lost, repeated or shifted chunk of the body changes it).
pub fn payload(seed: u8, len: usize) -> Vec<u8> {
    const BLOCK: usize = 65_521;
    let block: Vec<u8> = (0..BLOCK as u32)
        .map(|i| i.wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect();
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let take = (len - out.len()).min(BLOCK);
        out.extend_from_slice(&block[..take]);
    }
    out
}

/// The workspace's raw NSQ V2 test client.
pub use rustqueue_test_client::Client;
