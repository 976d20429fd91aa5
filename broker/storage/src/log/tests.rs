use std::any::Any;
use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::sync::Mutex;

use super::index::PAGE_ENTRIES;
use super::*;
use crate::record::{self, HEADER_LEN};
use crate::simfs::SimFs;

fn sink() -> DamageSink {
    DamageSink::detached(Arc::new(SimFs::new()), "t")
}

fn append(log: &mut TopicLog, id: u64, body: &[u8]) -> u64 {
    log.append(&AppendBatch {
        first_id: id,
        bodies: &[body],
        timestamp_ns: 1,
        available_at_ms: 0,
    })
    .unwrap()
}

#[test]
fn appends_made_while_a_sync_runs_stay_counted_as_unsynced() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let mut log = TopicLog::open(
        fs,
        Path::new("/t"),
        Fault::default(),
        1 << 20,
        1,
        Default::default(),
        sink(),
    )
    .unwrap();
    for id in 1..=3 {
        append(&mut log, id, b"abc");
    }
    let record = HEADER_LEN as u64 + record::payload_len([3usize]);
    assert_eq!(log.unsynced(), (3, 3 * record));
    // A sync outside the lock: the handle covers what was appended when it was taken.
    let handle = log.sync_handle().unwrap();
    append(&mut log, 4, b"abc");
    append(&mut log, 5, b"abc");
    let synced = handle.sync().unwrap();
    log.mark_synced(synced);
    assert_eq!(synced.through, 3);
    assert_eq!(log.unsynced(), (2, 2 * record));
    assert_eq!(log.oldest_unsynced_timestamp(), Some(1));
    log.sync().unwrap();
    assert_eq!(log.unsynced(), (0, 0));
    assert_eq!(log.oldest_unsynced_timestamp(), None);
}

#[test]
fn append_needs_io_only_to_start_or_seal_a_segment() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let record = HEADER_LEN as u64 + record::payload_len([1000usize]);
    let mut log = TopicLog::open(
        fs,
        Path::new("/t"),
        Fault::default(),
        4 * record + 10,
        1,
        Default::default(),
        sink(),
    )
    .unwrap();
    for id in 1..=4 {
        assert!(!log.append_needs_io(record), "record {id} fits");
        append(&mut log, id, &[7u8; 1000]);
    }
    assert!(log.append_needs_io(record), "the fifth seals the segment");
    assert!(!log.append_needs_io(0));
}

/// Bytes read per file extension, through a wrapper around the simulated file system.
#[derive(Clone)]
struct Counting {
    inner: SimFs,
    read: Arc<Mutex<BTreeMap<String, u64>>>,
}

struct CountingFile {
    inner: Arc<dyn FsFile>,
    ext: String,
    read: Arc<Mutex<BTreeMap<String, u64>>>,
}

fn ext(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Counting {
    fn new(inner: SimFs) -> Counting {
        Counting {
            inner,
            read: Arc::default(),
        }
    }
    fn take(&self, ext: &str) -> u64 {
        self.read.lock().unwrap().remove(ext).unwrap_or(0)
    }
    fn count(&self, ext: String, n: usize) {
        *self.read.lock().unwrap().entry(ext).or_default() += n as u64;
    }
}

impl FsFile for CountingFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        *self
            .read
            .lock()
            .unwrap()
            .entry(self.ext.clone())
            .or_default() += buf.len() as u64;
        self.inner.read_exact_at(buf, offset)
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        self.inner.write_at(bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }
}

