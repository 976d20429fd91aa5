//! The Kodo publish algorithm (docs/kodo.md, "Publishing"): one producer command is retried
//! on another broker only while it is provably not applied.
//!
//! Per command: a 55 s deadline; at most 3 distinct brokers; a new broker only while 34 s
//! remain (one attempt's worst case: connect 2 s + handshake 5 s + write 12 s + answer 15 s);
//! the producer's current broker session first when that broker is still publish-ready,
//! then the others shuffled. How an attempt ends ([`Verdict`]):
//! - connect/handshake failure, write failure, or a broker refusal `E_DRAINING`, `E_CLOSING`,
//!   `E_THROTTLED`, `E_PUB_RETRY`: pre-commit, the next broker is tried;
//! - `OK`: done, the session is kept for the producer's next command;
//! - any other error frame: the producer gets it, its connection stays open;
//! - flush failure, unreadable or missing answer: the outcome is unknown; the producer
//!   gets `E_AMBIGUOUS` and its connection is closed; never retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::seq::SliceRandom;

use super::backend::{BrokerConn, Wire};
use super::verdict::Verdict;
use crate::metrics::Metrics;
use crate::pool::{Backend, Pools};

/// The whole budget of one producer command.
pub const DEADLINE: Duration = Duration::from_secs(55);
/// A new broker is tried only while this much of the deadline remains.
pub const NEW_BROKER_MIN_LEFT: Duration = Duration::from_secs(34);
/// Most distinct brokers one command is tried on.
pub const MAX_BROKERS: usize = 3;
/// What the producer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `OK`.
    Ok,
    /// The broker's error frame text; the connection stays open.
    Refused(Bytes),
    /// `E_AMBIGUOUS`, then the connection is closed.
    Ambiguous(String),
    /// No broker took it and none is left to try: close without an answer.
    Exhausted(String),
}

/// Whether another, new broker may be tried after `tried` brokers and `elapsed` time.
pub fn may_try_new_broker(elapsed: Duration, tried: usize) -> bool {
    tried < MAX_BROKERS && DEADLINE.saturating_sub(elapsed) >= NEW_BROKER_MIN_LEFT
}

/// The brokers to try next, in order: `current` first if it is still in `pool` at the same
/// address, then the rest of `pool` in `shuffle`'s order; none already `tried`.
pub fn order(
    pool: &[Backend],
    current: Option<&Backend>,
    tried: &[u32],
    shuffle: impl FnOnce(&mut [Backend]),
) -> Vec<Backend> {
    let fresh = |b: &&Backend| !tried.contains(&b.node_id);
    let first: Option<Backend> = current.filter(|c| pool.contains(c)).filter(fresh).cloned();
    let mut rest: Vec<Backend> = pool
        .iter()
        .filter(fresh)
        .filter(|b| Some(*b) != first.as_ref())
        .cloned()
        .collect();
    shuffle(&mut rest);
    first.into_iter().chain(rest).collect()
}

/// What a publish needs besides the command.
#[derive(Debug, Clone)]
pub struct PublishCtx {
    /// Where brokers come from.
    pub pools: Arc<Pools>,
    /// Retry and ambiguity counters.
    pub metrics: Metrics,
}

