//! The broker ConfigMap: `rustqueue.toml` in the broker's own schema
//! ([`rustqueue_api::broker_config`], every key in docs/configuration.md), derived from the
//! spec. Listener addresses and node identity come from the Pod's environment instead, because
//! they differ per Pod.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use rustqueue_api::broker_config::{BrokerConfig, LogFormat, TieringConfig, TlsConfig};
use rustqueue_api::crd::{MAX_MESSAGE_BYTES_CEILING, RustQueueSpec, Tiering};
use rustqueue_api::labels;

use super::{BrokerInputs, Owner, names};

const MIB: u64 = 1024 * 1024;

/// Byte limits after raising them to what the stored data may need (docs/operator.md): a
/// connection must be able to deliver the largest message that may be on disk, and a node
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

fn token_file(scope: &str) -> Option<PathBuf> {
    Some(PathBuf::from(format!("{}/{scope}", labels::SECRETS_DIR)))
}

/// The broker configuration for `spec`, as the one schema `rustqueued` reads
/// ([`BrokerConfig`]): every key the spec does not set keeps the broker's default.
pub fn broker_config(spec: &RustQueueSpec, inputs: &BrokerInputs) -> BrokerConfig {
    let lim = EffectiveLimits::new(spec, inputs.feature_level_floor);
    let mut c = BrokerConfig {
        log_format: LogFormat::Json,
        ..BrokerConfig::default()
    };
    let st = &mut c.storage;
    st.data_path = labels::DATA_PATH.into();
    // The CRD bounds every count below; an out-of-range value saturates rather than wraps.
    st.feature_level = u8::try_from(lim.feature_level).unwrap_or(u8::MAX);
    st.max_segment_bytes = lim.max_segment_bytes;
    st.min_free_bytes = spec.min_free_bytes;
    st.disk_high_watermark_percent = spec.disk_high_watermark_percent;
    st.disk_low_watermark_percent = spec.disk_low_watermark_percent;
    st.protective_eviction_enabled = spec.protective_eviction_enabled;
    st.disk_pressure_grace_seconds = spec.disk_pressure_grace_seconds;
    st.maintenance_startup_delay_seconds = spec.maintenance_startup_delay_seconds;

    let q = &mut c.queue;
    q.bootstrap_retention_seconds = spec.bootstrap_retention_seconds;
    q.max_message_bytes = spec.max_message_bytes;
    q.max_topics = usize::try_from(spec.max_topics).unwrap_or(usize::MAX);
    q.max_publish_workers = u32::try_from(spec.max_publish_workers).unwrap_or(u32::MAX);
    q.publish_worker_idle_seconds = spec.publish_worker_idle_seconds;
    q.publish_ack_mode = spec.publish_ack_mode.as_str().into();
    q.relaxed_sync_messages = spec.relaxed_sync_messages;
    q.relaxed_sync_bytes = spec.relaxed_sync_bytes;
    q.relaxed_sync_interval_ms = spec.relaxed_sync_interval_ms;

    let l = &mut c.limits;
    l.max_body_bytes = lim.max_body_bytes;
    l.node_publish_inflight_bytes = lim.node_publish_inflight_bytes;
    l.connection_publish_inflight_bytes = lim.connection_publish_inflight_bytes;
    l.node_delivery_inflight_bytes = lim.node_delivery_inflight_bytes;
    l.connection_delivery_inflight_bytes = lim.connection_delivery_inflight_bytes;
    l.disconnect_on_retriable_publish_error = false;

    c.metrics.detailed_queue_metrics = spec.detailed_queue_metrics;
    c.metrics.max_detailed_series =
        usize::try_from(spec.max_detailed_metric_series).unwrap_or(usize::MAX);

    let sec = &mut c.security;
    sec.admin_token_file = token_file("admin-token");
    if spec.kodo_compatibility.enabled {
        // Only the Gateways (holding the admin token) may publish over HTTP in Kodo mode.
        sec.publish_token_file = token_file("admin-token");
    }
    sec.registry_token_file = token_file("registry-token");
    sec.console_token_file = token_file("console-token");
    sec.console_management_enabled = spec.console_management_enabled;
    sec.kodo_cleanup_enabled = false;
    if spec.client_tls_secret_name.is_some() {
        sec.tls = Some(TlsConfig {
            certificate_file: "/run/tls/rustqueue/tls.crt".into(),
            private_key_file: "/run/tls/rustqueue/tls.key".into(),
            client_ca_file: Some("/run/tls/rustqueue/ca.crt".into()),
            require_client_certificate: false,
            required: false,
            min_version: None,
        });
    }
    c.tiering = spec.tiering.as_ref().map(tiering_config);
    c
}

/// `[tiering]` for `spec.tiering`: every key as given, the credentials as the files the
/// Secret is mounted as (the key pair itself is never in the ConfigMap).
pub fn tiering_config(t: &Tiering) -> TieringConfig {
    let file = |name: &str| {
        Some(PathBuf::from(format!(
            "{}/{name}",
            labels::TIERING_SECRETS_DIR
        )))
    };
    TieringConfig {
        bucket: t.bucket.clone(),
        endpoint: t.endpoint.clone(),
        region: t.region.clone(),
        prefix: t.prefix.clone(),
        allow_http: t.allow_http,
        access_key_file: file(labels::TIERING_ACCESS_KEY_FILE),
        secret_key_file: file(labels::TIERING_SECRET_KEY_FILE),
        upload_after_seconds: t.upload_after_seconds,
        checkpoint_upload_seconds: t.checkpoint_upload_seconds,
        local_retention_bytes: t.local_retention_bytes,
        local_retention_seconds: t.local_retention_seconds,
    }
}

