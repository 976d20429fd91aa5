//! Checks of a spec that the CRD schema and CEL rules cannot express, or that must hold even
//! when the CRD installed in a cluster is older than this operator. Every message says what
//! to change.

use rustqueue_api::crd::{LEGACY_MAX_MESSAGE_BYTES, RustQueueSpec};

use super::quantity::parse_bytes;

/// All problems of `spec` for RustQueue `name`; empty when the spec is usable.
pub fn validate(name: &str, spec: &RustQueueSpec) -> Vec<String> {
    let mut errs = Vec::new();
    if spec.image.trim().is_empty() {
        errs.push("spec.image is blank: set the broker image".to_string());
    }
    if spec.min_brokers < 1 || spec.min_brokers > spec.max_brokers {
        errs.push(format!(
            "spec.minBrokers ({}) must be between 1 and spec.maxBrokers ({})",
            spec.min_brokers, spec.max_brokers
        ));
    }
    match spec.eligible_node_selector.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !k.contains(',') && !v.contains([',', '=']) => {}
        _ => errs.push(format!(
            "spec.eligibleNodeSelector {:?} must be exactly one key=value label",
            spec.eligible_node_selector
        )),
    }
    if spec.storage_class_name.trim().is_empty() {
        errs.push("spec.storageClassName is blank: name the StorageClass of broker PVCs".into());
    }
    if parse_bytes(&spec.storage_size).is_none_or(|b| b == 0) {
        errs.push(format!(
            "spec.storageSize {:?} is not a storage quantity such as 100Gi",
            spec.storage_size
        ));
    }
    if spec.disk_low_watermark_percent >= spec.disk_high_watermark_percent
        || spec.disk_high_watermark_percent > 100
    {
        errs.push(format!(
            "spec.diskLowWatermarkPercent ({}) must be below spec.diskHighWatermarkPercent ({}) <= 100",
            spec.disk_low_watermark_percent, spec.disk_high_watermark_percent
        ));
    }
    if spec.max_message_bytes > LEGACY_MAX_MESSAGE_BYTES && spec.storage_feature_level < 2 {
        errs.push(format!(
            "spec.maxMessageBytes ({}) above 71 MiB needs spec.storageFeatureLevel 2",
            spec.max_message_bytes
        ));
    }
    if spec.connection_delivery_inflight_bytes < spec.max_message_bytes {
        errs.push(
            "spec.connectionDeliveryInflightBytes must be at least spec.maxMessageBytes".into(),
        );
    }
    if spec.node_delivery_inflight_bytes < 2 * spec.connection_delivery_inflight_bytes
        || spec.node_delivery_inflight_bytes > u64::from(u32::MAX)
    {
        errs.push(
            "spec.nodeDeliveryInflightBytes must be at least twice spec.connectionDeliveryInflightBytes and at most 4294967295"
                .into(),
        );
    }
    if spec.kodo_compatibility.enabled {
        errs.push(
            "spec.kodoCompatibility.enabled is not supported by this operator yet (no Kodo Gateway to publish through): set it to false"
                .into(),
        );
    }
    if spec.kodo_compatibility.cleanup_enabled {
        errs.push("spec.kodoCompatibility.cleanupEnabled must stay false".into());
    }
    if let Some(m) = &spec.maintenance {
        let ordinal = m
            .broker
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|o| o.parse::<u32>().ok());
        if ordinal.is_none() {
            errs.push(format!(
                "spec.maintenance.broker {:?} must name a broker Pod such as {name}-0",
                m.broker
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustqueue_api::crd::Maintenance;

    fn spec() -> RustQueueSpec {
        RustQueueSpec::with_image("rustqueue:dev")
    }

    #[test]
    fn the_default_spec_is_valid() {
        assert!(validate("q", &spec()).is_empty());
    }

    #[test]
    fn each_broken_rule_yields_an_actionable_message() {
        type Edit = fn(&mut RustQueueSpec);
        let cases: &[(Edit, &str)] = &[
            (|s| s.image = "  ".into(), "spec.image is blank"),
            (
                // maxBrokers defaults to 500, so the edit must lower it.
                |s| {
                    s.min_brokers = 5;
                    s.max_brokers = 4;
                },
                "spec.minBrokers (5) must be between 1 and spec.maxBrokers (4)",
            ),
            (
                |s| s.max_brokers = 0,
                "spec.minBrokers (1) must be between 1",
            ),
            (
                |s| s.eligible_node_selector = "a=b,c=d".into(),
                "exactly one key=value",
            ),
            (
                |s| s.eligible_node_selector = "novalue".into(),
                "exactly one key=value",
            ),
            (
                |s| s.storage_class_name = "".into(),
                "spec.storageClassName is blank",
            ),
            (|s| s.storage_size = "lots".into(), "not a storage quantity"),
            (
                |s| s.disk_low_watermark_percent = 85,
                "must be below spec.diskHighWatermarkPercent",
            ),
            (
                |s| {
                    s.max_message_bytes = 80 << 20;
                    s.connection_delivery_inflight_bytes = 80 << 20;
                    s.node_delivery_inflight_bytes = 160 << 20;
                },
                "needs spec.storageFeatureLevel 2",
            ),
            (
                |s| s.connection_delivery_inflight_bytes = 1,
                "at least spec.maxMessageBytes",
            ),
            (
                |s| s.node_delivery_inflight_bytes = 1 << 20,
                "at least twice",
            ),
            (
                |s| s.kodo_compatibility.enabled = true,
                "kodoCompatibility.enabled is not supported",
            ),
            (
                |s| s.kodo_compatibility.cleanup_enabled = true,
                "cleanupEnabled must stay false",
            ),
            (
                |s| {
                    s.maintenance = Some(Maintenance {
                        broker: "other-0".into(),
                        enabled: true,
                    })
                },
                "must name a broker Pod such as q-0",
            ),
        ];
        for (edit, expected) in cases {
            let mut s = spec();
            edit(&mut s);
            let errs = validate("q", &s);
            assert!(
                errs.iter().any(|e| e.contains(expected)),
                "{expected}: got {errs:?}"
            );
        }
    }

    #[test]
    fn a_maintenance_request_for_an_own_broker_is_valid() {
        let mut s = spec();
        s.maintenance = Some(Maintenance {
            broker: "q-2".into(),
            enabled: true,
        });
        assert!(validate("q", &s).is_empty());
    }
}
