//! The data directory as a whole: lock, format fences, id reservation, topic and channel files,
//! and startup recovery.
//!
//! Recovery order: take the lock; check `FORMAT` and `COMPATIBILITY`; load `broker.meta` and
//! bump the registry revision; load the quarantine ledger; then per topic remove half-deleted
//! ones, read the manifest (rebuilt if damaged), open the log (torn tail truncated, damaged
//! records quarantined) and every channel (checkpoint + WAL replay, damage falling back to
//! the last good state), dropping half-created or half-deleted channel files.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::channel::ChannelState;
use crate::fs::Fs;
use crate::levels::{self, LOCAL_RETENTION_LEVEL, MAX_FEATURE_LEVEL};
use crate::log::{DamageSink, PageCache, TopicLog};
use crate::meta::{
    self, BrokerMeta, Compatibility, FORMAT_VERSION, FormatFile, ID_BLOCK, MAX_SEQUENCE, Manifest,
    MetaRead, hex, unhex,
};
use crate::quarantine::{DamageKind, Detector, Quarantine};
use crate::wal::{self, ChannelWal};
use crate::{Fault, StorageError, crash_failpoint, io_err};

/// How to open a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Node id (must match `broker.meta`).
    pub node_id: u16,
    /// Configured storage feature level (1..=[`MAX_FEATURE_LEVEL`]).
    pub feature_level: u8,
    /// Segment rotation size.
    pub max_segment_bytes: u64,
    /// The bounded cache of sealed-segment index pages every topic log of this store shares
    /// (`storage.message_index_cache_bytes`); `Default::default()` bounds it at
    /// [`DEFAULT_CACHE_BYTES`](crate::log::DEFAULT_CACHE_BYTES).
    pub page_cache: Arc<PageCache>,
}

/// A recovered durable channel.
pub struct RecoveredChannel {
    /// Channel name.
    pub name: String,
    /// Its open WAL.
    pub wal: ChannelWal,
    /// State after checkpoint + WAL replay.
    pub state: ChannelState,
}

/// A recovered topic.
pub struct RecoveredTopic {
    /// Its manifest as stored.
    pub manifest: Manifest,
    /// Its log.
    pub log: TopicLog,
    /// Its durable channels.
    pub channels: Vec<RecoveredChannel>,
}

struct Ids {
    meta: BrokerMeta,
    next: u64,
    reserved_until: u64,
}

/// An open data directory.
pub struct Store {
    fs: Arc<dyn Fs>,
    root: PathBuf,
    fault: Fault,
    opts: StoreOptions,
    ids: Mutex<Ids>,
    lock: Mutex<Option<Box<dyn Any + Send + Sync>>>,
    quarantine: Quarantine,
    opening: Detector,
    /// `COMPATIBILITY` as this open left it (raised to the configured level if it was lower).
    compatibility: Compatibility,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).finish()
    }
}

/// What a metadata finding says when an interrupted replacement was completed.
const ADOPTED: &str = "replaced by its whole, checksummed temp sibling (an interrupted atomic replacement, completed)";

/// Takes the data directory's lock (`.rustqueue.lock`), which one process holds at a time: a
/// running broker, or an offline tool writing the directory. Held until the value is dropped.
pub(crate) fn lock_data_dir(
    fs: &dyn Fs,
    root: &Path,
) -> Result<Box<dyn Any + Send + Sync>, StorageError> {
    let lock_path = root.join(".rustqueue.lock");
    fs.lock(&lock_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => StorageError::Locked(root.to_path_buf()),
        _ => StorageError::Io {
            op: "lock",
            file: lock_path,
            source: e,
        },
    })
}

fn incompatible(msg: String) -> StorageError {
    StorageError::Incompatible(msg)
}

impl Store {
    /// The index page cache this store's topic logs share (see [`StoreOptions::page_cache`]).
    pub fn page_cache(&self) -> &Arc<PageCache> {
        &self.opts.page_cache
    }

