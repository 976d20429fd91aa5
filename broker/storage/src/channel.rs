//! The durable state of one channel and the commands that change it.
//!
//! A channel is a cursor over its topic's log. Durable facts are: where it started (`barrier`),
//! which positions are finished (`ack_floor` + sparse `acked` above it), which were requeued
//! with a delay and how often they were attempted (`requeued`), pause, and monotonic counters.
//! In-flight leases are memory-only: after a restart every unfinished message is deliverable.
//! [`ChannelState::apply`] is pure and idempotent, so replaying a WAL over a newer checkpoint
//! is harmless.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A durable channel command (one WAL frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelCommand {
    /// FIN: the message at `position` is done.
    Finish {
        /// Topic position.
        position: u64,
        /// Message id (for diagnostics).
        id: u64,
    },
    /// REQ: deliver again at `available_at_ms`; `attempts` so far; `requeue_count` is cumulative.
    Requeue {
        /// Topic position.
        position: u64,
        /// Message id.
        id: u64,
        /// Earliest redelivery time (ms since the epoch).
        available_at_ms: i64,
        /// Delivery attempts made so far.
        attempts: u16,
        /// Channel requeue counter after this command.
        requeue_count: u64,
    },
    /// Pause or unpause deliveries.
    Pause(bool),
    /// Everything through `through` is finished (channel emptied).
    Empty {
        /// Last position emptied.
        through: u64,
    },
    /// Protective eviction: every position through `through` was deleted from the topic log
    /// under disk pressure; the channel moves past it as if finished (docs/api.md, "Disk pressure").
    Evict {
        /// Last evicted position.
        through: u64,
    },
    /// Channel timeout counter after an expiry.
    Timeout {
        /// Cumulative timeout count.
        timeout_count: u64,
    },
}

const TAG_FINISH: u8 = 1;
const TAG_REQUEUE: u8 = 7;
const TAG_PAUSE: u8 = 3;
const TAG_EMPTY: u8 = 4;
const TAG_EVICT: u8 = 5;
const TAG_TIMEOUT: u8 = 6;

impl ChannelCommand {
    /// Appends the command body (tag byte + fields, big-endian) to `b`.
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        match *self {
            ChannelCommand::Finish { position, id } => {
                b.push(TAG_FINISH);
                b.extend_from_slice(&position.to_be_bytes());
                b.extend_from_slice(&id.to_be_bytes());
            }
            ChannelCommand::Requeue {
                position,
                id,
                available_at_ms,
                attempts,
                requeue_count,
            } => {
                b.push(TAG_REQUEUE);
                b.extend_from_slice(&position.to_be_bytes());
                b.extend_from_slice(&id.to_be_bytes());
                b.extend_from_slice(&available_at_ms.to_be_bytes());
                b.extend_from_slice(&attempts.to_be_bytes());
                b.extend_from_slice(&requeue_count.to_be_bytes());
            }
            ChannelCommand::Pause(p) => {
                b.push(TAG_PAUSE);
                b.push(u8::from(p));
            }
            ChannelCommand::Empty { through } => {
                b.push(TAG_EMPTY);
                b.extend_from_slice(&through.to_be_bytes());
            }
            ChannelCommand::Evict { through } => {
                b.push(TAG_EVICT);
                b.extend_from_slice(&through.to_be_bytes());
            }
            ChannelCommand::Timeout { timeout_count } => {
                b.push(TAG_TIMEOUT);
                b.extend_from_slice(&timeout_count.to_be_bytes());
            }
        }
    }

    /// Decodes a command body; `None` for an unknown tag or wrong length.
    pub fn decode(b: &[u8]) -> Option<ChannelCommand> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
        };
        match (*b.first()?, b.len()) {
            (TAG_FINISH, 17) => Some(ChannelCommand::Finish {
                position: u64_at(1)?,
                id: u64_at(9)?,
            }),
            (TAG_REQUEUE, 35) => Some(ChannelCommand::Requeue {
                position: u64_at(1)?,
                id: u64_at(9)?,
                available_at_ms: u64_at(17)? as i64,
                attempts: u16::from_be_bytes(b.get(25..27)?.try_into().ok()?),
                requeue_count: u64_at(27)?,
            }),
            (TAG_PAUSE, 2) => Some(ChannelCommand::Pause(b[1] != 0)),
            (TAG_EMPTY, 9) => Some(ChannelCommand::Empty {
                through: u64_at(1)?,
            }),
            (TAG_EVICT, 9) => Some(ChannelCommand::Evict {
                through: u64_at(1)?,
            }),
            (TAG_TIMEOUT, 9) => Some(ChannelCommand::Timeout {
                timeout_count: u64_at(1)?,
            }),
            _ => None,
        }
    }
}

