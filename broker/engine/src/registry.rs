//! Building topics and channels: from recovery, on first use, and their removal.
//!
//! Retention boundaries live here too: a topic with no durable channel keeps an "unrouted"
//! boundary in its manifest; the first durable channel starts exactly there, later ones start
//! at the oldest message inside the bootstrap window, ephemeral ones at the tail.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rustqueue_storage::Manifest;
use rustqueue_storage::{ChannelState, ChannelWal, Fault, MemFs, RecoveredTopic, Store, TopicLog};
use tokio::sync::{Notify, mpsc, watch};

use crate::channel::{ChanState, Channel, WalReq, wal_worker};
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::lock::{lock, read, write};
use crate::metrics::EngineMetrics;
use crate::topic::{GroupSettings, Handoff, Topic, publish_worker, visibility_worker};
use crate::types::{is_ephemeral, now_ns, valid_name};

/// Ephemeral topics live in memory; small segments let GC free it promptly.
const EPHEMERAL_SEGMENT_BYTES: u64 = 1 << 20;

/// The topic registry: every topic and channel by name, their creation and removal, the
/// registry revision, and the shutdown gate that stops creating them.
pub(crate) struct Registry {
    cfg: EngineConfig,
    store: Arc<Store>,
    metrics: Arc<EngineMetrics>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    revision: AtomicU64,
    shutting_down: AtomicBool,
}

impl Registry {
    /// A registry holding the topics recovered from `store`.
    pub(crate) fn new(
        cfg: EngineConfig,
        store: Arc<Store>,
        metrics: Arc<EngineMetrics>,
        recovered: Vec<RecoveredTopic>,
    ) -> Registry {
        let r = Registry {
            revision: AtomicU64::new(store.revision()),
            cfg,
            store,
            metrics,
            topics: RwLock::new(BTreeMap::new()),
            shutting_down: AtomicBool::new(false),
        };
        r.install_recovered(recovered);
        r
    }

    /// The store every durable topic lives in.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The engine's metrics.
    pub(crate) fn metrics(&self) -> &Arc<EngineMetrics> {
        &self.metrics
    }

    /// Closes the registry to new topics and channels; `true` if it was already closed.
    pub(crate) fn close(&self) -> bool {
        self.shutting_down.swap(true, Ordering::SeqCst)
    }

    /// Whether the engine is shutting down.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Changes whenever a topic or channel is created, deleted, paused or unpaused.
    pub(crate) fn revision(&self) -> u64 {
        self.revision.load(Ordering::SeqCst)
    }

    /// Number of topics.
    pub(crate) fn len(&self) -> usize {
        read(&self.topics).len()
    }

    /// Topic names in order.
    pub(crate) fn names(&self) -> Vec<String> {
        read(&self.topics).keys().cloned().collect()
    }

    /// Records a change of a topic or channel (pause, unpause) in the revision: durably for a
    /// durable one, in memory for an ephemeral one.
    pub(crate) fn note_change(&self, durable: bool) -> Result<(), EngineError> {
        if durable {
            self.store.bump_revision()?;
        }
        self.bump_local_revision();
        Ok(())
    }

    fn bump_local_revision(&self) {
        self.revision.fetch_add(1, Ordering::SeqCst);
    }

    fn group_settings(&self) -> GroupSettings {
        let c = &self.cfg;
        GroupSettings {
            max_requests: c.group_max_requests,
            max_bytes: c.group_max_bytes,
            ack_mode: c.ack_mode,
            sync_messages: c.relaxed_sync_messages,
            sync_bytes: c.relaxed_sync_bytes,
            sync_interval: c.relaxed_sync_interval,
        }
    }

