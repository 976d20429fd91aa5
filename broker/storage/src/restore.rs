//! The storage side of tiered storage's checkpoints and of `rustqueued storage restore
//! --from-bucket` (docs/tiering.md, "Restoring a lost volume").
//!
//! ```text
//! uploader   read_topic_files: a topic's manifest and each channel's durable state, read only
//! restore    prepare ─▶ (the engine downloads each segment into segments_dir) ─▶ check_segment
//!            ─▶ write_topic (channels, empty active segment, tiered record, manifest last)
//!            ─▶ finish (FORMAT, COMPATIBILITY, broker.meta, then opened and scrubbed as repair)
//! ```
//!
//! Everything here is synchronous file work; the bucket is the engine's. A restore cut short
//! leaves topics but no `FORMAT`, which a start refuses, so a half-restored directory is never
//! served: run the restore again with `--force`.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::channel::ChannelState;
use crate::fs::Fs;
use crate::log::index;
use crate::log::scan::walk;
use crate::meta::{self, Compatibility, FormatFile, Manifest, hex, unhex};
use crate::offline::RepairReport;
use crate::tiered::TieredRecord;
use crate::{StorageError, io_err, wal};

/// Names a fresh volume may hold besides nothing: the lost+found of a new ext4 file system, and
/// the lock file a refused start leaves behind.
const ALLOWED_IN_EMPTY: [&str; 2] = ["lost+found", ".rustqueue.lock"];

/// A topic's manifest and every durable channel's state, as the files on disk say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicFiles {
    /// The manifest (its `next_position` is a lower bound, not the head).
    pub manifest: Manifest,
    /// Each durable channel's state: checkpoint plus whole WAL frames; by name.
    pub channels: Vec<ChannelState>,
}

