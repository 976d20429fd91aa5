//! What the operator renders for `rustqueue-gateway` and what the gateway checks at startup:
//! its environment variable names, the limits of the standard and the Kodo gateway, the
//! Kodo gateway's ports and grace (docs/gateway.md, docs/kodo.md "The Kodo Gateway"). Both
//! sides import these, so a port or a limit cannot drift between them.

const MIB: u64 = 1024 * 1024;

/// The largest message the NSQ protocol side of a broker accepts (100 MiB).
pub const PROTOCOL_MAX_MESSAGE_BYTES: u64 = 100 * MIB;
/// The largest MPUB/HTTP body a broker accepts (128 MiB).
pub const BATCH_MAX_BODY_BYTES: u64 = 128 * MIB;

/// Environment variables the gateway reads (each also a `--flag`).
pub mod env {
    /// NSQ TCP listen address.
    pub const TCP_ADDRESS: &str = "RUSTQUEUE_GATEWAY_TCP_ADDRESS";
    /// HTTP listen address.
    pub const HTTP_ADDRESS: &str = "RUSTQUEUE_GATEWAY_HTTP_ADDRESS";
    /// Comma-separated discovery base URLs.
    pub const DISCOVERY_URLS: &str = "RUSTQUEUE_DISCOVERY_URLS";
    /// Largest HTTP body forwarded (bytes).
    pub const MAX_BODY_BYTES: &str = "RUSTQUEUE_GATEWAY_MAX_BODY_BYTES";
    /// Largest message (bytes).
    pub const MAX_MESSAGE_BYTES: &str = "RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES";
    /// Node-wide in-flight body budget (bytes).
    pub const MAX_INFLIGHT_BYTES: &str = "RUSTQUEUE_GATEWAY_MAX_INFLIGHT_BYTES";
    /// TCP tunnel cap.
    pub const MAX_CONNECTIONS: &str = "RUSTQUEUE_GATEWAY_MAX_CONNECTIONS";
    /// HTTP connection cap.
    pub const MAX_HTTP_CONNECTIONS: &str = "RUSTQUEUE_GATEWAY_MAX_HTTP_CONNECTIONS";
    /// Time to receive a whole HTTP body (milliseconds).
    pub const HTTP_BODY_TIMEOUT_MS: &str = "RUSTQUEUE_GATEWAY_HTTP_BODY_TIMEOUT_MS";
    /// Tunnel lifetime before re-placement (seconds).
    pub const TCP_MAX_CONNECTION_AGE_SECONDS: &str =
        "RUSTQUEUE_GATEWAY_TCP_MAX_CONNECTION_AGE_SECONDS";
    /// Grace after SIGTERM (seconds).
    pub const SHUTDOWN_GRACE_SECONDS: &str = "RUSTQUEUE_GATEWAY_SHUTDOWN_GRACE_SECONDS";
    /// Kodo gateway mode on or off (also read by discovery for its Kodo mode).
    pub const KODO_COMPATIBILITY_ENABLED: &str = "RUSTQUEUE_KODO_COMPATIBILITY_ENABLED";
    /// Kodo mode: this gateway's ordinal 0..2.
    pub const KODO_GATEWAY_ORDINAL: &str = "RUSTQUEUE_KODO_GATEWAY_ORDINAL";
    /// Kodo cleanup compatibility; `true` is refused (also read by discovery).
    pub const KODO_CLEANUP_ENABLED: &str = "RUSTQUEUE_KODO_CLEANUP_ENABLED";
    /// Discovery in Kodo mode: the address of the Kodo Gateways' publish Service.
    pub const KODO_GATEWAY_ADDRESS: &str = "RUSTQUEUE_KODO_GATEWAY_ADDRESS";
}

/// The Kodo gateway (docs/kodo.md, "The Kodo Gateway").
pub mod kodo {
    /// Gateway Pods: one per stats shard.
    pub const GATEWAYS: i32 = 3;
    /// The message limit a Kodo gateway must be given (and enforces).
    pub const MAX_MESSAGE_BYTES: u64 = super::PROTOCOL_MAX_MESSAGE_BYTES;
    /// The batch (MPUB body) limit a Kodo gateway must be given.
    pub const MAX_BODY_BYTES: u64 = super::BATCH_MAX_BODY_BYTES;
    /// The in-flight budget the operator renders for each Kodo gateway.
    pub const MAX_INFLIGHT_BYTES: u64 = 512 * super::MIB;
    /// TCP producer port of a Gateway Pod.
    pub const TCP_PORT: u16 = 4150;
    /// The three TCP identities a Kodo producer sees (Service ports, each forwarded to
    /// [`TCP_PORT`]; also the ports discovery advertises in `/nodes`).
    pub const TCP_IDENTITY_PORTS: [u16; 3] = [4150, 4152, 4153];
    /// `/stats` shard ports: shard k on `STATS_PORTS[k]`.
    pub const STATS_PORTS: [u16; 3] = [4151, 4154, 4155];
    /// The HTTP port a Kodo gateway must be given (stats shard 0).
    pub const HTTP_PORT: u16 = STATS_PORTS[0];
    /// `/ping`, `/metrics`, `/v1/health`: the probe port.
    pub const METRICS_PORT: u16 = 4160;
    /// What a Kodo gateway waits for open publishes after SIGTERM (its default grace).
    pub const SHUTDOWN_GRACE_SECONDS: u64 = 60;
    /// The Pod's termination grace: the gateway's grace plus time to exit.
    pub const TERMINATION_GRACE_SECONDS: i64 = 75;
    /// The `message` of the 404 answered to `/channel/delete` by discovery and the Kodo
    /// gateways alike (cleanup compatibility is not supported).
    pub const CLEANUP_DISABLED: &str = "E_NOT_FOUND Kodo cleanup compatibility is disabled";
    /// The `message` of the 404 a Kodo gateway answers to any other route of its stats
    /// ports (no HTTP publishing in Kodo mode).
    pub const FORWARDING_DISABLED: &str = "E_NOT_FOUND Kodo Gateway HTTP forwarding is disabled";
}
