//! Engine-level durable publish benchmark.
//!
//! 1. Throughput: 16 concurrent publishers, each sending MPUB batches of 64 × 1 KiB for a
//!    fixed time in `durable` mode; prints messages/s and fdatasyncs/s (counted through the
//!    storage I/O seam).
//! 2. Latency: single PUBs to an idle topic (one at a time, 2 ms apart); prints p50/p99.
//!
//! `cargo run --release -p rustqueue-engine --example publish_bench [seconds] [dir]`

use std::any::Any;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustqueue_engine::{Bytes, Engine, EngineConfig};
use rustqueue_storage::{Fs, FsFile, RealFs};

static SYNCS: AtomicU64 = AtomicU64::new(0);

struct CountingFs(RealFs);
struct CountingFile(Arc<dyn FsFile>);

impl FsFile for CountingFile {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        self.0.write_at(bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        self.0.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }
}

impl Fs for CountingFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        Ok(Arc::new(CountingFile(self.0.open(path, create)?)))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.0.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.create_dir_all(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.remove_dir_all(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        self.0.list(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        self.0.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.0.lock(path)
    }
    fn zero_fill_ahead(&self) -> bool {
        self.0.zero_fill_ahead()
    }
}

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir: PathBuf = std::env::args()
        .nth(2)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rustqueue-publish-bench"));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = EngineConfig {
        data_path: dir.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::open_with_fs(cfg, Arc::new(CountingFs(RealFs)))
        .await
        .expect("open");
    engine.create_channel("bench", "c").expect("channel");
    let body = Bytes::from(vec![b'x'; 1024]);
    let stop = Instant::now() + Duration::from_secs(secs);
    let sent = Arc::new(AtomicU64::new(0));
    let syncs0 = SYNCS.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (e, body, sent) = (engine.clone(), body.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                e.publish("bench", vec![body.clone(); 64], None)
                    .await
                    .expect("publish");
                sent.fetch_add(64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("publisher");
    }
    let el = t0.elapsed().as_secs_f64();
    let msgs = sent.load(Ordering::Relaxed);
    let syncs = SYNCS.load(Ordering::Relaxed) - syncs0;
    println!(
        "durable MPUB 64 x 1 KiB, 16 publishers, {el:.1} s: {:.0} messages/s, {:.0} fsyncs/s ({msgs} messages, {syncs} fsyncs)",
        msgs as f64 / el,
        syncs as f64 / el
    );

    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    engine.create_topic("idle").expect("topic");
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let t = Instant::now();
        engine
            .publish("idle", vec![body.clone()], None)
            .await
            .expect("publish");
        hist.record(t.elapsed().as_micros() as u64).expect("record");
    }
    println!(
        "idle-topic single PUB ack latency (durable, 500 samples): p50 {} us, p99 {} us, max {} us",
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.max()
    );
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
