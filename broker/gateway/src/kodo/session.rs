//! One Kodo producer connection: the NSQ V2 producer protocol terminated at the gateway
//! (docs/kodo.md, "The producer protocol").
//!
//! `  V2` within 5 s (anything else: `E_BAD_PROTOCOL`), then IDENTIFY (once), PUB, MPUB,
//! DPUB and NOP; AUTH is answered `E_AUTH_DISABLED`, every other command `E_INVALID`, and
//! both close the connection. Commands arrive from [`super::intake`] one at a time; while
//! none does, heartbeats are written at the negotiated interval. Shutdown lets the publish
//! in progress finish and does not run a queued command.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use rustqueue_protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse, negotiate};
use rustqueue_protocol::{Command, DecoderLimits, ErrorCode, ProtocolError, frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::backend::{BrokerConn, Wire};
use super::intake::{self, Intake};
use super::publish::{self, Outcome, PublishCtx};
use crate::budget::ByteBudget;

/// A producer has this long to send the magic.
pub const MAGIC_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed to write one answer to the producer.
pub const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(12);
/// The user agent sent to brokers when the producer gave none.
pub const DEFAULT_USER_AGENT: &str = "rustqueue-kodo-gateway";

/// What every session shares.
#[derive(Debug, Clone)]
pub struct SessionCtx {
    /// Brokers and counters for publishing.
    pub publish: PublishCtx,
    /// The node-wide in-flight byte budget.
    pub budget: ByteBudget,
    /// Codec limits (100 MiB message, 128 MiB body, 1 MiB IDENTIFY).
    pub limits: DecoderLimits,
    /// Cancelled at shutdown: no further command is started.
    pub stop: CancellationToken,
    /// Cancelled when the shutdown grace is over: every session closes.
    pub abort: CancellationToken,
}

/// The IDENTIFY ranges the gateway offers: heartbeats up to 300 s, no TLS or compression.
pub fn identify_limits() -> IdentifyLimits {
    IdentifyLimits {
        max_heartbeat_interval_ms: 300_000,
        tls_available: false,
        snappy_enabled: false,
        deflate_enabled: false,
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..IdentifyLimits::default()
    }
}

/// The IDENTIFY sent to brokers for this producer: its names, feature negotiation on,
/// heartbeats off, no TLS or compression.
pub fn broker_identify(req: Option<&IdentifyRequest>) -> Vec<u8> {
    let pick = |f: fn(&IdentifyRequest) -> Option<&String>| {
        req.and_then(f).filter(|s| !s.is_empty()).cloned()
    };
    let body = serde_json::json!({
        "client_id": pick(|r| r.client_id.as_ref()).unwrap_or_default(),
        "hostname": pick(|r| r.hostname.as_ref()).unwrap_or_default(),
        "user_agent": pick(|r| r.user_agent.as_ref()).unwrap_or_else(|| DEFAULT_USER_AGENT.to_string()),
        "feature_negotiation": true,
        "heartbeat_interval": -1,
        "tls_v1": false,
        "snappy": false,
        "deflate": false,
    });
    body.to_string().into_bytes()
}

/// Whether the producer must go on with the connection.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

struct Session {
    ctx: SessionCtx,
    out: OwnedWriteHalf,
    identified: bool,
    identify: Vec<u8>,
    heartbeat: Option<Duration>,
    broker: Option<BrokerConn>,
}

/// Serve one producer connection until it closes, shutdown, or the grace ends.
pub async fn run(stream: TcpStream, ctx: SessionCtx) {
    let abort = ctx.abort.clone();
    tokio::select! {
        _ = abort.cancelled() => {}
        _ = serve(stream, ctx) => {}
    }
}

async fn serve(mut stream: TcpStream, ctx: SessionCtx) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    while buf.len() < 4 {
        match tokio::time::timeout(MAGIC_TIMEOUT, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
    let magic = buf.split_to(4);
    let (rd, out) = stream.into_split();
    let mut session = Session {
        ctx: ctx.clone(),
        out,
        identified: false,
        identify: broker_identify(None),
        heartbeat: identify_limits_default_heartbeat(),
        broker: None,
    };
    if &magic[..] != rustqueue_protocol::MAGIC_V2 {
        let e = ProtocolError::new(ErrorCode::BadProtocol, "invalid protocol version");
        let _ = session.error(&e).await;
        return;
    }
    let (tx, rx) = mpsc::channel(1);
    let reader = tokio::spawn(intake::run(
        rd,
        buf,
        ctx.limits.clone(),
        ctx.budget.clone(),
        ctx.publish.metrics.clone(),
        tx,
    ));
    session.commands(rx).await;
    reader.abort();
    let _ = session.out.shutdown().await;
}

fn identify_limits_default_heartbeat() -> Option<Duration> {
    Some(Duration::from_millis(
        identify_limits().heartbeat_interval_ms,
    ))
}

/// Continue after an answer that was written, close after one that was not.
fn answer(written: std::io::Result<()>) -> Next {
    if written.is_ok() {
        Next::Continue
    } else {
        Next::Close
    }
}

impl Session {
    async fn commands(&mut self, mut rx: mpsc::Receiver<Intake>) {
        loop {
            let beat = self.heartbeat;
            let idle = async move {
                match beat {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                biased;
                _ = self.ctx.stop.cancelled() => return,
                m = rx.recv() => m,
                _ = idle => {
                    if self.respond(frame::HEARTBEAT).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let verdict = match next {
                None => return,
                Some(Intake::Fatal(e)) => {
                    let _ = self.error(&e).await;
                    return;
                }
                Some(Intake::Command(cmd, reservation)) => {
                    let v = self.execute(cmd).await;
                    drop(reservation);
                    v
                }
            };
            if verdict != Next::Continue {
                return;
            }
        }
    }

    async fn execute(&mut self, cmd: Command) -> Next {
        match cmd {
            Command::Nop => Next::Continue,
            Command::Identify(body) => self.identify(&body).await,
            Command::Pub { topic, body } => self.publish(Wire::publish(&topic, body)).await,
            Command::Dpub {
                topic,
                defer_ms,
                body,
            } => self.publish(Wire::deferred(&topic, defer_ms, body)).await,
            Command::Mpub { topic, bodies } => self.publish(Wire::multi(&topic, bodies)).await,
            Command::Auth(_) => {
                let e = ProtocolError::new(
                    ErrorCode::AuthDisabled,
                    "AUTH is not offered by the Kodo gateway",
                );
                self.fatal(&e).await
            }
            other => {
                let e = ProtocolError::invalid(format!(
                    "{} is not accepted by the Kodo gateway (IDENTIFY, PUB, MPUB, DPUB, NOP only)",
                    other.name()
                ));
                self.fatal(&e).await
            }
        }
    }

    async fn identify(&mut self, body: &[u8]) -> Next {
        if self.identified {
            return self
                .fatal(&ProtocolError::invalid("cannot IDENTIFY again"))
                .await;
        }
        let req = match IdentifyRequest::parse(body) {
            Ok(r) => r,
            Err(e) => return self.fatal(&e).await,
        };
        let upgrade = [req.tls_v1, req.snappy, req.deflate];
        if upgrade.contains(&Some(true)) {
            let e = ProtocolError::new(
                ErrorCode::IdentifyFailed,
                "TLS, Snappy and Deflate are not offered by the Kodo gateway",
            );
            return self.fatal(&e).await;
        }
        let limits = identify_limits();
        let negotiated = match negotiate(&req, &limits) {
            Ok(n) => n,
            Err(e) => return self.fatal(&e).await,
        };
        self.identified = true;
        self.heartbeat = negotiated.heartbeat_interval_ms.map(Duration::from_millis);
        self.identify = broker_identify(Some(&req));
        let reply = if negotiated.feature_negotiation {
            IdentifyResponse::new(&negotiated, &limits).to_json()
        } else {
            frame::OK.to_vec()
        };
        {
            let written = self.respond(&reply).await;
            answer(written)
        }
    }

    async fn publish(&mut self, wire: Wire) -> Next {
        let outcome =
            publish::publish(&mut self.broker, &self.ctx.publish, &self.identify, &wire).await;
        match outcome {
            Outcome::Ok => {
                let written = self.respond(frame::OK).await;
                answer(written)
            }
            Outcome::Refused(text) => {
                let written = self.error_text(&text).await;
                answer(written)
            }
            Outcome::Ambiguous(why) => {
                let text = format!(
                    "E_AMBIGUOUS {} outcome unknown ({why}); automatic retry is unsafe",
                    wire.name
                );
                let _ = self.error_text(text.as_bytes()).await;
                Next::Close
            }
            Outcome::Exhausted(why) => {
                tracing::info!(command = wire.name, %why, "no broker took the publish: closing the producer connection");
                Next::Close
            }
        }
    }

    async fn fatal(&mut self, e: &ProtocolError) -> Next {
        let _ = self.error(e).await;
        Next::Close
    }

    async fn error(&mut self, e: &ProtocolError) -> std::io::Result<()> {
        self.error_text(e.frame_text().as_bytes()).await
    }

    async fn respond(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.write_frame(frame::FRAME_RESPONSE, data).await
    }

    async fn error_text(&mut self, text: &[u8]) -> std::io::Result<()> {
        self.write_frame(frame::FRAME_ERROR, text).await
    }

    async fn write_frame(&mut self, kind: i32, data: &[u8]) -> std::io::Result<()> {
        let mut out = BytesMut::with_capacity(8 + data.len());
        out.put_u32(4 + data.len() as u32);
        out.put_i32(kind);
        out.put_slice(data);
        let bytes: Bytes = out.freeze();
        match tokio::time::timeout(CLIENT_WRITE_TIMEOUT, self.out.write_all(&bytes)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_get_the_producers_names_with_heartbeats_and_upgrades_off() {
        let req = IdentifyRequest::parse(
            br#"{"client_id":"kodo-1","hostname":"h","user_agent":"go-nsq/1.1.0","tls_v1":false,"heartbeat_interval":30000}"#,
        )
        .unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&broker_identify(Some(&req))).unwrap();
        assert_eq!(sent["client_id"], "kodo-1");
        assert_eq!(sent["user_agent"], "go-nsq/1.1.0");
        assert_eq!(sent["heartbeat_interval"], -1);
        assert_eq!(sent["feature_negotiation"], true);
        assert_eq!(
            (
                sent["tls_v1"].clone(),
                sent["snappy"].clone(),
                sent["deflate"].clone()
            ),
            (false.into(), false.into(), false.into())
        );
        let anonymous: serde_json::Value = serde_json::from_slice(&broker_identify(None)).unwrap();
        assert_eq!(anonymous["user_agent"], DEFAULT_USER_AGENT);
    }

    #[test]
    fn the_identify_reply_has_the_documented_values() {
        let limits = identify_limits();
        let req = IdentifyRequest::parse(br#"{"feature_negotiation":true}"#).unwrap();
        let n = negotiate(&req, &limits).unwrap();
        let r = IdentifyResponse::new(&n, &limits);
        assert_eq!(
            (r.max_rdy_count, r.max_msg_timeout, r.msg_timeout),
            (2500, 900_000, 60_000)
        );
        assert_eq!(
            (r.output_buffer_size, r.output_buffer_timeout),
            (16_384, 250)
        );
        assert!(!r.tls_v1 && !r.snappy && !r.deflate && !r.auth_required);
        let hb = |v: i64| {
            let body = format!(r#"{{"heartbeat_interval":{v}}}"#);
            negotiate(&IdentifyRequest::parse(body.as_bytes()).unwrap(), &limits)
                .map(|n| n.heartbeat_interval_ms)
        };
        assert_eq!(hb(-1), Ok(None));
        assert_eq!(hb(0), Ok(Some(30_000)));
        assert_eq!(hb(1000), Ok(Some(1000)));
        assert_eq!(hb(300_000), Ok(Some(300_000)));
        for bad in [999, 300_001, -2] {
            assert_eq!(hb(bad).unwrap_err().code, ErrorCode::BadBody, "{bad}");
        }
        let msg = |v: i64| {
            let body = format!(r#"{{"msg_timeout":{v}}}"#);
            negotiate(&IdentifyRequest::parse(body.as_bytes()).unwrap(), &limits)
                .map(|n| n.msg_timeout_ms)
        };
        assert_eq!(msg(1000), Ok(1000));
        assert!(msg(999).is_err());
    }
}
