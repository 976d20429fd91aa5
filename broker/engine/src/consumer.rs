//! A subscribed consumer: RDY, next delivery, FIN/REQ/TOUCH. Dropping it is a disconnect.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustqueue_storage::{BodyLocation, ChannelCommand, Entry, FsFile, RemoteSegment};
use rustqueue_storage::{is_damaged_body, read_bodies_from, read_body_from};

use crate::channel::{ChanState, Channel, ConsumerState, Take, TakeRules};
use crate::error::{DeliveryError, StorageFault};
use crate::lock::lock;
use crate::metrics::{Counter, EngineMetrics, Timer};
use crate::registry::Registry;
use crate::shared::Shared;
use crate::tiering::RemoteFail;
use crate::topic::Topic;
use crate::types::{ConsumerOptions, Delivery, MessageId, now_ms};

/// A consumer registered with one channel.
pub struct Consumer {
    inner: Arc<Shared>,
    topic: Arc<Topic>,
    channel: Arc<Channel>,
    id: u64,
    /// Deliveries taken for this consumer whose body reads a dropped [`Consumer::next_batch`]
    /// call left unfinished; the next call delivers them (sessions race it in a `select!`).
    claimed: Vec<Claimed>,
    /// The wait before the claims are read again after the bucket failed them.
    remote_retry: Duration,
}

/// A delivery taken from the channel, before its body is read.
#[derive(Clone)]
struct Claimed {
    entry: Entry,
    attempts: u16,
    source: BodySource,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("topic", &self.topic.name)
            .field("channel", &self.channel.name)
            .field("id", &self.id)
            .finish()
    }
}

/// Resolves once a pipelined FIN/REQ is durable (crossed the channel WAL fsync).
pub type Durable = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), DeliveryError>> + Send + 'static>,
>;

/// One FIN, REQ or TOUCH of a pipelined run ([`Consumer::apply_acks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// FIN: the message is done.
    Finish(MessageId),
    /// REQ: deliver it again after the delay (0 = at once).
    Requeue(MessageId, Duration),
    /// TOUCH: restart its timeout.
    Touch(MessageId),
}

/// What [`Consumer::apply_acks`] did.
pub struct AppliedAcks {
    /// One result per ack, in order: applied in memory, or why not.
    pub results: Vec<Result<(), DeliveryError>>,
    /// Resolves once every FIN/REQ applied crossed the channel WAL fsync (`None`: none was).
    pub durable: Option<Durable>,
}

/// Wraps a WAL fsync wait; its duration from now is the channel ack time.
fn durable(
    fut: impl std::future::Future<Output = Result<(), StorageFault>> + Send + 'static,
    metrics: Arc<EngineMetrics>,
) -> Durable {
    let applied = Instant::now();
    Box::pin(async move {
        let r = fut.await.map_err(DeliveryError::StorageFault);
        metrics.since(Timer::ChannelAck, applied);
        r
    })
}

/// Where a body comes from.
#[derive(Clone)]
enum BodySource {
    /// The log still holds a copy of it (a recent append): no read.
    Recent(Bytes),
    /// The open file it is read from (`None`: the message is gone).
    File(Option<Arc<dyn FsFile>>),
    /// Its segment is only in the bucket (base, object): read through (tiering/read.rs).
    Remote(u64, Arc<RemoteSegment>),
}

impl BodySource {
    fn of(location: Option<BodyLocation>) -> BodySource {
        match location {
            Some(BodyLocation::Local(f)) => BodySource::File(Some(f)),
            Some(BodyLocation::Remote(base, r)) => BodySource::Remote(base, r),
            None => BodySource::File(None),
        }
    }
}

/// The first wait before a consumer reads a remote-only segment again after the bucket
/// failed (after the bucket's own retries); it doubles up to [`REMOTE_RETRY_MAX`].
const REMOTE_RETRY_FIRST: Duration = Duration::from_millis(200);
const REMOTE_RETRY_MAX: Duration = Duration::from_secs(5);

/// What one look at the channel found.
struct Look {
    /// The messages taken (deliveries and dead letters), in order.
    taken: Vec<(Take, BodySource)>,
    /// When something becomes due (a deferral or a timeout).
    wake: Option<Instant>,
    /// Whether this consumer may take a message now (RDY free, nothing paused).
    eligible: bool,
    /// Whether more messages may be waiting for another consumer.
    more: bool,
    /// Whether deliveries timed out (a full consumer looks again at once).
    expired: bool,
}

