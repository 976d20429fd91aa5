//! IDENTIFY: the JSON body, validation against the nsqd ranges and the negotiation reply.
//!
//! Validation follows nsqd `client_v2.go`: 0 keeps the server default, -1 disables where nsqd
//! allows it, anything else outside the range is `E_BAD_BODY` (fatal). Upgrades (TLS, Snappy,
//! Deflate) are only negotiated when `feature_negotiation` is true; asking for both Snappy and
//! Deflate is `E_IDENTIFY_FAILED`.

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, ProtocolError};

/// The IDENTIFY body as sent by clients. Unknown fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct IdentifyRequest {
    /// Client ID (free text, for stats).
    pub client_id: Option<String>,
    /// Client host name.
    pub hostname: Option<String>,
    /// Client library and version.
    pub user_agent: Option<String>,
    /// Ask for a JSON reply and allow upgrades.
    pub feature_negotiation: Option<bool>,
    /// Milliseconds; -1 disables, 0 = default.
    pub heartbeat_interval: Option<i64>,
    /// Bytes; -1 disables buffering, 0 = default.
    pub output_buffer_size: Option<i64>,
    /// Milliseconds; -1 disables, 0 = default.
    pub output_buffer_timeout: Option<i64>,
    /// Ask for a TLS upgrade.
    pub tls_v1: Option<bool>,
    /// Ask for Snappy framing.
    pub snappy: Option<bool>,
    /// Ask for raw Deflate.
    pub deflate: Option<bool>,
    /// Deflate level (<= 0 = 6, capped by the server maximum).
    pub deflate_level: Option<i64>,
    /// Percent of messages to deliver (0 = all).
    pub sample_rate: Option<i64>,
    /// Per-client message timeout, milliseconds; 0 = default.
    pub msg_timeout: Option<i64>,
    /// Topology region (accepted, echoed).
    pub topology_region: Option<String>,
    /// Topology zone (accepted, echoed).
    pub topology_zone: Option<String>,
}

impl IdentifyRequest {
    /// Parses the JSON body; any JSON error is `E_BAD_BODY`.
    pub fn parse(body: &[u8]) -> Result<Self, ProtocolError> {
        serde_json::from_slice(body).map_err(|e| {
            ProtocolError::new(
                ErrorCode::BadBody,
                format!("IDENTIFY failed to decode JSON body: {e}"),
            )
        })
    }
}

/// The server side of negotiation: defaults, ranges and what is available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifyLimits {
    /// Default heartbeat interval (ms).
    pub heartbeat_interval_ms: u64,
    /// Largest heartbeat interval (ms).
    pub max_heartbeat_interval_ms: u64,
    /// Default output buffer size (bytes).
    pub output_buffer_size: u64,
    /// Largest output buffer size (bytes).
    pub max_output_buffer_size: u64,
    /// Default output buffer timeout (ms).
    pub output_buffer_timeout_ms: u64,
    /// Smallest output buffer timeout (ms).
    pub min_output_buffer_timeout_ms: u64,
    /// Largest output buffer timeout (ms).
    pub max_output_buffer_timeout_ms: u64,
    /// Default message timeout (ms).
    pub msg_timeout_ms: u64,
    /// Largest message timeout (ms).
    pub max_msg_timeout_ms: u64,
    /// Largest RDY count (echoed).
    pub max_rdy_count: u64,
    /// TLS is configured.
    pub tls_available: bool,
    /// Snappy is enabled.
    pub snappy_enabled: bool,
    /// Deflate is enabled.
    pub deflate_enabled: bool,
    /// Highest deflate level.
    pub max_deflate_level: u32,
    /// AUTH is required.
    pub auth_required: bool,
    /// Broker version string.
    pub version: String,
}

