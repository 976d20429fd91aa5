//! Quarantine of data damaged at rest (docs/storage-format.md, "Damage at rest").
//!
//! A record, body, index, channel file or manifest that fails its check is not a reason to
//! stop: the damage is set aside and accounted for exactly, once. Each new finding becomes an
//! audit file `audit/quarantine-<020 created_ms>-<hex topic>-<06 seq>.json` (written atomically
//! before the broker acts on it), a count in [`Quarantine::messages_total`] and an entry in
//! [`Quarantine::summary`]. Findings already on record (same file and offset, or the same lost
//! positions) are not counted again, so a re-scan or a second channel reading the same body
//! does not inflate the figures.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::fs::Fs;
use crate::meta::{self, hex};
use crate::{StorageError, io_err};

/// Which kind of file held the damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageKind {
    /// A segment record failed its CRC or framing; its messages are lost unless recovered.
    SegmentRecord,
    /// One message body failed its CRC-32C when read for delivery.
    MessageBody,
    /// A sealed-segment index failed its checks; it is rebuilt from the segment.
    SegmentIndex,
    /// Channel WAL frames failed their CRC; their commands are dropped (redelivery).
    ChannelWal,
    /// A channel checkpoint failed its CRC; the channel restarts from its barrier (redelivery).
    ChannelCheckpoint,
    /// A topic manifest failed its checksum or did not parse; it is rebuilt.
    Manifest,
    /// `FORMAT`, `COMPATIBILITY` or `broker.meta` failed its checksum or did not parse and
    /// was rebuilt (from its temp sibling, from the other two files, or by `storage repair`).
    Metadata,
}

/// Where the damage was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detector {
    /// Reading a body for delivery.
    Read,
    /// The startup scan.
    Startup,
    /// The background or requested scrub.
    Scrub,
    /// `rustqueued storage repair`.
    Repair,
}

/// One quarantine audit record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineRecord {
    /// What kind of file.
    pub kind: DamageKind,
    /// Topic name.
    pub topic: String,
    /// Channel name, for channel files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The file, relative to the data directory.
    pub file: String,
    /// First damaged byte.
    pub offset_start: u64,
    /// End (exclusive) of the damaged bytes set aside.
    pub offset_end: u64,
    /// Positions of the messages lost (never delivered), ascending.
    pub positions: Vec<u64>,
    /// Their message ids (16 lowercase hex digits) when they could be recovered, else empty.
    pub message_ids: Vec<String>,
    /// Messages lost: `positions.len()`.
    pub messages: u64,
    /// What the broker did.
    pub action: String,
    /// Who found it.
    pub detected_by: Detector,
    /// When (ms since the epoch).
    pub created_at_ms: u64,
}

/// A finding before it is accounted for.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What kind of file.
    pub kind: DamageKind,
    /// Topic name.
    pub topic: String,
    /// Channel name, for channel files.
    pub channel: Option<String>,
    /// The damaged file (absolute, or as the store knows it).
    pub file: PathBuf,
    /// Damaged byte range.
    pub range: (u64, u64),
    /// Positions lost (may repeat earlier findings; those are not counted again).
    pub positions: Vec<u64>,
    /// Ids matching `positions` one to one, or empty when unknown.
    pub ids: Vec<u64>,
    /// What the broker did.
    pub action: String,
    /// Who found it.
    pub detected_by: Detector,
}

#[derive(Default)]
struct State {
    records: Vec<QuarantineRecord>,
    seen: HashSet<(String, u64, DamageKind)>,
    positions: HashMap<String, BTreeSet<u64>>,
    messages_since_start: u64,
    records_since_start: u64,
    seq: u64,
}

/// The store-wide quarantine ledger (cheap to clone).
#[derive(Clone)]
pub struct Quarantine {
    fs: Arc<dyn Fs>,
    root: PathBuf,
    state: Arc<Mutex<State>>,
    /// Read-only (`storage verify`): findings are counted but nothing is written.
    dry_run: bool,
}

