//! A real S3-compatible server for tests: versitygw (Apache-2.0) serving a temporary
//! directory through its posix backend on 127.0.0.1, started and stopped by the test.
//!
//! The binary is `$RUSTQUEUE_VERSITYGW_BIN`, or else the pinned build in the tool cache,
//! `$RUSTQUEUE_CACHE/versitygw-<VERSITYGW_VERSION>/bin/versitygw` (`~/.cache/rustqueue` by
//! default; the version is scripts/versions.env's). `scripts/deps.sh versitygw` builds it.
//! A missing binary panics with that instruction: these tests never skip.
//!
//! The posix backend keeps object `k` of bucket `b` as the file `<root>/b/k` (metadata in
//! extended attributes), so a test can damage an object by writing to [`TestServer::object_file`].

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::{BucketConfig, Credentials};
use crate::http::Timeouts;
use crate::retry::RetryPolicy;

/// The bucket every test server has.
pub const BUCKET: &str = "rustqueue-test";
/// The test server's access key id.
pub const ACCESS_KEY: &str = "rustqueue-test-access";
/// The test server's secret.
pub const SECRET_KEY: &str = "rustqueue-test-secret-key";
/// How long a start may take before the test fails: generous, for a loaded 2-core machine.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How many times [`TestServer::start`] starts the server on a new port before the test fails.
const PORT_ATTEMPTS: u32 = 5;

/// The pinned versitygw version, from scripts/versions.env.
pub fn versitygw_version() -> &'static str {
    include_str!("../../../scripts/versions.env")
        .lines()
        .find_map(|line| line.strip_prefix("VERSITYGW_VERSION="))
        .expect("scripts/versions.env pins VERSITYGW_VERSION")
}

/// Where the versitygw binary is (see the module doc). Panics when it is not there.
pub fn versitygw_bin() -> PathBuf {
    let bin = match std::env::var_os("RUSTQUEUE_VERSITYGW_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => {
            let cache = std::env::var_os("RUSTQUEUE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                        .join(".cache/rustqueue")
                });
            cache
                .join(format!("versitygw-{}", versitygw_version()))
                .join("bin/versitygw")
        }
    };
    assert!(
        bin.is_file(),
        "versitygw not found at {}: run scripts/deps.sh versitygw (or set RUSTQUEUE_VERSITYGW_BIN)",
        bin.display()
    );
    bin
}

/// One running (or stopped) versitygw with its data directory. Dropping it stops the process.
#[derive(Debug)]
pub struct TestServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    child: Option<Child>,
    paused: bool,
    starts: u32,
}

