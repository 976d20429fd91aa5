//! Local retention: which uploaded segments' local `.rqlog` files are removed, oldest first.
//! A pure choice over the node's sealed segments (docs/tiering.md, "Local retention"); the
//! uploader does the I/O (record first, then the file). Under disk pressure every uploaded
//! local copy is a candidate, oldest first, whatever the bounds ("A full volume"): the caller
//! stops once the pressure is over. A segment not uploaded is never chosen.

use std::time::Duration;

/// When the local copies of uploaded segments go (`tiering.local_retention_bytes` and
/// `local_retention_seconds`; both unset keeps every local copy, as before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalRetention {
    /// The most bytes of sealed `.rqlog` files the node keeps on its volume, over all its
    /// topics: above it, the oldest uploaded ones are removed until it holds.
    pub bytes: Option<u64>,
    /// Uploaded segments whose newest message is older than this lose their local copy.
    pub age: Option<Duration>,
}

impl LocalRetention {
    /// Keeps every local copy.
    pub const KEEP: LocalRetention = LocalRetention {
        bytes: None,
        age: None,
    };

    /// Whether any local copy may be removed.
    pub fn evicts(&self) -> bool {
        self.bytes.is_some() || self.age.is_some()
    }
}

/// Whether the volume needs space now (the disk guard's state, when pressure may evict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pressure {
    /// Only the bounds decide.
    None,
    /// The volume is under disk pressure: every uploaded local copy may go, oldest first
    /// (the caller re-samples after each and stops when the pressure is over).
    Full,
}

/// A sealed segment whose `.rqlog` is on the volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub topic: String,
    pub base: u64,
    pub bytes: u64,
    /// Publish time (ns) of its newest message: what "oldest" means.
    pub newest_ns: i64,
    /// Recorded durably as uploaded (only those may go).
    pub uploaded: bool,
}

