//! Checks of a spec that the CRD schema and CEL rules cannot express, or that must hold even
//! when the CRD installed in a cluster is older than this operator. Every message says what
//! to change.

use rustqueue_api::crd::{LEGACY_MAX_MESSAGE_BYTES, PublishAckMode, RustQueueSpec};

use super::quantity::parse_bytes;

/// All problems of `spec` for RustQueue `name`; empty when the spec is usable.
pub fn validate(name: &str, spec: &RustQueueSpec) -> Vec<String> {
    let mut errs = Vec::new();
    errs.extend(super::tiering::validate(spec));
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
    if spec.kodo_compatibility.cleanup_enabled {
        errs.push("spec.kodoCompatibility.cleanupEnabled must stay false".into());
    }
    let grace = spec.kodo_compatibility.cutover_grace_seconds;
    if !(630..=86400).contains(&grace) {
        errs.push(format!(
            "spec.kodoCompatibility.cutoverGraceSeconds ({grace}) must be between 630 and 86400"
        ));
    }
    if spec.kodo_compatibility.enabled {
        errs.extend(kodo(spec));
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

/// What the Kodo profile needs besides the rest of the spec (docs/kodo.md): three brokers,
/// 100 MiB messages at storage level 2, durable acknowledgements, delivery budgets for 100 MiB
/// messages, an image pinned by digest, a Gateway ingress selector, brokers sized for it.
fn kodo(spec: &RustQueueSpec) -> Vec<String> {
    let mut errs = Vec::new();
    kodo_limits(spec, &mut |ok, what| need(&mut errs, ok, what));
    kodo_placement(spec, &mut |ok, what| need(&mut errs, ok, what));
    errs
}

/// Adds `what` to `errs` as something the Kodo profile needs, unless `ok`.
fn need(errs: &mut Vec<String>, ok: bool, what: String) {
    if !ok {
        errs.push(format!("spec.kodoCompatibility.enabled needs {what}"));
    }
}

/// The profile's sizes: three brokers, 100 MiB messages at level 2, the bootstrap window,
/// delivery budgets, durable acknowledgements, no confirmed decommission.
fn kodo_limits(spec: &RustQueueSpec, need: &mut dyn FnMut(bool, String)) {
    need(
        spec.min_brokers == super::kodo::BROKERS && spec.max_brokers == super::kodo::BROKERS,
        format!(
            "spec.minBrokers = spec.maxBrokers = 3 (got {} and {})",
            spec.min_brokers, spec.max_brokers
        ),
    );
    need(
        spec.storage_feature_level == 2,
        format!(
            "spec.storageFeatureLevel 2 (got {})",
            spec.storage_feature_level
        ),
    );
    need(
        spec.bootstrap_retention_seconds >= 180,
        format!(
            "spec.bootstrapRetentionSeconds of at least 180 (got {})",
            spec.bootstrap_retention_seconds
        ),
    );
    need(
        spec.max_message_bytes == KODO_MESSAGE_BYTES,
        format!(
            "spec.maxMessageBytes 104857600 (got {})",
            spec.max_message_bytes
        ),
    );
    need(
        spec.connection_delivery_inflight_bytes >= 128 << 20,
        "spec.connectionDeliveryInflightBytes of at least 134217728".into(),
    );
    need(
        spec.node_delivery_inflight_bytes >= 512 << 20,
        "spec.nodeDeliveryInflightBytes of at least 536870912".into(),
    );
    need(
        spec.publish_ack_mode == PublishAckMode::Durable,
        "spec.publishAckMode durable".into(),
    );
    need(
        !spec.kodo_compatibility.decommission_confirmed,
        "spec.kodoCompatibility.decommissionConfirmed false (set it only when disabling the profile)"
            .into(),
    );
}

/// Where the profile runs: an image pinned by digest, the Gateway ingress selectors, brokers
/// sized for 100 MiB messages.
fn kodo_placement(spec: &RustQueueSpec, need: &mut dyn FnMut(bool, String)) {
    let image = spec
        .rollout
        .rollback_to_image
        .as_deref()
        .unwrap_or(&spec.image);
    need(
        spec.image_pull_policy == "Never" || pinned_by_digest(image),
        format!(
            "the image pinned by digest (name@sha256:<64 lowercase hex>), or spec.imagePullPolicy Never (got {image})"
        ),
    );
    let blank = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .any(|(k, v)| k.trim().is_empty() || v.trim().is_empty())
    };
    let pods = &spec.kodo_compatibility.allowed_pod_selector;
    need(
        !pods.is_empty() && !blank(pods),
        "spec.kodoCompatibility.allowedPodSelector with at least one label and no blank key or value (the Kodo producer Pods)"
            .into(),
    );
    need(
        !blank(&spec.kodo_compatibility.allowed_namespace_selector),
        "spec.kodoCompatibility.allowedNamespaceSelector without blank keys or values".into(),
    );
    let r = &spec.broker_resources;
    let memory = parse_bytes(&r.memory_request);
    need(
        memory.is_some_and(|m| m >= 2 << 30),
        format!(
            "spec.brokerResources.memoryRequest of at least 2Gi (got {})",
            r.memory_request
        ),
    );
    let cpu = parse_nano_cores(&r.cpu_request);
    need(
        cpu.is_some_and(|c| c >= 1_000_000_000),
        format!(
            "spec.brokerResources.cpuRequest of at least 1 CPU (got {})",
            r.cpu_request
        ),
    );
    if let Some(l) = &r.memory_limit {
        need(
            parse_bytes(l).is_some_and(|l| memory.is_some_and(|m| l >= m)),
            format!("spec.brokerResources.memoryLimit ({l}) at least the memory request"),
        );
    }
    if let Some(l) = &r.cpu_limit {
        need(
            parse_nano_cores(l).is_some_and(|l| cpu.is_some_and(|c| l >= c)),
            format!("spec.brokerResources.cpuLimit ({l}) at least the CPU request"),
        );
    }
}

/// The message size of the Kodo profile: 100 MiB.
pub const KODO_MESSAGE_BYTES: u64 = 104_857_600;

/// `name@sha256:<64 lowercase hex>`.
fn pinned_by_digest(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(name, hex)| {
        !name.is_empty()
            && hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A CPU quantity (`1`, `1.5`, `1500m`, `2000000u`, `1000000000n`) in nanocores.
fn parse_nano_cores(q: &str) -> Option<u128> {
    let q = q.trim();
    let (num, scale): (&str, u128) = if let Some(n) = q.strip_suffix('m') {
        (n, 1_000_000)
    } else if let Some(n) = q.strip_suffix('u') {
        (n, 1_000)
    } else if let Some(n) = q.strip_suffix('n') {
        (n, 1)
    } else {
        (q, 1_000_000_000)
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut total = whole.checked_mul(scale)?;
    if !frac.is_empty() {
        let digits = u32::try_from(frac.len()).ok()?;
        let f: u128 = frac.parse().ok()?;
        total = total.checked_add(f.checked_mul(scale)? / 10u128.checked_pow(digits)?)?;
    }
    Some(total)
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

    /// A spec the Kodo profile accepts.
    pub(crate) fn kodo_spec() -> RustQueueSpec {
        let mut s = RustQueueSpec::with_image(
            "rustqueue@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        );
        s.kodo_compatibility.enabled = true;
        s.min_brokers = 3;
        s.max_brokers = 3;
        s.storage_feature_level = 2;
        s.max_message_bytes = KODO_MESSAGE_BYTES;
        s.connection_delivery_inflight_bytes = 128 << 20;
        s.node_delivery_inflight_bytes = 512 << 20;
        s.bootstrap_retention_seconds = 180;
        s.broker_resources.cpu_request = "1".into();
        s.broker_resources.memory_request = "2Gi".into();
        s
    }

    #[test]
    fn a_complete_kodo_profile_is_valid() {
        assert_eq!(validate("q", &kodo_spec()), Vec::<String>::new());
        let mut s = kodo_spec();
        s.image = "rustqueue:dev".into();
        s.image_pull_policy = "Never".into();
        s.broker_resources.cpu_request = "1500m".into();
        s.broker_resources.cpu_limit = Some("2".into());
        s.broker_resources.memory_limit = Some("4Gi".into());
        assert_eq!(validate("q", &s), Vec::<String>::new());
    }

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "a test table or scenario reads best in one piece"
    )]
    fn each_kodo_rule_says_what_to_set() {
        type Edit = fn(&mut RustQueueSpec);
        let cases: &[(Edit, &str)] = &[
            (
                |s| s.min_brokers = 2,
                "spec.minBrokers = spec.maxBrokers = 3",
            ),
            (
                |s| s.max_brokers = 4,
                "spec.minBrokers = spec.maxBrokers = 3",
            ),
            (
                |s| s.storage_feature_level = 1,
                "spec.storageFeatureLevel 2",
            ),
            (
                |s| s.bootstrap_retention_seconds = 179,
                "spec.bootstrapRetentionSeconds of at least 180",
            ),
            (
                |s| s.max_message_bytes = (100 << 20) - 1,
                "spec.maxMessageBytes 104857600",
            ),
            (
                |s| s.connection_delivery_inflight_bytes = (128 << 20) - 1,
                "spec.connectionDeliveryInflightBytes of at least 134217728",
            ),
            (
                |s| s.node_delivery_inflight_bytes = (512 << 20) - 1,
                "spec.nodeDeliveryInflightBytes of at least 536870912",
            ),
            (
                |s| s.publish_ack_mode = PublishAckMode::WriteAck,
                "spec.publishAckMode durable",
            ),
            (
                |s| s.kodo_compatibility.decommission_confirmed = true,
                "decommissionConfirmed false",
            ),
            (
                |s| s.kodo_compatibility.cleanup_enabled = true,
                "cleanupEnabled must stay false",
            ),
            (|s| s.image = "rustqueue:dev".into(), "pinned by digest"),
            (
                |s| s.image = "rustqueue@sha256:ABCDEF".into(),
                "pinned by digest",
            ),
            (
                |s| s.rollout.rollback_to_image = Some("rustqueue:old".into()),
                "(got rustqueue:old)",
            ),
            (
                |s| s.kodo_compatibility.allowed_pod_selector.clear(),
                "allowedPodSelector with at least one label",
            ),
            (
                |s| {
                    s.kodo_compatibility
                        .allowed_pod_selector
                        .insert("team".into(), " ".into());
                },
                "no blank key or value",
            ),
            (
                |s| {
                    s.kodo_compatibility
                        .allowed_namespace_selector
                        .insert(" ".into(), "x".into());
                },
                "allowedNamespaceSelector without blank",
            ),
            (
                |s| s.broker_resources.memory_request = "1Gi".into(),
                "memoryRequest of at least 2Gi",
            ),
            (
                |s| s.broker_resources.cpu_request = "999m".into(),
                "cpuRequest of at least 1 CPU",
            ),
            (
                |s| s.broker_resources.cpu_request = "lots".into(),
                "cpuRequest of at least 1 CPU",
            ),
            (
                |s| s.broker_resources.memory_limit = Some("1Gi".into()),
                "memoryLimit (1Gi) at least the memory request",
            ),
            (
                |s| s.broker_resources.cpu_limit = Some("500m".into()),
                "cpuLimit (500m) at least the CPU request",
            ),
            (
                |s| s.kodo_compatibility.cutover_grace_seconds = 629,
                "cutoverGraceSeconds (629) must be between 630 and 86400",
            ),
        ];
        for (edit, expected) in cases {
            let mut s = kodo_spec();
            edit(&mut s);
            let errs = validate("q", &s);
            assert!(
                errs.iter().any(|e| e.contains(expected)),
                "{expected}: got {errs:?}"
            );
        }
    }

    #[test]
    fn the_kodo_rules_apply_only_while_enabled() {
        let mut s = spec();
        s.kodo_compatibility.decommission_confirmed = true;
        s.kodo_compatibility.allowed_pod_selector.clear();
        assert!(validate("q", &s).is_empty());
    }

    #[test]
    fn cpu_quantities_parse_in_nanocores() {
        assert_eq!(parse_nano_cores("1"), Some(1_000_000_000));
        assert_eq!(parse_nano_cores("1.5"), Some(1_500_000_000));
        assert_eq!(parse_nano_cores("250m"), Some(250_000_000));
        assert_eq!(parse_nano_cores("10u"), Some(10_000));
        assert_eq!(parse_nano_cores("7n"), Some(7));
        assert_eq!(parse_nano_cores("m"), None);
        assert_eq!(parse_nano_cores("1Gi"), None);
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