impl Fs for Counting {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn FsFile>> {
        Ok(Arc::new(CountingFile {
            inner: self.inner.open(path, create)?,
            ext: ext(path),
            read: self.read.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let bytes = self.inner.read(path)?;
        self.count(ext(path), bytes.len());
        Ok(bytes)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.inner.lock(path)
    }
    fn zero_fill_ahead(&self) -> bool {
        self.inner.zero_fill_ahead()
    }
}

const DIR: &str = "/t";

fn record_len(batch: usize, body: usize) -> u64 {
    HEADER_LEN as u64 + record::payload_len(std::iter::repeat_n(body, batch))
}

/// Appends `segments × per_segment` batches of `batch` one-byte messages, timestamps rising
/// by 10 per batch, skipping 3 positions every 7th batch (gaps inside segments), and leaves
/// one more batch in the active segment. The oracle is every entry as read while resident
/// (in the active segment) right after its append.
fn build(
    log: &mut TopicLog,
    segments: usize,
    per_segment: usize,
    batch: usize,
) -> BTreeMap<u64, Entry> {
    let bodies: Vec<Vec<u8>> = (0..batch).map(|i| vec![i as u8]).collect();
    let mut oracle = BTreeMap::new();
    let mut id = 1;
    for b in 0..segments * per_segment + 1 {
        if b % 7 == 6 {
            log.ensure_next_position(log.next_position() + 3);
        }
        let first = log
            .append(&AppendBatch {
                first_id: id,
                bodies: &bodies,
                timestamp_ns: 1_000 + 10 * b as i64,
                available_at_ms: b as i64,
            })
            .unwrap();
        id += batch as u64;
        for p in first..first + batch as u64 {
            oracle.insert(p, log.entry(p).unwrap());
        }
    }
    log.sync().unwrap();
    assert_eq!(log.segment_count(), segments + 1);
    oracle
}

fn open(fs: Arc<dyn Fs>, per_segment: usize, batch: usize, cache: &Arc<PageCache>) -> TopicLog {
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    TopicLog::open(
        fs,
        Path::new(DIR),
        Fault::default(),
        max,
        1,
        cache.clone(),
        sink(),
    )
    .unwrap()
}

/// A small deterministic generator (xorshift).
fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn check_random_lookups(log: &TopicLog, oracle: &BTreeMap<u64, Entry>, rounds: usize) {
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let top = log.next_position() + 2;
    for _ in 0..rounds {
        let p = next_rand(&mut seed) % top;
        assert_eq!(log.entry(p), oracle.get(&p).copied(), "position {p}");
    }
    for (&p, e) in oracle.iter().step_by(997) {
        assert_eq!(
            log.read_body(e).unwrap(),
            log.read_body(&log.entry(p).unwrap()).unwrap()
        );
    }
}

#[test]
fn entries_of_many_sealed_segments_page_in_and_out_under_a_tiny_bound_and_match_an_oracle() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    // Two pages' worth of cache; each segment holds 3 pages (2 full, one partial).
    let page_cost = PAGE_ENTRIES * std::mem::size_of::<Entry>() + 128;
    let cache = Arc::new(PageCache::new(2 * page_cost));
    let (per_segment, batch) = (5, 2_000);
    let mut log = open(fs.clone(), per_segment, batch, &cache);
    let oracle = build(&mut log, 12, per_segment, batch);
    assert_eq!(cache.resident_pages(), 0, "sealing keeps no page resident");
    assert_eq!(
        log.active.len(),
        batch,
        "only the active segment's entries are resident"
    );
    check_random_lookups(&log, &oracle, 3_000);
    assert!(cache.resident_bytes() <= cache.capacity());
    assert!(cache.loads() > 12 * 3, "pages were evicted and read again");
    assert_eq!(log.first_position(), 1);
    assert_eq!(log.oldest_timestamp(), Some(1_000));
    drop(log);
    assert_eq!(
        cache.resident_pages(),
        0,
        "a closed log leaves no page behind"
    );
    let log = open(fs, per_segment, batch, &cache);
    check_random_lookups(&log, &oracle, 1_000);
    assert_eq!(log.next_position(), oracle.keys().last().unwrap() + 1);
}

#[test]
fn first_position_since_finds_the_first_message_at_or_after_a_time_across_segments() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let cache = Arc::new(PageCache::new(1));
    let (per_segment, batch) = (4, 1_500);
    let mut log = open(fs.clone(), per_segment, batch, &cache);
    let oracle = build(&mut log, 6, per_segment, batch);
    let log = open(fs, per_segment, batch, &cache);
    let last_ts = oracle.values().last().unwrap().timestamp_ns;
    for ts in (0..=last_ts + 20).step_by(5) {
        let want = oracle
            .values()
            .find(|e| e.timestamp_ns >= ts)
            .map_or(log.next_position(), |e| e.position);
        assert_eq!(log.first_position_since(ts), want, "since {ts}");
    }
}

#[test]
fn reopening_reads_only_index_summaries_not_entries_or_sealed_records() {
    let fs = Counting::new(SimFs::new());
    let dynfs: Arc<dyn Fs> = Arc::new(fs.clone());
    let cache = Arc::new(PageCache::new(DEFAULT_CACHE_BYTES));
    let (per_segment, batch) = (1, 1_000);
    let mut log = open(dynfs.clone(), per_segment, batch, &cache);
    let oracle = build(&mut log, 100, per_segment, batch);
    drop(log);
    let index_bytes: u64 = fs
        .inner
        .paths()
        .iter()
        .filter(|p| ext(p) == "rqidx")
        .map(|p| fs.inner.read(p).unwrap().len() as u64)
        .sum();
    fs.take("rqidx");
    fs.take("rqlog");
    let log = open(dynfs, per_segment, batch, &cache);
    let (idx, seg) = (fs.take("rqidx"), fs.take("rqlog"));
    assert_eq!((log.active.len(), cache.resident_pages()), (batch, 0));
    assert!(
        idx * 20 < index_bytes,
        "open read {idx} of {index_bytes} index bytes"
    );
    assert!(
        seg <= record_len(batch, 1),
        "only the active segment is scanned: {seg}"
    );
    assert_eq!(log.entry(1), oracle.get(&1).copied());
    assert!(
        fs.take("rqidx") > 0,
        "the entry was paged in from the index"
    );
}

fn idx_path(base: u64) -> PathBuf {
    segment_path(Path::new(DIR), base, "rqidx")
}

#[test]
fn a_missing_or_corrupt_index_is_rebuilt_by_a_scan_and_rewritten() {
    let sim = SimFs::new();
    let fs = Counting::new(sim.clone());
    let dynfs: Arc<dyn Fs> = Arc::new(fs.clone());
    let cache = Arc::new(PageCache::new(DEFAULT_CACHE_BYTES));
    let (per_segment, batch) = (2, 3_000);
    let mut log = open(dynfs.clone(), per_segment, batch, &cache);
    let oracle = build(&mut log, 5, per_segment, batch);
    let bases: Vec<u64> = log.segments.iter().map(|s| s.base).collect();
    drop(log);
    // Missing index of the second segment, a flipped header byte in the third's.
    sim.remove_file(&idx_path(bases[1])).unwrap();
    sim.corrupt(&idx_path(bases[2]), 20, 0x77);
    let log = open(dynfs.clone(), per_segment, batch, &cache);
    assert!(fs.take("rqlog") >= 2 * per_segment as u64 * record_len(batch, 1));
    check_random_lookups(&log, &oracle, 3_000);
    drop(log);
    for &b in &bases[1..3] {
        let f = sim.open(&idx_path(b), false).expect("index rewritten");
        let s = index::read_summary(
            f.as_ref(),
            b,
            sim.read(&segment_path(Path::new(DIR), b, "rqlog"))
                .unwrap()
                .len() as u64,
        );
        assert!(s.unwrap().is_some(), "segment {b} has a valid index again");
    }
    fs.take("rqlog");
    let log = open(dynfs.clone(), per_segment, batch, &cache);
    assert!(
        fs.take("rqlog") <= record_len(batch, 1),
        "the rewritten indexes make the next open fast"
    );
    // A bad page behind a valid header: the page is rebuilt from its (intact) segment, the
    // index rewritten, and storage stays up.
    let bad = idx_path(bases[3]);
    let len = sim.read(&bad).unwrap().len();
    sim.corrupt(&bad, len - 1, 0x42);
    let p = oracle
        .values()
        .rfind(|e| e.segment == bases[3])
        .unwrap()
        .position;
    assert_eq!(log.entry(p), oracle.get(&p).copied());
    assert_eq!(log.fault.reason(), None);
    let f = sim.open(&bad, false).unwrap();
    let summary = log.segments[3].summary.clone().unwrap();
    let last_page = summary.pages.len() - 1;
    assert!(
        index::read_page(f.as_ref(), &summary, bases[3], last_page)
            .unwrap()
            .is_some(),
        "the index was rewritten whole"
    );
    drop(log);
    let log = open(dynfs, per_segment, batch, &cache);
    assert_eq!(log.entry(p), oracle.get(&p).copied());
}

#[test]
fn gc_and_eviction_drop_the_pages_of_deleted_segments() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let cache = Arc::new(PageCache::new(DEFAULT_CACHE_BYTES));
    let (per_segment, batch) = (1, 5_000);
    let mut log = open(fs, per_segment, batch, &cache);
    let oracle = build(&mut log, 4, per_segment, batch);
    for &p in oracle.keys() {
        log.entry(p).unwrap();
    }
    // 4 sealed segments × 2 pages each.
    assert_eq!(cache.resident_pages(), 8);
    let second = log.segments[1].base;
    let floor = oracle
        .values()
        .find(|e| e.segment == second)
        .unwrap()
        .position;
    assert_eq!(log.gc(floor).unwrap(), 1);
    assert_eq!(cache.resident_pages(), 6);
    assert_eq!(log.entry(1), None);
    assert_eq!(log.first_position(), floor);
    let oldest = log.oldest_sealed().unwrap();
    assert_eq!((oldest.first_position, oldest.messages), (floor, 5_000));
    assert_eq!(log.evict_oldest(oldest.base).unwrap(), 5_000);
    assert_eq!(cache.resident_pages(), 4);
    assert_eq!(log.entry(floor), None);
    assert_eq!(log.first_position(), floor + 5_000);
}