/// Bodies above this size are read on the blocking pool.
const BLOCKING_READ_BYTES: u32 = 1 << 20;

/// The longest span one read of consecutive records covers.
const RUN_BYTES: u64 = 256 * 1024;

/// Most bytes between two bodies that one read still covers (a record header is 48).
const RUN_GAP_BYTES: u64 = 4096;

/// How much one [`Consumer::next_batch`] may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    /// Most messages (at least 1 is taken whatever the limit).
    pub messages: usize,
    /// Body bytes after which no further message is taken.
    pub bytes: u64,
}

impl BatchLimit {
    /// One message per call.
    pub const ONE: BatchLimit = BatchLimit {
        messages: 1,
        bytes: 0,
    };

    /// Whether a batch of `messages` messages and `bytes` body bytes has taken all this limit
    /// allows (the first message is always allowed), so that more may be waiting.
    pub fn reached(&self, messages: usize, bytes: u64) -> bool {
        messages >= self.messages.max(1) || (messages > 0 && bytes >= self.bytes)
    }

    /// [`BatchLimit::reached`] for a batch [`Consumer::next_batch`] returned.
    pub fn filled_by(&self, batch: &[Delivery]) -> bool {
        self.reached(batch.len(), batch.iter().map(|d| d.body.len() as u64).sum())
    }
}

impl Consumer {
    pub(crate) fn register(
        inner: Arc<Shared>,
        topic: Arc<Topic>,
        channel: Arc<Channel>,
        opts: ConsumerOptions,
    ) -> Consumer {
        let id = inner.next_consumer.fetch_add(1, Ordering::SeqCst);
        let state = ConsumerState {
            info: opts.client,
            ready: 0,
            in_flight: 0,
            message_count: 0,
            finish_count: 0,
            requeue_count: 0,
            connect_ts: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            sample_rate: opts.sample_rate.min(99),
            sample_counter: 0,
            msg_timeout: opts.msg_timeout.unwrap_or(inner.cfg.message_timeout),
        };
        lock(&channel.st).consumers.insert(id, state);
        Consumer {
            inner,
            topic,
            channel,
            id,
            claimed: Vec::new(),
            remote_retry: REMOTE_RETRY_FIRST,
        }
    }

    /// RDY: how many messages may be in flight to this consumer (0 pauses it).
    pub fn set_ready(&self, count: u32) {
        if let Some(c) = lock(&self.channel.st).consumers.get_mut(&self.id) {
            c.ready = count;
        }
        self.channel.notify.notify_waiters();
    }

    fn closed(&self) -> bool {
        self.inner.shutting_down()
            || self.channel.deleted.load(Ordering::SeqCst)
            || self.topic.deleted.load(Ordering::SeqCst)
    }

    fn dead_letter_target(&self) -> String {
        crate::dlq::dead_letter_topic(
            &self.topic.name,
            &self.channel.name,
            &self.inner.cfg.dead_letter_suffix,
        )
    }

    /// The next message for this consumer, respecting RDY, in-flight count, pauses, deferral
    /// and sampling. `None` once the channel or topic is deleted or the engine shuts down.
    pub async fn next(&mut self) -> Option<Delivery> {
        self.next_batch(BatchLimit::ONE).await?.pop()
    }

