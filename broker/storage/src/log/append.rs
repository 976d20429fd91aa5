//! Appending. Each batch becomes one record; every record of a group that fits the active
//! segment goes to the page cache in one positional write, so a publish group of many small
//! requests costs one `pwritev`, not one per request. With deferred appends
//! ([`TopicLog::defer_appends`]) a group's records may instead wait in memory and share the
//! write of later groups. Nothing here fsyncs.

use std::io::IoSlice;

use super::{AppendBatch, Entry, TopicLog, ZERO_AHEAD_BYTES, ZEROS};
use crate::failpoint::crash_failpoint;
use crate::record::{self, HEADER_LEN, RecordHeader};
use crate::{StorageError, io_err};

/// One record encoded and waiting for the write that carries its run.
struct Encoded {
    /// Which batch of the group it is.
    batch: usize,
    header: [u8; HEADER_LEN],
    count: [u8; 4],
    items: Vec<[u8; record::ITEM_LEN]>,
    first_pos: u64,
    timestamp_ns: i64,
    log_index: u64,
    rec_len: u64,
}

/// Records encoded for the active segment and not yet written: where the next one starts.
#[derive(Default)]
struct Run {
    records: Vec<Encoded>,
    bytes: u64,
    messages: u64,
    last_ts: i64,
}

type Results = Vec<Option<Result<u64, StorageError>>>;

/// Where a run was written, and how far its segment is zeroed after it.
struct Written {
    offset: u64,
    zeroed: u64,
}

impl TopicLog {
    /// Appends one batch as one record; returns its first position. Not durable until synced.
    pub fn append<B: AsRef<[u8]>>(
        &mut self,
        batch: &AppendBatch<'_, B>,
    ) -> Result<u64, StorageError> {
        self.append_group(std::slice::from_ref(batch))
            .pop()
            .unwrap_or(Err(StorageError::BatchTooLarge(0)))
    }

    /// Appends every batch, in order, each as one record; returns each one's first position
    /// or why it was refused. A batch refused for its shape (empty, too many bodies, too
    /// large) does not affect the others. Consecutive records that fit the active segment are
    /// written together, one positional write per segment touched. Not durable until synced.
    pub fn append_group<B: AsRef<[u8]>>(
        &mut self,
        batches: &[AppendBatch<'_, B>],
    ) -> Vec<Result<u64, StorageError>> {
        let mut results: Results = batches.iter().map(|_| None).collect();
        let mut run = Run {
            last_ts: self.last_ts,
            ..Run::default()
        };
        for (i, batch) in batches.iter().enumerate() {
            let plen = match self.fault.check().and_then(|()| shape(batch)) {
                Ok(plen) => plen,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            let rec_len = HEADER_LEN as u64 + plen;
            if self.would_overflow(run.bytes, rec_len) {
                self.write_run(std::mem::take(&mut run), batches, &mut results);
                run.last_ts = self.last_ts;
                if self.would_overflow(0, rec_len)
                    && let Err(e) = self.rotate_guarded()
                {
                    results[i] = Some(Err(e));
                    continue;
                }
            }
            run.records.push(self.encode(i, batch, plen, &run));
            run.bytes += rec_len;
            run.messages += batch.bodies.len() as u64;
            run.last_ts = run.records.last().map_or(run.last_ts, |r| r.timestamp_ns);
        }
        self.write_run(run, batches, &mut results);
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(StorageError::BatchTooLarge(0))))
            .collect()
    }

    /// Seals the active segment and opens the next; a failure trips the fault switch.
    fn rotate_guarded(&mut self) -> Result<(), StorageError> {
        let r = self.rotate(self.defer_index);
        self.fault.guard(r)
    }

    /// Whether a record of `rec_len` bytes after `pending` unwritten ones would overflow a
    /// non-empty active segment (a record larger than a segment gets an empty one to itself).
    fn would_overflow(&self, pending: u64, rec_len: u64) -> bool {
        self.segments.last().is_some_and(|s| {
            let len = s.len + pending;
            len > 0 && len + rec_len > self.max_segment_bytes
        })
    }

