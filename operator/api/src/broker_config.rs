//! The broker configuration schema: the TOML file `rustqueued` reads and the operator
//! renders, as one set of serde types (docs/configuration.md lists every key). Every key has
//! a default, so an empty file (or no file) is a working broker; unknown keys are rejected.
//!
//! [`ENV_OVERRIDES`] is the one table of environment variables that override keys after the
//! file is read.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// `[node]`.
    pub node: NodeConfig,
    /// `[network]`.
    pub network: NetworkConfig,
    /// `[storage]`.
    pub storage: StorageConfig,
    /// `[queue]`.
    pub queue: QueueConfig,
    /// `[security]`.
    pub security: SecurityConfig,
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[shutdown]`.
    pub shutdown: ShutdownConfig,
    /// `[tiering]`: present = sealed segments are uploaded to an S3-compatible bucket
    /// (docs/tiering.md). Absent (the default), nothing is uploaded and nothing changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tiering: Option<TieringConfig>,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("log format {other:?}: use text or json")),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// `[node]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Node ID, 1..=65,535 (high bits of every message ID).
    pub id: u32,
    /// Address advertised to clients (`/lookup`, `/nodes`, `/info`).
    pub broadcast_address: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: 1,
            broadcast_address: "127.0.0.1".into(),
        }
    }
}

/// `[network]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// NSQ V2 TCP listener.
    pub tcp_address: String,
    /// HTTP listener.
    pub http_address: String,
    /// HTTPS listener (the HTTP API over TLS; needs `[security.tls]`), as nsqd's
    /// `--https-address`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_address: Option<String>,
    /// Kodo cleanup listener (rejected: the feature is disabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kodo_http_address: Option<String>,
    /// TCP port advertised in lookup answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_tcp_port: Option<u16>,
    /// HTTP port advertised in lookup answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_http_port: Option<u16>,
    /// Offer Snappy in IDENTIFY.
    pub snappy_enabled: bool,
    /// Offer Deflate in IDENTIFY.
    pub deflate_enabled: bool,
    /// Highest deflate level, 1..=9.
    pub max_deflate_level: u32,
    /// nsqlookupd TCP addresses (`host:port`) to register with, as nsqd's
    /// `--lookupd-tcp-address`; empty registers nowhere.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lookupd_tcp_addresses: Vec<String>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            tcp_address: "0.0.0.0:4150".into(),
            http_address: "0.0.0.0:4151".into(),
            https_address: None,
            kodo_http_address: None,
            advertised_tcp_port: None,
            advertised_http_port: None,
            snappy_enabled: true,
            deflate_enabled: true,
            max_deflate_level: 6,
            lookupd_tcp_addresses: Vec::new(),
        }
    }
}

/// `[storage]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Data directory.
    pub data_path: PathBuf,
    /// Storage feature level (1, 2 or 3; 3 is needed for local retention).
    pub feature_level: u8,
    /// Segment size.
    pub max_segment_bytes: u64,
    /// Scrub period.
    pub scrub_interval_seconds: u64,
    /// Scrub read rate.
    pub scrub_bytes_per_second: u64,
    /// Payload cache.
    pub entry_cache_bytes: u64,
    /// Metadata cache.
    pub message_index_cache_bytes: u64,
    /// 0 = auto.
    pub payload_read_workers: u32,
    /// Read queue depth.
    pub payload_read_queue: u32,
    /// Delay before GC/scrub start.
    pub maintenance_startup_delay_seconds: u64,
    /// Disk pressure on.
    pub disk_high_watermark_percent: u8,
    /// Disk pressure off.
    pub disk_low_watermark_percent: u8,
    /// Minimum free bytes.
    pub min_free_bytes: u64,
    /// Evict under pressure.
    pub protective_eviction_enabled: bool,
    /// Pressure grace.
    pub disk_pressure_grace_seconds: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_path: PathBuf::from("data"),
            feature_level: 1,
            max_segment_bytes: 104_857_600,
            scrub_interval_seconds: 3_600,
            scrub_bytes_per_second: 67_108_864,
            entry_cache_bytes: 67_108_864,
            message_index_cache_bytes: 67_108_864,
            payload_read_workers: 0,
            payload_read_queue: 4_096,
            maintenance_startup_delay_seconds: 30,
            disk_high_watermark_percent: 85,
            disk_low_watermark_percent: 75,
            min_free_bytes: 10_737_418_240,
            protective_eviction_enabled: false,
            disk_pressure_grace_seconds: 60,
        }
    }
}

