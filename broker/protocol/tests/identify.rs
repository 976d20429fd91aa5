//! Table tests for IDENTIFY validation and negotiation against the nsqd ranges.

use rustqueue_protocol::ErrorCode;
use rustqueue_protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse, negotiate};

fn limits() -> IdentifyLimits {
    IdentifyLimits {
        tls_available: true,
        version: "test".into(),
        ..IdentifyLimits::default()
    }
}

fn run(json: &str) -> Result<rustqueue_protocol::identify::Negotiated, (ErrorCode, String)> {
    let req = IdentifyRequest::parse(json.as_bytes()).map_err(|e| (e.code, e.detail))?;
    negotiate(&req, &limits()).map_err(|e| (e.code, e.detail))
}

#[test]
fn empty_identify_keeps_server_defaults() {
    let n = run("{}").unwrap();
    assert_eq!(n.heartbeat_interval_ms, Some(30_000));
    assert_eq!(n.output_buffer_size, 16_384);
    assert_eq!(n.output_buffer_timeout_ms, 250);
    assert_eq!(n.msg_timeout_ms, 60_000);
    assert_eq!(n.sample_rate, 0);
    assert!(!n.tls && !n.snappy && n.deflate_level.is_none());
}

#[test]
fn accepts_values_inside_the_nsqd_ranges() {
    let n = run(
        r#"{"heartbeat_interval":1000,"output_buffer_size":64,"output_buffer_timeout":25,
        "msg_timeout":900000,"sample_rate":99,"client_id":"c","hostname":"h","user_agent":"u",
        "unknown_field":[1,2]}"#,
    )
    .unwrap();
    assert_eq!(n.heartbeat_interval_ms, Some(1000));
    assert_eq!(n.output_buffer_size, 64);
    assert_eq!(n.output_buffer_timeout_ms, 25);
    assert_eq!(n.msg_timeout_ms, 900_000);
    assert_eq!(n.sample_rate, 99);
    assert_eq!(
        (
            n.client_id.as_str(),
            n.hostname.as_str(),
            n.user_agent.as_str()
        ),
        ("c", "h", "u")
    );
    let n = run(r#"{"heartbeat_interval":-1,"output_buffer_size":-1,"output_buffer_timeout":100}"#)
        .unwrap();
    assert_eq!(n.heartbeat_interval_ms, None);
    assert_eq!((n.output_buffer_size, n.output_buffer_timeout_ms), (1, 0));
    let n = run(r#"{"output_buffer_timeout":-1}"#).unwrap();
    assert_eq!(n.output_buffer_timeout_ms, 0);
}

#[test]
fn rejects_values_outside_the_ranges_with_bad_body() {
    let table = [
        (
            r#"{"heartbeat_interval":999}"#,
            "IDENTIFY heartbeat interval (999) is invalid",
        ),
        (
            r#"{"heartbeat_interval":60001}"#,
            "IDENTIFY heartbeat interval (60001) is invalid",
        ),
        (
            r#"{"heartbeat_interval":-2}"#,
            "IDENTIFY heartbeat interval (-2) is invalid",
        ),
        (
            r#"{"output_buffer_size":63}"#,
            "IDENTIFY output buffer size (63) is invalid",
        ),
        (
            r#"{"output_buffer_size":65537}"#,
            "IDENTIFY output buffer size (65537) is invalid",
        ),
        (
            r#"{"output_buffer_timeout":24}"#,
            "IDENTIFY output buffer timeout (24) is invalid",
        ),
        (
            r#"{"output_buffer_timeout":30001}"#,
            "IDENTIFY output buffer timeout (30001) is invalid",
        ),
        (
            r#"{"sample_rate":100}"#,
            "IDENTIFY sample rate (100) is invalid",
        ),
        (
            r#"{"sample_rate":-1}"#,
            "IDENTIFY sample rate (-1) is invalid",
        ),
        (
            r#"{"msg_timeout":999}"#,
            "IDENTIFY msg timeout (999) is invalid",
        ),
        (
            r#"{"msg_timeout":900001}"#,
            "IDENTIFY msg timeout (900001) is invalid",
        ),
    ];
    for (json, detail) in table {
        assert_eq!(
            run(json).unwrap_err(),
            (ErrorCode::BadBody, detail.to_string()),
            "{json}"
        );
    }
    for json in [
        "",
        "{",
        "[]",
        r#"{"heartbeat_interval":"x"}"#,
        r#"{"tls_v1":1}"#,
        "{} x",
    ] {
        assert_eq!(run(json).unwrap_err().0, ErrorCode::BadBody, "{json}");
    }
}

#[test]
fn upgrades_need_feature_negotiation_and_server_support() {
    let n = run(r#"{"tls_v1":true,"snappy":true}"#).unwrap();
    assert!(!n.tls && !n.snappy);
    let n = run(r#"{"feature_negotiation":true,"tls_v1":true,"snappy":true}"#).unwrap();
    assert!(n.tls && n.snappy);
    let n = run(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":9}"#).unwrap();
    assert_eq!(n.deflate_level, Some(6));
    let n = run(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":0}"#).unwrap();
    assert_eq!(n.deflate_level, Some(6));
    let n = run(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":3}"#).unwrap();
    assert_eq!(n.deflate_level, Some(3));
    assert_eq!(
        run(r#"{"feature_negotiation":true,"deflate":true,"snappy":true}"#)
            .unwrap_err()
            .0,
        ErrorCode::IdentifyFailed
    );
    let req =
        IdentifyRequest::parse(br#"{"feature_negotiation":true,"tls_v1":true,"snappy":true}"#)
            .unwrap();
    let off = IdentifyLimits {
        snappy_enabled: false,
        ..IdentifyLimits::default()
    };
    let n = negotiate(&req, &off).unwrap();
    assert!(!n.tls && !n.snappy);
}

#[test]
fn the_reply_carries_every_nsqd_key() {
    let n = run(r#"{"feature_negotiation":true,"deflate":true,"sample_rate":5}"#).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&IdentifyResponse::new(&n, &limits()).to_json()).unwrap();
    for key in [
        "max_rdy_count",
        "version",
        "max_msg_timeout",
        "msg_timeout",
        "tls_v1",
        "deflate",
        "deflate_level",
        "max_deflate_level",
        "snappy",
        "sample_rate",
        "auth_required",
        "output_buffer_size",
        "output_buffer_timeout",
        "topology_region",
        "topology_zone",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["deflate"], true);
    assert_eq!(v["deflate_level"], 6);
    assert_eq!(v["sample_rate"], 5);
    assert_eq!(v["max_rdy_count"], 2500);
    assert_eq!(v["version"], "test");
}
