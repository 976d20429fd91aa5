//! FIN/REQ/TOUCH. A run of pipelined acks is applied in order; their channel-WAL fsyncs run
//! in the background and share group commits, so delivery never stalls on the disk. At most
//! [`MAX_PENDING`] of them wait for their fsync at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use rustqueue_engine::{DeliveryError, MessageId};
use rustqueue_protocol::{Command, MessageId as ProtoId, ProtocolError};

use crate::tcp::errors;
use crate::tcp::session::{Next, Session, State};

/// Most FIN/REQ a session keeps applied but not yet durable (256, as
/// nsqd-compatible clients expect of the original broker). Further acks wait, unread, in the session's input: this bounds
/// the memory a fast consumer can pin while its channel WAL catches up, and makes the session
/// yield to the WAL worker.
pub(super) const MAX_PENDING: usize = 256;

/// Whether `cmd` is FIN, REQ or TOUCH.
pub(super) fn is_ack(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Fin(_) | Command::Req { .. } | Command::Touch(_)
    )
}

/// A FIN/REQ already applied in memory whose channel-WAL fsync is still running.
pub(super) type PendingAck = Pin<
    Box<dyn Future<Output = (&'static str, ProtoId, Result<(), DeliveryError>)> + Send + 'static>,
>;

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
        let room = MAX_PENDING - self.pending_acks.len();
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

    /// Applies a run of acks in command order. FIN and REQ take effect in memory at once (the
    /// RDY slot frees, nothing is redelivered) and their WAL fsyncs are left to complete in
    /// the background, so delivery never waits on a disk flush: NSQ sends no reply to FIN or
    /// REQ, and a crash before the fsync only redelivers (at-least-once). Failures are reported
    /// like nsqd's, as non-fatal errors.
    pub(super) async fn ack_batch(&mut self, acks: Vec<Command>) -> std::io::Result<Next> {
        if self.state == State::Init || self.consumer.is_none() {
            let name = acks.first().map_or("FIN", Command::name);
            return self
                .fail(ProtocolError::invalid(format!(
                    "cannot {name} in current state"
                )))
                .await;
        }
        let max_defer = self.shared.cfg.queue.max_defer_ms as i64;
        for cmd in &acks {
            let Some(consumer) = self.consumer.as_ref() else {
                break;
            };
            let (name, id, applied) = match cmd {
                Command::Fin(id) => ("FIN", *id, consumer.finish_pipelined(MessageId(id.0))),
                // nsqd clamps an out-of-range REQ delay instead of refusing it.
                Command::Req { id, delay_ms } => {
                    let delay = Duration::from_millis((*delay_ms).clamp(0, max_defer) as u64);
                    (
                        "REQ",
                        *id,
                        consumer.requeue_pipelined(MessageId(id.0), delay),
                    )
                }
                Command::Touch(id) => {
                    if let Err(e) = consumer.touch(MessageId(id.0))
                        && let Next::Close = self
                            .fail(errors::delivery(&e, "TOUCH", id.as_str()))
                            .await?
                    {
                        return Ok(Next::Close);
                    }
                    continue;
                }
                _ => continue,
            };
            match applied {
                Ok(durable) => {
                    let counter = if name == "FIN" {
                        &self.stats.finish_count
                    } else {
                        &self.stats.requeue_count
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    self.pending_acks
                        .push(Box::pin(async move { (name, id, durable.await) }));
                }
                Err(e) => {
                    if let Next::Close = self.fail(errors::delivery(&e, name, id.as_str())).await? {
                        return Ok(Next::Close);
                    }
                }
            }
        }
        self.update_in_flight();
        Ok(Next::Continue)
    }

    /// Reports a background FIN/REQ fsync that failed (storage is isolated by then).
    pub(super) async fn ack_settled(
        &mut self,
        (name, id, result): (&'static str, ProtoId, Result<(), DeliveryError>),
    ) -> std::io::Result<Next> {
        match result {
            Ok(()) => Ok(Next::Continue),
            Err(e) => self.fail(errors::delivery(&e, name, id.as_str())).await,
        }
    }
}
