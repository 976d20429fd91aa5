//! Helpers for the Kubernetes scenario tests: run the pinned `kubectl` and the official pynsq
//! client (both installed by `scripts/deps.sh`) and wait on conditions.

pub mod tools;

use std::future::Future;
use std::time::{Duration, Instant};

/// Poll `check` every 500 ms until it returns `Some`, or panic after `limit` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The repository root.
pub fn repo_root() -> std::path::PathBuf {
    crate_dir().join("../..")
}

/// This crate's directory (`e2e/k8s`).
pub fn crate_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