    /// Opens and recovers `root`.
    pub fn open(
        fs: Arc<dyn Fs>,
        root: &Path,
        opts: StoreOptions,
    ) -> Result<(Store, Vec<RecoveredTopic>), StorageError> {
        Self::open_as(fs, root, opts, Detector::Startup)
    }

    /// [`Store::open`], with damage found while recovering attributed to `opening`
    /// (`storage repair` opens as [`Detector::Repair`]).
    pub fn open_as(
        fs: Arc<dyn Fs>,
        root: &Path,
        opts: StoreOptions,
        opening: Detector,
    ) -> Result<(Store, Vec<RecoveredTopic>), StorageError> {
        Self::open_inner(fs, root, opts, opening, MAX_FEATURE_LEVEL)
    }

    /// [`Store::open`] as a binary that reads and writes levels `1..=ceiling` only would open
    /// it: the same checks, with a lower ceiling. How tests play an older release (one that
    /// reads up to level 2, say) against a directory this one wrote.
    pub fn open_with_ceiling(
        fs: Arc<dyn Fs>,
        root: &Path,
        opts: StoreOptions,
        ceiling: u8,
    ) -> Result<(Store, Vec<RecoveredTopic>), StorageError> {
        Self::open_inner(
            fs,
            root,
            opts,
            Detector::Startup,
            ceiling.min(MAX_FEATURE_LEVEL),
        )
    }

    fn open_inner(
        fs: Arc<dyn Fs>,
        root: &Path,
        opts: StoreOptions,
        opening: Detector,
        ceiling: u8,
    ) -> Result<(Store, Vec<RecoveredTopic>), StorageError> {
        fs.create_dir_all(root)
            .map_err(io_err("create directory", root))?;
        let lock = lock_data_dir(fs.as_ref(), root)?;
        let fault = Fault::default();
        let mut repaired = Vec::new();
        Self::check_format(fs.as_ref(), root, &mut repaired)?;
        let compatibility = Self::check_compatibility(
            fs.as_ref(),
            root,
            opts.feature_level,
            ceiling,
            &mut repaired,
        )?;
        let meta_path = root.join("broker.meta");
        let mut bm: BrokerMeta = match meta::read_meta(fs.as_ref(), &meta_path)? {
            MetaRead::Intact(bm) => bm,
            MetaRead::FromTemp(bm, detail) => {
                repaired.push((meta_path.clone(), format!("{detail}: {ADOPTED}")));
                bm
            }
            MetaRead::Damaged(detail) => {
                return Err(incompatible(meta::broker_meta_damaged(&meta_path, &detail)));
            }
            MetaRead::Missing => {
                // A directory that already holds topics had a broker.meta (it is written
                // before the first topic): starting the ids over would reuse them.
                let topics = root.join("topics");
                if fs.exists(&topics)
                    && !fs
                        .list(&topics)
                        .map_err(io_err("list", &topics))?
                        .is_empty()
                {
                    return Err(incompatible(meta::broker_meta_damaged(
                        &meta_path,
                        "missing, while topics/ holds topics",
                    )));
                }
                BrokerMeta {
                    format: FORMAT_VERSION,
                    node_id: opts.node_id,
                    next_sequence: 1,
                    registry_revision: 0,
                }
            }
        };
        if bm.node_id != opts.node_id {
            return Err(incompatible(format!(
                "{} belongs to node {} but this broker is node {}; use the right data path or node id",
                meta_path.display(),
                bm.node_id,
                opts.node_id
            )));
        }
        bm.registry_revision += 1;
        meta::write_checked(fs.as_ref(), &meta_path, &bm)?;
        let topics_dir = root.join("topics");
        fs.create_dir_all(&topics_dir)
            .map_err(io_err("create directory", &topics_dir))?;
        let ids = Ids {
            next: bm.next_sequence,
            reserved_until: bm.next_sequence,
            meta: bm,
        };
        let store = Store {
            fs: fs.clone(),
            root: root.to_path_buf(),
            fault,
            opts,
            ids: Mutex::new(ids),
            lock: Mutex::new(Some(lock)),
            quarantine: Quarantine::load(fs.clone(), root),
            opening,
            compatibility,
        };
        for (path, action) in repaired {
            let len = fs.read(&path).map_or(0, |b| b.len() as u64);
            let sink = DamageSink::new(store.quarantine.clone(), "", opening);
            sink.report(sink.finding(DamageKind::Metadata, &path, (0, len), opening, &action))?;
        }
        let mut topics = Vec::new();
        for name in fs.list(&topics_dir).map_err(io_err("list", &topics_dir))? {
            if let Some(t) = store.recover_topic(&topics_dir.join(&name), &name)? {
                topics.push(t);
            }
        }
        Ok((store, topics))
    }