    /// The next messages for this consumer (at least one, at most `limit`), taken under one
    /// hold of the channel lock and read in runs of consecutive records, so a consumer with
    /// RDY to spare costs one wake-up and one read per batch instead of per message. The same
    /// rules as [`Consumer::next`]; `None` when that would be.
    pub async fn next_batch(&mut self, limit: BatchLimit) -> Option<Vec<Delivery>> {
        let dlq_allowed = !self
            .topic
            .name
            .ends_with(&self.inner.cfg.dead_letter_suffix);
        loop {
            if self.closed() {
                return None;
            }
            match self.resume_claims().await {
                Read::Body(d) if !d.is_empty() => return Some(d),
                Read::Failed => return None,
                Read::Unavailable => {
                    self.wait_for_bucket().await;
                    continue;
                }
                Read::Body(_) | Read::Damaged => {}
            }
            // Registered before looking, so nothing that happens after the look is missed.
            let notified = self.channel.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let mut arrival = std::pin::pin!(Some(self.channel.arrivals.notified()));
            if let Some(a) = arrival.as_mut().as_pin_mut() {
                a.enable();
            }
            let now = Instant::now();
            let look = self.look(now, dlq_allowed, limit);
            // Only a consumer that could take a message waits for arrivals; one that cannot
            // drops its registration, which passes any wake-up it got to another consumer.
            if !look.eligible {
                arrival.set(None);
            }
            if look.more || look.expired {
                self.channel.arrivals.notify_one();
            }
            if look.expired {
                continue;
            }
            if !look.taken.is_empty() {
                for (take, source) in look.taken {
                    match take {
                        // Kept until its body is read, so a dropped call does not lose it.
                        Take::Deliver { entry, attempts } => self.claimed.push(Claimed {
                            entry,
                            attempts,
                            source,
                        }),
                        Take::DeadLetter { entry } => {
                            tokio::spawn(dead_letter(
                                self.inner.clone(),
                                self.inner.registry.clone(),
                                self.topic.clone(),
                                self.channel.clone(),
                                self.dead_letter_target(),
                                entry,
                                source,
                            ));
                        }
                        Take::Nothing => {}
                    }
                }
                continue;
            }
            let sleep_until = look
                .wake
                .unwrap_or(now + Duration::from_secs(1))
                .min(now + Duration::from_secs(1));
            tokio::select! {
                _ = &mut notified => {}
                _ = async {
                    if let Some(a) = arrival.as_mut().as_pin_mut() {
                        a.await;
                    }
                }, if look.eligible => {}
                _ = tokio::time::sleep_until(sleep_until.into()) => {}
            }
        }
    }

    /// One look at the channel under its lock: takes messages if this consumer may have
    /// them, else expires the deliveries that timed out. Commands it produced are queued for
    /// the channel WAL after the lock is released.
    fn look(&self, now: Instant, dlq_allowed: bool, limit: BatchLimit) -> Look {
        let now_ms = now_ms();
        let mut persist = Vec::new();
        let look = {
            let mut st = lock(&self.channel.st);
            let ready = st.consumers.get(&self.id).map_or(0, |c| c.ready);
            let paused = st.durable.paused
                || self.topic.paused.load(Ordering::SeqCst)
                || self.inner.frozen();
            let eligible = !paused && st.consumer_in_flight(self.id) < ready;
            let mut expired = false;
            let taken = if eligible {
                let rules = TakeRules {
                    visible: self.topic.visible_through(),
                    now,
                    now_ms,
                    max_attempts: self.inner.cfg.max_delivery_attempts,
                    dead_letter: dlq_allowed,
                };
                self.take(&mut st, &rules, &mut persist, ready, limit)
            } else {
                // A consumer whose RDY is full may hold the deliveries that expire: it
                // looks again at once instead of sleeping with a slot free.
                let cmd = st.expire(now);
                expired = cmd.is_some();
                persist.extend(cmd);
                Vec::new()
            };
            let more = !taken.is_empty() && st.may_have_more(self.topic.visible_through());
            Look {
                taken,
                wake: st.next_wake(now, now_ms),
                eligible,
                more,
                expired,
            }
        };
        self.channel.persist_later(persist);
        look
    }