/// `[queue]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Largest message.
    pub max_message_bytes: u64,
    /// Default in-flight timeout.
    pub message_timeout_ms: u64,
    /// Largest in-flight timeout a client may ask for.
    pub max_message_timeout_ms: u64,
    /// Largest DPUB defer / REQ delay / HTTP defer.
    pub max_defer_ms: u64,
    /// Sparse ACK window.
    pub max_ack_gap: u64,
    /// Durable topic limit.
    pub max_topics: usize,
    /// Publish workers.
    pub max_publish_workers: u32,
    /// Worker retirement.
    pub publish_worker_idle_seconds: u64,
    /// `durable`, `write_ack` or `nsq_relaxed`.
    pub publish_ack_mode: String,
    /// Relaxed sync batch (messages).
    pub relaxed_sync_messages: u64,
    /// Relaxed sync batch (bytes).
    pub relaxed_sync_bytes: u64,
    /// Relaxed sync interval.
    pub relaxed_sync_interval_ms: u64,
    /// Unrouted retention.
    pub bootstrap_retention_seconds: u64,
    /// 0 = off.
    pub message_retention_seconds: u64,
    /// Dead-letter threshold.
    pub max_delivery_attempts: u16,
    /// Dead-letter topic suffix.
    pub dead_letter_suffix: String,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: 20_971_520,
            message_timeout_ms: 60_000,
            max_message_timeout_ms: 900_000,
            max_defer_ms: 3_600_000,
            max_ack_gap: 65_536,
            max_topics: 10_000,
            max_publish_workers: 1_024,
            publish_worker_idle_seconds: 60,
            publish_ack_mode: "durable".into(),
            relaxed_sync_messages: 2_500,
            relaxed_sync_bytes: 8_388_608,
            relaxed_sync_interval_ms: 10,
            bootstrap_retention_seconds: 90,
            message_retention_seconds: 0,
            max_delivery_attempts: 16,
            dead_letter_suffix: ".DLQ".into(),
        }
    }
}

/// `[security.tls]`: present = TLS offered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub certificate_file: PathBuf,
    /// PEM private key.
    pub private_key_file: PathBuf,
    /// PEM CA bundle for client certificates (mTLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
    /// Reject clients without a certificate signed by `client_ca_file`.
    pub require_client_certificate: bool,
    /// Refuse every command (but IDENTIFY) on connections that did not upgrade to TLS.
    pub required: bool,
    /// Lowest TLS version accepted: `tls1.2` (unset) or `tls1.3`, as nsqd's
    /// `--tls-min-version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_version: Option<String>,
}

/// `[security]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// TLS, if configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// nsqd-style auth servers (`host:port` or URLs); empty = AUTH disabled.
    pub auth_http_addresses: Vec<String>,
    /// Token for admin endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// Token for `/pub` and `/mpub`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish_token_file: Option<PathBuf>,
    /// Token for registry endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_token_file: Option<PathBuf>,
    /// Token for console endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_token_file: Option<PathBuf>,
    /// Token for Kodo cleanup (feature disabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kodo_cleanup_token_file: Option<PathBuf>,
    /// Native management API.
    pub console_management_enabled: bool,
    /// Always rejected when true.
    pub kodo_cleanup_enabled: bool,
}