    fn check_format(
        fs: &dyn Fs,
        root: &Path,
        repaired: &mut Vec<(PathBuf, String)>,
    ) -> Result<(), StorageError> {
        let path = root.join("FORMAT");
        let format = match meta::read_meta::<FormatFile>(fs, &path)? {
            MetaRead::Intact(f) => f,
            MetaRead::FromTemp(f, detail) => {
                meta::write_checked(fs, &path, &f)?;
                repaired.push((path.clone(), format!("{detail}: {ADOPTED}")));
                f
            }
            MetaRead::Damaged(detail) => {
                // FORMAT holds one number, which COMPATIBILITY and broker.meta repeat: when
                // both are whole and say this binary's format, that is the number.
                let compat = meta::read_meta::<Compatibility>(fs, &root.join("COMPATIBILITY"))?;
                let bm = meta::read_meta::<BrokerMeta>(fs, &root.join("broker.meta"))?;
                match (compat.content(), bm.content()) {
                    (Some(c), Some(b))
                        if c.data_format == FORMAT_VERSION && b.format == FORMAT_VERSION =>
                    {
                        let f = FormatFile {
                            version: FORMAT_VERSION,
                        };
                        meta::write_checked(fs, &path, &f)?;
                        repaired.push((
                            path.clone(),
                            format!(
                                "{detail}: rewritten as format {FORMAT_VERSION}, the format \
                                 COMPATIBILITY and broker.meta both state"
                            ),
                        ));
                        f
                    }
                    _ => {
                        return Err(incompatible(format!(
                            "{} is damaged ({detail}) and COMPATIBILITY and broker.meta do not \
                             both state format {FORMAT_VERSION}, so the format of this data \
                             directory is unknown; restore FORMAT from a backup (this broker \
                             reads format {FORMAT_VERSION}; see docs/operations.md)",
                            path.display()
                        )));
                    }
                }
            }
            MetaRead::Missing => {
                if [
                    "broker.meta",
                    "topics",
                    "catalog.json",
                    "rustqueue-format.json",
                ]
                .iter()
                .any(|n| fs.exists(&root.join(n)))
                {
                    return Err(incompatible(format!(
                        "{} has data but no FORMAT file; migrate it or use an empty directory",
                        root.display()
                    )));
                }
                let f = FormatFile {
                    version: FORMAT_VERSION,
                };
                return meta::write_checked(fs, &path, &f);
            }
        };
        if format.version != FORMAT_VERSION {
            return Err(incompatible(format!(
                "{} says format {}, this broker reads {FORMAT_VERSION}",
                path.display(),
                format.version
            )));
        }
        Ok(())
    }

