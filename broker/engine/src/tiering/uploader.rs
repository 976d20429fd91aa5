//! The upload loop: scan the logs, upload the segment [`Queue::next`] names, record it.
//! The decisions are `plan`'s; this file does the I/O around them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use rustqueue_storage::{
    LOCAL_RETENTION_LEVEL, RemoteSegment, SealedFiles, StorageError, TieredObject, TieredRecord,
    TieredSegment,
};
use rustqueue_tier::{Bucket, ObjectKey};
use tokio::time::Instant;

use super::Tiering;
use super::checkpoint;
use super::keys::{new_incarnation, segment_keys};
use super::plan::{Next, Queue, Sealed};
use super::retain::{Candidate, Pressure, choose};
use crate::disk::DiskGuard;
use crate::lock::lock;
use crate::metrics::{Counter, Timer};
use crate::registry::Registry;
use crate::topic::Topic;

/// A durable topic the loop has looked at: its record, and its sealed segments at the last scan.
#[derive(Clone)]
pub(super) struct Known {
    pub(super) topic: Arc<Topic>,
    pub(super) record: TieredRecord,
    sealed: Vec<SealedFiles>,
    /// The log's segment count, first and next position, and whether a sealed segment's index
    /// was still being written, when `sealed` was listed: while they stay the same nothing
    /// was appended (so nothing sealed), nothing deleted and no index landed (a segment is
    /// listed only once its index is written), and an idle topic's listing is not repeated
    /// every scan.
    shape: Option<(usize, u64, u64, bool)>,
}

/// Why a segment was not uploaded.
enum Failure {
    /// Its files are gone: GC or protective eviction deleted the segment meanwhile.
    Gone,
    /// The bucket, or the local file, failed; the segment is tried again later.
    Failed(String),
}

/// When disk pressure may take local copies of uploaded segments: the guard to read and
/// re-sample, and whether pressure evicts at all (local retention or protective eviction on).
pub(crate) struct PressureEviction {
    pub(crate) disk: Arc<DiskGuard>,
    pub(crate) enabled: bool,
}

/// Runs until the engine is dropped or shut down.
pub(crate) async fn upload_loop(
    registry: Weak<Registry>,
    tier: Arc<Tiering>,
    node_id: u16,
    pressure: PressureEviction,
) {
    let mut queue = Queue::new(tier.opts.backoff);
    let mut known: HashMap<String, Known> = HashMap::new();
    let mut sent = checkpoint::Sent::default();
    let mut next_checkpoint = Instant::now() + tier.opts.checkpoint_interval;
    // The start counts as up to date: a bucket down from then on ages from it.
    if let Some(r) = registry.upgrade() {
        r.metrics()
            .set(Counter::TieringLastCheckpointUpload, unix_seconds());
    }
    loop {
        let Some(r) = registry.upgrade() else { return };
        if r.is_shutting_down() {
            return;
        }
        scan(&r, &tier, &mut known, &mut queue).await;
        retain(&r, &tier, &mut known, &pressure).await;
        if Instant::now() >= next_checkpoint {
            // Against a copy: the bucket may hold the round up to its request timeout and
            // retries, and the scans meanwhile keep `known` and the backlog gauges current.
            let round = known.clone();
            let upload = checkpoint::upload(&r, &tier, node_id, &round, &mut sent);
            if keep_scanning(&r, &tier, &mut known, &mut queue, upload).await {
                r.metrics()
                    .set(Counter::TieringLastCheckpointUpload, unix_seconds());
            }
            next_checkpoint = Instant::now() + tier.opts.checkpoint_interval;
        }
        collect(&r, &tier, &mut known, &sent).await;
        purge_deleted(&r, &tier, node_id, &sent).await;
        show_backlog(&r, &queue);
        tier.scans.fetch_add(1, Ordering::Relaxed);
        drop(r);
        match queue.next(Instant::now(), tier.opts.upload_after) {
            Next::Upload(topic, base) => {
                let ctx = UploadCtx {
                    registry: &registry,
                    tier: &tier,
                    node_id,
                    pressure: &pressure,
                };
                upload_one(&ctx, &mut known, &mut queue, &topic, base).await;
            }
            Next::Wait(until) => {
                let scan = (Instant::now() + tier.opts.scan_interval).min(next_checkpoint);
                tokio::time::sleep_until(until.map_or(scan, |u| u.min(scan))).await;
            }
        }
    }
}

