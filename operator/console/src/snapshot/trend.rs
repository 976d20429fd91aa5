//! The in-memory trend: rates are counter deltas over the time between two collections,
//! reset to zero when the set of brokers changes (a new or restarted member's counters are not
//! a delta of the old ones). Kept in a ring buffer; lost on restart.

use std::collections::VecDeque;

use super::{BrokerView, TrendSample};

/// Counter totals over the observed brokers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `publish_messages_total`.
    pub published: u64,
    /// `publish_bytes_total`.
    pub published_bytes: u64,
    /// `delivered_messages_total`.
    pub delivered: u64,
    /// `finished_messages_total`.
    pub finished: u64,
}

impl Counters {
    /// Totals over the brokers' observations.
    pub fn of(brokers: &[BrokerView]) -> Self {
        let mut c = Self::default();
        for o in brokers.iter().filter_map(|b| b.observation.as_ref()) {
            let r = &o.head.runtime;
            c.published += r.publish_messages_total;
            c.published_bytes += r.publish_bytes_total;
            c.delivered += r.delivered_messages_total;
            c.finished += r.finished_messages_total;
        }
        c
    }
}

/// Identity of a broker set: the node ids folded with rotate-xor (order-free once sorted).
pub fn membership_hash(brokers: &[BrokerView]) -> u64 {
    let mut ids: Vec<(String, u32)> = brokers
        .iter()
        .map(|b| {
            let id = b.observation.as_ref().map_or(0, |o| o.head.node.id);
            (b.uid.clone(), id)
        })
        .collect();
    ids.sort();
    ids.iter().fold(0u64, |h, (uid, id)| {
        let uid_bits = uid
            .bytes()
            .fold(0u64, |a, b| a.rotate_left(5) ^ u64::from(b));
        h.rotate_left(13) ^ u64::from(*id) ^ uid_bits
    })
}

/// The trend ring buffer and the last counters it saw.
#[derive(Debug, Clone)]
pub struct Trend {
    capacity: usize,
    samples: VecDeque<TrendSample>,
    last: Option<(u64, u64, Counters)>,
}

impl Trend {
    /// A trend keeping `capacity` samples.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            samples: VecDeque::new(),
            last: None,
        }
    }

    /// Records one collection: rates from the delta since the previous one (zero after a
    /// membership change, a counter going back, or no time passing).
    pub fn record(
        &mut self,
        at_ms: u64,
        membership: u64,
        counters: Counters,
        gauges: (u64, u64, f64),
    ) -> TrendSample {
        let mut s = TrendSample {
            at_ms,
            depth: gauges.0,
            in_flight: gauges.1,
            disk_used_percent: gauges.2,
            ..TrendSample::default()
        };
        if let Some((m, t, prev)) = self.last
            && m == membership
            && at_ms > t
        {
            let secs = (at_ms - t) as f64 / 1000.0;
            let rate = |now: u64, then: u64| now.checked_sub(then).map_or(0.0, |d| d as f64 / secs);
            s.publish_per_second = rate(counters.published, prev.published);
            s.publish_bytes_per_second = rate(counters.published_bytes, prev.published_bytes);
            s.deliver_per_second = rate(counters.delivered, prev.delivered);
            s.finish_per_second = rate(counters.finished, prev.finished);
        }
        // Two collections in the same millisecond: keep the older baseline, so the delta is
        // counted by the next sample instead of lost.
        let same_instant = self
            .last
            .is_some_and(|(m, t, _)| m == membership && at_ms <= t);
        if !same_instant {
            self.last = Some((membership, at_ms, counters));
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
        s
    }

    /// Samples, oldest first.
    pub fn samples(&self) -> Vec<TrendSample> {
        self.samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(p: u64, b: u64, d: u64, f: u64) -> Counters {
        Counters {
            published: p,
            published_bytes: b,
            delivered: d,
            finished: f,
        }
    }

    #[test]
    fn rates_are_counter_deltas_over_the_elapsed_time() {
        let mut t = Trend::new(10);
        let first = t.record(1_000, 7, c(100, 1000, 50, 40), (1, 2, 3.0));
        assert_eq!(first.publish_per_second, 0.0);
        let s = t.record(3_000, 7, c(300, 5000, 150, 140), (1, 2, 3.0));
        assert_eq!(s.publish_per_second, 100.0);
        assert_eq!(s.publish_bytes_per_second, 2000.0);
        assert_eq!(s.deliver_per_second, 50.0);
        assert_eq!(s.finish_per_second, 50.0);
        assert_eq!((s.depth, s.in_flight, s.disk_used_percent), (1, 2, 3.0));
    }

    #[test]
    fn rates_reset_to_zero_on_a_membership_change_or_a_counter_going_back() {
        let table = [
            // (membership, counters, expected publish rate)
            (7, c(200, 0, 0, 0), 50.0),
            (8, c(400, 0, 0, 0), 0.0),
            (8, c(10, 0, 0, 0), 0.0),
            (8, c(20, 0, 0, 0), 5.0),
        ];
        let mut t = Trend::new(10);
        t.record(0, 7, c(100, 0, 0, 0), (0, 0, 0.0));
        for (i, (m, counters, want)) in table.into_iter().enumerate() {
            let at = 2_000 * (i as u64 + 1);
            assert_eq!(
                t.record(at, m, counters, (0, 0, 0.0)).publish_per_second,
                want,
                "row {i}"
            );
        }
    }

    #[test]
    fn a_delta_within_one_millisecond_is_counted_by_the_next_sample() {
        let mut t = Trend::new(10);
        t.record(1_000, 1, c(0, 0, 0, 0), (0, 0, 0.0));
        assert_eq!(
            t.record(1_000, 1, c(10, 0, 0, 0), (0, 0, 0.0))
                .publish_per_second,
            0.0
        );
        assert_eq!(
            t.record(2_000, 1, c(10, 0, 0, 0), (0, 0, 0.0))
                .publish_per_second,
            10.0
        );
    }

    #[test]
    fn the_ring_buffer_keeps_the_newest_samples() {
        let mut t = Trend::new(3);
        for i in 0..5 {
            t.record(i * 1000, 1, Counters::default(), (0, 0, 0.0));
        }
        let at: Vec<u64> = t.samples().iter().map(|s| s.at_ms).collect();
        assert_eq!(at, vec![2000, 3000, 4000]);
    }

    #[test]
    fn the_membership_hash_changes_with_the_set_and_not_with_its_order() {
        let b = |uid: &str| BrokerView {
            uid: uid.into(),
            ..crate::fixtures::broker_view("x", 1)
        };
        let ab = membership_hash(&[b("a"), b("b")]);
        assert_eq!(ab, membership_hash(&[b("b"), b("a")]));
        assert_ne!(ab, membership_hash(&[b("a"), b("c")]));
        assert_ne!(ab, membership_hash(&[b("a")]));
    }
}
