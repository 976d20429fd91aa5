//! `RustQueueSpec` and its nested objects.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults as d;
use super::status::RustQueueStatus;

/// Desired state of one RustQueue cluster: a set of share-nothing brokers, one per eligible
/// Node, each with its own PVC.
// Two printer columns are both `type_ = "integer"`; clippy reads the repeated nested
// key-value as a duplicated attribute (a false positive for `#[kube(printcolumn(...))]`).
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "rustqueue.io",
    version = "v1alpha1",
    kind = "RustQueue",
    plural = "rustqueues",
    shortname = "rq",
    // Not "rustqueue": a category named like the kind's singular shadows it, and
    // `kubectl get rustqueue <name>` then fails with "you must specify only one resource".
    category = "rustqueue-all",
    namespaced,
    status = "RustQueueStatus",
    derive = "PartialEq",
    doc = "A RustQueue cluster: durable NSQ-compatible brokers managed by rustqueue-operator",
    cel,
    // On the whole object, since the floor lives in status: lowering the level is refused once
    // the brokers have activated the old one; taking back a raise that never activated (one
    // preflight blocked) stays possible. A status write leaves spec alone, so it always passes.
    validation = Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.activeStorageFeatureLevel) || self.spec.storageFeatureLevel >= oldSelf.spec.storageFeatureLevel || self.spec.storageFeatureLevel >= oldSelf.status.activeStorageFeatureLevel"
    )
    // A static message: a messageExpression that prints the level (string(int)) is costed
    // as an unbounded string, and the API server refuses the CRD for it.
    .message("spec.storageFeatureLevel cannot be lowered below status.activeStorageFeatureLevel, the floor: the brokers have activated that level and their PVCs may hold records a lower level cannot read, so it is never lowered (a raise that never activated can still be taken back)"),
    // Once local retention has run, evicted segments may exist only in the bucket: tiering
    // stays on, on the same bucket and prefix (docs/tiering.md, "Turning tiering off").
    validation = Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.tieringLocalRetentionUsed) || !oldSelf.status.tieringLocalRetentionUsed || !has(oldSelf.spec.tiering) || (has(self.spec.tiering) && self.spec.tiering.bucket == oldSelf.spec.tiering.bucket && (has(self.spec.tiering.prefix) ? (has(oldSelf.spec.tiering.prefix) && self.spec.tiering.prefix == oldSelf.spec.tiering.prefix) : !has(oldSelf.spec.tiering.prefix)))"
    )
    .message("spec.tiering cannot be removed, nor its bucket or prefix changed, once local retention has been on (status.tieringLocalRetentionUsed): evicted segments may exist only in that bucket under that prefix, and without it they would never be delivered again (docs/tiering.md, turning tiering off)"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredBrokers"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyBrokers"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.minBrokers <= self.maxBrokers")
        .message("minBrokers must be less than or equal to maxBrokers"),
    validation = Rule::new("self.diskLowWatermarkPercent < self.diskHighWatermarkPercent")
        .message("diskLowWatermarkPercent must be below diskHighWatermarkPercent"),
    validation = Rule::new("self.maxMessageBytes <= 74448896 || self.storageFeatureLevel >= 2")
        .message("maxMessageBytes above 71 MiB needs storageFeatureLevel 2 (roll a capable image first, then raise the level)"),
    // docs/tiering.md: level 3 fences a rollback to a release that would drop evicted segments.
    validation = Rule::new("!has(self.tiering) || !(has(self.tiering.localRetentionBytes) || has(self.tiering.localRetentionSeconds)) || self.storageFeatureLevel >= 3")
        .message("spec.tiering.localRetentionBytes/localRetentionSeconds need storageFeatureLevel 3: it fences a rollback to a release that would drop evicted segments (roll a capable image first, then raise the level)"),
    validation = Rule::new("self.connectionDeliveryInflightBytes >= self.maxMessageBytes")
        .message("connectionDeliveryInflightBytes must be at least maxMessageBytes"),
    validation = Rule::new("self.nodeDeliveryInflightBytes >= 2 * self.connectionDeliveryInflightBytes")
        .message("nodeDeliveryInflightBytes must be at least twice connectionDeliveryInflightBytes"),
    validation = Rule::new("self.publishAckMode == 'durable' || self.relaxedSyncBytes >= 4096")
        .message("relaxedSyncBytes must be at least 4096 when publishAckMode is not durable"),
    validation = Rule::new("quantity(self.storageSize).compareTo(quantity(oldSelf.storageSize)) >= 0")
        .message("storageSize cannot shrink: broker claims only grow (set it back to at least the previous size)"),
    validation = Rule::new("self.storageClassName == oldSelf.storageClassName")
        .message("storageClassName cannot change: existing broker claims keep their StorageClass"),
    validation = Rule::new("!self.kodoCompatibility.enabled || (self.minBrokers == 3 && self.maxBrokers == 3 && self.storageFeatureLevel == 2 && self.maxMessageBytes == 104857600 && self.publishAckMode == 'durable' && self.bootstrapRetentionSeconds >= 180 && self.connectionDeliveryInflightBytes >= 134217728 && self.nodeDeliveryInflightBytes >= 536870912)")
        .message("kodoCompatibility needs minBrokers = maxBrokers = 3, storageFeatureLevel 2, maxMessageBytes 104857600, publishAckMode durable, bootstrapRetentionSeconds >= 180, connectionDeliveryInflightBytes >= 134217728 and nodeDeliveryInflightBytes >= 536870912"),
    validation = Rule::new("!self.kodoCompatibility.enabled || !self.kodoCompatibility.decommissionConfirmed")
        .message("kodoCompatibility.decommissionConfirmed must be false while kodoCompatibility.enabled is true (set it only when disabling the profile)"),
    // With management on, a broker takes no traffic until the console syncs its fences
    // (docs/console.md): without a console the brokers would never become Ready.
    // docs/tiering.md, "Turning tiering off": with local retention the bucket may hold the
    // only copy of evicted segments. This refuses the one apply that sets retention and removes
    // tiering; status.tieringLocalRetentionUsed (below, on the object) holds every later one.
    validation = Rule::new("!has(oldSelf.tiering) || !(has(oldSelf.tiering.localRetentionBytes) || has(oldSelf.tiering.localRetentionSeconds)) || has(self.tiering)")
        .message("spec.tiering cannot be removed while local retention is set: evicted segments exist only in the bucket and would never be delivered again (docs/tiering.md, turning tiering off)"),
    validation = Rule::new("!self.consoleManagementEnabled || self.console.enabled")
        .message("consoleManagementEnabled needs console.enabled: with management on, brokers take no traffic until the console has synced their delete fences"),
)]
#[serde(rename_all = "camelCase")]
pub struct RustQueueSpec {
    /// Broker image (`rustqueued` inside).
    #[schemars(length(min = 1), regex(pattern = r"\S"))]
    pub image: String,
    /// Pull policy of broker Pods.
    #[serde(default = "d::image_pull_policy")]
    #[schemars(regex(pattern = r"^(Always|IfNotPresent|Never)$"))]
    pub image_pull_policy: String,
    /// Fewest brokers; fewer eligible Nodes is `InsufficientNodes`.
    #[serde(default = "d::min_brokers")]
    #[schemars(range(min = 1))]
    pub min_brokers: i32,
    /// Most brokers.
    #[serde(default = "d::max_brokers")]
    #[schemars(range(min = 1))]
    pub max_brokers: i32,
    /// One `key=value` Node label: Nodes carrying it get a broker each.
    #[serde(default = "d::eligible_node_selector")]
    #[schemars(regex(pattern = r"^[^=,\s]+=[^=,\s]*$"))]
    pub eligible_node_selector: String,
    /// StorageClass of broker PVCs (cannot change once set).
    #[serde(default = "d::storage_class_name")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"\S"))]
    pub storage_class_name: String,
    /// Size of each broker PVC (a Kubernetes quantity); claims grow when it grows (the
    /// StorageClass must allow volume expansion) and it can never shrink.
    #[serde(default = "d::storage_size")]
    #[schemars(length(max = 64), regex(pattern = r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?)?$"))]
    pub storage_size: String,
    /// Storage feature level to activate. It is a floor: once the brokers have activated a
    /// level (`status.activeStorageFeatureLevel`) it is never lowered (the CRD refuses it).
    #[serde(default = "d::one_u32")]
    #[schemars(range(min = 1))]
    pub storage_feature_level: u32,
    /// Broker message index cache.
    #[serde(default = "d::message_index_cache_bytes")]
    #[schemars(range(min = 1))]
    pub message_index_cache_bytes: u64,
    /// Delay before background maintenance starts after boot.
    #[serde(default = "d::maintenance_startup_delay_seconds")]
    #[schemars(range(max = 3600))]
    pub maintenance_startup_delay_seconds: u64,
    /// Per-broker delivery in-flight byte budget.
    #[serde(default = "d::node_delivery_inflight_bytes")]
    #[schemars(range(min = 1, max = 4_294_967_295u64))]
    pub node_delivery_inflight_bytes: u64,
    /// Per-connection delivery in-flight byte budget.
    #[serde(default = "d::connection_delivery_inflight_bytes")]
    #[schemars(range(min = 1, max = 4_294_967_295u64))]
    pub connection_delivery_inflight_bytes: u64,
    /// Free bytes below which the broker is under disk pressure.
    #[serde(default = "d::min_free_bytes")]
    pub min_free_bytes: u64,
    /// Used-space percentage that starts disk pressure.
    #[serde(default = "d::disk_high_watermark_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub disk_high_watermark_percent: u8,
    /// Used-space percentage that ends disk pressure.
    #[serde(default = "d::disk_low_watermark_percent")]
    #[schemars(range(max = 99))]
    pub disk_low_watermark_percent: u8,
    /// Delete the oldest segments (with an audit record) under sustained pressure.
    #[serde(default)]
    pub protective_eviction_enabled: bool,
    /// How long pressure must last before protective eviction.
    #[serde(default = "d::sixty")]
    pub disk_pressure_grace_seconds: u64,
    /// How long unrouted messages are kept for channels that appear later.
    #[serde(default = "d::bootstrap_retention_seconds")]
    #[schemars(range(min = 1))]
    pub bootstrap_retention_seconds: u64,
    /// Largest message.
    #[serde(default = "d::max_message_bytes")]
    #[schemars(range(min = 1, max = 104_857_600))]
    pub max_message_bytes: u64,
    /// Most topics per broker.
    #[serde(default = "d::max_topics")]
    #[schemars(range(min = 1))]
    pub max_topics: u64,
    /// Most publish workers per broker.
    #[serde(default = "d::max_publish_workers")]
    #[schemars(range(min = 1))]
    pub max_publish_workers: u64,
    /// Idle publish workers stop after this long.
    #[serde(default = "d::sixty")]
    #[schemars(range(min = 1))]
    pub publish_worker_idle_seconds: u64,
    /// When a publish is acknowledged.
    #[serde(default)]
    pub publish_ack_mode: PublishAckMode,
    /// Relaxed modes: fsync after this many messages.
    #[serde(default = "d::relaxed_sync_messages")]
    #[schemars(range(min = 1))]
    pub relaxed_sync_messages: u64,
    /// Relaxed modes: fsync after this many bytes.
    #[serde(default = "d::relaxed_sync_bytes")]
    #[schemars(range(min = 1))]
    pub relaxed_sync_bytes: u64,
    /// Relaxed modes: fsync at least this often.
    #[serde(default = "d::relaxed_sync_interval_ms")]
    #[schemars(range(min = 1))]
    pub relaxed_sync_interval_ms: u64,
    /// Per-topic/channel metric series.
    #[serde(default)]
    pub detailed_queue_metrics: bool,
    /// Budget of detailed series.
    #[serde(default = "d::max_detailed_metric_series")]
    #[schemars(range(min = 1))]
    pub max_detailed_metric_series: u64,
    /// Existing Secret with `admin-token`, `registry-token`, `console-token`; unset means the
    /// operator generates `<name>-auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub registry_secret_name: Option<String>,
    /// Let the console manage topics and channels: the brokers open `/v1/manage/*` and the
    /// console its management API (the one switch for both).
    #[serde(default)]
    pub console_management_enabled: bool,
    /// The console `<n>-console` the operator runs (docs/console.md).
    #[serde(default)]
    pub console: super::Console,
    /// Secret with `tls.crt`, `tls.key` (and `ca.crt`) for client TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub client_tls_secret_name: Option<String>,
    /// nodeSelector of the producer gateway DaemonSet `<n>-gateway`: a gateway Pod runs on every
    /// Node it selects (every Node when empty).
    #[serde(default)]
    pub proxy_node_selector: BTreeMap<String, String>,
    /// Seconds after which the gateway closes a producer's TCP tunnel (±10% jitter) so the
    /// producer reconnects and is placed on the least busy broker again; 0 never rotates.
    #[serde(default = "d::proxy_tcp_max_connection_age_seconds")]
    pub proxy_tcp_max_connection_age_seconds: u64,
    /// Discovery replicas (at least 2).
    #[serde(default = "d::discovery_replicas")]
    #[schemars(range(min = 2))]
    pub discovery_replicas: i32,
    /// Kodo compatibility profile.
    #[serde(default)]
    pub kodo_compatibility: KodoCompatibility,
    /// Drain one broker for maintenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// Rollout controls.
    #[serde(default)]
    pub rollout: Rollout,
    /// Broker Pod scheduling.
    #[serde(default)]
    pub broker_scheduling: BrokerScheduling,
    /// Broker container resources.
    #[serde(default)]
    pub broker_resources: BrokerResources,
    /// Tiered storage (docs/tiering.md): sealed segments and checkpoints uploaded to an
    /// S3-compatible bucket, and a broker whose volume was replaced by an empty one restored
    /// from it before it starts. Unset: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiering: Option<super::Tiering>,
    /// OpenTelemetry traces of the brokers' publishes and deliveries (docs/observability.md),
    /// sent over OTLP/HTTP; changing it rolls the brokers. Unset: no traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<super::Tracing>,
}

