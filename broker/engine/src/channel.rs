//! A channel's delivery state: a cursor over the shared topic log plus in-flight deliveries
//! (with an ordered deadline index and per-delivery tokens), requeued and deferred positions,
//! attempts and per-consumer counters.
//!
//! All of it is memory; the durable part ([`ChannelState`]) changes only through
//! [`ChannelCommand`]s that the caller also sends to the channel WAL, so a restart redelivers
//! exactly the unfinished messages with their recorded attempts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustqueue_storage::{ChannelCommand, ChannelState, Entry, TopicLog};
use tokio::sync::{Notify, mpsc};

use crate::error::DeliveryError;
use crate::metrics::{Counter, EngineMetrics};
use crate::types::{ClientInfo, ClientStats};

mod wal;

pub(crate) use wal::{WalReq, wal_worker};

pub(crate) struct Channel {
    pub name: String,
    pub ephemeral: bool,
    pub st: Mutex<ChanState>,
    /// State changes every consumer must look at (RDY, REQ, pause, delete, shutdown...).
    pub notify: Notify,
    /// New messages: only consumers that could take one wait here, and each arrival wakes
    /// one of them (see [`Channel::announce`]), not every consumer of the channel.
    pub arrivals: Notify,
    pub wal_tx: Option<mpsc::UnboundedSender<WalReq>>,
    pub deleted: AtomicBool,
}

impl Channel {
    /// More messages became visible: wakes one consumer waiting for them. It takes a batch
    /// (as many as its RDY and batch limit allow), and when more remain it wakes the next
    /// (see `Consumer::next_batch`), so a burst spreads over as many consumers as it needs
    /// and no consumer is woken to find nothing.
    pub fn announce(&self) {
        self.arrivals.notify_one();
    }
}

struct InFlight {
    position: u64,
    token: u64,
    deadline: Instant,
    consumer: u64,
    /// Which delivery of its message this is (1 for the first).
    attempts: u16,
}

/// Maps keyed by message id or position: foldhash, not SipHash. The keys come from the
/// broker, not from clients, and every delivery and FIN does several lookups.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub(crate) struct ConsumerState {
    pub info: ClientInfo,
    pub ready: u32,
    pub in_flight: u32,
    pub message_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
    pub connect_ts: u64,
    pub sample_rate: u8,
    pub sample_counter: u8,
    pub msg_timeout: Duration,
}

/// The outcome of asking for the next message.
pub(crate) enum Take {
    Deliver { entry: Entry, attempts: u16 },
    DeadLetter { entry: Entry },
    Nothing,
}

/// Limits that shape a take.
pub(crate) struct TakeRules {
    pub visible: u64,
    pub now: Instant,
    pub now_ms: i64,
    pub max_attempts: u16,
    pub dead_letter: bool,
}

pub(crate) struct ChanState {
    pub durable: ChannelState,
    cursor: u64,
    in_flight: Map<u64, InFlight>,
    deadlines: BTreeMap<(Instant, u64), u64>,
    ready: BTreeSet<u64>,
    deferred: BTreeSet<(i64, u64)>,
    /// Delivery attempts of positions delivered before and due again (requeued, timed out,
    /// released); an in-flight delivery carries its own.
    attempts: Map<u64, u16>,
    pub consumers: BTreeMap<u64, ConsumerState>,
    next_token: u64,
    /// Where timeouts are counted (`rustqueue_timed_out_messages_total`).
    metrics: Option<Arc<EngineMetrics>>,
}

impl ChanState {
    /// Delivery state for a recovered or new durable state: every unfinished message is due.
    pub fn new(durable: ChannelState) -> ChanState {
        let mut s = ChanState {
            cursor: durable.ack_floor + 1,
            in_flight: Map::default(),
            deadlines: BTreeMap::new(),
            ready: BTreeSet::new(),
            deferred: BTreeSet::new(),
            attempts: Map::default(),
            consumers: BTreeMap::new(),
            next_token: 1,
            metrics: None,
            durable,
        };
        for (&pos, &(avail, attempts)) in &s.durable.requeued {
            s.attempts.insert(pos, attempts);
            s.deferred.insert((avail, pos));
        }
        s
    }

