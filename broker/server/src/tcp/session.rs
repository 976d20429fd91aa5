//! One NSQ V2 session: the command loop, deliveries, heartbeats and output buffering.
//!
//! A single task per connection `select!`s over: more bytes from the client (cancel-safe
//! buffered reads, so a body is never half-lost), the next delivery from the engine, the
//! heartbeat tick, the output-buffer deadline, the command-read deadline and shutdown.
//! Publishes and acks are awaited inline, so the reply order always matches the command order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustqueue_engine::{BatchLimit, ClientInfo, Consumer, ConsumerOptions, Delivery};
use rustqueue_protocol::identify::Negotiated;
use rustqueue_protocol::{Command, Decoder, ErrorCode, MAGIC_V2, ProtocolError, frame};
use tokio::time::{Instant, sleep_until};

use crate::auth::AuthState;
use crate::clients::{ClientStats, SessionState as State};
use crate::state::Shared;
use crate::tcp::conn::Conn;
use crate::tcp::errors;
use crate::tcp::trace::{Deliveries, PublishSpan};

mod acks;
mod auth;
mod identify;

/// What the loop does after a command.
enum Next {
    Continue,
    Close,
}

/// Most messages one wake-up takes from the channel (RDY limits it too).
const MAX_BATCH_MESSAGES: usize = 256;

/// Fewest body bytes a batch may take before it stops, whatever the output buffer size.
const MIN_BATCH_BYTES: u64 = 64 * 1024;

/// Longest a consumer that has finished everything it was sent waits for more messages to
/// share one write (see `Session::buffer_rule`); never longer than its output buffer timeout.
const IDLE_CLIENT_LINGER: Duration = Duration::from_millis(1);

/// What the session's one timer stands for this loop turn.
#[derive(Clone, Copy)]
struct Deadlines {
    flush: Option<Instant>,
    heartbeat: Option<Instant>,
    command: Option<Instant>,
}

/// When buffered message frames go out.
enum Flush {
    Now,
    By(Instant),
    Later,
}

/// How long a connection closed by a fatal error keeps draining the client's input.
const LINGER_AFTER_ERROR: Duration = Duration::from_secs(2);

/// One client session.
pub struct Session {
    shared: Arc<Shared>,
    conn: Conn,
    peer: SocketAddr,
    stats: Arc<ClientStats>,
    decoder: Decoder,
    params: Negotiated,
    state: State,
    commands_seen: u64,
    consumer: Option<Consumer>,
    auth: Option<(AuthState, Vec<u8>)>,
    last_recv: Instant,
    flush_at: Option<Instant>,
    /// When the oldest message frame still in the output buffer was framed.
    first_buffered: Option<Instant>,
    command_started: Option<Instant>,
    /// When the last decoded command's bytes began to arrive (a publish span's `read`).
    command_began: Instant,
    /// The sampled deliveries in flight, while tracing is on (docs/observability.md).
    traced: Option<Deliveries>,
    /// FIN/REQ applied in memory whose WAL fsync is still running.
    pending_acks: acks::PendingAcks,
    /// A fatal error was sent: linger before closing so the client can read it.
    closed_on_error: bool,
    /// When this client's last publish was answered, and its topic: one that publishes to it
    /// again at once shares group commits with the others that do (`Engine::publish_from`).
    last_publish_ack: Option<std::time::Instant>,
    last_publish_topic: String,
}

impl Session {
    /// Creates the session for an accepted connection.
    pub fn new(shared: Arc<Shared>, conn: Conn, peer: SocketAddr, stats: Arc<ClientStats>) -> Self {
        let decoder = Decoder::new(shared.decoder.clone());
        let params = Negotiated::defaults(&shared.identify);
        Self {
            shared,
            conn,
            peer,
            stats,
            decoder,
            params,
            state: State::Init,
            commands_seen: 0,
            consumer: None,
            auth: None,
            last_recv: Instant::now(),
            flush_at: None,
            first_buffered: None,
            command_started: None,
            command_began: Instant::now(),
            traced: None,
            pending_acks: acks::PendingAcks::default(),
            closed_on_error: false,
            last_publish_ack: None,
            last_publish_topic: String::new(),
        }
    }

