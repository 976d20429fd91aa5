//! The console's configuration: environment variables, each checked against its allowed range
//! before anything starts (docs/console.md has the table).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rustqueue_api::labels;

/// Session lifetime (60..1800).
pub use rustqueue_api::labels::console_env::MANAGEMENT_UNLOCK_SECONDS as UNLOCK_SECONDS;
pub use rustqueue_api::labels::console_env::{
    ADDRESS, BROKER_HTTP_PORT, CATALOG_REFRESH_SECONDS, HISTORY_MINUTES, MANAGEMENT_ENABLED, NAME,
    POLL_SECONDS, TOKEN_FILE, TOMBSTONE_SECONDS,
};
/// Namespace of the RustQueue (the Pod's own).
pub use rustqueue_api::labels::env::POD_NAMESPACE as NAMESPACE;

/// The built web pages (read by the console only).
pub const STATIC_DIR: &str = "RUSTQUEUE_CONSOLE_STATIC_DIR";
/// Base URL of discovery, whose `/v1/health` gates management (read by the console only;
/// default `http://<name>-discovery:4161`).
pub const DISCOVERY_URL: &str = "RUSTQUEUE_CONSOLE_DISCOVERY_URL";
/// Where the console image holds its built web pages.
pub const DEFAULT_STATIC_DIR: &str = "/usr/share/rustqueue-console";

/// A variable that is set but not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is invalid: {expected}")]
pub struct ConfigError {
    /// The variable.
    pub name: &'static str,
    /// What it held.
    pub value: String,
    /// What it may hold.
    pub expected: String,
}

/// Everything the console reads from its environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the HTTP server listens.
    pub address: SocketAddr,
    /// The RustQueue's namespace.
    pub namespace: String,
    /// The RustQueue's name.
    pub name: String,
    /// The console token file.
    pub token_file: PathBuf,
    /// The built web pages.
    pub static_dir: PathBuf,
    /// Time between collections.
    pub poll: Duration,
    /// Trend length.
    pub history: Duration,
    /// Most time between two full observations of one broker.
    pub catalog_refresh: Duration,
    /// The brokers' HTTP port.
    pub broker_http_port: u16,
    /// Whether the management flow is on.
    pub management_enabled: bool,
    /// Lifetime of an unlocked session.
    pub unlock: Duration,
    /// Tombstone lifetime after a delete.
    pub tombstone: Duration,
    /// Base URL of discovery (`http://<name>-discovery:4161`).
    pub discovery_url: String,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (an unset or empty variable takes its default).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let poll_seconds = number(POLL_SECONDS, get(POLL_SECONDS), 2, 1, 5)?;
        let name = get(NAME).unwrap_or_else(|| "rustqueue".into());
        let namespace = get(NAMESPACE).unwrap_or_else(|| "default".into());
        let address = match get(ADDRESS) {
            None => SocketAddr::from(([0, 0, 0, 0], labels::CONSOLE_HTTP_PORT)),
            Some(v) => v.parse().map_err(|_| ConfigError {
                name: ADDRESS,
                value: v.clone(),
                expected: "an ip:port socket address such as 0.0.0.0:4180".into(),
            })?,
        };
        Ok(Config {
            address,
            token_file: get(TOKEN_FILE)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(labels::SECRETS_DIR).join("console-token")),
            static_dir: get(STATIC_DIR)
                .unwrap_or_else(|| DEFAULT_STATIC_DIR.into())
                .into(),
            poll: Duration::from_secs(poll_seconds),
            history: Duration::from_secs(
                60 * number(HISTORY_MINUTES, get(HISTORY_MINUTES), 15, 1, 60)?,
            ),
            catalog_refresh: Duration::from_secs(number(
                CATALOG_REFRESH_SECONDS,
                get(CATALOG_REFRESH_SECONDS),
                30.max(poll_seconds),
                poll_seconds,
                300,
            )?),
            broker_http_port: u16::try_from(number(
                BROKER_HTTP_PORT,
                get(BROKER_HTTP_PORT),
                u64::from(labels::BROKER_HTTP_PORT),
                1,
                65535,
            )?)
            .unwrap_or(labels::BROKER_HTTP_PORT),
            management_enabled: boolean(MANAGEMENT_ENABLED, get(MANAGEMENT_ENABLED))?,
            unlock: Duration::from_secs(number(
                UNLOCK_SECONDS,
                get(UNLOCK_SECONDS),
                1800,
                60,
                1800,
            )?),
            tombstone: Duration::from_secs(number(
                TOMBSTONE_SECONDS,
                get(TOMBSTONE_SECONDS),
                600,
                60,
                86_400,
            )?),
            discovery_url: get(DISCOVERY_URL).unwrap_or_else(|| {
                format!("http://{name}-discovery:{}", labels::DISCOVERY_HTTP_PORT)
            }),
            name,
            namespace,
        })
    }

    /// Samples kept in the trend: history / poll.
    pub fn history_samples(&self) -> usize {
        let poll = self.poll.as_secs().max(1);
        usize::try_from(self.history.as_secs() / poll)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// How old the last collection may be for `/readyz`: max(3 × poll, 10 s).
    pub fn ready_staleness(&self) -> Duration {
        (self.poll * 3).max(Duration::from_secs(10))
    }

    /// How old a snapshot may be for a management decision: 3 × poll + 2 s.
    pub fn management_staleness(&self) -> Duration {
        self.poll * 3 + Duration::from_secs(2)
    }

    /// The typed confirmation that unlocks management: `<namespace>/<name>`.
    pub fn confirmation(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn number(
    name: &'static str,
    value: Option<String>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(v) = value else { return Ok(default) };
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ConfigError {
            name,
            value: v,
            expected: format!("a whole number from {min} to {max}"),
        }),
    }
}

