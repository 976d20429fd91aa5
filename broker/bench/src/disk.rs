//! The `disk` case: what the disk under the brokers' data directories can do, measured beside
//! them (a file in the same temporary directory a broker's data directory is created in), so
//! the fsync-bound targets hold on any machine:
//!
//! - `fdatasync` latency of small appends (1 KiB, what one PUB adds) and of group-sized ones
//!   (16 KiB: 16 producers' PUBs; 64 KiB), to a file that grows with each append (what a
//!   segment does today), to a file preallocated with `fallocate` (the extents exist but are
//!   unwritten, so the first write of each still changes metadata), and to a region that was
//!   written with zeros and synced beforehand (a pure data overwrite);
//! - synced sequential write bandwidth: 1 MiB writes, each followed by `fdatasync`;
//! - a bare durable pipeline: one thread appends 64 KiB writes (16 producers' MPUB 64 x 1 KiB)
//!   while another fdatasyncs whatever has been appended (group commit), the appender never
//!   more than 1 MiB (16 such requests) ahead of what is durable. It is the disk work of the
//!   `mpub_publish` durable case with nothing else around it, so what a broker publishes there
//!   can be set against what the disk gives that pattern, not only against the bandwidth.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// How the file under the appends was prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Each append extends the file (size and extent metadata change on every sync).
    Grow,
    /// `fallocate` reserved the space up front (size fixed; extents unwritten).
    Fallocate,
    /// The region was written with zeros and synced first (nothing but data changes).
    Prewritten,
}

/// One series of `write` + `fdatasync` of `bytes` each.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncedWrites {
    /// Bytes per write.
    pub bytes: usize,
    /// How the file was prepared.
    pub layout: Layout,
    /// Writes measured.
    pub count: u64,
    /// Median write + fdatasync, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Mean, µs.
    pub mean_us: f64,
}

/// Everything the `disk` case measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskReport {
    /// The directory the test file was in (where broker data directories are created).
    pub directory: String,
    /// Small and group-sized synced writes.
    pub writes: Vec<SyncedWrites>,
    /// 1 MiB write + fdatasync, MiB/s.
    pub bandwidth_mib_per_sec: f64,
    /// MiB written for the bandwidth figure.
    pub bandwidth_mib_written: f64,
    /// The bare durable pipeline (absent from results recorded before it was measured).
    #[serde(default)]
    pub pipelined: Option<Pipelined>,
}

/// What the bare durable pipeline made durable ([`pipelined`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pipelined {
    /// Bytes per append.
    pub write_bytes: usize,
    /// Most bytes appended and not yet durable.
    pub window_bytes: u64,
    /// Bytes made durable per second, MiB/s.
    pub mib_per_sec: f64,
    /// fdatasyncs measured.
    pub syncs: u64,
    /// Mean KiB made durable by one fdatasync.
    pub kib_per_sync: f64,
    /// Mean fdatasync, µs.
    pub mean_sync_us: f64,
    /// Share of the measured time the syncing thread spent in fdatasync, percent.
    pub sync_busy_percent: f64,
}

impl DiskReport {
    /// The median of `bytes`-sized writes with `layout`, if measured.
    pub fn p50_us(&self, bytes: usize, layout: Layout) -> Option<u64> {
        self.writes
            .iter()
            .find(|w| w.bytes == bytes && w.layout == layout)
            .map(|w| w.p50_us)
    }
}

/// Bytes of one PUB body in the fsync-bound cases.
pub const SMALL: usize = 1024;
/// A group commit of 16 producers' 1 KiB PUBs.
pub const GROUP: usize = 16 * 1024;
/// A larger group.
pub const LARGE_GROUP: usize = 64 * 1024;

/// Per series: at most this many writes or this long, whichever comes first.
const SERIES_WRITES: u64 = 4000;
const SERIES_TIME: Duration = Duration::from_millis(1500);
/// Space reserved for the preallocated layouts.
const REGION: u64 = 64 * 1024 * 1024;
/// Bandwidth run: up to this much or this long.
const BANDWIDTH_BYTES: u64 = 512 * 1024 * 1024;
const BANDWIDTH_TIME: Duration = Duration::from_secs(3);
/// The bare pipeline: at most 16 requests of 64 KiB not yet durable, as 16 MPUB producers
/// with one request in flight each; measured this long after a tenth of it as warm-up.
const PIPELINE_WINDOW: u64 = 16 * LARGE_GROUP as u64;
const PIPELINE_TIME: Duration = Duration::from_secs(2);