/// The durable part of a channel (the checkpoint body).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelState {
    /// Format version (7).
    pub format: u32,
    /// Channel name (must match the file stem).
    pub name: String,
    /// Start position − 1: positions at or below were never part of this channel.
    pub barrier: u64,
    /// Every position at or below is finished.
    pub ack_floor: u64,
    /// Finished positions above the floor.
    pub acked: BTreeSet<u64>,
    /// Requeued positions: (available_at_ms, attempts).
    pub requeued: BTreeMap<u64, (i64, u16)>,
    /// Cumulative REQ count.
    pub requeue_count: u64,
    /// Cumulative timeout count.
    pub timeout_count: u64,
    /// Whether deliveries are paused.
    pub paused: bool,
}

impl ChannelState {
    /// A new channel whose first message is `start`.
    pub fn new(name: &str, start: u64) -> ChannelState {
        let barrier = start.saturating_sub(1);
        ChannelState {
            format: 7,
            name: name.to_string(),
            barrier,
            ack_floor: barrier,
            ..ChannelState::default()
        }
    }

    /// Whether `position` is finished (or before the channel's start).
    pub fn is_done(&self, position: u64) -> bool {
        position <= self.ack_floor || self.acked.contains(&position)
    }

    /// Applies one command (idempotent).
    pub fn apply(&mut self, cmd: &ChannelCommand) {
        match *cmd {
            ChannelCommand::Finish { position, .. } => {
                self.requeued.remove(&position);
                if position > self.ack_floor {
                    self.acked.insert(position);
                    self.advance_floor();
                }
            }
            ChannelCommand::Requeue {
                position,
                available_at_ms,
                attempts,
                requeue_count,
                ..
            } => {
                // Attempts only grow, so an older frame replayed over a newer checkpoint is a no-op.
                let newer = self
                    .requeued
                    .get(&position)
                    .is_none_or(|&(_, a)| attempts >= a);
                if !self.is_done(position) && newer {
                    self.requeued.insert(position, (available_at_ms, attempts));
                }
                self.requeue_count = self.requeue_count.max(requeue_count);
            }
            ChannelCommand::Pause(p) => self.paused = p,
            ChannelCommand::Empty { through } | ChannelCommand::Evict { through } => {
                if through > self.ack_floor {
                    self.ack_floor = through;
                    self.acked = self.acked.split_off(&(through + 1));
                    self.requeued = self.requeued.split_off(&(through + 1));
                    self.advance_floor();
                }
            }
            ChannelCommand::Timeout { timeout_count } => {
                self.timeout_count = self.timeout_count.max(timeout_count)
            }
        }
    }

    /// Marks positions that do not exist in the log (a lost relaxed tail) as skipped so the
    /// floor can move past them.
    pub fn skip_absent(&mut self, positions: impl IntoIterator<Item = u64>) {
        for p in positions {
            if p > self.ack_floor {
                self.acked.insert(p);
            }
        }
        self.advance_floor();
    }

    fn advance_floor(&mut self) {
        while self.acked.first() == Some(&(self.ack_floor + 1)) {
            self.acked.pop_first();
            self.ack_floor += 1;
        }
    }

