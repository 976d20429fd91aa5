//! Power cuts under load, on a file system that loses whatever was not fsynced
//! (rustqueue-powercut, docs/durability.md). The real `rustqueued` runs with its data
//! directory on the FUSE mount; publishers keep a ledger of acknowledged messages (PUB, MPUB
//! and DPUB), a consumer FINs (and sometimes REQs) on another channel, and at a random instant the power goes: the
//! mount drops everything unsynced (every other cut also tears: each unsynced page survives
//! or not) and the broker is SIGKILLed. The broker restarts on what survived, and then:
//!
//! * `durable` lost nothing acknowledged (every acked body comes back on the audit channel,
//!   and on the work channel unless a FIN was sent for it);
//! * `write_ack` and `nsq_relaxed` lost only an unsynced tail: every lost message was acked
//!   within the last [`RELAXED_WINDOW`] before the cut, and after a cut that tore no page,
//!   per publisher, the lost messages are the last ones it had acknowledged;
//! * every delivered body is intact (its own checksum) and is one that was published, and no
//!   message id ever names two different bodies.
//!
//! Needs root and /dev/fuse, and fails (never skips) without them. `CUTS_PER_MODE` cuts per ack
//! mode (override with RUSTQUEUE_POWERCUT_CUTS); the seed is printed (RUSTQUEUE_POWERCUT_SEED
//! replays one).

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Client;
use rustqueue_powercut::{CutMode, LazyFs, Mounted};
use rustqueue_protocol::Frame;
use rustqueue_protocol::command::encode_mpub_body;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const CUTS_PER_MODE: usize = 18;
const PUBLISHERS: usize = 3;
/// Small segments, so the load rotates them every few hundred messages: sealing, index
/// writes and new segment files (and their directory entries) are cut too.
const SEGMENT_BYTES: u64 = 256 << 10;
const TOPIC: &str = "powercut";
/// The longest a relaxed mode may hold an acknowledged message unsynced, measured from the
/// cut: the sync stage runs 10 ms (`relaxed_sync_interval_ms`) after the oldest unsynced
/// append, plus the fsync itself on a loaded 2-core machine through FUSE. Measured worst
/// cases are printed; this is the bound the test enforces.
const RELAXED_WINDOW: Duration = Duration::from_secs(2);

/// SplitMix64, seeded: the cut instants and body sizes of a run are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `pc|<cycle>|<publisher>|<seq>|<padding>|<fnv of all before>`: a body that proves its own
/// integrity and names its place in the ledger.
fn body(cycle: usize, publisher: usize, seq: u64, pad: usize) -> String {
    let head = format!("pc|{cycle}|{publisher}|{seq}|{}|", "x".repeat(pad));
    format!("{head}{:016x}", fnv(head.as_bytes()))
}

/// The key a body names, after checking it is intact.
fn check_body(b: &[u8]) -> (usize, usize, u64) {
    let s =
        std::str::from_utf8(b).unwrap_or_else(|_| panic!("a corrupted body was delivered: {b:?}"));
    let (head, sum) = s.split_at(s.len().saturating_sub(16));
    assert!(
        u64::from_str_radix(sum, 16).ok() == Some(fnv(head.as_bytes())),
        "a corrupted body was delivered: {s:?}"
    );
    let f: Vec<&str> = head.split('|').collect();
    (
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
    )
}

#[derive(Default)]
struct Ledger {
    /// Bodies whose publish got OK, with the instant of the OK, per publisher in order.
    acked: Vec<Vec<(String, Instant)>>,
    /// Every body ever sent in a publish (acknowledged or not).
    sent: HashSet<String>,
    /// Bodies for which the work consumer sent FIN.
    finned: HashSet<String>,
}

struct Broker {
    process: common::Spawned,
    _config: tempfile::TempDir,
}

