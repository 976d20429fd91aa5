//! FIN/REQ/TOUCH, batched: a run of pipelined acks is sent to the engine concurrently so
//! their channel-WAL fsyncs share one group commit instead of one fsync each.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use rustqueue_engine::MessageId;
use rustqueue_protocol::{Command, ProtocolError};

use crate::tcp::errors;
use crate::tcp::session::{Next, Session, State};

/// Most acks run together (spec: 256 active channel operations per session).
pub(super) const MAX_BATCH: usize = 256;

/// Whether `cmd` is FIN, REQ or TOUCH.
pub(super) fn is_ack(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Fin(_) | Command::Req { .. } | Command::Touch(_)
    )
}

impl Session {
    /// Runs acks concurrently, then reports failures in command order (non-fatal, like nsqd).
    pub(super) async fn ack_batch(&mut self, acks: Vec<Command>) -> std::io::Result<Next> {
        let Some(consumer) = self.consumer.as_ref().filter(|_| self.state != State::Init) else {
            let name = acks.first().map_or("FIN", Command::name);
            return self
                .fail(ProtocolError::invalid(format!(
                    "cannot {name} in current state"
                )))
                .await;
        };
        let max_defer = self.shared.cfg.queue.max_defer_ms as i64;
        let results = join_all(acks.iter().filter_map(|cmd| {
            let (name, id) = match cmd {
                Command::Fin(id) => ("FIN", *id),
                Command::Req { id, .. } => ("REQ", *id),
                Command::Touch(id) => ("TOUCH", *id),
                _ => return None,
            };
            let eid = MessageId(id.0);
            Some(async move {
                let result = match cmd {
                    Command::Fin(_) => consumer.finish(eid).await,
                    // nsqd clamps an out-of-range REQ delay instead of refusing it.
                    Command::Req { delay_ms, .. } => {
                        let delay = Duration::from_millis((*delay_ms).clamp(0, max_defer) as u64);
                        consumer.requeue(eid, delay).await
                    }
                    _ => consumer.touch(eid),
                };
                (name, id, result)
            })
        }))
        .await;
        for (name, id, result) in results {
            match result {
                Ok(()) => {
                    let counter = match name {
                        "FIN" => &self.stats.finish_count,
                        "REQ" => &self.stats.requeue_count,
                        _ => continue,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
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
}