/// Reads `topic`'s manifest and channel states under `root` without writing anything (the
/// checkpoint uploader, while the broker runs). A channel whose files are half there (being
/// created or deleted) is left out; a damaged checkpoint is an error for this topic.
pub fn read_topic_files(fs: &dyn Fs, root: &Path, topic: &str) -> Result<TopicFiles, StorageError> {
    let dir = root.join("topics").join(hex(topic));
    let manifest = meta::read_manifest(fs, &dir.join("manifest"))?;
    let cdir = dir.join("channels");
    let mut names: Vec<String> = if fs.exists(&cdir) {
        fs.list(&cdir)
            .map_err(io_err("list", &cdir))?
            .into_iter()
            .filter_map(|f| unhex(f.strip_suffix(".checkpoint")?))
            .filter(|n| !n.ends_with("#ephemeral"))
            .collect()
    } else {
        Vec::new()
    };
    names.sort();
    let mut channels = Vec::with_capacity(names.len());
    for name in names {
        let (w, c) = wal::paths(&cdir, &name);
        if !(fs.exists(&w) && fs.exists(&c)) {
            continue;
        }
        match wal::read_state(fs, &cdir, &name) {
            Ok(state) => channels.push(state),
            // Deleted between the listing and the read.
            Err(StorageError::Io { ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(TopicFiles { manifest, channels })
}

/// The file naming the data directory's identity in the bucket's catalog.
pub const VOLUME_FILE: &str = "tiering.volume";

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeFile {
    volume: String,
}

/// The data directory's volume id (`tiering.volume`), written with `new_id` first when it has
/// none. The node's catalog carries it: a broker replaces a catalog only when it is its own
/// directory's (or names no topic), so a broker started on an empty directory after a volume
/// was lost never replaces the catalog the restore needs.
pub fn volume_id(fs: &dyn Fs, root: &Path, new_id: &str) -> Result<String, StorageError> {
    let path = root.join(VOLUME_FILE);
    if fs.exists(&path) {
        let v: VolumeFile = meta::read_checked_strict(fs, &path)?;
        return Ok(v.volume);
    }
    write_volume_id(fs, root, new_id)?;
    Ok(new_id.to_owned())
}

/// Writes the volume id (a restore keeps the id of the catalog it restored from).
pub fn write_volume_id(fs: &dyn Fs, root: &Path, id: &str) -> Result<(), StorageError> {
    meta::write_checked(
        fs,
        &root.join(VOLUME_FILE),
        &VolumeFile {
            volume: id.to_owned(),
        },
    )
}

/// What a sealed segment holds, from its records or its index header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Its messages.
    pub messages: u64,
    /// Position of its first message (`None`: empty).
    pub first_position: Option<u64>,
    /// Position of its last message.
    pub last_position: Option<u64>,
    /// Log index of its last record (the next segment's base is one more).
    pub last_log_index: u64,
}

/// The summary in the header of a `.rqidx` of the segment `base` whose `.rqlog` is
/// `segment_len` bytes; `None` when the header fails its CRC or describes another segment.
pub fn index_summary(bytes: &[u8], base: u64, segment_len: u64) -> Option<SegmentSummary> {
    let mem = crate::memfs::MemFs::new();
    let f = mem.open(Path::new("/index"), true).ok()?;
    f.write_at(&[std::io::IoSlice::new(bytes)], 0).ok()?;
    let s = index::read_summary(f.as_ref(), base, segment_len).ok()??;
    Some(SegmentSummary {
        messages: u64::from(s.count),
        first_position: (s.count > 0).then_some(s.first_position),
        last_position: (s.count > 0).then_some(s.last_position),
        last_log_index: s.last_log_index,
    })
}

/// Checks a downloaded sealed segment record by record (every record's CRC, framing and
/// log-index order, nothing after the last record) and, when `index` is there, that its
/// header and directory describe exactly those records. `Err` says what is damaged: such a
/// segment must not be used.
pub fn check_segment(
    fs: &dyn Fs,
    log: &Path,
    base: u64,
    index_path: Option<&Path>,
) -> Result<SegmentSummary, String> {
    let file = fs.open(log, false).map_err(|e| e.to_string())?;
    let len = file.len().map_err(|e| e.to_string())?;
    let w =
        walk(file.as_ref(), log, base, len, false, None, &mut |_| {}).map_err(|e| e.to_string())?;
    if let Some(d) = w.damages.first() {
        return Err(format!(
            "damaged records at bytes {}..{} ({} whole records)",
            d.range.0, d.range.1, w.records
        ));
    }
    if w.end < len {
        return Err(format!(
            "{} bytes after the last whole record at offset {}",
            len - w.end,
            w.end
        ));
    }
    let Some(last_log_index) = w.last_log_index else {
        return Err("no record".into());
    };
    let summary = SegmentSummary {
        messages: w.entries.len() as u64,
        first_position: w.entries.first().map(|e| e.position),
        last_position: w.entries.last().map(|e| e.position),
        last_log_index,
    };
    if let Some(ip) = index_path {
        let bytes = fs.read(ip).map_err(|e| e.to_string())?;
        if index_summary(&bytes, base, len) != Some(summary) {
            return Err(format!(
                "its index {} does not describe its records",
                ip.display()
            ));
        }
    }
    Ok(summary)
}

/// What a data directory holds, as `storage restore --if-empty` decides on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryState {
    /// Missing, or nothing but a new volume's `lost+found` and a lock file: a restore fills it.
    Empty,
    /// It has a `FORMAT` file: a broker's data directory (a start writes `FORMAT` first, a
    /// restore last).
    Formatted,
    /// Files but no `FORMAT` (these names, at most five): a restore cut short, or something
    /// that is not a data directory. Neither a start nor `--if-empty` touches it.
    Unformatted(Vec<String>),
}

/// What `root` holds (see [`DirectoryState`]); reads the directory's names only.
pub fn directory_state(fs: &dyn Fs, root: &Path) -> Result<DirectoryState, StorageError> {
    if !fs.exists(root) {
        return Ok(DirectoryState::Empty);
    }
    if fs.exists(&root.join("FORMAT")) {
        return Ok(DirectoryState::Formatted);
    }
    let mut present: Vec<String> = fs
        .list(root)
        .map_err(io_err("list", root))?
        .into_iter()
        .filter(|n| !ALLOWED_IN_EMPTY.contains(&n.as_str()))
        .collect();
    if present.is_empty() {
        return Ok(DirectoryState::Empty);
    }
    present.sort();
    present.truncate(5);
    Ok(DirectoryState::Unformatted(present))
}

/// Holds the data directory's lock for the length of a restore.
pub struct RestoreLock {
    _lock: Box<dyn Any + Send + Sync>,
}

/// Readies `root` for a restore and locks it: it must be missing or empty (a new volume's
/// `lost+found` aside) unless `force`, which first removes everything in it. Refused while a
/// broker holds the directory.
pub fn prepare(fs: &dyn Fs, root: &Path, force: bool) -> Result<RestoreLock, StorageError> {
    fs.create_dir_all(root)
        .map_err(io_err("create directory", root))?;
    let present: Vec<String> = fs
        .list(root)
        .map_err(io_err("list", root))?
        .into_iter()
        .filter(|n| !ALLOWED_IN_EMPTY.contains(&n.as_str()))
        .collect();
    if !present.is_empty() && !force {
        let mut shown = present.clone();
        shown.sort();
        shown.truncate(5);
        return Err(StorageError::Incompatible(format!(
            "{} is not empty (it holds {}): a restore only fills an empty data directory. \
             Check that it is the right path and that nothing in it is needed, then remove its \
             contents or run the restore again with --force, which deletes them first",
            root.display(),
            shown.join(", ")
        )));
    }
    let lock = crate::store::lock_data_dir(fs, root)?;
    for name in present {
        let path = root.join(&name);
        let removed = fs.remove_dir_all(&path).or_else(|_| fs.remove_file(&path));
        removed.map_err(io_err("remove before restore", &path))?;
    }
    fs.sync_dir(root).map_err(io_err("fsync directory", root))?;
    Ok(RestoreLock { _lock: lock })
}

/// The segments directory of `topic` under `root`, created if missing.
pub fn segments_dir(fs: &dyn Fs, root: &Path, topic: &str) -> Result<PathBuf, StorageError> {
    let dir = root.join("topics").join(hex(topic)).join("segments");
    fs.create_dir_all(&dir)
        .map_err(io_err("create directory", &dir))?;
    Ok(dir)
}

/// The path of segment `base`'s file with extension `ext` (`rqlog`, `rqidx`) in `dir`.
pub fn segment_file(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!("segment-{base:020}.{ext}"))
}

/// What a restored topic gets beside its downloaded segments.
#[derive(Clone, Debug)]
pub struct RestoredTopic {
    /// Its manifest (`next_position` past every position the topic is known to have used).
    pub manifest: Manifest,
    /// Its durable channels' states.
    pub channels: Vec<ChannelState>,
    /// The base of the new, empty active segment: one past the last restored record's log
    /// index (1 when nothing was restored).
    pub next_log_index: u64,
    /// The tiered record to continue uploading under (its incarnation), or `None` to start a
    /// new incarnation at the first upload.
    pub tiered: Option<TieredRecord>,
}

/// Writes a restored topic's files beside its segments: an empty active segment, each
/// channel (empty WAL, then checkpoint), the tiered record, and the manifest last (a topic
/// directory without a manifest is removed at startup, so a topic cut short is not served).
pub fn write_topic(fs: Arc<dyn Fs>, root: &Path, t: &RestoredTopic) -> Result<(), StorageError> {
    let dir = root.join("topics").join(hex(&t.manifest.name));
    let sdir = segments_dir(fs.as_ref(), root, &t.manifest.name)?;
    let active = segment_file(&sdir, t.next_log_index, "rqlog");
    if !fs.exists(&active) {
        let f = fs.open(&active, true).map_err(io_err("create", &active))?;
        f.sync_all().map_err(io_err("fsync", &active))?;
    }
    fs.sync_dir(&sdir)
        .map_err(io_err("fsync directory", &sdir))?;
    let cdir = dir.join("channels");
    fs.create_dir_all(&cdir)
        .map_err(io_err("create directory", &cdir))?;
    for state in &t.channels {
        wal::ChannelWal::create(fs.clone(), &cdir, state, crate::Fault::default())?;
    }
    if let Some(record) = &t.tiered {
        crate::tiered::write(fs.as_ref(), &dir, record)?;
    }
    meta::write_manifest(fs.as_ref(), &dir.join("manifest"), &t.manifest)?;
    let topics = root.join("topics");
    fs.sync_dir(&topics)
        .map_err(io_err("fsync directory", &topics))
}

/// Writes the volume id of the catalog restored from, `FORMAT`, `COMPATIBILITY` (the lowest
/// level the restored records need) and `broker.meta` for `node_id` (ids resume
/// [`crate::offline::REBUILT_SEQUENCE_SKIP`] past the highest restored one, so no id handed
/// out before the loss is reused), releases the lock, then opens the directory as a start
/// would and scrubs it ([`crate::offline::repair`]): what that finds is in the report.
pub fn finish(
    fs: Arc<dyn Fs>,
    root: &Path,
    node_id: u16,
    volume: &str,
    lock: RestoreLock,
) -> Result<RepairReport, StorageError> {
    write_volume_id(fs.as_ref(), root, volume)?;
    let (level, _) = crate::offline::lowest_safe_level(fs.as_ref(), root)?;
    let (highest, _) = crate::offline::highest_stored_sequence(fs.as_ref(), root, node_id)?;
    let broker_meta = crate::offline::rebuilt_broker_meta(node_id, highest)?;
    meta::write_checked(
        fs.as_ref(),
        &root.join("FORMAT"),
        &FormatFile {
            version: meta::FORMAT_VERSION,
        },
    )?;
    meta::write_checked(
        fs.as_ref(),
        &root.join("COMPATIBILITY"),
        &Compatibility {
            data_format: meta::FORMAT_VERSION,
            active_writer_feature_level: level,
            minimum_reader_feature_level: level,
            generation: u64::from(level),
        },
    )?;
    meta::write_checked(fs.as_ref(), &root.join("broker.meta"), &broker_meta)?;
    drop(lock);
    crate::offline::repair(fs, root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    #[test]
    fn prepare_refuses_a_directory_with_data_unless_forced_and_then_empties_it() {
        let fs = SimFs::new();
        let root = Path::new("/d");
        fs.create_dir_all(&root.join("lost+found")).unwrap();
        prepare(&fs, root, false).expect("lost+found alone is an empty volume");
        fs.create_dir_all(&root.join("topics/74")).unwrap();
        let err = prepare(&fs, root, false).err().unwrap().to_string();
        assert!(
            err.contains("is not empty") && err.contains("--force"),
            "{err}"
        );
        assert!(
            fs.exists(&root.join("topics/74")),
            "nothing removed without --force"
        );
        drop(prepare(&fs, root, true).unwrap());
        assert!(!fs.exists(&root.join("topics")));
        assert!(fs.exists(&root.join("lost+found")));
    }

    #[test]
    fn a_channel_state_read_from_disk_applies_the_wal_after_its_checkpoint() {
        let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
        let root = Path::new("/d");
        let cdir = root.join("topics").join(hex("t")).join("channels");
        fs.create_dir_all(&cdir).unwrap();
        meta::write_manifest(
            fs.as_ref(),
            &root.join("topics").join(hex("t")).join("manifest"),
            &Manifest::new("t"),
        )
        .unwrap();
        let mut w = wal::ChannelWal::create(
            fs.clone(),
            &cdir,
            &ChannelState::new("c", 1),
            crate::Fault::default(),
        )
        .unwrap();
        let fin = |position| crate::ChannelCommand::Finish {
            position,
            id: position,
        };
        w.append(&[fin(1), fin(2), fin(4)]).unwrap();
        w.sync().unwrap();
        let got = read_topic_files(fs.as_ref(), root, "t").unwrap();
        assert_eq!(got.manifest.name, "t");
        assert_eq!(got.channels.len(), 1);
        let c = &got.channels[0];
        assert_eq!(
            (c.ack_floor, c.acked.iter().copied().collect::<Vec<_>>()),
            (2, vec![4])
        );
    }
}