/// Measures the disk under `dir` (a fresh temp dir inside it, removed afterwards).
pub fn measure(dir: &Path) -> std::io::Result<DiskReport> {
    let tmp = tempfile::Builder::new()
        .prefix("rustqueue-bench-disk-")
        .tempdir_in(dir)?;
    let mut writes = Vec::new();
    let series = [
        (SMALL, Layout::Grow),
        (SMALL, Layout::Fallocate),
        (SMALL, Layout::Prewritten),
        (GROUP, Layout::Grow),
        (GROUP, Layout::Fallocate),
        (GROUP, Layout::Prewritten),
        (LARGE_GROUP, Layout::Grow),
    ];
    for (i, (bytes, layout)) in series.into_iter().enumerate() {
        let path = tmp.path().join(format!("series-{i}"));
        writes.push(synced_writes(&path, bytes, layout)?);
        std::fs::remove_file(&path)?;
    }
    let (mib_per_sec, mib) = bandwidth(&tmp.path().join("bandwidth"))?;
    let pipelined = pipelined(
        &tmp.path().join("pipelined"),
        LARGE_GROUP,
        PIPELINE_WINDOW,
        PIPELINE_TIME,
    )?;
    Ok(DiskReport {
        directory: dir.display().to_string(),
        writes,
        bandwidth_mib_per_sec: mib_per_sec,
        bandwidth_mib_written: mib,
        pipelined: Some(pipelined),
    })
}

fn create(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(path)
}

fn synced_writes(path: &Path, bytes: usize, layout: Layout) -> std::io::Result<SyncedWrites> {
    let file = create(path)?;
    match layout {
        Layout::Grow => {}
        Layout::Fallocate => {
            nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, REGION as i64)
                .map_err(std::io::Error::from)?;
            file.sync_all()?;
        }
        Layout::Prewritten => {
            let zeros = vec![0u8; 1024 * 1024];
            let mut f = &file;
            for _ in 0..REGION / zeros.len() as u64 {
                f.write_all(&zeros)?;
            }
            file.sync_all()?;
        }
    }
    let buf = vec![0x5au8; bytes];
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
    let start = Instant::now();
    let mut offset = 0u64;
    while hist.len() < SERIES_WRITES
        && start.elapsed() < SERIES_TIME
        && offset + bytes as u64 <= REGION
    {
        let t = Instant::now();
        file.write_all_at(&buf, offset)?;
        file.sync_data()?;
        hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
        offset += bytes as u64;
    }
    Ok(SyncedWrites {
        bytes,
        layout,
        count: hist.len(),
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        mean_us: hist.mean(),
    })
}

fn bandwidth(path: &Path) -> std::io::Result<(f64, f64)> {
    let mut file = create(path)?;
    let buf = vec![0xa5u8; 1024 * 1024];
    let start = Instant::now();
    let mut written = 0u64;
    while written < BANDWIDTH_BYTES && start.elapsed() < BANDWIDTH_TIME {
        file.write_all(&buf)?;
        file.sync_data()?;
        written += buf.len() as u64;
    }
    let mib = written as f64 / 1048576.0;
    Ok((mib / start.elapsed().as_secs_f64().max(1e-9), mib))
}

/// Where the bare pipeline stands; shared by its two threads under one lock.
#[derive(Default)]
struct Pipeline {
    appended: u64,
    durable: u64,
    syncs: u64,
    sync_time: Duration,
    /// Time in fdatasync since `window_from`, clipped to it: a sync that began in the
    /// warm-up counts only its part inside the window, so the share stays a share.
    busy_in_window: Duration,
    /// Where the measured window began, once it has.
    window_from: Option<Instant>,
    /// When the fdatasync in progress began, if one is.
    sync_began: Option<Instant>,
    /// Set by either thread on a failure or by the measurement at its end.
    stop: bool,
    error: Option<std::io::Error>,
}