/// Awaits `work` (bucket requests, which a bucket that does not answer holds up to their
/// timeout and retries), scanning every scan interval meanwhile so the segments sealed in the
/// meantime show in the backlog gauges (and their alert).
async fn keep_scanning<T>(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    known: &mut HashMap<String, Known>,
    queue: &mut Queue,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return done,
            () = tokio::time::sleep(tier.opts.scan_interval) => {
                if r.is_shutting_down() {
                    // The work ends on its own: the bucket's requests are bounded.
                    return work.await;
                }
                scan(r, tier, known, queue).await;
                show_backlog(r, queue);
            }
        }
    }
}

/// The upload backlog gauges, from the queue.
fn show_backlog(r: &Registry, queue: &Queue) {
    let (segments, bytes) = queue.backlog();
    r.metrics().set(Counter::TieringBacklogSegments, segments);
    r.metrics().set(Counter::TieringBacklogBytes, bytes);
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Brings `known` and `queue` up to date with the registry's durable topics and their logs.
async fn scan(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    known: &mut HashMap<String, Known>,
    queue: &mut Queue,
) {
    let topics: HashMap<String, Arc<Topic>> = r
        .topic_list()
        .into_iter()
        .filter(|t| !t.ephemeral && !t.deleted.load(Ordering::SeqCst))
        .map(|t| (t.name.clone(), t))
        .collect();
    // A deleted topic, or one deleted and created again, starts over.
    known.retain(|name, k| topics.get(name).is_some_and(|t| Arc::ptr_eq(t, &k.topic)));
    queue.retain_topics(|name| known.contains_key(name));
    let new: Vec<Arc<Topic>> = topics
        .values()
        .filter(|t| !known.contains_key(&t.name))
        .cloned()
        .collect();
    if !new.is_empty() {
        let store = r.store().clone();
        let (bucket, prefix) = (
            tier.opts.bucket.bucket.clone(),
            tier.opts.bucket.prefix.clone(),
        );
        let (rr, tier) = (r.clone(), tier.clone());
        let loaded = tokio::task::spawn_blocking(move || {
            new.into_iter()
                .filter_map(|t| {
                    let (record, write_now) =
                        load_record(&store, &t.name, &bucket, prefix.as_ref())?;
                    // A new life is durable before any object names it: deleting the topic
                    // then always knows which objects to delete.
                    if write_now {
                        let _gate = lock(&tier.gate);
                        if rr.is_shutting_down() || t.deleted.load(Ordering::SeqCst) {
                            return None;
                        }
                        if let Err(e) = store.write_tiered(&record) {
                            tracing::error!(topic = %t.name, error = %e, "cannot write the tiered record; storage isolated");
                            return None;
                        }
                    }
                    Some((t, record))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (topic, record) in loaded {
            known.insert(
                topic.name.clone(),
                Known {
                    topic,
                    record,
                    sealed: Vec::new(),
                    shape: None,
                },
            );
        }
    }
    let now = Instant::now();
    for (name, k) in known.iter_mut() {
        {
            let log = lock(&k.topic.log);
            let shape = Some((
                log.segment_count(),
                log.first_position(),
                log.next_position(),
                log.index_writes_pending(),
            ));
            if shape == k.shape {
                continue;
            }
            k.sealed = log.sealed_files();
            k.shape = shape;
        }
        let sealed: Vec<Sealed> = k
            .sealed
            .iter()
            .map(|f| Sealed {
                base: f.base,
                bytes: f.log_len,
            })
            .collect();
        queue.observe(name, &sealed, |base| k.record.contains(base), now);
    }
}

/// Local retention: removes the local copies [`super::retain::choose`] picks, oldest first.
/// Under disk pressure (when it may evict) every uploaded local copy is picked, and the guard
/// is sampled again after each removal: the removals stop as soon as the pressure is over.
async fn retain(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    known: &mut HashMap<String, Known>,
    pressure: &PressureEviction,
) {
    let retention = tier.opts.local_retention;
    let pressed = pressure.enabled && pressure.disk.pressured();
    if !retention.evicts() && !pressed {
        return;
    }
    if r.store().minimum_reader_level() < LOCAL_RETENTION_LEVEL {
        // Below the level no local copy goes, not even under pressure (which then throttles
        // publishing): an older release could drop evicted segments. `Engine::open` refuses
        // local retention below it, so only that case is worth a word.
        if retention.evicts() {
            tracing::error!(
                "local retention is off: COMPATIBILITY does not fence out releases that cannot read evicted segments"
            );
        }
        return;
    }
    let pressed = if pressed {
        Pressure::Full
    } else {
        Pressure::None
    };
    let mut candidates = Vec::new();
    for (name, k) in known.iter() {
        let local = lock(&k.topic.log).local_sealed();
        candidates.extend(local.into_iter().map(|s| Candidate {
            topic: name.clone(),
            base: s.base,
            bytes: s.bytes,
            newest_ns: s.newest_timestamp_ns,
            uploaded: k.record.get(s.base).is_some_and(|g| !g.evicted),
        }));
    }
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    // What the bounds alone take goes whatever the pressure; the rest only while it lasts.
    let bounded = choose(&candidates, retention, now_ns, Pressure::None);
    for (topic, base) in choose(&candidates, retention, now_ns, pressed) {
        if !bounded.contains(&(topic.clone(), base)) {
            pressure.disk.check();
            if !pressure.disk.pressured() {
                return;
            }
        }
        let Some(k) = known.get_mut(&topic) else {
            continue;
        };
        let sealed_len = candidates
            .iter()
            .find(|c| c.topic == topic && c.base == base)
            .map(|c| c.bytes);
        let uploaded_len = k
            .record
            .get(base)
            .and_then(|s| s.log_object())
            .map(|o| o.size);
        if sealed_len != uploaded_len {
            // Never happens (an upload records the size it checked): refuse to evict rather
            // than record an object that is not this segment.
            tracing::error!(
                topic,
                base,
                ?sealed_len,
                ?uploaded_len,
                "the uploaded object's size is not the sealed segment's; its local copy is kept"
            );
            continue;
        }
        match evict_one(r, tier, &k.topic, &k.record, base).await {
            Ok(Some((record, evicted))) => {
                k.record = record;
                let Some(bytes) = evicted else { continue };
                r.metrics().add(Counter::TieringEvictedSegments, 1);
                r.metrics().add(Counter::TieringEvictedBytes, bytes);
                tracing::debug!(
                    topic,
                    base,
                    bytes,
                    "local copy of an uploaded segment removed"
                );
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(topic, base, error = %e, "cannot evict the local copy of an uploaded segment; storage isolated");
                return;
            }
        }
    }
}

/// Records the segment `base` as evicted in `record` (durably, under the gate), then removes
/// its local `.rqlog`: a crash in between is finished by the next open. Returns the record
/// written and the bytes removed (`None`: the segment was gone, GC took it meanwhile);
/// `Ok(None)` when nothing was written (the topic deleted, the engine shutting down).
async fn evict_one(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    topic: &Arc<Topic>,
    record: &TieredRecord,
    base: u64,
) -> Result<Option<(TieredRecord, Option<u64>)>, StorageError> {
    let Some(remote) = record
        .get(base)
        .and_then(|s| s.log_object())
        .map(|o| RemoteSegment {
            key: o.key.clone(),
            size: o.size,
        })
    else {
        return Ok(None);
    };
    let (r, tier, topic, mut record) = (r.clone(), tier.clone(), topic.clone(), record.clone());
    tokio::task::spawn_blocking(move || {
        let _gate = lock(&tier.gate);
        if r.is_shutting_down() || topic.deleted.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let bytes = remote.size;
        record.mark_evicted(base);
        r.store().write_tiered(&record)?;
        let evicted = lock(&topic.log).evict_local(base, remote)?;
        Ok(Some((record, evicted.then_some(bytes))))
    })
    .await
    .unwrap_or(Ok(None))
}

/// Deletes from the bucket the objects of segments GC (or protective eviction) deleted
/// locally, once the newest checkpoint this process uploaded no longer lists them (so no
/// restore looks for them), `.rqidx` first (an index object means a whole segment object),
/// then drops them from the record. A failure is logged and counted and tried again at the
/// next scan; local GC never waits for any of it.
async fn collect(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    known: &mut HashMap<String, Known>,
    sent: &checkpoint::Sent,
) {
    for (name, k) in known.iter_mut() {
        let first_base = lock(&k.topic.log).first_base();
        let gone: Vec<TieredSegment> = k
            .record
            .segments
            .iter()
            .take_while(|s| s.base < first_base)
            .filter(|s| !sent.may_list(name, s.base))
            .cloned()
            .collect();
        if gone.is_empty() {
            continue;
        }
        let mut deleted = Vec::new();
        let mut failed = false;
        for seg in &gone {
            match delete_objects(&tier.bucket, seg).await {
                Ok(()) => deleted.push(seg.base),
                Err(error) => {
                    r.metrics().add(Counter::TieringRemoteDeleteFailures, 1);
                    tracing::warn!(topic = %name, base = seg.base, %error, "cannot delete the objects of a segment GC deleted; tried again at the next scan");
                    failed = true;
                    break;
                }
            }
        }
        let (rr, t, topic, mut record) =
            (r.clone(), tier.clone(), k.topic.clone(), k.record.clone());
        if deleted.is_empty() {
            return;
        }
        let written = tokio::task::spawn_blocking(move || {
            let _gate = lock(&t.gate);
            if rr.is_shutting_down() || topic.deleted.load(Ordering::SeqCst) {
                return Ok(None);
            }
            for base in &deleted {
                record.remove(*base);
            }
            rr.store().write_tiered(&record)?;
            Ok::<_, StorageError>(Some((record, deleted.len() as u64)))
        })
        .await
        .unwrap_or(Ok(None));
        match written {
            Ok(Some((record, n))) => {
                k.record = record;
                r.metrics().add(Counter::TieringRemoteDeletes, n);
                tracing::debug!(topic = %name, segments = n, "objects of collected segments deleted from the bucket");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(topic = %name, error = %e, "cannot write the tiered record; storage isolated");
                return;
            }
        }
        if failed {
            // The bucket's own retries are spent: the other topics would wait as long each.
            return;
        }
    }
}

/// Deletes from the bucket the objects of deleted topics' lives (their intents written by
/// `Store::delete_topic`), once the newest catalog this process uploaded no longer names them,
/// then forgets each intent. The checkpoint goes first, then the indexes, then the rest: what
/// is left after a failure still reads as cut short. A failure is logged and counted and tried
/// again at the next scan, as for collected segments; an intent for another bucket or prefix
/// than `[tiering]`'s waits for that configuration.
async fn purge_deleted(
    r: &Arc<Registry>,
    tier: &Arc<Tiering>,
    node_id: u16,
    sent: &checkpoint::Sent,
) {
    let store = r.store().clone();
    let Ok(Ok(intents)) = tokio::task::spawn_blocking(move || store.deleted_incarnations()).await
    else {
        return;
    };
    for (path, intent) in intents {
        let d = match intent {
            Ok(d) => d,
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "a deleted topic's intent is damaged; its objects are left in the bucket");
                continue;
            }
        };
        if d.bucket != tier.opts.bucket.bucket
            || d.prefix != tier.opts.bucket.prefix
            || !sent.catalog_lacks(&d.topic, &d.incarnation)
        {
            continue;
        }
        let prefix = super::keys::incarnation_prefix(node_id, &d.topic, &d.incarnation);
        match delete_prefix(&tier.bucket, &prefix).await {
            Ok(n) => {
                let (store, d2) = (r.store().clone(), d.clone());
                let removed =
                    tokio::task::spawn_blocking(move || store.remove_deleted_incarnation(&d2))
                        .await
                        .unwrap_or(Ok(()));
                if let Err(e) = removed {
                    tracing::error!(topic = %d.topic, error = %e, "cannot remove a deleted topic's intent; storage isolated");
                    return;
                }
                r.metrics().add(Counter::TieringDeletedTopics, 1);
                tracing::info!(topic = %d.topic, incarnation = %d.incarnation, objects = n, "objects of a deleted topic deleted from the bucket");
            }
            Err(error) => {
                r.metrics().add(Counter::TieringRemoteDeleteFailures, 1);
                tracing::warn!(topic = %d.topic, incarnation = %d.incarnation, %error, "cannot delete a deleted topic's objects; tried again at the next scan");
                return;
            }
        }
    }
}

/// Deletes every object under `prefix`: the checkpoint, then the indexes, then the rest.
/// Returns how many there were.
async fn delete_prefix(bucket: &Bucket, prefix: &str) -> Result<usize, String> {
    let mut listed = bucket.list(Some(prefix)).await.map_err(|e| e.to_string())?;
    let rank = |k: &str| {
        if k.ends_with("/checkpoint.json") {
            0
        } else if k.ends_with(".rqidx") {
            1
        } else {
            2
        }
    };
    listed.sort_by_key(|l| rank(l.key.as_str()));
    for l in &listed {
        bucket.delete(&l.key).await.map_err(|e| e.to_string())?;
    }
    Ok(listed.len())
}

/// Deletes a segment's objects, the `.rqidx` first.
async fn delete_objects(
    bucket: &rustqueue_tier::Bucket,
    seg: &TieredSegment,
) -> Result<(), String> {
    for object in seg.objects.iter().rev() {
        let key = ObjectKey::new(object.key.clone()).map_err(|e| e.to_string())?;
        bucket.delete(&key).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A topic's record, or a new one; `true` when the topic had none, so the new one is to be
/// written at once (a record being replaced, damaged or for another place, stays on disk
/// until the first upload replaces it, as a configuration put back can still use it);
/// `None` when it cannot be read now (tried again next scan).
fn load_record(
    store: &rustqueue_storage::Store,
    topic: &str,
    bucket: &str,
    prefix: Option<&String>,
) -> Option<(TieredRecord, bool)> {
    let fresh = || {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let incarnation = new_incarnation(now_ms, rand::random::<u32>());
        TieredRecord::new(topic, bucket, prefix.cloned(), incarnation)
    };
    match store.read_tiered(topic) {
        Ok(None) => Some((fresh(), true)),
        Ok(Some(r)) if r.incarnation.is_none() => {
            tracing::info!(
                topic,
                "the tiered record is of format 1 (object keys without an incarnation); every \
                 sealed segment is uploaded again under a new incarnation"
            );
            Some((fresh(), false))
        }
        Ok(Some(r)) if r.bucket == bucket && r.prefix.as_ref() == prefix => Some((r, false)),
        Ok(Some(r)) => {
            tracing::warn!(
                topic,
                recorded_bucket = %r.bucket,
                recorded_prefix = ?r.prefix,
                "the tiered record names another bucket or prefix than [tiering]; \
                 every sealed segment is uploaded again to the configured one"
            );
            Some((fresh(), false))
        }
        Err(e @ StorageError::Corrupt { .. }) => {
            tracing::warn!(topic, error = %e, "the tiered record is damaged; every sealed segment is uploaded again and the record rewritten");
            Some((fresh(), false))
        }
        Err(e) => {
            tracing::error!(topic, error = %e, "cannot read the tiered record; trying again at the next scan");
            None
        }
    }
}

/// What an upload needs besides the loop's state.
struct UploadCtx<'a> {
    registry: &'a Weak<Registry>,
    tier: &'a Arc<Tiering>,
    node_id: u16,
    pressure: &'a PressureEviction,
}

/// Uploads the segment `base` of `topic` and records it. While its requests are in flight
/// (for as long as the bucket's retries last in an outage), local retention and disk pressure
/// are looked at every scan interval, so a filling volume never waits for the bucket.
async fn upload_one(
    ctx: &UploadCtx<'_>,
    known: &mut HashMap<String, Known>,
    queue: &mut Queue,
    topic: &str,
    base: u64,
) {
    let (registry, tier) = (ctx.registry, ctx.tier);
    let Some(k) = known.get(topic) else {
        queue.gone(topic, base);
        return;
    };
    let Some(files) = k.sealed.iter().find(|f| f.base == base).cloned() else {
        queue.gone(topic, base);
        return;
    };
    let started = std::time::Instant::now();
    let fs = match registry.upgrade() {
        Some(r) => r.store().fs().clone(),
        None => return,
    };
    let incarnation = k.record.incarnation.clone().unwrap_or_default();
    let put = put_segment(&tier.bucket, ctx.node_id, topic, &incarnation, &files);
    tokio::pin!(put);
    let put = loop {
        tokio::select! {
            done = &mut put => break done,
            () = tokio::time::sleep(tier.opts.scan_interval) => {
                let Some(r) = registry.upgrade() else { return };
                if r.is_shutting_down() {
                    return;
                }
                // A bucket that does not answer holds this upload up to its request timeout
                // and retries: the segments sealed meanwhile still show in the backlog (and
                // its alert), and pressure still takes uploaded copies.
                scan(&r, tier, known, queue).await;
                show_backlog(&r, queue);
                retain(&r, tier, known, ctx.pressure).await;
            }
        }
    };
    let Some(k) = known.get_mut(topic) else {
        queue.gone(topic, base);
        return;
    };
    let outcome = match put {
        Err(_) if !(fs.exists(&files.log_path) && fs.exists(&files.index_path)) => {
            Err(Failure::Gone)
        }
        Err(e) => Err(Failure::Failed(e)),
        Ok(segment) => {
            let bytes: u64 = segment.objects.iter().map(|o| o.size).sum();
            match record(registry, tier, &k.topic, &k.record, segment).await {
                Ok(Some(record)) => {
                    k.record = record;
                    Ok(bytes)
                }
                // Deleted, or shutting down: nothing more to do for it.
                Ok(None) => Err(Failure::Gone),
                Err(e) => {
                    tracing::error!(topic, base, error = %e, "cannot write the tiered record; storage isolated");
                    Err(Failure::Failed(e.to_string()))
                }
            }
        }
    };
    let Some(r) = registry.upgrade() else { return };
    let m = r.metrics();
    match outcome {
        Ok(bytes) => {
            queue.succeeded(topic, base);
            m.add(Counter::TieringUploads, 1);
            m.add(Counter::TieringUploadedBytes, bytes);
            m.since(Timer::TieringUpload, started);
            tracing::debug!(topic, base, bytes, "sealed segment uploaded and recorded");
        }
        Err(Failure::Gone) => queue.gone(topic, base),
        Err(Failure::Failed(error)) => {
            queue.failed(topic, base, Instant::now(), rand::random::<f64>());
            m.add(Counter::TieringUploadFailures, 1);
            tracing::warn!(topic, base, %error, "upload of a sealed segment failed; it stays queued and is tried again after a back-off");
        }
    }
}

/// Puts the segment's `.rqlog`, then its `.rqidx`: an index object is there only once its
/// segment object is whole.
async fn put_segment(
    bucket: &Bucket,
    node_id: u16,
    topic: &str,
    incarnation: &str,
    files: &SealedFiles,
) -> Result<TieredSegment, String> {
    let keys = segment_keys(node_id, topic, incarnation, files.base);
    let mut objects = Vec::with_capacity(2);
    for (key, path) in keys.into_iter().zip([&files.log_path, &files.index_path]) {
        let key = ObjectKey::new(key).map_err(|e| e.to_string())?;
        let uploaded = bucket
            .put_file(&key, path)
            .await
            .map_err(|e| e.to_string())?;
        objects.push(TieredObject {
            key: key.to_string(),
            size: uploaded.checksum.size,
            crc32c: uploaded.checksum.crc32c,
        });
    }
    if objects[0].size != files.log_len {
        return Err(format!(
            "{} is {} bytes but was sealed at {}: a sealed segment changed; not recorded",
            files.log_path.display(),
            objects[0].size,
            files.log_len
        ));
    }
    Ok(TieredSegment {
        base: files.base,
        objects,
        evicted: false,
    })
}

/// Writes `record` with `segment` added, under the gate; `Ok(None)` when the topic was
/// deleted or the engine is shutting down (nothing is written).
async fn record(
    registry: &Weak<Registry>,
    tier: &Arc<Tiering>,
    topic: &Arc<Topic>,
    record: &TieredRecord,
    segment: TieredSegment,
) -> Result<Option<TieredRecord>, StorageError> {
    let Some(r) = registry.upgrade() else {
        return Ok(None);
    };
    let (tier, topic, mut record) = (tier.clone(), topic.clone(), record.clone());
    tokio::task::spawn_blocking(move || {
        let _gate = lock(&tier.gate);
        if r.is_shutting_down() || topic.deleted.load(Ordering::SeqCst) {
            return Ok(None);
        }
        record.insert(segment);
        r.store().write_tiered(&record)?;
        Ok(Some(record))
    })
    .await
    .unwrap_or(Ok(None))
}
