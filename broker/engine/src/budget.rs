//! The node byte budgets (`limits.node_publish_inflight_bytes`,
//! `limits.node_delivery_inflight_bytes` in docs/configuration.md): publish bodies accepted
//! but not yet committed, and bodies being read for delivery. Permits are 4 KiB units.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::EngineConfig;

/// Bytes per budget permit.
const PERMIT_BYTES: u64 = 4_096;

/// Both node budgets.
pub(crate) struct Budgets {
    publish: Arc<Semaphore>,
    publish_total: u64,
    delivery: Arc<Semaphore>,
    delivery_total: u64,
    /// Most permits one read may hold: half the budget.
    delivery_read_cap: u64,
}

impl Budgets {
    pub(crate) fn new(cfg: &EngineConfig) -> Budgets {
        let publish_total =
            (cfg.node_publish_inflight_bytes / PERMIT_BYTES).clamp(1, u64::from(u32::MAX >> 3));
        let delivery_total =
            (cfg.node_delivery_inflight_bytes / PERMIT_BYTES).clamp(2, u64::from(u32::MAX >> 3));
        Budgets {
            publish: Arc::new(Semaphore::new(publish_total as usize)),
            publish_total,
            delivery: Arc::new(Semaphore::new(delivery_total as usize)),
            delivery_total,
            delivery_read_cap: (cfg.node_delivery_inflight_bytes / PERMIT_BYTES / 2).max(1),
        }
    }

    /// Charges a publish of `bodies` bodies totalling `bytes` (plus record and index
    /// overhead); `None` when the budget is short (the publish is throttled, never queued).
    pub(crate) fn try_publish(&self, bytes: u64, bodies: usize) -> Option<OwnedSemaphorePermit> {
        let charge = bytes + 52 + 128 * bodies as u64;
        let units = charge.div_ceil(PERMIT_BYTES).min(u64::from(u32::MAX)) as u32;
        self.publish.clone().try_acquire_many_owned(units).ok()
    }

    /// Permits a read of a `body_len` body holds: 2 × its size (read buffer + delivered
    /// copy), at most half the budget so one read can never starve all others.
    pub(crate) fn delivery_units(&self, body_len: u32) -> u32 {
        (2 * u64::from(body_len))
            .div_ceil(PERMIT_BYTES)
            .clamp(1, self.delivery_read_cap) as u32
    }

    /// Takes `units` delivery permits if they are free now.
    pub(crate) fn try_delivery(&self, units: u32) -> Option<OwnedSemaphorePermit> {
        self.delivery.clone().try_acquire_many_owned(units).ok()
    }

    /// Waits for `units` delivery permits.
    pub(crate) async fn delivery(&self, units: u32) -> Option<OwnedSemaphorePermit> {
        self.delivery.clone().acquire_many_owned(units).await.ok()
    }

    /// Bytes held right now: `(publish, delivery)`.
    pub(crate) fn held(&self) -> (u64, u64) {
        let held = |s: &Semaphore, total: u64| {
            total.saturating_sub(s.available_permits() as u64) * PERMIT_BYTES
        };
        (
            held(&self.publish, self.publish_total),
            held(&self.delivery, self.delivery_total),
        )
    }
}
