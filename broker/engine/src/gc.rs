//! Retention: deletes whole sealed segments that no channel, bootstrap window or unrouted
//! boundary still needs (docs/storage-format.md, "Retention"). Runs every `gc_interval`. Also the scrub loop,
//! which re-verifies sealed segments at a bounded rate and isolates storage on a mismatch.

use std::sync::{Arc, Weak};

use crate::engine::Inner;
use crate::topic::{Topic, lock};
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
pub(crate) fn gc_topic(inner: &Inner, t: &Topic) -> Result<usize, rustqueue_storage::StorageError> {
    if t.ephemeral {
        let floor = retention_floor(t, 0);
        return lock(&t.log).gc(floor);
    }
    let floor = retention_floor(t, inner.cfg.bootstrap_retention.as_nanos() as i64);
    if lock(&t.log).first_position() >= floor {
        return Ok(0);
    }
    let mut m = lock(&t.manifest).clone();
    let next = lock(&t.log).next_position();
    if m.next_position != next {
        m.next_position = next;
        inner.store.write_manifest(&m)?;
        *lock(&t.manifest) = m;
    }
    lock(&t.log).gc(floor)
}

/// Background maintenance; ends when the engine is dropped or shut down.
pub(crate) async fn maintenance_loop(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => i.cfg.gc_interval,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(i) = inner.upgrade() else { return };
        if i.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let topics = i.topic_list();
        let i2 = i.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            for t in topics {
                if let Err(e) = gc_topic(&i2, &t) {
                    tracing::error!(topic = %t.name, error = %e, "retention GC failed; storage isolated");
                }
            }
            i2.metrics.since(crate::metrics::Timer::Gc, started);
        })
        .await;
    }
}

/// Verifies every sealed segment of every topic at `scrub_bytes_per_second`.
pub(crate) fn scrub_all(inner: &Inner) -> Result<u64, rustqueue_storage::StorageError> {
    let rate = inner.cfg.scrub_bytes_per_second.max(1) as f64;
    let topics: Vec<Arc<Topic>> = inner
        .topics
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|t| !t.ephemeral)
        .cloned()
        .collect();
    let started = std::time::Instant::now();
    let mut read = 0u64;
    let mut records = 0;
    for t in topics {
        let sealed = lock(&t.log).sealed_segments();
        for seg in sealed {
            records += rustqueue_storage::scrub::verify_segment(&seg, &mut |n| {
                read += n;
                let due = std::time::Duration::from_secs_f64(read as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            })?;
        }
    }
    inner.metrics.since(crate::metrics::Timer::Scrub, started);
    Ok(records)
}

/// Background scrub; ends when the engine is dropped or shut down.
pub(crate) async fn scrub_loop(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(i) => i.cfg.scrub_interval,
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(i) = inner.upgrade() else { return };
        if i.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let i2 = i.clone();
        let r = tokio::task::spawn_blocking(move || scrub_all(&i2)).await;
        if let Ok(Err(e)) = r {
            tracing::error!(error = %e, "scrub found corruption; storage isolated");
            i.store.fault().trip(e.to_string());
        }
    }
}
