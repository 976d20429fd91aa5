//! A simulated, crashable file system for fault-injection tests.
//!
//! Each file keeps two images: `current` (what reads see) and `durable` (what survives a
//! crash, updated by `sync_data`/`sync_all`). Directory entries likewise have a current and a
//! durable map, updated by `sync_dir`. [`SimFs::crash`] throws away everything not durable,
//! optionally keeping a random prefix of each file's unsynced tail (a torn write).
//! [`SimFs::fail_after`] makes the N-th mutating operation and every later one fail, which is
//! how a test "kills the process" at an exact persistence step.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::{Fs, FsFile};

#[derive(Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Default)]
struct State {
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    current: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    /// Mutating operations left before the simulated process dies; `None` = unlimited.
    budget: Option<u64>,
    dead: bool,
    ops: u64,
    locked: BTreeSet<PathBuf>,
    generation: u64,
}

/// The simulated file system; clones share state.
#[derive(Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

fn injected() -> io::Error {
    io::Error::other("simulated I/O failure")
}

impl SimFs {
    /// An empty file system.
    pub fn new() -> SimFs {
        SimFs::default()
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets `n` more mutating operations succeed; the next one and all later ones fail.
    pub fn fail_after(&self, n: u64) {
        let mut s = self.st();
        s.budget = Some(n);
        s.dead = false;
    }

    /// Number of mutating operations performed so far.
    pub fn ops(&self) -> u64 {
        self.st().ops
    }

    /// Whether the injected failure has fired.
    pub fn failed(&self) -> bool {
        self.st().dead
    }

    /// Simulates power loss: unsynced data and directory changes vanish. `tear` picks, per file
    /// with an unsynced tail, how many of those bytes survive (a torn write); return 0 to drop.
    /// Also clears failure injection and locks (the process is gone).
    pub fn crash(&self, tear: &mut dyn FnMut(usize) -> usize) {
        let mut s = self.st();
        s.current = s.durable.clone();
        for inode in s.inodes.values_mut() {
            // Unsynced writes start where the two images first differ: an append past the
            // durable end, or a write over durable bytes (a segment's zeros ahead of its
            // tail). A prefix of them survives; beyond it the durable bytes stay.
            let same = inode
                .current
                .iter()
                .zip(&inode.durable)
                .take_while(|(a, b)| a == b)
                .count();
            let mut next = inode.durable.clone();
            if inode.current.len() > same {
                let tail = &inode.current[same..];
                let keep = tear(tail.len()).min(tail.len());
                next.truncate(same);
                next.extend_from_slice(&tail[..keep]);
                if let Some(rest) = inode.durable.get(same + keep..) {
                    next.extend_from_slice(rest);
                }
            }
            inode.current = next.clone();
            inode.durable = next;
        }
        let live: BTreeSet<u64> = s.current.values().copied().collect();
        s.inodes.retain(|k, _| live.contains(k));
        s.budget = None;
        s.dead = false;
        s.locked.clear();
        s.generation += 1;
    }

    /// Overwrites bytes of a file in place in both images (to simulate media corruption).
    pub fn corrupt(&self, path: &Path, offset: usize, byte: u8) {
        let mut s = self.st();
        if let Some(id) = s.current.get(path).copied()
            && let Some(inode) = s.inodes.get_mut(&id)
        {
            if let Some(b) = inode.current.get_mut(offset) {
                *b = byte;
            }
            if let Some(b) = inode.durable.get_mut(offset) {
                *b = byte;
            }
        }
    }

    /// Every path currently present (for diagnostics).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.st().current.keys().cloned().collect()
    }
}

impl State {
    fn mutate(&mut self) -> io::Result<()> {
        if self.dead {
            return Err(injected());
        }
        if let Some(b) = self.budget {
            if b == 0 {
                self.dead = true;
                return Err(injected());
            }
            self.budget = Some(b - 1);
        }
        self.ops += 1;
        Ok(())
    }
}

/// An open file. A handle opened before a [`SimFs::crash`] belongs to the process that
/// crashed: every later operation on it fails and changes nothing, as a dead process's file
/// descriptors do. (Without that, a handle the crashed engine still held, dropped later on
/// another thread, could write into the files the next engine is recovering.)
struct SimFile {
    fs: SimFs,
    inode: u64,
    generation: u64,
}

fn crashed_handle() -> io::Error {
    io::Error::other("simulated crash: this file handle belonged to the crashed process")
}

impl SimFile {
    /// The file system's state, if this handle outlived no crash.
    fn st(&self) -> io::Result<MutexGuard<'_, State>> {
        let s = self.fs.st();
        if s.generation == self.generation {
            Ok(s)
        } else {
            Err(crashed_handle())
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inode) -> R) -> io::Result<R> {
        let mut s = self.st()?;
        let inode = s
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(f(inode))
    }
}