    /// Reads (or creates) `COMPATIBILITY` and applies [`levels::on_open`]: a raise is written
    /// atomically before anything else of the directory is read or written. Returns the file
    /// as the open leaves it.
    fn check_compatibility(
        fs: &dyn Fs,
        root: &Path,
        level: u8,
        ceiling: u8,
        repaired: &mut Vec<(PathBuf, String)>,
    ) -> Result<Compatibility, StorageError> {
        if level == 0 || level > ceiling {
            return Err(incompatible(format!(
                "feature level {level} is outside 1..={ceiling}"
            )));
        }
        let path = root.join("COMPATIBILITY");
        let c: Compatibility = match meta::read_meta(fs, &path)? {
            MetaRead::Intact(c) => c,
            MetaRead::FromTemp(c, detail) => {
                meta::write_checked(fs, &path, &c)?;
                repaired.push((path.clone(), format!("{detail}: {ADOPTED}")));
                c
            }
            MetaRead::Damaged(detail) => {
                return Err(incompatible(meta::compatibility_damaged(&path, &detail)));
            }
            MetaRead::Missing if meta::holds_data(fs, root)? => {
                // Never recreated at level 1 beside data: that would drop the rollback fence
                // of a directory holding level-2 records or evicted segments.
                return Err(incompatible(meta::compatibility_missing(&path)));
            }
            MetaRead::Missing => {
                let c = Compatibility {
                    data_format: FORMAT_VERSION,
                    active_writer_feature_level: 1,
                    minimum_reader_feature_level: 1,
                    generation: 1,
                };
                meta::write_checked(fs, &path, &c)?;
                c
            }
        };
        match levels::on_open(&c, level, ceiling).map_err(incompatible)? {
            None => Ok(c),
            Some(raised) => {
                meta::write_checked_at(
                    fs,
                    &path,
                    &raised,
                    "compatibility_raise_after_file_fsync_before_rename",
                )?;
                Ok(raised)
            }
        }
    }

    /// The lowest reader level `COMPATIBILITY` admits, as this open left it: no binary that
    /// reads only lower levels opens the directory.
    pub fn minimum_reader_level(&self) -> u8 {
        self.compatibility.minimum_reader_feature_level
    }

