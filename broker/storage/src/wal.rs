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
use crate::log::DamageSink;
use crate::meta::{self, hex};
use crate::quarantine::{DamageKind, Finding};
use crate::{Fault, StorageError, io_err};

const WAL_MAGIC: &[u8; 4] = b"RCW7";
const CKPT_MAGIC: &[u8; 4] = b"RCC7";
const FRAME_HEADER: usize = 12;
/// Commands between checkpoints. A checkpoint costs three fsyncs (the new file, its directory
/// entry, the truncated WAL) and holds up the channel's next group commit; at 8,192 a consumer
/// draining a backlog at 300k FIN/s checkpointed after nearly every group. At 65,536 the WAL
/// stays under 2 MiB (a FIN frame is 29 bytes), which a restart after a crash replays in
/// milliseconds.
pub const CHECKPOINT_EVERY: u64 = 65_536;

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
    // The whole file is the body unless the length field says otherwise; a checkpoint whose
    // only damage is its length field still matches its CRC over the rest of the file.
    let body = match b.get(12..12 + len) {
        Some(body) if crc32fast::hash(body) == crc => body,
        _ if crc32fast::hash(&b[12..]) == crc => &b[12..],
        Some(_) => return Err(bad("checkpoint CRC mismatch")),
        None => return Err(bad("checkpoint shorter than its length")),
    };
    serde_json::from_slice(body).map_err(|e| bad(&format!("checkpoint JSON: {e}")))
}

/// One frame of a WAL read at some offset.
enum Frame {
    /// A whole frame: its command and where the next frame starts.
    Whole(ChannelCommand, usize),
    /// Not enough bytes for the frame its header announces (a torn tail at the end).
    Torn,
    /// Bad magic, CRC or command.
    Bad,
}

fn frame_at(data: &[u8], at: usize) -> Frame {
    let Some(h) = data.get(at..at + FRAME_HEADER) else {
        return Frame::Torn;
    };
    if &h[0..4] != WAL_MAGIC {
        return Frame::Bad;
    }
    let blen = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let crc = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let Some(body) = data.get(at + FRAME_HEADER..at + FRAME_HEADER + blen) else {
        return Frame::Torn;
    };
    if crc32fast::hash(body) != crc {
        return Frame::Bad;
    }
    match ChannelCommand::decode(body) {
        Some(cmd) => Frame::Whole(cmd, at + FRAME_HEADER + blen),
        None => Frame::Bad,
    }
}

/// The command of `bytes` if they are one frame whose only fault is its length field.
fn whole_with_length(bytes: &[u8]) -> Option<ChannelCommand> {
    let body = bytes.get(FRAME_HEADER..)?;
    let crc = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if &bytes[0..4] != WAL_MAGIC || crc32fast::hash(body) != crc {
        return None;
    }
    ChannelCommand::decode(body)
}

/// What a read-only check of a WAL found.
pub(crate) struct FrameCheck {
    /// Whole frames.
    pub(crate) frames: u64,
    /// Damaged byte ranges.
    pub(crate) bad: Vec<(usize, usize)>,
    /// End of the last whole frame or damage (a partial frame may follow).
    pub(crate) end: usize,
}

/// Checks the frames of a WAL without applying them (`storage verify`).
pub(crate) fn verify_frames(data: &[u8]) -> FrameCheck {
    let mut out = FrameCheck {
        frames: 0,
        bad: Vec::new(),
        end: 0,
    };
    let mut at = 0;
    while at < data.len() {
        match frame_at(data, at) {
            Frame::Whole(_, next) => {
                out.frames += 1;
                at = next;
            }
            f => {
                let next =
                    (at + 1..data.len()).find(|&i| matches!(frame_at(data, i), Frame::Whole(..)));
                if next.is_none() && matches!(f, Frame::Torn) {
                    break;
                }
                let end = next.unwrap_or(data.len());
                out.bad.push((at, end));
                at = end;
            }
        }
    }
    out.end = at;
    out
}

/// Checks a checkpoint file without opening the channel (`storage verify`).
pub(crate) fn verify_checkpoint(fs: &dyn Fs, path: &Path, name: &str) -> Result<(), String> {
    let bytes = fs.read(path).map_err(|e| e.to_string())?;
    let state = decode_checkpoint(path, &bytes).map_err(|e| e.to_string())?;
    if state.name != name {
        return Err(format!("checkpoint names channel {:?}", state.name));
    }
    Ok(())
}

