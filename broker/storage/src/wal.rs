//! Per-channel write-ahead log and checkpoint files.
//!
//! `<hex>.wal` holds frames `RCW7 · u32 len · u32 CRC-32(body) · body` where body is a
//! [`ChannelCommand`] encoding. `<hex>.checkpoint` is `RCC7 · u32 len · u32 CRC-32(body) ·
//! JSON ChannelState`, replaced atomically. Every [`CHECKPOINT_EVERY`] commands the state is
//! checkpointed and the WAL truncated. Creation writes an empty WAL before the checkpoint and
//! deletion removes the WAL first, so a half-done create or delete is recognisable at startup.

use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::channel::{ChannelCommand, ChannelState};
use crate::failpoint::crash_failpoint;
use crate::fs::{Fs, FsFile};
use crate::meta::{self, hex};
use crate::{Fault, StorageError, io_err};

const WAL_MAGIC: &[u8; 4] = b"RCW7";
const CKPT_MAGIC: &[u8; 4] = b"RCC7";
const FRAME_HEADER: usize = 12;
/// Commands between checkpoints.
pub const CHECKPOINT_EVERY: u64 = 8_192;

/// The open WAL of one durable channel.
pub struct ChannelWal {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    wal_path: PathBuf,
    ckpt_path: PathBuf,
    file: Arc<dyn FsFile>,
    since_checkpoint: u64,
    fault: Fault,
}

fn frame_header(body: &[u8]) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[0..4].copy_from_slice(WAL_MAGIC);
    h[4..8].copy_from_slice(&(body.len() as u32).to_be_bytes());
    h[8..12].copy_from_slice(&crc32fast::hash(body).to_be_bytes());
    h
}

/// Paths of a channel's WAL and checkpoint.
pub fn paths(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let h = hex(name);
    (
        dir.join(format!("{h}.wal")),
        dir.join(format!("{h}.checkpoint")),
    )
}