    /// Takes messages while RDY and `limit` allow, under one hold of the topic log lock
    /// (timed as delivery lock wait/hold), each with the file its body is read from.
    fn take(
        &self,
        st: &mut ChanState,
        rules: &TakeRules,
        persist: &mut Vec<ChannelCommand>,
        ready: u32,
        limit: BatchLimit,
    ) -> Vec<(Take, BodySource)> {
        let m = &self.inner.metrics;
        m.add(Counter::FetchRequests, 1);
        // Sessions look again after every command they read: most looks find nothing, and
        // they need not take the topic log lock to know it.
        persist.extend(st.expire(rules.now));
        if !st.has_due(rules.visible, rules.now_ms) {
            m.add(Counter::FetchEmpty, 1);
            return Vec::new();
        }
        let waited = Instant::now();
        let mut log = lock(&self.topic.log);
        let held = Instant::now();
        m.observe(Timer::DeliveryLockWait, held - waited);
        let mut taken = Vec::new();
        let (mut messages, mut bytes) = (0, 0u64);
        while !limit.reached(messages, bytes) && st.consumer_in_flight(self.id) < ready {
            match st.take(self.id, &log, rules, persist) {
                take @ (Take::Deliver { entry, .. } | Take::DeadLetter { entry }) => {
                    if matches!(take, Take::Deliver { .. }) {
                        messages += 1;
                        bytes += u64::from(entry.body_len);
                    }
                    let source = match log.recent_body(&entry) {
                        Some(body) => BodySource::Recent(body),
                        None => {
                            // Read from the file outside the lock: it must be there. A
                            // failed write isolates storage and fails the read.
                            if log.is_unwritten(&entry) {
                                let _ = log.write_unwritten();
                            }
                            BodySource::of(log.body_location(&entry))
                        }
                    };
                    taken.push((take, source));
                }
                Take::Nothing => break,
            }
        }
        drop(log);
        m.since(Timer::DeliveryLockHold, held);
        if taken.is_empty() {
            m.add(Counter::FetchEmpty, 1);
        } else {
            m.add(Counter::FetchBatches, 1);
        }
        taken
    }

    /// Reads and delivers the claimed deliveries this consumer still holds (those a timeout,
    /// requeue or FIN took back meanwhile are dropped): `Body` with what was read (maybe
    /// nothing), `Damaged` when every one was quarantined, `Failed` when storage failed.
    async fn resume_claims(&mut self) -> Read<Vec<Delivery>> {
        if self.claimed.is_empty() {
            return Read::Body(Vec::new());
        }
        {
            let st = lock(&self.channel.st);
            self.claimed
                .retain(|c| st.holds(self.id, &c.entry, c.attempts));
        }
        let claims = self.claimed.clone();
        let (read, rest) = self.deliver(claims).await;
        if rest.is_empty() {
            self.remote_retry = REMOTE_RETRY_FIRST;
        }
        self.claimed = rest;
        read
    }

    /// Waits before reading remote-only bodies again after the bucket failed them, keeping
    /// the deliveries in flight to this consumer (TOUCH) so an outage neither times them out
    /// nor spends their attempts. Only this consumer waits: the bucket is never waited for
    /// under a lock.
    async fn wait_for_bucket(&mut self) {
        tokio::time::sleep(self.remote_retry).await;
        self.remote_retry = (self.remote_retry * 2).min(REMOTE_RETRY_MAX);
        let now = Instant::now();
        let mut st = lock(&self.channel.st);
        for c in &self.claimed {
            let _ = st.touch(self.id, c.entry.id, now);
        }
    }

    /// Reads the bodies of taken messages into [`Delivery`]s, in order. A body that fails its
    /// CRC-32C is quarantined and skipped (never sent); a body that vanished or failed its
    /// read means storage is suspect: it fails closed and ends this consumer. The claims from
    /// the first remote body the bucket could not give are returned, to be read again.
    async fn deliver(&self, claims: Vec<Claimed>) -> (Read<Vec<Delivery>>, Vec<Claimed>) {
        if !prefetch_remote(&self.inner, &claims).await {
            return (Read::Unavailable, claims);
        }
        let bodies = match self.budgeted_read(&claims).await {
            Some(b) => b,
            None => return (self.read_failed(&claims[0].entry), Vec::new()),
        };
        let mut out = Vec::with_capacity(claims.len());
        let mut bytes = 0;
        let mut rest = Vec::new();
        let mut claims = claims.into_iter();
        for (c, body) in claims.by_ref().zip(bodies) {
            match body {
                Ok(body) => {
                    bytes += body.len() as u64;
                    out.push(Delivery {
                        id: MessageId::from_u64(c.entry.id),
                        timestamp_ns: c.entry.timestamp_ns,
                        attempts: c.attempts,
                        body,
                    });
                }
                Err(ReadFail::Damaged) => {
                    let cmd = lock(&self.channel.st).drop_damaged(self.id, c.entry.id);
                    let q = quarantine::<()>(
                        &self.inner.store,
                        &self.topic,
                        &self.channel,
                        c.entry,
                        cmd,
                    );
                    if let Read::Failed = q.await {
                        return (Read::Failed, Vec::new());
                    }
                }
                Err(ReadFail::Failed) => return (self.read_failed(&c.entry), Vec::new()),
                Err(ReadFail::Unavailable) => {
                    rest.push(c);
                    break;
                }
            }
        }
        rest.extend(claims);
        let m = &self.inner.metrics;
        m.add(Counter::FetchBytes, bytes);
        m.add(Counter::Delivered, out.len() as u64);
        let read = if !out.is_empty() {
            Read::Body(out)
        } else if !rest.is_empty() {
            Read::Unavailable
        } else {
            Read::Damaged
        };
        (read, rest)
    }

