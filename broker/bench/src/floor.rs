//! The floor: a server that does only the socket work NSQ V2 asks of a broker for the bench's
//! loads, and nothing a real broker must do besides (no ids, no in-flight tracking, no
//! timeouts, no requeues, no metrics). Run beside rustqueued and nsqd (`compare --profiles
//! floor,floor-append,...`), its CPU per message is the part of a broker's cost that the
//! protocol and the host's loopback TCP set, so a broker's cost above it is the broker's own.
//!
//! What it does per command, as cheaply as a tokio server can:
//! - `PUB`/`MPUB`: copies each body into every channel's in-memory queue (or the topic's, until
//!   a channel exists) and answers `OK`; with `append` set it first writes the bodies to one
//!   file per topic with one positional write, under a mutex, as a log append would (the page
//!   cache only; never synced unless `sync` is set).
//! - With `sync` set as well, an ack mode's disk work (docs/durability.md). A thread per topic
//!   fdatasyncs the topic's file: in `nsq_relaxed` and `write_ack` at the first of 2,500
//!   unsynced messages, 8 MiB or 10 ms after the first; in `durable` as soon as anything is
//!   unsynced, so the appends made during one sync share the next (group commit). A second
//!   thread writes the ids of the `FIN`s to a second file and fdatasyncs it at most 10 ms after
//!   the first, as rustqueued's channel WAL groups its commits. `nsq_relaxed` delivers a body at
//!   once, `write_ack` once a sync covers it; `durable` also holds the `OK` until then.
//! - `SUB`, `RDY`, `FIN`, `NOP`, `CLS`, `IDENTIFY` (answered `OK`, no negotiation).
//! - Deliveries are buffered the way rustqueued buffers them (docs/compatibility.md, "Output
//!   buffering"): written at once with a response or at the RDY limit, when 16 KiB are waiting,
//!   within 1 ms when the client has finished everything it was sent, else within 250 ms.
//! - HTTP: every request is answered `200 OK` (the harness's readiness probe).
//!
//! Every message is kept in memory until delivered, and a delivered message is forgotten: a
//! consumer that disconnects without finishing loses it. This is a measuring instrument, not a
//! broker.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Deliveries waiting past this many bytes are written at once (nsqd's and rustqueued's
/// default `output_buffer_size`).
const OUTPUT_BUFFER_BYTES: usize = 16 * 1024;
/// How long deliveries may wait while the client still holds unfinished messages (the
/// default `output_buffer_timeout`).
const OUTPUT_BUFFER_TIMEOUT: Duration = Duration::from_millis(250);
/// How long deliveries may wait once the client has finished everything it was sent.
const IDLE_CLIENT_LINGER: Duration = Duration::from_millis(1);
/// The largest command body accepted; more closes the connection.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// The relaxed modes' sync thresholds, rustqueued's defaults (`relaxed_sync_messages`,
/// `relaxed_sync_bytes`, `relaxed_sync_interval_ms`; docs/configuration.md).
const SYNC_MESSAGES: u64 = 2_500;
const SYNC_BYTES: u64 = 8 * 1024 * 1024;
const SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// How the floor server runs.
#[derive(Debug, Clone, Default)]
pub struct FloorConfig {
    /// Write every published body into a per-topic file here before answering; `None`: memory
    /// only.
    pub append_dir: Option<PathBuf>,
    /// With `append_dir`: do the disk work of this ack mode as well (see the module's notes);
    /// `None`: never sync.
    pub sync: Option<SyncMode>,
}

/// The ack mode whose disk work the floor does ([`FloorConfig::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[clap(rename_all = "snake_case")]
pub enum SyncMode {
    /// `OK` after the page-cache write, delivered at once, synced by the thresholds.
    NsqRelaxed,
    /// `OK` after the page-cache write, delivered once synced, synced by the thresholds.
    WriteAck,
    /// `OK` and delivery once synced; a sync starts as soon as the last one ends (group commit).
    Durable,
}

/// A topic's disk work in a `sync` mode: the mode, and what its two threads have to sync.
struct Syncing {
    mode: SyncMode,
    /// The topic file's thread ([`log_sync_loop`]).
    log: Arc<Syncer>,
    /// The finishes' thread ([`fin_sync_loop`]).
    fins: Arc<Syncer>,
}

