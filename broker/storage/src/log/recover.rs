//! Opening a topic log: list the segment directory, drop leftovers, restore each sealed
//! segment from its index summary (or rebuild it) and rescan the last one, cutting a torn tail.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use super::{PageCache, Segment, TopicLog, pages, segment_path};
use crate::fs::Fs;
use crate::{Fault, StorageError, io_err};

fn parse_name(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("segment-")?;
    let (num, ext) = rest.split_once('.')?;
    if num.len() != 20 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, ext))
}

impl TopicLog {
    /// Opens (recovering) or creates the log in `dir`; `min_next_position` comes from the
    /// manifest. Sealed metadata pages go to `cache`, which every log of one store shares.
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: &Path,
        fault: Fault,
        max_segment_bytes: u64,
        min_next_position: u64,
        cache: Arc<PageCache>,
    ) -> Result<TopicLog, StorageError> {
        fs.create_dir_all(dir)
            .map_err(io_err("create directory", dir))?;
        let mut bases = Vec::new();
        let mut indexes = Vec::new();
        for name in fs.list(dir).map_err(io_err("list", dir))? {
            let path = dir.join(&name);
            match parse_name(&name) {
                Some((base, "rqlog")) => bases.push(base),
                Some((base, "rqidx")) => indexes.push(base),
                _ if name.ends_with(".tmp") => fs
                    .remove_file(&path)
                    .map_err(io_err("remove temp", &path))?,
                _ => {
                    return Err(StorageError::Corrupt {
                        file: path,
                        offset: 0,
                        detail: "unexpected file name in segments directory".into(),
                    });
                }
            }
        }
        bases.sort_unstable();
        for base in indexes {
            if bases.binary_search(&base).is_err() {
                let p = segment_path(dir, base, "rqidx");
                fs.remove_file(&p)
                    .map_err(io_err("remove orphan index", &p))?;
            }
        }
        let mut log = TopicLog {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            fault,
            max_segment_bytes,
            segments: Vec::new(),
            active: VecDeque::new(),
            cache,
            log_id: pages::next_log_id(),
            next_index: bases.first().copied().unwrap_or(1),
            next_position: min_next_position.max(1),
            last_ts: 0,
            durable_position: 0,
            appended_bytes: 0,
            durable_bytes: 0,
        };
        let count = bases.len();
        for (i, base) in bases.into_iter().enumerate() {
            log.recover_segment(base, i + 1 == count)?;
        }
        if log.segments.is_empty() {
            log.create_segment()?;
        }
        if let Some(last) = log.segments.iter().rev().find_map(|s| s.last_position) {
            log.next_position = log.next_position.max(last + 1);
        }
        log.durable_position = log.next_position - 1;
        Ok(log)
    }

    fn recover_segment(&mut self, base: u64, last: bool) -> Result<(), StorageError> {
        let path = segment_path(&self.dir, base, "rqlog");
        if base != self.next_index {
            return Err(StorageError::Corrupt {
                file: path,
                offset: 0,
                detail: format!(
                    "segment base {base} is not contiguous (expected {})",
                    self.next_index
                ),
            });
        }
        let file = self.fs.open(&path, false).map_err(io_err("open", &path))?;
        let len = file.len().map_err(io_err("stat", &path))?;
        let mut seg = Segment {
            base,
            path: path.clone(),
            file,
            len,
            last_log_index: None,
            last_position: None,
            summary: None,
        };
        if !last {
            let summary = match self.read_summary(&seg) {
                Some(s) => s,
                None => self.reindex(&seg)?,
            };
            seg.last_log_index = Some(summary.last_log_index);
            seg.last_position = (summary.count > 0).then_some(summary.last_position);
            self.last_ts = self.last_ts.max(summary.last_timestamp_ns);
            self.next_index = summary.last_log_index + 1;
            seg.summary = Some(summary);
            self.segments.push(seg);
            return Ok(());
        }
        let scan = self.scan(&seg, true)?;
        if scan.end < len {
            // Torn tail of the last segment: cut it off durably.
            seg.file
                .truncate(scan.end)
                .map_err(io_err("truncate torn tail", &path))?;
            seg.file.sync_all().map_err(io_err("fsync", &path))?;
            seg.len = scan.end;
        }
        seg.last_log_index = scan.last_log_index;
        seg.last_position = scan.entries.last().map(|e| e.position);
        if let Some(i) = scan.last_log_index {
            self.next_index = i + 1;
        }
        self.last_ts = self.last_ts.max(scan.last_ts);
        self.active = scan.entries.into();
        self.segments.push(seg);
        Ok(())
    }
}
