//! Retries: which failures are worth another attempt, and when to make it.
//!
//! object_store's own retry loop is switched off (`max_retries = 0`) so that this is the one
//! policy: every bucket operation goes through [`run`], which retries a transient failure
//! after an exponential, jittered back-off, and gives up after a bounded number of attempts
//! or time. A permanent failure (403, a 404 where an object must exist, a malformed request)
//! returns at once.
//!
//! Transient: no connection (refused, reset, closed early), a timeout, HTTP 5xx, 408 and 429.
//! Everything else is permanent.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use object_store::client::{HttpError, HttpErrorKind};
use tokio::time::Instant;

use crate::error::{Error, Op};
use crate::http::ServerStatus;

/// When to retry a transient failure, and when to give up.
///
/// Retry `n` (1 for the first) waits `min(max_delay, first_delay * 2^(n-1))` halved plus a
/// random part of the other half ("equal jitter": never less than half the step, so retries
/// spread out without collapsing to zero). An operation stops after `max_attempts` attempts,
/// or when the next wait would end past `max_elapsed` since the first attempt began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The back-off step before the first retry.
    pub first_delay: Duration,
    /// The largest step.
    pub max_delay: Duration,
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The time after which no new attempt starts.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    /// 200 ms doubling to 10 s, at most 10 attempts within 2 minutes: rides out a gateway
    /// restart or a short outage; a longer one is the caller's to retry later (an upload
    /// backlog is kept and retried by the tiering loop, not here).
    fn default() -> Self {
        Self {
            first_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            max_attempts: 10,
            max_elapsed: Duration::from_secs(120),
        }
    }
}

/// "Equal jitter" back-off: wait `n` (1-based) lasts between half and all of
/// `min(max, first * 2^(n-1))`, `jitter` in `[0, 1]` choosing where. Retries spread out and never
/// collapse to zero. The tiering uploader's pauses use it too.
pub fn equal_jitter(first: Duration, max: Duration, n: u32, jitter: f64) -> Duration {
    let doublings = n.saturating_sub(1).min(31);
    let step = first.saturating_mul(1u32 << doublings).min(max);
    let half = step / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

impl RetryPolicy {
    /// The wait before retry `retry` (1-based), with `jitter` in `[0, 1)` choosing where in the
    /// upper half of the step it falls.
    pub fn delay(&self, retry: u32, jitter: f64) -> Duration {
        equal_jitter(self.first_delay, self.max_delay, retry, jitter)
    }

    /// The wait before another attempt after `attempts` attempts have failed transiently and
    /// `elapsed` has passed since the first began; `None` when the policy says give up.
    pub fn next(&self, attempts: u32, elapsed: Duration, jitter: f64) -> Option<Duration> {
        if attempts >= self.max_attempts {
            return None;
        }
        let delay = self.delay(attempts, jitter);
        (elapsed.saturating_add(delay) <= self.max_elapsed).then_some(delay)
    }
}

/// Whether a failure may go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transience {
    /// Worth another attempt: connection trouble, timeouts, 5xx, 408, 429.
    Transient,
    /// Fails again the same way: report it.
    Permanent,
}

/// The class of a failed request from what it produced: an HTTP status if a response came, or
/// else how the transport failed.
pub fn classify(status: Option<u16>, transport: Option<HttpErrorKind>) -> Transience {
    match (status, transport) {
        (Some(408 | 429 | 500..=599), _) => Transience::Transient,
        (Some(_), _) => Transience::Permanent,
        (
            None,
            Some(
                HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted,
            ),
        ) => Transience::Transient,
        (None, _) => Transience::Permanent,
    }
}

/// The class of an object_store error: its typed variants first (404, 403, 401, 409, 412 are
/// permanent whatever the transport), else the status or transport failure found in its
/// source chain; an error with neither (another 4xx, a malformed response) is permanent.
pub fn transience(error: &object_store::Error) -> Transience {
    use object_store::Error as E;
    match error {
        E::NotFound { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::InvalidPath { .. }
        | E::UnknownConfigurationKey { .. } => Transience::Permanent,
        _ => {
            let (status, transport) = find_cause(error);
            classify(status, transport)
        }
    }
}

/// Whether the server refused our credentials, as the connector recorded ([`ServerStatus`]).
pub(crate) fn refuses_credentials(error: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(server) = current.downcast_ref::<ServerStatus>() {
            return server.refuses_credentials();
        }
        source = current.source();
    }
    false
}

