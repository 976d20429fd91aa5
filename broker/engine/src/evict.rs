//! Protective eviction (docs/api.md, "Disk pressure"), opt-in with `protective_eviction_enabled`.
//! Never with `[tiering]`: there the uploader removes local copies of uploaded segments under
//! pressure instead, and no message is deleted (docs/tiering.md, "A full volume").
//!
//! After `disk_pressure_grace` of continuous pressure the disk guard calls [`evict_once`] on
//! every tick. It picks the durable topic holding the oldest message and runs, in order:
//!
//! ```text
//! seal active segment -> pick oldest sealed segment -> persist manifest
//!   -> write audit record (atomic) -> no durable channel? move the unrouted boundary past it
//!   -> append durable Evict(through) to every channel WAL (fsync) -> delete the segment
//! ```
//!
//! Every step is durable before the next starts, so a crash at any point leaves either the
//! segment in place (eviction repeats later) or every channel already past it: a channel never
//! recovers pointing into a deleted segment. The engine has no segment read leases: a delivery
//! reading a body keeps its open file handle, so unlinking under it is safe.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustqueue_storage::{EvictionAudit, OldestSegment, StorageError, Store};

use crate::error::{EngineError, StorageFault};
use crate::lock::lock;
use crate::metrics::Counter;
use crate::registry::Registry;
use crate::topic::Topic;

/// Evicts the oldest sealed segment of the topic holding the oldest message, if any;
/// returns whether a segment was deleted.
pub(crate) async fn evict_once(registry: &Arc<Registry>) -> Result<bool, EngineError> {
    let Some(t) = oldest_topic(registry) else {
        return Ok(false);
    };
    let (r2, t2) = (registry.clone(), t.clone());
    let seg = tokio::task::spawn_blocking(move || prepare(r2.store(), &t2))
        .await
        .map_err(|e| StorageFault::task("eviction", &e))??;
    t.publish_visibility();
    let Some(seg) = seg else { return Ok(false) };
    if seg.messages > 0 {
        for c in t.channel_list() {
            let cmd = lock(&c.st).evict(seg.through_position);
            c.notify.notify_waiters();
            if c.wal_tx.is_some() {
                c.persist(vec![cmd]).await?;
            }
        }
    }
    let t2 = t.clone();
    let base = seg.base;
    let messages = tokio::task::spawn_blocking(move || lock(&t2.log).evict_oldest(base))
        .await
        .map_err(|e| StorageFault::task("eviction", &e))??;
    registry.metrics().add(Counter::Evictions, 1);
    registry.metrics().add(Counter::EvictedMessages, messages);
    tracing::warn!(
        topic = %t.name,
        through = seg.through_position,
        messages,
        "protective eviction deleted the oldest segment under disk pressure"
    );
    Ok(true)
}

/// The durable topic whose oldest stored message is the oldest of all.
fn oldest_topic(registry: &Registry) -> Option<Arc<Topic>> {
    registry
        .topic_list()
        .into_iter()
        .filter(|t| !t.ephemeral && !t.deleted.load(Ordering::SeqCst))
        .filter_map(|t| {
            let ts = lock(&t.log).oldest_timestamp()?;
            Some((ts, t))
        })
        .min_by_key(|(ts, _)| *ts)
        .map(|(_, t)| t)
}

/// Seal, pick, manifest, audit and unrouted boundary: everything before the channel records.
fn prepare(store: &Store, t: &Topic) -> Result<Option<OldestSegment>, StorageError> {
    let (seg, next) = {
        let mut log = lock(&t.log);
        log.seal_active()?;
        (log.oldest_sealed(), log.next_position())
    };
    let Some(seg) = seg else { return Ok(None) };
    let mut m = lock(&t.manifest).clone();
    m.next_position = m.next_position.max(next);
    store.write_manifest(&m)?;
    *lock(&t.manifest) = m.clone();
    if seg.messages == 0 {
        return Ok(Some(seg));
    }
    let created_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    store.write_eviction_audit(&EvictionAudit {
        topic: t.name.clone(),
        first_position: seg.first_position,
        through_position: seg.through_position,
        messages: seg.messages,
        segment: seg.file_name(),
        created_at_ms,
    })?;
    let durable_channel = t.channel_list().iter().any(|c| !c.ephemeral);
    if !durable_channel
        && let Some(u) = m.unrouted_from_position
        && u <= seg.through_position
    {
        m.unrouted_from_position = Some(seg.through_position + 1);
        store.write_manifest(&m)?;
        *lock(&t.manifest) = m;
    }
    Ok(Some(seg))
}