fn encode_checkpoint(state: &ChannelState) -> Vec<u8> {
    let body = serde_json::to_vec(state).unwrap_or_default();
    let mut out = Vec::with_capacity(12 + body.len());
    out.extend_from_slice(CKPT_MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn decode_checkpoint(path: &Path, b: &[u8]) -> Result<ChannelState, StorageError> {
    let bad = |detail: &str| StorageError::Corrupt {
        file: path.to_path_buf(),
        offset: 0,
        detail: detail.to_string(),
    };
    if b.len() < 12 || &b[0..4] != CKPT_MAGIC {
        return Err(bad("bad checkpoint header"));
    }
    let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let crc = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    let body = b
        .get(12..12 + len)
        .ok_or_else(|| bad("checkpoint shorter than its length"))?;
    if crc32fast::hash(body) != crc {
        return Err(bad("checkpoint CRC mismatch"));
    }
    serde_json::from_slice(body).map_err(|e| bad(&format!("checkpoint JSON: {e}")))
}

impl ChannelWal {
    /// Creates a channel durably: empty WAL (fsynced), then the checkpoint, then the directory.
    pub fn create(
        fs: Arc<dyn Fs>,
        dir: &Path,
        state: &ChannelState,
        fault: Fault,
    ) -> Result<ChannelWal, StorageError> {
        fault.check()?;
        let r = Self::create_inner(fs, dir, state, fault.clone());
        fault.guard(r)
    }

    fn create_inner(
        fs: Arc<dyn Fs>,
        dir: &Path,
        state: &ChannelState,
        fault: Fault,
    ) -> Result<ChannelWal, StorageError> {
        let (wal_path, ckpt_path) = paths(dir, &state.name);
        let file = fs
            .open(&wal_path, true)
            .map_err(io_err("create", &wal_path))?;
        file.truncate(0).map_err(io_err("truncate", &wal_path))?;
        file.sync_all().map_err(io_err("fsync", &wal_path))?;
        meta::atomic_write_at(
            fs.as_ref(),
            &ckpt_path,
            &encode_checkpoint(state),
            "channel_create_before_rename",
        )?;
        Ok(ChannelWal {
            fs,
            dir: dir.to_path_buf(),
            wal_path,
            ckpt_path,
            file,
            since_checkpoint: 0,
            fault,
        })
    }

    /// Opens a channel: loads the checkpoint and replays the WAL (a torn tail is truncated).
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: &Path,
        name: &str,
        fault: Fault,
    ) -> Result<(ChannelWal, ChannelState), StorageError> {
        let (wal_path, ckpt_path) = paths(dir, name);
        let bytes = fs.read(&ckpt_path).map_err(io_err("read", &ckpt_path))?;
        let mut state = decode_checkpoint(&ckpt_path, &bytes)?;
        if state.name != name {
            return Err(StorageError::Corrupt {
                file: ckpt_path,
                offset: 0,
                detail: format!("checkpoint names channel {:?}", state.name),
            });
        }
        let file = fs
            .open(&wal_path, false)
            .map_err(io_err("open", &wal_path))?;
        let len = file.len().map_err(io_err("stat", &wal_path))?;
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(&mut data, 0)
            .map_err(io_err("read", &wal_path))?;
        let mut at = 0usize;
        let mut count = 0u64;
        while at < data.len() {
            let Some(h) = data.get(at..at + FRAME_HEADER) else {
                break;
            };
            if &h[0..4] != WAL_MAGIC {
                return Err(StorageError::Corrupt {
                    file: wal_path,
                    offset: at as u64,
                    detail: "bad WAL frame magic".into(),
                });
            }
            let blen = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
            let crc = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
            let Some(body) = data.get(at + FRAME_HEADER..at + FRAME_HEADER + blen) else {
                break;
            };
            if crc32fast::hash(body) != crc {
                return Err(StorageError::Corrupt {
                    file: wal_path,
                    offset: at as u64,
                    detail: "WAL frame CRC mismatch".into(),
                });
            }
            let cmd = ChannelCommand::decode(body).ok_or_else(|| StorageError::Corrupt {
                file: wal_path.clone(),
                offset: at as u64,
                detail: "unknown WAL command".into(),
            })?;
            state.apply(&cmd);
            count += 1;
            at += FRAME_HEADER + blen;
        }
        if at < data.len() {
            file.truncate(at as u64)
                .map_err(io_err("truncate torn WAL tail", &wal_path))?;
            file.sync_all().map_err(io_err("fsync", &wal_path))?;
        }
        let wal = ChannelWal {
            fs,
            dir: dir.to_path_buf(),
            wal_path,
            ckpt_path,
            file,
            since_checkpoint: count,
            fault,
        };
        Ok((wal, state))
    }

    /// Appends command frames (one write); durable only after [`ChannelWal::sync`].
    pub fn append(&mut self, cmds: &[ChannelCommand]) -> Result<(), StorageError> {
        self.fault.check()?;
        let bodies: Vec<Vec<u8>> = cmds.iter().map(ChannelCommand::encode).collect();
        let headers: Vec<[u8; FRAME_HEADER]> = bodies.iter().map(|b| frame_header(b)).collect();
        let mut slices = Vec::with_capacity(bodies.len() * 2);
        for (h, b) in headers.iter().zip(&bodies) {
            slices.push(IoSlice::new(h));
            slices.push(IoSlice::new(b));
        }
        let r = self
            .file
            .append(&slices)
            .map_err(io_err("append", &self.wal_path));
        self.fault.guard(r)?;
        self.since_checkpoint += cmds.len() as u64;
        crash_failpoint("channel_group_after_append_before_fsync");
        Ok(())
    }

    /// fdatasync of the WAL.
    pub fn sync(&self) -> Result<(), StorageError> {
        self.fault.check()?;
        let r = self
            .file
            .sync_data()
            .map_err(io_err("fdatasync", &self.wal_path));
        self.fault.guard(r)?;
        crash_failpoint("channel_group_after_fsync_before_reply");
        Ok(())
    }

    /// Whether enough commands accumulated for a checkpoint.
    pub fn needs_checkpoint(&self) -> bool {
        self.since_checkpoint >= CHECKPOINT_EVERY
    }

    /// Writes `state` as the new checkpoint, then truncates the WAL.
    pub fn checkpoint(&mut self, state: &ChannelState) -> Result<(), StorageError> {
        self.fault.check()?;
        let r = self.checkpoint_inner(state);
        self.fault.guard(r)
    }

    fn checkpoint_inner(&mut self, state: &ChannelState) -> Result<(), StorageError> {
        meta::atomic_write_at(
            self.fs.as_ref(),
            &self.ckpt_path,
            &encode_checkpoint(state),
            "checkpoint_after_file_fsync_before_rename",
        )?;
        crash_failpoint("checkpoint_after_rename_before_wal_truncate");
        self.file
            .truncate(0)
            .map_err(io_err("truncate", &self.wal_path))?;
        self.file
            .sync_all()
            .map_err(io_err("fsync", &self.wal_path))?;
        self.since_checkpoint = 0;
        Ok(())
    }

    /// Removes the channel's files: WAL first, then checkpoint, then fsync the directory.
    pub fn delete(self) -> Result<(), StorageError> {
        self.fault.check()?;
        let r = remove_files(self.fs.as_ref(), &self.dir, &self.wal_path, &self.ckpt_path);
        self.fault.guard(r)
    }
}

/// Removes a channel's WAL and checkpoint (either may be missing) and fsyncs the directory.
pub fn remove_files(fs: &dyn Fs, dir: &Path, wal: &Path, ckpt: &Path) -> Result<(), StorageError> {
    for p in [wal, ckpt] {
        if fs.exists(p) {
            fs.remove_file(p).map_err(io_err("remove", p))?;
        }
    }
    fs.sync_dir(dir).map_err(io_err("fsync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    #[test]
    fn a_synced_finish_survives_a_crash_and_an_unsynced_one_may_not() {
        let fs = SimFs::new();
        let dir = Path::new("/c");
        fs.create_dir_all(dir).unwrap();
        let mut w = ChannelWal::create(
            Arc::new(fs.clone()),
            dir,
            &ChannelState::new("ch", 1),
            Fault::default(),
        )
        .unwrap();
        w.append(&[ChannelCommand::Finish { position: 1, id: 1 }])
            .unwrap();
        w.sync().unwrap();
        w.append(&[ChannelCommand::Finish { position: 2, id: 2 }])
            .unwrap();
        drop(w);
        fs.crash(&mut |n| n / 2);
        let (_, s) = ChannelWal::open(Arc::new(fs.clone()), dir, "ch", Fault::default()).unwrap();
        assert_eq!(s.ack_floor, 1);
    }

    #[test]
    fn checkpoint_then_reopen_keeps_state_and_an_empty_wal() {
        let fs = SimFs::new();
        let dir = Path::new("/c");
        let arc: Arc<dyn Fs> = Arc::new(fs.clone());
        let mut st = ChannelState::new("ch", 1);
        let mut w = ChannelWal::create(arc.clone(), dir, &st, Fault::default()).unwrap();
        let cmd = ChannelCommand::Requeue {
            position: 4,
            id: 4,
            available_at_ms: 9,
            attempts: 3,
            requeue_count: 1,
        };
        w.append(&[cmd]).unwrap();
        st.apply(&cmd);
        w.checkpoint(&st).unwrap();
        drop(w);
        fs.crash(&mut |_| 0);
        let (w, s) = ChannelWal::open(arc, dir, "ch", Fault::default()).unwrap();
        assert_eq!(s, st);
        assert_eq!(w.since_checkpoint, 0);
    }

    #[test]
    fn a_complete_frame_with_a_bad_crc_refuses_to_open() {
        let fs = SimFs::new();
        let dir = Path::new("/c");
        let arc: Arc<dyn Fs> = Arc::new(fs.clone());
        let mut w = ChannelWal::create(
            arc.clone(),
            dir,
            &ChannelState::new("ch", 1),
            Fault::default(),
        )
        .unwrap();
        w.append(&[ChannelCommand::Finish { position: 1, id: 1 }])
            .unwrap();
        w.sync().unwrap();
        fs.corrupt(&dir.join(format!("{}.wal", hex("ch"))), 14, 0xff);
        let err = ChannelWal::open(arc, dir, "ch", Fault::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("offset 0"), "{err}");
    }
}
