//! Helpers for the Kubernetes scenario tests: run the pinned `kubectl` and the official pynsq
//! client (both installed by `scripts/deps.sh`), wait on conditions and run named steps.

pub mod ledger;
pub mod steps;
pub mod tools;
pub mod unready;

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// What a poll saw: `Done` ends the wait, `Saw` is kept as the last observation.
#[derive(Debug)]
pub enum Poll<T, O> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; what was observed (reported if the wait times out).
    Saw(O),
}

/// A wait that ran out of time, with the last thing it observed.
#[derive(Debug)]
pub struct TimedOut<O> {
    /// What was waited for.
    pub what: String,
    /// The time limit.
    pub limit: Duration,
    /// The last observation.
    pub last: O,
}

impl<O: Debug> std::fmt::Display for TimedOut<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}; last saw: {:#?}",
            self.limit, self.what, self.last
        )
    }
}

/// Polls `check` every 250 ms until it returns [`Poll::Done`]; after `limit`, returns the
/// last observation instead.
pub async fn wait_until<T, O, F, Fut>(
    what: &str,
    limit: Duration,
    mut check: F,
) -> Result<T, TimedOut<O>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Poll<T, O>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Poll::Done(v) => return Ok(v),
            Poll::Saw(o) => o,
        };
        if start.elapsed() >= limit {
            return Err(TimedOut {
                what: what.to_owned(),
                limit,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// [`wait_until`], panicking on timeout with what it waited for and the last value it saw.
pub async fn eventually<T, O, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    O: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Poll<T, O>>,
{
    match wait_until(what, limit, check).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_timed_out_wait_reports_the_last_observation() {
        let mut n = 0;
        let err = wait_until("n to reach 10", Duration::from_millis(600), || {
            n += 1;
            let seen = n;
            async move { Poll::<(), _>::Saw(seen) }
        })
        .await
        .unwrap_err();
        assert!(err.last >= 2, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("waiting for n to reach 10; last saw:"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_wait_returns_the_value_it_was_waiting_for() {
        let mut n = 0;
        let v = eventually("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            let seen = n;
            async move {
                if seen >= 3 {
                    Poll::Done(seen * 10)
                } else {
                    Poll::Saw(seen)
                }
            }
        })
        .await;
        assert_eq!(v, 30);
    }
}