    /// Runs the session to completion.
    pub async fn run(mut self) {
        let handshake = Duration::from_millis(self.shared.cfg.limits.client_handshake_timeout_ms);
        match tokio::time::timeout(handshake, self.conn.read_exact_raw(4)).await {
            Ok(Ok(magic)) if magic == MAGIC_V2 => {}
            Ok(Ok(magic)) => {
                let err = ProtocolError::new(
                    ErrorCode::BadProtocol,
                    format!("client sent bad magic {magic:?}"),
                );
                self.conn.error(&err);
                self.conn.shutdown().await;
                return;
            }
            _ => return,
        }
        self.command_started = Some(Instant::now());
        let result = self.main_loop(handshake).await;
        // Why a connection ended is logged at info, but not a client's own close (EOF, with or
        // without TLS close_notify): a client library that dies on a broker-side close is then
        // traceable to its cause.
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!(peer = %self.peer, "connection closed by the client: {e}");
            }
            Err(e) => tracing::info!(peer = %self.peer, "connection closed: {e}"),
            Ok(()) => {}
        }
        self.conn.shutdown().await;
        if self.closed_on_error {
            let limits = &self.shared.cfg.limits;
            let budget = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
            self.conn
                .linger(budget.saturating_add(64 * 1024), LINGER_AFTER_ERROR)
                .await;
        }
        // Dropping the consumer returns its in-flight messages to the channel at once.
        self.consumer.take();
        if let Some(t) = &mut self.traced {
            t.close();
        }
    }

    fn heartbeat(&self) -> Option<Duration> {
        self.params.heartbeat_interval_ms.map(Duration::from_millis)
    }

    async fn main_loop(&mut self, handshake: Duration) -> std::io::Result<()> {
        let mut shutdown = self.shared.shutdown.clone();
        let command_timeout = Duration::from_millis(self.shared.cfg.limits.tcp_command_timeout_ms);
        let mut next_heartbeat = self.heartbeat().map(|h| Instant::now() + h);
        // One timer for the output buffer, the heartbeat and the command deadline, moved only
        // when the earliest of them changes: a fresh sleep per deadline per loop turn would
        // register and cancel three timers per command.
        let mut timer = std::pin::pin!(sleep_until(Instant::now()));
        loop {
            if let Next::Close = self.run_buffered(&mut next_heartbeat).await? {
                return Ok(());
            }
            match self.buffer_rule() {
                Flush::Now => self.flush_now().await?,
                Flush::By(at) => self.flush_by(at),
                Flush::Later => {}
            }
            if self.state == State::Closing
                && self.consumer.as_ref().is_none_or(|c| c.in_flight() == 0)
            {
                self.conn.flush().await?;
                return Ok(());
            }
            // While acks are full the buffered commands wait on us, not on the client.
            let blocked = self.acks_full();
            let command_deadline = self.command_deadline(blocked, handshake, command_timeout);
            let traced_deadline = self.traced.as_mut().and_then(|t| {
                t.expire(std::time::Instant::now());
                t.next_deadline().map(Instant::from_std)
            });
            let due = [
                self.flush_at,
                next_heartbeat,
                command_deadline,
                traced_deadline,
            ]
            .into_iter()
            .flatten()
            .min();
            if let Some(at) = due
                && timer.deadline() != at
            {
                timer.as_mut().reset(at);
            }
            let reserve = self
                .decoder
                .pending_body_len()
                .unwrap_or(0)
                .saturating_sub(self.conn.cmd_in.len());
            let deliver = self.state == State::Subscribed && self.consumer.is_some();
            let limit = self.batch_limit();
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    self.conn.flush().await?;
                    return Ok(());
                }
                n = self.conn.read_more(reserve), if !blocked => {
                    if n? == 0 {
                        return Ok(());
                    }
                }
                d = next_deliveries(self.consumer.as_mut(), limit), if deliver => {
                    match d {
                        Some(d) => {
                            let full = limit.filled_by(&d);
                            self.send_messages(d).await?;
                            if full {
                                // More is likely waiting: give the worker to the other
                                // sessions before the next batch. A consumer with a large
                                // `RDY` and a burst to take (a relaxed sync showing thousands
                                // at once in `write_ack`, a backlog) would otherwise send batch
                                // after batch in one poll, each write completing at once, while
                                // the publishers' sessions on the same worker wait. With two
                                // MPUB writers and two such readers (`mixed`) their `OK`s' p99
                                // read 4.3-4.6 ms in `write_ack` and 1.4-1.7 ms in
                                // `nsq_relaxed`; with the yield 0.9-1.0 and 0.6 ms, and
                                // `nsq_relaxed` 502-526k msg/s against 343-470k
                                // (docs/benchmarks.md, notes).
                                tokio::task::yield_now().await;
                            }
                        }
                        None => {
                            self.conn.flush().await?;
                            return Ok(());
                        }
                    }
                }
                Some(settled) = self.pending_acks.next(), if !self.pending_acks.is_empty() => {
                    if let Next::Close = self.ack_settled(settled).await? {
                        return Ok(());
                    }
                }
                () = &mut timer, if due.is_some() => {
                    let fired = timer.deadline();
                    let deadlines = Deadlines { flush: self.flush_at, heartbeat: next_heartbeat, command: command_deadline };
                    if let Next::Close = self.on_timer(fired, deadlines, &mut next_heartbeat).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The earliest deadline fired at `fired`: the output buffer goes out, else a heartbeat is
    /// sent (or the silent client dropped), else the command timed out (one per turn, in that
    /// order, as the loop looks again at once).
    async fn on_timer(
        &mut self,
        fired: Instant,
        due: Deadlines,
        next_heartbeat: &mut Option<Instant>,
    ) -> std::io::Result<Next> {
        if due.flush.is_some_and(|f| f <= fired) {
            self.flush_now().await?;
        } else if due.heartbeat.is_some_and(|h| h <= fired) {
            let Some(hb) = self.heartbeat() else {
                *next_heartbeat = None;
                return Ok(Next::Continue);
            };
            if self.last_recv.elapsed() >= 2 * hb {
                tracing::warn!(
                    peer = %self.peer,
                    "closing the connection: nothing received for {:?}, twice the {hb:?} \
                     heartbeat interval (the client must answer heartbeats with NOP)",
                    self.last_recv.elapsed()
                );
                return Ok(Next::Close);
            }
            self.conn.response(frame::HEARTBEAT);
            self.flush_now().await?;
            *next_heartbeat = Some(Instant::now() + hb);
        } else if due.command.is_some_and(|c| c <= fired) {
            // Silence before any byte of a command is a plain close; a half-sent command is
            // answered.
            if !self.conn.cmd_in.is_empty() || !self.decoder.between_commands() {
                self.conn
                    .error(&ProtocolError::invalid("command read timed out"));
            }
            tracing::info!(peer = %self.peer, "closing the connection: command read timed out");
            return Ok(Next::Close);
        }
        Ok(Next::Continue)
    }

    /// Decodes and runs every complete command already buffered. Consecutive FIN/REQ/TOUCH
    /// run concurrently so their channel-WAL fsyncs share group commits. A changed heartbeat
    /// interval moves `next_heartbeat`.
    async fn run_buffered(
        &mut self,
        next_heartbeat: &mut Option<Instant>,
    ) -> std::io::Result<Next> {
        let mut carry = None;
        loop {
            if carry.is_none() && self.acks_full() {
                // Leave further commands buffered until a FIN/REQ group commit settles.
                break;
            }
            let cmd = match carry.take() {
                Some(cmd) => cmd,
                None => match self.decode_next() {
                    Ok(Some(cmd)) => cmd,
                    Ok(None) => break,
                    Err(e) => {
                        self.fatal(&e);
                        return Ok(Next::Close);
                    }
                },
            };
            let had_hb = self.heartbeat();
            let next = if acks::is_ack(&cmd) {
                let (next, rest) = self.ack_run(cmd).await?;
                carry = rest;
                next
            } else {
                self.execute(cmd).await?
            };
            if let Next::Close = next {
                return Ok(Next::Close);
            }
            if self.heartbeat() != had_hb {
                *next_heartbeat = self.heartbeat().map(|h| Instant::now() + h);
            }
        }
        Ok(Next::Continue)
    }

    /// When a command that has started must be complete: the handshake limit before the
    /// first command, the command timeout after; never while acks block reading.
    fn command_deadline(
        &mut self,
        blocked: bool,
        handshake: Duration,
        command_timeout: Duration,
    ) -> Option<Instant> {
        if !self.conn.cmd_in.is_empty() || !self.decoder.between_commands() {
            self.command_started.get_or_insert_with(Instant::now);
        }
        let limit = if self.commands_seen == 0 {
            handshake
        } else {
            command_timeout
        };
        self.command_started.filter(|_| !blocked).map(|t| t + limit)
    }

    /// When the message frames in the output buffer go out, besides the output buffer's size
    /// and timeout (which [`Session::send_messages`] applies, as nsqd does):
    /// - at once when the consumer may not be sent more (its in-flight count reached RDY), as
    ///   nsqd flushes a client that is not ready for messages;
    /// - within [`IDLE_CLIENT_LINGER`] when the consumer has finished everything it was sent
    ///   (every message in flight is still buffered): holding them for the whole output buffer
    ///   timeout would leave the client idle (a RDY 1 consumer would get one message per
    ///   timeout), while sending each wake-up's few messages alone costs a write and a client
    ///   wake-up per handful of messages under load; the linger lets a busy topic fill the
    ///   buffer a little first;
    /// - otherwise by the output buffer's own rules: the client still has work.
    fn buffer_rule(&self) -> Flush {
        let buffered = self.conn.buffered_messages as u64;
        if buffered == 0 {
            return Flush::Later;
        }
        let in_flight = self.stats.in_flight_count.load(Ordering::Relaxed);
        if in_flight >= self.stats.ready_count.load(Ordering::Relaxed) {
            return Flush::Now;
        }
        if in_flight > buffered {
            return Flush::Later;
        }
        let linger =
            IDLE_CLIENT_LINGER.min(Duration::from_millis(self.params.output_buffer_timeout_ms));
        match self.first_buffered {
            Some(first) if !linger.is_zero() => Flush::By(first + linger),
            _ => Flush::Now,
        }
    }

    /// Moves the buffered frames' flush no later than `at`.
    fn flush_by(&mut self, at: Instant) {
        self.flush_at = Some(self.flush_at.map_or(at, |f| f.min(at)));
    }

    /// Whether the session holds as many unsettled FIN/REQ as it may.
    fn acks_full(&self) -> bool {
        self.pending_acks.len() >= acks::MAX_PENDING
    }

    /// Takes the next complete command, updating the liveness bookkeeping.
    fn decode_next(&mut self) -> Result<Option<Command>, ProtocolError> {
        let cmd = self.decoder.decode(&mut self.conn.cmd_in)?;
        if cmd.is_some() {
            self.last_recv = Instant::now();
            self.command_began = self.command_started.take().unwrap_or(self.last_recv);
            self.commands_seen += 1;
        }
        Ok(cmd)
    }

    async fn flush_now(&mut self) -> std::io::Result<()> {
        self.flush_at = None;
        self.first_buffered = None;
        self.conn.flush().await
    }

    /// How much one wake-up may take from the channel: what fits the output buffer (at
    /// least [`MIN_BATCH_BYTES`], so a small buffer still gets batched reads and writes).
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit {
            messages: MAX_BATCH_MESSAGES,
            bytes: self.params.output_buffer_size.max(MIN_BATCH_BYTES),
        }
    }

    /// Frames a batch of deliveries into the output buffer, then writes it at once or leaves
    /// it for the output-buffer timeout (one write per batch, not per message).
    async fn send_messages(&mut self, batch: Vec<Delivery>) -> std::io::Result<()> {
        let n = batch.len();
        if self.conn.buffered_messages == 0 {
            self.first_buffered = Some(Instant::now());
        }
        if let Some(t) = &mut self.traced {
            let now = std::time::Instant::now();
            for d in &batch {
                t.dispatched(&d.id.0, d.attempts, now);
            }
        }
        for d in batch {
            frame::put_message(
                &mut self.conn.out,
                d.timestamp_ns,
                d.attempts,
                &d.id.0,
                &d.body,
            );
        }
        self.conn.buffered_messages += n;
        self.stats
            .message_count
            .fetch_add(n as u64, Ordering::Relaxed);
        self.update_in_flight();
        let size = self.params.output_buffer_size as usize;
        if self.params.output_buffer_timeout_ms == 0 || self.conn.out.len() >= size {
            return self.flush_now().await;
        }
        if self.flush_at.is_none() {
            self.flush_at =
                Some(Instant::now() + Duration::from_millis(self.params.output_buffer_timeout_ms));
        }
        Ok(())
    }

    /// Publishes the consumer's in-flight count (to `/stats` and the flush rule).
    fn update_in_flight(&self) {
        if let Some(c) = &self.consumer {
            self.stats
                .in_flight_count
                .store(c.in_flight() as u64, Ordering::Relaxed);
        }
    }

    /// Queues a fatal error; the session closes next and lingers so the client can read it.
    fn fatal(&mut self, err: &ProtocolError) {
        tracing::info!(peer = %self.peer, "closing the connection after {err}");
        self.closed_on_error = true;
        self.conn.error(err);
    }

    /// Sends `err`; closes when fatal (or when it is a retriable publish refusal and the
    /// broker is configured to disconnect instead).
    async fn fail(&mut self, err: ProtocolError) -> std::io::Result<Next> {
        let retriable = matches!(
            err.code,
            ErrorCode::Throttled | ErrorCode::Draining | ErrorCode::PubRetry
        );
        if retriable && self.shared.cfg.limits.disconnect_on_retriable_publish_error {
            tracing::info!(peer = %self.peer, "closing the connection instead of sending {err}");
            return Ok(Next::Close);
        }
        let fatal = err.is_fatal();
        if fatal {
            self.fatal(&err);
        } else {
            self.conn.error(&err);
        }
        self.flush_now().await?;
        Ok(if fatal { Next::Close } else { Next::Continue })
    }

    async fn ok(&mut self) -> std::io::Result<Next> {
        self.conn.response(frame::OK);
        self.flush_now().await?;
        Ok(Next::Continue)
    }

    fn tls_required_violation(&self, cmd: &Command) -> bool {
        let required = self
            .shared
            .cfg
            .security
            .tls
            .as_ref()
            .is_some_and(|t| t.required);
        required && !self.conn.is_tls() && !matches!(cmd, Command::Identify(_))
    }

    async fn execute(&mut self, cmd: Command) -> std::io::Result<Next> {
        if self.tls_required_violation(&cmd) {
            return self
                .fail(ProtocolError::new(
                    ErrorCode::TlsRequired,
                    "TLS is required",
                ))
                .await;
        }
        if self.state == State::Closing
            && !matches!(
                cmd,
                Command::Fin(_)
                    | Command::Req { .. }
                    | Command::Touch(_)
                    | Command::Nop
                    | Command::Cls
                    | Command::Rdy(_)
            )
        {
            return self
                .fail(ProtocolError::new(
                    ErrorCode::Closing,
                    format!("cannot {} while closing", cmd.name()),
                ))
                .await;
        }
        match cmd {
            Command::Nop => Ok(Next::Continue),
            Command::Identify(body) => self.identify(&body).await,
            Command::Auth(secret) => self.authenticate(secret.to_vec()).await,
            Command::Sub { topic, channel } => self.subscribe(topic, channel).await,
            Command::Pub { topic, body } => self.publish("PUB", topic, vec![body], None).await,
            Command::Mpub { topic, bodies } => self.publish("MPUB", topic, bodies, None).await,
            Command::Dpub {
                topic,
                defer_ms,
                body,
            } => {
                self.publish(
                    "DPUB",
                    topic,
                    vec![body],
                    Some(Duration::from_millis(defer_ms)),
                )
                .await
            }
            Command::Rdy(n) => self.ready(n).await,
            Command::Fin(_) | Command::Req { .. } | Command::Touch(_) => {
                self.ack_batch(vec![cmd]).await
            }
            Command::Cls => self.close_wait().await,
        }
    }

    async fn subscribe(&mut self, topic: String, channel: String) -> std::io::Result<Next> {
        if self.state != State::Init {
            return self
                .fail(ProtocolError::invalid("cannot SUB in current state"))
                .await;
        }
        if self.params.heartbeat_interval_ms.is_none() {
            return self
                .fail(ProtocolError::invalid(
                    "cannot SUB with heartbeats disabled",
                ))
                .await;
        }
        if let Some(err) = self.check_auth("SUB", &topic, Some(&channel)).await {
            return self.fail(err).await;
        }
        if let Err(r) = self.shared.control.fences.check_channel(&topic, &channel) {
            return self.fail(errors::fenced(r, "SUB", &topic)).await;
        }
        let facts = self
            .stats
            .facts
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default();
        let opts = ConsumerOptions {
            msg_timeout: Some(Duration::from_millis(self.params.msg_timeout_ms)),
            sample_rate: self.params.sample_rate,
            client: ClientInfo {
                client_id: facts.client_id,
                hostname: facts.hostname,
                user_agent: facts.user_agent,
                remote_address: self.peer.to_string(),
                tls: facts.tls,
                snappy: facts.snappy,
                deflate: facts.deflate,
            },
        };
        let max = self.shared.cfg.limits.max_channel_consumers;
        if let Err(max) = self
            .shared
            .clients
            .claim_subscription(&self.stats, &topic, &channel, max)
        {
            let msg = format!("SUB failed consumers for {topic}:{channel} exceeds limit of {max}");
            return self
                .fail(ProtocolError::new(ErrorCode::SubFailed, msg))
                .await;
        }
        match self.shared.engine.subscribe(&topic, &channel, opts) {
            Ok(c) => {
                self.consumer = Some(c);
                let msg_timeout = Duration::from_millis(self.params.msg_timeout_ms);
                self.traced = Deliveries::new(&topic, &channel, msg_timeout);
                self.state = State::Subscribed;
                self.stats.update(|f| {
                    f.state = State::Subscribed;
                    f.subscription = Some((topic, channel));
                });
                self.ok().await
            }
            Err(e) => {
                self.stats.update(|f| f.subscription = None);
                self.fail(errors::subscribe(&e, &topic, &channel)).await
            }
        }
    }

    async fn publish(
        &mut self,
        cmd: &'static str,
        topic: String,
        bodies: Vec<bytes::Bytes>,
        defer: Option<Duration>,
    ) -> std::io::Result<Next> {
        if let Some(err) = self.check_auth(cmd, &topic, None).await {
            return self.fail(err).await;
        }
        if self.shared.control.is_draining() {
            let err = ProtocolError::new(ErrorCode::Draining, format!("{cmd} failed: draining"));
            return self.fail(err).await;
        }
        if let Err(r) = self.shared.control.fences.check_topic(&topic) {
            return self.fail(errors::fenced(r, cmd, &topic)).await;
        }
        let count = bodies.len() as u64;
        let previous_ack = self
            .last_publish_ack
            .filter(|_| self.last_publish_topic == topic);
        let read = (self.command_began.into_std(), self.last_recv.into_std());
        let ack_mode = &self.shared.cfg.queue.publish_ack_mode;
        let span = PublishSpan::start(cmd, &topic, &bodies, read, ack_mode);
        let commit = span.as_ref().map(PublishSpan::commit);
        match self
            .shared
            .engine
            .publish_recorded(&topic, bodies, defer, previous_ack, commit)
            .await
        {
            Ok(()) => {
                self.last_publish_topic.clear();
                self.last_publish_topic.push_str(&topic);
                self.stats
                    .update(|f| *f.pub_counts.entry(topic).or_default() += count);
                let next = self.ok().await;
                self.last_publish_ack = Some(std::time::Instant::now());
                if let Some(span) = span {
                    span.end(Ok(()));
                }
                next
            }
            Err(e) => {
                if let Some(span) = span {
                    span.end(Err(&e));
                }
                self.fail(errors::publish(&e, cmd)).await
            }
        }
    }

    async fn ready(&mut self, n: i64) -> std::io::Result<Next> {
        match self.state {
            State::Closing => return Ok(Next::Continue),
            State::Init => {
                return self
                    .fail(ProtocolError::invalid("cannot RDY in current state"))
                    .await;
            }
            State::Subscribed => {}
        }
        let max = self.shared.cfg.limits.max_rdy_count as i64;
        if !(0..=max).contains(&n) {
            return self
                .fail(ProtocolError::invalid(format!(
                    "RDY count {n} out of range 0-{max}"
                )))
                .await;
        }
        if let Some(c) = &self.consumer {
            c.set_ready(n as u32);
        }
        self.stats.ready_count.store(n as u64, Ordering::Relaxed);
        Ok(Next::Continue)
    }

    async fn close_wait(&mut self) -> std::io::Result<Next> {
        if self.state != State::Subscribed {
            return self
                .fail(ProtocolError::invalid("cannot CLS in current state"))
                .await;
        }
        if let Some(c) = &self.consumer {
            c.set_ready(0);
        }
        self.state = State::Closing;
        self.stats.update(|f| f.state = State::Closing);
        self.conn.response(frame::CLOSE_WAIT);
        self.flush_now().await?;
        Ok(Next::Continue)
    }
}

async fn next_deliveries(
    consumer: Option<&mut Consumer>,
    limit: BatchLimit,
) -> Option<Vec<Delivery>> {
    match consumer {
        Some(c) => c.next_batch(limit).await,
        None => std::future::pending().await,
    }
}