    /// Encodes batch `i` to follow what `run` already holds.
    fn encode<B: AsRef<[u8]>>(
        &self,
        i: usize,
        batch: &AppendBatch<'_, B>,
        plen: u64,
        run: &Run,
    ) -> Encoded {
        let first_pos = self.next_position + run.messages;
        let ts = batch.timestamp_ns.max(run.last_ts);
        let count = (batch.bodies.len() as u32).to_be_bytes();
        let items: Vec<[u8; record::ITEM_LEN]> = batch
            .bodies
            .iter()
            .enumerate()
            .map(|(k, b)| {
                record::item_header(
                    first_pos + k as u64,
                    batch.first_id + k as u64,
                    b.as_ref().len() as u32,
                )
            })
            .collect();
        let payload = payload_slices(&count, &items, batch.bodies);
        let h = RecordHeader {
            log_index: self.next_index + run.records.len() as u64,
            timestamp_ns: ts,
            first_id: batch.first_id,
            available_at_ms: batch.available_at_ms,
            payload_len: plen as u32,
            crc: 0,
        };
        Encoded {
            batch: i,
            header: record::encode_header(&h, &payload),
            count,
            items,
            first_pos,
            timestamp_ns: ts,
            log_index: h.log_index,
            rec_len: HEADER_LEN as u64 + plen,
        }
    }

