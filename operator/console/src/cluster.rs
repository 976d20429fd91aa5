//! The two Kubernetes seams of the console, small enough to fake: [`ClusterSource`] (what the
//! collection loop reads) and [`CatalogStore`] (the Topic/Channel objects and Events the
//! management flow writes). `kube_store` implements both against an API server; `memory`
//! (feature `test-support`) in memory for tests.

use futures::future::BoxFuture;
use rustqueue_api::crd::{RustQueue, RustQueueChannel, RustQueueTopic};
use serde::Serialize;

/// An error from the cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The object changed since it was read (HTTP 409 on replace) or already exists (on create).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The API server refused the request itself (400, 403, 422, ...): sending it again
    /// changes nothing.
    #[error("refused: {0}")]
    Refused(String),
    /// Anything else (network, permissions, the API server's own errors).
    #[error("{0}")]
    Other(String),
}

/// A broker Pod, as the snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct BrokerPod {
    /// Pod UID.
    pub uid: String,
    /// Pod name (`<n>-<ordinal>`).
    pub name: String,
    /// The Node it runs on.
    pub node_name: Option<String>,
    /// Pod IP; brokers are reached at `<pod_ip>:<broker port>`.
    pub pod_ip: Option<String>,
    /// Pod phase.
    pub phase: String,
    /// The Ready condition.
    pub ready: bool,
    /// Container restarts.
    pub restarts: i32,
    /// Container image.
    pub image: String,
    /// Resolved image id.
    pub image_id: String,
    /// Container start time (RFC 3339).
    pub started_at: Option<String>,
    /// The data PVC's name.
    pub pvc_name: Option<String>,
}

/// A broker PVC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct BrokerPvc {
    /// PVC name.
    pub name: String,
    /// Phase (`Bound`, ...).
    pub phase: String,
    /// Requested size (quantity).
    pub requested: Option<String>,
    /// Provisioned size (quantity).
    pub capacity: Option<String>,
    /// StorageClass.
    pub storage_class: Option<String>,
}

/// A Kubernetes Event, as the snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ClusterEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Kind of the involved object.
    pub object_kind: String,
    /// Name of the involved object.
    pub object_name: String,
    /// UID of the involved object.
    #[serde(skip)]
    pub object_uid: String,
    /// How many times it happened.
    pub count: i32,
    /// Last time it happened, ms since the Unix epoch (0 unknown).
    pub last_seen_ms: u64,
}

/// An Event the console records about its RustQueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// What the Event is about, as 32 hex digits (`manage::audit::event_key`): two records
    /// of one key are one Event, named `<name>-console-<key>`, so recording it again after a
    /// crash or a lost reply finds it instead of doubling it.
    pub key: String,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// `ConsoleManagementAccepted`, `ConsoleManagementSucceeded`, `ConsoleManagementFailed`.
    pub reason: &'static str,
    /// Note.
    pub message: String,
}

/// What the collection loop reads from Kubernetes.
pub trait ClusterSource: Send + Sync {
    /// The RustQueue.
    fn rustqueue(&self) -> BoxFuture<'_, Result<RustQueue, StoreError>>;
    /// Broker Pods (by the broker labels).
    fn broker_pods(&self) -> BoxFuture<'_, Result<Vec<BrokerPod>, StoreError>>;
    /// Broker PVCs (by the broker labels).
    fn broker_pvcs(&self) -> BoxFuture<'_, Result<Vec<BrokerPvc>, StoreError>>;
    /// Events of the namespace (at most 500).
    fn events(&self) -> BoxFuture<'_, Result<Vec<ClusterEvent>, StoreError>>;
}

/// The console's durable catalog: RustQueueTopic and RustQueueChannel objects of its queue,
/// and Events about the RustQueue.
pub trait CatalogStore: Send + Sync {
    /// Every topic object of the queue.
    fn topics(&self) -> BoxFuture<'_, Result<Vec<RustQueueTopic>, StoreError>>;
    /// Every channel object of the queue.
    fn channels(&self) -> BoxFuture<'_, Result<Vec<RustQueueChannel>, StoreError>>;
    /// Creates a topic object (its name set); `Conflict` when it exists.
    fn create_topic(&self, t: RustQueueTopic) -> BoxFuture<'_, Result<RustQueueTopic, StoreError>>;
    /// Replaces a topic object; `Conflict` when its resourceVersion is not current.
    fn replace_topic(&self, t: RustQueueTopic)
    -> BoxFuture<'_, Result<RustQueueTopic, StoreError>>;
    /// Deletes a topic object.
    fn delete_topic(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>>;
    /// Creates a channel object; `Conflict` when it exists.
    fn create_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>>;
    /// Replaces a channel object; `Conflict` when its resourceVersion is not current.
    fn replace_channel(
        &self,
        c: RustQueueChannel,
    ) -> BoxFuture<'_, Result<RustQueueChannel, StoreError>>;
    /// Deletes a channel object.
    fn delete_channel(&self, name: String) -> BoxFuture<'_, Result<(), StoreError>>;
    /// Records an Event about the RustQueue; `Conflict` when the Event of its key exists.
    fn record_event(&self, e: NewEvent) -> BoxFuture<'_, Result<(), StoreError>>;
}
