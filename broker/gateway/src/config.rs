//! Command line and environment (`RUSTQUEUE_GATEWAY_*`), and the startup validation that turns
//! them into a [`Config`] the rest of the gateway can trust (docs/gateway.md, "Flags and
//! environment").

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use rustqueue_api::gateway::{BATCH_MAX_BODY_BYTES, PROTOCOL_MAX_MESSAGE_BYTES, env, kodo};

const MIB: u64 = 1024 * 1024;
/// Default grace after SIGTERM of the standard gateway (seconds).
const SHUTDOWN_GRACE_SECONDS: u64 = 30;
/// The most connections one gateway may hold (a tokio semaphore's limit is far above).
pub const MAX_CONNECTIONS_LIMIT: u64 = 1_000_000;

/// What the operator or a user sets. Every flag also reads its environment variable.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "rustqueue-gateway",
    version,
    about = "Producer gateway for RustQueue: TCP tunnels and HTTP forwarding to publish-ready brokers"
)]
pub struct Cli {
    /// NSQ TCP listen address (opaque tunnels to brokers).
    #[arg(
        long,
        env = env::TCP_ADDRESS,
        default_value = "0.0.0.0:4150"
    )]
    pub tcp_address: SocketAddr,
    /// HTTP listen address (`/ping`, `/v1/health`, `/metrics`; everything else forwarded).
    #[arg(
        long,
        env = env::HTTP_ADDRESS,
        default_value = "0.0.0.0:4151"
    )]
    pub http_address: SocketAddr,
    /// Comma-separated discovery base URLs; every one is polled and they must agree.
    #[arg(
        long,
        env = env::DISCOVERY_URLS,
        value_delimiter = ',',
        default_value = "http://rustqueue-discovery:4161"
    )]
    pub discovery_urls: Vec<String>,
    /// Largest HTTP request body forwarded (bytes).
    #[arg(long, env = env::MAX_BODY_BYTES, default_value_t = 64 * MIB)]
    pub max_body_bytes: u64,
    /// Largest single message (bytes); must not exceed the body limit.
    #[arg(long, env = env::MAX_MESSAGE_BYTES, default_value_t = 20 * MIB)]
    pub max_message_bytes: u64,
    /// Node-wide budget of HTTP body bytes in flight (bytes).
    #[arg(long, env = env::MAX_INFLIGHT_BYTES, default_value_t = 512 * MIB)]
    pub max_inflight_bytes: u64,
    /// Most concurrent TCP tunnels; further connections are closed at once.
    #[arg(
        long,
        env = env::MAX_CONNECTIONS,
        default_value_t = 10_000
    )]
    pub max_connections: u64,
    /// Most concurrent HTTP connections over all HTTP listeners; further connections are
    /// closed at once.
    #[arg(
        long,
        env = env::MAX_HTTP_CONNECTIONS,
        default_value_t = 10_000
    )]
    pub max_http_connections: u64,
    /// Time allowed to receive a whole HTTP request body (milliseconds).
    #[arg(
        long,
        env = env::HTTP_BODY_TIMEOUT_MS,
        default_value_t = 30_000
    )]
    pub http_body_timeout_ms: u64,
    /// Base lifetime of a TCP tunnel before it is closed for re-placement (seconds, ±10%
    /// jitter; 0 disables rotation).
    #[arg(
        long,
        env = env::TCP_MAX_CONNECTION_AGE_SECONDS,
        default_value_t = 300
    )]
    pub tcp_max_connection_age_seconds: u64,
    /// Time given to open tunnels, requests and publishes after SIGTERM (seconds; default 30,
    /// 60 in Kodo mode).
    #[arg(long, env = env::SHUTDOWN_GRACE_SECONDS)]
    pub shutdown_grace_seconds: Option<u64>,
    /// Kodo gateway mode: terminate the producer protocol and serve sharded `/stats`
    /// (docs/kodo.md, "The Kodo Gateway").
    #[arg(
        long,
        env = env::KODO_COMPATIBILITY_ENABLED,
        default_value_t = false
    )]
    pub kodo_compatibility_enabled: bool,
    /// Kodo mode: this gateway's ordinal, 0..2 (else taken from the `POD_NAME` suffix).
    #[arg(long, env = env::KODO_GATEWAY_ORDINAL)]
    pub kodo_gateway_ordinal: Option<String>,
    /// The Pod's name (`<n>-kodo-gateway-<ordinal>`), read when no ordinal is given.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Kodo cleanup compatibility: not supported; `true` is refused at startup.
    #[arg(long, env = env::KODO_CLEANUP_ENABLED, default_value_t = false)]
    pub kodo_cleanup_enabled: bool,
    /// Log lines as `text` or `json` (one object a line: timestamp, level, target, message).
    #[arg(long, env = rustqueue_api::telemetry::LOG_FORMAT_ENV, default_value = "text")]
    pub log_format: rustqueue_api::telemetry::LogFormat,
}

