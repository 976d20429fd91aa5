//! Shared helpers for the engine integration tests: a configuration with the disk guard off
//! and [`HookFs`], the real file system with hooks that count, slow, fail or hold calls.

#![allow(dead_code)]

use std::any::Any;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustqueue_engine::EngineConfig;
use rustqueue_storage::{Fs, FsFile, RealFs};

pub mod tiering;

/// Defaults on `dir`, with an explicit disk guard so a nearly full CI host never throttles.
pub fn cfg(dir: &Path) -> EngineConfig {
    EngineConfig {
        data_path: dir.to_path_buf(),
        disk_high_watermark_percent: 100,
        disk_low_watermark_percent: 99,
        min_free_bytes: 0,
        ..EngineConfig::default()
    }
}

/// fsync counts per kind of file, shared by every file the [`CountingFs`] opened.
#[derive(Default)]
pub struct Syncs {
    /// fdatasync/fsync of topic segments (`.rqlog`).
    pub segment: AtomicU64,
    /// fdatasync/fsync of channel WALs (`.wal`).
    pub wal: AtomicU64,
    /// Atomic renames onto a channel checkpoint (`.checkpoint`).
    pub checkpoints: AtomicU64,
}

impl Syncs {
    pub fn segment(&self) -> u64 {
        self.segment.load(Ordering::SeqCst)
    }
    pub fn wal(&self) -> u64 {
        self.wal.load(Ordering::SeqCst)
    }
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::SeqCst)
    }
}

/// What a [`HookFs`] does before the real file system's calls; every hook defaults to nothing.
pub trait Hooks: Send + Sync + 'static {
    /// Before a positional read of the file at `path`.
    fn read(&self, _path: &Path) {}
    /// Before an fsync/fdatasync of the file at `path`; an error fails the sync.
    fn sync(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Before a rename onto `to`.
    fn rename(&self, _to: &Path) {}
}

/// The real file system with test hooks (counting, slowing, failing or holding calls).
pub struct HookFs<H>(pub Arc<H>);

struct HookFile<H> {
    file: Arc<dyn FsFile>,
    path: PathBuf,
    hooks: Arc<H>,
}

impl<H: Hooks> FsFile for HookFile<H> {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.hooks.read(&self.path);
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        self.file.write_at(bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.hooks.sync(&self.path)?;
        self.file.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.hooks.sync(&self.path)?;
        self.file.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.truncate(len)
    }
}

impl<H: Hooks> Fs for HookFs<H> {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        Ok(Arc::new(HookFile {
            file: RealFs.open(path, create)?,
            path: path.to_path_buf(),
            hooks: self.0.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(to);
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealFs.create_dir_all(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_dir_all(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        RealFs.list(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        RealFs.lock(path)
    }
    fn zero_fill_ahead(&self) -> bool {
        RealFs.zero_fill_ahead()
    }
}

fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension().is_some_and(|e| e == ext)
}

/// Counts fsyncs by file kind; a segment fsync takes at least `segment_delay` (a disk slower
/// than tmpfs, so concurrent publishers really overlap one).
pub struct Counting {
    syncs: Arc<Syncs>,
    segment_delay: Duration,
}

impl Hooks for Counting {
    fn sync(&self, path: &Path) -> io::Result<()> {
        if has_extension(path, "rqlog") {
            self.syncs.segment.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.segment_delay);
        } else if has_extension(path, "wal") {
            self.syncs.wal.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn rename(&self, to: &Path) {
        if has_extension(to, "checkpoint") {
            self.syncs.checkpoints.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The real file system, counting fsyncs (see [`Counting`]).
pub type CountingFs = HookFs<Counting>;

impl HookFs<Counting> {
    pub fn new(segment_delay: Duration) -> (Arc<CountingFs>, Arc<Syncs>) {
        let syncs = Arc::new(Syncs::default());
        let hooks = Counting {
            syncs: syncs.clone(),
            segment_delay,
        };
        (Arc::new(HookFs(Arc::new(hooks))), syncs)
    }
}

/// Segment files (`.rqlog`) of topic `t` under `dir`, sorted (their names carry the base).
pub fn segment_files(dir: &Path) -> Vec<String> {
    let seg = dir
        .join("topics")
        .join(rustqueue_storage::testing::hex("t"))
        .join("segments");
    let mut v: Vec<String> = std::fs::read_dir(seg)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rqlog"))
        .collect();
    v.sort();
    v
}

/// Polls `cond` every 5 ms until it holds; panics with `what` after `secs` seconds.
pub async fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    wait_until(secs, what, async || cond()).await;
}

/// [`wait_for`] with a condition that also says what it saw; the timeout names the last.
pub async fn wait_for_seen(secs: u64, what: &str, mut cond: impl FnMut() -> (bool, String)) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (done, seen) = cond();
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s: {what}; last seen: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// [`wait_for`] with a condition that awaits (a look into the bucket, say).
pub async fn wait_until(secs: u64, what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
