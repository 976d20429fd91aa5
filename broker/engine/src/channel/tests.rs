//! Unit tests of the channel state transitions: take, expire, finish, requeue, touch,
//! release, empty and dead-letter reservations, over a small log on the simulated disk.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustqueue_storage::AppendBatch;
use rustqueue_storage::simfs::SimFs;
use rustqueue_storage::{ChannelCommand, ChannelState, Fault, TopicLog};

use super::{ChanState, ConsumerState, Take, TakeRules};
use crate::error::DeliveryError;

const NOW_MS: i64 = 1_000_000;
const TIMEOUT: Duration = Duration::from_secs(10);

/// A log holding `n` messages; message `i` (1-based) becomes available at `avail(i)`.
fn log(n: u64, avail: impl Fn(u64) -> i64) -> TopicLog {
    let fs = Arc::new(SimFs::new());
    let mut log = TopicLog::open(
        fs.clone(),
        Path::new("/t"),
        Fault::default(),
        1 << 20,
        1,
        Default::default(),
        rustqueue_storage::DamageSink::detached(fs, "t"),
    )
    .unwrap();
    for i in 1..=n {
        log.append(&AppendBatch {
            first_id: 100 + i,
            bodies: &[format!("m{i}")],
            timestamp_ns: 1,
            available_at_ms: avail(i),
        })
        .unwrap();
    }
    log
}

fn state(consumers: &[u64]) -> ChanState {
    let mut s = ChanState::new(ChannelState::new("c", 1));
    for &id in consumers {
        s.consumers.insert(
            id,
            ConsumerState {
                info: Default::default(),
                ready: 100,
                in_flight: 0,
                message_count: 0,
                finish_count: 0,
                requeue_count: 0,
                connect_ts: 0,
                sample_rate: 0,
                sample_counter: 0,
                msg_timeout: TIMEOUT,
            },
        );
    }
    s
}

fn rules(visible: u64, now: Instant) -> TakeRules {
    TakeRules {
        visible,
        now,
        now_ms: NOW_MS,
        max_attempts: 16,
        dead_letter: true,
    }
}

/// Takes for `consumer`; returns (position, id, attempts) of a delivery.
fn take(
    s: &mut ChanState,
    consumer: u64,
    log: &TopicLog,
    r: &TakeRules,
) -> Option<(u64, u64, u16)> {
    let mut persist = Vec::new();
    match s.take(consumer, log, r, &mut persist) {
        Take::Deliver { entry, attempts } => Some((entry.position, entry.id, attempts)),
        Take::DeadLetter { .. } => panic!("unexpected dead letter"),
        Take::Nothing => None,
    }
}

#[test]
fn take_delivers_visible_positions_in_order_and_counts_them() {
    let log = log(3, |_| 0);
    let mut s = state(&[1]);
    let now = Instant::now();
    assert_eq!(take(&mut s, 1, &log, &rules(2, now)), Some((1, 101, 1)));
    assert_eq!(take(&mut s, 1, &log, &rules(2, now)), Some((2, 102, 1)));
    assert_eq!(
        take(&mut s, 1, &log, &rules(2, now)),
        None,
        "position 3 is not visible"
    );
    assert_eq!(s.consumer_in_flight(1), 2);
    assert_eq!(s.consumers[&1].message_count, 2);
    assert_eq!(s.min_in_flight(), Some(1));
    assert_eq!(s.counts(3), (2, 0, 1));
    assert!(s.may_have_more(3) && !s.may_have_more(2));
}

#[test]
fn finish_is_once_only_by_the_holder_and_moves_the_ack_floor() {
    let log = log(2, |_| 0);
    let mut s = state(&[1, 2]);
    let r = rules(2, Instant::now());
    let (_, id1, _) = take(&mut s, 1, &log, &r).unwrap();
    let (_, id2, _) = take(&mut s, 1, &log, &r).unwrap();
    assert_eq!(
        s.finish(2, id1),
        Err(DeliveryError::NotInFlight),
        "not its delivery"
    );
    assert_eq!(
        s.finish(1, id2),
        Ok(ChannelCommand::Finish {
            position: 2,
            id: id2
        })
    );
    assert_eq!((s.durable.ack_floor, s.durable.is_done(2)), (0, true));
    s.finish(1, id1).unwrap();
    assert_eq!(s.durable.ack_floor, 2);
    assert_eq!(
        s.finish(1, id1),
        Err(DeliveryError::NotInFlight),
        "a second FIN"
    );
    assert_eq!(
        (s.consumer_in_flight(1), s.consumers[&1].finish_count),
        (0, 2)
    );
    assert_eq!(s.counts(2), (0, 0, 0));
    assert_eq!(s.min_in_flight(), None);
}

