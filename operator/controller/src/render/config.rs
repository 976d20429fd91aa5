//! The broker ConfigMap: `rustqueue.toml` with the keys of spec/broker.md §8.2, derived from
//! the spec (spec/operator.md §3). Listener addresses, node identity and the data path come
//! from the Pod's environment instead, because they differ per Pod.

use k8s_openapi::api::core::v1::ConfigMap;
use rustqueue_api::crd::{MAX_MESSAGE_BYTES_CEILING, RustQueueSpec};
use rustqueue_api::labels;
use toml::{Table, Value};

use super::{BrokerInputs, Owner, names, typed};

const MIB: u64 = 1024 * 1024;

/// Byte limits after raising them to what the stored data may need (spec/operator.md §2.3.1):
/// a connection must be able to deliver the largest message that may be on disk, and a node
/// must be able to serve two such connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Storage feature level to run at: max(spec, status floor, 1).
    pub feature_level: u32,
    /// Per-connection delivery budget.
    pub connection_delivery_inflight_bytes: u64,
    /// Per-node delivery budget.
    pub node_delivery_inflight_bytes: u64,
    /// Largest publish body.
    pub max_body_bytes: u64,
    /// Segment size.
    pub max_segment_bytes: u64,
    /// Per-node publish budget.
    pub node_publish_inflight_bytes: u64,
    /// Per-connection publish budget.
    pub connection_publish_inflight_bytes: u64,
}

impl EffectiveLimits {
    /// Compute the limits for `spec` given the status floor of the feature level.
    pub fn new(spec: &RustQueueSpec, feature_level_floor: u32) -> Self {
        let feature_level = spec.storage_feature_level.max(feature_level_floor).max(1);
        let deliverable = if feature_level >= 2 {
            MAX_MESSAGE_BYTES_CEILING
        } else {
            spec.max_message_bytes
        };
        let connection = spec.connection_delivery_inflight_bytes.max(deliverable);
        let node = spec.node_delivery_inflight_bytes.max(2 * connection);
        let large = spec.kodo_compatibility.enabled || spec.max_message_bytes > 64 * MIB;
        Self {
            feature_level,
            connection_delivery_inflight_bytes: connection,
            node_delivery_inflight_bytes: node,
            max_body_bytes: if spec.kodo_compatibility.enabled {
                128 * MIB
            } else {
                spec.max_message_bytes.max(64 * MIB)
            },
            max_segment_bytes: if large { 256 * MIB } else { 100 * MIB },
            node_publish_inflight_bytes: if large { 1024 * MIB } else { 512 * MIB },
            connection_publish_inflight_bytes: if large { 160 * MIB } else { 80 * MIB },
        }
    }
}

