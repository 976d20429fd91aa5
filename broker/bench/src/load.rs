//! The two kinds of load task. A producer owns one connection and has one PUB/MPUB in flight;
//! it times each acknowledgement. A consumer owns one subscribed connection, FINs every
//! message, keeps RDY topped up and ticks deliveries off in the ledger.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::{ClientError, Conn};
use crate::ledger::{self, Ledger};
use crate::wire::{self, Frame};

/// Warm-up: publishing, nothing recorded.
pub const PHASE_WARMUP: u8 = 0;
/// Measuring: latencies recorded.
pub const PHASE_MEASURE: u8 = 1;
/// Producers stop after their current publish.
pub const PHASE_STOP: u8 = 2;

/// RDY each consumer advertises; re-sent after a quarter of it has arrived.
pub const RDY: u32 = 2500;

/// What one producer does.
#[derive(Debug, Clone)]
pub struct ProducerPlan {
    /// Producer index (the ledger's producer number).
    pub index: usize,
    /// Topic to publish to.
    pub topic: String,
    /// Body size in bytes.
    pub message_bytes: usize,
    /// Messages per command: 1 = PUB, more = MPUB.
    pub batch: usize,
    /// Stop after this many messages (count mode); `None` = until the phase says stop.
    pub quota: Option<u64>,
    /// Time between commands for a fixed arrival rate; `None` = saturation.
    pub interval: Option<Duration>,
    /// Delay of this producer's first command at a fixed rate (evenly spaced producers).
    pub offset: Duration,
}

/// Publishes until the quota is met or the phase turns to stop; returns the ack-latency
/// histogram (µs, measuring phase only). At a fixed rate, a command that is already overdue
/// (the previous ack came late) is timed from when it was due, so a stalling broker is not
/// flattered (no coordinated omission); one sent on time is timed from its actual send.
pub async fn produce(
    mut conn: Conn,
    plan: ProducerPlan,
    ledger: Arc<Ledger>,
    phase: Arc<AtomicU8>,
) -> Result<Histogram<u64>, ClientError> {
    let mut hist = Histogram::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
    let mut bodies: Vec<Vec<u8>> = (0..plan.batch)
        .map(|_| ledger::blank_body(plan.message_bytes))
        .collect();
    let producer = plan.index as u32;
    let mut next_seq = 0u64;
    let start = Instant::now();
    let mut commands = 0u32;
    loop {
        let want = match plan.quota {
            Some(q) if next_seq >= q => break,
            Some(q) => (q - next_seq).min(plan.batch as u64) as usize,
            None => plan.batch,
        };
        if phase.load(Ordering::Acquire) == PHASE_STOP {
            break;
        }
        let scheduled = match plan.interval {
            Some(every) => {
                let at = start + plan.offset + every * commands;
                if Instant::now() >= at {
                    // Behind because the broker was slow: count from when it was due.
                    at
                } else {
                    // On time: count from the wake-up, not charging timer slack to the broker.
                    tokio::time::sleep_until(at).await;
                    Instant::now()
                }
            }
            None => Instant::now(),
        };
        commands = commands.wrapping_add(1);
        for (i, body) in bodies.iter_mut().take(want).enumerate() {
            ledger::encode_body(body, ledger.nonce(), producer, next_seq + i as u64);
        }
        if want == 1 {
            wire::publish(&mut conn.wbuf, &plan.topic, &bodies[0]);
        } else {
            let iter = bodies.iter().take(want).map(|b| &b[..]);
            wire::multi_publish(&mut conn.wbuf, &plan.topic, iter);
        }
        let measuring = phase.load(Ordering::Acquire) == PHASE_MEASURE;
        ledger.mark_sent(plan.index, next_seq + want as u64);
        conn.flush().await?;
        conn.expect_ok(if want == 1 { "PUB" } else { "MPUB" })
            .await?;
        next_seq += want as u64;
        ledger.mark_acked(plan.index, next_seq);
        if measuring {
            let micros = scheduled.elapsed().as_micros().max(1) as u64;
            hist.saturating_record(micros);
        }
    }
    Ok(hist)
}

/// Control of a consumer from the run: `go` releases RDY, `stop` asks for CLS.
#[derive(Debug, Clone)]
pub struct ConsumerControl {
    /// Becomes true when the consumer may ask for messages.
    pub go: watch::Receiver<bool>,
    /// Becomes true when the consumer should close (CLS) and finish.
    pub stop: watch::Receiver<bool>,
}

/// SUB and wait for its `OK` (RDY stays 0 until [`consume`] is released).
pub async fn subscribe(conn: &mut Conn, topic: &str, channel: &str) -> Result<(), ClientError> {
    wire::subscribe(&mut conn.wbuf, topic, channel);
    conn.flush().await?;
    conn.expect_ok("SUB").await
}

/// On a subscribed connection: waits for `go`, then receives and FINs until told to stop;
/// after CLS it keeps FINing until `CLOSE_WAIT` or EOF.
pub async fn consume(
    mut conn: Conn,
    ledger: Arc<Ledger>,
    mut control: ConsumerControl,
) -> Result<(), ClientError> {
    let mut since_rdy = 0u32;
    let mut released = false;
    let mut closing = false;
    let mut bodies = Vec::with_capacity(256);
    loop {
        if !released && *control.go.borrow() {
            released = true;
            wire::ready(&mut conn.wbuf, RDY);
            conn.flush().await?;
        }
        if !closing && *control.stop.borrow() {
            closing = true;
            wire::close(&mut conn.wbuf);
            conn.flush().await?;
        }
        tokio::select! {
            read = conn.fill() => match read {
                Ok(()) => {}
                Err(ClientError::Closed { .. }) if closing => return Ok(()),
                Err(e) => return Err(e),
            },
            _ = control.go.changed(), if !released => continue,
            _ = control.stop.changed(), if !closing => continue,
        }
        while let Some(frame) = conn.try_frame()? {
            match frame {
                Frame::Message(m) => {
                    wire::finish(&mut conn.wbuf, &m.id);
                    bodies.push(m.body);
                    since_rdy += 1;
                }
                Frame::Response(r) if &r[..] == b"_heartbeat_" => wire::nop(&mut conn.wbuf),
                Frame::Response(r) if closing && &r[..] == b"CLOSE_WAIT" => {
                    ledger.record_deliveries(bodies.iter().map(|b| &b[..]));
                    conn.flush().await?;
                    return Ok(());
                }
                Frame::Error(e) => {
                    return Err(ClientError::Broker {
                        addr: conn.addr().to_owned(),
                        what: "FIN/RDY",
                        message: String::from_utf8_lossy(&e).into_owned(),
                    });
                }
                Frame::Response(r) => {
                    return Err(ClientError::Unexpected {
                        addr: conn.addr().to_owned(),
                        what: format!("response {:?}", String::from_utf8_lossy(&r)),
                    });
                }
            }
        }
        if !bodies.is_empty() {
            ledger.record_deliveries(bodies.iter().map(|b| &b[..]));
            bodies.clear();
        }
        if since_rdy >= RDY / 4 && !closing {
            since_rdy = 0;
            wire::ready(&mut conn.wbuf, RDY);
        }
        conn.flush().await?;
    }
}