#[test]
fn an_expired_delivery_returns_with_the_next_attempt_and_counts_a_timeout() {
    let log = log(1, |_| 0);
    let mut s = state(&[1]);
    let t0 = Instant::now();
    let (pos, id, _) = take(&mut s, 1, &log, &rules(1, t0)).unwrap();
    assert_eq!(s.next_wake(t0, NOW_MS), Some(t0 + TIMEOUT));
    assert_eq!(s.expire(t0 + TIMEOUT - Duration::from_millis(1)), None);
    assert_eq!(
        s.expire(t0 + TIMEOUT),
        Some(ChannelCommand::Timeout { timeout_count: 1 })
    );
    assert_eq!(s.consumer_in_flight(1), 0);
    assert_eq!(
        s.finish(1, id),
        Err(DeliveryError::NotInFlight),
        "a late FIN"
    );
    let again = take(&mut s, 1, &log, &rules(1, t0 + TIMEOUT)).unwrap();
    assert_eq!(again, (pos, id, 2));
    assert_eq!(s.durable.timeout_count, 1);
}

#[test]
fn touch_restarts_the_timeout_of_the_holders_delivery_only() {
    let log = log(1, |_| 0);
    let mut s = state(&[1, 2]);
    let t0 = Instant::now();
    let (_, id, _) = take(&mut s, 1, &log, &rules(1, t0)).unwrap();
    let later = t0 + TIMEOUT / 2;
    assert_eq!(s.touch(2, id, later), Err(DeliveryError::NotInFlight));
    s.touch(1, id, later).unwrap();
    assert_eq!(
        s.expire(t0 + TIMEOUT),
        None,
        "the old deadline no longer applies"
    );
    assert_eq!(s.consumer_in_flight(1), 1);
    assert!(s.expire(later + TIMEOUT).is_some());
    assert_eq!(s.touch(1, id, later), Err(DeliveryError::NotInFlight));
}

#[test]
fn requeue_keeps_attempts_and_a_delay_defers_the_redelivery() {
    let log = log(2, |_| 0);
    let mut s = state(&[1]);
    let now = Instant::now();
    let (p1, id1, _) = take(&mut s, 1, &log, &rules(2, now)).unwrap();
    let cmd = s.requeue(1, id1, Duration::ZERO, NOW_MS).unwrap();
    assert_eq!(
        cmd,
        ChannelCommand::Requeue {
            position: p1,
            id: id1,
            available_at_ms: NOW_MS,
            attempts: 1,
            requeue_count: 1
        }
    );
    assert_eq!(
        take(&mut s, 1, &log, &rules(2, now)),
        Some((p1, id1, 2)),
        "at once"
    );
    let cmd = s.requeue(1, id1, Duration::from_secs(5), NOW_MS).unwrap();
    assert!(matches!(
        cmd,
        ChannelCommand::Requeue {
            attempts: 2,
            requeue_count: 2,
            ..
        }
    ));
    assert_eq!(s.counts(2), (0, 1, 1));
    assert_eq!(take(&mut s, 1, &log, &rules(2, now)).map(|d| d.0), Some(2));
    assert_eq!(
        take(&mut s, 1, &log, &rules(2, now)),
        None,
        "still deferred"
    );
    let due = TakeRules {
        now_ms: NOW_MS + 5_000,
        ..rules(2, now)
    };
    assert_eq!(take(&mut s, 1, &log, &due), Some((p1, id1, 3)));
    assert_eq!(s.consumers[&1].requeue_count, 2);
    assert_eq!(s.durable.requeue_count, 2);
}

#[test]
fn a_deferred_publish_waits_for_its_time_without_blocking_later_messages() {
    let log = log(2, |i| if i == 1 { NOW_MS + 500 } else { 0 });
    let mut s = state(&[1]);
    let now = Instant::now();
    assert_eq!(take(&mut s, 1, &log, &rules(2, now)).map(|d| d.0), Some(2));
    assert_eq!(take(&mut s, 1, &log, &rules(2, now)), None);
    assert_eq!(s.counts(2).1, 1, "one deferred");
    assert!(s.next_wake(now, NOW_MS).unwrap() <= now + Duration::from_millis(500));
    let due = TakeRules {
        now_ms: NOW_MS + 500,
        ..rules(2, now)
    };
    assert_eq!(
        take(&mut s, 1, &log, &due).map(|d| (d.0, d.2)),
        Some((1, 1))
    );
}

#[test]
fn a_released_consumers_deliveries_go_to_the_next_consumer() {
    let log = log(2, |_| 0);
    let mut s = state(&[1, 2]);
    let r = rules(2, Instant::now());
    let a = take(&mut s, 1, &log, &r).unwrap();
    let b = take(&mut s, 1, &log, &r).unwrap();
    s.release_consumer(1);
    assert!(!s.consumers.contains_key(&1));
    assert_eq!(s.finish(1, a.1), Err(DeliveryError::NotInFlight));
    assert_eq!(take(&mut s, 2, &log, &r), Some((a.0, a.1, 2)));
    assert_eq!(take(&mut s, 2, &log, &r), Some((b.0, b.1, 2)));
    assert_eq!(s.consumer_in_flight(2), 2);
}