fn mount(fs: &LazyFs, at: &Path) -> Mounted {
    fs.mount(at).unwrap_or_else(|e| {
        panic!(
            "{e}\nThe power-cut test needs FUSE: run it as root on a host (or a container with \
             --device /dev/fuse --cap-add SYS_ADMIN) where /dev/fuse exists (modprobe fuse)."
        )
    })
}

/// Starts `rustqueued` on the mount. Its stderr goes to a file: a broker that exits at the
/// start names its reason in the panic (CI's summary shows the panic, not the whole log), and
/// one that dies later shows it when the test fails. Fresh ports are tried again only when the
/// broker says another process took its port between the test picking it and the broker
/// binding it (see [`common::spawn_broker`]); any other exit fails the test.
async fn start(data: &Path, mode: &str) -> Broker {
    let config = tempfile::tempdir().unwrap();
    let path = config.path().join("powercut.toml");
    std::fs::write(
        &path,
        format!(
            "{}max_segment_bytes = {SEGMENT_BYTES}\n[limits]\nmax_body_bytes = {}\n\
             [queue]\nmax_message_bytes = 16384\npublish_ack_mode = \"{mode}\"\n",
            common::DISK_GUARD_TOML,
            SEGMENT_BYTES / 2
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    cmd.env("RUSTQUEUE_CONFIG", &path)
        .env("RUSTQUEUE_DATA_PATH", data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    Broker {
        process: common::spawn_broker(&mut cmd, "/ping", Duration::from_secs(30)).await,
        _config: config,
    }
}

async fn send(c: &mut Client<TcpStream>, bytes: &[u8]) -> bool {
    c.io.write_all(bytes).await.is_ok()
}

async fn cmd_body(c: &mut Client<TcpStream>, line: &str, body: &[u8]) -> bool {
    let mut v = format!("{line}\n").into_bytes();
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    send(c, &v).await
}

/// One publisher until the connection dies: PUB and MPUB (2..=4), each body acked or not.
async fn publish(addr: SocketAddr, cycle: usize, p: usize, seed: u64, ledger: Arc<Mutex<Ledger>>) {
    let Ok(io) = TcpStream::connect(addr).await else {
        return;
    };
    let mut c = Client::over(io);
    if !send(&mut c, b"  V2").await {
        return;
    }
    let mut rng = Rng(seed);
    for seq in 0u64.. {
        let n = if seq % 3 == 0 {
            2 + rng.below(3) as usize
        } else {
            1
        };
        let bodies: Vec<String> = (0..n as u64)
            .map(|k| body(cycle, p, seq * 8 + k, rng.below(1500) as usize))
            .collect();
        ledger.lock().unwrap().sent.extend(bodies.iter().cloned());
        let ok = if n == 1 && seq % 5 == 1 {
            // Deferred: stored now, deliverable 100 ms later (also after a restart).
            cmd_body(&mut c, &format!("DPUB {TOPIC} 100"), bodies[0].as_bytes()).await
        } else if n == 1 {
            cmd_body(&mut c, &format!("PUB {TOPIC}"), bodies[0].as_bytes()).await
        } else {
            let refs: Vec<&[u8]> = bodies.iter().map(|b| b.as_bytes()).collect();
            cmd_body(&mut c, &format!("MPUB {TOPIC}"), &encode_mpub_body(&refs)).await
        };
        if !ok {
            return;
        }
        match tokio::time::timeout(common::T, c.frame()).await {
            Ok(Some(Frame::Response(r))) if &r[..] == b"OK" => {
                let now = Instant::now();
                ledger.lock().unwrap().acked[p].extend(bodies.into_iter().map(|b| (b, now)));
            }
            // An error (the disk went away under the broker) or the connection closed.
            _ => return,
        }
    }
}

/// The work consumer during the load: FINs (or once in a while REQs) every message, records
/// what it FINs.
async fn consume_work(
    addr: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
    ids: Arc<Mutex<HashMap<String, String>>>,
) {
    let Ok(io) = TcpStream::connect(addr).await else {
        return;
    };
    let mut c = Client::over(io);
    if !send(&mut c, format!("  V2SUB {TOPIC} work\nRDY 50\n").as_bytes()).await {
        return;
    }
    let mut n = 0u64;
    loop {
        match tokio::time::timeout(common::T, c.frame()).await {
            Ok(Some(Frame::Message {
                id, body, attempts, ..
            })) => {
                check_body(&body);
                let (id, body) = (
                    String::from_utf8(id.to_vec()).unwrap(),
                    String::from_utf8(body.to_vec()).unwrap(),
                );
                same_id_same_body(&ids, &id, &body);
                // Every 4th first delivery is requeued (it must come back), the rest FINed.
                n += 1;
                let requeue = attempts == 1 && n.is_multiple_of(4);
                let cmd = if requeue {
                    format!("REQ {id} 0\n")
                } else {
                    format!("FIN {id}\n")
                };
                if !send(&mut c, cmd.as_bytes()).await {
                    return;
                }
                if !requeue {
                    ledger.lock().unwrap().finned.insert(body);
                }
            }
            Ok(Some(_)) => {}
            _ => return,
        }
    }
}

fn same_id_same_body(ids: &Mutex<HashMap<String, String>>, id: &str, body: &str) {
    let mut ids = ids.lock().unwrap();
    let prev = ids.entry(id.to_owned()).or_insert_with(|| body.to_owned());
    assert_eq!(
        prev, body,
        "message id {id} was given to two different bodies"
    );
}

/// Messages the channel still holds (ready, in flight or deferred), from `/stats`.
async fn held(http: u16, channel: &str) -> u64 {
    let url = format!("http://127.0.0.1:{http}/stats?format=json&topic={TOPIC}&channel={channel}");
    let doc: serde_json::Value = rustqueue_api::http_client::get(&url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let topics = doc["topics"].as_array().cloned().unwrap_or_default();
    let t = topics
        .iter()
        .find(|t| t["topic_name"] == TOPIC)
        .unwrap_or_else(|| panic!("no topic {TOPIC} in {doc}"));
    let c = t["channels"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["channel_name"] == channel))
        .unwrap_or_else(|| panic!("no channel {channel} in {doc}"));
    ["depth", "in_flight_count", "deferred_count"]
        .iter()
        .map(|k| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}")))
        .sum()
}

/// Everything a channel delivers after a restart: drains it (FIN) until the sentinel
/// published after the restart has come and the broker holds nothing more for the channel.
async fn drain(
    addr: SocketAddr,
    http: u16,
    channel: &str,
    sentinel: &str,
    ids: &Mutex<HashMap<String, String>>,
) -> HashSet<String> {
    let mut c = common::connect(addr).await;
    c.subscribe(TOPIC, channel, 500).await;
    let mut seen = HashSet::new();
    let mut sentinel_seen = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "channel {channel}: still holds {} messages that are never delivered",
            held(http, channel).await
        );
        let wait = if sentinel_seen {
            Duration::from_millis(150)
        } else {
            Duration::from_secs(20)
        };
        match tokio::time::timeout(wait, c.answer()).await {
            Ok(Some(Frame::Message { id, body, .. })) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                c.fin(&id).await;
                if text == sentinel {
                    sentinel_seen = true;
                    continue;
                }
                if text.starts_with("sentinel|") {
                    continue; // an earlier restart's, redelivered
                }
                check_body(&body);
                same_id_same_body(ids, std::str::from_utf8(&id).unwrap(), &text);
                seen.insert(text);
            }
            Ok(Some(Frame::Response(_))) => {}
            Ok(other) => panic!("channel {channel}: {other:?}"),
            // Done once the broker holds nothing more for this channel (every FIN processed).
            Err(_) if sentinel_seen && held(http, channel).await == 0 => return seen,
            Err(_) if sentinel_seen => {}
            Err(_) => {
                panic!("channel {channel}: the sentinel published after the restart never came")
            }
        }
    }
}