/// `[limits]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest MPUB / HTTP body.
    pub max_body_bytes: u64,
    /// Node publish budget.
    pub node_publish_inflight_bytes: u64,
    /// Per-connection publish budget.
    pub connection_publish_inflight_bytes: u64,
    /// Node delivery budget.
    pub node_delivery_inflight_bytes: u64,
    /// Per-connection delivery budget.
    pub connection_delivery_inflight_bytes: u64,
    /// Largest RDY.
    pub max_rdy_count: u64,
    /// Concurrent TCP connections.
    pub max_connections: usize,
    /// Consumers one channel accepts (nsqd's `--max-channel-consumers`); 0 = no limit.
    pub max_channel_consumers: usize,
    /// Magic + first command deadline.
    pub client_handshake_timeout_ms: u64,
    /// Deadline for a started command line + body.
    pub tcp_command_timeout_ms: u64,
    /// Default heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Largest heartbeat a client may ask for.
    pub max_heartbeat_interval_ms: u64,
    /// Default output buffer.
    pub output_buffer_size: u64,
    /// Largest output buffer.
    pub max_output_buffer_size: u64,
    /// Default output buffer timeout.
    pub output_buffer_timeout_ms: u64,
    /// Smallest output buffer timeout.
    pub min_output_buffer_timeout_ms: u64,
    /// Largest output buffer timeout.
    pub max_output_buffer_timeout_ms: u64,
    /// Largest auth server response.
    pub auth_response_bytes: u64,
    /// Auth request timeout.
    pub auth_timeout_ms: u64,
    /// TTL cap.
    pub auth_max_ttl_seconds: u64,
    /// Auth cache entries.
    pub auth_cache_max_entries: usize,
    /// Auth memory budget.
    pub auth_memory_bytes: u64,
    /// HTTP body read timeout.
    pub http_body_timeout_ms: u64,
    /// Close instead of sending retriable publish errors.
    pub disconnect_on_retriable_publish_error: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 67_108_864,
            node_publish_inflight_bytes: 536_870_912,
            connection_publish_inflight_bytes: 83_886_080,
            node_delivery_inflight_bytes: 536_870_912,
            connection_delivery_inflight_bytes: 33_554_432,
            max_rdy_count: 2_500,
            max_connections: 10_000,
            max_channel_consumers: 0,
            client_handshake_timeout_ms: 5_000,
            tcp_command_timeout_ms: 30_000,
            heartbeat_interval_ms: 30_000,
            max_heartbeat_interval_ms: 60_000,
            output_buffer_size: 16_384,
            max_output_buffer_size: 65_536,
            output_buffer_timeout_ms: 250,
            min_output_buffer_timeout_ms: 25,
            max_output_buffer_timeout_ms: 30_000,
            auth_response_bytes: 1_048_576,
            auth_timeout_ms: 5_000,
            auth_max_ttl_seconds: 3_600,
            auth_cache_max_entries: 10_000,
            auth_memory_bytes: 268_435_456,
            http_body_timeout_ms: 30_000,
            disconnect_on_retriable_publish_error: false,
        }
    }
}

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Per-topic/channel series.
    pub detailed_queue_metrics: bool,
    /// Series budget.
    pub max_detailed_series: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            detailed_queue_metrics: false,
            max_detailed_series: 1_000,
        }
    }
}

/// `[shutdown]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Time sessions get to finish on SIGTERM.
    pub grace_seconds: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { grace_seconds: 30 }
    }
}

/// `[tiering]`: where sealed segments are uploaded, and when (docs/tiering.md).
///
/// The credentials come from `access_key_file` and `secret_key_file` (both or neither), or
/// else from the standard `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` environment variables;
/// the secret itself is never a key of this file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TieringConfig {
    /// The bucket's name; it must exist (the broker never creates buckets).
    pub bucket: String,
    /// The S3 endpoint, `https://host:port` (path-style requests).
    pub endpoint: String,
    /// The region requests are signed for.
    pub region: String,
    /// Keys are stored under this prefix (`cluster-a`), or at the bucket's root when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Accept a plain `http://` endpoint (a test server on loopback); off, only `https://`.
    pub allow_http: bool,
    /// File holding the access key id (trailing whitespace ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_key_file: Option<PathBuf>,
    /// File holding the secret access key (trailing whitespace ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_file: Option<PathBuf>,
    /// Seconds a sealed segment waits before it is uploaded; 0 = at once.
    pub upload_after_seconds: u64,
    /// Seconds between uploads of the topics' checkpoints (head, channels, uploaded segments)
    /// and the node's catalog, which `storage restore --from-bucket` rebuilds a lost volume
    /// from; 1 to 86,400.
    pub checkpoint_upload_seconds: u64,
    /// Local retention by space: the most bytes of sealed segment files (`.rqlog`) the broker
    /// keeps on its volume over all its topics; above it, the oldest uploaded segments' local
    /// copies are removed (read from the bucket since). Unset: every local copy is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_retention_bytes: Option<u64>,
    /// Local retention by age: an uploaded segment whose newest message is older than this
    /// many seconds loses its local copy; 1 to 315,360,000. Unset: no age limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_retention_seconds: Option<u64>,
}

