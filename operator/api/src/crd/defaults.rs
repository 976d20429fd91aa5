//! Serde defaults of the spec (the CRD reference is `kubectl explain rustqueue.spec`). schemars copies them into the CRD's
//! OpenAPI `default`s, so a field left out of a manifest reads the same in Rust and in
//! `kubectl get -o yaml`.

pub(super) fn image_pull_policy() -> String {
    "IfNotPresent".into()
}
pub(super) fn min_brokers() -> i32 {
    1
}
pub(super) fn max_brokers() -> i32 {
    500
}
pub(super) fn eligible_node_selector() -> String {
    crate::labels::DEFAULT_ELIGIBLE_NODE_SELECTOR.into()
}
pub(super) fn storage_class_name() -> String {
    "local-path".into()
}
pub(super) fn storage_size() -> String {
    "100Gi".into()
}
pub(super) fn one_u32() -> u32 {
    1
}
pub(super) fn message_index_cache_bytes() -> u64 {
    64 * 1024 * 1024
}
pub(super) fn maintenance_startup_delay_seconds() -> u64 {
    30
}
pub(super) fn node_delivery_inflight_bytes() -> u64 {
    512 * 1024 * 1024
}
pub(super) fn connection_delivery_inflight_bytes() -> u64 {
    32 * 1024 * 1024
}
pub(super) fn min_free_bytes() -> u64 {
    10 * 1024 * 1024 * 1024
}
pub(super) fn disk_high_watermark_percent() -> u8 {
    85
}
pub(super) fn disk_low_watermark_percent() -> u8 {
    75
}
pub(super) fn sixty() -> u64 {
    60
}
pub(super) fn bootstrap_retention_seconds() -> u64 {
    90
}
pub(super) fn max_message_bytes() -> u64 {
    20 * 1024 * 1024
}
pub(super) fn max_topics() -> u64 {
    10_000
}
pub(super) fn max_publish_workers() -> u64 {
    1024
}
pub(super) fn relaxed_sync_messages() -> u64 {
    2500
}
pub(super) fn relaxed_sync_bytes() -> u64 {
    8 * 1024 * 1024
}
pub(super) fn relaxed_sync_interval_ms() -> u64 {
    10
}
pub(super) fn max_detailed_metric_series() -> u64 {
    1000
}
pub(super) fn proxy_tcp_max_connection_age_seconds() -> u64 {
    300
}
pub(super) fn discovery_replicas() -> i32 {
    2
}
pub(super) fn cutover_grace_seconds() -> u64 {
    630
}
pub(super) fn kodo_allowed_pod_selector() -> std::collections::BTreeMap<String, String> {
    [("app.kubernetes.io/name".to_string(), "kodo".to_string())].into()
}
pub(super) fn timeout_seconds() -> u64 {
    600
}
pub(super) fn topology_key() -> String {
    "kubernetes.io/hostname".into()
}
pub(super) fn cpu_request() -> String {
    "100m".into()
}
pub(super) fn memory_request() -> String {
    "256Mi".into()
}
pub(super) fn yes() -> bool {
    true
}
