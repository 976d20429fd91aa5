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
use rustqueue_protocol::Frame;

use super::backend::{BrokerConn, Wire};
use crate::metrics::Metrics;
use crate::pool::{Backend, Pools};

/// The whole budget of one producer command.
pub const DEADLINE: Duration = Duration::from_secs(55);
/// A new broker is tried only while this much of the deadline remains.
pub const NEW_BROKER_MIN_LEFT: Duration = Duration::from_secs(34);
/// Most distinct brokers one command is tried on.
pub const MAX_BROKERS: usize = 3;
/// Broker refusals that come before anything is stored: safe to send elsewhere.
pub const PRE_COMMIT_CODES: [&str; 4] = ["E_DRAINING", "E_CLOSING", "E_THROTTLED", "E_PUB_RETRY"];

/// How one attempt on one broker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `OK`: stored.
    Committed,
    /// Provably not applied; the next broker may be tried.
    PreCommit(String),
    /// A final broker error frame (its text), passed to the producer.
    Final(Bytes),
    /// Perhaps applied, perhaps not.
    Ambiguous(String),
}

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

/// Classify a broker's answer to a publish.
pub fn classify(frame: &Frame) -> Verdict {
    match frame {
        Frame::Response(r) if &r[..] == rustqueue_protocol::frame::OK => Verdict::Committed,
        Frame::Error(text) if is_pre_commit(text) => {
            Verdict::PreCommit(String::from_utf8_lossy(text).into_owned())
        }
        Frame::Error(text) => Verdict::Final(text.clone()),
        other => Verdict::Ambiguous(format!("unexpected answer {other:?}")),
    }
}

/// Whether an error frame's code (its first word) is one of [`PRE_COMMIT_CODES`].
pub fn is_pre_commit(text: &[u8]) -> bool {
    let code = text.split(|b| *b == b' ').next().unwrap_or_default();
    PRE_COMMIT_CODES.iter().any(|c| c.as_bytes() == code)
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
                    last = e;
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

    fn err(text: &'static str) -> Frame {
        Frame::Error(Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn every_broker_answer_is_classified() {
        let pre = |t: &str| Verdict::PreCommit(t.to_string());
        let fin = |t: &'static str| Verdict::Final(Bytes::from_static(t.as_bytes()));
        // The texts rustqueued sends (broker/server: tcp/session.rs, tcp/errors.rs).
        let cases = [
            (
                Frame::Response(Bytes::from_static(b"OK")),
                Verdict::Committed,
            ),
            (
                err("E_DRAINING PUB failed: draining"),
                pre("E_DRAINING PUB failed: draining"),
            ),
            (
                err("E_CLOSING cannot PUB while closing"),
                pre("E_CLOSING cannot PUB while closing"),
            ),
            (
                err("E_CLOSING MPUB failed: shutting down"),
                pre("E_CLOSING MPUB failed: shutting down"),
            ),
            (
                err("E_THROTTLED PUB failed: throttled"),
                pre("E_THROTTLED PUB failed: throttled"),
            ),
            (
                err("E_PUB_RETRY DPUB failed: storage"),
                pre("E_PUB_RETRY DPUB failed: storage"),
            ),
            (err("E_DRAINING"), pre("E_DRAINING")),
            (
                err("E_BAD_TOPIC PUB topic name \"x\" is not valid"),
                fin("E_BAD_TOPIC PUB topic name \"x\" is not valid"),
            ),
            (
                err("E_BAD_MESSAGE PUB failed: too big"),
                fin("E_BAD_MESSAGE PUB failed: too big"),
            ),
            (
                err("E_PUB_FAILED PUB failed"),
                fin("E_PUB_FAILED PUB failed"),
            ),
            (
                err("E_INVALID DPUB timeout out of range"),
                fin("E_INVALID DPUB timeout out of range"),
            ),
            (
                err("E_UNAUTHORIZED AUTH first"),
                fin("E_UNAUTHORIZED AUTH first"),
            ),
            (err("E_DRAINING_SOON x"), fin("E_DRAINING_SOON x")),
            (err("e_draining x"), fin("e_draining x")),
            (err(" E_DRAINING x"), fin(" E_DRAINING x")),
        ];
        for (frame, want) in cases {
            assert_eq!(classify(&frame), want, "{frame:?}");
        }
        for odd in [
            Frame::Response(Bytes::from_static(b"_heartbeat_")),
            Frame::Response(Bytes::from_static(b"")),
            Frame::Message {
                timestamp_ns: 0,
                attempts: 1,
                id: [b'0'; 16],
                body: Bytes::new(),
            },
        ] {
            assert!(matches!(classify(&odd), Verdict::Ambiguous(_)), "{odd:?}");
        }
    }

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
