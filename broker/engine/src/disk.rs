//! Disk-pressure guard (docs/api.md, "Disk pressure"): `statvfs` on the data path every
//! `disk_check_interval`. Pressure starts at used ≥ high watermark or free < `min_free_bytes`
//! and clears at used < low watermark and free ≥ `min_free_bytes`; an inspection error counts
//! as pressure (fail closed). Under pressure publishes are throttled; consumption, FIN and REQ
//! continue and GC keeps running.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::config::EngineConfig;
use crate::lock::lock;
use crate::registry::Registry;

/// Used percent (of space available to unprivileged users) and free bytes.
pub(crate) fn usage(path: &Path) -> Result<(f64, u64), String> {
    let st =
        nix::sys::statvfs::statvfs(path).map_err(|e| format!("statvfs {}: {e}", path.display()))?;
    let frsize = st.fragment_size() as u64;
    let total = st.blocks() as u64 * frsize;
    let avail = st.blocks_available() as u64 * frsize;
    if total == 0 {
        return Ok((0.0, avail));
    }
    Ok((
        (total.saturating_sub(avail)) as f64 * 100.0 / total as f64,
        avail,
    ))
}

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
}

impl DiskGuard {
    /// A guard for `cfg.data_path`, sampled once.
    pub(crate) fn new(cfg: &EngineConfig) -> DiskGuard {
        let g = DiskGuard {
            path: cfg.data_path.clone(),
            marks: Watermarks::new(cfg),
            pressure: AtomicBool::new(false),
            reason: Mutex::new(None),
        };
        g.check();
        g
    }

    /// Samples once and records the state.
    pub(crate) fn check(&self) {
        let state = self.marks.next_state(self.pressured(), usage(&self.path));
        self.pressure.store(state.is_some(), Ordering::SeqCst);
        *lock(&self.reason) = state;
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
