//! The `rustqueued` binary: `--capabilities-output`, refusal of a data directory behind the
//! reader fence, and SIGTERM under load with a ledger showing no acknowledged message lost.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Client;
use rustqueue_api::contract::BinaryCapabilities;
use rustqueue_protocol::Frame;
use rustqueue_server::MAX_STORAGE_FEATURE_LEVEL;

fn command(data: &std::path::Path) -> (Command, tempfile::TempDir) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    c.env("RUSTQUEUE_DATA_PATH", data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let guard = common::with_disk_guard(&mut c);
    (c, guard)
}

struct Proc {
    b: common::Spawned,
    _config: tempfile::TempDir,
}

async fn spawn(data: &std::path::Path) -> Proc {
    let (mut cmd, config) = command(data);
    Proc {
        b: common::spawn_broker(&mut cmd, "/v1/health", common::T).await,
        _config: config,
    }
}

#[test]
fn capabilities_output_writes_the_binary_capabilities_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("caps.json");
    let status = Command::new(env!("CARGO_BIN_EXE_rustqueued"))
        .arg("--capabilities-output")
        .arg(&out)
        .env("RUSTQUEUE_DATA_PATH", dir.path().join("data"))
        .env("RUSTQUEUE_MAX_MESSAGE_BYTES", "1048576")
        .status()
        .unwrap();
    assert!(status.success());
    let caps: BinaryCapabilities = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(caps.data_format, 7);
    assert_eq!(caps.minimum_reader_feature_level, 1);
    assert_eq!(caps.maximum_reader_feature_level, MAX_STORAGE_FEATURE_LEVEL);
    assert_eq!(caps.maximum_writer_feature_level, MAX_STORAGE_FEATURE_LEVEL);
    assert_eq!(caps.maximum_message_bytes, 1_048_576);
    assert_eq!(caps.binary_version, env!("CARGO_PKG_VERSION"));
    assert!(!dir.path().join("data").exists(), "nothing was opened");
}

#[test]
fn a_data_directory_behind_the_reader_fence_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fenced = MAX_STORAGE_FEATURE_LEVEL + 1;
    std::fs::write(
        dir.path().join("COMPATIBILITY"),
        format!(
            r#"{{"data_format":7,"active_writer_feature_level":{fenced},"minimum_reader_feature_level":{fenced},"generation":4}}"#
        ),
    )
    .unwrap();
    let (mut cmd, _config) = command(dir.path());
    // Port 0: the broker binds before it reads the fence, and no port can be taken from it.
    let out = cmd
        .env("RUSTQUEUE_TCP_ADDRESS", "127.0.0.1:0")
        .env("RUSTQUEUE_HTTP_ADDRESS", "127.0.0.1:0")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rollback fence"), "{stderr}");
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "nothing but COMPATIBILITY was written");
}

/// PUB on `ledger`; true only when the broker answered `OK`. A write error, close, error
/// frame or a 10 s silence all count as "not acknowledged".
async fn pub_and_wait(c: &mut Client<tokio::net::TcpStream>, body: &[u8]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut v = b"PUB ledger\n".to_vec();
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    if c.io.write_all(&v).await.is_err() {
        return false;
    }
    let read = async {
        loop {
            match Frame::decode(&mut c.buf, 1 << 20) {
                Ok(Some(Frame::Response(r))) if &r[..] == b"_heartbeat_" => {
                    if c.io.write_all(b"NOP\n").await.is_err() {
                        return false;
                    }
                }
                Ok(Some(Frame::Response(r))) => return &r[..] == b"OK",
                Ok(Some(_)) | Err(_) => return false,
                Ok(None) => {}
            }
            match c.io.read_buf(&mut c.buf).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_no_acknowledged_message() {
    let dir = tempfile::tempdir().unwrap();
    let broker = spawn(dir.path()).await;
    let r = rustqueue_api::http_client::client()
        .post(format!(
            "http://{}/channel/create?topic=ledger&channel=audit",
            broker.b.http
        ))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let acked = Arc::new(Mutex::new(HashSet::new()));
    let mut producers = Vec::new();
    for p in 0..3 {
        let acked = acked.clone();
        let addr = broker.b.tcp;
        producers.push(tokio::spawn(async move {
            let mut c = common::connect(addr).await;
            for i in 0.. {
                let body = format!("p{p}-m{i}");
                if !pub_and_wait(&mut c, body.as_bytes()).await {
                    return;
                }
                acked.lock().unwrap().insert(body);
            }
        }));
    }
    common::eventually(async || acked.lock().unwrap().len() >= 300).await;
    let mut broker = broker;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(broker.b.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = broker.b.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit within the grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "graceful exit: {status:?}");
    for p in producers {
        tokio::time::timeout(Duration::from_secs(10), p)
            .await
            .unwrap()
            .unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    drop(broker);

    let again = spawn(dir.path()).await;
    let mut consumer = common::connect(again.b.tcp).await;
    consumer.subscribe("ledger", "audit", 2_500).await;
    let mut seen = HashSet::new();
    while !acked.is_subset(&seen) {
        let (id, _, body) = consumer.expect_message().await;
        seen.insert(String::from_utf8(body).unwrap());
        consumer.fin(&id).await;
    }
    assert!(acked.len() >= 300);
}
