//! An in-memory file system for logs that are never meant to survive the process.
//!
//! `#ephemeral` topics keep their segments here: the same [`TopicLog`](crate::TopicLog) code
//! runs over it, but nothing is durable, so `sync_*` are no-ops and there is no crash image,
//! failure injection or lock contention (those belong to the test simulator). A removed file's
//! bytes are freed as soon as the last open handle to it is dropped.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::fs::{Fs, FsFile};

/// Files and directories held in memory; clones share the same tree.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    tree: Arc<Mutex<Tree>>,
}

#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<PathBuf, Arc<MemFile>>,
    dirs: BTreeSet<PathBuf>,
}

#[derive(Debug, Default)]
struct MemFile {
    bytes: RwLock<Vec<u8>>,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl MemFile {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        self.bytes.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
        self.bytes.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl FsFile for MemFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.read().len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bytes = self.read();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = bytes
            .get(start..)
            .and_then(|rest| rest.get(..buf.len()))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        crate::fs::write_into(&mut self.write(), bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.write()
            .truncate(usize::try_from(len).unwrap_or(usize::MAX));
        Ok(())
    }
}

impl Fs for MemFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        let mut tree = self.tree();
        if let Some(f) = tree.files.get(path) {
            return Ok(f.clone());
        }
        if !create {
            return Err(not_found(path));
        }
        let f = Arc::new(MemFile::default());
        tree.files.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.tree().files.get(path).cloned();
        Ok(f.ok_or_else(|| not_found(path))?.read().clone())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        let f = tree.files.remove(from).ok_or_else(|| not_found(from))?;
        tree.files.insert(to.to_path_buf(), f);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.tree()
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        for a in path.ancestors() {
            tree.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        tree.files.retain(|p, _| !p.starts_with(path));
        tree.dirs.retain(|p| !p.starts_with(path));
        Ok(())
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        let tree = self.tree();
        let mut names = BTreeSet::new();
        for p in tree.files.keys().chain(tree.dirs.iter()) {
            if let Ok(rest) = p.strip_prefix(path)
                && let Some(first) = rest.components().next()
            {
                names.insert(first.as_os_str().to_string_lossy().into_owned());
            }
        }
        Ok(names.into_iter().collect())
    }
    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let tree = self.tree();
        tree.files.contains_key(path) || tree.dirs.contains(path)
    }
    fn lock(&self, _path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        // One process owns the tree; there is no other holder to exclude.
        Ok(Box::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_read_back_and_truncation_drops_the_tail() {
        let fs = MemFs::new();
        let f = fs.open(Path::new("/d/a"), true).unwrap();
        f.append(&[IoSlice::new(b"hello "), IoSlice::new(b"world")])
            .unwrap();
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        f.truncate(5).unwrap();
        assert_eq!(fs.read(Path::new("/d/a")).unwrap(), b"hello");
        let err = f.read_exact_at(&mut buf, 3).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn directories_list_their_direct_entries_and_removal_forgets_them() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/t/segments")).unwrap();
        fs.open(Path::new("/t/segments/a.tmp"), true).unwrap();
        fs.rename(Path::new("/t/segments/a.tmp"), Path::new("/t/segments/b"))
            .unwrap();
        assert_eq!(fs.list(Path::new("/t")).unwrap(), vec!["segments"]);
        assert_eq!(fs.list(Path::new("/t/segments")).unwrap(), vec!["b"]);
        assert!(fs.open(Path::new("/t/segments/a.tmp"), false).is_err());
        fs.remove_file(Path::new("/t/segments/b")).unwrap();
        assert!(!fs.exists(Path::new("/t/segments/b")));
        fs.remove_dir_all(Path::new("/t")).unwrap();
        assert!(!fs.exists(Path::new("/t/segments")));
    }

    #[test]
    fn a_removed_file_is_freed_once_its_last_handle_drops() {
        let fs = MemFs::new();
        let f = fs.open(Path::new("/a"), true).unwrap();
        f.append(&[IoSlice::new(&[7; 64])]).unwrap();
        let weak = {
            let tree = fs.tree();
            Arc::downgrade(tree.files.get(Path::new("/a")).unwrap())
        };
        fs.remove_file(Path::new("/a")).unwrap();
        assert_eq!(f.len().unwrap(), 64, "an open handle still reads its bytes");
        drop(f);
        assert!(weak.upgrade().is_none());
    }
}