/// What a sync thread has to sync, and the thread's wake-up.
#[derive(Default)]
struct Syncer {
    state: Mutex<Unsynced>,
    due: Condvar,
    /// Sync whenever anything is pending (durable group commit), not at the thresholds.
    at_once: bool,
}

/// What the next sync covers.
#[derive(Default)]
struct Unsynced {
    messages: u64,
    bytes: u64,
    /// When the oldest unsynced append or finish was made; `None`: nothing to sync.
    since: Option<std::time::Instant>,
    /// The end of the appends counted so far (every byte before it is written).
    end: u64,
    /// The ids of the finishes received since the last sync, to write and sync.
    fins: Vec<u8>,
    /// Bodies appended and not yet synced, shown to consumers after the sync (`write_ack`,
    /// `durable`).
    held: Vec<Bytes>,
}

impl Syncer {
    fn new(at_once: bool) -> Self {
        Syncer {
            at_once,
            ..Syncer::default()
        }
    }

    /// Counts what `add` adds and wakes the sync thread if it now has something to wait for or
    /// a sync became due (only then: a wake-up is a syscall).
    fn add(&self, add: impl FnOnce(&mut Unsynced)) {
        let mut st = lock(&self.state);
        add(&mut st);
        let first = st.since.is_none();
        if first {
            st.since = Some(std::time::Instant::now());
        }
        if first || st.messages >= SYNC_MESSAGES || st.bytes >= SYNC_BYTES {
            self.due.notify_one();
        }
    }

