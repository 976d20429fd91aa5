//! `rustqueued`: the RustQueue broker process.
//!
//! It puts the NSQ V2 TCP protocol, the nsqd-compatible HTTP API, TLS, AUTH and stream
//! compression in front of `rustqueue-engine`:
//!
//! ```text
//! start(Config) ── control::preflight, Engine::open, bind ──> Running
//!   ├─ tcp      one session per connection: IDENTIFY, TLS upgrade, Snappy/Deflate, AUTH
//!   ├─ http     nsqd's HTTP API + the control contract (`/v1/*`, `/metrics`), also on HTTPS
//!   ├─ lookupd  registrations with nsqlookupd (`network.lookupd_tcp_addresses`)
//!   └─ tls      the certificate watcher (new handshakes use renewed files)
//! ```
//!
//! The face: the configuration ([`Config`], read and checked through [`ConfigFile`]), [`start`]
//! and the [`Running`] broker it returns (the binary and the integration tests use it alike),
//! the binary's capabilities for the operator's preflight ([`binary_capabilities`],
//! [`MAX_STORAGE_FEATURE_LEVEL`]), the fail-closed exit after a storage fault ([`isolation`])
//! and the errors. Every other module is private. The feature `test-support` adds what only
//! tests need: the engine and a TLS reload on [`Running`], and the client side of the stream
//! compression (`testing::Compression`).

mod auth;
mod clients;
mod compress;
mod config;
mod control;
mod http;
mod https;
pub mod isolation;
mod lookupd;
mod server;
mod state;
mod tcp;
mod tls;

pub use config::tiering::options as tiering_options;
pub use config::{Config, ConfigError, ConfigFile, LogFormat, TlsConfig};
pub use control::binary_capabilities;
pub use control::capabilities::MAX_STORAGE_FEATURE_LEVEL;
pub use server::{Running, StartError, start};
pub use tls::TlsError;

/// What only the integration tests need (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    pub use crate::compress::{CompressError, Compression};
}
