//! Disk-pressure guard (docs/api.md, "Disk pressure"): `statvfs` on the data path every
//! `disk_check_interval`. Pressure starts at used ≥ high watermark or free < `min_free_bytes`
//! and clears at used < low watermark and free ≥ `min_free_bytes`; an inspection error counts
//! as pressure (fail closed). Under pressure publishes are throttled; consumption, FIN and REQ
//! continue and GC keeps running.
//!
//! Between two samples every publish is counted against the last one ([`DiskGuard::admit`]):
//! the bytes admitted since are taken off its free space, and once that estimate crosses the
//! high watermark (or `min_free_bytes`) the volume is sampled at once, so a producer faster
//! than the period is throttled before the volume fills rather than meeting ENOSPC.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::config::EngineConfig;
use crate::lock::lock;
use crate::registry::Registry;

/// What a sample of the volume says: its size and the bytes free to unprivileged users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    total: u64,
    avail: u64,
}

impl Sample {
    /// Samples the file system holding `path`.
    fn of(path: &Path) -> Result<Sample, String> {
        let st = nix::sys::statvfs::statvfs(path)
            .map_err(|e| format!("statvfs {}: {e}", path.display()))?;
        let frsize = st.fragment_size() as u64;
        Ok(Sample {
            total: st.blocks() as u64 * frsize,
            avail: st.blocks_available() as u64 * frsize,
        })
    }

    /// Used percent (of space available to unprivileged users) and free bytes.
    fn usage(self) -> (f64, u64) {
        if self.total == 0 {
            return (0.0, self.avail);
        }
        (
            (self.total.saturating_sub(self.avail)) as f64 * 100.0 / self.total as f64,
            self.avail,
        )
    }

    /// The same volume once `bytes` more are written.
    fn after(self, bytes: u64) -> Sample {
        Sample {
            avail: self.avail.saturating_sub(bytes),
            ..self
        }
    }
}

/// What a record costs on the volume beyond its body: the record's framing and its index
/// entry, rounded up (the channels' files and the indexes' pages are left to the samples).
const PER_MESSAGE_BYTES: u64 = 128;

/// The watermarks the guard compares a sample with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watermarks {
    high_percent: u8,
    low_percent: u8,
    min_free_bytes: u64,
}

impl Watermarks {
    pub(crate) fn new(cfg: &EngineConfig) -> Self {
        Watermarks {
            high_percent: cfg.disk_high_watermark_percent,
            low_percent: cfg.disk_low_watermark_percent,
            min_free_bytes: cfg.min_free_bytes,
        }
    }

    /// Whether `last` with `admitted` more bytes written would start pressure (pure).
    fn crossed(&self, last: Sample, admitted: u64) -> bool {
        self.next_state(false, Ok(last.after(admitted).usage()))
            .is_some()
    }

    /// The next pressure state given the current one and a sample (pure; tested by table).
    pub(crate) fn next_state(
        &self,
        pressured: bool,
        sample: Result<(f64, u64), String>,
    ) -> Option<String> {
        let (used, free) = match sample {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let high = used >= f64::from(self.high_percent) || free < self.min_free_bytes;
        let clear = used < f64::from(self.low_percent) && free >= self.min_free_bytes;
        if high || (pressured && !clear) {
            Some(format!("disk pressure: {used:.1}% used, {free} bytes free"))
        } else {
            None
        }
    }
}

/// The disk guard: the pressure state of the data path, read by publishes and health.
pub(crate) struct DiskGuard {
    path: PathBuf,
    marks: Watermarks,
    pressure: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The last sample (`None` when it failed: that is pressure already).
    last: Mutex<Option<Sample>>,
    /// Bytes admitted for publishing since the last sample (cleared just before each one, so
    /// what is written meanwhile may count twice, never not at all).
    admitted: AtomicU64,
}

impl DiskGuard {
    /// A guard for `cfg.data_path`, sampled once.
    pub(crate) fn new(cfg: &EngineConfig) -> DiskGuard {
        let g = DiskGuard {
            path: cfg.data_path.clone(),
            marks: Watermarks::new(cfg),
            pressure: AtomicBool::new(false),
            reason: Mutex::new(None),
            last: Mutex::new(None),
            admitted: AtomicU64::new(0),
        };
        g.check();
        g
    }