/// The durable state of a channel, read without opening it (and so without writing): the
/// checkpoint with every whole WAL frame after it applied. A torn or damaged frame ends the
/// replay there; a damaged checkpoint is an error. Read while a broker runs, the state may be
/// behind the channel's (a checkpoint replaced between the two reads skips the frames it
/// absorbed), never ahead of what was made durable: such a state only redelivers.
pub(crate) fn read_state(
    fs: &dyn Fs,
    dir: &Path,
    name: &str,
) -> Result<ChannelState, StorageError> {
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
    let data = if fs.exists(&wal_path) {
        fs.read(&wal_path).map_err(io_err("read", &wal_path))?
    } else {
        Vec::new()
    };
    let mut at = 0;
    while let Frame::Whole(cmd, next) = frame_at(&data, at) {
        state.apply(&cmd);
        at = next;
    }
    Ok(state)
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
    ///
    /// Damage falls back to the last good state with redelivery, never to silent loss: a
    /// checkpoint that fails its CRC (or does not parse) is replaced by the channel's
    /// beginning (every stored message is deliverable again), and WAL frames that fail theirs
    /// are skipped to the next whole frame (their FIN/REQ/... are forgotten, so those messages
    /// are delivered again). Either is quarantined through `sink`, and the recovered state is
    /// checkpointed at once so the damaged bytes are gone.
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: &Path,
        name: &str,
        fault: Fault,
        sink: &DamageSink,
    ) -> Result<(ChannelWal, ChannelState), StorageError> {
        let (wal_path, ckpt_path) = paths(dir, name);
        let bytes = fs.read(&ckpt_path).map_err(io_err("read", &ckpt_path))?;
        let mut findings = Vec::new();
        let mut state = match decode_checkpoint(&ckpt_path, &bytes) {
            Ok(s) if s.name == name => s,
            bad => {
                findings.push(bad_checkpoint(sink, &ckpt_path, name, &bytes, bad));
                ChannelState::new(name, 1)
            }
        };
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
            match frame_at(&data, at) {
                Frame::Whole(cmd, next) => {
                    state.apply(&cmd);
                    count += 1;
                    at = next;
                }
                Frame::Torn | Frame::Bad => {
                    let next = (at + 1..data.len())
                        .find(|&i| matches!(frame_at(&data, i), Frame::Whole(..)));
                    let end = next.unwrap_or(data.len());
                    // Only the length field damaged? Then the frame is whole up to `end`.
                    // One finding for the bytes `at..end` of this channel's WAL.
                    let finding = |action: &str| Finding {
                        channel: Some(name.to_string()),
                        ..sink.finding(
                            DamageKind::ChannelWal,
                            &wal_path,
                            (at as u64, end as u64),
                            sink.opening(),
                            action,
                        )
                    };
                    if let Some(cmd) = whole_with_length(&data[at..end]) {
                        state.apply(&cmd);
                        count += 1;
                        findings.push(finding(
                            "only the frame's length field was damaged: read whole, nothing forgotten",
                        ));
                        at = end;
                        continue;
                    }
                    // A short frame with nothing whole after it is a torn tail, not damage.
                    if next.is_none() && matches!(frame_at(&data, at), Frame::Torn) {
                        break;
                    }
                    findings.push(finding(
                        "WAL frames failed their CRC and were skipped: the finishes and requeues they held are forgotten, so those messages are delivered again",
                    ));
                    match next {
                        Some(n) => at = n,
                        None => {
                            at = data.len();
                            break;
                        }
                    }
                }
            }
        }
        if at < data.len() {
            file.truncate(at as u64)
                .map_err(io_err("truncate torn WAL tail", &wal_path))?;
            file.sync_all().map_err(io_err("fsync", &wal_path))?;
        }
        let mut wal = ChannelWal {
            fs,
            dir: dir.to_path_buf(),
            wal_path,
            ckpt_path,
            file,
            since_checkpoint: count,
            fault,
        };
        if !findings.is_empty() {
            // The audit records first, then the clean state over the damaged files.
            for f in findings {
                sink.report(f)?;
            }
            wal.checkpoint_inner(&state)?;
        }
        Ok((wal, state))
    }

    /// Appends command frames (one write); durable only after [`ChannelWal::sync`].
    pub fn append(&mut self, cmds: &[ChannelCommand]) -> Result<(), StorageError> {
        self.fault.check()?;
        // One contiguous buffer, one write: a group under load holds thousands of FINs, which
        // as a slice per header and body would be a `pwritev` per 512 frames (IOV_MAX).
        let mut frames = Vec::with_capacity(cmds.len() * (FRAME_HEADER + 35));
        for cmd in cmds {
            let at = frames.len();
            frames.extend_from_slice(&[0; FRAME_HEADER]);
            cmd.encode_into(&mut frames);
            let header = frame_header(&frames[at + FRAME_HEADER..]);
            frames[at..at + FRAME_HEADER].copy_from_slice(&header);
        }
        let r = self
            .file
            .append(&[IoSlice::new(&frames)])
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

/// The finding for a checkpoint that failed its CRC, did not parse, or names another channel:
/// the channel restarts from its beginning.
fn bad_checkpoint(
    sink: &DamageSink,
    path: &Path,
    name: &str,
    bytes: &[u8],
    bad: Result<ChannelState, StorageError>,
) -> Finding {
    let why = match bad {
        Ok(s) => format!("checkpoint names channel {:?}", s.name),
        Err(e) => e.to_string(),
    };
    Finding {
        channel: Some(name.to_string()),
        ..sink.finding(
            DamageKind::ChannelCheckpoint,
            path,
            (0, bytes.len() as u64),
            sink.opening(),
            &format!(
                "{why}: the channel restarts from the first stored message, so messages it had finished are delivered again"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DamageKind;
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
        let (_, s) = ChannelWal::open(
            Arc::new(fs.clone()),
            dir,
            "ch",
            Fault::default(),
            &sink(&fs),
        )
        .unwrap();
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
        let (w, s) = ChannelWal::open(arc, dir, "ch", Fault::default(), &sink(&fs)).unwrap();
        assert_eq!(s, st);
        assert_eq!(w.since_checkpoint, 0);
    }

    fn sink(fs: &SimFs) -> DamageSink {
        DamageSink::new(
            crate::Quarantine::load(Arc::new(fs.clone()), Path::new("/")),
            "t",
            crate::Detector::Startup,
        )
    }

    #[test]
    fn a_frame_with_a_bad_crc_is_skipped_quarantined_and_checkpointed_away() {
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
        for p in 1..=3 {
            w.append(&[ChannelCommand::Finish { position: p, id: p }])
                .unwrap();
        }
        w.sync().unwrap();
        drop(w);
        let wal = dir.join(format!("{}.wal", hex("ch")));
        // The second frame's body (29 bytes per frame): its FIN is forgotten, not the others.
        fs.corrupt(&wal, 29 + 14, 0xff);
        let sink = sink(&fs);
        let (w, s) = ChannelWal::open(arc.clone(), dir, "ch", Fault::default(), &sink).unwrap();
        assert!(s.is_done(1) && !s.is_done(2) && s.is_done(3), "{s:?}");
        let recs = sink.quarantine().records();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].kind, DamageKind::ChannelWal);
        assert_eq!((recs[0].offset_start, recs[0].offset_end), (29, 58));
        assert_eq!(recs[0].channel.as_deref(), Some("ch"));
        assert_eq!(
            w.since_checkpoint, 0,
            "the recovered state was checkpointed"
        );
        drop(w);
        let (_, again) = ChannelWal::open(arc, dir, "ch", Fault::default(), &sink).unwrap();
        assert_eq!(again, s);
        assert_eq!(sink.quarantine().records().len(), 1);
    }

    #[test]
    fn a_damaged_checkpoint_falls_back_to_the_beginning_plus_the_wal() {
        let fs = SimFs::new();
        let dir = Path::new("/c");
        let arc: Arc<dyn Fs> = Arc::new(fs.clone());
        let mut st = ChannelState::new("ch", 5);
        let mut w = ChannelWal::create(arc.clone(), dir, &st, Fault::default()).unwrap();
        let fin = ChannelCommand::Finish { position: 5, id: 5 };
        st.apply(&fin);
        w.checkpoint(&st).unwrap();
        w.append(&[ChannelCommand::Finish { position: 7, id: 7 }])
            .unwrap();
        w.sync().unwrap();
        drop(w);
        fs.corrupt(&dir.join(format!("{}.checkpoint", hex("ch"))), 20, 0x04);
        let sink = sink(&fs);
        let (_, s) = ChannelWal::open(arc, dir, "ch", Fault::default(), &sink).unwrap();
        assert!(
            !s.is_done(1) && !s.is_done(5),
            "redelivered, never lost: {s:?}"
        );
        assert!(s.is_done(7), "the WAL still applies");
        assert_eq!(
            sink.quarantine().records()[0].kind,
            DamageKind::ChannelCheckpoint
        );
    }
}