    fn build_topic(&self, mut log: TopicLog, manifest: Manifest, ephemeral: bool) -> Arc<Topic> {
        if !ephemeral {
            // Sealed segments' indexes and the zeros ahead of the tail are written off the
            // publish path (`topic::append`).
            log.defer_index_writes();
            log.defer_zero_writes();
            // The relaxed modes' appends share writes (`TopicLog::defer_appends`): in
            // `nsq_relaxed` the topic's visibility task writes what waits, in `write_ack`
            // (whose consumers see only synced records) the next relaxed sync does.
            if self.cfg.ack_mode != crate::AckMode::Durable {
                log.defer_appends();
            }
        }
        let (tx, rx) = mpsc::channel(1_024);
        let (sync_tx, sync_rx) = mpsc::unbounded_channel();
        // Only `nsq_relaxed` appends ask it for anything; idle topics pay no task.
        let (visibility_tx, visibility_rx) =
            if self.cfg.ack_mode == crate::AckMode::NsqRelaxed && !ephemeral {
                let (tx, rx) = mpsc::channel(1);
                (Some(tx), Some(rx))
            } else {
                (None, None)
            };
        let settings = self.group_settings();
        let visible = if self.cfg.ack_mode == crate::AckMode::NsqRelaxed || ephemeral {
            log.next_position() - 1
        } else {
            log.durable_position()
        };
        let t = Arc::new(Topic {
            name: manifest.name.clone(),
            ephemeral,
            paused: AtomicBool::new(manifest.paused),
            log: Mutex::new(log),
            manifest: Mutex::new(manifest),
            channels: RwLock::new(BTreeMap::new()),
            deleted: AtomicBool::new(false),
            visible: watch::channel(visible).0,
            pub_tx: tx,
            settings,
            handoff: Handoff {
                tx: sync_tx,
                told: AtomicBool::new(false),
                returns: Default::default(),
            },
            visibility_tx,
            metrics: self.metrics.clone(),
            file_jobs: Mutex::new(Vec::new()),
        });
        tokio::spawn(publish_worker(
            Arc::downgrade(&t),
            self.store.clone(),
            settings,
            rx,
            sync_rx,
        ));
        if let Some(rx) = visibility_rx {
            tokio::spawn(visibility_worker(Arc::downgrade(&t), rx));
        }
        t
    }

    fn build_channel(
        &self,
        name: &str,
        state: ChannelState,
        wal: Option<ChannelWal>,
    ) -> Arc<Channel> {
        let (tx, rx) = match wal {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let c = Arc::new(Channel {
            name: name.to_string(),
            ephemeral: is_ephemeral(name),
            st: Mutex::new(ChanState::new(state).with_metrics(self.metrics.clone())),
            notify: Notify::new(),
            arrivals: Notify::new(),
            wal_tx: tx,
            deleted: AtomicBool::new(false),
        });
        if let (Some(wal), Some(rx)) = (wal, rx) {
            tokio::spawn(wal_worker(
                Arc::downgrade(&c),
                wal,
                rx,
                self.metrics.clone(),
            ));
        }
        c
    }

    /// Installs the topics recovered from disk.
    fn install_recovered(&self, recovered: Vec<RecoveredTopic>) {
        let mut topics = write(&self.topics);
        for rt in recovered {
            let t = self.build_topic(rt.log, rt.manifest, false);
            {
                let mut chans = write(&t.channels);
                for rc in rt.channels {
                    let c = self.build_channel(&rc.name, rc.state, Some(rc.wal));
                    chans.insert(rc.name, c);
                }
            }
            topics.insert(t.name.clone(), t);
        }
    }

    fn check_open(&self) -> Result<(), EngineError> {
        if self.is_shutting_down() {
            return Err(EngineError::ShuttingDown);
        }
        Ok(())
    }

    /// A snapshot of every topic (the registry lock is not held while callers walk it).
    pub(crate) fn topic_list(&self) -> Vec<Arc<Topic>> {
        read(&self.topics).values().cloned().collect()
    }

    pub(crate) fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        read(&self.topics).get(name).cloned()
    }

    /// Returns the topic, creating it (durably unless ephemeral) if needed.
    pub(crate) fn get_or_create_topic(&self, name: &str) -> Result<Arc<Topic>, EngineError> {
        if !valid_name(name) {
            return Err(EngineError::BadName(name.to_string()));
        }
        self.check_open()?;
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        let mut topics = write(&self.topics);
        if let Some(t) = topics.get(name) {
            return Ok(t.clone());
        }
        let ephemeral = is_ephemeral(name);
        if !ephemeral && topics.values().filter(|t| !t.ephemeral).count() >= self.cfg.max_topics {
            return Err(EngineError::TooManyTopics);
        }
        let manifest = Manifest::new(name);
        let log = if ephemeral {
            let mem = Arc::new(MemFs::new());
            TopicLog::open(
                mem.clone(),
                std::path::Path::new("/ephemeral"),
                Fault::default(),
                EPHEMERAL_SEGMENT_BYTES,
                1,
                self.store.page_cache().clone(),
                rustqueue_storage::DamageSink::detached(mem, name),
            )?
        } else {
            let log = self.store.create_topic(&manifest)?;
            self.store.bump_revision()?;
            log
        };
        let t = self.build_topic(log, manifest, ephemeral);
        topics.insert(name.to_string(), t.clone());
        self.bump_local_revision();
        Ok(t)
    }