/// The segments whose local copy goes now, oldest first: every uploaded one older than the
/// age bound, then, while the local sealed bytes (uploaded or not) exceed the byte bound, the
/// oldest uploaded ones left. A segment not uploaded is never chosen (it still counts: the
/// bound is exceeded while uploads lag). The active segment is never a candidate.
pub(crate) fn choose(
    candidates: &[Candidate],
    retention: LocalRetention,
    now_ns: i64,
    pressure: Pressure,
) -> Vec<(String, u64)> {
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by(|a, b| (a.newest_ns, &a.topic, a.base).cmp(&(b.newest_ns, &b.topic, b.base)));
    let mut local: u64 = candidates.iter().map(|c| c.bytes).sum();
    let cutoff = retention
        .age
        .map(|a| now_ns.saturating_sub(i64::try_from(a.as_nanos()).unwrap_or(i64::MAX)));
    let mut chosen = Vec::new();
    for c in order {
        if !c.uploaded {
            continue;
        }
        let too_old = cutoff.is_some_and(|cut| c.newest_ns < cut);
        let too_many = retention.bytes.is_some_and(|b| local > b);
        if too_old || too_many || pressure == Pressure::Full {
            local -= c.bytes;
            chosen.push((c.topic.clone(), c.base));
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(topic: &str, base: u64, bytes: u64, newest_ns: i64, uploaded: bool) -> Candidate {
        Candidate {
            topic: topic.into(),
            base,
            bytes,
            newest_ns,
            uploaded,
        }
    }

    const S: i64 = 1_000_000_000;

    fn bytes(b: u64) -> LocalRetention {
        LocalRetention {
            bytes: Some(b),
            age: None,
        }
    }

    fn age(secs: u64) -> LocalRetention {
        LocalRetention {
            bytes: None,
            age: Some(Duration::from_secs(secs)),
        }
    }

    /// Name, candidates, retention, now, pressure, the segments chosen.
    type Case = (
        &'static str,
        Vec<Candidate>,
        LocalRetention,
        i64,
        Pressure,
        Vec<(&'static str, u64)>,
    );

    #[test]
    fn eviction_choice_table() {
        let three = [
            c("a", 1, 100, 10 * S, true),
            c("b", 1, 100, 20 * S, true),
            c("a", 5, 100, 30 * S, true),
        ];
        let cases: Vec<Case> = vec![
            (
                "keep: nothing goes",
                three.to_vec(),
                LocalRetention::KEEP,
                100 * S,
                Pressure::None,
                vec![],
            ),
            (
                "under the bound",
                three.to_vec(),
                bytes(300),
                100 * S,
                Pressure::None,
                vec![],
            ),
            (
                "over by one: the oldest",
                three.to_vec(),
                bytes(299),
                100 * S,
                Pressure::None,
                vec![("a", 1)],
            ),
            (
                "oldest first across topics",
                three.to_vec(),
                bytes(100),
                100 * S,
                Pressure::None,
                vec![("a", 1), ("b", 1)],
            ),
            (
                "a bound of 0 removes every uploaded one",
                three.to_vec(),
                bytes(0),
                100 * S,
                Pressure::None,
                vec![("a", 1), ("b", 1), ("a", 5)],
            ),
            (
                "not uploaded: skipped, but counted",
                vec![
                    c("a", 1, 100, 10 * S, false),
                    c("a", 2, 100, 20 * S, true),
                    c("a", 3, 100, 30 * S, true),
                ],
                bytes(100),
                100 * S,
                Pressure::None,
                vec![("a", 2), ("a", 3)],
            ),
            (
                "nothing uploaded: nothing goes however full",
                vec![c("a", 1, 100, 10 * S, false)],
                bytes(0),
                100 * S,
                Pressure::None,
                vec![],
            ),
            (
                "age: older than the bound",
                three.to_vec(),
                age(75),
                100 * S,
                Pressure::None,
                vec![("a", 1), ("b", 1)],
            ),
            (
                "age and bytes together",
                three.to_vec(),
                LocalRetention {
                    bytes: Some(150),
                    age: Some(Duration::from_secs(85)),
                },
                100 * S,
                Pressure::None,
                vec![("a", 1), ("b", 1)],
            ),
            (
                "age: a newer one is kept",
                three.to_vec(),
                age(95),
                100 * S,
                Pressure::None,
                vec![],
            ),
        ];
        check(cases);
    }

    #[test]
    fn under_pressure_every_uploaded_copy_is_a_candidate_and_nothing_else() {
        let three = [
            c("a", 1, 100, 10 * S, true),
            c("b", 1, 100, 20 * S, true),
            c("a", 5, 100, 30 * S, true),
        ];
        let cases: Vec<Case> = vec![
            (
                "pressure: every uploaded copy, oldest first, under the bounds",
                three.to_vec(),
                bytes(1_000),
                100 * S,
                Pressure::Full,
                vec![("a", 1), ("b", 1), ("a", 5)],
            ),
            (
                "pressure, retention keeps everything: uploaded copies still go",
                three.to_vec(),
                LocalRetention::KEEP,
                100 * S,
                Pressure::Full,
                vec![("a", 1), ("b", 1), ("a", 5)],
            ),
            (
                "pressure never takes a segment not uploaded",
                vec![
                    c("a", 1, 100, 10 * S, false),
                    c("b", 1, 100, 20 * S, true),
                    c("a", 2, 100, 30 * S, false),
                ],
                bytes(1_000),
                100 * S,
                Pressure::Full,
                vec![("b", 1)],
            ),
            (
                "pressure, nothing uploaded: nothing goes",
                vec![c("a", 1, 100, 10 * S, false)],
                LocalRetention::KEEP,
                100 * S,
                Pressure::Full,
                vec![],
            ),
        ];
        check(cases);
    }

    fn check(cases: Vec<Case>) {
        for (name, candidates, retention, now, pressure, want) in cases {
            let got = choose(&candidates, retention, now, pressure);
            let want: Vec<(String, u64)> = want.into_iter().map(|(t, b)| (t.into(), b)).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
