//! The uploader's decisions, as plain functions of their inputs: the back-off after a failed
//! upload, and which sealed segment to upload next.
//!
//! [`Queue`] holds every sealed segment not yet recorded as uploaded, with when it was first
//! seen and how its attempts went; the loop in `uploader.rs` feeds it what the logs and the
//! records say and asks it what to do. Nothing here does I/O or reads a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// The wait before the next attempt after failures (`rustqueue_tier::retry::equal_jitter`, as the
/// bucket's own retries): retry `n` (1-based) waits between half and
/// all of `min(max, first * 2^(n-1))` ("equal jitter": retries spread out, never collapse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The step after the first failure.
    pub first: Duration,
    /// The largest step.
    pub max: Duration,
}

impl Default for Backoff {
    /// 1 s doubling to 1 minute: on top of the bucket's own retries (about 2 minutes per
    /// request), an outage of any length is ridden out with one attempt a minute.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The wait after `failures` failures in a row, `jitter` in `[0, 1)`.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        rustqueue_tier::retry::equal_jitter(self.first, self.max, failures, jitter)
    }
}

/// A sealed segment as the queue sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sealed {
    /// Base log index.
    pub base: u64,
    /// Bytes of its `.rqlog`.
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Waiting {
    bytes: u64,
    first_seen: Instant,
    attempts: u32,
    not_before: Option<Instant>,
}

/// Sealed segments not yet recorded as uploaded, by topic and base.
#[derive(Debug)]
pub(crate) struct Queue {
    backoff: Backoff,
    waiting: BTreeMap<(String, u64), Waiting>,
    /// Failures in a row, whichever segment: the bucket, not one segment, is usually what fails.
    failures: u32,
    paused_until: Option<Instant>,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Upload this segment of this topic.
    Upload(String, u64),
    /// Nothing is due before this time (or ever, when `None`): sleep.
    Wait(Option<Instant>),
}

