//! Scrub: re-verifies every sealed segment at a bounded rate, in the background every
//! `scrub_interval` and on demand (`POST /v1/storage/scrub`). Damage is quarantined and the
//! broker keeps serving; only an I/O failure or a changed segment length isolates storage
//! (docs/storage-format.md, "Damage at rest").

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustqueue_storage::StorageError;

use crate::lock::lock;
use crate::metrics::Timer;
use crate::registry::Registry;
use crate::topic::Topic;

/// Verifies every sealed segment of every durable topic at `bytes_per_second`; returns the
/// number of records checked.
pub(crate) fn scrub_all(registry: &Registry, bytes_per_second: u64) -> Result<u64, StorageError> {
    let rate = bytes_per_second.max(1) as f64;
    let topics: Vec<Arc<Topic>> = registry
        .topic_list()
        .into_iter()
        .filter(|t| !t.ephemeral)
        .collect();
    let started = Instant::now();
    let mut read = 0u64;
    let mut records = 0;
    for t in topics {
        let (sealed, sink) = {
            let log = lock(&t.log);
            (log.sealed_segments(), log.damage_sink().clone())
        };
        for seg in sealed {
            let report = rustqueue_storage::verify_segment(&seg, &sink, &mut |n| {
                read += n;
                let due = Duration::from_secs_f64(read as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            })?;
            records += report.records;
            if report.findings > 0 {
                tracing::warn!(
                    topic = %t.name,
                    segment = %seg.path.display(),
                    findings = report.findings,
                    "scrub quarantined damaged data; the broker keeps serving"
                );
            }
            if let Some(rebuilt) = report.rebuilt_index {
                lock(&t.log).adopt_index(rebuilt);
            }
        }
    }
    registry.metrics().since(Timer::Scrub, started);
    Ok(records)
}

/// Background scrub every `period`; ends when the engine is dropped or shut down.
pub(crate) async fn scrub_loop(registry: Weak<Registry>, period: Duration, bytes_per_second: u64) {
    loop {
        tokio::time::sleep(period).await;
        let Some(r) = registry.upgrade() else { return };
        if r.is_shutting_down() {
            return;
        }
        let r2 = r.clone();
        let result = tokio::task::spawn_blocking(move || scrub_all(&r2, bytes_per_second)).await;
        if let Ok(Err(e)) = result {
            tracing::error!(error = %e, "scrub found corruption; storage isolated");
            r.store().fault().trip(e.to_string());
        }
    }
}