    /// Waits until a sync is due, then takes what it covers.
    fn next(&self) -> Unsynced {
        let mut st = lock(&self.state);
        loop {
            match st.since {
                None => st = self.due.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(since) => {
                    let age = since.elapsed();
                    if self.at_once
                        || st.messages >= SYNC_MESSAGES
                        || st.bytes >= SYNC_BYTES
                        || age >= SYNC_INTERVAL
                    {
                        break;
                    }
                    st = self
                        .due
                        .wait_timeout(st, SYNC_INTERVAL - age)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        let end = st.end;
        std::mem::replace(
            &mut *st,
            Unsynced {
                end,
                ..Unsynced::default()
            },
        )
    }
}

/// The topic file's sync thread: fdatasyncs it when due, then moves `synced` and routes the
/// bodies the sync covered. An I/O error ends the process: a measuring instrument that
/// silently stopped syncing would measure something else.
fn log_sync_loop(log: File, syncer: Arc<Syncer>, topic: Weak<Topic>) {
    loop {
        let taken = syncer.next();
        if let Err(e) = log.sync_data() {
            eprintln!("floor: sync failed: {e}");
            std::process::exit(1);
        }
        let Some(topic) = topic.upgrade() else { return };
        topic.synced.send_replace(taken.end);
        if !taken.held.is_empty() {
            topic.route(&taken.held);
        }
    }
}

/// The finishes' sync thread: writes the ids received and fdatasyncs them, every 10 ms at
/// most, as rustqueued's channel WAL groups its commits.
fn fin_sync_loop(fins: File, syncer: Arc<Syncer>) {
    let mut len = 0u64;
    loop {
        let ids = syncer.next().fins;
        let done = fins.write_all_at(&ids, len).and_then(|()| fins.sync_data());
        if let Err(e) = done {
            eprintln!("floor: sync failed: {e}");
            std::process::exit(1);
        }
        len += ids.len() as u64;
    }
}

/// A queue of bodies and the consumers waiting on it.
#[derive(Default)]
struct Queue {
    bodies: Mutex<VecDeque<Bytes>>,
    ready: Notify,
}

impl Queue {
    fn push(&self, bodies: &[Bytes]) {
        lock(&self.bodies).extend(bodies.iter().cloned());
        self.ready.notify_one();
    }
}

#[derive(Default)]
struct Channels {
    /// Bodies published before the topic had a channel; the first channel takes them.
    unrouted: VecDeque<Bytes>,
    by_name: HashMap<String, Arc<Queue>>,
}

struct Topic {
    channels: Mutex<Channels>,
    /// The topic's file and its length, when appending.
    log: Option<Mutex<(File, u64)>>,
    /// The mode's disk work, when syncing.
    sync: Option<Syncing>,
    /// The end of the topic file's last completed sync.
    synced: tokio::sync::watch::Sender<u64>,
}

impl Topic {
    /// Appends (when appending) and routes `bodies`; returns the end of the append when the
    /// `OK` has to wait for a sync to cover it (`durable`).
    fn publish(&self, bodies: &[Bytes]) -> std::io::Result<Option<u64>> {
        if let Some(log) = &self.log {
            let mut log = lock(log);
            let slices: Vec<IoSlice<'_>> = bodies.iter().map(|b| IoSlice::new(b)).collect();
            let len: usize = bodies.iter().map(Bytes::len).sum();
            let offset = log.1;
            write_all_at(&log.0, &slices, len, offset)?;
            log.1 += len as u64;
            let end = log.1;
            drop(log);
            if let Some(sync) = &self.sync {
                let hold = sync.mode != SyncMode::NsqRelaxed;
                sync.log.add(|st| {
                    st.messages += bodies.len() as u64;
                    st.bytes += len as u64;
                    st.end = st.end.max(end);
                    if hold {
                        st.held.extend(bodies.iter().cloned());
                    }
                });
                match sync.mode {
                    SyncMode::NsqRelaxed => {}
                    SyncMode::WriteAck => return Ok(None),
                    SyncMode::Durable => return Ok(Some(end)),
                }
            }
        }
        self.route(bodies);
        Ok(None)
    }

    /// Copies `bodies` into every channel's queue (or the topic's, until a channel exists).
    fn route(&self, bodies: &[Bytes]) {
        let mut channels = lock(&self.channels);
        if channels.by_name.is_empty() {
            channels.unrouted.extend(bodies.iter().cloned());
            return;
        }
        let queues: Vec<Arc<Queue>> = channels.by_name.values().cloned().collect();
        drop(channels);
        for q in queues {
            q.push(bodies);
        }
    }

    fn channel(&self, name: &str) -> Arc<Queue> {
        let mut channels = lock(&self.channels);
        if let Some(q) = channels.by_name.get(name) {
            return q.clone();
        }
        let q = Arc::new(Queue::default());
        let first = std::mem::take(&mut channels.unrouted);
        if !first.is_empty() {
            lock(&q.bodies).extend(first);
        }
        channels.by_name.insert(name.to_owned(), q.clone());
        q
    }
}

/// One positional write of `slices` (`len` bytes in all) at `offset`, or as many as it takes.
fn write_all_at(
    file: &File,
    slices: &[IoSlice<'_>],
    len: usize,
    offset: u64,
) -> std::io::Result<()> {
    // std has no positional vectored write; one contiguous buffer keeps it to one call.
    if let [one] = slices {
        return file.write_all_at(one, offset);
    }
    let mut joined = Vec::with_capacity(len);
    for s in slices {
        joined.extend_from_slice(s);
    }
    file.write_all_at(&joined, offset)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The server's shared state.
struct Floor {
    config: FloorConfig,
    topics: Mutex<HashMap<String, Arc<Topic>>>,
}

impl Floor {
    fn topic(&self, name: &str) -> std::io::Result<Arc<Topic>> {
        // The name becomes a file name when appending.
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad topic name {name:?}"),
            ));
        }
        let mut topics = lock(&self.topics);
        if let Some(t) = topics.get(name) {
            return Ok(t.clone());
        }
        let create = |path: PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(path)
        };
        let log = match &self.config.append_dir {
            Some(dir) => Some(Mutex::new((create(dir.join(format!("{name}.log")))?, 0))),
            None => None,
        };
        let sync = self
            .config
            .sync
            .filter(|_| log.is_some())
            .map(|mode| Syncing {
                mode,
                log: Arc::new(Syncer::new(mode == SyncMode::Durable)),
                fins: Arc::new(Syncer::new(false)),
            });
        let topic = Arc::new(Topic {
            channels: Mutex::default(),
            log,
            sync,
            synced: tokio::sync::watch::Sender::new(0),
        });
        if let (Some(dir), Some(log), Some(sync)) =
            (&self.config.append_dir, &topic.log, &topic.sync)
        {
            let (file, syncer, weak) = (
                lock(log).0.try_clone()?,
                sync.log.clone(),
                Arc::downgrade(&topic),
            );
            std::thread::Builder::new()
                .name(format!("floor-sync-{name}"))
                .spawn(move || log_sync_loop(file, syncer, weak))?;
            let (file, syncer) = (create(dir.join(format!("{name}.fin")))?, sync.fins.clone());
            std::thread::Builder::new()
                .name(format!("floor-fins-{name}"))
                .spawn(move || fin_sync_loop(file, syncer))?;
        }
        topics.insert(name.to_owned(), topic.clone());
        Ok(topic)
    }
}

/// The floor server's listeners, bound.
pub struct FloorServer {
    tcp: TcpListener,
    http: TcpListener,
    floor: Arc<Floor>,
}

impl FloorServer {
    /// Binds both listeners (port 0 picks one) and creates `append_dir` if set.
    pub async fn bind(
        tcp: SocketAddr,
        http: SocketAddr,
        config: FloorConfig,
    ) -> std::io::Result<Self> {
        if let Some(dir) = &config.append_dir {
            std::fs::create_dir_all(dir)?;
        }
        Ok(FloorServer {
            tcp: TcpListener::bind(tcp).await?,
            http: TcpListener::bind(http).await?,
            floor: Arc::new(Floor {
                config,
                topics: Mutex::default(),
            }),
        })
    }

