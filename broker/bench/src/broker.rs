//! The brokers under test and their durability profiles. Every run gets a fresh broker process
//! on fresh loopback ports with a fresh temporary data directory, removed afterwards.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Which server a profile starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `rustqueued`, configured through `RUSTQUEUE_*` environment variables.
    Rustqueue,
    /// Official nsqd, configured through flags.
    Nsqd,
    /// `rustqueue-bench floor` (this executable): the protocol's socket work and nothing else,
    /// the floor under any broker's cost ([`crate::floor`]).
    Floor,
}

/// A broker configuration under test, named and labelled with what an ack promises.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    /// Short name used in results (`rustqueue-durable`, `nsqd-default`, ...).
    pub name: String,
    /// The server.
    pub kind: Kind,
    /// What a publish acknowledgement means in this profile.
    pub durability: String,
    /// Extra command-line flags.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

impl Profile {
    /// A profile that differs from its server's defaults by command-line flags only.
    fn flags(kind: Kind, name: &str, args: &[&str], durability: &str) -> Profile {
        Profile {
            name: name.to_owned(),
            kind,
            durability: durability.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: vec![],
        }
    }
}

/// The profile every ratio is taken against.
pub const BASELINE: &str = "nsqd-default";

/// The six profiles in run order: RustQueue and nsqd alternate, strongest promise first.
pub fn profiles() -> Vec<Profile> {
    let rq = |mode: &str, durability: &str| Profile {
        name: format!("rustqueue-{mode}"),
        kind: Kind::Rustqueue,
        durability: durability.to_owned(),
        args: vec![],
        env: vec![("RUSTQUEUE_PUBLISH_ACK_MODE".to_owned(), mode.to_owned())],
    };
    let nsqd = |name: &str, args: &[&str], durability: &str| {
        Profile::flags(Kind::Nsqd, name, args, durability)
    };
    vec![
        rq(
            "durable",
            "durable: ack after the segment is fdatasynced (group commit); nothing acknowledged is lost in a crash",
        ),
        nsqd(
            BASELINE,
            &[],
            "memory: in-memory queue of 10,000 per topic/channel, overflow to disk, no fsync before ack",
        ),
        rq(
            "write_ack",
            "write_ack: ack after the append (page cache), background sync (2,500 msgs / 8 MiB / 10 ms); a crash can lose the unsynced tail",
        ),
        nsqd(
            "nsqd-sync-every-1",
            &["--mem-queue-size=0", "--sync-every=1"],
            "disk queue, fsync after every message, but the ack is sent before that fsync",
        ),
        rq(
            "nsq_relaxed",
            "nsq_relaxed: ack after the append and deliver at once, like nsqd; synced every 2,500 msgs / 8 MiB / 10 ms",
        ),
        nsqd(
            "nsqd-sync-every-2500",
            &["--sync-every=2500"],
            "memory queue first, disk overflow fsynced every 2,500 messages or 2 s, ack before fsync",
        ),
    ]
}

/// The floor profiles (only when asked for by name: `--profiles floor,floor-append,...`), which
/// run in the load cases only. See [`crate::floor`].
pub fn floor_profiles() -> Vec<Profile> {
    let floor = |name: &str, args: &[&str], durability: &str| {
        Profile::flags(Kind::Floor, name, args, durability)
    };
    vec![
        floor(
            "floor",
            &[],
            "floor: the protocol's socket work only, bodies in memory; not a broker (a measuring instrument)",
        ),
        floor(
            "floor-append",
            &["--append"],
            "floor, plus one page-cache write per publish before the ack, as a log append; not a broker",
        ),
        floor(
            "floor-nsq_relaxed",
            &["--append", "--sync=nsq_relaxed"],
            "floor-append, plus `nsq_relaxed`'s disk work: appends and finishes synced every 2,500 msgs / 8 MiB / 10 ms; not a broker",
        ),
        floor(
            "floor-write_ack",
            &["--append", "--sync=write_ack"],
            "floor-nsq_relaxed, delivering a body only once synced, as `write_ack`; not a broker",
        ),
        floor(
            "floor-durable",
            &["--append", "--sync=durable"],
            "floor-append, acking and delivering once synced (group commit), finishes synced every 10 ms, as `durable`; not a broker",
        ),
    ]
}

/// Where the server binaries are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Binaries {
    /// The nsqd executable.
    pub nsqd: PathBuf,
    /// The rustqueued executable; RustQueue profiles are skipped without it.
    pub rustqueued: Option<PathBuf>,
    /// The versitygw executable the tiered cases upload to.
    #[serde(default)]
    pub versitygw: Option<PathBuf>,
}