    fn recover_topic(
        &self,
        dir: &Path,
        dirname: &str,
    ) -> Result<Option<RecoveredTopic>, StorageError> {
        let fs = self.fs.as_ref();
        let name = unhex(dirname).ok_or_else(|| StorageError::Corrupt {
            file: dir.to_path_buf(),
            offset: 0,
            detail: "topic directory name is not hex".into(),
        })?;
        let mpath = dir.join("manifest");
        let mut rebuilt = false;
        let manifest: Option<Manifest> = if fs.exists(&mpath) {
            Some(self.read_manifest_or_rebuild(&mpath, &name, &mut rebuilt)?)
        } else {
            None
        };
        let Some(manifest) = manifest.filter(|m| !m.deleted) else {
            fs.remove_dir_all(dir)
                .map_err(io_err("remove deleted topic", dir))?;
            fs.sync_dir(&self.root.join("topics"))
                .map_err(io_err("fsync directory", dir))?;
            return Ok(None);
        };
        if manifest.name != name {
            return Err(StorageError::Corrupt {
                file: mpath,
                offset: 0,
                detail: format!("manifest names topic {:?}", manifest.name),
            });
        }
        let sink = DamageSink::new(self.quarantine.clone(), name.clone(), self.opening);
        // Segments local retention evicted are read from the bucket. A damaged record names
        // none: their indexes are then reported as lost segments (the uploader starts a new
        // record and incarnation, docs/tiering.md).
        let remote = match crate::tiered::read(self.fs.as_ref(), dir) {
            Ok(record) => record.map(|r| r.remote_segments()).unwrap_or_default(),
            Err(StorageError::Corrupt { .. }) => Default::default(),
            Err(e) => return Err(e),
        };
        if !remote.is_empty() && self.minimum_reader_level() < LOCAL_RETENTION_LEVEL {
            // Evicted by a build from before the fence: opening on would leave a directory an
            // older binary opens and drops the evicted segments of.
            return Err(incompatible(format!(
                "{} lists segments local retention evicted, which need storage feature level \
                 {LOCAL_RETENTION_LEVEL} (a binary reading only level {} would drop their \
                 messages), but COMPATIBILITY's minimum reader level is {}; set \
                 storage.feature_level = {LOCAL_RETENTION_LEVEL} and start again (the start \
                 raises the fence first; docs/tiering.md)",
                crate::tiered::path(dir).display(),
                LOCAL_RETENTION_LEVEL - 1,
                self.minimum_reader_level()
            )));
        }
        let mut log = TopicLog::open_with_remote(
            self.fs.clone(),
            &dir.join("segments"),
            self.fault.clone(),
            self.opts.max_segment_bytes,
            manifest.next_position,
            self.opts.page_cache.clone(),
            sink.clone(),
            &remote,
        )?;
        let cdir = dir.join("channels");
        fs.create_dir_all(&cdir)
            .map_err(io_err("create directory", &cdir))?;
        let mut stems: Vec<String> = Vec::new();
        for f in fs.list(&cdir).map_err(io_err("list", &cdir))? {
            if f.ends_with(".tmp") {
                fs.remove_file(&cdir.join(&f))
                    .map_err(io_err("remove temp", &cdir))?;
            } else if let Some((stem, _)) = f.rsplit_once('.')
                && !stems.iter().any(|s| s == stem)
            {
                stems.push(stem.to_string());
            }
        }
        let mut channels = Vec::new();
        for stem in stems {
            let cname = unhex(&stem).ok_or_else(|| StorageError::Corrupt {
                file: cdir.join(&stem),
                offset: 0,
                detail: "channel file name is not hex".into(),
            })?;
            let (w, c) = wal::paths(&cdir, &cname);
            if !(fs.exists(&w) && fs.exists(&c)) || cname.ends_with("#ephemeral") {
                wal::remove_files(fs, &cdir, &w, &c)?;
                continue;
            }
            let (wal, state) =
                ChannelWal::open(self.fs.clone(), &cdir, &cname, self.fault.clone(), &sink)?;
            log.ensure_next_position(state.highest_position() + 1);
            channels.push(RecoveredChannel {
                name: cname,
                wal,
                state,
            });
        }
        let mut manifest = manifest;
        if rebuilt && !channels.is_empty() {
            // Durable channels route the topic: GC follows their floors again.
            manifest.unrouted_from_position = None;
            meta::write_manifest(fs, &mpath, &manifest)?;
        }
        Ok(Some(RecoveredTopic {
            manifest,
            log,
            channels,
        }))
    }

    /// A topic manifest, or, when it fails its checksum or does not parse, a rebuilt one
    /// (quarantined): not deleted, not paused, no position floor of its own (recovery raises
    /// it from the log and the channels) and, conservatively, no GC until a channel routes
    /// the topic again.
    fn read_manifest_or_rebuild(
        &self,
        path: &Path,
        name: &str,
        rebuilt: &mut bool,
    ) -> Result<Manifest, StorageError> {
        match meta::read_manifest(self.fs.as_ref(), path) {
            Ok(m) => Ok(m),
            Err(StorageError::Corrupt { detail, .. }) => {
                let len = self.fs.read(path).map_or(0, |b| b.len() as u64);
                let sink = DamageSink::new(self.quarantine.clone(), name, self.opening);
                sink.report(sink.finding(
                    DamageKind::Manifest,
                    path,
                    (0, len),
                    self.opening,
                    &format!(
                        "{detail}: manifest rebuilt (not paused; next position from the log and channels)"
                    ),
                ))?;
                let mut m = Manifest::new(name);
                m.unrouted_from_position = Some(1);
                meta::write_manifest(self.fs.as_ref(), path, &m)?;
                *rebuilt = true;
                Ok(m)
            }
            Err(e) => Err(e),
        }
    }

    /// The quarantine ledger of this data directory.
    pub fn quarantine(&self) -> &Quarantine {
        &self.quarantine
    }