    /// The NSQ TCP and HTTP addresses.
    pub fn addresses(&self) -> std::io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.tcp.local_addr()?, self.http.local_addr()?))
    }

    /// Serves until the process ends; a connection's error ends that connection only.
    pub async fn serve(self) -> std::io::Result<()> {
        let http = self.http;
        tokio::spawn(async move {
            while let Ok((stream, _)) = http.accept().await {
                tokio::spawn(answer_http(stream));
            }
        });
        loop {
            let (stream, _) = self.tcp.accept().await?;
            let _ = stream.set_nodelay(true);
            let floor = self.floor.clone();
            tokio::spawn(async move {
                let _ = session(stream, floor).await;
            });
        }
    }
}

/// Answers one HTTP request `200 OK`, whatever it asked.
async fn answer_http(mut stream: TcpStream) {
    let mut request = [0u8; 4096];
    let _ = stream.read(&mut request).await;
    let _ = stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
        .await;
}

/// A frame (`size | type | data`) appended to `out`.
fn put_frame(out: &mut Vec<u8>, frame_type: u32, data: &[u8]) {
    out.extend_from_slice(&((data.len() + 4) as u32).to_be_bytes());
    out.extend_from_slice(&frame_type.to_be_bytes());
    out.extend_from_slice(data);
}

/// A message frame appended to `out`: `timestamp | attempts | id | body`.
fn put_message(out: &mut Vec<u8>, timestamp: i64, seq: u64, body: &[u8]) {
    let size = 4 + 8 + 2 + 16 + body.len();
    out.extend_from_slice(&(size as u32).to_be_bytes());
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(HEX[((seq >> (shift * 4)) & 0xf) as usize]);
    }
    out.extend_from_slice(body);
}

/// One client connection's state.
struct Session {
    out: Vec<u8>,
    /// Write `out` now (a response is in it, or a deadline passed).
    urgent: bool,
    /// Deliveries in `out`, not yet written.
    buffered: i64,
    /// Delivered (written or buffered) and not finished.
    in_flight: i64,
    rdy: i64,
    seq: u64,
    deadline: Option<Instant>,
    sub: Option<Arc<Queue>>,
    /// The subscribed topic's sync thread, when syncing, and the ids of the `FIN`s read since
    /// they were last handed to it.
    fin_sync: Option<Arc<Syncer>>,
    fins: Vec<u8>,
    /// A `durable` publish's `OK` waits for this topic's sync to reach this end.
    await_sync: Option<(Arc<Topic>, u64)>,
    /// The topic this session last named, so a producer's next `PUB` skips the topics' lock.
    last_topic: Option<(Vec<u8>, Arc<Topic>)>,
}

impl Session {
    fn topic(&mut self, floor: &Floor, name: &[u8]) -> std::io::Result<Arc<Topic>> {
        if let Some((last, topic)) = &self.last_topic
            && last == name
        {
            return Ok(topic.clone());
        }
        let text = std::str::from_utf8(name)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad topic name"))?;
        let topic = floor.topic(text)?;
        self.last_topic = Some((name.to_vec(), topic.clone()));
        Ok(topic)
    }