#[test]
fn two_logs_sharing_one_tiny_cache_from_two_threads_each_see_only_their_own_entries() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let page_cost = PAGE_ENTRIES * std::mem::size_of::<Entry>() + 128;
    let cache = Arc::new(PageCache::new(3 * page_cost));
    let (per_segment, batch) = (2, 2_500);
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    let mut logs = Vec::new();
    for (dir, id_base) in [("/a", 0u64), ("/b", 1 << 40)] {
        let mut log = TopicLog::open(
            fs.clone(),
            Path::new(dir),
            Fault::default(),
            max,
            1,
            cache.clone(),
            sink(),
        )
        .unwrap();
        let bodies = vec![vec![1u8]; batch];
        for b in 0..4 * per_segment + 1 {
            log.append(&AppendBatch {
                first_id: id_base + 1 + (b * batch) as u64,
                bodies: &bodies,
                timestamp_ns: 1,
                available_at_ms: 0,
            })
            .unwrap();
        }
        logs.push((log, id_base));
    }
    // Same segment bases and positions in both logs: only the log id tells their pages apart.
    std::thread::scope(|s| {
        for (log, id_base) in &logs {
            s.spawn(move || {
                let mut seed = 0x2545_f491_4f6c_dd1d ^ id_base;
                for _ in 0..2_000 {
                    let p = 1 + next_rand(&mut seed) % (log.next_position() - 1);
                    assert_eq!(log.entry(p).unwrap().id, id_base + p, "position {p}");
                }
            });
        }
    });
    assert!(cache.resident_bytes() <= cache.capacity());
}