    /// Writes a run in one positional write (plus the zeros ahead of it) and records its
    /// entries; on failure every batch of the run gets the error and nothing is recorded.
    fn write_run<B: AsRef<[u8]>>(
        &mut self,
        run: Run,
        batches: &[AppendBatch<'_, B>],
        results: &mut Results,
    ) {
        if run.records.is_empty() {
            return;
        }
        // The run must not land where a zero write handed out may still write.
        if self
            .segments
            .last()
            .is_some_and(|seg| seg.len + run.bytes > seg.zeroed)
        {
            self.settle_zeros();
        }
        if self.defers(&run) {
            self.leave_unwritten(run, batches, results);
            return;
        }
        match self.fault.guard(self.write_records(&run, batches)) {
            Ok(written) => {
                self.unwritten.buf = Vec::new();
                self.commit(run, batches, written, results);
                self.ask_for_zeros();
            }
            Err(e) => {
                // The first record gets the error; the write tripped the fault switch, so the
                // rest are refused as isolated storage, which they now are.
                let why = e.to_string();
                let mut first = Some(e);
                for r in &run.records {
                    let err = first
                        .take()
                        .unwrap_or_else(|| StorageError::Isolated(why.clone()));
                    results[r.batch] = Some(Err(err));
                }
            }
        }
    }

    /// Whether `run` stays in memory ([`TopicLog::defer_appends`]): deferred appends are
    /// on, it fits beside what already waits, and the log is not isolated.
    fn defers(&self, run: &Run) -> bool {
        self.unwritten.on
            && self.zeros.on
            && self.unwritten.buf.len() as u64 + run.bytes <= super::UNWRITTEN_MAX_BYTES
            && self.fault.check().is_ok()
            && !self.segments.is_empty()
    }

    /// Encodes `run` behind the records already waiting to be written and records its
    /// entries as appended: readers get its bodies from memory until it is written.
    fn leave_unwritten<B: AsRef<[u8]>>(
        &mut self,
        run: Run,
        batches: &[AppendBatch<'_, B>],
        results: &mut Results,
    ) {
        let Some(seg) = self.segments.last() else {
            return;
        };
        let (offset, zeroed) = (seg.len, seg.zeroed);
        let buf = &mut self.unwritten.buf;
        buf.reserve(run.bytes as usize);
        for r in &run.records {
            buf.extend_from_slice(&r.header);
            for part in payload_slices(&r.count, &r.items, batches[r.batch].bodies) {
                buf.extend_from_slice(part);
            }
        }
        let end = offset + run.bytes;
        let written = Written {
            offset,
            zeroed: zeroed.max(end),
        };
        self.commit(run, batches, written, results);
        self.ask_for_zeros();
    }

    /// The write itself, after the records waiting in memory if any (they come just before
    /// the run); returns where the run starts and how far the segment is now zeroed.
    fn write_records<B: AsRef<[u8]>>(
        &self,
        run: &Run,
        batches: &[AppendBatch<'_, B>],
    ) -> Result<Written, StorageError> {
        let zero_ahead = !self.zeros.on && self.zeros_wanted();
        let seg = self
            .segments
            .last()
            .ok_or_else(|| StorageError::Isolated("no active segment".into()))?;
        let end = seg.len + run.bytes;
        let zeros = if zero_ahead && end > seg.zeroed {
            self.max_segment_bytes
                .saturating_sub(end)
                .min(ZERO_AHEAD_BYTES as u64) as usize
        } else {
            0
        };
        let parts: usize = run.records.iter().map(|r| 2 + 2 * r.items.len()).sum();
        let mut slices = Vec::with_capacity(parts + 2);
        let mut at = seg.len;
        if let Some((_, from)) = self.unwritten_from()? {
            slices.push(IoSlice::new(&self.unwritten.buf));
            at = from;
        }
        for r in &run.records {
            slices.push(IoSlice::new(&r.header));
            slices.extend(
                payload_slices(&r.count, &r.items, batches[r.batch].bodies)
                    .into_iter()
                    .map(IoSlice::new),
            );
        }
        if zeros > 0 {
            slices.push(IoSlice::new(&ZEROS[..zeros]));
        }
        seg.local()
            .and_then(|f| f.write_at(&slices, at))
            .map_err(io_err("append", &seg.path))?;
        Ok(Written {
            offset: seg.len,
            zeroed: seg.zeroed.max(end + zeros as u64),
        })
    }

    /// Records the entries of a written run and moves the log's ends past it.
    fn commit<B: AsRef<[u8]>>(
        &mut self,
        run: Run,
        batches: &[AppendBatch<'_, B>],
        written: Written,
        results: &mut Results,
    ) {
        let Some(seg) = self.segments.last_mut() else {
            return;
        };
        let base = seg.base;
        let offset = written.offset;
        seg.zeroed = written.zeroed;
        seg.len = offset + run.bytes;
        let mut at = offset;
        for r in &run.records {
            let batch = &batches[r.batch];
            let n = batch.bodies.len() as u64;
            seg.last_log_index = Some(r.log_index);
            seg.last_position = Some(r.first_pos + n - 1);
            let mut body_at = at + HEADER_LEN as u64 + 4;
            for (k, b) in batch.bodies.iter().enumerate() {
                body_at += record::ITEM_LEN as u64;
                let body = b.as_ref();
                let position = r.first_pos + k as u64;
                self.recent.push(position, batch.first_id + k as u64, body);
                self.active.push_back(Entry {
                    position,
                    id: batch.first_id + k as u64,
                    timestamp_ns: r.timestamp_ns,
                    available_at_ms: batch.available_at_ms,
                    body_offset: body_at,
                    body_len: body.len() as u32,
                    body_crc: crc32c::crc32c(body),
                    segment: base,
                });
                body_at += body.len() as u64;
            }
            at += r.rec_len;
            results[r.batch] = Some(Ok(r.first_pos));
        }
        self.last_ts = run.last_ts;
        self.next_index += run.records.len() as u64;
        self.next_position += run.messages;
        self.appended_bytes += run.bytes;
        crash_failpoint("publish_after_append_before_fsync");
    }
}

/// The checks a batch must pass before it is encoded; returns its payload length.
fn shape<B: AsRef<[u8]>>(batch: &AppendBatch<'_, B>) -> Result<u64, StorageError> {
    let n = batch.bodies.len();
    if n == 0 || n > record::MAX_BATCH {
        return Err(StorageError::BatchTooLarge(n as u64));
    }
    let plen = record::payload_len(batch.bodies.iter().map(|b| b.as_ref().len()));
    if plen > record::MAX_PAYLOAD {
        return Err(StorageError::BatchTooLarge(plen));
    }
    Ok(plen)
}

/// A record's payload as written: the count, then each item header and its body.
fn payload_slices<'a, B: AsRef<[u8]>>(
    count: &'a [u8; 4],
    items: &'a [[u8; record::ITEM_LEN]],
    bodies: &'a [B],
) -> Vec<&'a [u8]> {
    let mut payload: Vec<&[u8]> = Vec::with_capacity(1 + 2 * items.len());
    payload.push(count);
    for (it, b) in items.iter().zip(bodies) {
        payload.push(it);
        payload.push(b.as_ref());
    }
    payload
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::super::{AppendBatch, DamageSink, TopicLog};
    use crate::record::{self, HEADER_LEN};
    use crate::simfs::SimFs;
    use crate::{Fault, StorageError, fs::Fs};

    fn open(fs: &SimFs, max_segment_bytes: u64) -> TopicLog {
        let dynfs: Arc<dyn Fs> = Arc::new(fs.clone());
        TopicLog::open(
            dynfs.clone(),
            Path::new("/t"),
            Fault::default(),
            max_segment_bytes,
            1,
            Default::default(),
            DamageSink::detached(dynfs, "t"),
        )
        .unwrap()
    }

    fn bodies(n: usize, tag: u8) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![tag, i as u8, 7]).collect()
    }

