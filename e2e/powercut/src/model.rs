//! The volatile/durable model behind the FUSE mount, free of FUSE so it reads (and is tested)
//! on its own.
//!
//! Every regular file holds two images: `data`, what readers see now, and `durable`, what the
//! last `fsync`/`fdatasync` of that file made stable. Pages (4 KiB) written or truncated since
//! that sync are `dirty`. Every directory holds two entry maps the same way: `entries` now, and
//! `durable` as of the last `fsync` of the directory itself. A create, unlink, mkdir, rmdir or
//! rename changes only `entries`, as on a journaling file system that does not promise
//! anything about a name until its directory is synced.
//!
//! A power cut replaces every `data` with its `durable` image (under [`CutMode::Torn`] each
//! dirty page independently either reached the platter or not), every `entries` with its
//! `durable` map, and forgets every inode no durable name reaches. Nothing that was synced is
//! lost; anything that was not may be.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

/// Page size of the volatile layer: the unit a torn cut keeps or drops.
pub const PAGE: u64 = 4096;

/// Inode number of the root directory.
pub const ROOT: u64 = 1;

/// An error as the kernel gets it (a positive errno).
pub type Errno = i32;

/// Result of a model operation.
pub type Res<T> = Result<T, Errno>;

/// What survives of the writes not yet synced when the power goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Nothing unsynced survives (LazyFS's `clear-cache`): exactly the synced state.
    DropUnsynced,
    /// Each dirty page survives or not by a coin flip from this seed (reordered, torn
    /// writes: a later page may survive while an earlier one is lost). Directory entries
    /// still revert to their synced state.
    Torn(u64),
}

/// What a cut discarded, for the test's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutStats {
    /// Dirty pages that were lost.
    pub pages_lost: u64,
    /// Dirty pages that survived (only under [`CutMode::Torn`]).
    pub pages_kept: u64,
    /// Directories whose unsynced entry changes were undone.
    pub dirs_reverted: u64,
    /// Inodes no synced name reached any more (files and directories forgotten).
    pub inodes_dropped: u64,
}

/// A regular file's two images.
#[derive(Clone, Debug, Default)]
pub struct FileBody {
    /// What reads see now.
    pub data: Vec<u8>,
    /// The image as of the last fsync.
    pub durable: Vec<u8>,
    /// Page numbers changed since that fsync.
    pub dirty: BTreeSet<u64>,
}

/// A directory's two entry maps.
#[derive(Clone, Debug, Default)]
pub struct DirBody {
    /// Names now.
    pub entries: BTreeMap<OsString, u64>,
    /// Names as of the last fsync of this directory.
    pub durable: BTreeMap<OsString, u64>,
}

/// File or directory.
#[derive(Clone, Debug)]
pub enum Body {
    /// Regular file.
    File(FileBody),
    /// Directory.
    Dir(DirBody),
}

/// One inode.
#[derive(Clone, Debug)]
pub struct Node {
    /// Contents.
    pub body: Body,
    /// Permission bits.
    pub perm: u16,
    /// Last change (not modelled as durable: nothing in the broker reads it back).
    pub mtime: SystemTime,
}