impl FsFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        self.with(|i| i.current.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|i| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            match i
                .current
                .get(start..)
                .and_then(|rest| rest.get(..buf.len()))
            {
                Some(src) => {
                    buf.copy_from_slice(src);
                    Ok(())
                }
                None => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            }
        })?
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut s = self.st()?;
        if let Err(e) = s.mutate() {
            // A dying write may leave part of its first buffer behind (a torn write).
            if let (Some(first), Some(inode)) = (bufs.first(), s.inodes.get_mut(&self.inode)) {
                let half = &first[..first.len() / 2];
                crate::fs::write_into(&mut inode.current, &[IoSlice::new(half)], offset)?;
            }
            return Err(e);
        }
        let inode = s
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        crate::fs::write_into(&mut inode.current, bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.st()?;
        s.mutate()?;
        if let Some(inode) = s.inodes.get_mut(&self.inode) {
            inode.durable = inode.current.clone();
        }
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut s = self.st()?;
        s.mutate()?;
        if let Some(inode) = s.inodes.get_mut(&self.inode) {
            inode
                .current
                .truncate(usize::try_from(len).unwrap_or(usize::MAX));
        }
        Ok(())
    }
}

fn under(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir) && path != dir
}

impl Fs for SimFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        let mut s = self.st();
        let inode = match s.current.get(path) {
            Some(id) => *id,
            None if create => {
                s.mutate()?;
                let id = s.next_inode;
                s.next_inode += 1;
                s.inodes.insert(id, Inode::default());
                s.current.insert(path.to_path_buf(), id);
                id
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} not found", path.display()),
                ));
            }
        };
        Ok(Arc::new(SimFile {
            fs: self.clone(),
            inode,
            generation: s.generation,
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = self.st();
        let id = s.current.get(path).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            )
        })?;
        Ok(s.inodes
            .get(id)
            .map(|i| i.current.clone())
            .unwrap_or_default())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.st();
        s.mutate()?;
        let id = s
            .current
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.current.insert(to.to_path_buf(), id);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.st();
        s.mutate()?;
        s.current
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.st();
        for a in path.ancestors() {
            s.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.st();
        s.mutate()?;
        s.current.retain(|p, _| !under(p, path));
        s.dirs.retain(|p| !p.starts_with(path));
        Ok(())
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = self.st();
        let mut names = BTreeSet::new();
        for p in s.current.keys().chain(s.dirs.iter()) {
            if let Ok(rest) = p.strip_prefix(path)
                && let Some(first) = rest.components().next()
            {
                names.insert(first.as_os_str().to_string_lossy().into_owned());
            }
        }
        Ok(names.into_iter().collect())
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.st();
        s.mutate()?;
        // Commit every entry change below `path` (a simplification: one sync covers the subtree).
        let keep: Vec<(PathBuf, u64)> = s
            .durable
            .iter()
            .filter(|(p, _)| !under(p, path))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        let add: Vec<(PathBuf, u64)> = s
            .current
            .iter()
            .filter(|(p, _)| under(p, path))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        s.durable = keep.into_iter().chain(add).collect();
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let s = self.st();
        s.current.contains_key(path) || s.dirs.contains(path)
    }
    fn zero_fill_ahead(&self) -> bool {
        // Like the real disk, so crash tests cover segments with zeros ahead of their tail.
        true
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut s = self.st();
        if !s.locked.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "locked by another process",
            ));
        }
        Ok(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
            generation: s.generation,
        }))
    }
}

struct SimLock {
    fs: SimFs,
    path: PathBuf,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = self.fs.st();
        if s.generation == self.generation {
            s.locked.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(f: &dyn FsFile, bytes: &[u8], at: u64) -> io::Result<()> {
        f.write_at(&[IoSlice::new(bytes)], at)
    }

    #[test]
    fn a_handle_from_before_a_crash_can_no_longer_read_or_change_the_file() {
        let fs = SimFs::new();
        let path = Path::new("/d/f");
        fs.create_dir_all(Path::new("/d")).unwrap();
        let old = fs.open(path, true).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        write(old.as_ref(), b"synced", 0).unwrap();
        old.sync_data().unwrap();
        write(old.as_ref(), b" and not", 6).unwrap();
        fs.crash(&mut |_| 0);
        for refused in [
            write(old.as_ref(), b"late", 6),
            old.truncate(2),
            old.sync_data(),
            old.read_exact_at(&mut [0; 2], 0),
            old.len().map(|_| ()),
        ] {
            let e = refused.unwrap_err();
            assert!(e.to_string().contains("crashed process"), "{e}");
        }
        let new = fs.open(path, false).unwrap();
        let mut got = vec![0; 6];
        new.read_exact_at(&mut got, 0).unwrap();
        assert_eq!((new.len().unwrap(), &got[..]), (6, &b"synced"[..]));
        write(new.as_ref(), b"!", 6).unwrap();
        assert_eq!(
            new.len().unwrap(),
            7,
            "a handle opened after the crash works"
        );
    }
}
