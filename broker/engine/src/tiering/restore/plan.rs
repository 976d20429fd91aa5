//! The restore's decisions, as plain functions of what the bucket and the checkpoint say:
//! which segments to try, in which order, and what was lost, counted per topic and channel.

use std::collections::BTreeMap;

use rustqueue_storage::{ChannelState, TieredSegment};

use super::keys::parse_segment_key;

/// An object the bucket lists: its key and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Object {
    pub key: String,
    pub size: u64,
    /// The CRC-32C the checkpoint recorded for it, when it did (also checked against the
    /// object's own metadata at download).
    pub recorded_crc32c: Option<u32>,
}

/// A sealed segment a restore may bring back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub base: u64,
    /// Its `.rqlog` object (`None`: recorded by the checkpoint but not in the bucket).
    pub log: Option<Object>,
    /// Its `.rqidx` object.
    pub index: Option<Object>,
}

/// The segments of one incarnation, in base order: every segment the checkpoint records,
/// and every segment whose `.rqidx` is in the bucket (uploaded after the checkpoint: the index
/// goes up only once its segment is whole). An `.rqlog` alone that no checkpoint records is an
/// upload cut short, and is left out.
pub(crate) fn candidates(recorded: &[TieredSegment], listed: &[(String, u64)]) -> Vec<Candidate> {
    let mut by_base: BTreeMap<u64, Candidate> = BTreeMap::new();
    let crc_of = |base: u64, ext: &str| {
        recorded
            .iter()
            .find(|s| s.base == base)
            .and_then(|s| s.objects.iter().find(|o| o.key.ends_with(ext)))
            .map(|o| o.crc32c)
    };
    let indexed: Vec<u64> = listed
        .iter()
        .filter_map(|(k, _)| parse_segment_key(k))
        .filter(|(_, ext)| *ext == "rqidx")
        .map(|(b, _)| b)
        .collect();
    let wanted = |base: u64| recorded.iter().any(|s| s.base == base) || indexed.contains(&base);
    for s in recorded {
        by_base.entry(s.base).or_insert(Candidate {
            base: s.base,
            log: None,
            index: None,
        });
    }
    for (key, size) in listed {
        let Some((base, ext)) = parse_segment_key(key) else {
            continue;
        };
        if !wanted(base) {
            continue;
        }
        let c = by_base.entry(base).or_insert(Candidate {
            base,
            log: None,
            index: None,
        });
        let object = Object {
            key: key.clone(),
            size: *size,
            recorded_crc32c: crc_of(base, &format!(".{ext}")),
        };
        match ext {
            "rqlog" => c.log = Some(object),
            "rqidx" => c.index = Some(object),
            _ => {}
        }
    }
    by_base.into_values().collect()
}

/// A range of positions, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PositionRange {
    /// The first position.
    pub from: u64,
    /// The last position.
    pub through: u64,
}

impl PositionRange {
    /// How many positions it holds.
    pub fn messages(&self) -> u64 {
        self.through - self.from + 1
    }
}

/// The positions a topic had (from the checkpoint's `first_position` through its `head`) that
/// the restore does not bring back, given the positions of the restored segments (`restored`:
/// first and last, `None` when none was restored): before the first restored one, and after
/// the last.
pub(crate) fn lost_ranges(
    first_position: u64,
    head: u64,
    restored: Option<(u64, u64)>,
) -> Vec<PositionRange> {
    let first_position = first_position.max(1);
    let mut out = Vec::new();
    let mut push = |from: u64, through: u64| {
        if from <= through {
            out.push(PositionRange { from, through });
        }
    };
    match restored {
        None => push(first_position, head),
        Some((first, last)) => {
            push(first_position, head.min(first.saturating_sub(1)));
            push(first_position.max(last + 1), head);
        }
    }
    out
}

