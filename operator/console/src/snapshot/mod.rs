//! The snapshot: everything `/api/v1/snapshot` returns, built by pure functions from what one
//! collection read (docs/console.md lists the fields). It never holds a message body: the
//! brokers' observations carry none, and nothing here adds one.

mod aggregate;
mod anomalies;
mod trend;

pub use aggregate::{BrokerState, Collected, build};
pub use anomalies::anomalies;
pub use trend::{Counters, Trend, membership_hash};

use rustqueue_api::contract::{HistogramSnapshot, Observation};
use rustqueue_api::crd::{CatalogPhase, Condition, OperationStatus};
use serde::{Deserialize, Serialize};

use crate::cluster::{BrokerPvc, ClusterEvent};

/// `schema_version` of the snapshot.
pub const SNAPSHOT_SCHEMA_VERSION: u32 = 1;
/// Events kept in a snapshot (newest first).
pub const MAX_EVENTS: usize = 100;

/// `GET /api/v1/snapshot`.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// [`SNAPSHOT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When it was collected, ms since the Unix epoch.
    pub collected_at_ms: u64,
    /// Every broker answered, none is missing and nothing failed.
    pub complete: bool,
    /// What failed, one line each.
    pub errors: Vec<String>,
    /// The RustQueue.
    pub cluster: ClusterView,
    /// Totals and rates.
    pub summary: Summary,
    /// One entry per broker Pod, in name order.
    pub brokers: Vec<BrokerView>,
    /// Topics aggregated over their owners, in name order.
    pub topics: Vec<TopicView>,
    /// Disks, segments and latency histograms merged over the brokers.
    pub storage: StorageView,
    /// The RustQueue's conditions.
    pub conditions: Vec<Condition>,
    /// The operator's current operation.
    pub current_operation: Option<OperationStatus>,
    /// The operator's finished operations.
    pub operation_history: Vec<OperationStatus>,
    /// Events about the RustQueue and its objects, newest first.
    pub events: Vec<ClusterEvent>,
    /// What needs attention.
    pub anomalies: Vec<Anomaly>,
    /// The trend, oldest first.
    pub history: Vec<TrendSample>,
    /// Whether management can be used.
    pub management: ManagementView,
}

