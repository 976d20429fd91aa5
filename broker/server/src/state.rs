//! What every TCP session and HTTP handler shares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use rustqueue_engine::Engine;
use rustqueue_protocol::DecoderLimits;
use rustqueue_protocol::identify::IdentifyLimits;
use tokio::sync::watch;

use crate::auth::AuthClient;
use crate::clients::ClientRegistry;
use crate::config::Config;

/// The broker version reported in IDENTIFY, `/info`, `/stats` and lookup answers.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Shared broker state.
pub struct Shared {
    /// Effective configuration.
    pub cfg: Config,
    /// The storage engine.
    pub engine: Engine,
    /// IDENTIFY defaults and ranges.
    pub identify: IdentifyLimits,
    /// Command decoder limits.
    pub decoder: DecoderLimits,
    /// TLS, if configured; reloaded when its files change.
    pub tls: Option<Arc<crate::tls::TlsReloader>>,
    /// AUTH servers.
    pub auth: AuthClient,
    /// Live TCP clients.
    pub clients: ClientRegistry,
    /// Process start.
    pub start_time: SystemTime,
    /// Bound TCP address.
    pub tcp_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// Bound HTTPS address, when `network.https_address` is set.
    pub https_addr: Option<SocketAddr>,
    /// Host name for `/info` and lookup answers.
    pub hostname: String,
    /// Flips to true when shutdown starts.
    pub shutdown: watch::Receiver<bool>,
    /// The control contract (drain, tokens, metrics); see [`crate::control`].
    pub control: Arc<crate::control::ControlState>,
}

impl Shared {
    /// Port advertised for TCP.
    pub fn tcp_port(&self) -> u16 {
        self.cfg
            .network
            .advertised_tcp_port
            .unwrap_or(self.tcp_addr.port())
    }

    /// Port advertised for HTTP.
    pub fn http_port(&self) -> u16 {
        self.cfg
            .network
            .advertised_http_port
            .unwrap_or(self.http_addr.port())
    }

    /// Unix start time in seconds.
    pub fn start_unix(&self) -> u64 {
        self.start_time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// Limits derived from the configuration.
pub fn identify_limits(cfg: &Config, tls: bool) -> IdentifyLimits {
    let l = &cfg.limits;
    IdentifyLimits {
        heartbeat_interval_ms: l.heartbeat_interval_ms,
        max_heartbeat_interval_ms: l.max_heartbeat_interval_ms,
        output_buffer_size: l.output_buffer_size,
        max_output_buffer_size: l.max_output_buffer_size,
        output_buffer_timeout_ms: l.output_buffer_timeout_ms,
        min_output_buffer_timeout_ms: l.min_output_buffer_timeout_ms,
        max_output_buffer_timeout_ms: l.max_output_buffer_timeout_ms,
        msg_timeout_ms: cfg.queue.message_timeout_ms,
        max_msg_timeout_ms: cfg.queue.max_message_timeout_ms,
        max_rdy_count: l.max_rdy_count,
        tls_available: tls,
        snappy_enabled: cfg.network.snappy_enabled,
        deflate_enabled: cfg.network.deflate_enabled,
        max_deflate_level: cfg.network.max_deflate_level,
        auth_required: !cfg.security.auth_http_addresses.is_empty(),
        version: VERSION.to_owned(),
    }
}

/// Decoder limits derived from the configuration.
pub fn decoder_limits(cfg: &Config) -> DecoderLimits {
    DecoderLimits {
        max_line_bytes: 1024,
        max_message_bytes: cfg.queue.max_message_bytes,
        max_body_bytes: cfg.limits.max_body_bytes,
        max_control_body_bytes: 1024 * 1024,
        max_defer_ms: cfg.queue.max_defer_ms,
    }
}
