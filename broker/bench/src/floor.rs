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
//!   cache only; never synced).
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
use std::sync::{Arc, Mutex, MutexGuard};
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

/// How the floor server runs.
#[derive(Debug, Clone, Default)]
pub struct FloorConfig {
    /// Write every published body into a per-topic file here before answering; `None`: memory
    /// only.
    pub append_dir: Option<PathBuf>,
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
}

impl Topic {
    fn publish(&self, bodies: &[Bytes]) -> std::io::Result<()> {
        if let Some(log) = &self.log {
            let mut log = lock(log);
            let slices: Vec<IoSlice<'_>> = bodies.iter().map(|b| IoSlice::new(b)).collect();
            let len: usize = bodies.iter().map(Bytes::len).sum();
            let offset = log.1;
            write_all_at(&log.0, &slices, len, offset)?;
            log.1 += len as u64;
        }
        let mut channels = lock(&self.channels);
        if channels.by_name.is_empty() {
            channels.unrouted.extend(bodies.iter().cloned());
            return Ok(());
        }
        let queues: Vec<Arc<Queue>> = channels.by_name.values().cloned().collect();
        drop(channels);
        for q in queues {
            q.push(bodies);
        }
        Ok(())
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
        let log = match &self.config.append_dir {
            Some(dir) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(dir.join(format!("{name}.log")))?;
                Some(Mutex::new((file, 0)))
            }
            None => None,
        };
        let topic = Arc::new(Topic {
            channels: Mutex::default(),
            log,
        });
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
        b"PUB" => {
            s.topic(floor, arg)?.publish(&[body])?;
            ok(s);
        }
        b"MPUB" => {
            let bodies = split_multi(body).ok_or_else(|| invalid("bad MPUB body"))?;
            s.topic(floor, arg)?.publish(&bodies)?;
            ok(s);
        }
        b"IDENTIFY" => ok(s),
        b"SUB" => {
            let channel = words.next().unwrap_or_default();
            let channel = std::str::from_utf8(channel).map_err(|_| invalid("bad channel"))?;
            s.sub = Some(s.topic(floor, arg)?.channel(channel));
            ok(s);
        }
        b"RDY" => {
            let count = std::str::from_utf8(arg).ok().and_then(|c| c.parse().ok());
            s.rdy = count.ok_or_else(|| invalid("bad RDY count"))?;
        }
        b"FIN" => s.in_flight -= 1,
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