#[derive(Default)]
struct Figures {
    cuts: usize,
    torn_cuts: usize,
    acked: usize,
    lost: usize,
    max_lost_in_a_cut: usize,
    oldest_lost: Duration,
    finned_redelivered: usize,
    pages_lost: u64,
    pages_kept: u64,
    dirs_reverted: u64,
    segments: usize,
}

/// One power cut: what the run before it acknowledged, when, and whether pages were torn.
struct Cut {
    ledger: Ledger,
    at: Instant,
    torn: bool,
}

/// The checks after one restart, on what the previous run acknowledged.
async fn verify(
    b: &Broker,
    mode: &str,
    restart: usize,
    cut: &Cut,
    all_sent: &HashSet<String>,
    ids: &Mutex<HashMap<String, String>>,
    fig: &mut Figures,
) {
    let Cut {
        ledger,
        at: cut_at,
        torn,
    } = cut;
    let (cut_at, torn) = (*cut_at, *torn);
    let sentinel = format!("sentinel|{restart}");
    let mut c = common::connect(b.process.tcp).await;
    c.publish(TOPIC, sentinel.as_bytes()).await;
    let (audit, work) = tokio::join!(
        drain(
            b.process.tcp,
            b.process.http.port(),
            "audit",
            &sentinel,
            ids
        ),
        drain(b.process.tcp, b.process.http.port(), "work", &sentinel, ids)
    );
    for seen in [&audit, &work] {
        for s in seen {
            assert!(
                all_sent.contains(s),
                "{mode}: delivered a body never published: {s}"
            );
        }
    }
    let mut lost_here = 0;
    for (p, acked) in ledger.acked.iter().enumerate() {
        fig.acked += acked.len();
        let lost: Vec<usize> = (0..acked.len())
            .filter(|i| !audit.contains(&acked[*i].0))
            .collect();
        if mode == "durable" {
            assert!(
                lost.is_empty(),
                "durable lost {} acknowledged messages of publisher {p} at restart {restart}, e.g. {}",
                lost.len(),
                acked[lost[0]].0
            );
        }
        if let Some(first) = lost.first() {
            // What was synced survives whole, so without torn pages only a suffix can be lost;
            // a torn cut may keep a later unsynced page and lose an earlier one.
            assert!(
                torn || lost.len() == acked.len() - first,
                "{mode}: publisher {p} lost messages that are not its unsynced tail at restart {restart}: lost {lost:?} of {}",
                acked.len()
            );
            let age = cut_at.saturating_duration_since(acked[*first].1);
            assert!(
                age <= RELAXED_WINDOW,
                "{mode}: lost a message acked {age:?} before the cut"
            );
            fig.oldest_lost = fig.oldest_lost.max(age);
        }
        lost_here += lost.len();
        // The work channel: every surviving acked message it had not FINed comes back.
        for (b, _) in acked {
            if audit.contains(b) && !ledger.finned.contains(b) {
                assert!(
                    work.contains(b),
                    "{mode}: the work channel lost an acknowledged, unfinished message: {b}"
                );
            }
        }
    }
    fig.finned_redelivered += work.iter().filter(|b| ledger.finned.contains(*b)).count();
    fig.lost += lost_here;
    fig.max_lost_in_a_cut = fig.max_lost_in_a_cut.max(lost_here);
}