    fn read_failed<T>(&self, entry: &Entry) -> Read<T> {
        self.inner.store.fault().trip(format!(
            "cannot read body of position {} in topic {}",
            entry.position, self.topic.name
        ));
        Read::Failed
    }

    /// Reads the bodies of `claims` while holding 2 × their size of the node delivery budget
    /// (read buffer + delivered copy), waiting when the budget is short; one batch takes at
    /// most half of it. `None` when the budget is gone (shutdown).
    async fn budgeted_read(&self, claims: &[Claimed]) -> Option<Vec<Result<Bytes, ReadFail>>> {
        let budgets = &self.inner.budgets;
        let total: u64 = claims.iter().map(|c| u64::from(c.entry.body_len)).sum();
        let units = budgets.delivery_units(u32::try_from(total).unwrap_or(u32::MAX));
        let m = &self.inner.metrics;
        let _permit = match budgets.try_delivery(units) {
            Some(p) => p,
            None => {
                m.add(Counter::BudgetWaits, 1);
                // A guard, not a plain decrement: sessions cancel `next_batch()` mid-wait.
                let _waiting = Waiter::new(m);
                budgets.delivery(units).await?
            }
        };
        let started = Instant::now();
        let bodies = read_all(&self.inner, claims).await;
        m.since(Timer::PayloadRead, started);
        Some(bodies)
    }

    /// FIN; resolves after the channel WAL fsync (durable channels).
    pub async fn finish(&self, id: MessageId) -> Result<(), DeliveryError> {
        self.finish_pipelined(id)?.await
    }

    /// FIN applied in memory at once (the message leaves this consumer's in-flight set and its
    /// RDY slot frees); the returned future resolves after the channel WAL fsync. A crash before
    /// that fsync redelivers the message (at-least-once), never loses it. Sessions use this
    /// so a FIN does not stall delivery for an fsync: NSQ sends no reply to FIN.
    pub fn finish_pipelined(&self, id: MessageId) -> Result<Durable, DeliveryError> {
        let raw = id.to_u64().ok_or(DeliveryError::NotInFlight)?;
        // No wake-up: a FIN frees a slot of this consumer only, and its own caller asks for
        // the next message after it.
        let cmd = lock(&self.channel.st).finish(self.id, raw)?;
        self.inner.metrics.add(Counter::Finished, 1);
        Ok(durable(
            self.channel.persist_send(vec![cmd]),
            self.inner.metrics.clone(),
        ))
    }

    /// REQ with a delay (0 = at once); attempts are kept.
    pub async fn requeue(&self, id: MessageId, delay: Duration) -> Result<(), DeliveryError> {
        self.requeue_pipelined(id, delay)?.await
    }

    /// REQ applied in memory at once; the future resolves after the channel WAL fsync (see
    /// [`Consumer::finish_pipelined`]).
    pub fn requeue_pipelined(
        &self,
        id: MessageId,
        delay: Duration,
    ) -> Result<Durable, DeliveryError> {
        if delay > self.inner.cfg.max_defer {
            return Err(DeliveryError::InvalidDelay);
        }
        let raw = id.to_u64().ok_or(DeliveryError::NotInFlight)?;
        let cmd = lock(&self.channel.st).requeue(self.id, raw, delay, now_ms())?;
        self.channel.notify.notify_waiters();
        self.inner.metrics.add(Counter::Requeued, 1);
        Ok(durable(
            self.channel.persist_send(vec![cmd]),
            self.inner.metrics.clone(),
        ))
    }

