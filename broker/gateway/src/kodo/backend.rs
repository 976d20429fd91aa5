//! One gateway-to-broker NSQ session, used by the publish algorithm (`publish.rs`).
//!
//! Opening it: connect within 2 s, then magic and the producer's IDENTIFY (feature
//! negotiation on, heartbeats off, no TLS or compression) answered within 5 s. One publish
//! attempt: the command line and body are written within 12 s (a failure here leaves the
//! broker with an incomplete command: provably not applied), then flushed (a failure here
//! may have delivered the last bytes: unknown), then one frame is read within 15 s.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rustqueue_protocol::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;

use super::verdict::{Verdict, classify};
use crate::pool::Backend;

/// Time allowed to connect to a broker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time allowed for magic + IDENTIFY and its answer.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed to write a command line and its body.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(12);
/// Time allowed for the broker's answer after the flush.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest frame read from a broker (answers to IDENTIFY and publishes are small).
pub const MAX_FRAME_BYTES: u32 = 1024 * 1024;
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// A publish command as it goes to a broker: the head (line, size, MPUB count) then the
/// messages, each preceded by its length when `length_prefixed` (MPUB).
#[derive(Debug, Clone)]
pub struct Wire {
    /// The command name, for logs.
    pub name: &'static str,
    head: Vec<u8>,
    messages: Vec<Bytes>,
    length_prefixed: bool,
}

impl Wire {
    /// `PUB <topic>` + one message.
    pub fn publish(topic: &str, body: Bytes) -> Wire {
        Self::single("PUB", format!("PUB {topic}\n"), body)
    }

    /// `DPUB <topic> <defer_ms>` + one message.
    pub fn deferred(topic: &str, defer_ms: u64, body: Bytes) -> Wire {
        Self::single("DPUB", format!("DPUB {topic} {defer_ms}\n"), body)
    }

    fn single(name: &'static str, line: String, body: Bytes) -> Wire {
        let mut head = line.into_bytes();
        head.extend_from_slice(&(body.len() as u32).to_be_bytes());
        Wire {
            name,
            head,
            messages: vec![body],
            length_prefixed: false,
        }
    }

    /// `MPUB <topic>` + `[u32 n]([u32 len][bytes])*`.
    pub fn multi(topic: &str, messages: Vec<Bytes>) -> Wire {
        let body_len: usize = 4 + messages.iter().map(|m| 4 + m.len()).sum::<usize>();
        let mut head = format!("MPUB {topic}\n").into_bytes();
        head.extend_from_slice(&(body_len as u32).to_be_bytes());
        head.extend_from_slice(&(messages.len() as u32).to_be_bytes());
        Wire {
            name: "MPUB",
            head,
            messages,
            length_prefixed: true,
        }
    }

    /// Every byte, in order (for tests).
    #[cfg(test)]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        for m in &self.messages {
            if self.length_prefixed {
                out.extend_from_slice(&(m.len() as u32).to_be_bytes());
            }
            out.extend_from_slice(m);
        }
        out
    }

    async fn write_to(&self, w: &mut BufWriter<TcpStream>) -> std::io::Result<()> {
        w.write_all(&self.head).await?;
        for m in &self.messages {
            if self.length_prefixed {
                w.write_all(&(m.len() as u32).to_be_bytes()).await?;
            }
            w.write_all(m).await?;
        }
        Ok(())
    }
}