fn int(v: u64) -> Value {
    Value::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

fn token_file(scope: &str) -> Value {
    Value::String(format!("{}/{scope}", labels::SECRETS_DIR))
}

/// The broker TOML for `spec`.
pub fn broker_toml(owner: &Owner<'_>, spec: &RustQueueSpec, inputs: &BrokerInputs) -> String {
    let lim = EffectiveLimits::new(spec, inputs.feature_level_floor);
    let mut storage = Table::new();
    storage.insert("data_path".into(), labels::DATA_PATH.into());
    storage.insert("feature_level".into(), int(lim.feature_level.into()));
    storage.insert("max_segment_bytes".into(), int(lim.max_segment_bytes));
    storage.insert("min_free_bytes".into(), int(spec.min_free_bytes));
    storage.insert(
        "disk_high_watermark_percent".into(),
        int(spec.disk_high_watermark_percent.into()),
    );
    storage.insert(
        "disk_low_watermark_percent".into(),
        int(spec.disk_low_watermark_percent.into()),
    );
    storage.insert(
        "protective_eviction_enabled".into(),
        spec.protective_eviction_enabled.into(),
    );
    storage.insert(
        "disk_pressure_grace_seconds".into(),
        int(spec.disk_pressure_grace_seconds),
    );
    storage.insert(
        "maintenance_startup_delay_seconds".into(),
        int(spec.maintenance_startup_delay_seconds),
    );

    let mut queue = Table::new();
    queue.insert(
        "bootstrap_retention_seconds".into(),
        int(spec.bootstrap_retention_seconds),
    );
    queue.insert("max_message_bytes".into(), int(spec.max_message_bytes));
    queue.insert("max_topics".into(), int(spec.max_topics));
    queue.insert("max_publish_workers".into(), int(spec.max_publish_workers));
    queue.insert(
        "publish_worker_idle_seconds".into(),
        int(spec.publish_worker_idle_seconds),
    );
    queue.insert(
        "publish_ack_mode".into(),
        spec.publish_ack_mode.as_str().into(),
    );
    queue.insert(
        "relaxed_sync_messages".into(),
        int(spec.relaxed_sync_messages),
    );
    queue.insert("relaxed_sync_bytes".into(), int(spec.relaxed_sync_bytes));
    queue.insert(
        "relaxed_sync_interval_ms".into(),
        int(spec.relaxed_sync_interval_ms),
    );

    let mut limits = Table::new();
    limits.insert("max_body_bytes".into(), int(lim.max_body_bytes));
    limits.insert(
        "node_publish_inflight_bytes".into(),
        int(lim.node_publish_inflight_bytes),
    );
    limits.insert(
        "connection_publish_inflight_bytes".into(),
        int(lim.connection_publish_inflight_bytes),
    );
    limits.insert(
        "node_delivery_inflight_bytes".into(),
        int(lim.node_delivery_inflight_bytes),
    );
    limits.insert(
        "connection_delivery_inflight_bytes".into(),
        int(lim.connection_delivery_inflight_bytes),
    );
    limits.insert("disconnect_on_retriable_publish_error".into(), false.into());

    let mut metrics = Table::new();
    metrics.insert(
        "detailed_queue_metrics".into(),
        spec.detailed_queue_metrics.into(),
    );
    metrics.insert(
        "max_detailed_series".into(),
        int(spec.max_detailed_metric_series),
    );

    let mut security = Table::new();
    security.insert("admin_token_file".into(), token_file("admin-token"));
    if spec.kodo_compatibility.enabled {
        // Only the Gateways (holding the admin token) may publish over HTTP in Kodo mode.
        security.insert("publish_token_file".into(), token_file("admin-token"));
    }
    security.insert("registry_token_file".into(), token_file("registry-token"));
    security.insert("console_token_file".into(), token_file("console-token"));
    security.insert(
        "console_management_enabled".into(),
        spec.console_management_enabled.into(),
    );
    security.insert("kodo_cleanup_enabled".into(), false.into());
    if spec.client_tls_secret_name.is_some() {
        let mut tls = Table::new();
        tls.insert(
            "certificate_file".into(),
            "/run/tls/rustqueue/tls.crt".into(),
        );
        tls.insert(
            "private_key_file".into(),
            "/run/tls/rustqueue/tls.key".into(),
        );
        tls.insert("client_ca_file".into(), "/run/tls/rustqueue/ca.crt".into());
        tls.insert("require_client_certificate".into(), false.into());
        tls.insert("required".into(), false.into());
        security.insert("tls".into(), Value::Table(tls));
    }

    let mut root = Table::new();
    root.insert("log_format".into(), "json".into());
    root.insert("storage".into(), Value::Table(storage));
    root.insert("queue".into(), Value::Table(queue));
    root.insert("limits".into(), Value::Table(limits));
    root.insert("metrics".into(), Value::Table(metrics));
    root.insert("security".into(), Value::Table(security));
    let body = toml::to_string(&root).expect("a TOML table serializes");
    format!(
        "# Rendered by rustqueue-operator for RustQueue {}/{}; edits are overwritten.\n\
         # Tokens come from Secret {}.\n{body}",
        owner.namespace, owner.name, inputs.auth_secret_name
    )
}

/// The `<n>-config` ConfigMap holding `rustqueue.toml`.
pub fn config_map(owner: &Owner<'_>, toml: &str) -> ConfigMap {
    typed(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owner.metadata(&names::config_map(owner.name, toml), labels::COMPONENT_BROKER),
        "data": { labels::CONFIG_FILE: toml },
    }))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn parsed(spec: &RustQueueSpec, floor: u32) -> Table {
        let mut i = inputs();
        i.feature_level_floor = floor;
        broker_toml(&owner(), spec, &i).parse().unwrap()
    }

    #[test]
    fn default_spec_renders_the_documented_broker_keys() {
        let t = parsed(&spec(), 1);
        assert_eq!(t["storage"]["data_path"].as_str(), Some("/data"));
        assert_eq!(t["storage"]["feature_level"].as_integer(), Some(1));
        assert_eq!(
            t["storage"]["max_segment_bytes"].as_integer(),
            Some(104_857_600)
        );
        assert_eq!(
            t["storage"]["min_free_bytes"].as_integer(),
            Some(10_737_418_240)
        );
        assert_eq!(
            t["storage"]["disk_high_watermark_percent"].as_integer(),
            Some(85)
        );
        assert_eq!(
            t["queue"]["max_message_bytes"].as_integer(),
            Some(20_971_520)
        );
        assert_eq!(t["queue"]["publish_ack_mode"].as_str(), Some("durable"));
        assert_eq!(t["limits"]["max_body_bytes"].as_integer(), Some(67_108_864));
        assert_eq!(
            t["limits"]["connection_delivery_inflight_bytes"].as_integer(),
            Some(33_554_432)
        );
        assert_eq!(
            t["limits"]["node_delivery_inflight_bytes"].as_integer(),
            Some(536_870_912)
        );
        assert_eq!(
            t["security"]["registry_token_file"].as_str(),
            Some("/run/secrets/rustqueue/registry-token")
        );
        assert!(
            t["security"].get("publish_token_file").is_none(),
            "HTTP publish is open"
        );
        assert!(t["security"].get("tls").is_none());
        assert_eq!(t["metrics"]["max_detailed_series"].as_integer(), Some(1000));
    }

    #[test]
    fn limits_are_raised_to_deliver_the_largest_storable_message() {
        let mut s = spec();
        s.storage_feature_level = 2;
        let lim = EffectiveLimits::new(&s, 1);
        assert_eq!(lim.connection_delivery_inflight_bytes, 100 * MIB);
        assert_eq!(
            lim.node_delivery_inflight_bytes,
            512 * MIB,
            "2x100 MiB < 512 MiB"
        );
        let mut s = spec();
        s.max_message_bytes = 80 * MIB;
        s.storage_feature_level = 2;
        let lim = EffectiveLimits::new(&s, 1);
        assert_eq!(lim.max_body_bytes, 80 * MIB);
        assert_eq!(lim.max_segment_bytes, 256 * MIB);
        assert_eq!(lim.node_publish_inflight_bytes, 1024 * MIB);
        assert_eq!(lim.connection_publish_inflight_bytes, 160 * MIB);
    }

    #[test]
    fn the_feature_level_never_drops_below_the_status_floor() {
        assert_eq!(
            parsed(&spec(), 2)["storage"]["feature_level"].as_integer(),
            Some(2)
        );
    }

    #[test]
    fn client_tls_adds_the_tls_table_and_kodo_locks_http_publish() {
        let mut s = spec();
        s.client_tls_secret_name = Some("tls".into());
        s.kodo_compatibility.enabled = true;
        let t = parsed(&s, 1);
        assert_eq!(
            t["security"]["tls"]["certificate_file"].as_str(),
            Some("/run/tls/rustqueue/tls.crt")
        );
        assert_eq!(
            t["security"]["publish_token_file"].as_str(),
            Some("/run/secrets/rustqueue/admin-token")
        );
        assert_eq!(
            t["limits"]["max_body_bytes"].as_integer(),
            Some(134_217_728)
        );
    }

    #[test]
    fn config_map_holds_the_toml_under_its_file_name() {
        let cm = config_map(&owner(), "x = 1\n");
        let name = cm.metadata.name.clone().unwrap();
        assert!(name.starts_with("queue-config-") && name.len() == "queue-config-".len() + 10);
        assert_ne!(
            config_map(&owner(), "x = 2\n").metadata.name,
            Some(name),
            "one per config"
        );
        assert_eq!(cm.data.unwrap()["rustqueue.toml"], "x = 1\n");
    }
}
