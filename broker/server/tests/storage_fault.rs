//! Storage faults on the real `rustqueued`.
//!
//! Isolation (docs/configuration.md, "Storage isolation"): a sealed segment whose length
//! changed is a failed write, not damage at rest; the scrub isolates storage, the broker
//! refuses publishes and reports `storage_fault`, and `rustqueued` exits with status 3 so its
//! supervisor restarts it into recovery.
//!
//! Damage at rest (docs/storage-format.md, "Damage at rest"): a bit flipped in a sealed
//! segment while the broker is stopped costs exactly the message it hit, which is never
//! delivered and is reported; the broker keeps serving and the scrub does not stop it.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::Broker;
use rustqueue_storage::testing::{HEADER_LEN, decode_header};

/// Small segments so a few 20 KB publishes seal some; the disk guard of `common`.
const CONFIG: &str = "[storage]\nmax_segment_bytes = 65600\ndisk_high_watermark_percent = 100\n\
     disk_low_watermark_percent = 99\nmin_free_bytes = 1\n\
     [limits]\nmax_body_bytes = 65536\n[queue]\nmax_message_bytes = 65536\n";

/// The isolated exit must come within this long of the fault (monitor 250 ms + bounded stop).
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// How long a broker whose scrub found only damage at rest is watched not to exit (a
/// negative check; /v1/health, read right after, shows the storage fault was not tripped).
const STAYS_UP_HOLD: Duration = Duration::from_secs(1);

/// A `rustqueued` process whose stderr goes to a file the test reads afterwards.
type Proc = common::Spawned;

