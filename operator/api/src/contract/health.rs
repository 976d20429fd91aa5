//! `GET /v1/health`: the broker's readiness. 200 with [`Health::Ready`], 503 with
//! [`Health::NotReady`].

use serde::{Deserialize, Serialize};

/// Why a broker is not ready, in the order the broker checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotReadyReason {
    /// A drain was requested (`POST /v1/drain`); the broker refuses new publishes.
    Draining,
    /// Free space is below the watermarks; publishes are throttled.
    DiskPressure,
    /// A write, fsync or CRC error isolated the storage (fail-closed).
    StorageFault,
    /// Console management fences have not been synced recently.
    ManagementFencesStale,
}

impl NotReadyReason {
    /// The wire string (`draining`, `disk_pressure`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Draining => "draining",
            Self::DiskPressure => "disk_pressure",
            Self::StorageFault => "storage_fault",
            Self::ManagementFencesStale => "management_fences_stale",
        }
    }
}

/// The body of `GET /v1/health`, tagged by `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Health {
    /// `{"status":"ready","node_id":1,"storage":"healthy","mode":"share-nothing","data_format":7}`
    Ready {
        /// The broker's node id (ordinal + 1 under the operator).
        node_id: u32,
        /// Always `healthy` when ready.
        storage: String,
        /// Always [`super::MODE_SHARE_NOTHING`].
        mode: String,
        /// On-disk data format.
        data_format: u32,
    },
    /// `{"status":"not_ready","reason":"draining","node_id":1}`
    NotReady {
        /// The first failing check.
        reason: NotReadyReason,
        /// The broker's node id.
        node_id: u32,
    },
}

impl Health {
    /// A ready body for `node_id`.
    pub fn ready(node_id: u32) -> Self {
        Self::Ready {
            node_id,
            storage: "healthy".into(),
            mode: super::MODE_SHARE_NOTHING.into(),
            data_format: super::DATA_FORMAT,
        }
    }

    /// Whether this body reports readiness.
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready { .. })
    }

    /// The HTTP status code that goes with this body.
    pub fn http_status(&self) -> u16 {
        if self.is_ready() { 200 } else { 503 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_body_has_the_documented_shape() {
        let v = serde_json::to_value(Health::ready(3)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status":"ready","node_id":3,"storage":"healthy",
                "mode":"share-nothing","data_format":7})
        );
    }

    #[test]
    fn not_ready_body_carries_the_reason_in_snake_case() {
        let h: Health =
            serde_json::from_str(r#"{"status":"not_ready","reason":"disk_pressure","node_id":2}"#)
                .unwrap();
        assert_eq!(
            h,
            Health::NotReady {
                reason: NotReadyReason::DiskPressure,
                node_id: 2
            }
        );
        assert_eq!(h.http_status(), 503);
        assert_eq!(
            NotReadyReason::ManagementFencesStale.as_str(),
            "management_fences_stale"
        );
    }
}
