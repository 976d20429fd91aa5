//! Environment overrides (docs/configuration.md, "Environment variables"), applied after the file.

use std::str::FromStr;

use super::{Config, ConfigError, LogFormat};

fn parse<T: FromStr>(name: &'static str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse::<T>().map_err(|e| ConfigError::Env {
        name,
        value: value.to_owned(),
        reason: e.to_string(),
    })
}

/// Applies every `RUSTQUEUE_*` override present in `env`.
pub fn apply_env(
    cfg: &mut Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    macro_rules! set {
        ($name:literal, $field:expr) => {
            if let Some(v) = env($name) {
                $field = parse($name, &v)?;
            }
        };
    }
    if let Some(v) = env("RUSTQUEUE_NODE_ID") {
        cfg.node.id = parse("RUSTQUEUE_NODE_ID", &v)?;
    } else if let Some(ordinal) = env("POD_NAME").and_then(|pod| {
        pod.rsplit_once('-')
            .and_then(|(_, o)| o.parse::<u32>().ok())
    }) {
        cfg.node.id = ordinal + 1;
    }
    if let Some(v) = env("RUSTQUEUE_BROADCAST_ADDRESS") {
        cfg.node.broadcast_address = v;
    }
    if let Some(v) = env("RUSTQUEUE_TCP_ADDRESS") {
        cfg.network.tcp_address = v;
    }
    if let Some(v) = env("RUSTQUEUE_HTTP_ADDRESS") {
        cfg.network.http_address = v;
    }
    if let Some(v) = env("RUSTQUEUE_KODO_HTTP_ADDRESS") {
        cfg.network.kodo_http_address = Some(v);
    }
    if let Some(v) = env("RUSTQUEUE_DATA_PATH") {
        cfg.storage.data_path = v.into();
    }
    set!("RUSTQUEUE_STORAGE_FEATURE_LEVEL", cfg.storage.feature_level);
    set!(
        "RUSTQUEUE_SCRUB_BYTES_PER_SECOND",
        cfg.storage.scrub_bytes_per_second
    );
    set!(
        "RUSTQUEUE_MESSAGE_INDEX_CACHE_BYTES",
        cfg.storage.message_index_cache_bytes
    );
    set!(
        "RUSTQUEUE_MAINTENANCE_STARTUP_DELAY_SECONDS",
        cfg.storage.maintenance_startup_delay_seconds
    );
    set!(
        "RUSTQUEUE_PROTECTIVE_EVICTION_ENABLED",
        cfg.storage.protective_eviction_enabled
    );
    set!(
        "RUSTQUEUE_DISK_PRESSURE_GRACE_SECONDS",
        cfg.storage.disk_pressure_grace_seconds
    );
    set!("RUSTQUEUE_MAX_MESSAGE_BYTES", cfg.queue.max_message_bytes);
    set!(
        "RUSTQUEUE_BOOTSTRAP_RETENTION_SECONDS",
        cfg.queue.bootstrap_retention_seconds
    );
    set!("RUSTQUEUE_MAX_TOPICS", cfg.queue.max_topics);
    set!(
        "RUSTQUEUE_MAX_PUBLISH_WORKERS",
        cfg.queue.max_publish_workers
    );
    set!(
        "RUSTQUEUE_PUBLISH_WORKER_IDLE_SECONDS",
        cfg.queue.publish_worker_idle_seconds
    );
    if let Some(v) = env("RUSTQUEUE_PUBLISH_ACK_MODE") {
        cfg.queue.publish_ack_mode = v;
    }
    set!(
        "RUSTQUEUE_RELAXED_SYNC_MESSAGES",
        cfg.queue.relaxed_sync_messages
    );
    set!("RUSTQUEUE_RELAXED_SYNC_BYTES", cfg.queue.relaxed_sync_bytes);
    set!(
        "RUSTQUEUE_RELAXED_SYNC_INTERVAL_MS",
        cfg.queue.relaxed_sync_interval_ms
    );
    set!(
        "RUSTQUEUE_MESSAGE_RETENTION_SECONDS",
        cfg.queue.message_retention_seconds
    );
    set!(
        "RUSTQUEUE_MAX_DELIVERY_ATTEMPTS",
        cfg.queue.max_delivery_attempts
    );
    if let Some(v) = env("RUSTQUEUE_DEAD_LETTER_SUFFIX") {
        cfg.queue.dead_letter_suffix = v;
    }
    set!("RUSTQUEUE_MAX_BODY_BYTES", cfg.limits.max_body_bytes);
    set!(
        "RUSTQUEUE_HTTP_BODY_TIMEOUT_MS",
        cfg.limits.http_body_timeout_ms
    );
    set!(
        "RUSTQUEUE_TCP_COMMAND_TIMEOUT_MS",
        cfg.limits.tcp_command_timeout_ms
    );
    set!(
        "RUSTQUEUE_DISCONNECT_ON_RETRIABLE_PUBLISH_ERROR",
        cfg.limits.disconnect_on_retriable_publish_error
    );
    set!(
        "RUSTQUEUE_NODE_PUBLISH_INFLIGHT_BYTES",
        cfg.limits.node_publish_inflight_bytes
    );
    set!(
        "RUSTQUEUE_CONNECTION_PUBLISH_INFLIGHT_BYTES",
        cfg.limits.connection_publish_inflight_bytes
    );
    set!(
        "RUSTQUEUE_NODE_DELIVERY_INFLIGHT_BYTES",
        cfg.limits.node_delivery_inflight_bytes
    );
    set!(
        "RUSTQUEUE_CONNECTION_DELIVERY_INFLIGHT_BYTES",
        cfg.limits.connection_delivery_inflight_bytes
    );
    set!(
        "RUSTQUEUE_DETAILED_QUEUE_METRICS",
        cfg.metrics.detailed_queue_metrics
    );
    set!(
        "RUSTQUEUE_MAX_DETAILED_METRIC_SERIES",
        cfg.metrics.max_detailed_series
    );
    if let Some(v) = env("RUSTQUEUE_LOG_FORMAT") {
        cfg.log_format = match v.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => {
                return Err(ConfigError::Env {
                    name: "RUSTQUEUE_LOG_FORMAT",
                    value: v,
                    reason: "expected text or json".into(),
                });
            }
        };
    }
    Ok(())
}
