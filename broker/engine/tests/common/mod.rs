//! Shared helpers for the engine integration tests: a configuration with the disk guard off
//! and a file system wrapper that counts (and can slow down) fsyncs by file kind.

#![allow(dead_code)]

use std::any::Any;
use std::io::{self, IoSlice};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustqueue_engine::EngineConfig;
use rustqueue_storage::{Fs, FsFile, RealFs};

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

/// The real file system, counting fsyncs; a segment fsync takes at least `segment_delay`
/// (a disk slower than tmpfs, so concurrent publishers really overlap one).
pub struct CountingFs {
    pub syncs: Arc<Syncs>,
    pub segment_delay: Duration,
}

impl CountingFs {
    pub fn new(segment_delay: Duration) -> (Arc<CountingFs>, Arc<Syncs>) {
        let syncs = Arc::new(Syncs::default());
        let fs = CountingFs {
            syncs: syncs.clone(),
            segment_delay,
        };
        (Arc::new(fs), syncs)
    }
}

struct CountingFile {
    file: Arc<dyn FsFile>,
    counter: Option<(Arc<Syncs>, bool)>,
    delay: Duration,
}

impl CountingFile {
    fn count(&self) {
        if let Some((s, segment)) = &self.counter {
            if *segment {
                s.segment.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(self.delay);
            } else {
                s.wal.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

impl FsFile for CountingFile {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn append(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.file.append(bufs)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.count();
        self.file.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.count();
        self.file.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.truncate(len)
    }
}

impl Fs for CountingFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let counter = match ext {
            "rqlog" => Some((self.syncs.clone(), true)),
            "wal" => Some((self.syncs.clone(), false)),
            _ => None,
        };
        Ok(Arc::new(CountingFile {
            file: RealFs.open(path, create)?,
            counter,
            delay: self.segment_delay,
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if to.extension().is_some_and(|e| e == "checkpoint") {
            self.syncs.checkpoints.fetch_add(1, Ordering::SeqCst);
        }
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
}

/// Polls `cond` every 5 ms until it holds; panics with `what` after `secs` seconds.
pub async fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
