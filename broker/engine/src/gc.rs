//! Retention: deletes whole sealed segments that no channel, bootstrap window or unrouted
//! boundary still needs (docs/storage-format.md, "Retention"). Runs every `gc_interval`.

use std::sync::Weak;
use std::time::Duration;

use rustqueue_storage::{StorageError, Store};

use crate::lock::lock;
use crate::metrics::Timer;
use crate::registry::Registry;
use crate::topic::Topic;
use crate::types::now_ns;

/// Lowest position of `t` that must be kept.
pub(crate) fn retention_floor(t: &Topic, bootstrap_ns: i64) -> u64 {
    let log = lock(&t.log);
    let mut floor = log.first_position_since(now_ns() - bootstrap_ns);
    let mut durable = false;
    drop(log);
    for c in t.channel_list() {
        let st = lock(&c.st);
        // On an ephemeral topic every channel is ephemeral, and only its channels matter.
        if !c.ephemeral || t.ephemeral {
            durable = true;
            floor = floor.min(st.durable.ack_floor + 1);
        }
        if let Some(p) = st.min_in_flight() {
            floor = floor.min(p);
        }
    }
    if t.ephemeral && !durable {
        return lock(&t.log).next_position();
    }
    if !durable {
        let m = lock(&t.manifest);
        floor = floor.min(m.unrouted_from_position.unwrap_or(m.next_position));
    }
    floor
}

/// One GC pass over a topic; returns the number of segments deleted.
pub(crate) fn gc_topic(
    store: &Store,
    bootstrap: Duration,
    t: &Topic,
) -> Result<usize, StorageError> {
    if t.ephemeral {
        let floor = retention_floor(t, 0);
        return lock(&t.log).gc(floor);
    }
    let floor = retention_floor(t, bootstrap.as_nanos() as i64);
    if lock(&t.log).first_position() >= floor {
        return Ok(0);
    }
    let mut m = lock(&t.manifest).clone();
    let next = lock(&t.log).next_position();
    if m.next_position != next {
        m.next_position = next;
        store.write_manifest(&m)?;
        *lock(&t.manifest) = m;
    }
    lock(&t.log).gc(floor)
}

/// Background maintenance every `period`; ends when the engine is dropped or shut down.
pub(crate) async fn maintenance_loop(
    registry: Weak<Registry>,
    period: Duration,
    bootstrap: Duration,
) {
    loop {
        tokio::time::sleep(period).await;
        let Some(r) = registry.upgrade() else { return };
        if r.is_shutting_down() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            for t in r.topic_list() {
                if let Err(e) = gc_topic(r.store(), bootstrap, &t) {
                    tracing::error!(topic = %t.name, error = %e, "retention GC failed; storage isolated");
                }
            }
            r.metrics().since(Timer::Gc, started);
        })
        .await;
    }
}
