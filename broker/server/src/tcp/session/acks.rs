//! FIN/REQ/TOUCH. A run of pipelined acks is applied in order; their channel-WAL fsyncs run
//! in the background and share group commits, so delivery never stalls on the disk. At most
//! [`MAX_PENDING`] of them wait for their fsync at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rustqueue_engine::{Ack, DeliveryError, MessageId};
use rustqueue_protocol::{Command, MessageId as ProtoId, ProtocolError};

use crate::tcp::errors;
use crate::tcp::session::{Next, Session, State};

/// Most FIN/REQ a session keeps applied but not yet durable. Further acks wait, unread, in
/// the session's input: this bounds the memory a fast consumer can pin while its channel WAL
/// catches up (a few hundred KiB), and makes the session yield to the WAL worker. It must
/// cover what a consumer finishes during one WAL group commit, which under load (the worker
/// waiting its turn on busy cores) takes several milliseconds: at 1,024 two consumers
/// draining a backlog finished about 150k messages a second, at 8,192 about 300k.
pub(super) const MAX_PENDING: usize = 8_192;

/// Whether `cmd` is FIN, REQ or TOUCH.
pub(super) fn is_ack(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Fin(_) | Command::Req { .. } | Command::Touch(_)
    )
}

/// The FIN/REQ of one run, applied in memory, whose shared channel-WAL fsync is still
/// running: each one's name and id (to report a failure like nsqd, one error per ack) and
/// the fsync's result.
pub(super) type PendingAck =
    Pin<Box<dyn Future<Output = (Vec<(&'static str, ProtoId)>, Result<(), DeliveryError>)> + Send>>;

/// The runs of a session whose fsync is still running, and how many acks they hold.
#[derive(Default)]
pub(super) struct PendingAcks {
    runs: FuturesUnordered<PendingAck>,
    acks: usize,
}

impl PendingAcks {
    /// Acks still waiting for their fsync.
    pub(super) fn len(&self) -> usize {
        self.acks
    }

    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn push(&mut self, acks: usize, run: PendingAck) {
        self.acks += acks;
        self.runs.push(run);
    }

    /// The next run whose fsync settled.
    pub(super) async fn next(
        &mut self,
    ) -> Option<(Vec<(&'static str, ProtoId)>, Result<(), DeliveryError>)> {
        let settled = self.runs.next().await?;
        self.acks -= settled.0.len();
        Some(settled)
    }
}

impl Session {
    /// Runs `first` together with the FIN/REQ/TOUCH decoded right behind it (as many as the
    /// pending-ack room allows); returns what follows and the first other command decoded.
    pub(super) async fn ack_run(
        &mut self,
        first: Command,
    ) -> std::io::Result<(Next, Option<Command>)> {
        let mut batch = vec![first];
        let mut carry = None;
        let mut decode_error = None;
        let room = MAX_PENDING.saturating_sub(self.pending_acks.len());
        while batch.len() < room {
            match self.decode_next() {
                Ok(Some(c)) if is_ack(&c) => batch.push(c),
                Ok(Some(c)) => {
                    carry = Some(c);
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    decode_error = Some(e);
                    break;
                }
            }
        }
        let next = self.ack_batch(batch).await?;
        if let Some(e) = decode_error {
            self.fatal(&e);
            return Ok((Next::Close, None));
        }
        Ok((next, carry))
    }

    /// Applies a run of acks in command order, in one call to the engine. FIN and REQ take
    /// effect in memory at once (the RDY slot frees, nothing is redelivered) and their WAL
    /// fsync is left to complete in the background, so delivery never waits on a disk flush:
    /// NSQ sends no reply to FIN or REQ, and a crash before the fsync only redelivers
    /// (at-least-once). Failures are reported like nsqd's, as non-fatal errors.
    pub(super) async fn ack_batch(&mut self, cmds: Vec<Command>) -> std::io::Result<Next> {
        let Some(consumer) = self.consumer.as_ref().filter(|_| self.state != State::Init) else {
            let name = cmds.first().map_or("FIN", Command::name);
            return self
                .fail(ProtocolError::invalid(format!(
                    "cannot {name} in current state"
                )))
                .await;
        };
        let max_defer = self.shared.cfg.queue.max_defer_ms as i64;
        let mut named = Vec::with_capacity(cmds.len());
        let mut acks = Vec::with_capacity(cmds.len());
        for cmd in &cmds {
            let (name, id, ack) = match cmd {
                Command::Fin(id) => ("FIN", *id, Ack::Finish(MessageId(id.0))),
                // nsqd clamps an out-of-range REQ delay instead of refusing it.
                Command::Req { id, delay_ms } => {
                    let delay = Duration::from_millis((*delay_ms).clamp(0, max_defer) as u64);
                    ("REQ", *id, Ack::Requeue(MessageId(id.0), delay))
                }
                Command::Touch(id) => ("TOUCH", *id, Ack::Touch(MessageId(id.0))),
                _ => continue,
            };
            named.push((name, id));
            acks.push(ack);
        }
        let applied = consumer.apply_acks(&acks);
        let mut durable_acks = Vec::with_capacity(named.len());
        let mut failed = Vec::new();
        for ((name, id), result) in named.into_iter().zip(applied.results) {
            if let (Some(t), Ok(())) = (&mut self.traced, &result) {
                t.acked(&id.0, name);
            }
            match result {
                Ok(()) if name == "FIN" => {
                    self.stats.finish_count.fetch_add(1, Ordering::Relaxed);
                    durable_acks.push((name, id));
                }
                Ok(()) if name == "REQ" => {
                    self.stats.requeue_count.fetch_add(1, Ordering::Relaxed);
                    durable_acks.push((name, id));
                }
                Ok(()) => {}
                Err(e) => failed.push(errors::delivery(&e, name, id.as_str())),
            }
        }
        if let Some(durable) = applied.durable {
            let n = durable_acks.len();
            self.pending_acks
                .push(n, Box::pin(async move { (durable_acks, durable.await) }));
        }
        self.update_in_flight();
        for err in failed {
            if let Next::Close = self.fail(err).await? {
                return Ok(Next::Close);
            }
        }
        Ok(Next::Continue)
    }

    /// Reports a run of background FIN/REQ whose fsync failed (storage is isolated by then):
    /// one error per ack, as if each had failed on its own.
    pub(super) async fn ack_settled(
        &mut self,
        (acks, result): (Vec<(&'static str, ProtoId)>, Result<(), DeliveryError>),
    ) -> std::io::Result<Next> {
        let Err(e) = result else {
            return Ok(Next::Continue);
        };
        for (name, id) in acks {
            if let Next::Close = self.fail(errors::delivery(&e, name, id.as_str())).await? {
                return Ok(Next::Close);
            }
        }
        Ok(Next::Continue)
    }
}