/// Starts `rustqueued` on `data` (its config file in `work`) and waits until `/ping` answers.
async fn start(data: &Path, work: &Path) -> Proc {
    let config = work.join("rustqueue.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    cmd.env("RUSTQUEUE_CONFIG", &config)
        .env("RUSTQUEUE_DATA_PATH", data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    common::spawn_broker(&mut cmd, "/ping", common::T).await
}

/// Waits for the process to exit on its own.
async fn exit_within(p: &mut Proc, limit: Duration) -> ExitStatus {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rustqueued still running {limit:?} after the fault; stderr:\n{}",
            p.stderr()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
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

/// The body of the `i`-th message of the scenario: 100 bytes that say which one it is.
fn scenario_body(i: usize) -> Vec<u8> {
    let mut b = format!("message {i:05} ").into_bytes();
    b.resize(100, b'a' + (i % 26) as u8);
    b
}

/// A seed for the random choices of a test, printed so a failure can be replayed with
/// `RUSTQUEUE_TEST_SEED`.
fn seed() -> u64 {
    let seed = std::env::var("RUSTQUEUE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("RUSTQUEUE_TEST_SEED={seed}");
    seed
}

fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Flips one bit at a random position inside the body of a random record of `segment` (one
/// message per record); returns that message's position and the flipped file offset.
fn flip_a_body_bit(segment: &Path, rand: &mut u64) -> (u64, u64) {
    let mut bytes = std::fs::read(segment).unwrap();
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = decode_header(&bytes[at..at + HEADER_LEN]).unwrap();
        records.push(at);
        at += HEADER_LEN + h.payload_len as usize;
    }
    let rec = records[(next_rand(rand) % records.len() as u64) as usize];
    let item = rec + HEADER_LEN + 4;
    let position = u64::from_be_bytes(bytes[item..item + 8].try_into().unwrap());
    let body_len = u32::from_be_bytes(bytes[item + 16..item + 20].try_into().unwrap()) as u64;
    let flip = item as u64 + 20 + next_rand(rand) % body_len;
    bytes[flip as usize] ^= 1 << (next_rand(rand) % 8);
    std::fs::write(segment, bytes).unwrap();
    (position, flip)
}

/// Publishes `n` bodies of 20 KB (three fit in one 64 KiB segment).
async fn publish_large(tcp: SocketAddr, topic: &str, n: usize) {
    let mut c = common::connect(tcp).await;
    for i in 0..n {
        let body = vec![b'a' + (i % 26) as u8; 20_000];
        c.publish(topic, &body).await;
    }
}

/// `POST /v1/storage/scrub`; returns status and the JSON body.
async fn scrub(url: String) -> (u16, serde_json::Value) {
    let r = rustqueue_api::http_client::client()
        .post(url)
        .send()
        .await
        .unwrap();
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

/// Appends bytes to a sealed segment: its length no longer matches what was sealed, which
/// the scrub treats as a failed write to an immutable file (isolation), not as damage at rest.
fn grow_sealed_segment(segment: &Path) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(segment)
        .unwrap();
    std::io::Write::write_all(&mut f, b"garbage").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_segment_that_changed_length_makes_rustqueued_exit_for_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut p = start(data.path(), work.path()).await;
    publish_large(p.tcp, "t", 8).await;
    let sealed = sealed_segments(data.path(), "t");
    assert!(sealed.len() >= 2, "publishes sealed segments: {sealed:?}");
    let clean = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(clean.0, 200, "{:?}", clean.1);
    let segment = sealed[0].clone();
    grow_sealed_segment(&segment);

    let (status, body) = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(
        (status, &body["message"]),
        (503, &"E_STORAGE".into()),
        "{body}"
    );
    assert_names_damage(body["detail"].as_str().unwrap(), &segment, 0);
    // Until it exits, the broker must not look ready (it may already be gone).
    if let Ok(r) = rustqueue_api::http_client::get(p.url("/v1/health")).await {
        let status = r.status().as_u16();
        let health: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(status, 503, "{health}");
        assert_eq!(health["reason"], "storage_fault", "{health}");
    }

    let exit = exit_within(&mut p, EXIT_WITHIN).await;
    assert_eq!(exit.code(), Some(3), "exit {exit}; stderr:\n{}", p.stderr());
    let log = p.stderr();
    assert!(log.contains("storage isolated: "), "{log}");
    assert!(log.contains("supervisor restarts the broker"), "{log}");
    assert_names_damage(&log, &segment, 0);

    // The restart no longer trusts that segment's index: it scans it, quarantines the bytes
    // that are not a record (no message was in them) and serves every message.
    let p = start(data.path(), work.path()).await;
    let health: serde_json::Value = rustqueue_api::http_client::get(p.url("/v1/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ready", "{health}");
    let damage = &health["storage_damage"];
    assert_eq!(damage["findings_on_record"], 1, "{health}");
    assert_eq!(damage["messages_on_record"], 0, "{health}");
    assert_eq!(damage["latest"][0]["kind"], "segment_record", "{health}");
    let mut c = common::connect(p.tcp).await;
    c.subscribe("t", "c", 10).await;
    for i in 0..8u8 {
        let (id, _, body) = c.expect_message().await;
        assert_eq!(body, vec![b'a' + i; 20_000], "message {i}");
        c.fin(&id).await;
    }
    let (status, body) = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(status, 200, "{body}");
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
    let health = rustqueue_api::http_client::get(b.url("/v1/health"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let sealed = sealed_segments(b.dir.path(), "t");
    grow_sealed_segment(&sealed[0]);

    let (status, body) = scrub(b.url("/v1/storage/scrub")).await;
    assert_eq!(status, 503, "{body}");
    assert_names_damage(body["detail"].as_str().unwrap(), &sealed[0], 0);

    let health = rustqueue_api::http_client::get(b.url("/v1/health"))
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["status"], "not_ready", "{health}");
    assert_eq!(health["reason"], "storage_fault", "{health}");

    let mut c = b.client().await;
    c.cmd_body("PUB t", b"after the fault").await;
    c.expect_error("E_PUB_RETRY").await;
    let r = rustqueue_api::http_client::client()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flipped_bit_in_a_sealed_segment_costs_one_reported_message_and_no_restart() {
    let mut rand = seed() | 1;
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut p = start(data.path(), work.path()).await;
    const N: usize = 3_000;
    let mut c = common::connect(p.tcp).await;
    for chunk in (0..N).collect::<Vec<_>>().chunks(300) {
        for &i in chunk {
            c.cmd_body("PUB issue", &scenario_body(i)).await;
        }
        for _ in chunk {
            c.expect_ok().await;
        }
    }
    drop(c);
    // Stopped gracefully, then damaged at rest.
    let pid = p.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let exit = exit_within(&mut p, Duration::from_secs(20)).await;
    assert_eq!(exit.code(), Some(0), "stderr:\n{}", p.stderr());
    let sealed = sealed_segments(data.path(), "issue");
    assert!(sealed.len() >= 3, "{sealed:?}");
    let segment = &sealed[(next_rand(&mut rand) % sealed.len() as u64) as usize];
    let (lost, flipped) = flip_a_body_bit(segment, &mut rand);
    eprintln!(
        "flipped a bit at offset {flipped} of {}, in the body of position {lost}",
        segment.display()
    );

    let mut p = start(data.path(), work.path()).await;
    let mut c = common::connect(p.tcp).await;
    c.subscribe("issue", "consumer", 200).await;
    let mut seen = vec![false; N];
    for _ in 0..N - 1 {
        let (id, _, body) = c.expect_message().await;
        let i: usize = std::str::from_utf8(&body[8..13]).unwrap().parse().unwrap();
        assert_eq!(body, scenario_body(i), "message {i} delivered corrupted");
        assert!(!seen[i], "message {i} delivered twice");
        seen[i] = true;
        c.fin(&id).await;
    }
    let missing: Vec<usize> = (0..N).filter(|&i| !seen[i]).collect();
    assert_eq!(missing, vec![lost as usize - 1], "positions are 1-based");
    // Nothing else comes: the damaged message is never sent.
    c.cmd("NOP").await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c.answer())
            .await
            .is_err(),
        "no further message"
    );

    // The loss is reported: health detail, counter, audit record.
    let health: serde_json::Value = rustqueue_api::http_client::get(p.url("/v1/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ready", "{health}");
    let damage = &health["storage_damage"];
    assert_eq!(damage["quarantined_messages_since_start"], 1, "{health}");
    let rec = &damage["latest"][0];
    assert_eq!(rec["kind"], "message_body", "{health}");
    assert_eq!(rec["detected_by"], "read", "{health}");
    assert_eq!(rec["topic"], "issue", "{health}");
    assert_eq!(rec["positions"], serde_json::json!([lost]), "{health}");
    assert_eq!(rec["message_ids"].as_array().unwrap().len(), 1, "{health}");
    let metrics = rustqueue_api::http_client::get(p.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        common::metric(&metrics, "rustqueue_storage_quarantined_messages_total"),
        Some(1.0),
        "{metrics}"
    );
    let audits: Vec<_> = std::fs::read_dir(data.path().join("audit"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("quarantine-"))
        .collect();
    assert_eq!(audits.len(), 1, "{audits:?}");

    // The scrub finds the same record damaged, counts nothing twice, and the broker stays.
    let (status, body) = scrub(p.url("/v1/storage/scrub")).await;
    assert_eq!(status, 200, "{body}");
    // A hold, not a synchronisation: a scrub that tripped the storage fault would have the
    // exit monitor (every 250 ms) stop the process; watch for a while that it stays.
    tokio::time::sleep(STAYS_UP_HOLD).await;
    assert!(p.child.try_wait().unwrap().is_none(), "{}", p.stderr());
    let health = rustqueue_api::http_client::get(p.url("/v1/health"))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(
        health["storage_damage"]["quarantined_messages_since_start"], 1,
        "{health}"
    );
    // Publishing and consuming go on.
    let mut pb = common::connect(p.tcp).await;
    pb.publish("issue", b"after the damage").await;
    let (_, _, body) = c.expect_message().await;
    assert_eq!(body, b"after the damage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_verify_reports_damage_and_repair_quarantines_it_offline() {
    let mut rand = seed() | 1;
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut p = start(data.path(), work.path()).await;
    let mut c = common::connect(p.tcp).await;
    // 800 records of 172 bytes: at least one sealed 64 KiB segment.
    for i in 0..800 {
        c.cmd_body("PUB tools", &scenario_body(i)).await;
    }
    for _ in 0..800 {
        c.expect_ok().await;
    }
    let pid = p.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert_eq!(
        exit_within(&mut p, Duration::from_secs(20)).await.code(),
        Some(0)
    );
    let sealed = sealed_segments(data.path(), "tools");
    let (lost, _) = flip_a_body_bit(&sealed[0], &mut rand);

    let tool = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rustqueued"))
            .args(["storage"])
            .args(args)
            .arg("--data-path")
            .arg(data.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = tool(&["verify"]);
    assert_eq!(code, Some(4), "{text}");
    let name = sealed[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("damaged") && l.contains(&name)),
        "{text}"
    );
    assert!(
        text.contains(&format!("lost positions: [{lost}]")),
        "{text}"
    );

    let (code, text) = tool(&["repair"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("quarantined SegmentRecord"), "{text}");
    assert!(text.contains(&format!("[{lost}]")), "{text}");

    let (code, text) = tool(&["verify"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("quarantined"), "{text}");

    // The broker starts on the repaired directory and serves the other 799.
    let p = start(data.path(), work.path()).await;
    let mut c = common::connect(p.tcp).await;
    c.subscribe("tools", "c", 100).await;
    for _ in 0..799 {
        let (id, _, body) = c.expect_message().await;
        let i: usize = std::str::from_utf8(&body[8..13]).unwrap().parse().unwrap();
        assert_eq!(body, scenario_body(i));
        assert_ne!(i as u64 + 1, lost);
        c.fin(&id).await;
    }
}