/// A broker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// No binary for this kind of broker.
    #[error(
        "no {0} binary (build RustQueue's with `cargo build --release -p rustqueue-server -p rustqueue-gateway -p rustqueue-discovery`, which puts them side by side; install nsqd with `scripts/deps.sh nsqd`)"
    )]
    NoBinary(&'static str),
    /// Temp dir, port or spawn failed.
    #[error("starting {what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// It exited or never accepted connections.
    #[error("{name} did not become ready: {reason}; last log lines:\n{log}")]
    NotReady {
        /// Profile name.
        name: String,
        /// What happened.
        reason: String,
        /// The tail of its log.
        log: String,
    },
}

/// A running broker; stopped and its data removed on drop.
pub struct Broker {
    child: Child,
    kind: Kind,
    /// TCP (NSQ protocol) address.
    pub tcp: String,
    /// HTTP address.
    pub http: String,
    /// Data directory (a fresh temp dir, or the one handed to [`Broker::start_with`]); only
    /// `None` after [`Broker::stop_keeping_data`].
    data: Option<tempfile::TempDir>,
    /// When the process was spawned.
    pub spawned: Instant,
}

/// Settings beyond the profile's, for cases that need them.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// TOML appended to rustqueued's config file, whose last table is `[storage]`: keys of
    /// that table first, then any further tables.
    pub rustqueue_toml: String,
    /// Extra nsqd flags.
    pub nsqd_args: Vec<String>,
}

/// rustqueued's disk guard for benchmark runs: pressure only with the disk 99 % full or under
/// 1 GiB free.
const BENCH_DISK_GUARD: &str = "[storage]\ndisk_high_watermark_percent = 99\n\
    disk_low_watermark_percent = 98\nmin_free_bytes = 1073741824\n";

impl Broker {
    /// Starts `profile` and waits (up to 30 s) until its TCP port accepts connections.
    pub fn start(profile: &Profile, bins: &Binaries) -> Result<Broker, BrokerError> {
        Self::start_with(profile, bins, &StartOptions::default(), None)
    }