    /// Releases the directory lock (graceful shutdown); later writes are refused.
    pub fn release_lock(&self) {
        self.fault.close("store closed".into());
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// The shared fail-closed switch.
    pub fn fault(&self) -> &Fault {
        &self.fault
    }

    /// The file system in use.
    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    /// Reserves `n` contiguous message ids and returns the first; the reservation is persisted
    /// in blocks before any id of a new block is handed out.
    pub fn allocate_ids(&self, n: u64) -> Result<u64, StorageError> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.next + n > MAX_SEQUENCE {
            return Err(StorageError::SequenceExhausted);
        }
        if ids.next + n > ids.reserved_until {
            self.fault.check()?;
            let mut m = ids.meta.clone();
            m.next_sequence = ids.next + n.max(ID_BLOCK);
            let r = meta::write_checked_at(
                self.fs.as_ref(),
                &self.root.join("broker.meta"),
                &m,
                "ids_after_file_fsync_before_rename",
            );
            self.fault.guard(r)?;
            ids.reserved_until = m.next_sequence;
            ids.meta = m;
        }
        let first = ids.next;
        ids.next += n;
        Ok((u64::from(self.opts.node_id) << 48) | first)
    }

    /// Whether [`Store::allocate_ids`] can hand out `n` ids from the block already reserved,
    /// without writing (and fsyncing) the broker metadata.
    pub fn ids_reserved(&self, n: u64) -> bool {
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.next + n <= ids.reserved_until
    }