// --- zeros ahead of the active segment's tail ----------------------------------------------

fn open_zeroing(fs: &SimFs, max_segment_bytes: u64) -> TopicLog {
    TopicLog::open(
        Arc::new(fs.clone()),
        Path::new("/t"),
        Fault::default(),
        max_segment_bytes,
        1,
        Default::default(),
        sink(),
    )
    .unwrap()
}

fn active_file_len(fs: &SimFs) -> u64 {
    let f = fs
        .open(&segment_path(Path::new("/t"), 1, "rqlog"), false)
        .unwrap();
    f.len().unwrap()
}

fn positions(log: &TopicLog) -> Vec<u64> {
    (log.first_position()..log.next_position())
        .filter_map(|p| log.entry(p).map(|e| e.position))
        .collect()
}

#[test]
fn small_appends_write_zeros_ahead_and_a_reopen_cuts_them_without_calling_them_damage() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    for id in 1..=3 {
        append(&mut log, id, &[7u8; 100]);
    }
    log.sync().unwrap();
    let records = 3 * record_len(1, 100);
    assert_eq!(
        active_file_len(&fs),
        record_len(1, 100) + ZERO_AHEAD_BYTES as u64,
        "one step of zeros after the first record, none again while records land on them"
    );
    // Power is cut (nothing of the durable image changes).
    std::mem::forget(log);
    fs.crash(&mut |_| 0);
    let mut log = open_zeroing(&fs, 100 << 20);
    assert_eq!(positions(&log), vec![1, 2, 3]);
    assert_eq!(active_file_len(&fs), records, "the zeros are cut at open");
    assert!(log.damage_sink().quarantine().records().is_empty());
    assert_eq!(append(&mut log, 4, b"next"), 4, "appends go on after them");
}

#[test]
fn an_unsynced_record_torn_inside_the_zeros_is_a_torn_tail_not_damage() {
    for keep in [1, HEADER_LEN / 2, HEADER_LEN + 10, 300] {
        let fs = SimFs::new();
        let mut log = open_zeroing(&fs, 100 << 20);
        append(&mut log, 1, &[7u8; 100]);
        append(&mut log, 2, &[8u8; 100]);
        log.sync().unwrap();
        append(&mut log, 3, &[9u8; 400]); // written over the zeros, never synced
        std::mem::forget(log);
        // Only the first `keep` bytes of the unsynced write reached the disk.
        fs.crash(&mut |_| keep);
        let log = open_zeroing(&fs, 100 << 20);
        assert_eq!(
            positions(&log),
            vec![1, 2],
            "keep {keep}: the acknowledged two"
        );
        assert!(
            log.damage_sink().quarantine().records().is_empty(),
            "keep {keep}: a torn write is not damage at rest"
        );
        assert_eq!(active_file_len(&fs), 2 * record_len(1, 100));
    }
}

#[test]
fn a_whole_last_record_ending_in_zero_bytes_is_kept_before_the_zeros() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    append(&mut log, 1, &[7u8; 100]);
    let mut body = vec![5u8; 10];
    body.extend_from_slice(&[0u8; 5000]);
    append(&mut log, 2, &body);
    log.sync().unwrap();
    std::mem::forget(log);
    fs.crash(&mut |_| 0);
    let log = open_zeroing(&fs, 100 << 20);
    assert_eq!(positions(&log), vec![1, 2]);
    assert_eq!(log.read_body(&log.entry(2).unwrap()).unwrap(), body);
    assert!(log.damage_sink().quarantine().records().is_empty());
}

#[test]
fn a_damaged_length_field_of_the_last_record_is_still_read_whole_before_the_zeros() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    append(&mut log, 1, &[7u8; 100]);
    append(&mut log, 2, &[8u8; 100]);
    log.sync().unwrap();
    std::mem::forget(log);
    // Bit flip in the second record's payload length (header bytes 40..44).
    let at = record_len(1, 100) as usize + 41;
    fs.corrupt(&segment_path(Path::new("/t"), 1, "rqlog"), at, 0x7f);
    let log = open_zeroing(&fs, 100 << 20);
    assert_eq!(positions(&log), vec![1, 2], "nothing lost");
    let found = log.damage_sink().quarantine().records();
    assert_eq!(found.len(), 1, "reported once, as a recovered record");
    assert_eq!(found[0].messages, 0);
}

