//! The [`Engine`] handle: open/recover, publish, management, stats, health, GC and shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::{Fs, RealFs, Store, StoreOptions};
use tokio::sync::{Semaphore, oneshot};

use crate::commit::{WalReq, control, persist_wait};
use crate::config::{EngineConfig, feature_level_message_cap};
use crate::consumer::Consumer;
use crate::error::{BadBatch, ConfigError, EngineError, OpenError, PublishError, StorageFault};
use crate::metrics::{Counter, EngineMetrics, Timer};
use crate::topic::{PubReq, Topic, background_sync, lock};
use crate::types::{
    ChannelStats, ConsumerOptions, EngineHealth, EngineStats, TopicStats, now_ms, valid_name,
};

/// Publish and delivery budget permits are 4 KiB units.
pub(crate) const PERMIT_BYTES: u64 = 4_096;

pub(crate) struct Inner {
    pub cfg: EngineConfig,
    pub store: Arc<Store>,
    pub topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    pub shutting_down: AtomicBool,
    pub frozen: AtomicBool,
    pub revision: AtomicU64,
    pub next_consumer: AtomicU64,
    pub publish_budget: Arc<Semaphore>,
    pub delivery_budget: Arc<Semaphore>,
    pub disk_pressure: AtomicBool,
    pub disk_reason: std::sync::Mutex<Option<String>>,
    pub start_time: u64,
    pub metrics: Arc<EngineMetrics>,
}

impl Inner {
    pub(crate) fn bump_local_revision(&self) {
        self.revision.fetch_add(1, Ordering::SeqCst);
    }

    /// Publishes through the topic's group-commit worker.
    pub(crate) async fn publish_to(
        &self,
        t: &Arc<Topic>,
        bodies: Vec<Bytes>,
        available_at_ms: i64,
        force_sync: bool,
    ) -> Result<(), PublishError> {
        let (tx, rx) = oneshot::channel();
        t.pub_tx
            .send(PubReq {
                bodies,
                available_at_ms,
                force_sync,
                queued: Instant::now(),
                reply: tx,
            })
            .await
            .map_err(|_| PublishError::ShuttingDown)?;
        rx.await.map_err(|_| PublishError::ShuttingDown)?
    }
}

/// The broker engine; clones share one instance.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

impl Engine {
    /// Opens (and recovers) the data directory, takes the directory lock and starts the
    /// background workers on the current tokio runtime.
    pub async fn open(cfg: EngineConfig) -> Result<Engine, OpenError> {
        Self::open_with_fs(cfg, Arc::new(RealFs)).await
    }

    /// [`Engine::open`] over a chosen file system (tests use a simulated one).
    pub async fn open_with_fs(cfg: EngineConfig, fs: Arc<dyn Fs>) -> Result<Engine, OpenError> {
        if cfg.max_message_bytes > feature_level_message_cap(cfg.feature_level.max(1)) {
            return Err(ConfigError::MessageTooBigForLevel {
                max_message_bytes: cfg.max_message_bytes,
                feature_level: cfg.feature_level,
            }
            .into());
        }
        if cfg.max_segment_bytes < 4_096 && cfg.max_segment_bytes < cfg.max_message_bytes {
            return Err(ConfigError::SegmentTooSmall.into());
        }
        // One bound for the whole process: every topic log pages through the shared cache.
        rustqueue_storage::log::PageCache::shared()
            .set_capacity(usize::try_from(cfg.message_index_cache_bytes).unwrap_or(usize::MAX));
        let opts = StoreOptions {
            node_id: cfg.node_id,
            feature_level: cfg.feature_level,
            max_segment_bytes: cfg.max_segment_bytes,
        };
        let path = cfg.data_path.clone();
        let (store, recovered) = tokio::task::spawn_blocking(move || Store::open(fs, &path, opts))
            .await
            .map_err(|e| OpenError::Recovery(StorageFault::task("recovery", &e)))??;
        let revision = store.revision();
        let permits = (cfg.node_publish_inflight_bytes / PERMIT_BYTES)
            .clamp(1, u64::from(u32::MAX >> 3)) as usize;
        let delivery_permits = (cfg.node_delivery_inflight_bytes / PERMIT_BYTES)
            .clamp(2, u64::from(u32::MAX >> 3)) as usize;
        let inner = Arc::new(Inner {
            store: Arc::new(store),
            topics: RwLock::new(BTreeMap::new()),
            shutting_down: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            revision: AtomicU64::new(revision),
            next_consumer: AtomicU64::new(1),
            publish_budget: Arc::new(Semaphore::new(permits)),
            delivery_budget: Arc::new(Semaphore::new(delivery_permits)),
            disk_pressure: AtomicBool::new(false),
            disk_reason: std::sync::Mutex::new(None),
            start_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            metrics: Arc::new(EngineMetrics::default()),
            cfg,
        });
        inner.install_recovered(recovered);
        crate::disk::check(&inner);
        tokio::spawn(crate::disk::disk_loop(Arc::downgrade(&inner)));
        tokio::spawn(crate::gc::maintenance_loop(Arc::downgrade(&inner)));
        tokio::spawn(crate::gc::scrub_loop(Arc::downgrade(&inner)));
        Ok(Engine { inner })
    }