async fn run_mode(mode: &str, cuts: usize, rng: &mut Rng) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let fs = LazyFs::new();
    let mut mnt = Some(mount(&fs, dir.path()));
    let ids = Arc::new(Mutex::new(HashMap::new()));
    let mut fig = Figures::default();
    let mut previous: Option<Cut> = None;
    let mut all_sent = HashSet::new();
    for cycle in 0..=cuts {
        let b = start(dir.path(), mode).await;
        if let Some(cut) = previous.take() {
            all_sent.extend(cut.ledger.sent.iter().cloned());
            verify(&b, mode, cycle, &cut, &all_sent, &ids, &mut fig).await;
        } else {
            // Both channels exist before the first publish, so each must see every message.
            for channel in ["audit", "work"] {
                let mut c = common::connect(b.process.tcp).await;
                c.subscribe(TOPIC, channel, 0).await;
            }
        }
        if cycle == cuts {
            break;
        }
        let ledger = Arc::new(Mutex::new(Ledger {
            acked: vec![Vec::new(); PUBLISHERS],
            ..Ledger::default()
        }));
        let mut tasks = Vec::new();
        for p in 0..PUBLISHERS {
            tasks.push(tokio::spawn(publish(
                b.process.tcp,
                cycle,
                p,
                rng.next(),
                ledger.clone(),
            )));
        }
        tasks.push(tokio::spawn(consume_work(
            b.process.tcp,
            ledger.clone(),
            ids.clone(),
        )));
        // Some acknowledged load first, then the cut at a random instant.
        let began = Instant::now();
        while ledger
            .lock()
            .unwrap()
            .acked
            .iter()
            .map(Vec::len)
            .sum::<usize>()
            < 20
        {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "{mode}: no publish acknowledged"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50 + rng.below(400))).await;
        fs.cut();
        let cut_at = Instant::now();
        let mut b = b;
        b.process.child.kill().unwrap();
        b.process.child.wait().unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        mnt.take().unwrap().unmount().unwrap();
        let torn = cycle % 2 == 1;
        let stats = fs.restart(if torn {
            CutMode::Torn(rng.next())
        } else {
            CutMode::DropUnsynced
        });
        fig.cuts += 1;
        fig.torn_cuts += usize::from(torn);
        fig.pages_lost += stats.pages_lost;
        fig.pages_kept += stats.pages_kept;
        fig.dirs_reverted += stats.dirs_reverted;
        mnt = Some(mount(&fs, dir.path()));
        let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
        previous = Some(Cut {
            ledger,
            at: cut_at,
            torn,
        });
    }
    let topics = dir.path().join("topics");
    for t in std::fs::read_dir(&topics).unwrap() {
        let segments = t.unwrap().path().join("segments");
        fig.segments += std::fs::read_dir(segments)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("rqlog".as_ref()))
            .count();
    }
    fig
}

