//! `spec.console`: the operator runs `rustqueue-console` (docs/console.md) beside the brokers.
//! Whether it may manage topics and channels is the top-level `consoleManagementEnabled`
//! (the brokers read the same switch); the settings here only shape the console Pod.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The console Deployment `<n>-console` and what it is told.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[x_kube(
    validation = Rule::new("self.catalogRefreshSeconds >= self.pollIntervalSeconds")
        .message("console.catalogRefreshSeconds must be at least console.pollIntervalSeconds"),
)]
#[serde(rename_all = "camelCase")]
pub struct Console {
    /// Run the console (`false` deletes its objects).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Seconds between two collections from the brokers.
    #[serde(default = "poll_interval_seconds")]
    #[schemars(range(min = 1, max = 5))]
    pub poll_interval_seconds: u32,
    /// Seconds after which a broker's whole catalog is fetched again even if its head did not
    /// change.
    #[serde(default = "catalog_refresh_seconds")]
    #[schemars(range(min = 1, max = 300))]
    pub catalog_refresh_seconds: u32,
    /// Minutes of rate history the console keeps (in memory).
    #[serde(default = "history_minutes")]
    #[schemars(range(min = 1, max = 60))]
    pub history_minutes: u32,
    /// Management session and delete fence (used while `consoleManagementEnabled` is true).
    #[serde(default)]
    pub management: ConsoleManagement,
    /// Console container resources.
    #[serde(default)]
    pub resources: ConsoleResources,
}

impl Default for Console {
    fn default() -> Self {
        Self {
            enabled: true,
            poll_interval_seconds: poll_interval_seconds(),
            catalog_refresh_seconds: catalog_refresh_seconds(),
            history_minutes: history_minutes(),
            management: ConsoleManagement::default(),
            resources: ConsoleResources::default(),
        }
    }
}

/// How long an unlocked management session lasts and how long a deleted topic stays fenced.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleManagement {
    /// Seconds an unlocked session may change things (fixed; reads do not extend it).
    #[serde(default = "unlock_seconds")]
    #[schemars(range(min = 60, max = 1800))]
    pub unlock_seconds: u32,
    /// Seconds a deleted topic or channel is fenced on every broker (publishes get 409).
    #[serde(default = "tombstone_seconds")]
    #[schemars(range(min = 60, max = 86400))]
    pub tombstone_seconds: u32,
}

impl Default for ConsoleManagement {
    fn default() -> Self {
        Self {
            unlock_seconds: unlock_seconds(),
            tombstone_seconds: tombstone_seconds(),
        }
    }
}

/// Console container resources (`null` drops a limit).
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleResources {
    /// CPU request.
    #[serde(default = "cpu_request")]
    #[schemars(length(min = 1))]
    pub cpu_request: String,
    /// Memory request.
    #[serde(default = "memory_request")]
    #[schemars(length(min = 1))]
    pub memory_request: String,
    /// CPU limit.
    #[serde(default = "cpu_limit")]
    pub cpu_limit: Option<String>,
    /// Memory limit.
    #[serde(default = "memory_limit")]
    pub memory_limit: Option<String>,
}

impl Default for ConsoleResources {
    fn default() -> Self {
        Self {
            cpu_request: cpu_request(),
            memory_request: memory_request(),
            cpu_limit: cpu_limit(),
            memory_limit: memory_limit(),
        }
    }
}

fn yes() -> bool {
    true
}
fn poll_interval_seconds() -> u32 {
    2
}
fn catalog_refresh_seconds() -> u32 {
    30
}
fn history_minutes() -> u32 {
    15
}
fn unlock_seconds() -> u32 {
    1800
}
fn tombstone_seconds() -> u32 {
    600
}
fn cpu_request() -> String {
    "50m".into()
}
fn memory_request() -> String {
    "96Mi".into()
}
fn cpu_limit() -> Option<String> {
    Some("500m".into())
}
fn memory_limit() -> Option<String> {
    Some("256Mi".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_console_reads_as_the_documented_defaults() {
        let c: Console = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(c, Console::default());
        assert!(c.enabled);
        assert_eq!(
            (
                c.poll_interval_seconds,
                c.catalog_refresh_seconds,
                c.history_minutes
            ),
            (2, 30, 15)
        );
        assert_eq!(
            (c.management.unlock_seconds, c.management.tombstone_seconds),
            (1800, 600)
        );
        assert_eq!(c.resources.memory_limit.as_deref(), Some("256Mi"));
    }

    #[test]
    fn a_null_limit_drops_it() {
        let c: Console =
            serde_json::from_value(serde_json::json!({"resources": {"cpuLimit": null}})).unwrap();
        assert_eq!(c.resources.cpu_limit, None);
        assert_eq!(c.resources.cpu_request, "50m");
    }
}
