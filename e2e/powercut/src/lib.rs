//! `rustqueue-powercut`: a FUSE file system that loses what was not fsynced when the power
//! is cut, in the style of Jepsen's LazyFS. See docs/durability.md.
//!
//! The semantics live in [`model`] (tested on their own); this file only answers the kernel's
//! requests from it. Attribute and entry lifetimes are zero, so the kernel asks again each
//! time, and a cut is followed by an unmount and a fresh mount, so no page the kernel cached
//! from before the cut is ever read after it.
//!
//! Mounting needs root and `/dev/fuse` (the mount syscall is made directly; no `fusermount`).

pub mod model;

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

use model::{Body, Res};
pub use model::{CutMode, CutStats, Model};

/// Capacity the file system reports (statfs): large, so no disk guard ever sees pressure.
const CAPACITY: u64 = 1 << 40;
const BLOCK: u64 = 4096;

/// A handle on one lazy file system; clones share it.
#[derive(Clone, Default)]
pub struct LazyFs {
    model: Arc<Mutex<Model>>,
}

/// A mounted [`LazyFs`]; dropping it unmounts.
pub struct Mounted {
    session: Option<BackgroundSession>,
    path: PathBuf,
}

impl LazyFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mounts at `path` (an existing, empty directory). Fails with a message saying what is
    /// needed when FUSE cannot be mounted here.
    pub fn mount(&self, path: &Path) -> io::Result<Mounted> {
        if !Path::new("/dev/fuse").exists() {
            return Err(io::Error::other(
                "/dev/fuse is missing: load the fuse module (modprobe fuse) or run the \
                 container with --device /dev/fuse",
            ));
        }
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("rustqueue-powercut".into()),
            MountOption::Subtype("powercut".into()),
            MountOption::RW,
            MountOption::DefaultPermissions,
        ];
        let fs = Adapter {
            model: self.model.clone(),
        };
        let session = fuser::spawn_mount(fs, path, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mounting the power-cut FUSE file system at {} failed: {e}; it needs root \
                     (or CAP_SYS_ADMIN) and a usable /dev/fuse",
                    path.display()
                ),
            )
        })?;
        Ok(Mounted {
            session: Some(session),
            path: path.to_owned(),
        })
    }

    /// The power goes, at this instant: every later request fails with EIO, so nothing
    /// synced afterwards counts. Kill the processes using the mount right after, then
    /// [`Mounted::unmount`] and [`LazyFs::restart`].
    pub fn cut(&self) {
        self.lock().cut();
    }

    /// The machine comes back with only what survived the cut (see [`model`]).
    pub fn restart(&self, mode: CutMode) -> CutStats {
        self.lock().restart(mode)
    }

    /// Runs `f` on the model (for tests that look inside).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.lock())
    }
}

impl Mounted {
    /// Unmounts and waits for the session thread.
    pub fn unmount(mut self) -> io::Result<()> {
        match self
            .session
            .take()
            .map_or(Ok(()), BackgroundSession::umount_and_join)
        {
            // The kernel tears the connection down with the unmount; the session loop may
            // see that as an aborted connection rather than a closed device. Either is an end.
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            other => other,
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

struct Adapter {
    model: Arc<Mutex<Model>>,
}

const TTL: Duration = Duration::ZERO;

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn attr(ino: u64, node: &model::Node) -> FileAttr {
    let (kind, size, nlink) = match &node.body {
        Body::File(f) => (FileType::RegularFile, f.data.len() as u64, 1),
        Body::Dir(_) => (FileType::Directory, 0, 2),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: node.mtime,
        mtime: node.mtime,
        ctime: node.mtime,
        crtime: UNIX_EPOCH,
        kind,
        perm: node.perm,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK as u32,
        flags: 0,
    }
}

impl Adapter {
    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry(&self, reply: ReplyEntry, f: impl FnOnce(&mut Model) -> Res<u64>) {
        let mut m = self.lock();
        match f(&mut m).and_then(|ino| Ok((ino, m.node(ino)?))) {
            Ok((ino, node)) => reply.entry(&TTL, &attr(ino, node), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn empty(&self, reply: ReplyEmpty, f: impl FnOnce(&mut Model) -> Res<()>) {
        match f(&mut self.lock()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Filesystem for Adapter {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, |m| m.lookup(parent.0, name));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = self.lock();
        match m.node(ino.0) {
            Ok(node) => reply.attr(&TTL, &attr(ino.0, node)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut m = self.lock();
        let res = (|| {
            if let Some(len) = size {
                m.set_len(ino.0, len)?;
            }
            if let Some(mode) = mode {
                m.chmod(ino.0, (mode & 0o7777) as u16)?;
            }
            m.node(ino.0).map(|n| attr(ino.0, n))
        })();
        match res {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |m| {
            m.mkdir(parent.0, name, (mode & !umask & 0o7777) as u16)
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |m| m.unlink(parent.0, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |m| m.rmdir(parent.0, name));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        self.empty(reply, |m| {
            m.rename(parent.0, name, newparent.0, newname, noreplace)
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut m = self.lock();
        let res = (|| {
            m.node(ino.0)?;
            if flags.0 & libc::O_TRUNC != 0 {
                m.set_len(ino.0, 0)?;
            }
            Ok(())
        })();
        match res {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let m = self.lock();
        match m.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.lock().write(ino.0, offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() is not a sync.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // fdatasync also makes the length durable (what a reader needs to find the data).
        self.empty(reply, |m| m.sync(ino.0));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self.lock().list(ino.0);
        match listed {
            Ok(names) => {
                let dots = [
                    (ino.0, FileType::Directory, OsStr::new(".").to_owned()),
                    (ino.0, FileType::Directory, OsStr::new("..").to_owned()),
                ];
                let m = self.lock();
                let all = dots.into_iter().chain(names.into_iter().map(|(n, i)| {
                    let kind = match m.node(i).map(|n| &n.body) {
                        Ok(Body::Dir(_)) => FileType::Directory,
                        _ => FileType::RegularFile,
                    };
                    (i, kind, n)
                }));
                for (i, (child, kind, name)) in all.enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |m| m.sync(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let m = self.lock();
        let used = m.used_bytes().div_ceil(BLOCK);
        let blocks = CAPACITY / BLOCK;
        let free = blocks.saturating_sub(used);
        let files = 1 << 24;
        reply.statfs(
            blocks,
            free,
            free,
            files,
            files - m.inode_count(),
            BLOCK as u32,
            255,
            BLOCK as u32,
        );
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut m = self.lock();
        let res = (|| {
            let ino = match m.lookup(parent.0, name) {
                Ok(_) if flags & libc::O_EXCL != 0 => return Err(libc::EEXIST),
                Ok(ino) => {
                    if flags & libc::O_TRUNC != 0 {
                        m.set_len(ino, 0)?;
                    }
                    ino
                }
                Err(libc::ENOENT) => m.create(parent.0, name, (mode & !umask & 0o7777) as u16)?,
                Err(e) => return Err(e),
            };
            m.node(ino).map(|n| attr(ino, n))
        })();
        match res {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }
}
