//! Tombstone fences (`management-fences.json`, docs/storage-format.md): a fenced topic refuses
//! publish, SUB and create; a fenced channel refuses SUB and create, until the fence expires.
//!
//! The publish and SUB paths ask [`Fences::check_topic`] / [`Fences::check_channel`]. With
//! management off that is one branch on a plain bool; with it on and no unexpired fence, two
//! relaxed atomic loads (ready, horizon) and no lock. Only while some fence may still be in
//! force is the clock read and the map consulted, under a read lock.
//!
//! With management on the fences start "not ready" (every topic/channel operation is refused
//! with `E_MANAGEMENT_UNAVAILABLE`, `/v1/health` says `management_fences_stale`) until the
//! first `POST /v1/manage/fences/sync` of this process, also when the file survived a restart:
//! only the console knows whether a fence was added while this broker was down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustqueue_api::contract::{FenceSync, codes};
use rustqueue_engine::StorageError;
use serde::{Deserialize, Serialize};

use super::durable;
use crate::control::stats::now_ms;

/// File name in the data root.
pub const FENCES_FILE: &str = "management-fences.json";
/// The `format` of [`FENCES_FILE`].
pub const FENCES_FORMAT: u32 = 1;

/// The fence file: `{format:1, revision, topics{name:until_ms},
/// channels{"<len(topic)>:<topic>:<channel>":until_ms}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceFile {
    /// [`FENCES_FORMAT`].
    pub format: u32,
    /// The revision of the last fence sync (empty before the first).
    #[serde(default)]
    pub revision: String,
    /// Topic fences: name -> expiry, ms since the Unix epoch.
    #[serde(default)]
    pub topics: BTreeMap<String, u64>,
    /// Channel fences by [`channel_key`] -> expiry.
    #[serde(default)]
    pub channels: BTreeMap<String, u64>,
}

impl FenceFile {
    /// The file a sync asks for (already expired fences dropped).
    pub fn from_sync(sync: &FenceSync, now: u64) -> FenceFile {
        let mut f = FenceFile {
            format: FENCES_FORMAT,
            revision: sync.revision.clone(),
            topics: sync.topics.clone(),
            channels: sync
                .channels
                .iter()
                .map(|c| (channel_key(&c.topic, &c.channel), c.until_ms))
                .collect(),
        };
        f.prune(now);
        f
    }

    /// Drops expired fences.
    pub fn prune(&mut self, now: u64) {
        self.topics.retain(|_, until| *until > now);
        self.channels.retain(|_, until| *until > now);
    }

    /// The latest expiry of any fence (0 without fences).
    fn horizon(&self) -> u64 {
        self.topics
            .values()
            .chain(self.channels.values())
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Unexpired fences at `now`.
    pub fn active(&self, now: u64) -> u64 {
        let live = |m: &BTreeMap<String, u64>| m.values().filter(|u| **u > now).count() as u64;
        live(&self.topics) + live(&self.channels)
    }
}

/// The key of a channel fence: the topic's length first, so no name can forge another's key.
pub fn channel_key(topic: &str, channel: &str) -> String {
    format!("{}:{topic}:{channel}", topic.len())
}

/// Why a fence refuses an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Fences not synced since start (503 `E_MANAGEMENT_UNAVAILABLE`).
    Unavailable,
    /// The topic is tombstoned (409 `E_TOPIC_TOMBSTONED`).
    TopicTombstoned,
    /// The channel is tombstoned (409 `E_CHANNEL_TOMBSTONED`).
    ChannelTombstoned,
}

impl Refusal {
    /// The contract error code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Unavailable => codes::MANAGEMENT_UNAVAILABLE,
            Self::TopicTombstoned => codes::TOPIC_TOMBSTONED,
            Self::ChannelTombstoned => codes::CHANNEL_TOMBSTONED,
        }
    }

    /// What to do about it.
    pub fn detail(self) -> &'static str {
        match self {
            Self::Unavailable => {
                "management fences are not synced yet; retry after the console's fence sync"
            }
            Self::TopicTombstoned => "the topic is tombstoned until its fence expires",
            Self::ChannelTombstoned => "the channel is tombstoned until its fence expires",
        }
    }
}

/// The broker's fences.
#[derive(Debug)]
pub struct Fences {
    enabled: bool,
    ready: AtomicBool,
    /// Latest expiry over all fences; 0 without any (the hot-path short cut).
    horizon_ms: AtomicU64,
    file: RwLock<FenceFile>,
    path: PathBuf,
}

impl Fences {
    /// Management off: nothing is ever fenced, fences are always ready.
    pub fn disabled() -> Fences {
        Fences {
            enabled: false,
            ready: AtomicBool::new(true),
            horizon_ms: AtomicU64::new(0),
            file: RwLock::new(FenceFile::default()),
            path: PathBuf::new(),
        }
    }

    /// Management on: the fences persisted in `data_root` (none on a fresh directory), not
    /// ready until the first sync.
    pub fn open(data_root: &Path) -> Result<Fences, StorageError> {
        let path = data_root.join(FENCES_FILE);
        let mut file: FenceFile = durable::read_or_default(&path)?;
        file.prune(now_ms());
        Ok(Fences {
            enabled: true,
            ready: AtomicBool::new(false),
            horizon_ms: AtomicU64::new(file.horizon()),
            file: RwLock::new(file),
            path,
        })
    }