    /// Applies a run of pipelined FIN/REQ/TOUCH in order under one hold of the channel lock
    /// (see [`Consumer::finish_pipelined`]): each gets its own immediate result, and the
    /// FIN/REQ applied share one WAL request, so `durable` resolves once all of them crossed
    /// the WAL fsync. A session hands over every ack it has read in one call.
    pub fn apply_acks(&self, acks: &[Ack]) -> AppliedAcks {
        let max_defer = self.inner.cfg.max_defer;
        let now = Instant::now();
        let now_ms = now_ms();
        let mut results = Vec::with_capacity(acks.len());
        let mut cmds = Vec::with_capacity(acks.len());
        let (mut finished, mut requeued, mut wake) = (0, 0, false);
        {
            let mut st = lock(&self.channel.st);
            for ack in acks {
                let r = match *ack {
                    Ack::Finish(id) => id
                        .to_u64()
                        .ok_or(DeliveryError::NotInFlight)
                        .and_then(|raw| st.finish(self.id, raw))
                        .map(|cmd| {
                            finished += 1;
                            cmds.push(cmd);
                        }),
                    Ack::Requeue(_, delay) if delay > max_defer => Err(DeliveryError::InvalidDelay),
                    Ack::Requeue(id, delay) => id
                        .to_u64()
                        .ok_or(DeliveryError::NotInFlight)
                        .and_then(|raw| st.requeue(self.id, raw, delay, now_ms))
                        .map(|cmd| {
                            requeued += 1;
                            wake = true;
                            cmds.push(cmd);
                        }),
                    Ack::Touch(id) => id
                        .to_u64()
                        .ok_or(DeliveryError::NotInFlight)
                        .and_then(|raw| st.touch(self.id, raw, now))
                        .map(|()| wake = true),
                };
                results.push(r);
            }
        }
        if wake {
            self.channel.notify.notify_waiters();
        }
        let m = &self.inner.metrics;
        m.add(Counter::Finished, finished);
        m.add(Counter::Requeued, requeued);
        let durable =
            (!cmds.is_empty()).then(|| durable(self.channel.persist_send(cmds), m.clone()));
        AppliedAcks { results, durable }
    }

    /// TOUCH: restarts the message's timeout.
    pub fn touch(&self, id: MessageId) -> Result<(), DeliveryError> {
        let raw = id.to_u64().ok_or(DeliveryError::NotInFlight)?;
        lock(&self.channel.st).touch(self.id, raw, Instant::now())?;
        self.channel.notify.notify_waiters();
        Ok(())
    }

    /// Messages currently in flight to this consumer.
    pub fn in_flight(&self) -> usize {
        let mut st = lock(&self.channel.st);
        if let Some(cmd) = st.expire(Instant::now()) {
            self.channel.persist_later(vec![cmd]);
        }
        st.consumer_in_flight(self.id) as usize
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let empty = {
            let mut st = lock(&self.channel.st);
            st.release_consumer(self.id);
            st.consumers.is_empty()
        };
        self.channel.notify.notify_waiters();
        if empty && self.channel.ephemeral && !self.channel.deleted.load(Ordering::SeqCst) {
            self.inner
                .registry
                .drop_ephemeral_channel(&self.topic, &self.channel);
        }
    }
}

/// Counts one delivery waiting for the budget while it lives.
struct Waiter<'a>(&'a EngineMetrics);

impl<'a> Waiter<'a> {
    fn new(m: &'a EngineMetrics) -> Self {
        m.add(Counter::BudgetWaiters, 1);
        Waiter(m)
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.0.sub(Counter::BudgetWaiters, 1);
    }
}

/// What reading a body for delivery came to.
enum Read<T> {
    /// The body, intact.
    Body(T),
    /// The body failed its CRC-32C: quarantined, never sent.
    Damaged,
    /// The body could not be read: storage is isolated.
    Failed,
    /// Its segment is only in the bucket and the bucket failed: read again later.
    Unavailable,
}

/// Why a body read gave no body.
enum ReadFail {
    /// It failed its CRC-32C (or its remote object is short or missing).
    Damaged,
    /// It is gone or the read failed.
    Failed,
    /// Its segment is only in the bucket, which could not be read now.
    Unavailable,
}