#[test]
fn sealing_cuts_the_zeros_so_a_sealed_segment_is_exactly_its_records() {
    let fs = SimFs::new();
    let record = record_len(1, 1000);
    let mut log = open_zeroing(&fs, 4 * record + 10);
    for id in 1..=5 {
        append(&mut log, id, &[7u8; 1000]);
    }
    assert_eq!(log.segment_count(), 2);
    let sealed = fs
        .open(&segment_path(Path::new("/t"), 1, "rqlog"), false)
        .unwrap();
    assert_eq!(sealed.len().unwrap(), 4 * record);
    let active = fs
        .open(&segment_path(Path::new("/t"), 5, "rqlog"), false)
        .unwrap();
    assert_eq!(
        active.len().unwrap(),
        4 * record + 10,
        "zeros never reach past max_segment_bytes"
    );
    drop(log);
    assert_eq!(active.len().unwrap(), record, "a clean close cuts them too");
}

fn open_deferring(fs: &SimFs, max_segment_bytes: u64) -> TopicLog {
    let mut log = open_zeroing(fs, max_segment_bytes);
    log.defer_zero_writes();
    log
}

#[test]
fn deferred_zeros_are_written_by_the_caller_and_a_reopen_cuts_them() {
    let fs = SimFs::new();
    let mut log = open_deferring(&fs, 100 << 20);
    let record = record_len(1, 100);
    append(&mut log, 1, &[7u8; 100]);
    assert_eq!(active_file_len(&fs), record, "no zeros inside the append");
    let z = log.take_zero_write().expect("the append asks for zeros");
    assert!(log.take_zero_write().is_none(), "taken once");
    z.run();
    log.zeros_written(&z);
    assert_eq!(active_file_len(&fs), record + ZERO_AHEAD_BYTES as u64);
    append(&mut log, 2, &[8u8; 100]);
    assert!(
        log.take_zero_write().is_none(),
        "a segment's first records keep one step of zeros ahead, no more"
    );
    log.sync().unwrap();
    std::mem::forget(log);
    fs.crash(&mut |_| 0);
    let log = open_deferring(&fs, 100 << 20);
    assert_eq!(positions(&log), vec![1, 2]);
    assert_eq!(
        active_file_len(&fs),
        2 * record,
        "the zeros are cut at open"
    );
    assert!(log.damage_sink().quarantine().records().is_empty());
}

#[test]
fn past_the_margin_deferred_zeros_stay_the_margin_ahead_of_the_tail() {
    let fs = SimFs::new();
    let mut log = open_deferring(&fs, 100 << 20);
    let body = vec![7u8; 200 << 10];
    let record = record_len(1, body.len());
    let mut asked = 0;
    for id in 1..=40u64 {
        append(&mut log, id, &body);
        while let Some(z) = log.take_zero_write() {
            asked += 1;
            z.run();
            log.zeros_written(&z);
        }
        // Past the margin the next step is asked for while a whole one is still ahead, so
        // no append reaches the end of the zeros.
        let tail = id * record;
        if tail >= ZERO_AHEAD_MARGIN {
            assert!(
                active_file_len(&fs) >= tail + ZERO_AHEAD_BYTES as u64,
                "record {id}: zeros end at {} for a tail at {tail}",
                active_file_len(&fs)
            );
        }
    }
    let tail = 40 * record;
    assert!(
        active_file_len(&fs) <= tail + ZERO_AHEAD_MARGIN + ZERO_AHEAD_BYTES as u64,
        "no more than one step past the margin"
    );
    assert!(asked >= 10, "one write a step: {asked}");
}

#[test]
fn an_append_that_reaches_zeros_not_yet_written_cancels_them() {
    let fs = SimFs::new();
    let mut log = open_deferring(&fs, 100 << 20);
    let record = record_len(1, 100);
    append(&mut log, 1, &[7u8; 100]);
    let stale = log.take_zero_write().unwrap();
    // The next append lands where those zeros were to go: it writes past the end of the
    // file instead, and the write it overtook must not zero its record afterwards.
    append(&mut log, 2, &[8u8; 100]);
    let next = log
        .take_zero_write()
        .expect("asked again from the new tail");
    stale.run();
    log.zeros_written(&stale);
    assert_eq!(
        active_file_len(&fs),
        2 * record,
        "the cancelled write wrote nothing"
    );
    assert_eq!(
        log.read_body(&log.entry(2).unwrap()).unwrap(),
        vec![8u8; 100]
    );
    next.run();
    log.zeros_written(&next);
    assert_eq!(active_file_len(&fs), 2 * record + ZERO_AHEAD_BYTES as u64);
    log.sync().unwrap();
    std::mem::forget(log);
    fs.crash(&mut |_| 0);
    let log = open_deferring(&fs, 100 << 20);
    assert_eq!(positions(&log), vec![1, 2]);
}