fn boolean(name: &'static str, value: Option<String>) -> Result<bool, ConfigError> {
    match value.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(_) => Err(ConfigError {
            name,
            value: value.unwrap_or_default(),
            expected: "true or false".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_follow_the_documented_table() {
        let c = with(&[]).unwrap();
        assert_eq!(c.address.to_string(), "0.0.0.0:4180");
        assert_eq!(c.name, "rustqueue");
        assert_eq!(c.poll, Duration::from_secs(2));
        assert_eq!(c.history_samples(), 450);
        assert_eq!(c.catalog_refresh, Duration::from_secs(30));
        assert_eq!(c.broker_http_port, 4151);
        assert!(!c.management_enabled);
        assert_eq!(c.unlock, Duration::from_secs(1800));
        assert_eq!(c.tombstone, Duration::from_secs(600));
        assert_eq!(c.discovery_url, "http://rustqueue-discovery:4161");
        assert_eq!(
            c.token_file,
            PathBuf::from("/run/secrets/rustqueue/console-token")
        );
        assert_eq!(c.ready_staleness(), Duration::from_secs(10));
    }

    #[test]
    fn out_of_range_values_name_the_variable_and_the_range() {
        let table: &[(&str, &str, &str)] = &[
            (POLL_SECONDS, "6", "from 1 to 5"),
            (POLL_SECONDS, "0", "from 1 to 5"),
            (HISTORY_MINUTES, "61", "from 1 to 60"),
            (CATALOG_REFRESH_SECONDS, "1", "from 2 to 300"),
            (UNLOCK_SECONDS, "59", "from 60 to 1800"),
            (TOMBSTONE_SECONDS, "86401", "from 60 to 86400"),
            (BROKER_HTTP_PORT, "70000", "from 1 to 65535"),
            (MANAGEMENT_ENABLED, "maybe", "true or false"),
            (ADDRESS, "localhost", "socket address"),
        ];
        for (name, value, expected) in table {
            let e = with(&[(name, value)]).unwrap_err();
            assert_eq!(&e.name, name);
            let text = e.to_string();
            assert!(text.contains(name) && text.contains(expected), "{text}");
        }
    }

    #[test]
    fn the_catalog_refresh_may_not_be_shorter_than_the_poll() {
        let c = with(&[(POLL_SECONDS, "5"), (CATALOG_REFRESH_SECONDS, "5")]).unwrap();
        assert_eq!(c.catalog_refresh, Duration::from_secs(5));
        assert!(with(&[(POLL_SECONDS, "5"), (CATALOG_REFRESH_SECONDS, "4")]).is_err());
        assert_eq!(
            with(&[(POLL_SECONDS, "5"), (HISTORY_MINUTES, "1")])
                .unwrap()
                .history_samples(),
            12
        );
    }
}