    /// Durably bumps the registry revision and returns it.
    pub fn bump_revision(&self) -> Result<u64, StorageError> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        self.fault.check()?;
        let mut m = ids.meta.clone();
        m.registry_revision += 1;
        let r = meta::write_checked(self.fs.as_ref(), &self.root.join("broker.meta"), &m);
        self.fault.guard(r)?;
        ids.meta = m;
        Ok(ids.meta.registry_revision)
    }

    /// Writes a protective-eviction audit record atomically (before any deletion).
    pub fn write_eviction_audit(
        &self,
        audit: &crate::audit::EvictionAudit,
    ) -> Result<PathBuf, StorageError> {
        self.fault.check()?;
        let r = crate::audit::write(self.fs.as_ref(), &self.root, audit);
        self.fault.guard(r)
    }

    /// Current registry revision.
    pub fn revision(&self) -> u64 {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .meta
            .registry_revision
    }

    fn topic_dir(&self, topic: &str) -> PathBuf {
        self.root.join("topics").join(hex(topic))
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory holding a topic's channel files.
    pub fn channels_dir(&self, topic: &str) -> PathBuf {
        self.topic_dir(topic).join("channels")
    }

    /// Creates a topic's directory and manifest and opens its (empty) log.
    pub fn create_topic(&self, manifest: &Manifest) -> Result<TopicLog, StorageError> {
        self.fault.check()?;
        let r = (|| {
            let dir = self.topic_dir(&manifest.name);
            for d in [dir.join("segments"), dir.join("channels")] {
                self.fs
                    .create_dir_all(&d)
                    .map_err(io_err("create directory", &d))?;
            }
            meta::write_manifest(self.fs.as_ref(), &dir.join("manifest"), manifest)?;
            let topics = self.root.join("topics");
            self.fs
                .sync_dir(&topics)
                .map_err(io_err("fsync directory", &topics))?;
            TopicLog::open(
                self.fs.clone(),
                &dir.join("segments"),
                self.fault.clone(),
                self.opts.max_segment_bytes,
                manifest.next_position,
                self.opts.page_cache.clone(),
                DamageSink::new(self.quarantine.clone(), manifest.name.clone(), self.opening),
            )
        })();
        self.fault.guard(r)
    }

    /// The tiered record of `topic` (docs/storage-format.md, "Tiered record"); `Ok(None)` when
    /// it has none. `Corrupt` when it is damaged: the caller may start a new one (the objects
    /// it listed are uploaded again).
    pub fn read_tiered(&self, topic: &str) -> Result<Option<crate::TieredRecord>, StorageError> {
        crate::tiered::read(self.fs.as_ref(), &self.topic_dir(topic))
    }

    /// The deleted topics' lives whose objects are still to be deleted from the bucket
    /// (docs/storage-format.md, "Deleted incarnations"), each with its file; a damaged one as
    /// its error.
    pub fn deleted_incarnations(&self) -> Result<Vec<crate::ListedIntent>, StorageError> {
        crate::tiered_deleted::list(self.fs.as_ref(), &self.root)
    }

    /// Forgets a deleted topic's life once its objects are gone from the bucket.
    pub fn remove_deleted_incarnation(
        &self,
        d: &crate::DeletedIncarnation,
    ) -> Result<(), StorageError> {
        self.fault.check()?;
        let r = crate::tiered_deleted::remove(self.fs.as_ref(), &self.root, d);
        self.fault.guard(r)
    }

    /// Replaces the tiered record of its topic atomically; a failure isolates storage like any
    /// other write.
    ///
    /// A record listing an evicted segment is refused (nothing written, storage not isolated)
    /// unless `COMPATIBILITY` already fences out binaries that read below
    /// [`LOCAL_RETENTION_LEVEL`]: the fence comes before the first eviction.
    pub fn write_tiered(&self, record: &crate::TieredRecord) -> Result<(), StorageError> {
        if self.minimum_reader_level() < LOCAL_RETENTION_LEVEL
            && record.segments.iter().any(|s| s.evicted)
        {
            return Err(incompatible(format!(
                "topic {:?}: recording a segment evicted by local retention needs storage \
                 feature level {LOCAL_RETENTION_LEVEL}, but this data directory admits readers \
                 from level {}; set storage.feature_level = {LOCAL_RETENTION_LEVEL}",
                record.topic,
                self.minimum_reader_level()
            )));
        }
        self.fault.check()?;
        let r = crate::tiered::write(self.fs.as_ref(), &self.topic_dir(&record.topic), record);
        self.fault.guard(r)
    }

    /// Atomically rewrites a topic manifest.
    pub fn write_manifest(&self, manifest: &Manifest) -> Result<(), StorageError> {
        self.fault.check()?;
        let r = meta::write_manifest(
            self.fs.as_ref(),
            &self.topic_dir(&manifest.name).join("manifest"),
            manifest,
        );
        self.fault.guard(r)
    }

    /// Deletes a topic: records the intent to delete its objects from the bucket when it has
    /// a tiered record, marks the manifest deleted, then removes its directory. The intent is
    /// durable before anything else goes, so the objects are never forgotten (a damaged record
    /// names no incarnation: its objects are left in the bucket).
    pub fn delete_topic(&self, manifest: &Manifest) -> Result<(), StorageError> {
        self.fault.check()?;
        let dir = self.topic_dir(&manifest.name);
        if let Ok(Some(record)) = crate::tiered::read(self.fs.as_ref(), &dir)
            && let Some(intent) = crate::tiered_deleted::DeletedIncarnation::of(&record)
        {
            let r = crate::tiered_deleted::write(self.fs.as_ref(), &self.root, &intent);
            self.fault.guard(r)?;
        }
        crash_failpoint("delete_topic_after_tiered_intent");
        let mut m = manifest.clone();
        m.deleted = true;
        self.write_manifest(&m)?;
        crash_failpoint("delete_topic_before_directory_removal");
        let r = (|| {
            let dir = self.topic_dir(&m.name);
            self.fs
                .remove_dir_all(&dir)
                .map_err(io_err("remove topic", &dir))?;
            let topics = self.root.join("topics");
            self.fs
                .sync_dir(&topics)
                .map_err(io_err("fsync directory", &topics))
        })();
        self.fault.guard(r)
    }

    /// Creates a durable channel's WAL and checkpoint.
    pub fn create_channel(
        &self,
        topic: &str,
        state: &ChannelState,
    ) -> Result<ChannelWal, StorageError> {
        ChannelWal::create(
            self.fs.clone(),
            &self.channels_dir(topic),
            state,
            self.fault.clone(),
        )
    }
}