#[test]
fn sealing_settles_deferred_zeros_so_a_sealed_segment_is_exactly_its_records() {
    let fs = SimFs::new();
    let record = record_len(1, 1000);
    let mut log = open_deferring(&fs, 4 * record + 10);
    append(&mut log, 1, &[7u8; 1000]);
    // Written but not yet reported when the segment is sealed: the seal records it, so it
    // cuts the zeros.
    let z = log.take_zero_write().unwrap();
    z.run();
    assert_eq!(
        active_file_len(&fs),
        4 * record + 10,
        "never past max_segment_bytes"
    );
    log.seal_active().unwrap();
    log.zeros_written(&z);
    let sealed = fs
        .open(&segment_path(Path::new("/t"), 1, "rqlog"), false)
        .unwrap();
    assert_eq!(sealed.len().unwrap(), record, "the zeros are cut");
    // Asked for and not begun when the seal comes: cancelled, it never writes.
    append(&mut log, 2, &[7u8; 1000]);
    assert_eq!(log.segment_count(), 2);
    let z = log
        .take_zero_write()
        .expect("the new segment asks for its own");
    log.seal_active().unwrap();
    z.run();
    log.zeros_written(&z);
    let second = fs
        .open(&segment_path(Path::new("/t"), 2, "rqlog"), false)
        .unwrap();
    assert_eq!(
        second.len().unwrap(),
        record,
        "a write cancelled by the seal leaves the sealed segment its records"
    );
}

/// Appends `syncs` groups of two records of `body` bytes each, one sync per group; returns the
/// next id.
fn append_synced_pairs(log: &mut TopicLog, mut id: u64, body: &[u8], syncs: usize) -> u64 {
    for _ in 0..syncs {
        append(log, id, body);
        append(log, id + 1, body);
        id += 2;
        log.sync().unwrap();
    }
    id
}

#[test]
fn large_sync_groups_stop_the_zeros() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    // Two 150 KiB records per sync: 300 KiB groups, like many producers' MPUBs together.
    let body = vec![3u8; 150 * 1024];
    let id = append_synced_pairs(&mut log, 1, &body, 30);
    // Zeros were written while the average was still climbing; it passes the bound before
    // the records reach their end.
    assert_eq!(
        active_file_len(&fs),
        60 * record_len(1, body.len()),
        "once the average group is large the file grows by its records only"
    );
    // A little more, still large: no new zeros.
    append_synced_pairs(&mut log, id, &body, 10);
    assert_eq!(active_file_len(&fs), 80 * record_len(1, body.len()));
}

#[test]
fn groups_of_two_64_kib_mpubs_keep_the_zeros() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    // Two 64 KiB records per sync: the `mixed` benchmark's two durable writers, whose syncs
    // are faster over zeros than the zeros cost to write.
    let body = vec![3u8; 64 * 1024];
    let id = append_synced_pairs(&mut log, 1, &body, 60);
    let records = 120 * record_len(1, body.len());
    let len = active_file_len(&fs);
    assert!(
        len > records && len <= records + ZERO_AHEAD_BYTES as u64,
        "zeros still ahead of the records: {len} bytes for {records} of records"
    );
    append_synced_pairs(&mut log, id, &body, 20);
    assert!(active_file_len(&fs) > 160 * record_len(1, body.len()));
}

// --- reading runs of bodies -----------------------------------------------------------------

#[test]
fn a_run_of_bodies_reads_like_one_read_each_and_a_bad_one_fails_alone() {
    let fs = SimFs::new();
    let mut log = open_zeroing(&fs, 100 << 20);
    let bodies: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + usize::from(i) * 7]).collect();
    for (id, body) in (1..).zip(&bodies) {
        append(&mut log, id, body);
    }
    let mut entries: Vec<Entry> = (1..=5).map(|p| log.entry(p).unwrap()).collect();
    let file = log.body_source(&entries[0]).unwrap();
    let run = read_bodies_from(file.as_ref(), &entries).unwrap();
    let got: Vec<Vec<u8>> = run.into_iter().map(|b| b.unwrap().to_vec()).collect();
    assert_eq!(got, bodies);
    for e in &entries {
        assert_eq!(
            read_body_from(file.as_ref(), e).unwrap(),
            bodies[e.position as usize - 1]
        );
    }
    // A body whose checksum does not match is refused on its own; the others still read.
    entries[2].body_crc ^= 1;
    let run = read_bodies_from(file.as_ref(), &entries).unwrap();
    let damaged: Vec<bool> = run
        .iter()
        .map(|r| r.as_ref().is_err_and(is_damaged_body))
        .collect();
    assert_eq!(damaged, [false, false, true, false, false]);
    // Out of file order is a caller's mistake, not damage.
    entries.swap(0, 1);
    let err = read_bodies_from(file.as_ref(), &entries).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(read_bodies_from(file.as_ref(), &[]).unwrap().is_empty());
}

fn open_remote(fs: Arc<dyn Fs>, max: u64, remote: &BTreeMap<u64, RemoteSegment>) -> TopicLog {
    TopicLog::open_with_remote(
        fs,
        Path::new(DIR),
        Fault::default(),
        max,
        1,
        Default::default(),
        sink(),
        remote,
    )
    .unwrap()
}