/// The bare durable pipeline ([`Pipelined`]): `write_bytes` appends, at most `window` bytes
/// ahead of the durable end, and a thread that fdatasyncs whatever was appended before each
/// fdatasync began, for `time` after a warm-up of a tenth of it.
fn pipelined(
    path: &Path,
    write_bytes: usize,
    window: u64,
    time: Duration,
) -> std::io::Result<Pipelined> {
    let file = create(path)?;
    let state = Mutex::new(Pipeline::default());
    let moved = Condvar::new();
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let fail = |e: std::io::Error| {
        let mut st = lock();
        st.error.get_or_insert(e);
        st.stop = true;
        moved.notify_all();
    };
    let measured = std::thread::scope(|scope| {
        scope.spawn(|| {
            let buf = vec![0x3cu8; write_bytes];
            loop {
                let offset = {
                    let mut st = lock();
                    while !st.stop && st.appended - st.durable + write_bytes as u64 > window {
                        st = moved.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    if st.stop {
                        return;
                    }
                    st.appended
                };
                // One appender: nothing else writes at or past `offset`.
                if let Err(e) = file.write_all_at(&buf, offset) {
                    return fail(e);
                }
                lock().appended += write_bytes as u64;
                moved.notify_all();
            }
        });
        scope.spawn(|| {
            loop {
                let (covers, began) = {
                    let mut st = lock();
                    while !st.stop && st.appended == st.durable {
                        st = moved.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    if st.stop {
                        return;
                    }
                    let began = Instant::now();
                    st.sync_began = Some(began);
                    (st.appended, began)
                };
                if let Err(e) = file.sync_data() {
                    return fail(e);
                }
                let end = Instant::now();
                let mut st = lock();
                st.durable = covers;
                st.syncs += 1;
                st.sync_time += end - began;
                st.sync_began = None;
                if let Some(from) = st.window_from {
                    st.busy_in_window += end.saturating_duration_since(began.max(from));
                }
                drop(st);
                moved.notify_all();
            }
        });
        std::thread::sleep(time / 10);
        let (start, durable, syncs, sync_time) = {
            let mut st = lock();
            let start = Instant::now();
            st.window_from = Some(start);
            (start, st.durable, st.syncs, st.sync_time)
        };
        std::thread::sleep(time);
        let mut st = lock();
        let end = Instant::now();
        st.stop = true;
        moved.notify_all();
        // The fdatasync still running counts up to the window's end.
        let running = st.sync_began.map_or(Duration::ZERO, |b| {
            end.saturating_duration_since(b.max(start))
        });
        (
            st.durable - durable,
            st.syncs - syncs,
            (st.sync_time - sync_time).as_secs_f64(),
            (st.busy_in_window + running).as_secs_f64(),
            (end - start).as_secs_f64(),
        )
    });
    if let Some(e) = lock().error.take() {
        return Err(e);
    }
    let (bytes, syncs, sync_time, busy, elapsed) = measured;
    Ok(Pipelined {
        write_bytes,
        window_bytes: window,
        mib_per_sec: bytes as f64 / 1048576.0 / elapsed.max(1e-9),
        syncs,
        kib_per_sync: bytes as f64 / 1024.0 / syncs.max(1) as f64,
        mean_sync_us: sync_time * 1e6 / syncs.max(1) as f64,
        sync_busy_percent: busy / elapsed.max(1e-9) * 100.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_writes_are_timed_for_every_layout() {
        let dir = tempfile::tempdir().unwrap();
        for (i, layout) in [Layout::Grow, Layout::Fallocate, Layout::Prewritten]
            .into_iter()
            .enumerate()
        {
            let w = synced_writes(&dir.path().join(format!("f{i}")), 4096, layout).unwrap();
            assert!(w.count > 0 && w.p50_us > 0 && w.p99_us >= w.p50_us, "{w:?}");
            let len = std::fs::metadata(dir.path().join(format!("f{i}")))
                .unwrap()
                .len();
            match layout {
                Layout::Grow => assert_eq!(len, w.count * 4096),
                _ => assert_eq!(len, REGION),
            }
        }
    }

    #[test]
    fn the_bare_pipeline_makes_its_appends_durable_within_its_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let p = pipelined(&path, 4096, 16 * 4096, Duration::from_millis(300)).unwrap();
        assert!(p.syncs > 0 && p.mib_per_sec > 0.0, "{p:?}");
        // Every fdatasync covered at least one append, and none more than the window.
        assert!(
            p.kib_per_sync >= 4.0 && p.kib_per_sync <= 64.0,
            "{} KiB per fdatasync",
            p.kib_per_sync
        );
        assert!(
            p.sync_busy_percent > 0.0 && p.sync_busy_percent <= 100.0,
            "{p:?}"
        );
        // The file holds every append, whole: the appender stopped between writes.
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 0 && len.is_multiple_of(4096), "{len} bytes");
    }
}