/// When a publish is acknowledged to the producer.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum PublishAckMode {
    /// After fsync (the default).
    #[default]
    Durable,
    /// After the write, before fsync.
    WriteAck,
    /// Like nsqd: fsync in the background.
    NsqRelaxed,
}

impl PublishAckMode {
    /// The broker TOML value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Durable => "durable",
            Self::WriteAck => "write_ack",
            Self::NsqRelaxed => "nsq_relaxed",
        }
    }
}

/// The Kodo compatibility profile (docs/kodo.md): three Kodo Gateways, the discovery cutover
/// and the producer-restart and decommission fences. Default off; the operator checks the rest
/// of the spec when it is on (minBrokers = maxBrokers = 3, level 2, 100 MiB, ...).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KodoCompatibility {
    /// Turn the profile on.
    #[serde(default)]
    pub enabled: bool,
    /// Confirm that Kodo producers no longer need the Gateways.
    #[serde(default)]
    pub decommission_confirmed: bool,
    /// Change after restarting Kodo producers.
    #[serde(default)]
    pub producer_restart_nonce: String,
    /// Idle channel cleanup; permanently disabled.
    #[serde(default)]
    #[schemars(extend("enum" = [false]))]
    pub cleanup_enabled: bool,
    /// Discovery cutover grace.
    #[serde(default = "d::cutover_grace_seconds")]
    #[schemars(range(min = 630, max = 86400))]
    pub cutover_grace_seconds: u64,
    /// Pods allowed to reach the Gateways.
    #[serde(default = "d::kodo_allowed_pod_selector")]
    pub allowed_pod_selector: BTreeMap<String, String>,
    /// Namespaces allowed to reach the Gateways (empty = same namespace).
    #[serde(default)]
    pub allowed_namespace_selector: BTreeMap<String, String>,
}