    /// Samples once and records the state.
    pub(crate) fn check(&self) {
        self.admitted.store(0, Ordering::SeqCst);
        let sample = Sample::of(&self.path);
        *lock(&self.last) = sample.as_ref().ok().copied();
        let state = self
            .marks
            .next_state(self.pressured(), sample.map(Sample::usage));
        self.pressure.store(state.is_some(), Ordering::SeqCst);
        *lock(&self.reason) = state;
    }

    /// Counts a publish of `messages` bodies of `bytes` in all against the last sample and
    /// returns whether publishes are throttled now: when the estimate (the last sample less
    /// everything admitted since) crosses the high watermark or `min_free_bytes`, the volume
    /// is sampled at once instead of at the next period.
    pub(crate) fn admit(&self, bytes: u64, messages: u64) -> bool {
        if self.pressured() {
            return true;
        }
        let cost = bytes + messages * PER_MESSAGE_BYTES;
        let admitted = self.admitted.fetch_add(cost, Ordering::SeqCst) + cost;
        let Some(last) = *lock(&self.last) else {
            return self.pressured();
        };
        if self.marks.crossed(last, admitted) {
            self.check();
        }
        self.pressured()
    }

    /// Whether publishes are throttled now.
    pub(crate) fn pressured(&self) -> bool {
        self.pressure.load(Ordering::SeqCst)
    }

    /// Why, while pressured.
    pub(crate) fn reason(&self) -> Option<String> {
        lock(&self.reason).clone()
    }
}

/// The guard loop: samples every `period`; ends when the engine is dropped or shut down. With
/// `evict_after` set (protective eviction on), every tick after that much continuous pressure
/// evicts one segment.
pub(crate) async fn disk_loop(
    guard: Arc<DiskGuard>,
    registry: Weak<Registry>,
    period: Duration,
    evict_after: Option<Duration>,
) {
    let mut pressure_since: Option<Instant> = None;
    loop {
        let Some(r) = registry.upgrade() else { return };
        if r.is_shutting_down() {
            return;
        }
        guard.check();
        if guard.pressured() {
            let since = *pressure_since.get_or_insert_with(Instant::now);
            if let Some(grace) = evict_after
                && since.elapsed() >= grace
                && let Err(e) = crate::evict::evict_once(&r).await
            {
                tracing::error!(error = %e, "protective eviction failed");
            }
        } else {
            pressure_since = None;
        }
        drop(r);
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_crosses_where_a_sample_would() {
        let cfg = EngineConfig {
            disk_high_watermark_percent: 60,
            min_free_bytes: 100,
            ..EngineConfig::default()
        };
        let marks = Watermarks::new(&cfg);
        let last = Sample {
            total: 1_000,
            avail: 500,
        };
        // (admitted since the sample, crossed): 60 % used is 400 free.
        let cases = [
            (0, false),
            (99, false),
            (100, true),
            (450, true),
            (2_000, true),
        ];
        for (admitted, want) in cases {
            assert_eq!(marks.crossed(last, admitted), want, "{admitted}");
        }
        let only_min_free = Watermarks::new(&EngineConfig {
            disk_high_watermark_percent: 100,
            disk_low_watermark_percent: 99,
            ..cfg
        });
        let nearly_full = Sample {
            total: 100_000,
            avail: 150,
        };
        assert!(!only_min_free.crossed(nearly_full, 50));
        assert!(only_min_free.crossed(nearly_full, 51), "min_free_bytes");
    }

    #[test]
    fn pressure_has_hysteresis_and_fails_closed() {
        let cfg = EngineConfig {
            min_free_bytes: 100,
            ..EngineConfig::default()
        };
        let cases = [
            (false, Ok((50.0, 1_000)), false),
            (false, Ok((85.0, 1_000)), true),
            (false, Ok((10.0, 99)), true),
            (true, Ok((80.0, 1_000)), true),
            (true, Ok((74.9, 1_000)), false),
            (true, Ok((10.0, 50)), true),
            (false, Err("boom".to_string()), true),
        ];
        for (was, sample, want) in cases {
            assert_eq!(
                Watermarks::new(&cfg)
                    .next_state(was, sample.clone())
                    .is_some(),
                want,
                "{was} {sample:?}"
            );
        }
    }
}
