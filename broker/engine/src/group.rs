//! The group-commit primitive shared by the topic publish pipeline and the channel WAL
//! workers: a [`Collector`] gathers the requests answered together by one commit, by a
//! [`Policy`], and [`answer`] gives every member the commit's result.
//!
//! The policy is the only difference between the two users:
//!
//! - topic appends take whatever is already queued, up to 64 requests / 8 MiB, and never wait
//!   for more (`window: None`): an idle topic commits a lone publish at once, and under load a
//!   group is as large as what arrived during the previous fsync;
//! - channel WAL writes wait up to 10 ms from the first request for more (`window: Some`), up
//!   to 1,024 requests: FIN/REQ arrive in bursts from many consumers and nobody waits on them
//!   before continuing (sessions pipeline them, and NSQ answers neither), so a long window
//!   costs no one latency and saves the disk fdatasyncs that durable publishes wait for.
//!
//! A request that would push a group past `max_bytes` is kept for the next group, so a request
//! larger than the limit forms a group of its own. A request can also close its group (the WAL's
//! checkpoint and delete requests).

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// Where the answer to one request of a group goes.
pub(crate) type Reply<E> = oneshot::Sender<Result<(), E>>;

/// Answers every reply of a group with the group's result.
pub(crate) fn answer<E: Clone>(
    replies: impl IntoIterator<Item = Reply<E>>,
    result: &Result<(), E>,
) {
    for r in replies {
        let _ = r.send(result.clone());
    }
}

/// How large a group may grow and how long it may wait to grow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    /// Most requests (as counted by the collector's cost function) in one group.
    pub max_requests: usize,
    /// Most bytes in one group (a larger first request still forms a group).
    pub max_bytes: u64,
    /// `None`: take only what is queued already. `Some(w)`: wait up to `w` after the first
    /// request for more.
    pub window: Option<Duration>,
}

/// A queue of requests the collector reads from.
pub(crate) trait Source<T> {
    /// The next request; `None` once every sender is gone.
    fn recv(&mut self) -> impl Future<Output = Option<T>> + Send;
    /// A request already queued, without waiting.
    fn try_recv(&mut self) -> Option<T>;
}

impl<T: Send> Source<T> for mpsc::Receiver<T> {
    fn recv(&mut self) -> impl Future<Output = Option<T>> + Send {
        mpsc::Receiver::recv(self)
    }
    fn try_recv(&mut self) -> Option<T> {
        mpsc::Receiver::try_recv(self).ok()
    }
}

impl<T: Send> Source<T> for mpsc::UnboundedReceiver<T> {
    fn recv(&mut self) -> impl Future<Output = Option<T>> + Send {
        mpsc::UnboundedReceiver::recv(self)
    }
    fn try_recv(&mut self) -> Option<T> {
        mpsc::UnboundedReceiver::try_recv(self).ok()
    }
}

/// Gathers groups of requests from a queue by a [`Policy`].
pub(crate) struct Collector<T, S> {
    source: S,
    carry: Option<T>,
    policy: Policy,
}

impl<T, S: Source<T>> Collector<T, S> {
    pub(crate) fn new(source: S, policy: Policy) -> Self {
        Collector {
            source,
            carry: None,
            policy,
        }
    }