    /// Moves what RDY allows from the subscribed queue into `out`.
    fn take_deliveries(&mut self) {
        let Some(queue) = &self.sub else { return };
        if self.in_flight >= self.rdy {
            return;
        }
        let mut bodies = lock(&queue.bodies);
        if bodies.is_empty() {
            return;
        }
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        while self.in_flight < self.rdy {
            let Some(body) = bodies.pop_front() else {
                break;
            };
            self.seq += 1;
            put_message(&mut self.out, timestamp, self.seq, &body);
            self.in_flight += 1;
            self.buffered += 1;
        }
    }

    /// Writes `out` if it is due; otherwise sets the deadline by which it will be.
    async fn flush_if_due(&mut self, w: &mut OwnedWriteHalf) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let due = self.urgent
            || self.out.len() >= OUTPUT_BUFFER_BYTES
            || self.in_flight >= self.rdy
            || self.deadline.is_some_and(|d| d <= Instant::now());
        if due {
            w.write_all(&self.out).await?;
            self.out.clear();
            self.buffered = 0;
            self.urgent = false;
            self.deadline = None;
        } else if self.deadline.is_none() {
            let linger = if self.in_flight == self.buffered {
                IDLE_CLIENT_LINGER
            } else {
                OUTPUT_BUFFER_TIMEOUT
            };
            self.deadline = Some(Instant::now() + linger);
        }
        Ok(())
    }
}

async fn session(mut stream: TcpStream, floor: Arc<Floor>) -> std::io::Result<()> {
    let mut magic = [0u8; 4];
    stream.read_exact(&mut magic).await?;
    if &magic != b"  V2" {
        return Ok(());
    }
    let (mut r, mut w) = stream.into_split();
    let mut input = BytesMut::with_capacity(64 * 1024);
    let mut s = Session {
        out: Vec::with_capacity(64 * 1024),
        urgent: false,
        buffered: 0,
        in_flight: 0,
        rdy: 0,
        seq: 0,
        deadline: None,
        sub: None,
        fin_sync: None,
        fins: Vec::new(),
        await_sync: None,
        last_topic: None,
    };
    loop {
        s.take_deliveries();
        s.flush_if_due(&mut w).await?;
        let deadline = s.deadline;
        let timer = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let queue = s.sub.clone().filter(|_| s.in_flight < s.rdy);
        let wake = async move {
            match queue {
                Some(q) => q.ready.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            read = r.read_buf(&mut input) => {
                if read? == 0 {
                    return Ok(());
                }
                while let Some(done) = command(&mut input, &mut s, &floor)? {
                    if done {
                        return Ok(());
                    }
                    if let Some((topic, end)) = s.await_sync.take() {
                        let mut synced = topic.synced.subscribe();
                        if synced.wait_for(|&at| at >= end).await.is_err() {
                            return Ok(());
                        }
                        ok(&mut s);
                    }
                }
                // One hand-over per read, as rustqueued sends a read's acks to its channel.
                if let Some(sync) = &s.fin_sync
                    && !s.fins.is_empty()
                {
                    sync.add(|st| st.fins.append(&mut s.fins));
                }
            }
            () = wake => {}
            () = timer => {}
        }
    }
}

/// Executes the next whole command in `input`: `None` when it holds no whole command yet,
/// `Some(true)` when the connection should close.
fn command(input: &mut BytesMut, s: &mut Session, floor: &Floor) -> std::io::Result<Option<bool>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let with_body = [&b"PUB "[..], b"MPUB ", b"IDENTIFY"]
        .iter()
        .any(|verb| input.starts_with(verb));
    let (line, body) = if with_body {
        let Some(size) = input.get(nl + 1..nl + 5) else {
            return Ok(None);
        };
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        if size > MAX_BODY {
            return Err(invalid("body too large"));
        }
        if input.len() < nl + 5 + size {
            return Ok(None);
        }
        let line = input.split_to(nl).freeze();
        input.advance(5);
        (line, input.split_to(size).freeze())
    } else {
        let line = input.split_to(nl).freeze();
        input.advance(1);
        (line, Bytes::new())
    };
    let mut words = line.split(|&b| b == b' ');
    let verb = words.next().unwrap_or_default();
    let arg = words.next().unwrap_or_default();
    match verb {
        b"PUB" | b"MPUB" => {
            let bodies = match verb {
                b"PUB" => vec![body],
                _ => split_multi(body).ok_or_else(|| invalid("bad MPUB body"))?,
            };
            let topic = s.topic(floor, arg)?;
            match topic.publish(&bodies)? {
                Some(end) => s.await_sync = Some((topic, end)),
                None => ok(s),
            }
        }
        b"IDENTIFY" => ok(s),
        b"SUB" => {
            let channel = words.next().unwrap_or_default();
            let channel = std::str::from_utf8(channel).map_err(|_| invalid("bad channel"))?;
            let topic = s.topic(floor, arg)?;
            s.sub = Some(topic.channel(channel));
            s.fin_sync = topic.sync.as_ref().map(|sync| sync.fins.clone());
            ok(s);
        }
        b"RDY" => {
            let count = std::str::from_utf8(arg).ok().and_then(|c| c.parse().ok());
            s.rdy = count.ok_or_else(|| invalid("bad RDY count"))?;
        }
        b"FIN" => {
            s.in_flight -= 1;
            if s.fin_sync.is_some() {
                s.fins.extend_from_slice(arg);
            }
        }
        b"NOP" => {}
        b"CLS" => {
            s.rdy = 0;
            put_frame(&mut s.out, 0, b"CLOSE_WAIT");
            s.urgent = true;
        }
        _ => return Err(invalid("unsupported command")),
    }
    Ok(Some(false))
}