/// The broker TOML for `spec`: [`broker_config`] with a header naming its owner.
pub fn broker_toml(owner: &Owner<'_>, spec: &RustQueueSpec, inputs: &BrokerInputs) -> String {
    let body = toml::to_string(&broker_config(spec, inputs))
        .expect("the broker config schema serializes to TOML");
    format!(
        "# Rendered by rustqueue-operator for RustQueue {}/{}; edits are overwritten.\n\
         # Tokens come from Secret {}.\n{body}",
        owner.namespace, owner.name, inputs.auth_secret_name
    )
}

/// The `<n>-config` ConfigMap holding `rustqueue.toml`.
pub fn config_map(owner: &Owner<'_>, toml: &str) -> ConfigMap {
    ConfigMap {
        metadata: owner.metadata(
            &names::config_map(owner.name, toml),
            labels::COMPONENT_BROKER,
        ),
        data: Some(BTreeMap::from([(
            labels::CONFIG_FILE.to_string(),
            toml.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use toml::Table;

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
    fn every_rendered_config_parses_as_the_brokers_own_schema() {
        let mut specs = vec![spec()];
        let mut s = spec();
        s.client_tls_secret_name = Some("tls".into());
        s.kodo_compatibility.enabled = true;
        specs.push(s);
        let mut s = spec();
        s.max_message_bytes = 80 * MIB;
        s.storage_feature_level = 2;
        s.publish_ack_mode = rustqueue_api::crd::PublishAckMode::NsqRelaxed;
        s.detailed_queue_metrics = true;
        specs.push(s);
        let mut s = spec();
        s.tiering = Some(tiering_spec());
        specs.push(s);
        for (i, s) in specs.iter().enumerate() {
            for floor in [1, 2] {
                let mut inp = inputs();
                inp.feature_level_floor = floor;
                let text = broker_toml(&owner(), s, &inp);
                let read: BrokerConfig = toml::from_str(&text)
                    .unwrap_or_else(|e| panic!("spec {i} floor {floor}: {e}\n{text}"));
                assert_eq!(read, broker_config(s, &inp), "spec {i} floor {floor}");
            }
        }
    }

    fn tiering_spec() -> Tiering {
        serde_json::from_value(serde_json::json!({
            "bucket": "rq-bucket",
            "endpoint": "https://s3.example:9000",
            "prefix": "cluster-a/prod",
            "credentialsSecret": {"name": "s3", "accessKeyIdKey": "id"},
            "uploadAfterSeconds": 30,
            "checkpointUploadSeconds": 10,
            "localRetentionBytes": 0,
            "localRetentionSeconds": 3600,
        }))
        .unwrap()
    }

    #[test]
    fn tiering_renders_every_key_and_names_only_the_mounted_credential_files() {
        assert!(
            parsed(&spec(), 1).get("tiering").is_none(),
            "no [tiering] without spec.tiering"
        );
        let mut s = spec();
        s.tiering = Some(tiering_spec());
        let text = broker_toml(&owner(), &s, &inputs());
        let t: Table = text.parse().unwrap();
        let t = &t["tiering"];
        assert_eq!(t["bucket"].as_str(), Some("rq-bucket"));
        assert_eq!(t["endpoint"].as_str(), Some("https://s3.example:9000"));
        assert_eq!(
            t["region"].as_str(),
            Some("us-east-1"),
            "the broker's default"
        );
        assert_eq!(t["prefix"].as_str(), Some("cluster-a/prod"));
        assert_eq!(t["allow_http"].as_bool(), Some(false));
        assert_eq!(
            t["access_key_file"].as_str(),
            Some("/run/secrets/rustqueue-tiering/access-key-id")
        );
        assert_eq!(
            t["secret_key_file"].as_str(),
            Some("/run/secrets/rustqueue-tiering/secret-access-key")
        );
        assert_eq!(t["upload_after_seconds"].as_integer(), Some(30));
        assert_eq!(t["checkpoint_upload_seconds"].as_integer(), Some(10));
        assert_eq!(t["local_retention_bytes"].as_integer(), Some(0));
        assert_eq!(t["local_retention_seconds"].as_integer(), Some(3600));
        assert!(
            !text.contains("\"s3\"") && !text.contains("\"id\""),
            "the Secret is mounted, never named in the config: {text}"
        );
        let mut bare = tiering_spec();
        bare.local_retention_bytes = None;
        bare.local_retention_seconds = None;
        bare.prefix = None;
        let rendered = tiering_config(&bare);
        assert_eq!(
            (
                rendered.prefix,
                rendered.local_retention_bytes,
                rendered.local_retention_seconds
            ),
            (None, None, None),
            "unset stays unset: the broker's defaults apply"
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