    /// PUB (one body), MPUB (several, one atomic record) or DPUB (`defer`). Resolves when the
    /// batch is durable per the ack mode. Creates the topic.
    pub async fn publish(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<(), PublishError> {
        let started = Instant::now();
        let m = &self.inner.metrics;
        let count = bodies.len() as u64;
        let bytes: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        let r = self.publish_inner(topic, bodies, defer).await;
        match &r {
            Ok(()) => {
                m.add(Counter::PublishMessages, count);
                m.add(Counter::PublishBytes, bytes);
                m.since(Timer::PublishAck, started);
            }
            Err(PublishError::Throttled) => {
                m.add(Counter::ThrottledRequests, 1);
                m.add(Counter::ThrottledBytes, bytes);
            }
            Err(_) => {}
        }
        r
    }

    async fn publish_inner(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<(), PublishError> {
        let inner = &self.inner;
        if inner.shutting_down.load(Ordering::SeqCst) {
            return Err(PublishError::ShuttingDown);
        }
        if let Some(f) = inner.store.fault().reason() {
            return Err(StorageFault::Isolated(f).into());
        }
        if !valid_name(topic) {
            return Err(PublishError::BadTopic(topic.to_string()));
        }
        if inner.disk_pressure.load(Ordering::SeqCst) {
            return Err(PublishError::Throttled);
        }
        if bodies.is_empty() || bodies.len() > rustqueue_storage::record::MAX_BATCH {
            return Err(PublishError::BadBatch(BadBatch::Count(bodies.len())));
        }
        let mut total = 0u64;
        for b in &bodies {
            if b.is_empty() {
                return Err(PublishError::EmptyBody);
            }
            if b.len() as u64 > inner.cfg.max_message_bytes {
                return Err(PublishError::TooBig {
                    size: b.len() as u64,
                    max: inner.cfg.max_message_bytes,
                });
            }
            total += b.len() as u64;
        }
        let defer = defer.unwrap_or_default();
        if defer > inner.cfg.max_defer {
            return Err(PublishError::InvalidDefer);
        }
        let charge = total + 52 + 128 * bodies.len() as u64;
        let units = charge.div_ceil(PERMIT_BYTES).min(u64::from(u32::MAX)) as u32;
        let _permit = inner
            .publish_budget
            .clone()
            .try_acquire_many_owned(units)
            .map_err(|_| PublishError::Throttled)?;
        let t = inner.get_or_create_topic(topic)?;
        inner
            .publish_to(&t, bodies, now_ms() + defer.as_millis() as i64, false)
            .await
    }

    /// Creates a topic if absent.
    pub fn create_topic(&self, topic: &str) -> Result<(), EngineError> {
        self.inner.get_or_create_topic(topic).map(|_| ())
    }

    fn existing(&self, topic: &str) -> Result<Arc<Topic>, EngineError> {
        if !valid_name(topic) {
            return Err(EngineError::BadName(topic.to_string()));
        }
        self.inner.topic(topic).ok_or(EngineError::TopicNotFound)
    }

    /// Deletes a topic, its channels and its files.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        self.inner.remove_topic_entry(&t);
        if !t.ephemeral {
            for c in t.channel_list() {
                let _ = control(&c, WalReq::Delete).await;
            }
            let manifest = lock(&t.manifest).clone();
            let store = self.inner.store.clone();
            tokio::task::spawn_blocking(move || {
                store
                    .delete_topic(&manifest)
                    .and_then(|_| store.bump_revision())
            })
            .await
            .map_err(|e| StorageFault::task("topic deletion", &e))??;
        }
        Ok(())
    }

    /// Empties every channel of a topic (and moves the unrouted boundary to the tail).
    pub async fn empty_topic(&self, topic: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        for c in t.channel_list() {
            self.empty_channel(topic, &c.name).await?;
        }
        if !t.ephemeral {
            let next = lock(&t.log).next_position();
            let mut manifest = lock(&t.manifest);
            if manifest.unrouted_from_position.is_some() {
                let mut m = manifest.clone();
                m.unrouted_from_position = Some(next);
                m.next_position = next;
                self.inner.store.write_manifest(&m)?;
                *manifest = m;
            }
        }
        Ok(())
    }

    /// Pauses or resumes deliveries from every channel of a topic (publishing continues).
    pub async fn pause_topic(&self, topic: &str, paused: bool) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        if !t.ephemeral {
            let mut manifest = lock(&t.manifest);
            let mut m = manifest.clone();
            m.paused = paused;
            self.inner.store.write_manifest(&m)?;
            *manifest = m;
        }
        t.paused.store(paused, Ordering::SeqCst);
        for c in t.channel_list() {
            c.notify.notify_waiters();
        }
        Ok(())
    }