#[test]
fn empty_drops_everything_through_its_position() {
    let log = log(4, |_| 0);
    let mut s = state(&[1]);
    let r = rules(4, Instant::now());
    let (_, id1, _) = take(&mut s, 1, &log, &r).unwrap();
    let (_, id2, _) = take(&mut s, 1, &log, &r).unwrap();
    s.requeue(1, id2, Duration::from_secs(60), NOW_MS).unwrap();
    assert_eq!(s.empty(3), ChannelCommand::Empty { through: 3 });
    assert_eq!((s.durable.ack_floor, s.consumer_in_flight(1)), (3, 0));
    assert!(s.durable.requeued.is_empty());
    assert_eq!(s.finish(1, id1), Err(DeliveryError::NotInFlight));
    assert_eq!(s.counts(4), (0, 0, 1));
    assert_eq!(
        take(&mut s, 1, &log, &r).map(|d| d.0),
        Some(4),
        "only later ones remain"
    );
    assert_eq!(take(&mut s, 1, &log, &r), None);
}

#[test]
fn the_last_attempt_becomes_an_internal_dead_letter_reservation() {
    let log = log(1, |_| 0);
    let mut s = state(&[1]);
    let r = TakeRules {
        max_attempts: 3,
        ..rules(1, Instant::now())
    };
    for attempt in 1..=2 {
        let (_, id, a) = take(&mut s, 1, &log, &r).unwrap();
        assert_eq!(a, attempt);
        s.requeue(1, id, Duration::ZERO, NOW_MS).unwrap();
    }
    let mut persist = Vec::new();
    let Take::DeadLetter { entry } = s.take(1, &log, &r, &mut persist) else {
        panic!("the third attempt is a dead letter");
    };
    assert_eq!(
        s.counts(1),
        (0, 0, 1),
        "the reservation is no consumer's in-flight; the message is pending until moved"
    );
    assert_eq!(
        s.min_in_flight(),
        Some(entry.position),
        "but it pins retention"
    );
    assert_eq!(s.consumer_in_flight(1), 0);
    assert_eq!(
        s.finish_internal(entry.id),
        Some(ChannelCommand::Finish {
            position: 1,
            id: entry.id
        })
    );
    assert_eq!(s.durable.ack_floor, 1);
    let no_dlq = TakeRules {
        dead_letter: false,
        ..r
    };
    let mut t = state(&[1]);
    for _ in 0..5 {
        let (_, id, _) = take(&mut t, 1, &log, &no_dlq).unwrap();
        t.requeue(1, id, Duration::ZERO, NOW_MS).unwrap();
    }
}

#[test]
fn a_recovered_state_redelivers_requeued_messages_at_their_time_with_their_attempts() {
    let log = log(3, |_| 0);
    let mut durable = ChannelState::new("c", 1);
    durable.apply(&ChannelCommand::Finish {
        position: 1,
        id: 101,
    });
    durable.apply(&ChannelCommand::Requeue {
        position: 2,
        id: 102,
        available_at_ms: NOW_MS + 100,
        attempts: 4,
        requeue_count: 9,
    });
    let mut s = ChanState::new(durable);
    s.consumers = state(&[1]).consumers;
    let now = Instant::now();
    assert_eq!(take(&mut s, 1, &log, &rules(3, now)).map(|d| d.0), Some(3));
    assert_eq!(take(&mut s, 1, &log, &rules(3, now)), None);
    let due = TakeRules {
        now_ms: NOW_MS + 100,
        ..rules(3, now)
    };
    assert_eq!(take(&mut s, 1, &log, &due), Some((2, 102, 5)));
}

#[test]
fn a_requeued_position_the_log_no_longer_holds_is_passed_like_an_absent_one() {
    // Position 4 was delivered and requeued, then lost: a relaxed tail cut by a power loss, or
    // a record quarantined at the next start. It must not hold the floor (and the depth) forever.
    let log = log(3, |_| 0);
    let mut durable = ChannelState::new("c", 1);
    durable.apply(&ChannelCommand::Requeue {
        position: 4,
        id: 104,
        available_at_ms: NOW_MS,
        attempts: 1,
        requeue_count: 1,
    });
    let mut s = ChanState::new(durable);
    s.consumers = state(&[1]).consumers;
    let now = Instant::now();
    let mut delivered = Vec::new();
    while let Some((p, id, _)) = take(&mut s, 1, &log, &rules(5, now)) {
        delivered.push(p);
        s.finish(1, id).unwrap();
    }
    assert_eq!(delivered, [1, 2, 3]);
    assert!(s.durable.requeued.is_empty(), "{:?}", s.durable.requeued);
    assert_eq!(s.durable.ack_floor, 5);
    assert_eq!(s.counts(5), (0, 0, 0));
}