fn remote_of(log: &TopicLog, base: u64) -> RemoteSegment {
    let seg = log.segments.iter().find(|s| s.base == base).unwrap();
    RemoteSegment {
        key: format!("k/{base}"),
        size: seg.len,
    }
}

#[test]
fn an_evicted_segment_keeps_its_entries_reads_remote_and_reopens_remote_only() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let (per_segment, batch) = (4, 3);
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    let mut log = open(fs.clone(), per_segment, batch, &Default::default());
    let oracle = build(&mut log, 3, per_segment, batch);
    let bases: Vec<u64> = log.sealed_files().iter().map(|f| f.base).collect();
    assert_eq!(bases.len(), 3);
    let before = log.local_segment_bytes();
    let remote = remote_of(&log, bases[0]);
    // The active segment is never evicted, and a wrong size is refused.
    let active = log.segments.last().unwrap().base;
    assert!(!log.evict_local(active, remote.clone()).unwrap());
    let wrong = RemoteSegment {
        size: remote.size + 1,
        ..remote.clone()
    };
    assert!(log.evict_local(bases[0], wrong).is_err());
    assert!(log.evict_local(bases[0], remote.clone()).unwrap());
    assert!(!sim.exists(&segment_path(Path::new(DIR), bases[0], "rqlog")));
    assert!(sim.exists(&segment_path(Path::new(DIR), bases[0], "rqidx")));
    assert_eq!(log.local_segment_bytes(), before - remote.size);
    assert_eq!(log.local_sealed().len(), 2);
    assert!(log.sealed_files().iter().all(|f| f.base != bases[0]));
    assert_eq!(log.sealed_segments().len(), 2, "a scrub skips it");
    let first = log.entry(log.first_position()).unwrap();
    assert_eq!(first.segment, bases[0]);
    assert!(
        matches!(log.body_location(&first), Some(BodyLocation::Remote(b, r)) if b == bases[0] && *r == remote)
    );
    assert!(log.body_source(&first).is_none());
    drop(log);

    let map = BTreeMap::from([(bases[0], remote.clone())]);
    let log = open_remote(fs.clone(), max, &map);
    assert!(log.damage_sink().quarantine().records().is_empty());
    for (p, e) in &oracle {
        assert_eq!(log.entry(*p).as_ref(), Some(e), "position {p}");
    }
    assert!(matches!(
        log.body_location(&first),
        Some(BodyLocation::Remote(..))
    ));
    // GC of a remote-only segment removes its index (there is no local log file to remove).
    let mut log = log;
    let through = log.segments[0].last_position.unwrap();
    assert_eq!(log.gc(through + 1).unwrap(), 1);
    assert!(!sim.exists(&segment_path(Path::new(DIR), bases[0], "rqidx")));
    drop(log);
    // The record still naming it (its objects not deleted yet) is harmless.
    let log = open_remote(fs, max, &map);
    assert!(log.damage_sink().quarantine().records().is_empty());
    assert_eq!(log.segments[0].base, bases[1]);
}

#[test]
fn a_crash_after_recording_an_eviction_is_finished_at_open() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let (per_segment, batch) = (4, 3);
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    let mut log = open(fs.clone(), per_segment, batch, &Default::default());
    let oracle = build(&mut log, 2, per_segment, batch);
    let base = log.sealed_files()[0].base;
    let remote = remote_of(&log, base);
    drop(log);
    let log = open_remote(fs, max, &BTreeMap::from([(base, remote)]));
    assert!(!sim.exists(&segment_path(Path::new(DIR), base, "rqlog")));
    assert!(log.damage_sink().quarantine().records().is_empty());
    assert_eq!(log.local_sealed().len(), 1);
    for (p, e) in &oracle {
        assert_eq!(log.entry(*p).as_ref(), Some(e), "position {p}");
    }
}

#[test]
fn a_missing_segment_file_never_recorded_as_evicted_is_reported_as_lost() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let (per_segment, batch) = (4, 3);
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    let mut log = open(fs.clone(), per_segment, batch, &Default::default());
    build(&mut log, 2, per_segment, batch);
    let seg = &log.segments[0];
    let (base, last) = (seg.base, seg.last_position.unwrap());
    let first = log.first_position();
    drop(log);
    sim.remove_file(&segment_path(Path::new(DIR), base, "rqlog"))
        .unwrap();
    let log = open_remote(fs, max, &BTreeMap::new());
    let found = log.damage_sink().quarantine().records();
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f.kind, DamageKind::SegmentRecord);
    assert_eq!(f.positions, (first..=last).collect::<Vec<_>>());
    assert!(f.action.contains("never evicted"), "{}", f.action);
    assert_eq!(log.first_position(), last + 1);
}