fn ok(s: &mut Session) {
    put_frame(&mut s.out, 0, b"OK");
    s.urgent = true;
}

/// An MPUB body (`count | (size | body)*`) split into its bodies, without copying.
fn split_multi(mut body: Bytes) -> Option<Vec<Bytes>> {
    if body.len() < 4 {
        return None;
    }
    let count = body.get_u32() as usize;
    let mut bodies = Vec::with_capacity(count.min(body.len() / 4));
    for _ in 0..count {
        if body.len() < 4 {
            return None;
        }
        let size = body.get_u32() as usize;
        if body.len() < size {
            return None;
        }
        bodies.push(body.split_to(size));
    }
    body.is_empty().then_some(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunConfig, run};

    fn config(address: String) -> RunConfig {
        RunConfig {
            address,
            topic_prefix: "floor".to_owned(),
            producers: 4,
            consumers: 4,
            consume_after_publish: false,
            batch_size: 1,
            message_bytes: 100,
            rate: None,
            warmup_seconds: 0.0,
            duration_seconds: None,
            messages: 20_000,
            drain_timeout_seconds: 30.0,
            identify: true,
            broker_pid: None,
            topics: 1,
            spread_producers: false,
            producer_addresses: vec![],
            consumer_addresses: vec![],
            extra_pids: vec![],
        }
    }

    async fn start(config: FloorConfig) -> SocketAddr {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        let server = FloorServer::bind(any, any, config).await.unwrap();
        let (tcp, _) = server.addresses().unwrap();
        tokio::spawn(server.serve());
        tcp
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_bench_drains_every_message_through_the_floor() {
        let tcp = start(FloorConfig::default()).await;
        let report = run(config(tcp.to_string())).await.unwrap();
        assert!(report.complete, "{report:?}");
        assert!(report.ledger.is_clean(), "{:?}", report.ledger);
        assert_eq!(report.ledger.acknowledged, 20_000);
        assert_eq!(report.ledger.received_unique, 20_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mpub_and_a_backlog_drain_and_append_writes_every_body() {
        let dir = tempfile::tempdir().unwrap();
        let tcp = start(FloorConfig {
            append_dir: Some(dir.path().to_owned()),
            ..FloorConfig::default()
        })
        .await;
        let mut c = config(tcp.to_string());
        c.batch_size = 64;
        c.consume_after_publish = true;
        let report = run(c).await.unwrap();
        assert!(report.complete, "{report:?}");
        assert!(report.ledger.is_clean(), "{:?}", report.ledger);
        assert_eq!(report.ledger.received_unique, 20_000);
        let written: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(written, 20_000 * 100);
    }

    /// The bytes of the files named `*.{ext}` in `dir`.
    fn bytes_in(dir: &std::path::Path, ext: &str) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_synced_floors_deliver_every_message_and_persist_every_finish() {
        for mode in [SyncMode::NsqRelaxed, SyncMode::WriteAck, SyncMode::Durable] {
            let dir = tempfile::tempdir().unwrap();
            let tcp = start(FloorConfig {
                append_dir: Some(dir.path().to_owned()),
                sync: Some(mode),
            })
            .await;
            let report = run(config(tcp.to_string())).await.unwrap();
            assert!(report.complete, "{mode:?}: {report:?}");
            assert!(report.ledger.is_clean(), "{mode:?}: {:?}", report.ledger);
            assert_eq!(report.ledger.received_unique, 20_000);
            assert_eq!(bytes_in(dir.path(), "log"), 20_000 * 100);
            // Every FIN's 16-byte id reaches the finishes' file within a sync interval or so.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while bytes_in(dir.path(), "fin") < 20_000 * 16 && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(bytes_in(dir.path(), "fin"), 20_000 * 16, "{mode:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_durable_ok_waits_for_the_sync_that_covers_the_publish() {
        let dir = tempfile::tempdir().unwrap();
        let floor = Floor {
            config: FloorConfig {
                append_dir: Some(dir.path().to_owned()),
                sync: Some(SyncMode::Durable),
            },
            topics: Mutex::default(),
        };
        let topic = floor.topic("t").unwrap();
        let queue = topic.channel("c");
        let mut synced = topic.synced.subscribe();
        let end = topic.publish(&[Bytes::from_static(b"abc")]).unwrap();
        assert_eq!(end, Some(3), "a durable publish waits for its sync");
        tokio::time::timeout(Duration::from_secs(5), synced.wait_for(|&at| at >= 3))
            .await
            .expect("the sync thread covers the append")
            .unwrap();
        // Held back from consumers until then; routed once synced.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while lock(&queue.bodies).is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(lock(&queue.bodies).len(), 1);
    }

    #[test]
    fn a_sync_is_due_at_a_threshold_or_after_the_interval_and_not_before() {
        let s = Arc::new(Syncer::new(false));
        let held = [Bytes::from_static(b"a")];
        s.add(|st| {
            st.messages += 1;
            st.end = 7;
            st.fins.extend_from_slice(b"0123456789abcdef");
            st.held.extend(held.iter().cloned());
        });
        let t0 = std::time::Instant::now();
        let taken = s.next();
        assert!(
            t0.elapsed() >= SYNC_INTERVAL / 2,
            "synced before the interval"
        );
        assert_eq!(taken.fins, b"0123456789abcdef");
        assert_eq!(taken.held, held);
        assert_eq!(taken.end, 7);
        // A count threshold makes it due at once, from another thread too.
        let s2 = s.clone();
        let waiter = std::thread::spawn(move || s2.next());
        std::thread::sleep(Duration::from_millis(1));
        s.add(|st| st.messages += SYNC_MESSAGES);
        let taken = waiter.join().unwrap();
        assert!(taken.fins.is_empty() && taken.held.is_empty());
        assert_eq!(taken.end, 7, "the end carries over");
        assert_eq!(lock(&s.state).since, None);
        // A durable syncer does not wait for a threshold.
        let d = Syncer::new(true);
        d.add(|st| st.messages += 1);
        let t0 = std::time::Instant::now();
        d.next();
        assert!(t0.elapsed() < SYNC_INTERVAL, "a durable sync waited");
    }

    #[test]
    fn a_malformed_mpub_is_refused() {
        let mut b = Vec::new();
        b.extend_from_slice(&2u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(b"abc");
        assert!(
            split_multi(Bytes::from(b.clone())).is_none(),
            "one body short"
        );
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(b"d");
        let bodies = split_multi(Bytes::from(b.clone())).unwrap();
        assert_eq!(
            bodies,
            vec![Bytes::from_static(b"abc"), Bytes::from_static(b"d")]
        );
        b.push(0);
        assert!(split_multi(Bytes::from(b)).is_none(), "trailing bytes");
    }
}