async fn read(inner: &Shared, source: BodySource, entry: Entry) -> Result<Bytes, ReadFail> {
    let file = match source {
        BodySource::Recent(body) => return Ok(body),
        BodySource::File(file) => file.ok_or(ReadFail::Failed)?,
        BodySource::Remote(_, seg) => {
            let mut bodies = read_remote(inner, &seg, &[entry]).await;
            return bodies.pop().unwrap_or(Err(ReadFail::Failed));
        }
    };
    let r = if entry.body_len > BLOCKING_READ_BYTES {
        tokio::task::spawn_blocking(move || read_body_from(file.as_ref(), &entry))
            .await
            .map_err(|_| ReadFail::Failed)?
    } else {
        read_body_from(file.as_ref(), &entry)
    };
    r.map(Bytes::from).map_err(|e| read_fail(&e))
}

fn read_fail(e: &std::io::Error) -> ReadFail {
    if is_damaged_body(e) {
        ReadFail::Damaged
    } else {
        ReadFail::Failed
    }
}

/// Brings the chunks of the remote-only bodies among `claims` into the read cache before any
/// delivery budget is held; `false` when the bucket is unavailable.
async fn prefetch_remote(inner: &Shared, claims: &[Claimed]) -> bool {
    let mut i = 0;
    while i < claims.len() {
        let BodySource::Remote(base, seg) = &claims[i].source else {
            i += 1;
            continue;
        };
        let end = i + claims[i..]
            .iter()
            .take_while(|c| matches!(&c.source, BodySource::Remote(b, _) if b == base))
            .count();
        let Some(tier) = &inner.tiering else {
            return true;
        };
        let entries: Vec<Entry> = claims[i..end].iter().map(|c| c.entry).collect();
        if crate::tiering::prefetch(tier, &inner.metrics, seg, &entries)
            .await
            .is_err()
        {
            return false;
        }
        i = end;
    }
    true
}

/// Reads remote-only bodies of one segment through the engine's bucket.
async fn read_remote(
    inner: &Shared,
    seg: &RemoteSegment,
    entries: &[Entry],
) -> Vec<Result<Bytes, ReadFail>> {
    let Some(tier) = &inner.tiering else {
        // A remote-only segment without [tiering]: the data directory was opened without its
        // bucket. The consumer waits (and says why) until the broker runs with it again;
        // nothing else is held up.
        tracing::error!(key = %seg.key, "a remote-only segment is due, but [tiering] is off: configure the bucket it was uploaded to");
        return entries.iter().map(|_| Err(ReadFail::Unavailable)).collect();
    };
    crate::tiering::read_bodies(tier, &inner.metrics, seg, entries)
        .await
        .into_iter()
        .map(|r| {
            r.map_err(|f| match f {
                RemoteFail::Damaged => ReadFail::Damaged,
                RemoteFail::Unavailable(_) => ReadFail::Unavailable,
            })
        })
        .collect()
}

/// Reads the bodies of `claims`, in order: recent ones from memory, the rest in runs of
/// consecutive records of one file (one read a run, [`read_bodies_from`]), large ones alone
/// on the blocking pool, remote-only ones through the bucket by segment.
async fn read_all(inner: &Shared, claims: &[Claimed]) -> Vec<Result<Bytes, ReadFail>> {
    let mut out = Vec::with_capacity(claims.len());
    let mut i = 0;
    while i < claims.len() {
        let end = run_end(claims, i);
        match &claims[i].source {
            BodySource::Remote(base, seg) => {
                let end = i + claims[i..]
                    .iter()
                    .take_while(|c| matches!(&c.source, BodySource::Remote(b, _) if b == base))
                    .count();
                let entries: Vec<Entry> = claims[i..end].iter().map(|c| c.entry).collect();
                out.extend(read_remote(inner, seg, &entries).await);
                i = end;
                continue;
            }
            BodySource::File(Some(file)) if end > i + 1 => {
                let entries: Vec<Entry> = claims[i..end].iter().map(|c| c.entry).collect();
                match read_bodies_from(file.as_ref(), &entries) {
                    Ok(bodies) => {
                        out.extend(bodies.into_iter().map(|r| r.map_err(|e| read_fail(&e))))
                    }
                    Err(_) => out.extend((i..end).map(|_| Err(ReadFail::Failed))),
                }
            }
            source => out.push(read(inner, source.clone(), claims[i].entry).await),
        }
        i = end;
    }
    out
}

