//! The one I/O seam of the storage crate.
//!
//! Every byte the store reads or writes goes through [`Fs`] and [`FsFile`], so tests can swap
//! the real file system ([`RealFs`]) for a simulated one (`simfs::SimFs`, feature
//! `test-support`) that loses unsynced data, tears the last write or fails any operation on
//! purpose, and ephemeral topics can run on memory ([`crate::MemFs`]).

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// An open file. Writes are appends, or positional writes at or after the data a caller
/// tracks itself (a segment writing over the zeros it put ahead of its tail); reads are
/// positional so they never race writes.
pub trait FsFile: Send + Sync {
    /// Current length in bytes (including unsynced appends).
    fn len(&self) -> io::Result<u64>;
    /// Whether the file has no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `offset`; a short file is an `UnexpectedEof` error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Appends all of `bufs` at the end of the file (vectored; bodies are not copied). Files
    /// are not opened with O_APPEND (Linux would then ignore a positional write's offset):
    /// every file has one writer, which calls this under its own lock.
    fn append(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.write_at(bufs, self.len()?)
    }
    /// Writes all of `bufs` at `offset` (vectored), extending the file when they reach past
    /// its end; a gap before `offset` reads as zeros.
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()>;
    /// `fdatasync`: appended data survives a crash once this returns.
    fn sync_data(&self) -> io::Result<()>;
    /// Full `fsync` (data and metadata such as the length).
    fn sync_all(&self) -> io::Result<()>;
    /// Shrinks the file to `len` bytes (not durable until synced).
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// A file system: files, directory entries and the directory lock.
pub trait Fs: Send + Sync + 'static {
    /// Opens `path` for reading and writing, creating it (empty) when `create` is set.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>>;
    /// Reads a whole (small) file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Atomically replaces `to` with `from` (durable once the parent directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlinks a file (durable once the parent directory is synced).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory tree.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (files and subdirectories), sorted.
    fn list(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on `path` (created if missing) for the life of the returned guard;
    /// fails with `WouldBlock` when another process holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>>;
    /// Whether a segment should write zeros ahead of its tail: on a disk file system an
    /// fdatasync of bytes written over zeros already on disk flushes only those bytes, while
    /// one that grows the file must also write the inode (its size and block map). Memory
    /// has nothing to save.
    fn zero_fill_ahead(&self) -> bool {
        false
    }
}

/// Writes `bufs` into `bytes` at `offset`, zero-filling a gap and growing it as needed (the
/// in-memory file systems' positional write).
pub(crate) fn write_into(bytes: &mut Vec<u8>, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
    let mut at =
        usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let end = at + bufs.iter().map(|b| b.len()).sum::<usize>();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    for b in bufs {
        bytes[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    Ok(())
}

/// The real, POSIX file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

struct RealFile(File);

impl FsFile for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], mut offset: u64) -> io::Result<()> {
        let mut owned: Vec<IoSlice<'_>> = bufs.to_vec();
        let mut slices = &mut owned[..];
        while !slices.is_empty() {
            let at =
                i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let batch = &slices[..slices.len().min(IOV_MAX)];
            let n = nix::sys::uio::pwritev(&self.0, batch, at).map_err(io::Error::from)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "write wrote 0 bytes",
                ));
            }
            offset += n as u64;
            IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// Most buffers one `pwritev` takes (Linux's `IOV_MAX`; more is `EINVAL`).
const IOV_MAX: usize = 1024;

/// Lock attempts 10 ms apart before a held directory lock is reported (about 0.5 s).
const LOCK_RETRIES: u32 = 50;

impl Fs for RealFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(RealFile(file)))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // A short retry before refusing: a process that forks while another thread of it
        // holds (or just dropped) this lock keeps the flock in the child until its exec, so
        // the lock can look taken for a moment with no second broker anywhere (seen in the
        // multi-threaded SIGKILL tests). A real second process still gets refused.
        let mut attempts = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if attempts < LOCK_RETRIES => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        "locked by another process",
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        file.set_len(0)?;
        writeln!(file, "{}", std::process::id())?;
        Ok(Box::new(file))
    }
    fn zero_fill_ahead(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_positional_write_of_more_buffers_than_one_pwritev_takes_writes_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let f = RealFs.open(&dir.path().join("f"), true).unwrap();
        f.append(&[IoSlice::new(b"head")]).unwrap();
        let parts: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        f.write_at(&slices, 2).unwrap();
        assert_eq!(f.len().unwrap(), 2 + 4 * 3000);
        let mut buf = vec![0u8; 2 + 4 * 3000];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf[..2], b"he", "written over from offset 2");
        assert_eq!(buf[2..], parts.concat()[..]);
        f.append(&[IoSlice::new(b"tail")]).unwrap();
        assert_eq!(
            f.len().unwrap(),
            2 + 4 * 3000 + 4,
            "an append goes to the end"
        );
    }
}