impl Default for KodoCompatibility {
    fn default() -> Self {
        Self {
            enabled: false,
            decommission_confirmed: false,
            producer_restart_nonce: String::new(),
            cleanup_enabled: false,
            cutover_grace_seconds: d::cutover_grace_seconds(),
            allowed_pod_selector: d::kodo_allowed_pod_selector(),
            allowed_namespace_selector: BTreeMap::new(),
        }
    }
}

/// A maintenance request for one broker.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Broker Pod name, `<name>-<ordinal>`.
    #[schemars(length(min = 1))]
    pub broker: String,
    /// Drain (true) or resume (false).
    #[serde(default = "d::yes")]
    pub enabled: bool,
}

/// Rollout controls.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Stop replacing brokers.
    #[serde(default)]
    pub paused: bool,
    /// Stop after the first (canary) broker until `approvedRevision` matches.
    #[serde(default)]
    pub require_canary_approval: bool,
    /// The pod-template revision approved to continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_revision: Option<String>,
    /// A stalled rollout fails after this long.
    #[serde(default = "d::timeout_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: u64,
    /// Roll back to this image (fenced by the PVC reader level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), regex(pattern = r"\S"))]
    pub rollback_to_image: Option<String>,
    /// Change to retry a failed rollout.
    #[serde(default)]
    pub retry_nonce: String,
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            paused: false,
            require_canary_approval: false,
            approved_revision: None,
            timeout_seconds: d::timeout_seconds(),
            rollback_to_image: None,
            retry_nonce: String::new(),
        }
    }
}