impl Queue {
    pub(crate) fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            waiting: BTreeMap::new(),
            failures: 0,
            paused_until: None,
        }
    }

    /// What `topic`'s log holds now: its sealed segments, and which are recorded as uploaded.
    /// New ones join the queue (first seen `now`); recorded ones, and ones GC or eviction has
    /// deleted, leave it.
    pub(crate) fn observe(
        &mut self,
        topic: &str,
        sealed: &[Sealed],
        recorded: impl Fn(u64) -> bool,
        now: Instant,
    ) {
        let live: BTreeMap<u64, u64> = sealed
            .iter()
            .filter(|s| !recorded(s.base))
            .map(|s| (s.base, s.bytes))
            .collect();
        let stale: Vec<(String, u64)> = self
            .waiting
            .range((topic.to_owned(), 0)..=(topic.to_owned(), u64::MAX))
            .filter(|((_, base), _)| !live.contains_key(base))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            self.waiting.remove(&key);
        }
        for (base, bytes) in live {
            self.waiting
                .entry((topic.to_owned(), base))
                .or_insert(Waiting {
                    bytes,
                    first_seen: now,
                    attempts: 0,
                    not_before: None,
                });
        }
    }

    /// Forgets every topic `keep` refuses (deleted, or recreated since it was observed).
    pub(crate) fn retain_topics(&mut self, keep: impl Fn(&str) -> bool) {
        self.waiting.retain(|(t, _), _| keep(t));
    }

    /// The upload backlog: sealed segments not yet recorded, and their bytes.
    pub(crate) fn backlog(&self) -> (u64, u64) {
        let bytes = self.waiting.values().map(|w| w.bytes).sum();
        (self.waiting.len() as u64, bytes)
    }

    /// The segment to upload next: the one first seen earliest (then the lowest topic and
    /// base) whose `upload_after` has passed and whose back-off has ended; none while the
    /// queue is paused after a failure.
    pub(crate) fn next(&self, now: Instant, upload_after: Duration) -> Next {
        let due = |w: &Waiting| {
            let after = w.first_seen + upload_after;
            w.not_before.map_or(after, |nb| nb.max(after))
        };
        if let Some(until) = self.paused_until.filter(|u| *u > now) {
            return Next::Wait(Some(until));
        }
        let ready = self
            .waiting
            .iter()
            .filter(|(_, w)| due(w) <= now)
            .min_by_key(|((t, base), w)| (w.first_seen, t.as_str(), *base));
        match ready {
            Some(((t, base), _)) => Next::Upload(t.clone(), *base),
            None => Next::Wait(self.waiting.values().map(due).min()),
        }
    }

    /// The segment is uploaded and recorded.
    pub(crate) fn succeeded(&mut self, topic: &str, base: u64) {
        self.waiting.remove(&(topic.to_owned(), base));
        self.failures = 0;
        self.paused_until = None;
    }

    /// The segment's files are gone (GC or eviction deleted it meanwhile): not a failure.
    pub(crate) fn gone(&mut self, topic: &str, base: u64) {
        self.waiting.remove(&(topic.to_owned(), base));
    }

    /// The upload failed: the segment stays queued, and nothing is tried again before the
    /// back-off of the failures in a row has passed (this segment's own back-off may be
    /// longer, when it alone keeps failing). `jitter` in `[0, 1)`.
    pub(crate) fn failed(&mut self, topic: &str, base: u64, now: Instant, jitter: f64) {
        self.failures = self.failures.saturating_add(1);
        self.paused_until = Some(now + self.backoff.delay(self.failures, jitter));
        if let Some(w) = self.waiting.get_mut(&(topic.to_owned(), base)) {
            w.attempts = w.attempts.saturating_add(1);
            w.not_before = Some(now + self.backoff.delay(w.attempts, jitter));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn sealed(bases: &[u64]) -> Vec<Sealed> {
        bases
            .iter()
            .map(|&base| Sealed { base, bytes: 100 })
            .collect()
    }

    #[test]
    fn back_off_doubles_to_its_cap_within_the_jitter_band() {
        let b = Backoff {
            first: SECOND,
            max: 8 * SECOND,
        };
        let cases = [
            (1, 0.0, 500),
            (1, 0.999_999, 1_000),
            (2, 0.0, 1_000),
            (3, 0.5, 3_000),
            (4, 0.0, 4_000),
            (5, 0.0, 4_000),
            (40, 0.999_999, 8_000),
            (0, 0.0, 500),
        ];
        for (failures, jitter, want_ms) in cases {
            let got = b.delay(failures, jitter).as_millis();
            assert!(
                got.abs_diff(want_ms) <= 1,
                "failures {failures} jitter {jitter}: {got} ms, want {want_ms}"
            );
        }
    }

    #[test]
    fn observed_segments_join_and_recorded_or_deleted_ones_leave() {
        let now = Instant::now();
        let mut q = Queue::new(Backoff::default());
        q.observe("t", &sealed(&[1, 2, 3]), |b| b == 1, now);
        assert_eq!(q.backlog(), (2, 200));
        // 2 is recorded now, 3 was deleted by GC, 4 is new.
        q.observe("t", &sealed(&[2, 4]), |b| b == 2, now);
        assert_eq!(q.backlog(), (1, 100));
        assert_eq!(q.next(now, Duration::ZERO), Next::Upload("t".into(), 4));
        q.observe("u", &sealed(&[1]), |_| false, now);
        q.retain_topics(|t| t == "u");
        assert_eq!(q.backlog(), (1, 100));
        assert_eq!(q.next(now, Duration::ZERO), Next::Upload("u".into(), 1));
    }

    #[test]
    fn the_oldest_segment_goes_first_once_its_wait_has_passed() {
        let t0 = Instant::now();
        let mut q = Queue::new(Backoff::default());
        let after = 10 * SECOND;
        q.observe("b", &sealed(&[5]), |_| false, t0);
        q.observe("a", &sealed(&[9]), |_| false, t0 + SECOND);
        let cases = [
            (t0, Next::Wait(Some(t0 + after))),
            (t0 + after, Next::Upload("b".into(), 5)),
            (t0 + 20 * SECOND, Next::Upload("b".into(), 5)),
        ];
        for (now, want) in cases {
            assert_eq!(q.next(now, after), want);
        }
        q.succeeded("b", 5);
        assert_eq!(q.next(t0 + 20 * SECOND, after), Next::Upload("a".into(), 9));
        q.succeeded("a", 9);
        assert_eq!(q.next(t0, after), Next::Wait(None));
    }

    #[test]
    fn a_failure_pauses_every_upload_and_keeps_the_segment_queued() {
        let t0 = Instant::now();
        let backoff = Backoff {
            first: 2 * SECOND,
            max: 8 * SECOND,
        };
        let mut q = Queue::new(backoff);
        q.observe("t", &sealed(&[1, 2]), |_| false, t0);
        // Jitter 0: waits of 1, 2, 4, 4 s after 1, 2, 3, 4 failures in a row.
        q.failed("t", 1, t0, 0.0);
        assert_eq!(q.next(t0, Duration::ZERO), Next::Wait(Some(t0 + SECOND)));
        assert_eq!(q.backlog(), (2, 200), "a failed segment stays queued");
        // After the pause the oldest goes first again (segment 1: its own wait has passed too).
        let t1 = t0 + SECOND;
        assert_eq!(q.next(t1, Duration::ZERO), Next::Upload("t".into(), 1));
        q.failed("t", 1, t1, 0.0);
        assert_eq!(
            q.next(t1, Duration::ZERO),
            Next::Wait(Some(t1 + 2 * SECOND))
        );
        // Segment 1 fails twice more (4 attempts: its own wait is 4 s); then segment 2 is
        // uploaded: the pause ends, segment 1 still waits out its own back-off.
        let t2 = t1 + 2 * SECOND;
        q.failed("t", 1, t2, 0.0);
        q.failed("t", 1, t2, 0.0);
        q.succeeded("t", 2);
        assert_eq!(
            q.next(t2, Duration::ZERO),
            Next::Wait(Some(t2 + 4 * SECOND))
        );
        assert_eq!(
            q.next(t2 + 4 * SECOND, Duration::ZERO),
            Next::Upload("t".into(), 1)
        );
        q.gone("t", 1);
        assert_eq!(q.backlog(), (0, 0));
    }
}