    fn batch(first_id: u64, bodies: &[Vec<u8>]) -> AppendBatch<'_, Vec<u8>> {
        AppendBatch {
            first_id,
            bodies,
            timestamp_ns: 5,
            available_at_ms: 0,
        }
    }

    fn segment_files(fs: &SimFs) -> Vec<Vec<u8>> {
        let mut paths = fs.paths();
        paths.sort();
        paths
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rqlog"))
            .map(|p| fs.read(p).unwrap())
            .collect()
    }

    #[test]
    fn a_group_is_written_once_and_stored_byte_for_byte_as_single_appends() {
        let sets: Vec<Vec<Vec<u8>>> = (0..5).map(|i| bodies(1 + i % 3, i as u8)).collect();
        let (one, each) = (SimFs::new(), SimFs::new());
        let (mut grouped, mut single) = (open(&one, 1 << 20), open(&each, 1 << 20));
        let mut ids = 1;
        let batches: Vec<_> = sets
            .iter()
            .map(|b| {
                let first = ids;
                ids += b.len() as u64;
                batch(first, b)
            })
            .collect();
        let before = one.ops();
        let firsts = grouped.append_group(&batches);
        assert_eq!(one.ops() - before, 1, "one write for the whole group");
        for b in &batches {
            single.append(b).unwrap();
        }
        let firsts: Vec<u64> = firsts.into_iter().map(Result::unwrap).collect();
        assert_eq!(firsts, vec![1, 2, 4, 7, 8]);
        assert_eq!(segment_files(&one), segment_files(&each));
        for p in 1..ids {
            let (g, s) = (grouped.entry(p).unwrap(), single.entry(p).unwrap());
            assert_eq!(g, s);
            assert_eq!(
                grouped.read_body(&g).unwrap(),
                single.read_body(&s).unwrap()
            );
        }
        assert_eq!(grouped.unsynced(), single.unsynced());
    }

    #[test]
    fn a_refused_batch_leaves_the_rest_of_its_group_appended_in_order() {
        let fs = SimFs::new();
        let mut log = open(&fs, 1 << 20);
        let (a, b) = (bodies(2, 1), bodies(1, 2));
        let empty: Vec<Vec<u8>> = Vec::new();
        let results = log.append_group(&[batch(1, &a), batch(3, &empty), batch(3, &b)]);
        assert!(matches!(results[0], Ok(1)));
        assert!(matches!(results[1], Err(StorageError::BatchTooLarge(0))));
        assert!(matches!(results[2], Ok(3)));
        assert_eq!(log.read_body(&log.entry(3).unwrap()).unwrap(), b[0]);
        assert_eq!(log.next_position(), 4);
    }

    #[test]
    fn a_group_that_fills_the_segment_continues_in_the_next_one() {
        let fs = SimFs::new();
        let record = HEADER_LEN as u64 + record::payload_len([3usize]);
        let mut log = open(&fs, 3 * record);
        let sets: Vec<Vec<Vec<u8>>> = (0..7).map(|i| bodies(1, i)).collect();
        let batches: Vec<_> = sets
            .iter()
            .enumerate()
            .map(|(i, b)| batch(i as u64 + 1, b))
            .collect();
        let results = log.append_group(&batches);
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(log.segment_count(), 3);
        for (i, b) in sets.iter().enumerate() {
            let e = log.entry(i as u64 + 1).unwrap();
            assert_eq!(&log.read_body(&e).unwrap(), &b[0]);
        }
    }

    #[test]
    fn a_failed_write_refuses_its_whole_run_and_moves_nothing() {
        let fs = SimFs::new();
        let mut log = open(&fs, 1 << 20);
        let (a, b) = (bodies(1, 1), bodies(1, 2));
        fs.fail_after(0);
        let results = log.append_group(&[batch(1, &a), batch(2, &b)]);
        assert!(matches!(results[0], Err(StorageError::Io { .. })));
        assert!(matches!(results[1], Err(StorageError::Isolated(_))));
        assert_eq!(log.next_position(), 1);
        assert_eq!(log.unsynced(), (0, 0));
        assert!(matches!(
            log.append(&batch(1, &a)),
            Err(StorageError::Isolated(_))
        ));
    }

    #[test]
    fn entries_carry_each_body_checksum_and_recent_bodies_are_the_bytes_appended() {
        let fs = SimFs::new();
        let mut log = open(&fs, 1 << 22);
        let small = bodies(3, 4);
        let large = vec![vec![9u8; super::super::RECENT_BODY_MAX + 1]];
        let results = log.append_group(&[batch(1, &small), batch(4, &large)]);
        assert!(results.iter().all(Result::is_ok));
        for (p, body) in small.iter().chain(&large).enumerate() {
            let e = log.entry(p as u64 + 1).unwrap();
            assert_eq!(e.body_crc, crc32c::crc32c(body), "position {}", p + 1);
            assert_eq!(&log.read_body(&e).unwrap(), body);
        }
        // A body too large to keep ends the run of recent copies; the next ones start it again.
        assert!(log.recent_body(&log.entry(1).unwrap()).is_none());
        assert!(log.recent_body(&log.entry(4).unwrap()).is_none());
        let again = bodies(2, 5);
        log.append(&batch(5, &again)).unwrap();
        for (k, body) in again.iter().enumerate() {
            let e = log.entry(5 + k as u64).unwrap();
            assert_eq!(log.recent_body(&e).as_deref(), Some(&body[..]));
        }
    }

    /// A log whose appends are left in memory ([`TopicLog::defer_appends`]), with zeros
    /// left to the caller (who never writes them here).
    fn deferred(fs: &SimFs, max_segment_bytes: u64) -> TopicLog {
        let mut log = open(fs, max_segment_bytes);
        log.defer_zero_writes();
        log.defer_appends();
        log
    }

    /// Appends `n` single-body batches (`tag`, i) with ids from `first_id`.
    fn append_each(log: &mut TopicLog, first_id: u64, n: usize, tag: u8) -> Vec<Vec<u8>> {
        let sets: Vec<Vec<Vec<u8>>> = (0..n).map(|i| vec![vec![tag, i as u8, 9]]).collect();
        for (i, b) in sets.iter().enumerate() {
            log.append(&batch(first_id + i as u64, b)).unwrap();
        }
        sets.into_iter().flatten().collect()
    }

    #[test]
    fn deferred_appends_share_one_write_and_store_the_bytes_of_single_appends() {
        let (one, each) = (SimFs::new(), SimFs::new());
        let mut lazy = deferred(&one, 1 << 20);
        let mut plain = open(&each, 1 << 20);
        plain.defer_zero_writes();
        // The first append creates the segment file; count from there.
        let first = append_each(&mut lazy, 1, 1, 1);
        append_each(&mut plain, 1, 1, 1);
        lazy.write_unwritten().unwrap();
        let before = one.ops();
        let bodies = append_each(&mut lazy, 2, 20, 2);
        append_each(&mut plain, 2, 20, 2);
        assert_eq!(one.ops(), before, "nothing written yet");
        assert!(lazy.has_unwritten());
        // Bodies not yet written are read from memory, and are the bytes appended.
        for (k, body) in first.iter().chain(&bodies).enumerate() {
            let e = lazy.entry(k as u64 + 1).unwrap();
            assert_eq!(lazy.is_unwritten(&e), k > 0, "position {}", k + 1);
            assert_eq!(&lazy.read_body(&e).unwrap(), body);
        }
        lazy.write_unwritten().unwrap();
        assert_eq!(one.ops(), before + 1, "one write for the twenty appends");
        assert!(!lazy.has_unwritten());
        assert_eq!(segment_files(&one), segment_files(&each));
        assert_eq!(lazy.unsynced(), plain.unsynced());
    }

    #[test]
    fn an_append_past_the_bound_writes_what_waits_with_its_own_records_in_one_write() {
        let fs = SimFs::new();
        let mut log = deferred(&fs, 4 << 20);
        let mut small = append_each(&mut log, 1, 10, 1);
        let before = fs.ops();
        // Ten small records wait; a body of the whole bound cannot join them.
        let big = vec![vec![7u8; super::super::UNWRITTEN_MAX_BYTES as usize]];
        log.append(&batch(11, &big)).unwrap();
        assert_eq!(
            fs.ops(),
            before + 1,
            "one write for what waited and the large record"
        );
        assert!(!log.has_unwritten());
        small.extend(big);
        let mut reopened = open(&fs, 4 << 20);
        for (k, body) in small.iter().enumerate() {
            let e = reopened.entry(k as u64 + 1).unwrap();
            assert_eq!(&reopened.read_body(&e).unwrap(), body);
        }
        reopened.seal_active().unwrap();
    }

    #[test]
    fn unwritten_records_are_written_before_a_sync_a_seal_and_a_close() {
        // A sync's handle.
        let fs = SimFs::new();
        let mut log = deferred(&fs, 1 << 20);
        append_each(&mut log, 1, 5, 1);
        log.sync_handle().unwrap().sync().unwrap();
        assert!(!log.has_unwritten());
        fs.crash(&mut |_| 0);
        let reopened = open(&fs, 1 << 20);
        assert_eq!(
            reopened.next_position(),
            6,
            "the synced records survive power loss"
        );
        drop(log);
        // A seal.
        let fs = SimFs::new();
        let mut log = deferred(&fs, 1 << 20);
        append_each(&mut log, 1, 5, 2);
        log.seal_active().unwrap();
        fs.crash(&mut |_| 0);
        assert_eq!(open(&fs, 1 << 20).next_position(), 6, "a seal fsyncs them");
        // A segment filled by deferred appends continues in the next one, in order.
        let fs = SimFs::new();
        let record = HEADER_LEN as u64 + record::payload_len([3usize]);
        let mut log = deferred(&fs, 3 * record);
        let sets: Vec<Vec<Vec<u8>>> = (0..7).map(|i| bodies(1, i)).collect();
        for (i, b) in sets.iter().enumerate() {
            log.append(&batch(i as u64 + 1, b)).unwrap();
        }
        assert_eq!(log.segment_count(), 3);
        // A close.
        drop(log);
        let reopened = open(&fs, 3 * record);
        for (i, b) in sets.iter().enumerate() {
            let e = reopened.entry(i as u64 + 1).unwrap();
            assert_eq!(&reopened.read_body(&e).unwrap(), &b[0]);
        }
    }

    #[test]
    fn a_failed_write_of_unwritten_records_isolates_the_log_and_keeps_them_readable() {
        let fs = SimFs::new();
        let mut log = deferred(&fs, 1 << 20);
        let appended = append_each(&mut log, 1, 3, 1);
        fs.fail_after(0);
        assert!(matches!(
            log.write_unwritten(),
            Err(StorageError::Io { .. })
        ));
        // Isolated: nothing more is appended or written, and the handle never syncs them.
        assert!(matches!(
            log.append(&batch(4, &bodies(1, 4))),
            Err(StorageError::Isolated(_))
        ));
        assert!(matches!(
            log.write_unwritten(),
            Err(StorageError::Isolated(_))
        ));
        assert!(log.sync_handle().unwrap().sync().is_err());
        for (k, body) in appended.iter().enumerate() {
            let e = log.entry(k as u64 + 1).unwrap();
            assert_eq!(&log.read_body(&e).unwrap(), body);
        }
    }
}