    /// Counts this channel's timeouts in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<EngineMetrics>) -> ChanState {
        self.metrics = Some(metrics);
        self
    }

    /// Returns timed-out deliveries to the channel; yields the timeout counter command if any.
    pub fn expire(&mut self, now: Instant) -> Option<ChannelCommand> {
        let before = self.durable.timeout_count;
        let mut any = false;
        while let Some((&(deadline, token), &id)) = self.deadlines.first_key_value() {
            if deadline > now {
                break;
            }
            self.deadlines.remove(&(deadline, token));
            if let Some(f) = self.in_flight.remove(&id) {
                self.ready.insert(f.position);
                self.attempts.insert(f.position, f.attempts);
                if let Some(c) = self.consumers.get_mut(&f.consumer) {
                    c.in_flight = c.in_flight.saturating_sub(1);
                }
                if f.consumer != 0 {
                    self.durable.timeout_count += 1;
                    any = true;
                }
            }
        }
        if any && let Some(m) = &self.metrics {
            m.add(Counter::TimedOut, self.durable.timeout_count - before);
        }
        any.then_some(ChannelCommand::Timeout {
            timeout_count: self.durable.timeout_count,
        })
    }

    /// Picks the next message for `consumer`; commands in `persist` must reach the WAL.
    pub fn take(
        &mut self,
        consumer: u64,
        log: &TopicLog,
        r: &TakeRules,
        persist: &mut Vec<ChannelCommand>,
    ) -> Take {
        persist.extend(self.expire(r.now));
        while let Some(&(avail, pos)) = self.deferred.first() {
            if avail > r.now_ms {
                break;
            }
            self.deferred.pop_first();
            self.ready.insert(pos);
        }
        loop {
            let Some(pos) = self.ready.pop_first().or_else(|| self.scan(log, r)) else {
                return Take::Nothing;
            };
            let Some(entry) = log.entry(pos) else {
                // A requeued or released position the log no longer holds (a relaxed tail lost
                // to a power cut, a record quarantined at startup, or collected): positions
                // are never reused, so it is passed like an absent one in `scan`. Left in
                // `requeued` it would hold the ack floor, the depth and GC forever.
                self.durable.requeued.remove(&pos);
                self.attempts.remove(&pos);
                self.durable.skip_absent([pos]);
                continue;
            };
            let prior = self.attempts.remove(&pos).unwrap_or(0);
            if r.dead_letter && r.max_attempts > 0 && prior.saturating_add(1) >= r.max_attempts {
                self.start(entry, 0, r.now + Duration::from_secs(60), prior);
                return Take::DeadLetter { entry };
            }
            let Some(c) = self.consumers.get_mut(&consumer) else {
                self.ready.insert(pos);
                if prior > 0 {
                    self.attempts.insert(pos, prior);
                }
                return Take::Nothing;
            };
            if c.sample_rate > 0 {
                let n = c.sample_counter;
                c.sample_counter = (n + 1) % 100;
                if n >= c.sample_rate {
                    let cmd = ChannelCommand::Finish {
                        position: pos,
                        id: entry.id,
                    };
                    self.durable.apply(&cmd);
                    persist.push(cmd);
                    continue;
                }
            }
            let timeout = c.msg_timeout;
            c.in_flight += 1;
            c.message_count += 1;
            let attempts = prior.saturating_add(1);
            self.start(entry, consumer, r.now + timeout, attempts);
            return Take::Deliver { entry, attempts };
        }
    }

    fn scan(&mut self, log: &TopicLog, r: &TakeRules) -> Option<u64> {
        while self.cursor <= r.visible {
            let p = self.cursor;
            self.cursor += 1;
            if self.durable.is_done(p) || self.durable.requeued.contains_key(&p) {
                continue;
            }
            let Some(e) = log.entry(p) else {
                // Never stored (a lost relaxed tail) or already collected: positions are never
                // reused, so the floor may move past it.
                self.durable.skip_absent([p]);
                continue;
            };
            if e.available_at_ms > r.now_ms {
                self.deferred.insert((e.available_at_ms, p));
                continue;
            }
            return Some(p);
        }
        None
    }

    fn start(&mut self, entry: Entry, consumer: u64, deadline: Instant, attempts: u16) {
        let token = self.next_token;
        self.next_token += 1;
        self.deadlines.insert((deadline, token), entry.id);
        self.in_flight.insert(
            entry.id,
            InFlight {
                position: entry.position,
                token,
                deadline,
                consumer,
                attempts,
            },
        );
    }

    fn remove_in_flight(&mut self, consumer: u64, id: u64) -> Result<InFlight, DeliveryError> {
        match self.in_flight.get(&id) {
            Some(f) if f.consumer == consumer => {}
            _ => return Err(DeliveryError::NotInFlight),
        }
        let f = self
            .in_flight
            .remove(&id)
            .ok_or(DeliveryError::NotInFlight)?;
        self.deadlines.remove(&(f.deadline, f.token));
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
        Ok(f)
    }

    /// FIN: the message is done for this channel.
    pub fn finish(&mut self, consumer: u64, id: u64) -> Result<ChannelCommand, DeliveryError> {
        let f = self.remove_in_flight(consumer, id)?;
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.finish_count += 1;
        }
        let cmd = ChannelCommand::Finish {
            position: f.position,
            id,
        };
        self.durable.apply(&cmd);
        Ok(cmd)
    }

    /// REQ: deliver again after `delay` (attempts are kept).
    pub fn requeue(
        &mut self,
        consumer: u64,
        id: u64,
        delay: Duration,
        now_ms: i64,
    ) -> Result<ChannelCommand, DeliveryError> {
        let f = self.remove_in_flight(consumer, id)?;
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.requeue_count += 1;
        }
        let available_at_ms = now_ms + delay.as_millis() as i64;
        let attempts = f.attempts;
        self.attempts.insert(f.position, attempts);
        let cmd = ChannelCommand::Requeue {
            position: f.position,
            id,
            available_at_ms,
            attempts,
            requeue_count: self.durable.requeue_count + 1,
        };
        self.durable.apply(&cmd);
        if delay.is_zero() {
            self.ready.insert(f.position);
        } else {
            self.deferred.insert((available_at_ms, f.position));
        }
        Ok(cmd)
    }

    /// Whether `consumer` still holds delivery `attempts` of `entry`: nothing (a timeout, a
    /// requeue, a FIN) took it back since it was claimed.
    pub fn holds(&self, consumer: u64, entry: &Entry, attempts: u16) -> bool {
        self.in_flight
            .get(&entry.id)
            .is_some_and(|f| f.consumer == consumer && f.attempts == attempts)
    }

    /// TOUCH: restart the delivery's timeout.
    pub fn touch(&mut self, consumer: u64, id: u64, now: Instant) -> Result<(), DeliveryError> {
        let timeout = self
            .consumers
            .get(&consumer)
            .map(|c| c.msg_timeout)
            .ok_or(DeliveryError::NotInFlight)?;
        let f = self
            .in_flight
            .get_mut(&id)
            .filter(|f| f.consumer == consumer)
            .ok_or(DeliveryError::NotInFlight)?;
        self.deadlines.remove(&(f.deadline, f.token));
        f.deadline = now + timeout;
        self.deadlines.insert((f.deadline, f.token), id);
        Ok(())
    }

    /// Takes a delivery whose body failed its check out of flight and finishes it: the message
    /// is quarantined (never delivered), so the channel moves past it. Unlike a consumer's
    /// FIN it does not count as finished by the consumer.
    pub fn drop_damaged(&mut self, consumer: u64, id: u64) -> Option<ChannelCommand> {
        let f = self.remove_in_flight(consumer, id).ok()?;
        let cmd = ChannelCommand::Finish {
            position: f.position,
            id,
        };
        self.durable.apply(&cmd);
        Some(cmd)
    }

    /// Finishes an internal (dead-letter) reservation.
    pub fn finish_internal(&mut self, id: u64) -> Option<ChannelCommand> {
        self.finish(0, id).ok()
    }

    /// Disconnect: the consumer's in-flight messages are deliverable again at once.
    pub fn release_consumer(&mut self, consumer: u64) {
        let ids: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.consumer == consumer)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Ok(f) = self.remove_in_flight(consumer, id) {
                self.ready.insert(f.position);
                self.attempts.insert(f.position, f.attempts);
            }
        }
        self.consumers.remove(&consumer);
    }

    /// Empties the channel through `through` (in-flight deliveries are dropped).
    pub fn empty(&mut self, through: u64) -> ChannelCommand {
        // Only positions at or below `through`: a replayed management `empty` must not drop
        // what was published after it was first applied.
        let dropped: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.position <= through)
            .map(|(id, _)| *id)
            .collect();
        for id in dropped {
            if let Some(f) = self.in_flight.remove(&id) {
                self.deadlines.remove(&(f.deadline, f.token));
                if let Some(c) = self.consumers.get_mut(&f.consumer) {
                    c.in_flight = c.in_flight.saturating_sub(1);
                }
            }
        }
        self.ready = self.ready.split_off(&(through + 1));
        self.deferred.retain(|(_, p)| *p > through);
        self.attempts.retain(|p, _| *p > through);
        let cmd = ChannelCommand::Empty { through };
        self.durable.apply(&cmd);
        self.cursor = self.cursor.max(through + 1);
        cmd
    }

    /// Protective eviction deleted everything through `through`: the channel moves past it.
    /// Deliveries already in flight stay so their FIN still succeeds; queued redeliveries of
    /// evicted positions are dropped (a timed-out one is skipped as absent).
    pub fn evict(&mut self, through: u64) -> ChannelCommand {
        self.ready = self.ready.split_off(&(through + 1));
        self.deferred.retain(|(_, p)| *p > through);
        // In-flight deliveries carry their own attempts.
        self.attempts.retain(|p, _| *p > through);
        let cmd = ChannelCommand::Evict { through };
        self.durable.apply(&cmd);
        self.cursor = self.cursor.max(through + 1);
        cmd
    }

    /// In-flight count of one consumer.
    pub fn consumer_in_flight(&self, consumer: u64) -> u32 {
        self.consumers.get(&consumer).map_or(0, |c| c.in_flight)
    }

    /// The earliest instant something changes without outside input (deadline or deferral).
    pub fn next_wake(&self, now: Instant, now_ms: i64) -> Option<Instant> {
        let d = self.deadlines.first_key_value().map(|((d, _), _)| *d);
        let f = self
            .deferred
            .first()
            .map(|(ms, _)| now + Duration::from_millis((*ms - now_ms).max(0) as u64));
        match (d, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a take could find a message now: one due again (requeued, timed out or
    /// released), a deferral that came due, or a visible position not yet scanned. Call
    /// [`ChanState::expire`] first.
    pub fn has_due(&self, visible: u64, now_ms: i64) -> bool {
        !self.ready.is_empty()
            || self.cursor <= visible
            || self.deferred.first().is_some_and(|(at, _)| *at <= now_ms)
    }

    /// Whether messages may be waiting for a consumer (requeued ones, or visible positions
    /// not yet scanned).
    pub fn may_have_more(&self, visible: u64) -> bool {
        !self.ready.is_empty() || self.cursor <= visible
    }

    /// Lowest position still in flight (retention must keep it).
    pub fn min_in_flight(&self) -> Option<u64> {
        self.in_flight.values().map(|f| f.position).min()
    }

    /// (in_flight, deferred, depth) for stats.
    pub fn counts(&self, visible: u64) -> (u64, u64, u64) {
        let backlog = visible
            .saturating_sub(self.durable.ack_floor)
            .saturating_sub(self.durable.acked.range(..=visible).count() as u64);
        let in_flight = self.in_flight.values().filter(|f| f.consumer != 0).count() as u64;
        let deferred = self.deferred.len() as u64;
        (
            in_flight,
            deferred,
            backlog.saturating_sub(in_flight + deferred),
        )
    }

    /// Stats rows of the consumers.
    pub fn client_stats(&self) -> Vec<ClientStats> {
        self.consumers
            .values()
            .map(|c| ClientStats {
                client_id: c.info.client_id.clone(),
                hostname: c.info.hostname.clone(),
                remote_address: c.info.remote_address.clone(),
                user_agent: c.info.user_agent.clone(),
                state: 3,
                ready_count: u64::from(c.ready),
                in_flight_count: u64::from(c.in_flight),
                message_count: c.message_count,
                finish_count: c.finish_count,
                requeue_count: c.requeue_count,
                connect_ts: c.connect_ts,
                sample_rate: c.sample_rate,
                tls: c.info.tls,
                deflate: c.info.deflate,
                snappy: c.info.snappy,
                authed: false,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