    /// Like [`Broker::start`], with extra settings, and on the data directory of an earlier
    /// broker of the same kind when `data` is given (a restart).
    ///
    /// Free ports are found by binding port 0 and letting go, so another process may take
    /// one before the server binds it; a server that exits saying its address is in use is
    /// started again on fresh ports (three tries), on the same data directory.
    pub fn start_with(
        profile: &Profile,
        bins: &Binaries,
        options: &StartOptions,
        data: Option<tempfile::TempDir>,
    ) -> Result<Broker, BrokerError> {
        let io = |what: &str| {
            let what = format!("{} ({what})", profile.name);
            move |source| BrokerError::Io { what, source }
        };
        let restart = data.is_some();
        let data = match data {
            Some(d) => d,
            None => tempfile::Builder::new()
                .prefix(&format!("rustqueue-bench-{}-", profile.name))
                .tempdir()
                .map_err(io("temp dir"))?,
        };
        let store = data.path().join("data");
        if !restart {
            std::fs::create_dir(&store).map_err(io("data dir"))?;
        }
        let mut data = Some(data);
        let mut tries = 0;
        loop {
            tries += 1;
            let dir = data
                .take()
                .expect("the data directory is handed back on a retry");
            let log = dir.path().join("broker.log");
            let logged = std::fs::metadata(&log).map_or(0, |m| m.len());
            let mut broker = Self::spawn(profile, bins, options, dir)?;
            match broker.wait_ready(&profile.name) {
                Ok(()) => return Ok(broker),
                Err(e) if tries < 3 && address_taken(&log, logged) => {
                    tracing_note(&profile.name, &e);
                    data = broker.stop_keeping_data();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One start of `profile` on fresh loopback ports, its data directory in `data`.
    fn spawn(
        profile: &Profile,
        bins: &Binaries,
        options: &StartOptions,
        data: tempfile::TempDir,
    ) -> Result<Broker, BrokerError> {
        let io = |what: &str| {
            let what = format!("{} ({what})", profile.name);
            move |source| BrokerError::Io { what, source }
        };
        let tcp = free_address().map_err(io("free port"))?;
        let http = free_address().map_err(io("free port"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data.path().join("broker.log"))
            .map_err(io("log"))?;
        let store = data.path().join("data");
        let mut cmd = match profile.kind {
            Kind::Nsqd => {
                let mut cmd = Command::new(&bins.nsqd);
                cmd.arg(format!("--tcp-address={tcp}"))
                    .arg(format!("--http-address={http}"))
                    .arg(format!("--data-path={}", store.display()))
                    .arg("--log-level=warn")
                    .args(&options.nsqd_args);
                cmd
            }
            Kind::Rustqueue => {
                let bin = bins
                    .rustqueued
                    .as_ref()
                    .ok_or(BrokerError::NoBinary("rustqueued"))?;
                // The disk guard (85 % used or < 10 GiB free) would throttle a 10 GB backlog on
                // a fuller host; nsqd has no guard, so the comparison keeps only a last-resort one.
                let guard = data.path().join("bench.toml");
                let config = format!("{BENCH_DISK_GUARD}{}", options.rustqueue_toml);
                std::fs::write(&guard, config).map_err(io("config"))?;
                let mut cmd = Command::new(bin);
                cmd.env("RUSTQUEUE_CONFIG", &guard)
                    .env("RUSTQUEUE_DATA_PATH", &store)
                    .env("RUSTQUEUE_TCP_ADDRESS", &tcp)
                    .env("RUSTQUEUE_HTTP_ADDRESS", &http)
                    .env("RUST_LOG", "warn");
                cmd
            }
            Kind::Floor => {
                let mut cmd = Command::new(std::env::current_exe().map_err(io("own executable"))?);
                cmd.arg("floor")
                    .arg(format!("--tcp-address={tcp}"))
                    .arg(format!("--http-address={http}"))
                    .arg(format!("--data-path={}", store.display()));
                cmd
            }
        };
        cmd.args(&profile.args)
            .envs(profile.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io("log"))?)
            .stderr(log);
        let spawned = Instant::now();
        let child = cmd.spawn().map_err(io("spawn"))?;
        Ok(Broker {
            child,
            kind: profile.kind,
            tcp,
            http,
            data: Some(data),
            spawned,
        })
    }

    /// The process id, for /proc sampling.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The data directory's parent (the broker's store is `data/` inside it).
    pub fn data_path(&self) -> &Path {
        self.data
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path())
    }

    /// The readiness a Kubernetes probe uses: `GET /v1/health` answering 200 for rustqueued
    /// (the operator's readinessProbe), `GET /ping` answering 200 for nsqd.
    pub fn is_ready(&self) -> bool {
        let path = match self.kind {
            Kind::Rustqueue | Kind::Floor => "/v1/health",
            Kind::Nsqd => "/ping",
        };
        crate::http::get(&self.http, path).is_ok_and(|r| r.status == 200)
    }

    /// Polls [`Broker::is_ready`] every 2 ms (up to `limit`); the time from spawn to ready.
    pub fn wait_http_ready(&mut self, limit: Duration) -> Result<Duration, BrokerError> {
        loop {
            if self.is_ready() {
                return Ok(self.spawned.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.not_ready("restart", format!("exited with {status}")));
            }
            if self.spawned.elapsed() > limit {
                return Err(self.not_ready("restart", format!("not ready after {limit:?}")));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The error for a broker whose process has exited, with its log; `None` while it runs.
    pub fn exited(&mut self, name: &str) -> Option<BrokerError> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(self.not_ready(name, format!("exited with {status}"))),
            _ => None,
        }
    }

    /// SIGKILL (no shutdown at all) and wait for the exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the broker (SIGTERM as [`Broker::stop`]) and hands back its data directory for a
    /// restart.
    pub fn stop_keeping_data(mut self) -> Option<tempfile::TempDir> {
        self.shutdown();
        self.data.take()
    }

    fn wait_ready(&mut self, name: &str) -> Result<(), BrokerError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(e) = self.exited(name) {
                return Err(e);
            }
            // A connect alone is not enough: the port may belong to another process that took
            // it between our probe and the broker's bind (the broker then exits, possibly after
            // binding its TCP port), so the child must hold both listening sockets itself (an
            // exited child holds none).
            if listens_on(self.child.id(), &[&self.tcp, &self.http]) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready(name, "no TCP and HTTP listeners after 30 s".to_owned()));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn not_ready(&self, name: &str, reason: String) -> BrokerError {
        BrokerError::NotReady {
            name: name.to_owned(),
            reason,
            log: log_tail(&self.data_path().join("broker.log")),
        }
    }

    /// SIGTERM, up to 10 s for a clean exit, then SIGKILL.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }
}

/// SIGTERM, up to `grace` for the exit, then SIGKILL; nothing when it already exited.
pub(crate) fn terminate(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether what `log` gained after its first `from` bytes says a listen address was taken
/// (nsqd: `bind: address already in use`; rustqueued: `cannot listen on ...: Address already
/// in use`).
fn address_taken(log: &Path, from: u64) -> bool {
    let text = std::fs::read(log).unwrap_or_default();
    let new = text.get(from as usize..).unwrap_or_default();
    String::from_utf8_lossy(new)
        .to_ascii_lowercase()
        .contains("address already in use")
}

fn tracing_note(name: &str, e: &BrokerError) {
    eprintln!(
        "{name}: a listen port was taken before the server bound it; starting again on fresh ports ({e})"
    );
}

fn free_address() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// Whether process `pid` holds a listening TCP socket on every one of `addresses`
/// (`host:port`; the ports are compared), read from `/proc/<pid>/net/tcp{,6}` and the
/// process's descriptors.
fn listens_on(pid: u32, addresses: &[&str]) -> bool {
    let ports: Vec<u16> = addresses
        .iter()
        .filter_map(|a| a.rsplit_once(':')?.1.parse().ok())
        .collect();
    if ports.len() != addresses.len() {
        return false;
    }
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        inodes.extend(listening_inodes(&text, &ports));
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let owned: Vec<u64> = fds
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.ok()?.path()).ok()?;
            let link = link.to_str()?;
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    ports.iter().all(|port| {
        inodes
            .iter()
            .any(|(p, inode)| p == port && owned.contains(inode))
    })
}

/// `(port, inode)` of every LISTEN row of a `/proc/net/tcp` table whose local port is in `ports`.
fn listening_inodes(table: &str, ports: &[u16]) -> Vec<(u16, u64)> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            (*f.get(3)? == LISTEN && ports.contains(&port)).then_some((port, inode))
        })
        .collect()
}