#[test]
fn a_lost_segment_between_two_others_is_reported_and_the_log_opens_around_it() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let (per_segment, batch) = (4, 3);
    let max = per_segment as u64 * record_len(batch, 1) + 10;
    let mut log = open(fs.clone(), per_segment, batch, &Default::default());
    let oracle = build(&mut log, 3, per_segment, batch);
    let evicted = log.segments[0].base;
    let remote = remote_of(&log, evicted);
    assert!(log.evict_local(evicted, remote.clone()).unwrap());
    let seg = &log.segments[1];
    let (base, first) = (seg.base, seg.summary.as_ref().unwrap().first_position);
    let last = seg.last_position.unwrap();
    drop(log);
    sim.remove_file(&segment_path(Path::new(DIR), base, "rqlog"))
        .unwrap();
    let log = open_remote(fs, max, &BTreeMap::from([(evicted, remote)]));
    let found = log.damage_sink().quarantine().records();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].positions, (first..=last).collect::<Vec<_>>());
    for (p, e) in &oracle {
        let want = (!(first..=last).contains(p)).then_some(*e);
        assert_eq!(log.entry(*p), want, "position {p}");
    }
}

#[test]
fn a_deferred_index_is_read_from_memory_and_nothing_takes_its_segment_until_written() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    // A tiny cache: pages are read again (from memory, then from the file) on every lookup.
    let cache = Arc::new(PageCache::new(1));
    let (per_segment, batch) = (1, 5_000);
    let mut log = open(fs.clone(), per_segment, batch, &cache);
    log.defer_index_writes();
    let oracle = build(&mut log, 2, per_segment, batch);
    let bases: Vec<u64> = log.segments.iter().map(|s| s.base).collect();
    assert!(!sim.exists(&idx_path(bases[0])) && !sim.exists(&idx_path(bases[1])));
    assert!(log.index_writes_pending());
    // Sealed, and read as before: every entry, a body, the time lookup.
    check_random_lookups(&log, &oracle, 2_000);
    assert_eq!(log.first_position_since(0), 1);
    // Nothing that needs the file takes the segments yet.
    assert!(log.sealed_files().is_empty());
    assert!(log.sealed_segments().is_empty());
    assert!(log.local_sealed().is_empty());
    assert_eq!(log.oldest_sealed(), None);
    assert_eq!(log.evict_oldest(bases[0]).unwrap(), 0);
    assert_eq!(log.gc(u64::MAX).unwrap(), 0);
    let writes = log.take_index_writes();
    assert_eq!(
        writes.iter().map(IndexWrite::base).collect::<Vec<_>>(),
        bases[..2]
    );
    assert!(log.take_index_writes().is_empty(), "taken once");
    for w in &writes {
        w.run().unwrap();
        log.index_written(w.base(), Ok(()));
    }
    assert!(!log.index_writes_pending());
    assert_eq!(log.sealed_files().len(), 2);
    check_random_lookups(&log, &oracle, 2_000);
    assert_eq!(log.gc(u64::MAX).unwrap(), 2);
}

#[test]
fn a_crash_before_a_deferred_index_is_written_reopens_by_a_scan_with_every_message() {
    let sim = SimFs::new();
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let cache = Arc::new(PageCache::new(DEFAULT_CACHE_BYTES));
    let (per_segment, batch) = (1, 1_000);
    let mut log = open(fs.clone(), per_segment, batch, &cache);
    log.defer_index_writes();
    let oracle = build(&mut log, 3, per_segment, batch);
    let first = log.segments[0].base;
    // The first index is written, the other two never are: the power goes first.
    let writes = log.take_index_writes();
    writes[0].run().unwrap();
    log.index_written(first, Ok(()));
    std::mem::forget(log);
    sim.crash(&mut |_| 0);
    let log = open(fs, per_segment, batch, &cache);
    assert_eq!(log.segment_count(), 4);
    for s in &log.segments[..3] {
        assert!(sim.exists(&idx_path(s.base)), "index of {} rebuilt", s.base);
    }
    check_random_lookups(&log, &oracle, 2_000);
}

#[test]
fn a_failed_deferred_index_write_isolates_storage_unless_the_topic_is_gone() {
    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let cache = Arc::new(PageCache::new(DEFAULT_CACHE_BYTES));
    let mut log = open(fs.clone(), 1, 10, &cache);
    log.defer_index_writes();
    build(&mut log, 1, 1, 10);
    let base = log.segments[0].base;
    let failed = || StorageError::Io {
        op: "fsync",
        file: idx_path(base),
        source: io::Error::other("injected"),
    };
    log.index_written(base, Err(failed()));
    assert!(
        log.fault.check().is_err(),
        "a failed index write isolates storage"
    );
    assert!(
        log.index_writes_pending(),
        "and the index is still read from memory"
    );

    let fs: Arc<dyn Fs> = Arc::new(SimFs::new());
    let mut log = open(fs.clone(), 1, 10, &cache);
    log.defer_index_writes();
    build(&mut log, 1, 1, 10);
    let base = log.segments[0].base;
    fs.remove_dir_all(Path::new(DIR)).unwrap();
    log.index_written(base, Err(failed()));
    assert!(log.fault.check().is_ok(), "the topic was deleted meanwhile");
}
