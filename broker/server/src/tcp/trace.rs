//! The spans of an NSQ session (docs/observability.md): one `publish` per sampled PUB, MPUB or
//! DPUB with its `read`, `append`, `fsync` and `ack` steps, and one `deliver` per sampled
//! message from its dispatch to its FIN, REQ or timeout.
//!
//! Everything starts with [`otel::tracer`]: without an OTLP endpoint it is `None` and nothing
//! here runs. With one, the sampler decides first (the SDK's `start`), and a span that is not
//! sampled is dropped at once, before any attribute or record exists. No span carries a message
//! body; a delivery carries its message id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustqueue_api::otel::{
    self, Context, KeyValue, SdkSpan, Span as _, SpanKind, Status, TraceContextExt as _,
    Tracer as _, WallClock,
};
use rustqueue_engine::{Bytes, CommitTrace, PublishError};

/// `messaging.system`: the protocol clients speak.
fn system() -> KeyValue {
    KeyValue::new("messaging.system", "nsq")
}

/// A sampled publish: its span, open since the command's first bytes were read, and the
/// record the engine fills with its commit steps.
pub(crate) struct PublishSpan {
    span: SdkSpan,
    clock: WallClock,
    read: (Instant, Instant),
    commit: Arc<CommitTrace>,
}

impl PublishSpan {
    /// Starts the span of a publish whose bytes began arriving at `read_from` and were decoded
    /// at `decoded`; `None` when tracing is off or the sampler drops it.
    pub(crate) fn start(
        cmd: &'static str,
        topic: &str,
        bodies: &[Bytes],
        read: (Instant, Instant),
        ack_mode: &str,
    ) -> Option<Self> {
        let tracer = otel::tracer()?;
        let clock = WallClock::now();
        let mut span = tracer
            .span_builder("publish")
            .with_kind(SpanKind::Server)
            .with_start_time(clock.at(read.0))
            .start(tracer);
        if !span.is_recording() {
            return None;
        }
        let bytes: usize = bodies.iter().map(Bytes::len).sum();
        span.set_attributes([
            system(),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.operation.name", cmd),
            KeyValue::new("messaging.destination.name", topic.to_string()),
            KeyValue::new("messaging.batch.message_count", bodies.len() as i64),
            KeyValue::new("messaging.message.body.size", bytes as i64),
            KeyValue::new("rustqueue.ack_mode", ack_mode.to_string()),
        ]);
        Some(PublishSpan {
            span,
            clock,
            read,
            commit: CommitTrace::new(),
        })
    }

    /// The record to hand the engine.
    pub(crate) fn commit(&self) -> Arc<CommitTrace> {
        self.commit.clone()
    }

    /// Ends the span once the answer was written: a child span per step, with the times the
    /// engine recorded, and the group commit's size.
    pub(crate) fn end(mut self, result: Result<(), &PublishError>) {
        let Some(tracer) = otel::tracer() else { return };
        let answered = Instant::now();
        let times = self.commit.times();
        let parent = Context::new().with_remote_span_context(self.span.span_context().clone());
        let clock = self.clock;
        let step = |name: &'static str, (from, to): (Instant, Instant), attrs: Vec<KeyValue>| {
            let mut s = tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(clock.at(from))
                .with_attributes(attrs)
                .start_with_context(tracer, &parent);
            s.end_with_timestamp(clock.at(to));
        };
        step("read", self.read, Vec::new());
        if let Some(append) = times.append {
            let size = KeyValue::new("rustqueue.append.group.size", times.append_group as i64);
            step("append", append, vec![size]);
        }
        if let Some(fsync) = times.fsync {
            let size = KeyValue::new("rustqueue.group.size", times.fsync_group as i64);
            step("fsync", fsync, vec![size]);
        }
        let acked_from = times
            .fsync
            .or(times.append)
            .map_or(self.read.1, |(_, to)| to);
        step("ack", (acked_from, answered), Vec::new());
        let group = if times.fsync.is_some() {
            times.fsync_group
        } else {
            times.append_group
        };
        self.span
            .set_attribute(KeyValue::new("rustqueue.group.size", group as i64));
        if let Err(e) = result {
            self.span.set_status(Status::error(e.to_string()));
        }
        self.span.end_with_timestamp(clock.at(answered));
    }
}

