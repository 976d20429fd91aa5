//! `GET|POST /v1/drain`: take a broker out of the publish path (and optionally freeze
//! deliveries) before it is disrupted.

use serde::{Deserialize, Serialize};

/// `POST /v1/drain` body. `{}` means "drain, keep delivering".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    /// Start (true) or stop (false) draining. Stopping also clears the freeze.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Also stop handing out messages, so in-flight work can reach zero (`quiesced`).
    #[serde(default)]
    pub freeze_deliveries: bool,
}

fn yes() -> bool {
    true
}

impl Default for DrainRequest {
    fn default() -> Self {
        Self {
            enabled: true,
            freeze_deliveries: false,
        }
    }
}

impl DrainRequest {
    /// Undo any drain and freeze.
    pub fn resume() -> Self {
        Self {
            enabled: false,
            freeze_deliveries: false,
        }
    }
}

/// The drain state reported by both `GET` and `POST /v1/drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DrainStatus {
    /// Publishes are refused.
    pub draining: bool,
    /// Deliveries are frozen.
    #[serde(default)]
    pub delivery_frozen: bool,
    /// draining ∧ frozen ∧ nothing in flight ∧ both in-flight byte gauges 0.
    #[serde(default)]
    pub quiesced: bool,
    /// Additionally nothing stored and zero depth.
    #[serde(default)]
    pub empty: bool,
    /// Legacy alias of `empty`.
    #[serde(default)]
    pub drained: bool,
    /// Messages stored on the PVC.
    #[serde(default)]
    pub stored_messages: u64,
    /// Messages waiting for delivery over all channels.
    #[serde(default)]
    pub depth: u64,
    /// Messages delivered and not yet finished.
    #[serde(default)]
    pub in_flight: u64,
    /// Bytes of publishes accepted but not yet committed.
    #[serde(default)]
    pub publish_inflight_bytes: u64,
    /// Bytes of deliveries handed out and not yet finished.
    #[serde(default)]
    pub delivery_inflight_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_drain_request_means_drain_without_freezing() {
        let r: DrainRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(r, DrainRequest::default());
        assert!(r.enabled && !r.freeze_deliveries);
        assert!(!DrainRequest::resume().enabled);
    }

    #[test]
    fn drain_status_round_trips() {
        let s = DrainStatus {
            draining: true,
            delivery_frozen: true,
            quiesced: true,
            stored_messages: 5,
            depth: 5,
            ..DrainStatus::default()
        };
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(v["stored_messages"], 5);
        assert_eq!(v["delivery_inflight_bytes"], 0);
        assert_eq!(serde_json::from_value::<DrainStatus>(v).unwrap(), s);
    }
}