/// The end (exclusive) of the run of claims from `start` that one read covers: bodies of the
/// same open file, each after the previous one with at most [`RUN_GAP_BYTES`] between them,
/// within [`RUN_BYTES`] in all. Recent and large bodies are runs of one.
fn run_end(claims: &[Claimed], start: usize) -> usize {
    let first = &claims[start];
    let BodySource::File(Some(file)) = &first.source else {
        return start + 1;
    };
    if first.entry.body_len > BLOCKING_READ_BYTES {
        return start + 1;
    }
    let mut end = start + 1;
    let mut prev_end = first.entry.body_offset + u64::from(first.entry.body_len);
    while let Some(next) = claims.get(end) {
        let e = &next.entry;
        let same_file = matches!(&next.source, BodySource::File(Some(f)) if Arc::ptr_eq(f, file));
        let body_end = e.body_offset + u64::from(e.body_len);
        if !same_file
            || e.body_offset < prev_end
            || e.body_offset - prev_end > RUN_GAP_BYTES
            || body_end - first.entry.body_offset > RUN_BYTES
        {
            break;
        }
        prev_end = body_end;
        end += 1;
    }
    end
}

/// Quarantines a message whose body failed its check, then persists the channel's move past
/// it (`cmd`, when it was still in flight). A failed audit or WAL write isolates storage.
async fn quarantine<T>(
    store: &rustqueue_storage::Store,
    topic: &Topic,
    channel: &Channel,
    entry: Entry,
    cmd: Option<ChannelCommand>,
) -> Read<T> {
    let reported = lock(&topic.log).quarantine_body(&entry);
    if let Err(e) = store.fault().guard(reported) {
        tracing::error!(error = %e, "cannot record a quarantined message; storage isolated");
        return Read::Failed;
    }
    tracing::warn!(
        topic = %topic.name,
        channel = %channel.name,
        position = entry.position,
        "message body failed its CRC-32C; quarantined and never delivered"
    );
    if let Some(cmd) = cmd
        && channel.persist(vec![cmd]).await.is_err()
    {
        return Read::Failed;
    }
    channel.notify.notify_waiters();
    Read::Damaged
}

/// Moves a message to its dead-letter topic: durable append first, then FIN of the source,
/// so a crash can duplicate the dead letter but never lose the message.
async fn dead_letter(
    inner: Arc<Shared>,
    registry: Arc<Registry>,
    topic: Arc<Topic>,
    channel: Arc<Channel>,
    target: String,
    entry: Entry,
    source: BodySource,
) {
    let body = match read(&inner, source, entry).await {
        Ok(body) => body,
        Err(ReadFail::Damaged) => {
            let cmd = lock(&channel.st).finish_internal(entry.id);
            let _: Read<()> = quarantine(registry.store(), &topic, &channel, entry, cmd).await;
            return;
        }
        // The bucket down: the dead letter waits for the message's next timeout.
        Err(ReadFail::Failed | ReadFail::Unavailable) => return,
    };
    let Ok(t) = registry.get_or_create_topic(&target) else {
        return;
    };
    if t.publish(vec![body], now_ms(), true, false, None)
        .await
        .is_err()
    {
        return;
    }
    registry.metrics().add(Counter::DeadLetters, 1);
    let cmd = lock(&channel.st).finish_internal(entry.id);
    if let Some(cmd) = cmd {
        let _ = channel.persist(vec![cmd]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(messages: usize, body: usize) -> Vec<Delivery> {
        (0..messages)
            .map(|i| Delivery {
                id: MessageId::from_u64(i as u64),
                timestamp_ns: 0,
                attempts: 1,
                body: Bytes::from(vec![0u8; body]),
            })
            .collect()
    }

    #[test]
    fn a_batch_fills_its_limit_by_count_or_by_bytes() {
        let limit = BatchLimit {
            messages: 256,
            bytes: 64 * 1024,
        };
        // (messages, body bytes, full)
        let cases = [
            (1, 100, false),
            (255, 100, false),
            (256, 100, true),
            (63, 1024, false),
            (64, 1024, true),
            (1, 64 * 1024, true),
            (1, 1024 * 1024, true),
        ];
        for (n, body, full) in cases {
            assert_eq!(limit.filled_by(&batch(n, body)), full, "{n} x {body} B");
        }
        // What `take` stops at: the first message is always taken, even past the bytes.
        assert!(!limit.reached(0, 0));
        assert!(!BatchLimit::ONE.reached(0, 0));
        assert!(BatchLimit::ONE.reached(1, 0));
    }
}