    /// Creates a channel if absent (and its topic).
    pub fn create_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let t = self.inner.get_or_create_topic(topic)?;
        self.inner.get_or_create_channel(&t, channel).map(|_| ())
    }

    /// Deletes a channel; its consumers' `next()` returns `None`.
    pub async fn delete_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        self.inner.remove_channel(&t, channel).await
    }

    /// Finishes every message of the channel published so far.
    pub async fn empty_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        let c = t.channel(channel).ok_or(EngineError::ChannelNotFound)?;
        let through = lock(&t.log).next_position() - 1;
        let cmd = lock(&c.st).empty(through);
        c.notify.notify_waiters();
        Ok(persist_wait(&c, vec![cmd]).await?)
    }

    /// Pauses or resumes one channel.
    pub async fn pause_channel(
        &self,
        topic: &str,
        channel: &str,
        paused: bool,
    ) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        let c = t.channel(channel).ok_or(EngineError::ChannelNotFound)?;
        let cmd = rustqueue_storage::ChannelCommand::Pause(paused);
        lock(&c.st).durable.apply(&cmd);
        c.notify.notify_waiters();
        Ok(persist_wait(&c, vec![cmd]).await?)
    }

    /// SUB: registers a consumer (creating topic and channel if needed).
    pub fn subscribe(
        &self,
        topic: &str,
        channel: &str,
        opts: ConsumerOptions,
    ) -> Result<Consumer, EngineError> {
        let t = self.inner.get_or_create_topic(topic)?;
        let c = self.inner.get_or_create_channel(&t, channel)?;
        Ok(Consumer::register(self.inner.clone(), t, c, opts))
    }

    /// Topic names in order.
    pub fn topics(&self) -> Vec<String> {
        self.inner
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Channel names of a topic in order.
    pub fn channels(&self, topic: &str) -> Result<Vec<String>, EngineError> {
        let t = self.existing(topic)?;
        Ok(t.channel_list().iter().map(|c| c.name.clone()).collect())
    }

    /// nsqd-shaped statistics, optionally filtered to one topic / channel.
    pub fn stats(&self, topic: Option<&str>, channel: Option<&str>) -> EngineStats {
        let now = Instant::now();
        let topics: Vec<Arc<Topic>> = self
            .inner
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|t| topic.is_none_or(|n| n == t.name))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for t in topics {
            let visible = t.visible_through();
            let mut channels = Vec::new();
            for c in t
                .channel_list()
                .into_iter()
                .filter(|c| channel.is_none_or(|n| n == c.name))
            {
                let mut st = lock(&c.st);
                if let Some(cmd) = st.expire(now) {
                    crate::commit::persist_later(&c, vec![cmd]);
                }
                let (in_flight, deferred, depth) = st.counts(visible);
                channels.push(ChannelStats {
                    channel_name: c.name.clone(),
                    name: c.name.clone(),
                    depth,
                    memory_depth: 0,
                    backend_depth: depth,
                    message_count: visible.saturating_sub(st.durable.barrier),
                    in_flight_count: in_flight,
                    deferred_count: deferred,
                    requeue_count: st.durable.requeue_count,
                    timeout_count: st.durable.timeout_count,
                    client_count: st.consumers.len() as u64,
                    clients: st.client_stats(),
                    paused: st.durable.paused,
                });
            }
            let log = lock(&t.log);
            let (unsynced_messages, unsynced_bytes) = log.unsynced();
            out.push(TopicStats {
                topic_name: t.name.clone(),
                name: t.name.clone(),
                depth: 0,
                memory_depth: 0,
                backend_depth: 0,
                message_count: log.next_position() - 1,
                paused: t.paused.load(Ordering::SeqCst),
                channels,
                unsynced_messages,
                unsynced_bytes,
                last_durable_position: log.durable_position(),
            });
        }
        let health = self
            .inner
            .store
            .fault()
            .reason()
            .filter(|_| !self.inner.shutting_down.load(Ordering::SeqCst))
            .unwrap_or_else(|| "OK".into());
        EngineStats {
            health,
            start_time: self.inner.start_time,
            topics: out,
        }
    }

    /// Freezes (or resumes) all deliveries (control contract: drain).
    pub fn set_deliveries_frozen(&self, frozen: bool) {
        self.inner.frozen.store(frozen, Ordering::SeqCst);
        for t in self.inner.topic_list() {
            for c in t.channel_list() {
                c.notify.notify_waiters();
            }
        }
    }

    /// Verifies every sealed segment now (`POST /v1/storage/scrub`); a mismatch isolates
    /// storage. Returns the number of records checked.
    pub async fn scrub(&self) -> Result<u64, EngineError> {
        let inner = self.inner.clone();
        let r = tokio::task::spawn_blocking(move || crate::gc::scrub_all(&inner))
            .await
            .map_err(|e| StorageFault::task("scrub", &e))?;
        r.map_err(|e| {
            self.inner.store.fault().trip(e.to_string());
            EngineError::from(e)
        })
    }

    /// Health facts.
    pub fn health(&self) -> EngineHealth {
        let shutting_down = self.inner.shutting_down.load(Ordering::SeqCst);
        EngineHealth {
            storage_fault: if shutting_down {
                None
            } else {
                self.inner.store.fault().reason()
            },
            deliveries_frozen: self.inner.frozen.load(Ordering::SeqCst),
            disk_pressure: lock(&self.inner.disk_reason).clone(),
            shutting_down,
            topics: self
                .inner
                .topics
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
        }
    }

    /// Changes whenever a topic or channel is created or deleted.
    pub fn registry_revision(&self) -> u64 {
        self.inner.revision.load(Ordering::SeqCst)
    }

    /// Bytes held right now by the node budgets, in 4 KiB units: `(publish, delivery)`.
    /// Publish bytes are accepted bodies not yet committed; delivery bytes are bodies being
    /// read for delivery. Both are 0 on an idle broker (control contract: drain `quiesced`).
    pub fn inflight_bytes(&self) -> (u64, u64) {
        let cfg = &self.inner.cfg;
        let total_pub =
            (cfg.node_publish_inflight_bytes / PERMIT_BYTES).clamp(1, u64::from(u32::MAX >> 3));
        let total_del =
            (cfg.node_delivery_inflight_bytes / PERMIT_BYTES).clamp(2, u64::from(u32::MAX >> 3));
        let held = |s: &Semaphore, total: u64| {
            total.saturating_sub(s.available_permits() as u64) * PERMIT_BYTES
        };
        (
            held(&self.inner.publish_budget, total_pub),
            held(&self.inner.delivery_budget, total_del),
        )
    }

    /// Graceful shutdown: refuse new work, sync every log, checkpoint every channel, release
    /// the directory lock. Consumers' `next()` returns `None` afterwards.
    pub async fn shutdown(&self) {
        if self.inner.shutting_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let topics = self.inner.topic_list();
        for t in &topics {
            for c in t.channel_list() {
                c.notify.notify_waiters();
            }
            if !t.ephemeral {
                background_sync(t).await;
                for c in t.channel_list() {
                    let _ = control(&c, WalReq::Checkpoint).await;
                }
                let mut m = lock(&t.manifest).clone();
                m.next_position = lock(&t.log).next_position();
                let _ = self.inner.store.write_manifest(&m);
            }
        }
        self.inner.store.release_lock();
    }
}