impl Default for IdentifyLimits {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 30_000,
            max_heartbeat_interval_ms: 60_000,
            output_buffer_size: 16_384,
            max_output_buffer_size: 65_536,
            output_buffer_timeout_ms: 250,
            min_output_buffer_timeout_ms: 25,
            max_output_buffer_timeout_ms: 30_000,
            msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 900_000,
            max_rdy_count: 2_500,
            tls_available: false,
            snappy_enabled: true,
            deflate_enabled: true,
            max_deflate_level: 6,
            auth_required: false,
            version: String::new(),
        }
    }
}

/// The outcome of a valid IDENTIFY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Client ID.
    pub client_id: String,
    /// Client host name.
    pub hostname: String,
    /// Client library.
    pub user_agent: String,
    /// Reply with JSON instead of `OK`.
    pub feature_negotiation: bool,
    /// Heartbeat interval in ms; `None` = heartbeats disabled.
    pub heartbeat_interval_ms: Option<u64>,
    /// Output buffer size in bytes (1 = flush every frame).
    pub output_buffer_size: u64,
    /// Output buffer timeout in ms (0 = flush every frame).
    pub output_buffer_timeout_ms: u64,
    /// Effective message timeout (ms).
    pub msg_timeout_ms: u64,
    /// 0 = all messages, 1..=99 percent.
    pub sample_rate: u8,
    /// Upgrade to TLS after the reply.
    pub tls: bool,
    /// Upgrade to Snappy.
    pub snappy: bool,
    /// Upgrade to Deflate at this level.
    pub deflate_level: Option<u32>,
    /// Echoed.
    pub topology_region: String,
    /// Echoed.
    pub topology_zone: String,
}

impl Negotiated {
    /// Server defaults for a session that never sent IDENTIFY.
    pub fn defaults(limits: &IdentifyLimits) -> Self {
        Self {
            client_id: String::new(),
            hostname: String::new(),
            user_agent: String::new(),
            feature_negotiation: false,
            heartbeat_interval_ms: Some(limits.heartbeat_interval_ms),
            output_buffer_size: limits.output_buffer_size,
            output_buffer_timeout_ms: limits.output_buffer_timeout_ms,
            msg_timeout_ms: limits.msg_timeout_ms,
            sample_rate: 0,
            tls: false,
            snappy: false,
            deflate_level: None,
            topology_region: String::new(),
            topology_zone: String::new(),
        }
    }
}

fn bad(detail: String) -> ProtocolError {
    ProtocolError::new(ErrorCode::BadBody, detail)
}