/// Run one producer command through the algorithm. `session` is the producer's broker
/// session: used first, replaced by whichever broker stores the command.
pub async fn publish(
    session: &mut Option<BrokerConn>,
    ctx: &PublishCtx,
    identify: &[u8],
    wire: &Wire,
) -> Outcome {
    let started = Instant::now();
    let mut tried: Vec<u32> = Vec::new();
    let mut last = "no publish-ready broker".to_string();
    while may_try_new_broker(started.elapsed(), tried.len()) {
        let current = session.take();
        let pool = ctx.pools.publish_backends();
        let next = order(&pool, current.as_ref().map(|c| &c.backend), &tried, |r| {
            r.shuffle(&mut rand::rng())
        });
        let Some(backend) = next.into_iter().next() else {
            break;
        };
        tried.push(backend.node_id);
        if tried.len() > 1 {
            ctx.metrics.producer_retries.inc();
        }
        let reuse = current.filter(|c| c.backend == backend && c.looks_alive());
        let mut conn = match reuse {
            Some(c) => c,
            None => match BrokerConn::open(&backend, identify).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(node_id = backend.node_id, error = %e, "broker session failed");
                    last = e.to_string();
                    continue;
                }
            },
        };
        match conn.send(wire).await {
            Verdict::Committed => {
                *session = Some(conn);
                return Outcome::Ok;
            }
            Verdict::PreCommit(why) => {
                tracing::info!(node_id = backend.node_id, %why, "publish not applied, retrying elsewhere");
                last = why;
            }
            Verdict::Final(text) => return Outcome::Refused(text),
            Verdict::Ambiguous(why) => {
                ctx.metrics.ambiguous_failures.inc();
                tracing::warn!(node_id = backend.node_id, %why, "publish outcome unknown");
                return Outcome::Ambiguous(why);
            }
        }
    }
    Outcome::Exhausted(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_three_brokers_and_a_new_one_only_with_34_seconds_left() {
        let s = Duration::from_secs;
        let cases = [
            (s(0), 0, true),
            (s(0), 2, true),
            (s(0), 3, false),
            (s(21), 1, true),
            (s(21) + Duration::from_millis(1), 1, false),
            (s(21) + Duration::from_millis(1), 0, false),
            (s(40), 0, false),
            (s(60), 1, false),
        ];
        for (elapsed, tried, want) in cases {
            assert_eq!(
                may_try_new_broker(elapsed, tried),
                want,
                "{elapsed:?} {tried}"
            );
        }
        // Attempts of the worst-case length (34 s) fit once; quick failures fit three times.
        let attempts = |each: Duration| {
            let (mut elapsed, mut n) = (Duration::ZERO, 0);
            while may_try_new_broker(elapsed, n) {
                n += 1;
                elapsed += each;
            }
            (n, elapsed)
        };
        assert_eq!(attempts(s(34)), (1, s(34)));
        assert_eq!(attempts(s(10)), (3, s(30)));
        assert_eq!(attempts(s(15)), (2, s(30)));
        assert!(attempts(s(34)).1 <= DEADLINE);
    }

    fn b(id: u32, port: u16) -> Backend {
        Backend {
            node_id: id,
            host: "127.0.0.1".into(),
            tcp_port: port,
            http_port: port + 1,
        }
    }

    #[test]
    fn the_current_session_goes_first_while_its_broker_is_publish_ready() {
        let pool = [b(1, 10), b(2, 20), b(3, 30)];
        let ids = |v: Vec<Backend>| v.iter().map(|b| b.node_id).collect::<Vec<_>>();
        let reverse = |r: &mut [Backend]| r.reverse();
        assert_eq!(ids(order(&pool, Some(&b(2, 20)), &[], reverse)), [2, 3, 1]);
        assert_eq!(ids(order(&pool, None, &[], reverse)), [3, 2, 1]);
        // Gone from the pool, or moved: no longer preferred.
        assert_eq!(ids(order(&pool, Some(&b(4, 40)), &[], |_| ())), [1, 2, 3]);
        assert_eq!(ids(order(&pool, Some(&b(2, 99)), &[], |_| ())), [1, 2, 3]);
        // Already tried brokers are never offered again.
        assert_eq!(ids(order(&pool, Some(&b(2, 20)), &[2], |_| ())), [1, 3]);
        assert_eq!(
            ids(order(&pool, None, &[1, 2, 3], |_| ())),
            Vec::<u32>::new()
        );
        assert!(order(&[], Some(&b(1, 10)), &[], |_| ()).is_empty());
    }
}