/// A configuration refused at startup; each says which setting to change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A size or count limit of 0.
    #[error("{0} must be greater than 0")]
    Zero(&'static str),
    /// The message limit above the body limit.
    #[error("max message bytes ({message}) must not exceed max body bytes ({body})")]
    MessageAboveBody {
        /// Message limit.
        message: u64,
        /// Body limit.
        body: u64,
    },
    /// A limit above what a broker accepts.
    #[error("{name} ({value}) must not exceed {max}")]
    AboveMax {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// The in-flight budget smaller than one body.
    #[error("max inflight bytes ({inflight}) must be at least max body bytes ({body})")]
    InflightBelowBody {
        /// Budget.
        inflight: u64,
        /// Body limit.
        body: u64,
    },
    /// No usable discovery URL.
    #[error("no discovery URL: set --discovery-urls / RUSTQUEUE_DISCOVERY_URLS")]
    NoDiscovery,
    /// A discovery URL that is not `http://host[:port]`.
    #[error("discovery URL {0:?} must look like http://host:port")]
    BadDiscoveryUrl(String),
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// TCP listen address.
    pub tcp_address: SocketAddr,
    /// HTTP listen address.
    pub http_address: SocketAddr,
    /// Discovery base URLs without a trailing slash.
    pub discovery_urls: Vec<String>,
    /// Largest forwarded body.
    pub max_body_bytes: u64,
    /// Largest single message.
    pub max_message_bytes: u64,
    /// Node-wide in-flight body budget (fits a `u32`).
    pub max_inflight_bytes: u32,
    /// Tunnel cap.
    pub max_connections: usize,
    /// HTTP connection cap (all HTTP listeners together).
    pub max_http_connections: usize,
    /// Body receive deadline.
    pub http_body_timeout: Duration,
    /// Tunnel base lifetime; `None` disables rotation.
    pub tcp_max_connection_age: Option<Duration>,
    /// Shutdown grace.
    pub shutdown_grace: Duration,
}

impl Cli {
    /// Apply the startup validation rules (docs/gateway.md).
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let nonzero = [
            ("max body bytes", self.max_body_bytes),
            ("max message bytes", self.max_message_bytes),
            ("max inflight bytes", self.max_inflight_bytes),
            ("max connections", self.max_connections),
            ("max http connections", self.max_http_connections),
            ("http body timeout", self.http_body_timeout_ms),
        ];
        if let Some((name, _)) = nonzero.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero(name));
        }
        check_max(
            "max message bytes",
            self.max_message_bytes,
            PROTOCOL_MAX_MESSAGE_BYTES,
        )?;
        check_max("max body bytes", self.max_body_bytes, BATCH_MAX_BODY_BYTES)?;
        check_max(
            "max connections",
            self.max_connections,
            MAX_CONNECTIONS_LIMIT,
        )?;
        check_max(
            "max http connections",
            self.max_http_connections,
            MAX_CONNECTIONS_LIMIT,
        )?;
        check_max("http body timeout ms", self.http_body_timeout_ms, 3_600_000)?;
        let default_grace = if self.kodo_compatibility_enabled {
            kodo::SHUTDOWN_GRACE_SECONDS
        } else {
            SHUTDOWN_GRACE_SECONDS
        };
        let grace_seconds = self.shutdown_grace_seconds.unwrap_or(default_grace);
        check_max("shutdown grace seconds", grace_seconds, 3_600)?;
        check_max(
            "tcp max connection age seconds",
            self.tcp_max_connection_age_seconds,
            86_400 * 30,
        )?;
        if self.max_message_bytes > self.max_body_bytes {
            return Err(ConfigError::MessageAboveBody {
                message: self.max_message_bytes,
                body: self.max_body_bytes,
            });
        }
        if self.max_inflight_bytes < self.max_body_bytes {
            return Err(ConfigError::InflightBelowBody {
                inflight: self.max_inflight_bytes,
                body: self.max_body_bytes,
            });
        }
        let max_inflight_bytes =
            u32::try_from(self.max_inflight_bytes).map_err(|_| ConfigError::AboveMax {
                name: "max inflight bytes",
                value: self.max_inflight_bytes,
                max: u64::from(u32::MAX),
            })?;
        Ok(Config {
            tcp_address: self.tcp_address,
            http_address: self.http_address,
            discovery_urls: discovery_urls(&self.discovery_urls)?,
            max_body_bytes: self.max_body_bytes,
            max_message_bytes: self.max_message_bytes,
            max_inflight_bytes,
            max_connections: self.max_connections as usize,
            max_http_connections: self.max_http_connections as usize,
            http_body_timeout: Duration::from_millis(self.http_body_timeout_ms),
            tcp_max_connection_age: (self.tcp_max_connection_age_seconds > 0)
                .then(|| Duration::from_secs(self.tcp_max_connection_age_seconds)),
            shutdown_grace: Duration::from_secs(grace_seconds),
        })
    }
}

