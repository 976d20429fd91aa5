//! Fail-closed exit after a storage fault (docs/configuration.md, "Storage isolation").
//!
//! Once a write, fsync, rename, read-CRC or scrub failure trips the store-wide fault, storage
//! refuses every further write and the broker can only answer errors.
//! [`crate::Running::storage_fault`] notices the trip within [`MONITOR_INTERVAL`];
//! `rustqueued` then stops serving without touching storage
//! ([`crate::Running::stop_isolated`], bounded by [`ISOLATED_STOP_BOUND`]) and exits with
//! [`EXIT_STORAGE_ISOLATED`], so its supervisor (Kubernetes) restarts it into normal recovery.
//!
//! Only the binary runs the monitor. [`crate::start`] does not, so in-process tests can keep
//! inspecting a faulted broker (`/v1/health`, `/metrics`, refused publishes).

use std::time::Duration;

use rustqueue_engine::Engine;

/// How often the monitor checks `engine.health().storage_fault`.
pub const MONITOR_INTERVAL: Duration = Duration::from_millis(250);

/// Longest the isolated stop waits for listeners and sessions before aborting them.
pub const ISOLATED_STOP_BOUND: Duration = Duration::from_secs(2);

/// `rustqueued`'s exit status after storage isolation (distinct from 1, a refused start, and
/// 2, bad command-line flags).
pub const EXIT_STORAGE_ISOLATED: i32 = 3;

/// Resolves with the fault's reason once storage is isolated, checking every `every`.
/// Never resolves on a healthy engine or during a graceful shutdown (the engine then reports
/// no fault).
pub(crate) async fn storage_fault(engine: &Engine, every: Duration) -> String {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(fault) = engine.health().storage_fault {
            return fault;
        }
    }
}

/// The line `rustqueued` logs before it exits after isolation.
pub fn exit_message(fault: &str) -> String {
    format!(
        "storage isolated: {fault}; exiting with status {EXIT_STORAGE_ISOLATED} so the \
         supervisor restarts the broker"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustqueue_engine::{Bytes, EngineConfig};
    use rustqueue_storage::simfs::SimFs;

    use super::*;

    async fn engine(fs: &SimFs) -> (Engine, tempfile::TempDir) {
        // The simulated disk holds the data; the temp dir only answers the disk-space probe.
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            data_path: dir.path().to_path_buf(),
            disk_high_watermark_percent: 100,
            disk_low_watermark_percent: 99,
            min_free_bytes: 0,
            ..EngineConfig::default()
        };
        let e = Engine::open_with_fs(cfg, Arc::new(fs.clone()))
            .await
            .unwrap();
        (e, dir)
    }

    #[tokio::test]
    async fn the_monitor_reports_a_tripped_fault_within_one_interval() {
        let fs = SimFs::new();
        let (e, _dir) = engine(&fs).await;
        e.publish("t", vec![Bytes::from_static(b"a")], None)
            .await
            .unwrap();
        let quiet = tokio::time::timeout(
            Duration::from_millis(300),
            storage_fault(&e, MONITOR_INTERVAL),
        )
        .await;
        assert!(quiet.is_err(), "a healthy engine reported {quiet:?}");

        fs.fail_after(0);
        assert!(
            e.publish("t", vec![Bytes::from_static(b"b")], None)
                .await
                .is_err()
        );
        let started = tokio::time::Instant::now();
        let fault =
            tokio::time::timeout(Duration::from_secs(2), storage_fault(&e, MONITOR_INTERVAL))
                .await
                .expect("the monitor noticed the fault");
        assert!(
            started.elapsed() <= MONITOR_INTERVAL * 2,
            "{:?}",
            started.elapsed()
        );
        assert!(fault.contains("simulated I/O failure"), "{fault}");
        assert!(exit_message(&fault).starts_with("storage isolated: "));
    }

    #[tokio::test]
    async fn a_graceful_shutdown_is_not_mistaken_for_a_fault() {
        let fs = SimFs::new();
        let (e, _dir) = engine(&fs).await;
        e.shutdown().await;
        let r = tokio::time::timeout(
            Duration::from_millis(600),
            storage_fault(&e, MONITOR_INTERVAL),
        )
        .await;
        assert!(r.is_err(), "shutdown reported as a fault: {r:?}");
    }
}