    /// Returns the channel, creating it if needed (durable ones get their files first).
    pub(crate) fn get_or_create_channel(
        &self,
        t: &Arc<Topic>,
        name: &str,
    ) -> Result<Arc<Channel>, EngineError> {
        if !valid_name(name) {
            return Err(EngineError::BadName(name.to_string()));
        }
        self.check_open()?;
        if let Some(c) = t.channel(name) {
            return Ok(c);
        }
        let mut chans = write(&t.channels);
        if let Some(c) = chans.get(name) {
            return Ok(c.clone());
        }
        if chans.len() >= self.cfg.max_channels_per_topic {
            return Err(EngineError::TooManyChannels);
        }
        let ephemeral = is_ephemeral(name) || t.ephemeral;
        let (start, tail) = {
            let log = lock(&t.log);
            let since = now_ns() - self.cfg.bootstrap_retention.as_nanos() as i64;
            (log.first_position_since(since), log.next_position())
        };
        let c = if ephemeral {
            self.build_channel(name, ChannelState::new(name, tail), None)
        } else {
            let mut manifest = lock(&t.manifest);
            let start = manifest.unrouted_from_position.unwrap_or(start);
            let state = ChannelState::new(name, start);
            let wal = self.store.create_channel(&t.name, &state)?;
            if manifest.unrouted_from_position.is_some() {
                let mut m = manifest.clone();
                m.unrouted_from_position = None;
                m.next_position = tail;
                self.store.write_manifest(&m)?;
                *manifest = m;
            }
            self.store.bump_revision()?;
            self.build_channel(name, state, Some(wal))
        };
        chans.insert(name.to_string(), c.clone());
        self.bump_local_revision();
        Ok(c)
    }

    /// Removes a channel from its topic (files via its WAL worker) and wakes its consumers.
    pub(crate) async fn remove_channel(
        &self,
        t: &Arc<Topic>,
        name: &str,
    ) -> Result<(), EngineError> {
        let c = {
            let mut chans = write(&t.channels);
            chans.remove(name).ok_or(EngineError::ChannelNotFound)?
        };
        c.deleted.store(true, Ordering::SeqCst);
        c.notify.notify_waiters();
        if c.wal_tx.is_some() {
            c.control(WalReq::Delete).await?;
            let durable_left = t.channel_list().iter().any(|c| !c.ephemeral);
            if !durable_left && !t.ephemeral {
                let mut manifest = lock(&t.manifest);
                let mut m = manifest.clone();
                m.next_position = lock(&t.log).next_position();
                m.unrouted_from_position = Some(m.next_position);
                self.store.write_manifest(&m)?;
                *manifest = m;
            }
            self.store.bump_revision()?;
        }
        self.bump_local_revision();
        if t.ephemeral && t.channel_list().is_empty() {
            self.remove_topic_entry(t);
        }
        Ok(())
    }

    /// Drops an ephemeral channel whose last consumer left (memory only, no I/O).
    pub(crate) fn drop_ephemeral_channel(&self, t: &Arc<Topic>, c: &Arc<Channel>) {
        {
            let mut chans = write(&t.channels);
            if chans.get(&c.name).is_some_and(|x| Arc::ptr_eq(x, c)) {
                chans.remove(&c.name);
            }
        }
        c.deleted.store(true, Ordering::SeqCst);
        c.notify.notify_waiters();
        self.bump_local_revision();
        if t.ephemeral && t.channel_list().is_empty() {
            self.remove_topic_entry(t);
        }
    }

    pub(crate) fn remove_topic_entry(&self, t: &Arc<Topic>) {
        let mut topics = write(&self.topics);
        if topics.get(&t.name).is_some_and(|x| Arc::ptr_eq(x, t)) {
            topics.remove(&t.name);
        }
        t.deleted.store(true, Ordering::SeqCst);
        for c in t.channel_list() {
            c.deleted.store(true, Ordering::SeqCst);
            c.notify.notify_waiters();
        }
        self.bump_local_revision();
    }
}
