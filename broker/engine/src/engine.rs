//! The [`Engine`] handle: open/recover, publish, management, stats, health, GC and shutdown.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::Compatibility;
use rustqueue_storage::PageCache;
use rustqueue_storage::{Fs, LOCAL_RETENTION_LEVEL, RealFs, StorageError, Store, StoreOptions};

use crate::budget::Budgets;
use crate::channel::WalReq;
use crate::config::{EngineConfig, feature_level_message_cap};
use crate::consumer::Consumer;
use crate::disk::DiskGuard;
use crate::error::{BadBatch, ConfigError, EngineError, OpenError, PublishError, StorageFault};
use crate::lock::lock;
use crate::metrics::{Counter, EngineMetrics, Timer};
use crate::registry::Registry;
use crate::shared::Shared;
use crate::topic::{Topic, background_sync};
use crate::trace::CommitTrace;
use crate::types::{
    ChannelStats, ConsumerOptions, EngineHealth, EngineStats, TopicStats, now_ms, valid_name,
};

/// The broker engine; clones share one instance.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Shared>,
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
        let retains = cfg
            .tiering
            .as_ref()
            .is_some_and(|t| t.local_retention.evicts());
        if retains && cfg.feature_level < LOCAL_RETENTION_LEVEL {
            return Err(ConfigError::LocalRetentionNeedsLevel {
                feature_level: cfg.feature_level,
                needed: LOCAL_RETENTION_LEVEL,
            }
            .into());
        }
        if cfg.max_segment_bytes < 4_096 && cfg.max_segment_bytes < cfg.max_message_bytes {
            return Err(ConfigError::SegmentTooSmall.into());
        }
        let tiering = cfg
            .tiering
            .clone()
            .map(crate::tiering::Tiering::new)
            .transpose()?
            .map(Arc::new);
        // One bound for the engine: every topic log, durable or ephemeral, pages through it.
        let page_cache = Arc::new(PageCache::new(
            usize::try_from(cfg.message_index_cache_bytes).unwrap_or(usize::MAX),
        ));
        let opts = StoreOptions {
            node_id: cfg.node_id,
            feature_level: cfg.feature_level,
            max_segment_bytes: cfg.max_segment_bytes,
            page_cache,
        };
        let path = cfg.data_path.clone();
        let (store, recovered) = tokio::task::spawn_blocking(move || Store::open(fs, &path, opts))
            .await
            .map_err(|e| OpenError::Recovery(StorageFault::task("recovery", &e)))??;
        let store = Arc::new(store);
        let metrics = Arc::new(EngineMetrics::default());
        let registry = Arc::new(Registry::new(
            cfg.clone(),
            store.clone(),
            metrics.clone(),
            recovered,
        ));
        let disk = Arc::new(DiskGuard::new(&cfg));
        // With tiering, protective eviction never deletes a message: the uploader removes
        // local copies of uploaded segments instead, and publishing stays throttled while
        // none is left (docs/tiering.md, "A full volume").
        tokio::spawn(crate::disk::disk_loop(
            disk.clone(),
            Arc::downgrade(&registry),
            cfg.disk_check_interval,
            (cfg.protective_eviction_enabled && tiering.is_none())
                .then_some(cfg.disk_pressure_grace),
        ));
        tokio::spawn(crate::gc::maintenance_loop(
            Arc::downgrade(&registry),
            cfg.gc_interval,
            cfg.bootstrap_retention,
        ));
        tokio::spawn(crate::scrub::scrub_loop(
            Arc::downgrade(&registry),
            cfg.scrub_interval,
            cfg.scrub_bytes_per_second,
        ));
        let uploader = tiering.as_ref().map(|tier| {
            let pressure = crate::tiering::PressureEviction {
                disk: disk.clone(),
                enabled: tier.opts.local_retention.evicts() || cfg.protective_eviction_enabled,
            };
            tokio::spawn(crate::tiering::upload_loop(
                Arc::downgrade(&registry),
                tier.clone(),
                cfg.node_id,
                pressure,
            ))
            .abort_handle()
        });
        let inner = Arc::new(Shared {
            store,
            registry,
            budgets: Budgets::new(&cfg),
            disk,
            frozen: AtomicBool::new(false),
            next_consumer: AtomicU64::new(1),
            start_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            metrics,
            tiering,
            uploader,
            cfg,
        });
        Ok(Engine { inner })
    }

    /// The byte bound of the sealed-segment index page cache
    /// (`storage.message_index_cache_bytes`), shared by every topic of this engine.
    pub fn index_cache_capacity(&self) -> u64 {
        self.inner.store.page_cache().capacity() as u64
    }

    /// The `COMPATIBILITY` file of a data directory, read before opening it (capabilities
    /// and the rollback fence); `Ok(None)` for a fresh directory without one.
    pub fn read_compatibility(data_path: &Path) -> Result<Option<Compatibility>, StorageError> {
        rustqueue_storage::read_compatibility(&RealFs, data_path)
    }

    /// PUB (one body), MPUB (several, one atomic record) or DPUB (`defer`). Resolves when the
    /// batch is durable per the ack mode. Creates the topic.
    pub async fn publish(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<(), PublishError> {
        self.publish_from(topic, bodies, defer, None).await
    }

    /// [`Engine::publish`] for a publisher that says when its previous publish was
    /// acknowledged (`previous_ack`): one that sends the next at once shares group commits
    /// with the others that do (see `docs/architecture.md`, "Sync").
    pub async fn publish_from(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
        previous_ack: Option<Instant>,
    ) -> Result<(), PublishError> {
        self.publish_recorded(topic, bodies, defer, previous_ack, None)
            .await
    }

    /// [`Engine::publish_from`] that also records, for a traced publish, when its group's
    /// append and fdatasync ran and how many publishes each carried (`trace`; see
    /// [`CommitTrace`]).
    pub async fn publish_recorded(
        &self,
        topic: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
        previous_ack: Option<Instant>,
        trace: Option<Arc<CommitTrace>>,
    ) -> Result<(), PublishError> {
        let returning = previous_ack.is_some_and(|at| at.elapsed() < crate::topic::RETURN_WINDOW);
        let started = Instant::now();
        let m = &self.inner.metrics;
        let count = bodies.len() as u64;
        let bytes: u64 = bodies.iter().map(|b| b.len() as u64).sum();
        let r = self
            .publish_inner(topic, bodies, defer, returning, trace)
            .await;
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
        returning: bool,
        trace: Option<Arc<CommitTrace>>,
    ) -> Result<(), PublishError> {
        let inner = &self.inner;
        if inner.shutting_down() {
            return Err(PublishError::ShuttingDown);
        }
        if let Some(f) = inner.store.fault().reason() {
            return Err(StorageFault::Isolated(f).into());
        }
        if !valid_name(topic) {
            return Err(PublishError::BadTopic(topic.to_string()));
        }
        if inner.disk.pressured() {
            return Err(PublishError::Throttled);
        }
        if bodies.is_empty() || bodies.len() > rustqueue_storage::MAX_BATCH {
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
        // Counted against the last sample of the volume: a fast producer is throttled before
        // the next sample would see the volume full.
        if inner.disk.admit(total, bodies.len() as u64) {
            return Err(PublishError::Throttled);
        }
        let _permit = inner
            .budgets
            .try_publish(total, bodies.len())
            .ok_or(PublishError::Throttled)?;
        let t = inner.registry.get_or_create_topic(topic)?;
        let available_at_ms = now_ms() + defer.as_millis() as i64;
        let bodies =
            match t.try_publish_inline(&inner.store, bodies, available_at_ms, trace.as_deref()) {
                Ok(r) => {
                    // An inline append awaits nothing, so a caller publishing in a loop would
                    // never give its thread to another task (the sync stage among them): it
                    // counts against the task's cooperative budget, as a socket read does.
                    tokio::task::consume_budget().await;
                    return r;
                }
                Err(bodies) => bodies,
            };
        t.publish(bodies, available_at_ms, false, returning, trace)
            .await
    }

    /// Creates a topic if absent.
    pub fn create_topic(&self, topic: &str) -> Result<(), EngineError> {
        self.inner.registry.get_or_create_topic(topic).map(|_| ())
    }

    fn existing(&self, topic: &str) -> Result<Arc<Topic>, EngineError> {
        if !valid_name(topic) {
            return Err(EngineError::BadName(topic.to_string()));
        }
        self.inner
            .registry
            .topic(topic)
            .ok_or(EngineError::TopicNotFound)
    }

    /// Deletes a topic, its channels and its files.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        self.inner.registry.remove_topic_entry(&t);
        if !t.ephemeral {
            for c in t.channel_list() {
                let _ = c.control(WalReq::Delete).await;
            }
            t.file_writes_done().await;
            let manifest = lock(&t.manifest).clone();
            let store = self.inner.store.clone();
            let tiering = self.inner.tiering.clone();
            tokio::task::spawn_blocking(move || {
                // No tiered record is written into the directory while it goes.
                let _gate = tiering.as_ref().map(|t| lock(&t.gate));
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
        let through = self.tail_position(topic)?;
        self.empty_topic_through(topic, through).await
    }

    /// The last position published to a topic so far (0 before the first publish).
    pub fn tail_position(&self, topic: &str) -> Result<u64, EngineError> {
        let t = self.existing(topic)?;
        Ok(lock(&t.log).next_position() - 1)
    }

    /// Empties every channel of a topic through `through` only (and moves the unrouted
    /// boundary past it): applying it again later leaves newer messages alone.
    pub async fn empty_topic_through(&self, topic: &str, through: u64) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        for c in t.channel_list() {
            self.empty_channel_through(topic, &c.name, through).await?;
        }
        if !t.ephemeral {
            let next = lock(&t.log).next_position();
            let mut manifest = lock(&t.manifest);
            if let Some(from) = manifest.unrouted_from_position
                && from <= through
            {
                let mut m = manifest.clone();
                m.unrouted_from_position = Some((through + 1).min(next));
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
        let was = t.paused.swap(paused, Ordering::SeqCst);
        for c in t.channel_list() {
            c.notify.notify_waiters();
        }
        if was != paused {
            self.inner.registry.note_change(!t.ephemeral)?;
        }
        Ok(())
    }

    /// Creates a channel if absent (and its topic).
    pub fn create_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let t = self.inner.registry.get_or_create_topic(topic)?;
        self.inner
            .registry
            .get_or_create_channel(&t, channel)
            .map(|_| ())
    }

    /// Deletes a channel; its consumers' `next()` returns `None`.
    pub async fn delete_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        self.inner.registry.remove_channel(&t, channel).await
    }

    /// Finishes every message of the channel published so far.
    pub async fn empty_channel(&self, topic: &str, channel: &str) -> Result<(), EngineError> {
        let through = self.tail_position(topic)?;
        self.empty_channel_through(topic, channel, through).await
    }

    /// Finishes every message of the channel at or below `through` (newer ones stay).
    pub async fn empty_channel_through(
        &self,
        topic: &str,
        channel: &str,
        through: u64,
    ) -> Result<(), EngineError> {
        let t = self.existing(topic)?;
        let c = t.channel(channel).ok_or(EngineError::ChannelNotFound)?;
        let cmd = lock(&c.st).empty(through);
        c.notify.notify_waiters();
        Ok(c.persist(vec![cmd]).await?)
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
        let was = {
            let mut st = lock(&c.st);
            let was = st.durable.paused;
            st.durable.apply(&cmd);
            was
        };
        c.notify.notify_waiters();
        c.persist(vec![cmd]).await?;
        if was != paused {
            self.inner.registry.note_change(!c.ephemeral)?;
        }
        Ok(())
    }

    /// SUB: registers a consumer (creating topic and channel if needed).
    pub fn subscribe(
        &self,
        topic: &str,
        channel: &str,
        opts: ConsumerOptions,
    ) -> Result<Consumer, EngineError> {
        let t = self.inner.registry.get_or_create_topic(topic)?;
        let c = self.inner.registry.get_or_create_channel(&t, channel)?;
        Ok(Consumer::register(self.inner.clone(), t, c, opts))
    }

    /// Topic names in order.
    pub fn topics(&self) -> Vec<String> {
        self.inner.registry.names()
    }

    /// Channel names of a topic in order.
    pub fn channels(&self, topic: &str) -> Result<Vec<String>, EngineError> {
        let t = self.existing(topic)?;
        Ok(t.channel_list().iter().map(|c| c.name.clone()).collect())
    }

    /// nsqd-shaped statistics, optionally filtered to one topic / channel.
    pub fn stats(&self, topic: Option<&str>, channel: Option<&str>) -> EngineStats {
        let now = Instant::now();
        let now_ns = crate::types::now_ns();
        let topics: Vec<Arc<Topic>> = self
            .inner
            .registry
            .topic_list()
            .into_iter()
            .filter(|t| topic.is_none_or(|n| n == t.name))
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
                    c.persist_later(vec![cmd]);
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
                    ephemeral: c.ephemeral,
                    ack_cursor: st.durable.ack_floor,
                    ack_gap: st.durable.acked.len() as u64,
                });
            }
            let log = lock(&t.log);
            let (unsynced_messages, unsynced_bytes) = log.unsynced();
            let sync_lag_ms = log
                .oldest_unsynced_timestamp()
                .map_or(0, |ts| (now_ns - ts).max(0) as u64 / 1_000_000);
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
                segment_count: log.segment_count() as u64,
                segment_bytes: log.segment_bytes(),
                sync_lag_ms,
            });
        }
        let health = self
            .inner
            .store
            .fault()
            .reason()
            .filter(|_| !self.inner.shutting_down())
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
        for t in self.inner.registry.topic_list() {
            for c in t.channel_list() {
                c.notify.notify_waiters();
            }
        }
    }

    /// Verifies every sealed segment now (`POST /v1/storage/scrub`); a mismatch isolates
    /// storage. Returns the number of records checked.
    pub async fn scrub(&self) -> Result<u64, EngineError> {
        let registry = self.inner.registry.clone();
        let rate = self.inner.cfg.scrub_bytes_per_second;
        let r = tokio::task::spawn_blocking(move || crate::scrub::scrub_all(&registry, rate))
            .await
            .map_err(|e| StorageFault::task("scrub", &e))?;
        r.map_err(|e| {
            self.inner.store.fault().trip(e.to_string());
            EngineError::from(e)
        })
    }

    /// Health facts.
    pub fn health(&self) -> EngineHealth {
        let shutting_down = self.inner.shutting_down();
        EngineHealth {
            storage_fault: if shutting_down {
                None
            } else {
                self.inner.store.fault().reason()
            },
            deliveries_frozen: self.inner.frozen(),
            disk_pressure: self.inner.disk.reason(),
            shutting_down,
            topics: self.inner.registry.len(),
        }
    }

    /// Damage at rest found and quarantined (the `/v1/health` `storage_damage` detail).
    pub fn storage_damage(&self) -> rustqueue_storage::QuarantineSummary {
        self.inner.store.quarantine().summary()
    }

    /// Changes whenever a topic or channel is created, deleted, paused or unpaused.
    pub fn registry_revision(&self) -> u64 {
        self.inner.registry.revision()
    }

    /// Bytes held right now by the node budgets, in 4 KiB units: `(publish, delivery)`.
    /// Publish bytes are accepted bodies not yet committed; delivery bytes are bodies being
    /// read for delivery. Both are 0 on an idle broker (control contract: drain `quiesced`).
    pub fn inflight_bytes(&self) -> (u64, u64) {
        self.inner.budgets.held()
    }

    /// Graceful shutdown: refuse new work, sync every log, checkpoint every channel, release
    /// the directory lock. Consumers' `next()` returns `None` afterwards.
    pub async fn shutdown(&self) {
        if self.inner.registry.close() {
            return;
        }
        let topics = self.inner.registry.topic_list();
        for t in &topics {
            for c in t.channel_list() {
                c.notify.notify_waiters();
            }
            if !t.ephemeral {
                t.file_writes_done().await;
                background_sync(t).await;
                for c in t.channel_list() {
                    let _ = c.control(WalReq::Checkpoint).await;
                }
                let mut m = lock(&t.manifest).clone();
                m.next_position = lock(&t.log).next_position();
                let _ = self.inner.store.write_manifest(&m);
            }
        }
        if let Some(uploader) = &self.inner.uploader {
            // Every step of the uploader survives a crash (an object put twice, a delete
            // repeated), so it can stop anywhere; stopped, it sends the bucket nothing more.
            uploader.abort();
        }
        if let Some(tiering) = self.inner.tiering.clone() {
            // A tiered record being written finishes before the lock goes; later ones see the
            // engine closed and write nothing.
            let _ = tokio::task::spawn_blocking(move || drop(lock(&tiering.gate))).await;
        }
        self.inner.store.release_lock();
    }
}
