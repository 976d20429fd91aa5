//! Starting a real `rustqueued` process for a test and waiting until it is really up.
//!
//! The broker's, the gateway's and the console's integration tests all start brokers as
//! child processes on loopback ports. Those ports are found free, then bound by the child: a
//! process of a suite running beside this one may take one in between. And another suite's
//! broker may answer on the same HTTP port (the console's brokers share one port on distinct
//! loopback addresses), so a broker is up only when `GET <ready>` succeeds AND `GET /info`
//! names the child's own TCP port.
//!
//! - [`start_once`]: one start on the ports given. `Err(PortTaken)` when the child exited
//!   with "Address already in use"; the caller decides (the gateway's restart on fixed ports
//!   fails, the console starts all its brokers again on a new shared port).
//! - [`start`]: [`start_once`] on new ports (from the caller's closure) after each
//!   [`PortTaken`], up to [`PORT_ATTEMPTS`] starts, saying so on stderr.
//!
//! Any other early exit fails the test with the child's stderr, and so does a child that is
//! not up within [`Startup::within`]. The caller keeps its own command (program, env, data,
//! config) and port scheme; these functions set the two listen addresses
//! (`RUSTQUEUE_TCP_ADDRESS`, `RUSTQUEUE_HTTP_ADDRESS`) and the child's stderr. The probes are
//! plain HTTP/1.0 GETs over a TCP connection: no HTTP client crate.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How many times [`start`] starts a process on new ports before the test fails.
pub const PORT_ATTEMPTS: u32 = 5;

/// How long one probe (`GET <ready>`, `GET /info`) may take: a port someone else holds may
/// accept the connection and never answer.
const PROBE_WITHIN: Duration = Duration::from_secs(1);

/// The listen addresses of a spawned broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// NSQ TCP.
    pub tcp: SocketAddr,
    /// HTTP.
    pub http: SocketAddr,
}

impl Ports {
    /// Two ports found free on `ip` (see [`free_port`]).
    pub fn free(ip: IpAddr) -> Ports {
        Ports {
            tcp: (ip, free_port(ip)).into(),
            http: (ip, free_port(ip)).into(),
        }
    }
}

/// A port free on `ip`: bound and released, for a spawned process to take next.
pub fn free_port(ip: IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One of a spawned process's ports was bound by someone else before the process bound it.
#[derive(Debug)]
pub struct PortTaken;

/// How to recognise that a spawned broker is up, and how long to wait for it.
#[derive(Clone, Copy, Debug)]
pub struct Startup<'a> {
    /// The process in messages: `rustqueued`, `broker 2`.
    pub name: &'a str,
    /// The path that answers 2xx once it is ready: `/ping`, `/v1/health`.
    pub ready: &'a str,
    /// How long one start may take until it is up.
    pub within: Duration,
    /// The pause between two probes.
    pub poll: Duration,
}

/// A spawned process that is killed and reaped when dropped, also when a test fails.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// The file a spawned process's stderr is appended to, and where this run's part begins.
#[derive(Clone, Debug)]
pub struct StderrLog {
    path: PathBuf,
    from: usize,
}

impl StderrLog {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What this run wrote so far.
    pub fn this_run(&self) -> String {
        let all = self.all();
        all.get(self.from..).unwrap_or_default().to_string()
    }

    /// Everything in the file (earlier runs too).
    pub fn all(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

/// A process that is up.
#[derive(Debug)]
pub struct Started {
    /// The process.
    pub child: KillOnDrop,
    /// Where it listens.
    pub ports: Ports,
    /// Its stderr.
    pub stderr: StderrLog,
}

/// Starts `cmd` on `ports`, with its stderr appended to the file `stderr`, and waits until it
/// is up ([`Startup`]). `Err(PortTaken)` when it exited with "Address already in use" in what
/// this run wrote to stderr; any other early exit, or no answer within `startup.within`,
/// panics with that stderr.
pub async fn start_once(
    cmd: &mut Command,
    ports: Ports,
    stderr: &Path,
    startup: &Startup<'_>,
) -> Result<Started, PortTaken> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr)
        .unwrap();
    let from = usize::try_from(file.metadata().unwrap().len()).unwrap();
    let child = cmd
        .env("RUSTQUEUE_TCP_ADDRESS", ports.tcp.to_string())
        .env("RUSTQUEUE_HTTP_ADDRESS", ports.http.to_string())
        .stderr(file)
        .spawn()
        .unwrap();
    let mut started = Started {
        child: KillOnDrop(child),
        ports,
        stderr: StderrLog {
            path: stderr.to_path_buf(),
            from,
        },
    };
    let Startup {
        name,
        ready,
        within,
        poll,
    } = *startup;
    let start = Instant::now();
    loop {
        // The exit first: a port someone else holds may accept the probe and never answer.
        if let Some(status) = started.child.try_wait().unwrap() {
            let err = started.stderr.this_run();
            if err.contains("Address already in use") {
                eprintln!(
                    "{name} found a port taken ({} or {})",
                    ports.tcp, ports.http
                );
                return Err(PortTaken);
            }
            panic!("{name} exited at startup: {status}\n{err}");
        }
        // Someone else's broker on the HTTP port answers too, but names its own TCP port.
        if answers(ports.http, ready).await.is_some() && names_tcp_port(ports).await {
            return Ok(started);
        }
        assert!(
            start.elapsed() < within,
            "{name} did not answer GET {ready} as itself (on {}) within {within:?}; stderr:\n{}",
            ports.http,
            started.stderr.this_run()
        );
        tokio::time::sleep(poll).await;
    }
}

/// [`start_once`] on the ports `ports` picks, and again on new ones after each
/// [`PortTaken`], up to [`PORT_ATTEMPTS`] starts (then the test fails).
pub async fn start(
    cmd: &mut Command,
    stderr: &Path,
    startup: &Startup<'_>,
    mut ports: impl FnMut() -> Ports,
) -> Started {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match start_once(cmd, ports(), stderr, startup).await {
            Ok(started) => return started,
            Err(PortTaken) => {
                assert!(
                    attempts < PORT_ATTEMPTS,
                    "{}'s ports taken {attempts} times in a row",
                    startup.name
                );
                eprintln!("starting {} again on new ports", startup.name);
            }
        }
    }
}

/// `GET /info` at `ports.http` names `ports.tcp`'s port.
pub async fn names_tcp_port(ports: Ports) -> bool {
    let Some(info) = answers(ports.http, "/info").await else {
        return false;
    };
    let info: Option<serde_json::Value> = serde_json::from_str(&info).ok();
    info.is_some_and(|i| i["tcp_port"].as_u64() == Some(u64::from(ports.tcp.port())))
}

/// The body of a plain HTTP/1.0 `GET path` at `http`, when it answers 2xx within a second.
pub async fn answers(http: SocketAddr, path: &str) -> Option<String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(http).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {http}\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        // HTTP/1.0: the server closes the connection after the response.
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
        (200..300).contains(&status).then(|| body.to_string())
    };
    tokio::time::timeout(PROBE_WITHIN, get).await.ok().flatten()
}