/// The RustQueue in a snapshot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterView {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID (binds catalog action tokens).
    pub uid: String,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.message`.
    pub message: Option<String>,
    /// `status.desiredBrokers`.
    pub desired_brokers: Option<i32>,
    /// `status.readyBrokers`.
    pub ready_brokers: Option<i32>,
    /// `status.activeStorageFeatureLevel`.
    pub active_storage_feature_level: Option<u32>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The whole spec (it names Secrets, never holds their data).
    pub spec: serde_json::Value,
}

/// Totals over the brokers, and the latest rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[allow(missing_docs, reason = "totals and rates named as in docs/console.md")]
pub struct Summary {
    pub stored_messages: u64,
    pub depth: u64,
    pub in_flight: u64,
    pub deferred: u64,
    pub connections: u64,
    pub publish_per_second: f64,
    pub deliver_per_second: f64,
    pub finish_per_second: f64,
    pub publish_bytes_per_second: f64,
    pub retry_total: u64,
    pub dead_letter_total: u64,
    pub throttled_total: u64,
}

/// One broker.
#[derive(Debug, Clone, Serialize)]
pub struct BrokerView {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Node.
    pub node_name: Option<String>,
    /// Pod IP.
    pub pod_ip: Option<String>,
    /// Pod phase.
    pub phase: String,
    /// Pod Ready.
    pub ready: bool,
    /// Container restarts.
    pub restarts: i32,
    /// Image.
    pub image: String,
    /// Image id.
    pub image_id: String,
    /// Container start.
    pub started_at: Option<String>,
    /// Its PVC.
    pub pvc: Option<BrokerPvc>,
    /// The broker's last observation (head merged into the last full one).
    pub observation: Option<Observation>,
    /// Why this collection could not observe it.
    pub error: Option<String>,
}

impl BrokerView {
    /// Healthy enough to own an operation: Pod Ready, observed without error, registry
    /// revision > 0, process ready, storage healthy, disk ready, fences ready, not draining.
    pub fn healthy_owner(&self) -> bool {
        let Some(o) = self.observation.as_ref().filter(|_| self.error.is_none()) else {
            return false;
        };
        let r = &o.head.readiness;
        self.ready
            && o.head.registry_revision > 0
            && r.process_ready
            && r.storage_healthy
            && r.disk_ready
            && r.management_fences_ready
            && !r.draining
    }
}

/// Management fields of a topic or channel, from its catalog object.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ManagedFields {
    /// The object's phase (absent: not in the catalog).
    pub managed_phase: Option<CatalogPhase>,
    /// The object's revision.
    pub management_revision: Option<u64>,
    /// Tombstone expiry.
    pub tombstone_until_ms: Option<i64>,
    /// The object's `lastError`.
    pub management_error: Option<String>,
    /// The object's UID.
    pub resource_uid: Option<String>,
    /// The object's resourceVersion.
    pub resource_version: Option<String>,
}

/// A topic over all its owners.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopicView {
    /// Name.
    pub name: String,
    /// Broker Pods holding it.
    pub owners: Vec<String>,
    /// Paused on any owner.
    pub paused: bool,
    /// Messages held, summed.
    pub stored_messages: u64,
    /// Segment files, summed.
    pub segment_count: u64,
    /// Segment bytes, summed.
    pub segment_bytes: u64,
    /// Channels over all owners.
    pub channels: Vec<ChannelView>,
    /// From the catalog object.
    #[serde(flatten)]
    pub managed: ManagedFields,
}

/// A channel over all its owners.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChannelView {
    /// Name.
    pub name: String,
    /// Broker Pods holding it.
    pub owners: Vec<String>,
    /// Ready backlog, summed.
    pub depth: u64,
    /// In flight, summed.
    pub in_flight: u64,
    /// Deferred, summed.
    pub deferred: u64,
    /// Finished above the cursor, summed.
    pub ack_gap: u64,
    /// Paused on any owner.
    pub paused: bool,
    /// `#ephemeral`.
    pub ephemeral: bool,
    /// From the catalog object.
    #[serde(flatten)]
    pub managed: ManagedFields,
}

/// Disks and storage internals over the brokers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StorageView {
    /// Disk size, summed.
    pub total_bytes: u64,
    /// Available, summed.
    pub available_bytes: u64,
    /// Used share of the summed disks, percent.
    pub used_percent: f64,
    /// Segment files.
    pub segment_count: u64,
    /// Segment bytes.
    pub segment_bytes: u64,
    /// Brokers under disk pressure.
    pub pressure_brokers: Vec<String>,
    /// Publish group fsync.
    pub fsync: HistogramSnapshot,
    /// Wait for a group commit.
    pub group_commit_wait: HistogramSnapshot,
    /// Body reads for delivery.
    pub payload_read: HistogramSnapshot,
    /// Scrub passes.
    pub scrub: HistogramSnapshot,
    /// GC passes.
    pub gc: HistogramSnapshot,
}

/// Something that needs attention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    /// `warning` or `critical`.
    pub severity: &'static str,
    /// `cluster_not_ready`, `broker_unreachable`, `disk_pressure`, `storage_unhealthy`,
    /// `partial_snapshot`.
    pub code: &'static str,
    /// The broker concerned, if one.
    pub broker: Option<String>,
    /// In words.
    pub message: String,
}

/// One point of the trend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "rates and gauges named as in docs/console.md")]
pub struct TrendSample {
    pub at_ms: u64,
    pub publish_per_second: f64,
    pub deliver_per_second: f64,
    pub finish_per_second: f64,
    pub publish_bytes_per_second: f64,
    pub depth: u64,
    pub in_flight: u64,
    pub disk_used_percent: f64,
}

/// Whether management can be used now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ManagementView {
    /// `RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED`.
    pub enabled: bool,
    /// Discovery answered its health check.
    pub registry_available: bool,
    /// The catalog objects were listed in this collection.
    pub crd_fresh: bool,
}