/// A set, non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_power_cuts_within_each_ack_mode_window() {
    let cuts = env("RUSTQUEUE_POWERCUT_CUTS").map_or(CUTS_PER_MODE, |v| v.parse().unwrap());
    let seed = env("RUSTQUEUE_POWERCUT_SEED").map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |v| v.parse().unwrap(),
    );
    println!("power-cut seed {seed} (RUSTQUEUE_POWERCUT_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let began = Instant::now();
    let mut total = 0;
    println!(
        "mode         cuts (torn)  acked  lost  max lost/cut  oldest lost ack  FINed redelivered  unsynced pages lost/kept  dirs reverted  segments"
    );
    for mode in ["durable", "write_ack", "nsq_relaxed"] {
        let f = run_mode(mode, cuts, &mut rng).await;
        println!(
            "{mode:<12} {:>4} ({:>2}) {:>7} {:>5} {:>13} {:>13.1?} {:>18} {:>15}/{:<9} {:>13} {:>9}",
            f.cuts,
            f.torn_cuts,
            f.acked,
            f.lost,
            f.max_lost_in_a_cut,
            f.oldest_lost,
            f.finned_redelivered,
            f.pages_lost,
            f.pages_kept,
            f.dirs_reverted,
            f.segments
        );
        total += f.cuts;
    }
    println!("{total} power cuts in {:.1?}", began.elapsed());
    assert!(total >= 3 * cuts);
}