    /// Whether fences are ready (always with management off).
    pub fn ready(&self) -> bool {
        !self.enabled || self.ready.load(Ordering::Acquire)
    }

    /// Publish and topic create: refused while not ready or while the topic is fenced.
    #[inline]
    pub fn check_topic(&self, topic: &str) -> Result<(), Refusal> {
        if !self.enabled {
            return Ok(());
        }
        self.check(topic, None)
    }

    /// SUB and channel create: refused while not ready, or while the topic or the channel is
    /// fenced.
    #[inline]
    pub fn check_channel(&self, topic: &str, channel: &str) -> Result<(), Refusal> {
        if !self.enabled {
            return Ok(());
        }
        self.check(topic, Some(channel))
    }

    fn check(&self, topic: &str, channel: Option<&str>) -> Result<(), Refusal> {
        if !self.ready.load(Ordering::Acquire) {
            return Err(Refusal::Unavailable);
        }
        let horizon = self.horizon_ms.load(Ordering::Relaxed);
        if horizon == 0 {
            return Ok(());
        }
        let now = now_ms();
        if now >= horizon {
            return Ok(());
        }
        let f = self.file.read().unwrap_or_else(|p| p.into_inner());
        if f.topics.get(topic).is_some_and(|u| *u > now) {
            return Err(Refusal::TopicTombstoned);
        }
        if let Some(c) = channel
            && f.channels
                .get(&channel_key(topic, c))
                .is_some_and(|u| *u > now)
        {
            return Err(Refusal::ChannelTombstoned);
        }
        Ok(())
    }

    /// A copy of the fences in force.
    pub fn snapshot(&self) -> FenceFile {
        self.file.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The revision of the last sync (empty before the first).
    pub fn revision(&self) -> String {
        self.file
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .revision
            .clone()
    }

    /// Unexpired topic and channel fences.
    pub fn tombstones(&self) -> u64 {
        self.file
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .active(now_ms())
    }

    /// Makes `file` durable (temp, fsync, rename, directory fsync), then the one in force.
    /// Callers serialize changes (the management lock), so none is lost. `failpoint` names
    /// the moment before the rename (feature `crash-injection`).
    pub async fn replace(
        &self,
        mut file: FenceFile,
        failpoint: &'static str,
    ) -> Result<(), StorageError> {
        file.format = FENCES_FORMAT;
        file.prune(now_ms());
        durable::write(self.path.clone(), file.clone(), failpoint).await?;
        self.horizon_ms.store(file.horizon(), Ordering::Relaxed);
        *self.file.write().unwrap_or_else(|p| p.into_inner()) = file;
        Ok(())
    }

    /// `POST /v1/manage/fences/sync`: replaces every fence, then fences are ready.
    pub async fn sync(&self, sync: &FenceSync) -> Result<(), StorageError> {
        let file = FenceFile::from_sync(sync, now_ms());
        self.replace(file, "manage_fence_sync_before_rename")
            .await?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustqueue_api::contract::ChannelFence;

    fn synced(dir: &Path, sync: &FenceSync) -> Fences {
        let f = Fences::open(dir).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(f.sync(sync)).unwrap();
        f
    }

    #[test]
    fn channel_keys_lead_with_the_topic_length() {
        assert_eq!(channel_key("a:b", "c"), "3:a:b:c");
        assert_ne!(channel_key("a:b", "c"), channel_key("a", "b:c"));
    }

    #[test]
    fn management_off_never_refuses() {
        let f = Fences::disabled();
        assert!(f.ready());
        assert_eq!(f.check_topic("t"), Ok(()));
        assert_eq!(f.check_channel("t", "c"), Ok(()));
    }

    #[test]
    fn fences_refuse_until_synced_then_only_what_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let f = Fences::open(dir.path()).unwrap();
        assert!(!f.ready());
        assert_eq!(f.check_topic("t"), Err(Refusal::Unavailable));
        let until = now_ms() + 60_000;
        let f = synced(
            dir.path(),
            &FenceSync {
                revision: "r1".into(),
                topics: [("gone".to_owned(), until), ("old".to_owned(), 1)].into(),
                channels: vec![ChannelFence {
                    topic: "t".into(),
                    channel: "c".into(),
                    until_ms: until,
                }],
            },
        );
        assert!(f.ready());
        assert_eq!(f.check_topic("t"), Ok(()));
        assert_eq!(f.check_topic("old"), Ok(()), "an expired fence is dropped");
        assert_eq!(f.check_topic("gone"), Err(Refusal::TopicTombstoned));
        assert_eq!(f.check_channel("gone", "x"), Err(Refusal::TopicTombstoned));
        assert_eq!(f.check_channel("t", "c"), Err(Refusal::ChannelTombstoned));
        assert_eq!(f.check_channel("t", "d"), Ok(()));
        assert_eq!(f.tombstones(), 2);
        assert_eq!(f.revision(), "r1");
    }

    #[test]
    fn fences_survive_a_restart_but_wait_for_the_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let until = now_ms() + 60_000;
        synced(
            dir.path(),
            &FenceSync {
                revision: "r2".into(),
                topics: [("gone".to_owned(), until)].into(),
                channels: vec![],
            },
        );
        let again = Fences::open(dir.path()).unwrap();
        assert!(!again.ready());
        assert_eq!(again.snapshot().topics.get("gone"), Some(&until));
        assert_eq!(again.revision(), "r2");
    }
}