/// The HTTP status and transport failure in `error`'s source chain, the first of each found.
/// object_store does not export the error that carries a response's status; the connector
/// ([`crate::http`]) turns the retryable statuses into a transport error holding a
/// [`ServerStatus`], found here. Other statuses stay object_store's own (permanent) errors.
fn find_cause(error: &(dyn std::error::Error + 'static)) -> (Option<u16>, Option<HttpErrorKind>) {
    let mut source = Some(error);
    let mut transport = None;
    while let Some(current) = source {
        if let Some(server) = current.downcast_ref::<ServerStatus>() {
            // An unknown access key stays unknown, whatever status carried the news.
            let status = if server.refuses_credentials() {
                403
            } else {
                server.status
            };
            return (Some(status), None);
        }
        if let Some(http) = current.downcast_ref::<HttpError>() {
            transport = transport.or(Some(http.kind()));
        }
        source = current.source();
    }
    (None, transport)
}

/// Runs `attempt` until it succeeds, fails permanently, or `policy` gives up. Returns the
/// value and how many retries it took. `op` and `key` name the operation in the error.
pub(crate) async fn run<T, F, Fut>(
    policy: &RetryPolicy,
    failed: &AtomicU64,
    op: Op,
    key: &str,
    mut attempt: F,
) -> Result<(T, u32), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, object_store::Error>>,
{
    let start = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match attempt().await {
            Ok(value) => return Ok((value, attempts - 1)),
            Err(error) => error,
        };
        if transience(&error) == Transience::Permanent {
            return Err(Error::from_store(op, key, error));
        }
        let elapsed = start.elapsed();
        let Some(delay) = policy.next(attempts, elapsed, rand::random::<f64>()) else {
            return Err(Error::GaveUp {
                op,
                key: key.to_owned(),
                attempts,
                elapsed,
                source: error,
            });
        };
        failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%op, key, attempts, ?delay, error = %error, "bucket request failed, retrying");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> RetryPolicy {
        RetryPolicy {
            first_delay: 100 * MS,
            max_delay: 1000 * MS,
            max_attempts: 6,
            max_elapsed: 3000 * MS,
        }
    }

    #[test]
    fn the_step_doubles_to_the_cap_and_jitter_fills_its_upper_half() {
        // (retry, jitter, delay)
        let cases = [
            (1, 0.0, 50),
            (1, 0.5, 75),
            (1, 1.0, 100),
            (2, 0.0, 100),
            (2, 1.0, 200),
            (3, 0.0, 200),
            (4, 0.0, 400),
            (5, 0.0, 500),
            (5, 1.0, 1000),
            (6, 0.0, 500),
            (40, 0.99, 995),
            (u32::MAX, 0.0, 500),
            // out-of-range jitter is clamped, never a panic or a longer wait
            (1, -3.0, 50),
            (1, 7.0, 100),
        ];
        for (retry, jitter, want) in cases {
            assert_eq!(
                policy().delay(retry, jitter),
                want * MS,
                "retry {retry} jitter {jitter}"
            );
        }
    }

    #[test]
    fn attempts_and_elapsed_time_bound_the_retries() {
        // (failed attempts so far, elapsed ms, next wait ms)
        let cases = [
            (1, 0, Some(50)),
            (2, 0, Some(100)),
            (5, 0, Some(500)),
            (6, 0, None),
            (7, 0, None),
            (1, 2950, Some(50)),
            (1, 2951, None),
            (3, 2800, Some(200)),
            (3, 2801, None),
            (1, u64::MAX / 2, None),
        ];
        for (attempts, elapsed, want) in cases {
            assert_eq!(
                policy().next(attempts, Duration::from_millis(elapsed), 0.0),
                want.map(|ms| ms * MS),
                "after {attempts} attempts, {elapsed} ms"
            );
        }
    }

    #[test]
    fn a_single_attempt_policy_never_retries() {
        let once = RetryPolicy {
            max_attempts: 1,
            ..policy()
        };
        assert_eq!(once.next(1, Duration::ZERO, 0.0), None);
    }

    #[test]
    fn server_trouble_and_lost_connections_are_transient_refusals_are_not() {
        use HttpErrorKind::*;
        use Transience::*;
        let cases = [
            (Some(500), None, Transient),
            (Some(502), None, Transient),
            (Some(503), None, Transient),
            (Some(599), None, Transient),
            (Some(408), None, Transient),
            (Some(429), None, Transient),
            (Some(400), None, Permanent),
            (Some(401), None, Permanent),
            (Some(403), None, Permanent),
            (Some(404), None, Permanent),
            (Some(412), None, Permanent),
            (Some(301), None, Permanent),
            // a status wins over the transport: the server answered
            (Some(403), Some(Timeout), Permanent),
            (None, Some(Connect), Transient),
            (None, Some(Request), Transient),
            (None, Some(Timeout), Transient),
            (None, Some(Interrupted), Transient),
            (None, Some(Decode), Permanent),
            (None, Some(Unknown), Permanent),
            (None, None, Permanent),
        ];
        for (status, transport, want) in cases {
            assert_eq!(
                classify(status, transport),
                want,
                "{status:?} {transport:?}"
            );
        }
    }

    #[test]
    fn typed_store_errors_are_permanent() {
        let not_found = object_store::Error::NotFound {
            path: "p".into(),
            source: "gone".into(),
        };
        assert_eq!(transience(&not_found), Transience::Permanent);
        let wrapped_timeout = object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(
                HttpErrorKind::Timeout,
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            )),
        };
        assert_eq!(transience(&wrapped_timeout), Transience::Transient);
        let status = |status| object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(
                HttpErrorKind::Request,
                ServerStatus {
                    status,
                    code: None,
                    message: String::new(),
                },
            )),
        };
        assert_eq!(transience(&status(503)), Transience::Transient);
        assert_eq!(transience(&status(403)), Transience::Permanent);
        assert!(refuses_credentials(&status(403)));
        assert!(!refuses_credentials(&status(503)));
        assert!(matches!(
            Error::from_store(Op::List, "k", status(403)),
            Error::Denied { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_transient_failures_and_reports_the_count() {
        let mut failures = 3;
        let (value, retries) = run(&policy(), &AtomicU64::new(0), Op::Put, "k", || {
            let fail = failures > 0;
            failures -= 1;
            async move {
                if fail {
                    Err(object_store::Error::Generic {
                        store: "S3",
                        source: Box::new(HttpError::new(
                            HttpErrorKind::Connect,
                            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                        )),
                    })
                } else {
                    Ok(7)
                }
            }
        })
        .await
        .unwrap();
        assert_eq!((value, retries), (7, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn run_stops_at_the_first_permanent_failure() {
        let mut calls = 0;
        let error = run(&policy(), &AtomicU64::new(0), Op::Get, "k", || {
            calls += 1;
            async {
                Err::<(), _>(object_store::Error::PermissionDenied {
                    path: "k".into(),
                    source: "403".into(),
                })
            }
        })
        .await
        .unwrap_err();
        assert_eq!(calls, 1);
        assert!(matches!(error, Error::Denied { .. }), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn run_gives_up_when_the_policy_does() {
        let mut calls = 0;
        let error = run(&policy(), &AtomicU64::new(0), Op::Delete, "k", || {
            calls += 1;
            async {
                Err::<(), _>(object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(HttpError::new(
                        HttpErrorKind::Timeout,
                        std::io::Error::from(std::io::ErrorKind::TimedOut),
                    )),
                })
            }
        })
        .await
        .unwrap_err();
        assert_eq!(calls, 6);
        assert!(
            matches!(error, Error::GaveUp { attempts: 6, .. }),
            "{error}"
        );
    }
}
