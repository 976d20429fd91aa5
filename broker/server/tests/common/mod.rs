//! Test fixtures: an in-process broker on ephemeral loopback ports with a temp data dir,
//! helpers for spawned `rustqueued` processes, and the workspace's raw NSQ V2 test client
//! (`rustqueue-test-client`) with this suite's patience.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use rustqueue_server::{Config, ConfigFile};

pub mod tmpfs;

pub use rustqueue_test_client::Client;
pub use rustqueue_test_client::spawn::{self, KillOnDrop};

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
        let tcp = running.tcp_addr();
        let http = running.http_addr();
        Broker {
            running: Some(running),
            tcp,
            http,
            dir,
        }
    }

    pub async fn client(&self) -> Client {
        connect(self.tcp).await
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
        rustqueue_api::http_client::get(self.url(path))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The body of `GET path` as JSON.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        rustqueue_api::http_client::get(self.url(path))
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

/// How long a broker test waits for anything: a frame, a condition.
pub const T: Duration = Duration::from_secs(10);

/// A client of the broker at `addr` (magic sent) that waits at most [`T`] for each frame.
pub async fn connect(addr: SocketAddr) -> Client {
    Client::connect(addr).await.with_patience(T)
}

/// A free loopback port: bound and released, for a spawned broker to take next.
pub fn free_port() -> u16 {
    spawn::free_port(LOCALHOST)
}

const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A `rustqueued` started by [`spawn_broker`]: killed and reaped when dropped. Its stderr goes
/// to a file (startup reads it); while the test is panicking, the drop prints it.
pub struct Spawned {
    pub child: KillOnDrop,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
    stderr: spawn::StderrLog,
    dir: tempfile::TempDir,
}

/// Spawns `rustqueued` as `cmd` describes it (data, config, logging), on free loopback ports
/// (`RUSTQUEUE_TCP_ADDRESS`, `RUSTQUEUE_HTTP_ADDRESS`), and waits up to `within` for `GET
/// <ready>` to succeed and `/info` to name its TCP port ([`spawn::start`]). A port taken
/// between finding it free and the broker's bind starts it again on new ones, up to
/// [`spawn::PORT_ATTEMPTS`] times; any other early exit fails the test with the broker's stderr.
pub async fn spawn_broker(cmd: &mut Command, ready: &str, within: Duration) -> Spawned {
    let dir = tempfile::tempdir().unwrap();
    let startup = spawn::Startup {
        name: "rustqueued",
        ready,
        within,
        poll: Duration::from_millis(20),
    };
    let log = dir.path().join("stderr.log");
    let started = spawn::start(cmd, &log, &startup, || spawn::Ports::free(LOCALHOST)).await;
    Spawned {
        child: started.child,
        tcp: started.ports.tcp,
        http: started.ports.http,
        stderr: started.stderr,
        dir,
    }
}

impl Spawned {
    /// `http://<http address><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    /// What the broker wrote to stderr so far (this start's; not a start on ports that were
    /// taken).
    pub fn stderr(&self) -> String {
        self.stderr.this_run()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("rustqueued ({}) stderr:\n{}", self.http, self.stderr());
        }
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

/// The value of the unlabelled series `name` in Prometheus text, if present.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `f` until it returns true (within [`T`]).
pub async fn eventually(f: impl AsyncFnMut() -> bool) {
    eventually_within(T, f).await;
}

/// Polls `f` until it returns true (within `bound`).
pub async fn eventually_within(bound: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + bound;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
