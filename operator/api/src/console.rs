//! Names the console (`rustqueue-console`) and the operator that renders its Deployment agree
//! on: its port and environment variables (docs/console.md has the allowed values).

/// HTTP port of the console (Service `<name>-console`).
pub const HTTP_PORT: u16 = 4180;
/// Where the console image holds its built web pages.
pub const STATIC_DIR: &str = "/usr/share/rustqueue-console";

/// Environment variables the console reads.
pub mod env {
    /// Listen address (`0.0.0.0:4180`).
    pub const ADDRESS: &str = "RUSTQUEUE_CONSOLE_ADDRESS";
    /// Namespace of the RustQueue (fieldRef `metadata.namespace`).
    pub const NAMESPACE: &str = "POD_NAMESPACE";
    /// Name of the RustQueue.
    pub const NAME: &str = "RUSTQUEUE_NAME";
    /// The console token file (re-read on every broker call).
    pub const TOKEN_FILE: &str = "RUSTQUEUE_CONSOLE_TOKEN_FILE";
    /// The built web pages.
    pub const STATIC_DIR: &str = "RUSTQUEUE_CONSOLE_STATIC_DIR";
    /// Seconds between collections (1..5).
    pub const POLL_SECONDS: &str = "RUSTQUEUE_CONSOLE_POLL_SECONDS";
    /// Minutes of trend (1..60).
    pub const HISTORY_MINUTES: &str = "RUSTQUEUE_CONSOLE_HISTORY_MINUTES";
    /// Most seconds between two full observations of a broker (poll..300).
    pub const CATALOG_REFRESH_SECONDS: &str = "RUSTQUEUE_CONSOLE_CATALOG_REFRESH_SECONDS";
    /// The brokers' HTTP port.
    pub const BROKER_HTTP_PORT: &str = "RUSTQUEUE_BROKER_HTTP_PORT";
    /// `true` turns the management flow on.
    pub const MANAGEMENT_ENABLED: &str = "RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED";
    /// Session lifetime (60..1800).
    pub const UNLOCK_SECONDS: &str = "RUSTQUEUE_CONSOLE_MANAGEMENT_UNLOCK_SECONDS";
    /// Fence lifetime after a delete (60..86400).
    pub const TOMBSTONE_SECONDS: &str = "RUSTQUEUE_CONSOLE_TOMBSTONE_SECONDS";
    /// Base URL of discovery (default `http://<name>-discovery:4161`).
    pub const DISCOVERY_URL: &str = "RUSTQUEUE_CONSOLE_DISCOVERY_URL";
}