impl std::fmt::Debug for Quarantine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quarantine")
            .field("root", &self.root)
            .finish()
    }
}

/// What `/v1/health` shows of the quarantine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuarantineSummary {
    /// Messages quarantined since this process started.
    pub quarantined_messages_since_start: u64,
    /// Audit records written since this process started.
    pub findings_since_start: u64,
    /// Audit records on disk (all time).
    pub findings_on_record: u64,
    /// Messages lost according to every record on disk.
    pub messages_on_record: u64,
    /// The latest records (at most 20), newest last.
    pub latest: Vec<QuarantineRecord>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Quarantine {
    /// The ledger of `root`, loaded from the audit records already there.
    pub fn load(fs: Arc<dyn Fs>, root: &Path) -> Quarantine {
        let q = Quarantine {
            fs,
            root: root.to_path_buf(),
            state: Arc::default(),
            dry_run: false,
        };
        let mut st = State::default();
        for r in list(q.fs.as_ref(), root) {
            st.seen.insert((r.file.clone(), r.offset_start, r.kind));
            st.positions
                .entry(r.topic.clone())
                .or_default()
                .extend(r.positions.iter().copied());
            st.records.push(r);
        }
        st.seq = st.records.len() as u64;
        *q.lock() = st;
        q
    }

    /// A ledger that counts findings without writing anything (`storage verify`).
    pub fn read_only(fs: Arc<dyn Fs>, root: &Path) -> Quarantine {
        let mut q = Self::load(fs, root);
        q.dry_run = true;
        q
    }

    /// A ledger for logs that have no data directory (ephemeral topics, unit tests).
    pub fn detached(fs: Arc<dyn Fs>) -> Quarantine {
        Quarantine {
            fs,
            root: PathBuf::new(),
            state: Arc::default(),
            dry_run: true,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn relative(&self, file: &Path) -> String {
        file.strip_prefix(&self.root)
            .unwrap_or(file)
            .display()
            .to_string()
    }

    /// Whether `position` of `topic` is on record as lost.
    pub fn is_quarantined(&self, topic: &str, position: u64) -> bool {
        self.lock()
            .positions
            .get(topic)
            .is_some_and(|s| s.contains(&position))
    }

    /// Accounts for `f` unless it is already on record; returns the new record, if any. The
    /// audit file is durable before this returns (an I/O failure is an error the caller must
    /// treat as a write failure).
    pub fn report(&self, f: Finding) -> Result<Option<QuarantineRecord>, StorageError> {
        let file = self.relative(&f.file);
        let mut st = self.lock();
        let known = st.positions.get(&f.topic);
        let mut positions = Vec::new();
        let mut ids = Vec::new();
        for (i, &p) in f.positions.iter().enumerate() {
            if known.is_some_and(|k| k.contains(&p)) || positions.contains(&p) {
                continue;
            }
            positions.push(p);
            if let Some(id) = f.ids.get(i) {
                ids.push(format!("{id:016x}"));
            }
        }
        if f.ids.len() != f.positions.len() {
            ids.clear();
        }
        let key = (file.clone(), f.range.0, f.kind);
        let seen = st.seen.contains(&key);
        if positions.is_empty() && (seen || !f.positions.is_empty()) {
            return Ok(None);
        }
        st.seq += 1;
        let rec = QuarantineRecord {
            kind: f.kind,
            topic: f.topic.clone(),
            channel: f.channel,
            file,
            offset_start: f.range.0,
            offset_end: f.range.1,
            messages: positions.len() as u64,
            positions,
            message_ids: ids,
            action: f.action,
            detected_by: f.detected_by,
            created_at_ms: now_ms(),
        };
        if !self.dry_run {
            write(self.fs.as_ref(), &self.root, &rec, st.seq)?;
        }
        st.seen.insert(key);
        st.positions
            .entry(rec.topic.clone())
            .or_default()
            .extend(rec.positions.iter().copied());
        st.messages_since_start += rec.messages;
        st.records_since_start += 1;
        st.records.push(rec.clone());
        Ok(Some(rec))
    }

    /// Messages quarantined since this process started
    /// (`rustqueue_storage_quarantined_messages_total`).
    pub fn messages_total(&self) -> u64 {
        self.lock().messages_since_start
    }

    /// Every record known (on disk before start plus those written since), oldest first.
    pub fn records(&self) -> Vec<QuarantineRecord> {
        self.lock().records.clone()
    }

    /// The `/v1/health` detail.
    pub fn summary(&self) -> QuarantineSummary {
        let st = self.lock();
        QuarantineSummary {
            quarantined_messages_since_start: st.messages_since_start,
            findings_since_start: st.records_since_start,
            findings_on_record: st.records.len() as u64,
            messages_on_record: st.records.iter().map(|r| r.messages).sum(),
            latest: st.records[st.records.len().saturating_sub(20)..].to_vec(),
        }
    }
}

fn write(fs: &dyn Fs, root: &Path, rec: &QuarantineRecord, seq: u64) -> Result<(), StorageError> {
    let dir = root.join("audit");
    if !fs.exists(&dir) {
        fs.create_dir_all(&dir)
            .map_err(io_err("create directory", &dir))?;
        fs.sync_dir(root).map_err(io_err("fsync directory", root))?;
    }
    let name = format!(
        "quarantine-{:020}-{}-{seq:06}.json",
        rec.created_at_ms,
        hex(&rec.topic)
    );
    meta::write_json(fs, &dir.join(name), rec)
}

/// Every quarantine record under `<root>/audit/`, oldest first (unreadable ones are skipped:
/// an audit file is a report, never a reason to refuse startup).
pub fn list(fs: &dyn Fs, root: &Path) -> Vec<QuarantineRecord> {
    let dir = root.join("audit");
    let Ok(mut names) = fs.list(&dir) else {
        return Vec::new();
    };
    names.retain(|n| n.starts_with("quarantine-") && n.ends_with(".json"));
    names.sort();
    names
        .iter()
        .filter_map(|n| meta::read_json(fs, &dir.join(n)).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simfs::SimFs;

    fn finding(positions: Vec<u64>, offset: u64) -> Finding {
        Finding {
            kind: DamageKind::MessageBody,
            topic: "t".into(),
            channel: None,
            file: PathBuf::from("/d/topics/74/segments/segment-1.rqlog"),
            range: (offset, offset + 10),
            ids: positions.iter().map(|p| p + 100).collect(),
            positions,
            action: "skipped".into(),
            detected_by: Detector::Read,
        }
    }

    #[test]
    fn a_finding_is_counted_once_and_survives_a_reload() {
        let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
        let root = Path::new("/d");
        fs.create_dir_all(root).unwrap();
        let q = Quarantine::load(fs.clone(), root);
        let rec = q.report(finding(vec![7], 40)).unwrap().unwrap();
        assert_eq!(rec.message_ids, vec!["000000000000006b".to_string()]);
        assert_eq!(rec.file, "topics/74/segments/segment-1.rqlog");
        assert!(q.report(finding(vec![7], 40)).unwrap().is_none());
        assert!(q.report(finding(vec![7], 12)).unwrap().is_none());
        let rec = q.report(finding(vec![7, 8], 12)).unwrap().unwrap();
        assert_eq!((rec.positions.clone(), rec.messages), (vec![8], 1));
        assert_eq!(q.messages_total(), 2);
        let again = Quarantine::load(fs, root);
        assert_eq!(again.messages_total(), 0);
        assert_eq!(again.summary().messages_on_record, 2);
        assert!(again.is_quarantined("t", 8));
        assert!(again.report(finding(vec![8], 99)).unwrap().is_none());
    }
}
