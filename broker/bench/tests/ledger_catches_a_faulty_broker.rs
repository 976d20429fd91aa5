//! A benchmark that cannot see lost or doubled messages is worse than none. These tests run the
//! tool against a deliberately faulty in-process NSQ V2 server that acknowledges every publish
//! but drops (or doubles) every tenth message, and check the run is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustqueue_bench::run::{self, RunConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};

#[derive(Clone, Copy)]
enum Fault {
    DropEveryTenth,
    DoubleEveryTenth,
}

struct Shared {
    fault: Fault,
    published: AtomicU64,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    rx: Mutex<mpsc::UnboundedReceiver<Vec<u8>>>,
}

async fn faulty_broker(fault: Fault) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        fault,
        published: AtomicU64::new(0),
        tx,
        rx: Mutex::new(rx),
    });
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    addr
}

fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
    let mut out = ((data.len() + 4) as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(data);
    out
}

fn accept(shared: &Shared, body: Vec<u8>) {
    let n = shared.published.fetch_add(1, Ordering::Relaxed);
    match (shared.fault, n % 10 == 9) {
        (Fault::DropEveryTenth, true) => {}
        (Fault::DoubleEveryTenth, true) => {
            let _ = shared.tx.send(body.clone());
            let _ = shared.tx.send(body);
        }
        _ => {
            let _ = shared.tx.send(body);
        }
    }
}

async fn serve(stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(bytes) = out_rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let closing = Arc::new(AtomicBool::new(false));
    let mut rd = BufReader::new(rd);
    let mut magic = [0u8; 4];
    rd.read_exact(&mut magic).await?;
    let ok = frame(0, b"OK");
    loop {
        let mut line = Vec::new();
        if rd.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&line).trim_end().to_owned();
        let verb = line.split(' ').next().unwrap_or("");
        match verb {
            "IDENTIFY" | "PUB" => {
                let body = read_sized(&mut rd).await?;
                if verb == "PUB" {
                    accept(&shared, body);
                }
                let _ = out_tx.send(ok.clone());
            }
            "MPUB" => {
                let body = read_sized(&mut rd).await?;
                let mut at = 4;
                while at < body.len() {
                    let len = u32::from_be_bytes(body[at..at + 4].try_into().unwrap()) as usize;
                    accept(&shared, body[at + 4..at + 4 + len].to_vec());
                    at += 4 + len;
                }
                let _ = out_tx.send(ok.clone());
            }
            "SUB" => {
                let _ = out_tx.send(ok.clone());
                let (shared, out, closing) = (shared.clone(), out_tx.clone(), closing.clone());
                tokio::spawn(async move {
                    let mut id = 0u128;
                    while !closing.load(Ordering::Relaxed) {
                        let Some(body) = shared.rx.lock().await.recv().await else {
                            return;
                        };
                        id += 1;
                        let mut data = 0i64.to_be_bytes().to_vec();
                        data.extend_from_slice(&1u16.to_be_bytes());
                        data.extend_from_slice(format!("{id:016x}").as_bytes());
                        data.extend_from_slice(&body);
                        if out.send(frame(2, &data)).is_err() {
                            return;
                        }
                    }
                });
            }
            "CLS" => {
                closing.store(true, Ordering::Relaxed);
                let _ = out_tx.send(frame(0, b"CLOSE_WAIT"));
            }
            _ => {} // RDY, FIN, NOP: nothing to do for this fake
        }
    }
}

async fn read_sized(
    rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    rd.read_exact(&mut len).await?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    rd.read_exact(&mut body).await?;
    Ok(body)
}

fn config(address: String, batch_size: usize) -> RunConfig {
    RunConfig {
        address,
        topic_prefix: "fault".to_owned(),
        producers: 2,
        consumers: 2,
        consume_after_publish: false,
        batch_size,
        message_bytes: 64,
        rate: None,
        warmup_seconds: 0.0,
        duration_seconds: None,
        messages: 1000,
        drain_timeout_seconds: 2.0,
        identify: true,
        broker_pid: None,
        topics: 1,
        spread_producers: false,
        producer_addresses: vec![],
        consumer_addresses: vec![],
        extra_pids: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_loses_acknowledged_messages_fails_the_run_with_the_exact_count() {
    let addr = faulty_broker(Fault::DropEveryTenth).await;
    let report = run::run(config(addr, 1)).await.unwrap();
    assert_eq!(report.ledger.acknowledged, 1000);
    assert_eq!(report.ledger.missing, 100);
    assert!(report.drain_timed_out);
    assert!(!report.complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_delivers_twice_fails_the_run_even_though_nothing_is_missing() {
    let addr = faulty_broker(Fault::DoubleEveryTenth).await;
    let report = run::run(config(addr, 16)).await.unwrap();
    assert_eq!(report.ledger.missing, 0);
    assert!(report.ledger.duplicates > 0, "{:?}", report.ledger);
    assert!(!report.complete);
}
