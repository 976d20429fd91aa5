//! One NSQ V2 TCP connection: magic, optional IDENTIFY, batched writes, frame reads, and the
//! "wait for OK, answering heartbeats" step every PUB/MPUB/SUB needs.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{self, Frame, FrameError};

/// What went wrong on a connection.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connect, read or write failed.
    #[error("{op} {addr}: {source}")]
    Io {
        /// The step that failed.
        op: &'static str,
        /// The broker address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The broker closed the connection.
    #[error("{addr} closed the connection")]
    Closed {
        /// The broker address.
        addr: String,
    },
    /// The broker sent an error frame.
    #[error("{addr} answered {what} with {message}")]
    Broker {
        /// The broker address.
        addr: String,
        /// The command it rejected.
        what: &'static str,
        /// The error frame's text.
        message: String,
    },
    /// The stream is not NSQ V2.
    #[error("{addr}: {source}")]
    Frame {
        /// The broker address.
        addr: String,
        /// What was wrong with the stream.
        source: FrameError,
    },
    /// A frame that makes no sense here (a message on a producer connection, say).
    #[error("{addr}: unexpected {what}")]
    Unexpected {
        /// The broker address.
        addr: String,
        /// What arrived.
        what: String,
    },
}

/// An open connection with its read buffer and pending writes.
pub struct Conn {
    addr: String,
    stream: TcpStream,
    rbuf: BytesMut,
    /// Commands queued by the caller; sent by [`Conn::flush`].
    pub wbuf: Vec<u8>,
}

impl Conn {
    /// Connects, writes the magic, and (if `identify`) IDENTIFYs and waits for `OK`.
    pub async fn connect(addr: &str, identify: bool, client_id: &str) -> Result<Conn, ClientError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Io {
                op: "connect to",
                addr: addr.to_owned(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn {
            addr: addr.to_owned(),
            stream,
            rbuf: BytesMut::with_capacity(64 * 1024),
            wbuf: Vec::with_capacity(64 * 1024),
        };
        conn.wbuf.extend_from_slice(wire::MAGIC);
        if identify {
            wire::identify(&mut conn.wbuf, client_id);
            conn.flush().await?;
            conn.expect_ok("IDENTIFY").await?;
        }
        Ok(conn)
    }

    /// The broker address, for messages.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Writes every queued command.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.wbuf).await;
        self.wbuf.clear();
        result.map_err(|source| self.io("write to", source))
    }

    /// A frame already in the read buffer, without waiting.
    pub fn try_frame(&mut self) -> Result<Option<Frame>, ClientError> {
        wire::parse_frame(&mut self.rbuf).map_err(|source| ClientError::Frame {
            addr: self.addr.clone(),
            source,
        })
    }

    /// Reads more bytes into the buffer (cancel-safe); errors on EOF.
    pub async fn fill(&mut self) -> Result<(), ClientError> {
        if self.rbuf.capacity() - self.rbuf.len() < 16 * 1024 {
            self.rbuf.reserve(64 * 1024);
        }
        match self.stream.read_buf(&mut self.rbuf).await {
            Ok(0) => Err(ClientError::Closed {
                addr: self.addr.clone(),
            }),
            Ok(_) => Ok(()),
            Err(source) => Err(self.io("read from", source)),
        }
    }

    /// The next frame, reading as needed.
    pub async fn next_frame(&mut self) -> Result<Frame, ClientError> {
        loop {
            if let Some(frame) = self.try_frame()? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }

    /// Waits for the `OK` answering `what`, replying NOP to heartbeats on the way.
    pub async fn expect_ok(&mut self, what: &'static str) -> Result<(), ClientError> {
        loop {
            match self.next_frame().await? {
                Frame::Response(r) if &r[..] == b"OK" => return Ok(()),
                Frame::Response(r) if &r[..] == b"_heartbeat_" => {
                    wire::nop(&mut self.wbuf);
                    self.flush().await?;
                }
                Frame::Error(e) => {
                    return Err(ClientError::Broker {
                        addr: self.addr.clone(),
                        what,
                        message: String::from_utf8_lossy(&e).into_owned(),
                    });
                }
                other => {
                    return Err(ClientError::Unexpected {
                        addr: self.addr.clone(),
                        what: format!("{other:?} while waiting for OK to {what}"),
                    });
                }
            }
        }
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> ClientError {
        ClientError::Io {
            op,
            addr: self.addr.clone(),
            source,
        }
    }
}