/// The last 20 lines of the log at `path`, ending where a backtrace begins.
pub(crate) fn log_tail(path: &Path) -> String {
    tail_of(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The last 20 lines of `text` before its first `Stack backtrace:` line, if any. A server that
/// exits with an error under `RUST_BACKTRACE=1` prints the error, then some 30 lines of
/// frames: a plain tail showed only frames, so neither a reader nor the cluster's retry on a
/// taken port (which looks for "address already in use") saw what went wrong.
fn tail_of(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| l.trim() != "Stack backtrace:")
        .collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_alternate_rustqueue_and_nsqd_and_include_the_baseline() {
        let p = profiles();
        assert_eq!(p.len(), 6);
        for pair in p.chunks(2) {
            assert_eq!((pair[0].kind, pair[1].kind), (Kind::Rustqueue, Kind::Nsqd));
        }
        assert!(p.iter().any(|p| p.name == BASELINE));
        assert!(p.iter().all(|p| !p.durability.is_empty()));
    }

    #[test]
    fn a_log_tail_ends_where_a_backtrace_begins() {
        let mut log = String::from("INFO starting\nError: bind 127.0.0.1:42401\n\nCaused by:\n");
        log.push_str("    Address already in use (os error 98)\n\nStack backtrace:\n");
        for k in 0..30 {
            log.push_str(&format!(
                "  {k}: frame\n             at src/main.rs:{k}:1\n"
            ));
        }
        let tail = tail_of(&log);
        assert!(tail.contains("Address already in use"), "{tail}");
        assert!(!tail.contains("frame"), "{tail}");
        // Without a backtrace, the last 20 lines.
        let plain: String = (0..30).map(|k| format!("line {k}\n")).collect();
        let tail = tail_of(&plain);
        assert!(
            tail.starts_with("line 10\n") && tail.ends_with("line 29"),
            "{tail}"
        );
    }

    #[test]
    fn listening_rows_of_the_wanted_ports_are_found_by_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
";
        assert_eq!(listening_inodes(table, &[8080]), vec![(8080, 111)]);
        assert_eq!(
            listening_inodes(table, &[8080, 8081]),
            vec![(8080, 111), (8081, 333)]
        );
        assert!(listening_inodes(table, &[9]).is_empty());
    }

    #[test]
    fn this_process_is_seen_on_its_own_listener_and_not_on_a_free_port() {
        let mine = TcpListener::bind("127.0.0.1:0").unwrap();
        let mine = mine.local_addr().unwrap().to_string();
        let free = free_address().unwrap();
        assert!(listens_on(std::process::id(), &[&mine]));
        assert!(!listens_on(std::process::id(), &[&mine, &free]));
        assert!(!listens_on(std::process::id(), &["no port"]));
    }

    #[test]
    fn only_an_address_in_use_since_this_start_counts_as_a_taken_port() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("broker.log");
        let before = "FATAL: listen tcp 127.0.0.1:1: bind: address already in use\n";
        std::fs::write(&log, before).unwrap();
        assert!(address_taken(&log, 0));
        assert!(
            !address_taken(&log, before.len() as u64),
            "an earlier try's line"
        );
        let later = "Error: cannot listen on 127.0.0.1:2: Address already in use (os error 98)\n";
        std::fs::write(&log, format!("{before}{later}")).unwrap();
        assert!(address_taken(&log, before.len() as u64));
        std::fs::write(&log, format!("{before}configuration rejected\n")).unwrap();
        assert!(!address_taken(&log, before.len() as u64));
    }

    #[test]
    fn a_missing_rustqueued_is_a_clear_error() {
        let bins = Binaries {
            nsqd: PathBuf::from("/nonexistent"),
            rustqueued: None,
            versitygw: None,
        };
        let err = Broker::start(&profiles()[0], &bins)
            .err()
            .expect("must fail");
        assert!(matches!(err, BrokerError::NoBinary("rustqueued")), "{err}");
    }
}
