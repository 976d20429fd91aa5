//! Disk-pressure guard (docs/api.md, "Disk pressure"): `statvfs` on the data path every
//! `disk_check_interval`. Pressure starts at used ≥ high watermark or free < `min_free_bytes`
//! and clears at used < low watermark and free ≥ `min_free_bytes`; an inspection error counts
//! as pressure (fail closed). Under pressure publishes are throttled; consumption, FIN and REQ
//! continue and GC keeps running.

use std::path::Path;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::config::EngineConfig;
use crate::engine::Inner;

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

/// The next pressure state given the current one and a sample (pure; tested by table).
pub(crate) fn next_state(
    cfg: &EngineConfig,
    pressured: bool,
    sample: Result<(f64, u64), String>,
) -> Option<String> {
    let (used, free) = match sample {
        Ok(s) => s,
        Err(e) => return Some(e),
    };
    let high = used >= f64::from(cfg.disk_high_watermark_percent) || free < cfg.min_free_bytes;
    let clear = used < f64::from(cfg.disk_low_watermark_percent) && free >= cfg.min_free_bytes;
    if high || (pressured && !clear) {
        Some(format!("disk pressure: {used:.1}% used, {free} bytes free"))
    } else {
        None
    }
}

/// Samples once and records the state.
pub(crate) fn check(inner: &Inner) {
    let pressured = inner.disk_pressure.load(Ordering::SeqCst);
    let state = next_state(&inner.cfg, pressured, usage(&inner.cfg.data_path));
    inner.disk_pressure.store(state.is_some(), Ordering::SeqCst);
    *crate::topic::lock(&inner.disk_reason) = state;
}

/// The guard loop; ends when the engine is dropped or shut down. With protective eviction
/// on, every tick after `disk_pressure_grace` of continuous pressure evicts one segment.
pub(crate) async fn disk_loop(inner: Weak<Inner>) {
    let mut pressure_since: Option<Instant> = None;
    loop {
        let Some(i) = inner.upgrade() else { return };
        if i.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let period = i.cfg.disk_check_interval;
        check(&i);
        if i.disk_pressure.load(Ordering::SeqCst) {
            let since = *pressure_since.get_or_insert_with(Instant::now);
            if i.cfg.protective_eviction_enabled
                && since.elapsed() >= i.cfg.disk_pressure_grace
                && let Err(e) = crate::evict::evict_once(&i).await
            {
                tracing::error!(error = %e, "protective eviction failed");
            }
        } else {
            pressure_since = None;
        }
        drop(i);
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
                next_state(&cfg, was, sample.clone()).is_some(),
                want,
                "{was} {sample:?}"
            );
        }
    }
}