/// The whole file system.
#[derive(Debug)]
pub struct Model {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Set by a power cut until the next [`Model::restart`]: every operation then fails with
    /// EIO, so nothing the dying process does after the cut instant can be synced or acked.
    pub dead: bool,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

fn touched_pages(dirty: &mut BTreeSet<u64>, from: u64, to: u64) {
    if to > from {
        dirty.extend(from / PAGE..=(to - 1) / PAGE);
    }
}

impl Model {
    /// An empty file system: one root directory, synced.
    pub fn new() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                body: Body::Dir(DirBody::default()),
                perm: 0o755,
                mtime: SystemTime::now(),
            },
        );
        Model {
            nodes,
            next_ino: ROOT + 1,
            dead: false,
        }
    }

    fn alive(&self) -> Res<()> {
        if self.dead { Err(libc::EIO) } else { Ok(()) }
    }

    /// The inode, if it exists.
    pub fn node(&self, ino: u64) -> Res<&Node> {
        self.alive()?;
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Res<&mut Node> {
        self.alive()?;
        self.nodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: u64) -> Res<&DirBody> {
        match &self.node(ino)?.body {
            Body::Dir(d) => Ok(d),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Res<&mut DirBody> {
        match &mut self.node_mut(ino)?.body {
            Body::Dir(d) => Ok(d),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Res<&mut FileBody> {
        let node = self.node_mut(ino)?;
        node.mtime = SystemTime::now();
        match &mut node.body {
            Body::File(f) => Ok(f),
            Body::Dir(_) => Err(libc::EISDIR),
        }
    }

    /// The inode a name in a directory points at now.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Res<u64> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// Names of a directory, sorted.
    pub fn list(&self, dir: u64) -> Res<Vec<(OsString, u64)>> {
        Ok(self
            .dir(dir)?
            .entries
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect())
    }

    fn link_new(&mut self, parent: u64, name: &OsStr, body: Body, perm: u16) -> Res<u64> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                body,
                perm,
                mtime: SystemTime::now(),
            },
        );
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        Ok(ino)
    }

    /// A new, empty regular file (its name is not durable until `parent` is synced).
    pub fn create(&mut self, parent: u64, name: &OsStr, perm: u16) -> Res<u64> {
        self.link_new(parent, name, Body::File(FileBody::default()), perm)
    }

    /// A new, empty directory (its name is not durable until `parent` is synced).
    pub fn mkdir(&mut self, parent: u64, name: &OsStr, perm: u16) -> Res<u64> {
        self.link_new(parent, name, Body::Dir(DirBody::default()), perm)
    }

    /// Removes a file's name (the inode stays while a synced name still reaches it).
    pub fn unlink(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(parent, name)?;
        if matches!(self.node(ino)?.body, Body::Dir(_)) {
            return Err(libc::EISDIR);
        }
        self.dir_mut(parent)?.entries.remove(name);
        Ok(())
    }

    /// Removes an empty directory's name.
    pub fn rmdir(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(parent, name)?;
        if !self.dir(ino)?.entries.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.dir_mut(parent)?.entries.remove(name);
        Ok(())
    }

    /// Moves a name, replacing a file at the target (POSIX rename). `noreplace` refuses an
    /// existing target. Each of the two directories' change is durable only once that
    /// directory is synced.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> Res<()> {
        let ino = self.lookup(parent, name)?;
        self.dir(newparent)?;
        if let Ok(old) = self.lookup(newparent, newname) {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(libc::EEXIST);
            }
            match (&self.node(ino)?.body, &self.node(old)?.body) {
                (Body::File(_), Body::Dir(_)) => return Err(libc::EISDIR),
                (Body::Dir(_), Body::File(_)) => return Err(libc::ENOTDIR),
                (Body::Dir(_), Body::Dir(d)) if !d.entries.is_empty() => {
                    return Err(libc::ENOTEMPTY);
                }
                _ => {}
            }
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.dir_mut(newparent)?
            .entries
            .insert(newname.to_owned(), ino);
        Ok(())
    }

    /// Reads up to `size` bytes at `offset` of what the file holds now.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Res<&[u8]> {
        match &self.node(ino)?.body {
            Body::File(f) => {
                let len = f.data.len() as u64;
                let from = offset.min(len) as usize;
                let to = (offset.saturating_add(u64::from(size))).min(len) as usize;
                Ok(&f.data[from..to])
            }
            Body::Dir(_) => Err(libc::EISDIR),
        }
    }

    /// Writes into the volatile image; the touched pages become dirty.
    pub fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Res<()> {
        let f = self.file_mut(ino)?;
        let end = offset + bytes.len() as u64;
        let old_len = f.data.len() as u64;
        if end > old_len {
            f.data.resize(end as usize, 0);
        }
        f.data[offset as usize..end as usize].copy_from_slice(bytes);
        // A write past the end also fills the gap with zeros: that gap is changed too.
        touched_pages(&mut f.dirty, offset.min(old_len), end);
        Ok(())
    }

    /// Truncates or extends (with zeros) the volatile image.
    pub fn set_len(&mut self, ino: u64, len: u64) -> Res<()> {
        let f = self.file_mut(ino)?;
        let old = f.data.len() as u64;
        f.data.resize(len as usize, 0);
        touched_pages(&mut f.dirty, old.min(len), old.max(len));
        Ok(())
    }

    /// Sets the permission bits.
    pub fn chmod(&mut self, ino: u64, perm: u16) -> Res<()> {
        self.node_mut(ino)?.perm = perm;
        Ok(())
    }

    /// fsync/fdatasync of a file: its current contents and length become durable.
    /// For a directory: its current names become durable.
    pub fn sync(&mut self, ino: u64) -> Res<()> {
        match &mut self.node_mut(ino)?.body {
            Body::File(f) => {
                let len = f.data.len();
                f.durable.resize(len, 0);
                for page in std::mem::take(&mut f.dirty) {
                    let from = (page * PAGE) as usize;
                    if from >= len {
                        continue;
                    }
                    let to = (from + PAGE as usize).min(len);
                    f.durable[from..to].copy_from_slice(&f.data[from..to]);
                }
            }
            Body::Dir(d) => d.durable = d.entries.clone(),
        }
        Ok(())
    }

    /// The power goes: from now on every operation fails with EIO (the caller kills the
    /// process using the mount at the same instant).
    pub fn cut(&mut self) {
        self.dead = true;
    }

    /// The machine comes back: only what the cut left survives (see the module doc).
    pub fn restart(&mut self, mode: CutMode) -> CutStats {
        let mut stats = CutStats::default();
        let mut rng = match mode {
            CutMode::DropUnsynced => None,
            CutMode::Torn(seed) => Some(SplitMix(seed)),
        };
        let mut inos: Vec<u64> = self.nodes.keys().copied().collect();
        inos.sort_unstable(); // deterministic coin flips for a given seed
        for ino in inos {
            match &mut self.nodes.get_mut(&ino).expect("listed").body {
                Body::File(f) => {
                    let mut image = std::mem::take(&mut f.durable);
                    for page in std::mem::take(&mut f.dirty) {
                        let keep = rng.as_mut().is_some_and(|r| r.next() & 1 == 1);
                        let from = (page * PAGE) as usize;
                        if !keep || from >= f.data.len() {
                            stats.pages_lost += 1;
                            continue;
                        }
                        stats.pages_kept += 1;
                        let to = (from + PAGE as usize).min(f.data.len());
                        if image.len() < to {
                            image.resize(to, 0);
                        }
                        image[from..to].copy_from_slice(&f.data[from..to]);
                    }
                    f.data = image.clone();
                    f.durable = image;
                }
                Body::Dir(d) => {
                    if d.entries != d.durable {
                        stats.dirs_reverted += 1;
                        d.entries = d.durable.clone();
                    }
                }
            }
        }
        // Forget what no durable name reaches.
        let mut reachable = BTreeSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if let Some(Node {
                body: Body::Dir(d), ..
            }) = self.nodes.get(&ino)
            {
                for child in d.entries.values() {
                    if reachable.insert(*child) {
                        stack.push(*child);
                    }
                }
            }
        }
        let before = self.nodes.len();
        self.nodes.retain(|ino, _| reachable.contains(ino));
        stats.inodes_dropped = (before - self.nodes.len()) as u64;
        self.dead = false;
        stats
    }

    /// Bytes held now by regular files (for statfs).
    pub fn used_bytes(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.body {
                Body::File(f) => f.data.len() as u64,
                Body::Dir(_) => 0,
            })
            .sum()
    }

    /// Number of inodes.
    pub fn inode_count(&self) -> u64 {
        self.nodes.len() as u64
    }
}

/// SplitMix64: a tiny, well-known PRNG, enough for coin flips that a seed reproduces.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
