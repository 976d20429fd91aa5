//! Storage isolation (docs/configuration.md, "Storage isolation"): a scrub that finds a corrupt sealed segment isolates
//! storage; the broker refuses publishes and reports `storage_fault`, and the real
//! `rustqueued` exits with status 3 so its supervisor restarts it. What the restart does with
//! the still-corrupt segment is checked too (docs/storage-format.md, "Recovery and integrity rules").

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{Broker, Client};
use rustqueue_storage::testing::{HEADER_LEN, decode_header};

/// Small segments so a few 20 KB publishes seal some; the disk guard of `common`.
const CONFIG: &str = "[storage]\nmax_segment_bytes = 65600\ndisk_high_watermark_percent = 100\n\
     disk_low_watermark_percent = 99\nmin_free_bytes = 1\n\
     [limits]\nmax_body_bytes = 65536\n[queue]\nmax_message_bytes = 65536\n";

/// The isolated exit must come within this long of the fault (monitor 250 ms + bounded stop).
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// A `rustqueued` process whose stderr goes to a file the test reads afterwards.
struct Proc {
    child: common::KillOnDrop,
    tcp: SocketAddr,
    http: SocketAddr,
    log: PathBuf,
}

impl Proc {
    fn spawn(data: &Path, work: &Path, run: &str) -> Proc {
        let (tcp, http) = (common::free_port(), common::free_port());
        let config = work.join("rustqueue.toml");
        std::fs::write(&config, CONFIG).unwrap();
        let log = work.join(format!("{run}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_rustqueued"))
            .env("RUSTQUEUE_CONFIG", &config)
            .env("RUSTQUEUE_DATA_PATH", data)
            .env("RUSTQUEUE_TCP_ADDRESS", format!("127.0.0.1:{tcp}"))
            .env("RUSTQUEUE_HTTP_ADDRESS", format!("127.0.0.1:{http}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Proc {
            child: common::KillOnDrop(child),
            tcp: format!("127.0.0.1:{tcp}").parse().unwrap(),
            http: format!("127.0.0.1:{http}").parse().unwrap(),
            log,
        }
    }

    /// Spawns and waits until `/ping` answers.
    async fn start(data: &Path, work: &Path, run: &str) -> Proc {
        let mut p = Proc::spawn(data, work, run);
        let ping = p.url("/ping");
        common::eventually(async || {
            if let Some(status) = p.child.try_wait().unwrap() {
                panic!("rustqueued exited at start ({status}): {}", p.stderr());
            }
            reqwest::get(&ping)
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        p
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit on its own.
    async fn exit_within(&mut self, limit: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "rustqueued still running {limit:?} after the fault; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Sealed `.rqlog` files of `topic` (every segment but the active last one), oldest first.
fn sealed_segments(data: &Path, topic: &str) -> Vec<PathBuf> {
    let dir = data
        .join("topics")
        .join(rustqueue_storage::testing::hex(topic))
        .join("segments");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rqlog"))
        .collect();
    logs.sort();
    logs.pop();
    logs
}

/// Flips one payload byte of the second record of `segment`; returns that record's offset
/// (where a CRC check must report the damage).
fn corrupt_second_record(segment: &Path) -> u64 {
    let mut bytes = std::fs::read(segment).unwrap();
    let first = decode_header(&bytes[..HEADER_LEN]).unwrap();
    let offset = HEADER_LEN + first.payload_len as usize;
    let second = decode_header(&bytes[offset..offset + HEADER_LEN]).unwrap();
    assert!(
        offset + HEADER_LEN + (second.payload_len as usize) <= bytes.len(),
        "the sealed segment holds two complete records"
    );
    bytes[offset + HEADER_LEN + second.payload_len as usize / 2] ^= 0x5a;
    std::fs::write(segment, bytes).unwrap();
    offset as u64
}

/// Publishes `n` bodies of 20 KB (three fit in one 64 KiB segment).
async fn publish_large(tcp: SocketAddr, topic: &str, n: usize) {
    let mut c = Client::connect(tcp).await;
    for i in 0..n {
        let body = vec![b'a' + (i % 26) as u8; 20_000];
        c.publish(topic, &body).await;
    }
}

/// `POST /v1/storage/scrub`; returns status and the JSON body.
async fn scrub(url: String) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new().post(url).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

fn assert_names_damage(text: &str, segment: &Path, offset: u64) {
    let name = segment.file_name().unwrap().to_string_lossy();
    let at = format!("at offset {offset}");
    assert!(
        text.contains("corrupt data in") && text.contains(&*name) && text.contains(&at),
        "expected `corrupt data in ...{name} {at}` in:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrub_that_finds_corruption_makes_rustqueued_exit_for_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut p = Proc::start(data.path(), work.path(), "first").await;
    publish_large(p.tcp, "t", 8).await;
    let sealed = sealed_segments(data.path(), "t");
    assert!(sealed.len() >= 2, "publishes sealed segments: {sealed:?}");
    let clean = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(clean.0, 200, "{:?}", clean.1);
    let segment = sealed[0].clone();
    let offset = corrupt_second_record(&segment);

    let (status, body) = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(
        (status, &body["message"]),
        (503, &"E_STORAGE".into()),
        "{body}"
    );
    assert_names_damage(body["detail"].as_str().unwrap(), &segment, offset);
    // Until it exits, the broker must not look ready (it may already be gone).
    if let Ok(r) = reqwest::get(p.url("/v1/health")).await {
        let status = r.status().as_u16();
        let health: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(status, 503, "{health}");
        assert_eq!(health["reason"], "storage_fault", "{health}");
    }

    let exit = p.exit_within(EXIT_WITHIN).await;
    assert_eq!(exit.code(), Some(3), "exit {exit}; stderr:\n{}", p.stderr());
    let log = p.stderr();
    assert!(log.contains("storage isolated: "), "{log}");
    assert!(log.contains("supervisor restarts the broker"), "{log}");
    assert_names_damage(&log, &segment, offset);

    // The restart: a sealed segment with a valid index is trusted at startup (its body CRCs
    // are the scrub's job, docs/storage-format.md), so the broker comes back and serves...
    let mut p = Proc::start(data.path(), work.path(), "second").await;
    publish_large(p.tcp, "t", 1).await;
    // ...and the next scrub finds the same damage, naming the same file and offset.
    let (status, body) = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(status, 503, "{body}");
    assert_names_damage(body["detail"].as_str().unwrap(), &segment, offset);
    let exit = p.exit_within(EXIT_WITHIN).await;
    assert_eq!(exit.code(), Some(3), "exit {exit}; stderr:\n{}", p.stderr());

    // Without its index the segment is scanned at startup, and recovery refuses to start,
    // naming the file and offset and saying what to do.
    let index = segment.with_extension("rqidx");
    std::fs::remove_file(&index).unwrap();
    let mut p = Proc::spawn(data.path(), work.path(), "third");
    let exit = p.exit_within(Duration::from_secs(10)).await;
    assert_eq!(exit.code(), Some(1), "exit {exit}; stderr:\n{}", p.stderr());
    let log = p.stderr();
    assert_names_damage(&log, &segment, offset);
    assert!(
        log.contains("restore the file or remove the topic"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_broker_refuses_publishes_and_reports_storage_fault() {
    // In process (no exit monitor): the faulted broker stays up to be inspected.
    let b = Broker::start_with(|cfg| {
        cfg.storage.max_segment_bytes = 65_600;
        cfg.limits.max_body_bytes = 65_536;
        cfg.queue.max_message_bytes = 65_536;
    })
    .await;
    publish_large(b.tcp, "t", 8).await;
    let health = reqwest::get(b.url("/v1/health")).await.unwrap();
    assert_eq!(health.status(), 200);
    let sealed = sealed_segments(b.dir.path(), "t");
    let offset = corrupt_second_record(&sealed[0]);

    let (status, body) = scrub(b.url("/v1/storage/scrub")).await;
    assert_eq!(status, 503, "{body}");
    assert_names_damage(body["detail"].as_str().unwrap(), &sealed[0], offset);

    let health = reqwest::get(b.url("/v1/health")).await.unwrap();
    assert_eq!(health.status(), 503);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["status"], "not_ready", "{health}");
    assert_eq!(health["reason"], "storage_fault", "{health}");

    let mut c = b.client().await;
    c.cmd_body("PUB t", b"after the fault").await;
    c.expect_error("E_PUB_RETRY").await;
    let r = reqwest::Client::new()
        .post(b.url("/pub?topic=t"))
        .body("after the fault")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    // A graceful stop of an isolated broker still returns promptly.
    tokio::time::timeout(Duration::from_secs(10), b.stop())
        .await
        .expect("shutdown of an isolated broker finished");
}