/// Validates a request against the limits and decides the upgrades.
pub fn negotiate(
    req: &IdentifyRequest,
    limits: &IdentifyLimits,
) -> Result<Negotiated, ProtocolError> {
    let mut n = Negotiated::defaults(limits);
    n.client_id = req.client_id.clone().unwrap_or_default();
    n.hostname = req.hostname.clone().unwrap_or_default();
    n.user_agent = req.user_agent.clone().unwrap_or_default();
    n.topology_region = req.topology_region.clone().unwrap_or_default();
    n.topology_zone = req.topology_zone.clone().unwrap_or_default();

    match req.heartbeat_interval.unwrap_or(0) {
        -1 => n.heartbeat_interval_ms = None,
        0 => {}
        v if v >= 1000 && v as u64 <= limits.max_heartbeat_interval_ms => {
            n.heartbeat_interval_ms = Some(v as u64)
        }
        v => return Err(bad(format!("IDENTIFY heartbeat interval ({v}) is invalid"))),
    }

    let size = req.output_buffer_size.unwrap_or(0);
    let timeout = req.output_buffer_timeout.unwrap_or(0);
    match size {
        -1 => {
            n.output_buffer_size = 1;
            n.output_buffer_timeout_ms = 0;
        }
        0 => {}
        v if v >= 64 && v as u64 <= limits.max_output_buffer_size => {
            n.output_buffer_size = v as u64
        }
        v => return Err(bad(format!("IDENTIFY output buffer size ({v}) is invalid"))),
    }
    match timeout {
        -1 => n.output_buffer_timeout_ms = 0,
        0 => {}
        v if v as u64 >= limits.min_output_buffer_timeout_ms
            && v as u64 <= limits.max_output_buffer_timeout_ms =>
        {
            if size != -1 {
                n.output_buffer_timeout_ms = v as u64;
            }
        }
        v => {
            return Err(bad(format!(
                "IDENTIFY output buffer timeout ({v}) is invalid"
            )));
        }
    }

    match req.sample_rate.unwrap_or(0) {
        v @ 0..=99 => n.sample_rate = v as u8,
        v => return Err(bad(format!("IDENTIFY sample rate ({v}) is invalid"))),
    }

    match req.msg_timeout.unwrap_or(0) {
        0 => {}
        v if v >= 1000 && v as u64 <= limits.max_msg_timeout_ms => n.msg_timeout_ms = v as u64,
        v => return Err(bad(format!("IDENTIFY msg timeout ({v}) is invalid"))),
    }

    n.feature_negotiation = req.feature_negotiation.unwrap_or(false);
    if n.feature_negotiation {
        n.tls = limits.tls_available && req.tls_v1.unwrap_or(false);
        n.snappy = limits.snappy_enabled && req.snappy.unwrap_or(false);
        let deflate = limits.deflate_enabled && req.deflate.unwrap_or(false);
        if n.snappy && deflate {
            return Err(ProtocolError::new(
                ErrorCode::IdentifyFailed,
                "cannot enable both deflate and snappy compression",
            ));
        }
        if deflate {
            let level = req.deflate_level.unwrap_or(0);
            let level = if level <= 0 { 6 } else { level.min(9) as u32 };
            n.deflate_level = Some(level.min(limits.max_deflate_level));
        }
    }
    Ok(n)
}

/// The JSON reply sent when `feature_negotiation` is true.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifyResponse {
    /// Largest RDY.
    pub max_rdy_count: u64,
    /// Broker version.
    pub version: String,
    /// Largest message timeout (ms).
    pub max_msg_timeout: u64,
    /// Effective message timeout (ms).
    pub msg_timeout: u64,
    /// TLS upgrade follows.
    pub tls_v1: bool,
    /// Deflate upgrade follows.
    pub deflate: bool,
    /// Deflate level (0 if none).
    pub deflate_level: u32,
    /// Highest deflate level.
    pub max_deflate_level: u32,
    /// Snappy upgrade follows.
    pub snappy: bool,
    /// Effective sample rate.
    pub sample_rate: u8,
    /// AUTH required before PUB/SUB.
    pub auth_required: bool,
    /// Effective output buffer size.
    pub output_buffer_size: u64,
    /// Effective output buffer timeout (ms, 0 = off).
    pub output_buffer_timeout: u64,
    /// Echoed.
    pub topology_region: String,
    /// Echoed.
    pub topology_zone: String,
}

impl IdentifyResponse {
    /// Builds the reply for a negotiated session.
    pub fn new(n: &Negotiated, limits: &IdentifyLimits) -> Self {
        Self {
            max_rdy_count: limits.max_rdy_count,
            version: limits.version.clone(),
            max_msg_timeout: limits.max_msg_timeout_ms,
            msg_timeout: n.msg_timeout_ms,
            tls_v1: n.tls,
            deflate: n.deflate_level.is_some(),
            deflate_level: n.deflate_level.unwrap_or(0),
            max_deflate_level: limits.max_deflate_level,
            snappy: n.snappy,
            sample_rate: n.sample_rate,
            auth_required: limits.auth_required,
            output_buffer_size: n.output_buffer_size,
            output_buffer_timeout: n.output_buffer_timeout_ms,
            topology_region: n.topology_region.clone(),
            topology_zone: n.topology_zone.clone(),
        }
    }

    /// Serialised reply.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}