    /// Highest position this state mentions (for position high-water after a lost tail).
    pub fn highest_position(&self) -> u64 {
        let a = self.acked.last().copied().unwrap_or(0);
        let r = self.requeued.keys().next_back().copied().unwrap_or(0);
        self.ack_floor.max(a).max(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(c: &ChannelCommand) -> Vec<u8> {
        let mut b = Vec::new();
        c.encode_into(&mut b);
        b
    }

    #[test]
    fn every_command_round_trips_through_its_encoding() {
        let cmds = [
            ChannelCommand::Finish { position: 5, id: 9 },
            ChannelCommand::Requeue {
                position: 6,
                id: 10,
                available_at_ms: -3,
                attempts: 4,
                requeue_count: 77,
            },
            ChannelCommand::Pause(true),
            ChannelCommand::Empty { through: 99 },
            ChannelCommand::Evict { through: 42 },
            ChannelCommand::Timeout { timeout_count: 12 },
        ];
        for c in cmds {
            assert_eq!(ChannelCommand::decode(&encoded(&c)), Some(c));
        }
        assert_eq!(ChannelCommand::decode(&[42, 0]), None);
        assert_eq!(ChannelCommand::decode(&[TAG_FINISH, 0, 0]), None);
    }

    #[test]
    fn finishing_out_of_order_advances_the_floor_only_when_contiguous() {
        let mut s = ChannelState::new("c", 1);
        s.apply(&ChannelCommand::Finish { position: 2, id: 0 });
        assert_eq!((s.ack_floor, s.acked.len()), (0, 1));
        s.apply(&ChannelCommand::Finish { position: 1, id: 0 });
        assert_eq!((s.ack_floor, s.acked.len()), (2, 0));
        assert!(s.is_done(2) && !s.is_done(3));
    }

    #[test]
    fn a_replayed_requeue_cannot_resurrect_a_finished_message() {
        let mut s = ChannelState::new("c", 1);
        let req = ChannelCommand::Requeue {
            position: 3,
            id: 0,
            available_at_ms: 5,
            attempts: 2,
            requeue_count: 1,
        };
        s.apply(&req);
        assert_eq!(s.requeued.get(&3), Some(&(5, 2)));
        s.apply(&ChannelCommand::Finish { position: 3, id: 0 });
        s.apply(&req);
        assert!(s.requeued.is_empty());
        assert_eq!(s.requeue_count, 1);
    }

    #[test]
    fn empty_finishes_everything_through_the_given_position() {
        let mut s = ChannelState::new("c", 10);
        s.apply(&ChannelCommand::Finish {
            position: 20,
            id: 0,
        });
        s.apply(&ChannelCommand::Requeue {
            position: 15,
            id: 0,
            available_at_ms: 0,
            attempts: 1,
            requeue_count: 1,
        });
        s.apply(&ChannelCommand::Empty { through: 18 });
        assert_eq!(s.ack_floor, 18);
        assert!(s.requeued.is_empty());
        s.apply(&ChannelCommand::Finish {
            position: 19,
            id: 0,
        });
        assert_eq!(s.ack_floor, 20);
    }

    #[test]
    fn evict_moves_the_floor_past_the_deleted_prefix_and_replays_idempotently() {
        let mut s = ChannelState::new("c", 1);
        s.apply(&ChannelCommand::Finish { position: 7, id: 0 });
        s.apply(&ChannelCommand::Requeue {
            position: 3,
            id: 0,
            available_at_ms: 0,
            attempts: 2,
            requeue_count: 1,
        });
        let evict = ChannelCommand::Evict { through: 6 };
        assert_eq!(encoded(&evict).len(), 9);
        assert_eq!(encoded(&evict)[0], 5);
        s.apply(&evict);
        assert_eq!(s.ack_floor, 7);
        assert!(s.requeued.is_empty() && s.acked.is_empty());
        s.apply(&evict);
        assert_eq!(s.ack_floor, 7);
    }

    #[test]
    fn counters_and_pause_are_absolute_so_replay_is_idempotent() {
        let mut s = ChannelState::new("c", 1);
        s.apply(&ChannelCommand::Timeout { timeout_count: 4 });
        s.apply(&ChannelCommand::Timeout { timeout_count: 3 });
        s.apply(&ChannelCommand::Pause(true));
        assert_eq!((s.timeout_count, s.paused), (4, true));
    }
}