/// How a delivery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Fin,
    Req,
    /// Not finished within its timeout: the channel delivers it again.
    Timeout,
    /// The connection closed with it in flight: the channel delivers it again.
    Closed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Fin => "FIN",
            Outcome::Req => "REQ",
            Outcome::Timeout => "timeout",
            Outcome::Closed => "closed",
        }
    }
}

/// A sampled delivery in flight and when it times out.
struct InFlight {
    span: SdkSpan,
    deadline: Instant,
}

/// The sampled deliveries of a subscribed session, by message id. Exists only while tracing
/// is on.
pub(crate) struct Deliveries {
    topic: String,
    channel: String,
    msg_timeout: Duration,
    live: HashMap<[u8; 16], InFlight>,
    /// No deadline of `live` is earlier (it may be later: TOUCH moves deadlines).
    earliest: Option<Instant>,
}

impl Deliveries {
    /// For a session subscribed to `topic`/`channel`; `None` when tracing is off.
    pub(crate) fn new(topic: &str, channel: &str, msg_timeout: Duration) -> Option<Self> {
        otel::tracer()?;
        Some(Deliveries {
            topic: topic.to_string(),
            channel: channel.to_string(),
            msg_timeout,
            live: HashMap::new(),
            earliest: None,
        })
    }

    /// A message was dispatched (framed for the client): starts its span when sampled.
    pub(crate) fn dispatched(&mut self, id: &[u8; 16], attempts: u16, at: Instant) {
        let Some(tracer) = otel::tracer() else { return };
        let mut span = tracer
            .span_builder("deliver")
            .with_kind(SpanKind::Server)
            .with_start_time(otel::wall_time(at))
            .start(tracer);
        if !span.is_recording() {
            return;
        }
        span.set_attributes([
            system(),
            KeyValue::new("messaging.operation.type", "receive"),
            KeyValue::new("messaging.destination.name", self.topic.clone()),
            KeyValue::new("messaging.consumer.group.name", self.channel.clone()),
            KeyValue::new(
                "messaging.message.id",
                String::from_utf8_lossy(id).into_owned(),
            ),
            KeyValue::new("messaging.message.delivery_attempts", i64::from(attempts)),
        ]);
        let deadline = at + self.msg_timeout;
        self.earliest = Some(self.earliest.map_or(deadline, |e| e.min(deadline)));
        // A message redelivered to this session replaces its earlier span, which timed out.
        if let Some(old) = self.live.insert(*id, InFlight { span, deadline }) {
            end(old.span, Outcome::Timeout, old.deadline);
        }
    }

    /// The client sent FIN, REQ or TOUCH for `id` and the channel took it.
    pub(crate) fn acked(&mut self, id: &[u8; 16], cmd: &str) {
        let outcome = match cmd {
            "FIN" => Outcome::Fin,
            "REQ" => Outcome::Req,
            _ => {
                if let Some(f) = self.live.get_mut(id) {
                    f.deadline = Instant::now() + self.msg_timeout;
                }
                return;
            }
        };
        if let Some(f) = self.live.remove(id) {
            end(f.span, outcome, Instant::now());
        }
    }

    /// When the next sampled delivery may time out.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.earliest
    }

    /// Ends, as timed out at their deadline, the deliveries whose deadline passed.
    pub(crate) fn expire(&mut self, now: Instant) {
        if self.earliest.is_none_or(|e| e > now) {
            return;
        }
        let due: Vec<[u8; 16]> = self
            .live
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(f) = self.live.remove(&id) {
                end(f.span, Outcome::Timeout, f.deadline);
            }
        }
        self.earliest = self.live.values().map(|f| f.deadline).min();
    }

    /// The session ends: what is still in flight goes back to the channel.
    pub(crate) fn close(&mut self) {
        let now = Instant::now();
        self.expire(now);
        for (_, f) in self.live.drain() {
            end(f.span, Outcome::Closed, now);
        }
    }
}

fn end(mut span: SdkSpan, outcome: Outcome, at: Instant) {
    span.set_attribute(KeyValue::new(
        "rustqueue.delivery.outcome",
        outcome.as_str(),
    ));
    span.end_with_timestamp(otel::wall_time(at));
}
