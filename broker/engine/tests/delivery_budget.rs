//! The node delivery budget (`limits.node_delivery_inflight_bytes` in docs/configuration.md): each body read for delivery holds 2 × its size, one
//! read at most half the budget, and a read that does not fit waits instead of allocating.

mod common;

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{HookFs, Hooks};
use rustqueue_engine::{Bytes, ConsumerOptions, Counter, Engine, EngineConfig};

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

/// Reads of segment files wait at the gate.
struct SegmentReads(Gate);

impl Hooks for SegmentReads {
    fn read(&self, path: &Path) {
        if path.extension().is_some_and(|e| e == "rqlog") {
            self.0.pass();
        }
    }
}

/// How long the test watches that a read waiting for budget does not start (a negative check).
const NO_THIRD_READ_HOLD: Duration = Duration::from_millis(100);

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
    let e = Engine::open_with_fs(cfg, Arc::new(HookFs(Arc::new(SegmentReads(gate.clone())))))
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
    // A hold, not a synchronisation: the third read must go on waiting, so watch for a
    // while that it does not start one of its own.
    tokio::time::sleep(NO_THIRD_READ_HOLD).await;
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