impl TestServer {
    /// Starts versitygw on a free loopback port over a new temporary directory holding the
    /// bucket [`BUCKET`], and waits until it accepts connections. The port is found free, then
    /// bound by versitygw: a process of a suite running beside this one may take it in
    /// between. Then it is started again on another, up to five times; any other early exit
    /// fails the test with its log.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir_all(dir.path().join("root").join(BUCKET))
            .expect("the bucket directory");
        let addr = free_port();
        let mut server = Self {
            bin: versitygw_bin(),
            dir,
            addr,
            child: None,
            paused: false,
            starts: 0,
        };
        let mut attempts = 1;
        while let Err(PortTaken) = server.spawn() {
            assert!(
                attempts < PORT_ATTEMPTS,
                "versitygw's port taken {attempts} times in a row"
            );
            attempts += 1;
            let taken = std::mem::replace(&mut server.addr, free_port());
            eprintln!("versitygw found {taken} taken; retrying on {}", server.addr);
        }
        server
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A configuration for [`BUCKET`] under `prefix` on this server, with a retry policy and
    /// timeouts meant for tests: short request timeouts (a stopped server is noticed in
    /// seconds) and a retry budget long enough to outlast the outages the tests cause.
    pub fn bucket_config(&self, prefix: &str) -> BucketConfig {
        let mut config = BucketConfig::new(
            self.endpoint(),
            "us-east-1",
            BUCKET,
            Credentials {
                access_key_id: ACCESS_KEY.into(),
                secret_access_key: SECRET_KEY.into(),
            },
        );
        config.prefix = Some(prefix.into());
        config.allow_http = true;
        config.timeouts = Timeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(5),
        };
        config.retry = RetryPolicy {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
            max_attempts: 60,
            max_elapsed: Duration::from_secs(120),
        };
        config
    }

    /// The file the posix backend keeps `key` of [`BUCKET`] in (`key` with its prefix).
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.dir.path().join("root").join(BUCKET).join(key)
    }

    /// The bucket's directory on disk (multipart uploads in progress live under its `.sgwtmp`).
    pub fn bucket_dir(&self) -> PathBuf {
        self.dir.path().join("root").join(BUCKET)
    }

    /// SIGKILLs the server and reaps it. Connections in flight are reset.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Starts the server again on the same port and directory, after [`Self::kill`]. The
    /// bucket configurations name that port, so a port taken meanwhile fails the test.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart after kill");
        if let Err(PortTaken) = self.spawn() {
            panic!("versitygw cannot restart: its port {} was taken", self.addr);
        }
    }

    /// SIGSTOPs the server: connections are accepted by the kernel but never answered.
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.paused = true;
        // The stop takes effect asynchronously: a request sent before every thread has stopped
        // could still be answered, and a test of a paused server would see none paused.
        let stat = format!("/proc/{}/stat", self.pid());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            // `pid (comm) S ...`: the state follows the last ')'.
            if state
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('T'))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("versitygw did not stop within 5 s of SIGSTOP");
    }

    /// SIGCONTs a paused server.
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT);
        self.paused = false;
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.pid()).expect("a pid fits in i32"));
        kill(pid, signal).expect("signal the server");
    }

    /// Spawns the server on [`Self::addr`] and waits until it listens. `Err`: the port was
    /// taken by someone else first.
    fn spawn(&mut self) -> Result<(), PortTaken> {
        self.starts += 1;
        let log_path = self
            .dir
            .path()
            .join(format!("versitygw-{}.log", self.starts));
        let log = std::fs::File::create(&log_path).expect("the server log");
        let child = Command::new(&self.bin)
            .args(["--access", ACCESS_KEY, "--secret", SECRET_KEY, "--port"])
            .arg(self.addr.to_string())
            .arg("posix")
            .arg(self.dir.path().join("root"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the server log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.display()));
        self.child = Some(child);
        self.wait_ready(&log_path)
    }

    fn wait_ready(&mut self, log: &Path) -> Result<(), PortTaken> {
        let start = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let log = std::fs::read_to_string(log).unwrap_or_default();
                if log.contains("address already in use") {
                    return Err(PortTaken);
                }
                panic!(
                    "versitygw exited with {status} before it listened on {}; its log:\n{log}",
                    self.addr,
                );
            }
            // A port someone else holds accepts connections too: the listener must be its own.
            if listens_on(self.pid(), self.addr.port())
                && TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok()
            {
                return Ok(());
            }
            assert!(
                start.elapsed() < START_DEADLINE,
                "versitygw did not listen on {} within {START_DEADLINE:?}; its log:\n{}",
                self.addr,
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The server's port was bound by someone else before the server bound it.
#[derive(Debug)]
struct PortTaken;

/// Whether process `pid` holds a TCP socket listening on `port`: the sockets among its open
/// files (`/proc/<pid>/fd`) against the listening ones of its `/proc/<pid>/net/tcp` and
/// `tcp6`. So `$RUSTQUEUE_VERSITYGW_BIN` must be the server itself (a wrapper script must
/// `exec` it).
fn listens_on(pid: u32, port: u16) -> bool {
    let sockets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.ok()?.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .collect();
    // The server's own tables: `/proc/net` is the namespace of this process's first thread,
    // and a test may run in a network namespace of its own (the e2e testbed's threads do).
    ["tcp", "tcp6"].iter().any(|table| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        text.lines().skip(1).any(|line| {
            // `sl local_address rem_address st ... inode`: the local address is `ADDR:PORT`
            // in hex, state 0A is LISTEN, the inode is the tenth field.
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1).and_then(|a| a.rsplit_once(':'));
            local_port.and_then(|(_, p)| u16::from_str_radix(p, 16).ok()) == Some(port)
                && f.get(3) == Some(&"0A")
                && f.get(9)
                    .is_some_and(|inode| sockets.iter().any(|s| s == inode))
        })
    })
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.paused {
            self.resume();
        }
        self.kill();
    }
}

/// A loopback port nothing listens on now (the kernel's choice; free again once dropped).
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("its address")
}
