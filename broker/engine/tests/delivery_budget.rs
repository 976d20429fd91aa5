//! The node delivery budget (spec §6): each body read for delivery holds 2 × its size, one
//! read at most half the budget, and a read that does not fit waits instead of allocating.

use std::any::Any;
use std::io::{self, IoSlice};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustqueue_engine::{Bytes, ConsumerOptions, Counter, Engine, EngineConfig};
use rustqueue_storage::{Fs, FsFile, RealFs};

/// Segment reads block while the gate is closed, so reads in progress can be held open.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

#[derive(Default)]
struct GateState {
    closed: bool,
    blocked: usize,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        self.0.0.lock().unwrap().closed = closed;
        self.0.1.notify_all();
    }
    fn blocked(&self) -> usize {
        self.0.0.lock().unwrap().blocked
    }
    fn pass(&self) {
        let mut st = self.0.0.lock().unwrap();
        st.blocked += 1;
        while st.closed {
            st = self.0.1.wait(st).unwrap();
        }
        st.blocked -= 1;
    }
}

/// Opens the gate when dropped, so a failing assertion cannot leave reads blocked forever
/// (the runtime would wait for them on shutdown and the test would hang instead of fail).
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set_closed(false);
    }
}

struct GatedFs(RealFs, Gate);
struct GatedFile(Arc<dyn FsFile>, Option<Gate>);

impl FsFile for GatedFile {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if let Some(g) = &self.1 {
            g.pass();
        }
        self.0.read_exact_at(buf, offset)
    }
    fn append(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.0.append(bufs)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }
}

impl Fs for GatedFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        let gate = path
            .extension()
            .is_some_and(|e| e == "rqlog")
            .then(|| self.1.clone());
        Ok(Arc::new(GatedFile(self.0.open(path, create)?, gate)))
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
        self.0.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.0.lock(path)
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_read_that_does_not_fit_the_delivery_budget_waits_for_one_to_finish() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::default();
    let cfg = EngineConfig {
        data_path: dir.path().to_path_buf(),
        // 4 MiB: two reads of a 1 MiB body (2 × 1 MiB + a little each, capped at half) fill it.
        node_delivery_inflight_bytes: 4 << 20,
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    };
    let e = Engine::open_with_fs(cfg, Arc::new(GatedFs(RealFs, gate.clone())))
        .await
        .unwrap();
    let channels = ["c1", "c2", "c3"];
    for ch in channels {
        e.create_channel("big", ch).unwrap();
    }
    let body = Bytes::from(vec![7u8; (1 << 20) + 1]);
    e.publish("big", vec![body.clone()], None).await.unwrap();

    gate.set_closed(true);
    let _open_on_drop = OpenOnDrop(gate.clone());
    let mut readers = Vec::new();
    for ch in channels {
        let mut c = e.subscribe("big", ch, ConsumerOptions::default()).unwrap();
        c.set_ready(1);
        readers.push(tokio::spawn(async move {
            let d = c.next().await.expect("a delivery");
            c.finish(d.id).await.unwrap();
            d.body
        }));
    }
    // Two reads hold the whole budget inside the file system; the third waits for budget,
    // it does not start a read of its own.
    until("two reads in progress", || gate.blocked() == 2).await;
    until("the third read to wait", || {
        e.counter(Counter::BudgetWaiters) == 1
    })
    .await;
    assert!(e.counter(Counter::BudgetWaits) >= 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(gate.blocked(), 2, "a third read started beyond the budget");

    gate.set_closed(false);
    for r in readers {
        let got = tokio::time::timeout(Duration::from_secs(10), r)
            .await
            .expect("delivery after the budget freed")
            .unwrap();
        assert!(got == body, "body intact");
    }
    assert_eq!(e.counter(Counter::BudgetWaiters), 0);
    e.shutdown().await;
}
