//! SIGKILL under a mixed load (PUB, MPUB, DPUB; FIN, REQ, TOUCH), then restart: every publish that got `OK` is delivered again.
//! Runs the real `rustqueued` binary.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use rustqueue_protocol::Frame;
use rustqueue_protocol::command::encode_mpub_body;

struct Proc {
    b: common::Spawned,
    _config: tempfile::TempDir,
}

async fn spawn(data: &std::path::Path) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    let config = common::with_disk_guard(&mut cmd);
    cmd.env("RUSTQUEUE_DATA_PATH", data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    Proc {
        b: common::spawn_broker(&mut cmd, "/ping", common::T).await,
        _config: config,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_publish_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let proc = spawn(dir.path()).await;
    // The audit channel exists before any publish, so it must see every acknowledged message.
    let mut audit = common::connect(proc.b.tcp).await;
    audit.subscribe("ledger", "audit", 0).await;

    let ledger = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut publishers = Vec::new();
    for p in 0..4 {
        let ledger = ledger.clone();
        let addr = proc.b.tcp;
        publishers.push(tokio::spawn(async move {
            let mut c = common::connect(addr).await;
            for i in 0.. {
                let single = format!("p{p}-m{i}");
                let (cmd, body, msgs) = match i % 4 {
                    0 => {
                        let a = format!("{single}-a");
                        let b = format!("{single}-b");
                        (
                            "MPUB ledger",
                            encode_mpub_body(&[a.as_bytes(), b.as_bytes()]),
                            vec![a, b],
                        )
                    }
                    1 => ("DPUB ledger 100", single.clone().into_bytes(), vec![single]),
                    _ => ("PUB ledger", single.clone().into_bytes(), vec![single]),
                };
                c.cmd_body(cmd, &body).await;
                match c.frame().await {
                    Some(Frame::Response(r)) if &r[..] == b"OK" => {
                        ledger.lock().unwrap().extend(msgs)
                    }
                    _ => return,
                }
            }
        }));
    }
    // A consumer on another channel that FINs, REQs and TOUCHes makes the load mixed.
    let addr = proc.b.tcp;
    let consumer = tokio::spawn(async move {
        let mut c = common::connect(addr).await;
        c.subscribe("ledger", "work", 50).await;
        let mut n = 0u64;
        while let Some(Frame::Message { id, attempts, .. }) = c.frame().await {
            let id = std::str::from_utf8(&id).unwrap().to_owned();
            n += 1;
            match n % 4 {
                0 if attempts == 1 => c.cmd(&format!("REQ {id} 0")).await,
                1 => c.cmd(&format!("TOUCH {id}\nFIN {id}")).await,
                _ => c.cmd(&format!("FIN {id}")).await,
            }
        }
    });
    common::eventually(async || ledger.lock().unwrap().len() >= 300).await;
    let mut proc = proc;
    proc.b.child.kill().unwrap(); // SIGKILL
    proc.b.child.wait().unwrap();
    for p in publishers {
        p.await.unwrap();
    }
    consumer.await.unwrap();
    drop(audit);
    let acked: HashSet<String> = ledger.lock().unwrap().iter().cloned().collect();

    let proc = spawn(dir.path()).await;
    let mut c = common::connect(proc.b.tcp).await;
    c.subscribe("ledger", "audit", 500).await;
    let mut seen = HashSet::new();
    while !acked.is_subset(&seen) {
        match c.answer().await {
            Some(Frame::Message { id, body, .. }) => {
                seen.insert(String::from_utf8(body.to_vec()).unwrap());
                c.fin(&id).await;
            }
            other => panic!(
                "after {} of {} messages: {other:?}",
                seen.len(),
                acked.len()
            ),
        }
    }
    assert!(acked.len() >= 300);
}