/// How many positions of `ranges` the channel had not finished: the messages it loses.
pub(crate) fn unfinished(state: &ChannelState, ranges: &[PositionRange]) -> u64 {
    ranges
        .iter()
        .map(|r| {
            let done_by_floor = state.ack_floor.min(r.through).saturating_sub(r.from - 1);
            let acked = state.acked.range(r.from..=r.through).count() as u64;
            // `acked` holds positions above the floor only.
            r.messages() - done_by_floor - acked
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustqueue_storage::TieredObject;

    fn range(from: u64, through: u64) -> PositionRange {
        PositionRange { from, through }
    }

    #[test]
    fn lost_positions_are_those_before_and_after_the_restored_segments() {
        let cases = [
            // (first_position, head, restored, lost)
            (1, 100, Some((1, 60)), vec![range(61, 100)]),
            (1, 60, Some((1, 60)), vec![]),
            (1, 50, Some((1, 60)), vec![]),
            (1, 100, None, vec![range(1, 100)]),
            (1, 0, None, vec![]),
            (41, 100, Some((41, 60)), vec![range(61, 100)]),
            // A segment collected before the checkpoint was skipped: nothing lost before.
            (41, 100, Some((21, 60)), vec![range(61, 100)]),
            // The first uploaded segment is gone: what lies before the restored ones is lost.
            (1, 100, Some((21, 60)), vec![range(1, 20), range(61, 100)]),
            (101, 100, None, vec![]),
            (0, 3, None, vec![range(1, 3)]),
        ];
        for (first, head, restored, want) in cases {
            assert_eq!(
                lost_ranges(first, head, restored),
                want,
                "first {first} head {head} restored {restored:?}"
            );
        }
    }

    #[test]
    fn a_channel_loses_only_what_it_had_not_finished() {
        let mut c = ChannelState::new("c", 1);
        let lost = [range(61, 100)];
        assert_eq!(unfinished(&c, &lost), 40);
        c.ack_floor = 70;
        assert_eq!(unfinished(&c, &lost), 30);
        c.acked.extend([75, 80, 120]);
        assert_eq!(unfinished(&c, &lost), 28);
        c.ack_floor = 200;
        c.acked.clear();
        assert_eq!(unfinished(&c, &lost), 0);
        let late = ChannelState::new("late", 91);
        assert_eq!(
            unfinished(&late, &lost),
            10,
            "positions before its start are not its"
        );
        assert_eq!(unfinished(&late, &[range(1, 5), range(95, 96)]), 2);
    }

    #[test]
    fn candidates_are_recorded_segments_and_whole_uploads_in_base_order() {
        let recorded = vec![TieredSegment {
            base: 1,
            objects: vec![
                TieredObject {
                    key: "p/segments/segment-00000000000000000001.rqlog".into(),
                    size: 10,
                    crc32c: 7,
                },
                TieredObject {
                    key: "p/segments/segment-00000000000000000001.rqidx".into(),
                    size: 5,
                    crc32c: 8,
                },
            ],
            evicted: false,
        }];
        let listed: Vec<(String, u64)> = [
            ("p/segments/segment-00000000000000000001.rqlog", 10),
            ("p/segments/segment-00000000000000000001.rqidx", 5),
            ("p/segments/segment-00000000000000000004.rqlog", 11),
            ("p/segments/segment-00000000000000000004.rqidx", 6),
            // cut short: no index, not recorded
            ("p/segments/segment-00000000000000000007.rqlog", 12),
            ("p/checkpoint.json", 3),
        ]
        .into_iter()
        .map(|(k, s)| (k.to_owned(), s))
        .collect();
        let got = candidates(&recorded, &listed);
        let bases: Vec<u64> = got.iter().map(|c| c.base).collect();
        assert_eq!(bases, [1, 4]);
        assert_eq!(got[0].log.as_ref().unwrap().recorded_crc32c, Some(7));
        assert_eq!(got[0].index.as_ref().unwrap().recorded_crc32c, Some(8));
        assert_eq!(got[1].log.as_ref().unwrap().recorded_crc32c, None);
        // Recorded but gone from the bucket: still a candidate, with no objects.
        let got = candidates(&recorded, &[]);
        assert_eq!((got.len(), got[0].log.is_none()), (1, true));
    }
}