fn check_max(name: &'static str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::AboveMax { name, value, max });
    }
    Ok(())
}

/// Trim, drop empty entries and trailing slashes, and require `http://host...`.
fn discovery_urls(raw: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut urls = Vec::new();
    for url in raw.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let host = url.strip_prefix("http://").unwrap_or("");
        if host.is_empty() || host.starts_with('/') || host.contains(char::is_whitespace) {
            return Err(ConfigError::BadDiscoveryUrl(url.to_string()));
        }
        let url = url.trim_end_matches('/').to_string();
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    if urls.is_empty() {
        return Err(ConfigError::NoDiscovery);
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut all = vec!["rustqueue-gateway"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap()
    }

    #[test]
    fn defaults_are_the_documented_ones_and_valid() {
        let c = cli(&[]).validate().unwrap();
        assert_eq!(c.tcp_address.to_string(), "0.0.0.0:4150");
        assert_eq!(c.http_address.to_string(), "0.0.0.0:4151");
        assert_eq!(c.discovery_urls, vec!["http://rustqueue-discovery:4161"]);
        assert_eq!(c.max_body_bytes, 64 * MIB);
        assert_eq!(c.max_message_bytes, 20 * MIB);
        assert_eq!(u64::from(c.max_inflight_bytes), 512 * MIB);
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(c.max_http_connections, 10_000);
        assert_eq!(c.http_body_timeout, Duration::from_secs(30));
        assert_eq!(c.tcp_max_connection_age, Some(Duration::from_secs(300)));
        assert_eq!(c.shutdown_grace, Duration::from_secs(30));
    }

    #[test]
    fn startup_validation_refuses_each_rule() {
        let cases: &[(&[&str], ConfigError)] = &[
            (
                &["--max-body-bytes", "0"],
                ConfigError::Zero("max body bytes"),
            ),
            (
                &["--max-message-bytes", "0"],
                ConfigError::Zero("max message bytes"),
            ),
            (
                &["--max-inflight-bytes", "0"],
                ConfigError::Zero("max inflight bytes"),
            ),
            (
                &["--max-connections", "0"],
                ConfigError::Zero("max connections"),
            ),
            (
                &["--max-http-connections", "0"],
                ConfigError::Zero("max http connections"),
            ),
            (
                &["--max-http-connections", "1000001"],
                ConfigError::AboveMax {
                    name: "max http connections",
                    value: 1_000_001,
                    max: MAX_CONNECTIONS_LIMIT,
                },
            ),
            (
                &["--http-body-timeout-ms", "0"],
                ConfigError::Zero("http body timeout"),
            ),
            (
                &[
                    "--max-message-bytes",
                    "2000",
                    "--max-body-bytes",
                    "1000",
                    "--max-inflight-bytes",
                    "5000",
                ],
                ConfigError::MessageAboveBody {
                    message: 2000,
                    body: 1000,
                },
            ),
            (
                &[
                    "--max-message-bytes",
                    "104857601",
                    "--max-body-bytes",
                    "134217728",
                ],
                ConfigError::AboveMax {
                    name: "max message bytes",
                    value: 104_857_601,
                    max: 100 * MIB,
                },
            ),
            (
                &["--max-body-bytes", "134217729"],
                ConfigError::AboveMax {
                    name: "max body bytes",
                    value: 134_217_729,
                    max: 128 * MIB,
                },
            ),
            (
                &["--max-inflight-bytes", "1000"],
                ConfigError::InflightBelowBody {
                    inflight: 1000,
                    body: 64 * MIB,
                },
            ),
            (
                &["--max-inflight-bytes", "4294967296"],
                ConfigError::AboveMax {
                    name: "max inflight bytes",
                    value: 1 << 32,
                    max: u64::from(u32::MAX),
                },
            ),
            (&["--discovery-urls", " , "], ConfigError::NoDiscovery),
            (
                &["--discovery-urls", "rustqueue-discovery:4161"],
                ConfigError::BadDiscoveryUrl("rustqueue-discovery:4161".into()),
            ),
            (
                &["--discovery-urls", "https://d:4161"],
                ConfigError::BadDiscoveryUrl("https://d:4161".into()),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(cli(args).validate().unwrap_err(), *want, "{args:?}");
        }
    }

    #[test]
    fn zero_age_disables_rotation_and_urls_are_normalised() {
        let c = cli(&[
            "--tcp-max-connection-age-seconds",
            "0",
            "--discovery-urls",
            "http://a:4161/, http://b:4161,http://a:4161",
        ])
        .validate()
        .unwrap();
        assert_eq!(c.tcp_max_connection_age, None);
        assert_eq!(c.discovery_urls, vec!["http://a:4161", "http://b:4161"]);
    }
}