/// Why a broker session could not be opened (nothing was sent: the next broker may be tried).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The broker refused the connection.
    #[error("connect to {target}: {source}")]
    Connect {
        /// `host:port`.
        target: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The broker did not accept within [`CONNECT_TIMEOUT`].
    #[error("connect to {target}: no answer within 2 s")]
    ConnectTimeout {
        /// `host:port`.
        target: String,
    },
    /// The broker answered the IDENTIFY with something other than a response.
    #[error("IDENTIFY refused by {target}: {answer}")]
    Refused {
        /// `host:port`.
        target: String,
        /// The frame it sent.
        answer: String,
    },
    /// The handshake failed on the socket.
    #[error("IDENTIFY with {target}: {source}")]
    Handshake {
        /// `host:port`.
        target: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No answer to the IDENTIFY within [`HANDSHAKE_TIMEOUT`].
    #[error("IDENTIFY with {target}: no answer within 5 s")]
    HandshakeTimeout {
        /// `host:port`.
        target: String,
    },
}

/// An open, identified session to one broker.
#[derive(Debug)]
pub struct BrokerConn {
    /// The broker.
    pub backend: Backend,
    io: BufWriter<TcpStream>,
    buf: BytesMut,
}

impl BrokerConn {
    /// Connect, send the magic and `identify` (a JSON body) and read the answer.
    pub async fn open(backend: &Backend, identify: &[u8]) -> Result<BrokerConn, OpenError> {
        let addr = backend.tcp_target();
        let target = format!("{}:{}", addr.0, addr.1);
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(OpenError::Connect { target, source }),
            Err(_) => return Err(OpenError::ConnectTimeout { target }),
        };
        let _ = stream.set_nodelay(true);
        let mut conn = BrokerConn {
            backend: backend.clone(),
            io: BufWriter::with_capacity(WRITE_BUFFER_BYTES, stream),
            buf: BytesMut::with_capacity(4096),
        };
        let handshake = async {
            let mut hello = rustqueue_protocol::MAGIC_V2.to_vec();
            hello.extend_from_slice(b"IDENTIFY\n");
            hello.extend_from_slice(&(identify.len() as u32).to_be_bytes());
            hello.extend_from_slice(identify);
            conn.io.write_all(&hello).await?;
            conn.io.flush().await?;
            conn.read_frame().await
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(Frame::Response(_))) => Ok(conn),
            Ok(Ok(other)) => Err(OpenError::Refused {
                target,
                answer: format!("{other:?}"),
            }),
            Ok(Err(source)) => Err(OpenError::Handshake { target, source }),
            Err(_) => Err(OpenError::HandshakeTimeout { target }),
        }
    }

    /// False when the broker has closed the session (or sent something unasked), so a
    /// publish is not written into a dead socket.
    pub fn looks_alive(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(
            self.io.get_ref().try_read(&mut probe),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        )
    }

    /// One attempt: write, flush, read the answer.
    pub async fn send(&mut self, wire: &Wire) -> Verdict {
        match tokio::time::timeout(WRITE_TIMEOUT, wire.write_to(&mut self.io)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Verdict::PreCommit(format!("{} write failed: {e}", wire.name)),
            Err(_) => return Verdict::PreCommit(format!("{} not written within 12 s", wire.name)),
        }
        match tokio::time::timeout(WRITE_TIMEOUT, self.io.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Verdict::Ambiguous(format!("{} flush failed: {e}", wire.name)),
            Err(_) => return Verdict::Ambiguous(format!("{} not flushed within 12 s", wire.name)),
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, self.read_frame()).await {
            Ok(Ok(frame)) => classify(&frame),
            Ok(Err(e)) => Verdict::Ambiguous(format!("{} answer unreadable: {e}", wire.name)),
            Err(_) => Verdict::Ambiguous(format!("{} not answered within 15 s", wire.name)),
        }
    }

    async fn read_frame(&mut self) -> std::io::Result<Frame> {
        loop {
            match Frame::decode(&mut self.buf, MAX_FRAME_BYTES) {
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustqueue_protocol::command::encode_mpub_body;
    use rustqueue_protocol::{Command, Decoder, DecoderLimits};

    fn decode(bytes: &[u8]) -> Command {
        let mut buf = BytesMut::from(bytes);
        let cmd = Decoder::new(DecoderLimits::default())
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert!(buf.is_empty());
        cmd
    }

    #[test]
    fn wires_decode_back_to_the_producers_commands() {
        let body = Bytes::from_static(b"hello");
        assert_eq!(
            decode(&Wire::publish("t", body.clone()).to_bytes()),
            Command::Pub {
                topic: "t".into(),
                body: body.clone()
            }
        );
        assert_eq!(
            decode(&Wire::deferred("t", 1500, body.clone()).to_bytes()),
            Command::Dpub {
                topic: "t".into(),
                defer_ms: 1500,
                body: body.clone()
            }
        );
        let msgs = vec![Bytes::from_static(b"a"), Bytes::from_static(b"bcd")];
        let wire = Wire::multi("t", msgs.clone()).to_bytes();
        assert!(wire.ends_with(&encode_mpub_body(&[b"a", b"bcd"])));
        assert_eq!(
            decode(&wire),
            Command::Mpub {
                topic: "t".into(),
                bodies: msgs
            }
        );
    }
}
