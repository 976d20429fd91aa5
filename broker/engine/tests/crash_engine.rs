//! Engine-level crash points: concurrent publishers and a finishing consumer run on the
//! simulated disk until an injected failure "kills" the broker; after a simulated power loss
//! the reopened engine must deliver every acknowledged publish and no acknowledged FIN.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustqueue_engine::{Bytes, ConsumerOptions, Engine, EngineConfig};
use rustqueue_storage::simfs::SimFs;

fn cfg(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        max_segment_bytes: 4_096,
        // This test is about crash points on the simulated disk; the disk-pressure guard
        // reads the host's real free space and would throttle every publish on a full host.
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

/// Receives every message the channel reports as pending (its depth after recovery).
async fn drain(e: &Engine) -> Vec<String> {
    let stats = e.stats(Some("t"), Some("c"));
    let depth = stats
        .topics
        .first()
        .and_then(|t| t.channels.first())
        .map_or(0, |c| c.depth);
    let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
    c.set_ready(1_000);
    let mut got = Vec::new();
    for _ in 0..depth {
        let d = tokio::time::timeout(Duration::from_secs(10), c.next())
            .await
            .expect("pending message delivered")
            .unwrap();
        got.push(String::from_utf8(d.body.to_vec()).unwrap());
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_publishes_and_fins_survive_a_crash_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut fired = 0;
    for budget in (0..72).step_by(2) {
        let fs = SimFs::new();
        let e = Engine::open_with_fs(cfg(dir.path()), Arc::new(fs.clone()))
            .await
            .unwrap();
        e.create_channel("t", "c").unwrap();
        fs.fail_after(budget);
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let mut tasks = Vec::new();
        for p in 0..4 {
            let (e, acked) = (e.clone(), acked.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..8 {
                    let bodies: Vec<Bytes> = (0..1 + i % 3)
                        .map(|j| Bytes::from(format!("p{p}-{i}-{j}")))
                        .collect();
                    let names: Vec<String> = bodies
                        .iter()
                        .map(|b| String::from_utf8(b.to_vec()).unwrap())
                        .collect();
                    if e.publish("t", bodies, None).await.is_err() {
                        return;
                    }
                    acked.lock().unwrap().extend(names);
                }
            }));
        }
        let mut finished = BTreeSet::new();
        let mut c = e.subscribe("t", "c", ConsumerOptions::default()).unwrap();
        c.set_ready(5);
        while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(100), c.next()).await {
            let name = String::from_utf8(d.body.to_vec()).unwrap();
            if name.ends_with("-0") && c.finish(d.id).await.is_ok() {
                finished.insert(name);
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        if fs.failed() {
            fired += 1;
        } else {
            fs.fail_after(0);
        }
        drop(c);
        drop(e);
        fs.crash(&mut |n| n / 2);
        let e = Engine::open_with_fs(cfg(dir.path()), Arc::new(fs.clone()))
            .await
            .unwrap();
        let got: BTreeSet<String> = drain(&e).await.into_iter().collect();
        let acked = acked.lock().unwrap().clone();
        let missing: Vec<_> = acked
            .iter()
            .filter(|m| !got.contains(*m) && !finished.contains(*m))
            .collect();
        assert!(
            missing.is_empty(),
            "budget {budget}: acknowledged but missing: {missing:?}"
        );
        let redelivered: Vec<_> = finished.intersection(&got).collect();
        assert!(
            redelivered.is_empty(),
            "budget {budget}: acknowledged FIN redelivered: {redelivered:?}"
        );
        e.shutdown().await;
    }
    println!("engine crash points fired: {fired}, missing=0");
    assert!(fired >= 24, "injected failures fired {fired} times");
}