    /// The next group and its bytes; `None` once the queue is closed and drained. `cost`
    /// gives a request's `(requests, bytes)`; a request for which `closes` holds ends its
    /// group.
    pub(crate) async fn next_group(
        &mut self,
        cost: impl Fn(&T) -> (usize, u64),
        closes: impl Fn(&T) -> bool,
    ) -> Option<(Vec<T>, u64)> {
        let first = match self.carry.take() {
            Some(r) => r,
            None => self.source.recv().await?,
        };
        let (mut requests, mut bytes) = cost(&first);
        let mut closed = closes(&first);
        let mut group = vec![first];
        let deadline = self.policy.window.map(|w| tokio::time::Instant::now() + w);
        while !closed && requests < self.policy.max_requests {
            let next = match deadline {
                None => self.source.try_recv(),
                Some(d) => tokio::time::timeout_at(d, self.source.recv())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some(r) = next else { break };
            let (n, b) = cost(&r);
            if bytes + b > self.policy.max_bytes {
                self.carry = Some(r);
                break;
            }
            requests += n;
            bytes += b;
            closed = closes(&r);
            group.push(r);
        }
        Some((group, bytes))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    const MIB: u64 = 1 << 20;

    /// A queue of request sizes; counts how often it was polled without waiting.
    #[derive(Default)]
    struct Queue {
        items: VecDeque<u64>,
        polled: usize,
    }

    impl Source<u64> for Queue {
        fn recv(&mut self) -> impl Future<Output = Option<u64>> + Send {
            std::future::ready(self.items.pop_front())
        }
        fn try_recv(&mut self) -> Option<u64> {
            self.polled += 1;
            self.items.pop_front()
        }
    }

    fn ready(max_requests: usize, max_bytes: u64) -> Policy {
        Policy {
            max_requests,
            max_bytes,
            window: None,
        }
    }

    /// Groups a queue of request sizes the way the append stage does, until it is drained.
    async fn groups(sizes: &[u64], policy: Policy) -> Vec<Vec<u64>> {
        let queue = Queue {
            items: sizes.iter().copied().collect(),
            polled: 0,
        };
        let mut c = Collector::new(queue, policy);
        let mut out = Vec::new();
        while let Some((g, bytes)) = c.next_group(|s| (1, *s), |_| false).await {
            assert_eq!(
                bytes,
                g.iter().sum::<u64>(),
                "reported bytes are the group's"
            );
            out.push(g);
        }
        out
    }

    #[tokio::test]
    async fn a_group_takes_at_most_64_requests_and_keeps_their_order() {
        let sizes: Vec<u64> = (1..=150).collect();
        let g = groups(&sizes, ready(64, 8 * MIB)).await;
        assert_eq!(g.iter().map(Vec::len).collect::<Vec<_>>(), vec![64, 64, 22]);
        assert_eq!(g.concat(), sizes, "nothing lost, reordered or duplicated");
    }

    #[tokio::test]
    async fn a_group_stops_before_8_mib_and_the_next_request_starts_the_next_group() {
        let g = groups(&[3 * MIB, 3 * MIB, 3 * MIB, MIB], ready(64, 8 * MIB)).await;
        assert_eq!(g, vec![vec![3 * MIB, 3 * MIB], vec![3 * MIB, MIB]]);
        let exact = groups(&[4 * MIB, 4 * MIB, 1], ready(64, 8 * MIB)).await;
        assert_eq!(
            exact,
            vec![vec![4 * MIB, 4 * MIB], vec![1]],
            "8 MiB exactly fits"
        );
    }

    #[tokio::test]
    async fn an_oversized_request_forms_its_own_group() {
        let g = groups(&[100, 20 * MIB, 100, 100], ready(64, 8 * MIB)).await;
        assert_eq!(g, vec![vec![100], vec![20 * MIB], vec![100, 100]]);
        let first = groups(&[20 * MIB, 1], ready(64, 8 * MIB)).await;
        assert_eq!(first, vec![vec![20 * MIB], vec![1]]);
    }

    #[tokio::test]
    async fn a_lone_request_is_a_group_at_once_without_waiting_for_more() {
        let mut c = Collector::new(
            Queue {
                items: VecDeque::from([7]),
                polled: 0,
            },
            ready(64, 8 * MIB),
        );
        let (g, _) = c.next_group(|s| (1, *s), |_| false).await.unwrap();
        assert_eq!((g, c.carry, c.source.polled), (vec![7], None, 1));
    }

    #[tokio::test]
    async fn a_closing_request_ends_its_group() {
        let g = {
            let queue = Queue {
                items: VecDeque::from([1, 2, 0, 3]),
                polled: 0,
            };
            let mut c = Collector::new(queue, ready(64, 8 * MIB));
            let mut out = Vec::new();
            while let Some((g, _)) = c.next_group(|s| (1, *s), |s| *s == 0).await {
                out.push(g);
            }
            out
        };
        assert_eq!(g, vec![vec![1, 2, 0], vec![3]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_waits_for_more_until_it_ends() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut c = Collector::new(
            rx,
            Policy {
                max_requests: 1_024,
                max_bytes: u64::MAX,
                window: Some(Duration::from_millis(10)),
            },
        );
        tx.send(1u64).unwrap();
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            late.send(2).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            late.send(3).unwrap();
        });
        let (g, _) = c.next_group(|_| (1, 0), |_| false).await.unwrap();
        assert_eq!(
            g,
            vec![1, 2],
            "the arrival at 2 ms joins, the one at 52 ms does not"
        );
        let (g, _) = c.next_group(|_| (1, 0), |_| false).await.unwrap();
        assert_eq!(g, vec![3]);
    }
}
