//! The CRD's CEL rules, evaluated client-side (kube's `cel` feature) on whole RustQueue
//! objects: a valid spec passes, each cross-field mistake is refused with its message.
#![cfg(feature = "kube")]

use rustqueue_api::crd::{RustQueue, RustQueueSpec};

fn rq(spec: RustQueueSpec) -> RustQueue {
    RustQueue::new("q", spec)
}

fn errors(spec: RustQueueSpec) -> String {
    match rq(spec).validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

fn spec() -> RustQueueSpec {
    RustQueueSpec::with_image("rustqueue:dev")
}

#[test]
fn the_default_spec_passes_every_rule() {
    assert_eq!(errors(spec()), "");
}

#[test]
fn each_cross_field_mistake_is_refused_with_its_message() {
    type Edit = fn(&mut RustQueueSpec);
    let cases: &[(Edit, &str)] = &[
        (
            |s| {
                s.min_brokers = 5;
                s.max_brokers = 3;
            },
            "minBrokers must be less than or equal to maxBrokers",
        ),
        (
            |s| s.disk_low_watermark_percent = 90,
            "diskLowWatermarkPercent must be below diskHighWatermarkPercent",
        ),
        (
            |s| {
                s.max_message_bytes = 80 << 20;
                s.connection_delivery_inflight_bytes = 80 << 20;
                s.node_delivery_inflight_bytes = 160 << 20;
            },
            "maxMessageBytes above 71 MiB needs storageFeatureLevel 2",
        ),
        (
            |s| s.connection_delivery_inflight_bytes = 1024,
            "connectionDeliveryInflightBytes must be at least maxMessageBytes",
        ),
        (
            |s| s.node_delivery_inflight_bytes = 40 << 20,
            "nodeDeliveryInflightBytes must be at least twice",
        ),
        (
            |s| {
                s.publish_ack_mode = rustqueue_api::crd::PublishAckMode::NsqRelaxed;
                s.relaxed_sync_bytes = 100;
            },
            "relaxedSyncBytes must be at least 4096",
        ),
        (
            |s| s.kodo_compatibility.enabled = true,
            "kodoCompatibility needs minBrokers = maxBrokers = 3",
        ),
        (
            |s| {
                s.console.poll_interval_seconds = 5;
                s.console.catalog_refresh_seconds = 4;
            },
            "console.catalogRefreshSeconds must be at least console.pollIntervalSeconds",
        ),
        (
            |s| {
                s.console_management_enabled = true;
                s.console.enabled = false;
            },
            "consoleManagementEnabled needs console.enabled",
        ),
    ];
    for (edit, message) in cases {
        let mut s = spec();
        edit(&mut s);
        let e = errors(s);
        assert!(e.contains(message), "expected {message:?}, got {e:?}");
    }
}

#[test]
fn large_messages_pass_once_the_feature_level_is_two() {
    let mut s = spec();
    s.max_message_bytes = 80 << 20;
    s.connection_delivery_inflight_bytes = 80 << 20;
    s.node_delivery_inflight_bytes = 160 << 20;
    s.storage_feature_level = 2;
    assert_eq!(errors(s), "");
}

#[test]
fn relaxed_sync_bytes_only_matter_in_relaxed_modes() {
    let mut s = spec();
    s.relaxed_sync_bytes = 100;
    assert_eq!(errors(s), "");
}

fn kodo_profile() -> RustQueueSpec {
    let mut s = spec();
    s.kodo_compatibility.enabled = true;
    s.min_brokers = 3;
    s.max_brokers = 3;
    s.storage_feature_level = 2;
    s.max_message_bytes = 104_857_600;
    s.connection_delivery_inflight_bytes = 134_217_728;
    s.node_delivery_inflight_bytes = 536_870_912;
    s.bootstrap_retention_seconds = 180;
    s
}

#[test]
fn a_complete_kodo_profile_passes() {
    assert_eq!(errors(kodo_profile()), "");
}

#[test]
fn a_kodo_profile_is_refused_with_small_delivery_limits_or_a_confirmed_decommission() {
    let mut s = kodo_profile();
    s.connection_delivery_inflight_bytes = 104_857_600;
    assert!(errors(s).contains("connectionDeliveryInflightBytes >= 134217728"));
    let mut s = kodo_profile();
    s.kodo_compatibility.decommission_confirmed = true;
    assert!(errors(s).contains("decommissionConfirmed must be false"));
    // disabling with confirmation is the decommission itself
    let mut s = kodo_profile();
    s.kodo_compatibility.enabled = false;
    s.kodo_compatibility.decommission_confirmed = true;
    assert_eq!(errors(s), "");
}

fn update_errors(old: RustQueueSpec, new: RustQueueSpec) -> String {
    match rq(new).validate_cel_update(&rq(old)) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn storage_can_grow_but_never_shrink_or_change_class() {
    let sized = |size: &str| {
        let mut s = spec();
        s.storage_size = size.into();
        s
    };
    assert_eq!(update_errors(sized("1Gi"), sized("2Gi")), "");
    assert_eq!(
        update_errors(sized("1Gi"), sized("1024Mi")),
        "",
        "same size"
    );
    let e = update_errors(sized("2Gi"), sized("1Gi"));
    assert!(e.contains("storageSize cannot shrink"), "{e}");
    let mut other = spec();
    other.storage_class_name = "fast".into();
    let e = update_errors(spec(), other);
    assert!(e.contains("storageClassName cannot change"), "{e}");
}

/// A RustQueue whose status says the brokers have activated `active`.
fn at_level(level: u32, active: Option<u32>) -> RustQueue {
    let mut s = spec();
    s.storage_feature_level = level;
    let mut r = rq(s);
    r.status = active.map(|a| rustqueue_api::crd::RustQueueStatus {
        active_storage_feature_level: Some(a),
        ..Default::default()
    });
    r
}

fn level_change(old: RustQueue, new: RustQueue) -> String {
    match new.validate_cel_update(&old) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn the_feature_level_cannot_be_lowered_below_the_active_floor() {
    let e = level_change(at_level(2, Some(2)), at_level(1, Some(2)));
    assert!(
        e.contains(
            "spec.storageFeatureLevel cannot be lowered below status.activeStorageFeatureLevel, the floor"
        ),
        "{e}"
    );
    assert_eq!(level_change(at_level(1, Some(1)), at_level(2, Some(1))), "");
    assert_eq!(level_change(at_level(2, Some(2)), at_level(2, Some(2))), "");
}

#[test]
fn a_raise_that_never_activated_can_be_taken_back() {
    // Level 2 requested under a level-1 binary: preflight blocked it, the floor is still 1.
    assert_eq!(level_change(at_level(2, Some(1)), at_level(1, Some(1))), "");
    // No status yet (nothing observed): nothing to protect.
    assert_eq!(level_change(at_level(2, None), at_level(1, None)), "");
}

#[test]
fn an_object_already_below_its_floor_can_still_change_other_fields() {
    // Written before the rule existed: the level stays as it is, other edits pass; the
    // operator reports the level itself (docs/operator.md).
    let mut new = at_level(1, Some(2));
    new.spec.image = "rustqueue:next".into();
    assert_eq!(level_change(at_level(1, Some(2)), new), "");
}

fn tiered(edit: impl FnOnce(&mut rustqueue_api::crd::Tiering)) -> RustQueueSpec {
    let mut s = spec();
    let mut t: rustqueue_api::crd::Tiering = serde_json::from_value(serde_json::json!({
        "bucket": "rq-bucket",
        "endpoint": "https://s3.example",
        "prefix": "cluster-a/prod",
        "credentialsSecret": {"name": "s3"},
    }))
    .unwrap();
    edit(&mut t);
    s.tiering = Some(t);
    s
}

#[test]
fn a_tiering_spec_is_refused_for_a_dotted_bucket_plain_http_or_a_dot_segment() {
    assert_eq!(errors(tiered(|_| {})), "");
    let e = errors(tiered(|t| t.bucket = "a..b".into()));
    assert!(e.contains("tiering.bucket must not contain '..'"), "{e}");
    let e = errors(tiered(|t| t.endpoint = "http://s3.example".into()));
    assert!(e.contains("set tiering.allowHttp"), "{e}");
    assert_eq!(
        errors(tiered(|t| {
            t.endpoint = "http://s3.example".into();
            t.allow_http = true;
        })),
        ""
    );
    let e = errors(tiered(|t| t.prefix = Some("a/../b".into())));
    assert!(
        e.contains("tiering.prefix must not have a '.' or '..' segment"),
        "{e}"
    );
}

#[test]
fn tiering_with_local_retention_cannot_be_removed_in_the_same_apply() {
    let mut with_retention = tiered(|t| t.local_retention_bytes = Some(0));
    with_retention.storage_feature_level = 3;
    let e = update_errors(with_retention.clone(), spec());
    assert!(
        e.contains("spec.tiering cannot be removed while local retention is set"),
        "{e}"
    );
    assert_eq!(
        update_errors(tiered(|_| {}), spec()),
        "",
        "never evicted: may go"
    );
    assert_eq!(update_errors(with_retention, tiered(|_| {})), "");
}

/// A tiered RustQueue whose status says local retention has run (or not).
fn retention_used(s: RustQueueSpec, used: bool) -> RustQueue {
    let mut r = rq(s);
    r.status = Some(rustqueue_api::crd::RustQueueStatus {
        tiering_local_retention_used: used.then_some(true),
        ..Default::default()
    });
    r
}

#[test]
fn once_local_retention_has_run_tiering_stays_on_the_same_bucket_and_prefix() {
    let old = || retention_used(tiered(|_| {}), true);
    let change = |new: RustQueueSpec| level_change(old(), retention_used(new, true));
    let refused = "spec.tiering cannot be removed, nor its bucket or prefix changed, once local retention has been on";
    for new in [
        spec(),
        tiered(|t| t.bucket = "other-bucket".into()),
        tiered(|t| t.prefix = Some("cluster-b".into())),
        tiered(|t| t.prefix = None),
    ] {
        let e = change(new);
        assert!(e.contains(refused), "{e}");
    }
    assert_eq!(change(tiered(|t| t.checkpoint_upload_seconds = 5)), "");
    assert_eq!(
        change(tiered(|t| t.endpoint = "https://s3-2.example".into())),
        "",
        "the same bucket through another endpoint"
    );
    assert_eq!(
        level_change(
            retention_used(tiered(|_| {}), false),
            retention_used(spec(), false)
        ),
        "",
        "without the status mark it may go"
    );
}

#[test]
fn local_retention_needs_storage_feature_level_three() {
    let refused =
        "spec.tiering.localRetentionBytes/localRetentionSeconds need storageFeatureLevel 3";
    for level in [1, 2] {
        for retained in [
            tiered(|t| t.local_retention_bytes = Some(0)),
            tiered(|t| t.local_retention_seconds = Some(3600)),
        ] {
            let s = RustQueueSpec {
                storage_feature_level: level,
                ..retained
            };
            let e = errors(s);
            assert!(e.contains(refused), "level {level}: {e}");
        }
    }
    let mut at_three = tiered(|t| t.local_retention_bytes = Some(0));
    at_three.storage_feature_level = 3;
    assert_eq!(errors(at_three), "");
    assert_eq!(
        errors(tiered(|_| {})),
        "",
        "tiering without local retention: any level"
    );
}

#[test]
fn a_sampler_ratio_goes_only_with_a_ratio_sampler() {
    use rustqueue_api::crd::{TraceSampler, Tracing};
    let traced = |sampler: Option<TraceSampler>, arg: Option<&str>| {
        let mut s = spec();
        s.tracing = Some(Tracing {
            otlp_endpoint: "http://otel-collector.monitoring:4318".into(),
            sampler,
            sampler_arg: arg.map(str::to_owned),
        });
        errors(s)
    };
    assert_eq!(traced(None, None), "");
    assert_eq!(traced(Some(TraceSampler::Traceidratio), Some("0.01")), "");
    assert_eq!(
        traced(Some(TraceSampler::ParentbasedTraceidratio), Some("1")),
        ""
    );
    for (sampler, arg) in [
        (None, "0.5"),
        (Some(TraceSampler::AlwaysOn), "0.5"),
        (Some(TraceSampler::ParentbasedAlwaysOff), "0"),
    ] {
        let e = traced(sampler, Some(arg));
        assert!(
            e.contains("tracing.samplerArg is the ratio of the traceidratio samplers"),
            "{sampler:?}: {e}"
        );
    }
}