/// Broker Pod scheduling.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerScheduling {
    /// Anti-affinity topology key (one broker per value).
    #[serde(default = "d::topology_key")]
    #[schemars(length(min = 1))]
    pub topology_key: String,
    /// PriorityClass of broker Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Tolerations of broker Pods.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
}

impl Default for BrokerScheduling {
    fn default() -> Self {
        Self {
            topology_key: d::topology_key(),
            priority_class_name: None,
            tolerations: Vec::new(),
        }
    }
}

/// A Pod toleration.
#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Exists` or `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Taint effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// How long a NoExecute taint is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// Broker container resources (limits only when given).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerResources {
    /// CPU request.
    #[serde(default = "d::cpu_request")]
    #[schemars(length(min = 1))]
    pub cpu_request: String,
    /// Memory request.
    #[serde(default = "d::memory_request")]
    #[schemars(length(min = 1))]
    pub memory_request: String,
    /// CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<String>,
    /// Memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
}

impl Default for BrokerResources {
    fn default() -> Self {
        Self {
            cpu_request: d::cpu_request(),
            memory_request: d::memory_request(),
            cpu_limit: None,
            memory_limit: None,
        }
    }
}

impl RustQueueSpec {
    /// A spec with every default and the given image, as a manifest with only `image` would
    /// deserialize.
    pub fn with_image(image: &str) -> Self {
        serde_json::from_value(serde_json::json!({ "image": image }))
            .expect("a spec with only an image deserializes")
    }
}