impl Default for TieringConfig {
    fn default() -> Self {
        Self {
            bucket: String::new(),
            endpoint: String::new(),
            region: "us-east-1".into(),
            prefix: None,
            allow_http: false,
            access_key_file: None,
            secret_key_file: None,
            upload_after_seconds: 0,
            checkpoint_upload_seconds: DEFAULT_CHECKPOINT_UPLOAD_SECONDS,
            local_retention_bytes: None,
            local_retention_seconds: None,
        }
    }
}

/// The default `tiering.checkpoint_upload_seconds`.
pub const DEFAULT_CHECKPOINT_UPLOAD_SECONDS: u64 = 60;
/// The largest `tiering.checkpoint_upload_seconds` (a day).
pub const MAX_CHECKPOINT_UPLOAD_SECONDS: u64 = 86_400;

/// The environment variable holding the bucket's access key id when `[tiering]` names no
/// `access_key_file` (the standard S3 one).
pub const TIERING_ACCESS_KEY_ENV: &str = "AWS_ACCESS_KEY_ID";
/// The environment variable holding the secret when `[tiering]` names no `secret_key_file`.
pub const TIERING_SECRET_KEY_ENV: &str = "AWS_SECRET_ACCESS_KEY";

/// An environment variable that overrides one key of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvOverride {
    /// The variable, e.g. `RUSTQUEUE_DATA_PATH`.
    pub var: &'static str,
    /// The dotted key it sets, e.g. `storage.data_path`.
    pub key: &'static str,
}

/// Keys holding a list: an environment override of one takes comma-separated values.
pub const LIST_KEYS: &[&str] = &["network.lookupd_tcp_addresses"];

/// Every environment override, applied after the file in this order. A value is taken as the
/// key's type: numbers and booleans are trimmed and parsed, strings taken as they are, lists
/// ([`LIST_KEYS`]) split at commas. Without
/// `RUSTQUEUE_NODE_ID`, a `POD_NAME` ending in `-<ordinal>` gives `node.id = ordinal + 1`
/// (StatefulSet pods).
pub const ENV_OVERRIDES: &[EnvOverride] = &[
    EnvOverride {
        var: "RUSTQUEUE_NODE_ID",
        key: "node.id",
    },
    EnvOverride {
        var: "RUSTQUEUE_BROADCAST_ADDRESS",
        key: "node.broadcast_address",
    },
    EnvOverride {
        var: "RUSTQUEUE_TCP_ADDRESS",
        key: "network.tcp_address",
    },
    EnvOverride {
        var: "RUSTQUEUE_HTTP_ADDRESS",
        key: "network.http_address",
    },
    EnvOverride {
        var: "RUSTQUEUE_HTTPS_ADDRESS",
        key: "network.https_address",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_CHANNEL_CONSUMERS",
        key: "limits.max_channel_consumers",
    },
    EnvOverride {
        var: "RUSTQUEUE_LOOKUPD_TCP_ADDRESSES",
        key: "network.lookupd_tcp_addresses",
    },
    EnvOverride {
        var: "RUSTQUEUE_KODO_HTTP_ADDRESS",
        key: "network.kodo_http_address",
    },
    EnvOverride {
        var: "RUSTQUEUE_DATA_PATH",
        key: "storage.data_path",
    },
    EnvOverride {
        var: "RUSTQUEUE_STORAGE_FEATURE_LEVEL",
        key: "storage.feature_level",
    },
    EnvOverride {
        var: "RUSTQUEUE_SCRUB_BYTES_PER_SECOND",
        key: "storage.scrub_bytes_per_second",
    },
    EnvOverride {
        var: "RUSTQUEUE_MESSAGE_INDEX_CACHE_BYTES",
        key: "storage.message_index_cache_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAINTENANCE_STARTUP_DELAY_SECONDS",
        key: "storage.maintenance_startup_delay_seconds",
    },
    EnvOverride {
        var: "RUSTQUEUE_PROTECTIVE_EVICTION_ENABLED",
        key: "storage.protective_eviction_enabled",
    },
    EnvOverride {
        var: "RUSTQUEUE_DISK_PRESSURE_GRACE_SECONDS",
        key: "storage.disk_pressure_grace_seconds",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_MESSAGE_BYTES",
        key: "queue.max_message_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_BOOTSTRAP_RETENTION_SECONDS",
        key: "queue.bootstrap_retention_seconds",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_TOPICS",
        key: "queue.max_topics",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_PUBLISH_WORKERS",
        key: "queue.max_publish_workers",
    },
    EnvOverride {
        var: "RUSTQUEUE_PUBLISH_WORKER_IDLE_SECONDS",
        key: "queue.publish_worker_idle_seconds",
    },
    EnvOverride {
        var: "RUSTQUEUE_PUBLISH_ACK_MODE",
        key: "queue.publish_ack_mode",
    },
    EnvOverride {
        var: "RUSTQUEUE_RELAXED_SYNC_MESSAGES",
        key: "queue.relaxed_sync_messages",
    },
    EnvOverride {
        var: "RUSTQUEUE_RELAXED_SYNC_BYTES",
        key: "queue.relaxed_sync_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_RELAXED_SYNC_INTERVAL_MS",
        key: "queue.relaxed_sync_interval_ms",
    },
    EnvOverride {
        var: "RUSTQUEUE_MESSAGE_RETENTION_SECONDS",
        key: "queue.message_retention_seconds",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_DELIVERY_ATTEMPTS",
        key: "queue.max_delivery_attempts",
    },
    EnvOverride {
        var: "RUSTQUEUE_DEAD_LETTER_SUFFIX",
        key: "queue.dead_letter_suffix",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_BODY_BYTES",
        key: "limits.max_body_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_HTTP_BODY_TIMEOUT_MS",
        key: "limits.http_body_timeout_ms",
    },
    EnvOverride {
        var: "RUSTQUEUE_TCP_COMMAND_TIMEOUT_MS",
        key: "limits.tcp_command_timeout_ms",
    },
    EnvOverride {
        var: "RUSTQUEUE_DISCONNECT_ON_RETRIABLE_PUBLISH_ERROR",
        key: "limits.disconnect_on_retriable_publish_error",
    },
    EnvOverride {
        var: "RUSTQUEUE_NODE_PUBLISH_INFLIGHT_BYTES",
        key: "limits.node_publish_inflight_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_CONNECTION_PUBLISH_INFLIGHT_BYTES",
        key: "limits.connection_publish_inflight_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_NODE_DELIVERY_INFLIGHT_BYTES",
        key: "limits.node_delivery_inflight_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_CONNECTION_DELIVERY_INFLIGHT_BYTES",
        key: "limits.connection_delivery_inflight_bytes",
    },
    EnvOverride {
        var: "RUSTQUEUE_DETAILED_QUEUE_METRICS",
        key: "metrics.detailed_queue_metrics",
    },
    EnvOverride {
        var: "RUSTQUEUE_MAX_DETAILED_METRIC_SERIES",
        key: "metrics.max_detailed_series",
    },
    EnvOverride {
        var: "RUSTQUEUE_LOG_FORMAT",
        key: "log_format",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_survive_a_round_trip() {
        let cfg = BrokerConfig::default();
        let json = serde_json::to_value(&cfg).unwrap();
        let back: BrokerConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn every_override_names_an_existing_key_once() {
        let mut vars = std::collections::BTreeSet::new();
        for o in ENV_OVERRIDES {
            assert!(vars.insert(o.var), "{} listed twice", o.var);
            // Set the key (an unset optional one to a string) and parse: an unknown key is
            // rejected by `deny_unknown_fields`.
            let mut doc = serde_json::to_value(BrokerConfig::default()).unwrap();
            let (path, last) = o.key.rsplit_once('.').unwrap_or(("", o.key));
            let table = path
                .split('.')
                .filter(|p| !p.is_empty())
                .fold(&mut doc, |at, p| {
                    at.get_mut(p)
                        .unwrap_or_else(|| panic!("{} names no table {p}", o.var))
                })
                .as_object_mut()
                .unwrap();
            let value = table.get(last).cloned().unwrap_or_else(|| {
                if LIST_KEYS.contains(&o.key) {
                    serde_json::json!(["x"])
                } else {
                    serde_json::Value::from("x")
                }
            });
            table.insert(last.to_owned(), value);
            if let Err(e) = serde_json::from_value::<BrokerConfig>(doc) {
                panic!("{} names no key {}: {e}", o.var, o.key);
            }
        }
    }
}
