//! One client connection's byte plumbing: plain or TLS transport, optional compression,
//! the inbound command buffer and the outbound (buffered) frame buffer.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use rustqueue_protocol::ProtocolError;
use rustqueue_protocol::frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::compress::Compression;

/// The socket, before or after the TLS upgrade.
pub enum Transport {
    /// Plain TCP.
    Plain(TcpStream),
    /// After `tls_v1`.
    Tls(Box<TlsStream<TcpStream>>),
    /// Transient state during the upgrade.
    Upgrading,
}

/// Buffers and transforms of one connection.
pub struct Conn {
    io: Transport,
    raw_in: BytesMut,
    /// Plaintext received and not yet decoded into commands.
    pub cmd_in: BytesMut,
    rx: Compression,
    tx: Compression,
    /// Plaintext frames waiting to be written.
    pub out: BytesMut,
    wire: Vec<u8>,
    /// Message frames buffered since the last flush.
    pub buffered_messages: usize,
}

impl Conn {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream) -> Self {
        Self {
            io: Transport::Plain(stream),
            raw_in: BytesMut::new(),
            cmd_in: BytesMut::with_capacity(8 * 1024),
            rx: Compression::None,
            tx: Compression::None,
            out: BytesMut::with_capacity(16 * 1024),
            wire: Vec::new(),
            buffered_messages: 0,
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.io, Transport::Tls(_))
    }

    /// The client certificate's subject CN, if any.
    pub fn peer_common_name(&self) -> Option<String> {
        match &self.io {
            Transport::Tls(s) => s
                .get_ref()
                .1
                .peer_certificates()?
                .first()
                .and_then(|c| crate::tls::common_name(c)),
            _ => None,
        }
    }

    /// Reads more bytes into `cmd_in` (decompressing). `Ok(0)` = peer closed.
    /// Cancel-safe: no received byte is lost if the future is dropped.
    pub async fn read_more(&mut self, reserve: usize) -> io::Result<usize> {
        let direct = matches!(self.rx, Compression::None);
        let buf = if direct {
            &mut self.cmd_in
        } else {
            &mut self.raw_in
        };
        buf.reserve(reserve.max(4096));
        let n = match &mut self.io {
            Transport::Plain(s) => s.read_buf(buf).await?,
            Transport::Tls(s) => s.read_buf(buf).await?,
            Transport::Upgrading => return Err(io::Error::other("transport unavailable")),
        };
        if !direct && n > 0 {
            self.rx
                .decode(&mut self.raw_in, &mut self.cmd_in)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        Ok(n)
    }

    /// Reads exactly `n` raw bytes (the magic) without decompression.
    pub async fn read_exact_raw(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        match &mut self.io {
            Transport::Plain(s) => s.read_exact(&mut v).await?,
            Transport::Tls(s) => s.read_exact(&mut v).await?,
            Transport::Upgrading => return Err(io::Error::other("transport unavailable")),
        };
        Ok(v)
    }

    /// Queues a response frame.
    pub fn response(&mut self, data: &[u8]) {
        frame::put_response(&mut self.out, data);
    }

    /// Queues an error frame.
    pub fn error(&mut self, err: &ProtocolError) {
        frame::put_error(&mut self.out, err);
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.buffered_messages = 0;
        if self.out.is_empty() {
            return Ok(());
        }
        // Uncompressed, the frames are the wire bytes and go out as they are: copying them
        // into `wire` first cost a pass over every delivered body (2 % of the broker's CPU
        // with 256 KiB messages).
        let wire: &[u8] = if matches!(self.tx, Compression::None) {
            &self.out
        } else {
            self.wire.clear();
            self.tx.encode(&self.out, &mut self.wire);
            &self.wire
        };
        let written = match &mut self.io {
            Transport::Plain(s) => s.write_all(wire).await,
            Transport::Tls(s) => match s.write_all(wire).await {
                Ok(()) => s.flush().await,
                Err(e) => Err(e),
            },
            Transport::Upgrading => Err(io::Error::other("transport unavailable")),
        };
        // Written or not, these frames are done with: a failed write ends the session.
        self.out.clear();
        if self.wire.capacity() > 1 << 20 {
            self.wire = Vec::new();
        }
        written
    }

    /// Upgrades to TLS (after the IDENTIFY reply was flushed). Bytes already buffered from
    /// the client would be lost, so they make the upgrade fail.
    pub async fn upgrade_tls(&mut self, cfg: Arc<rustls::ServerConfig>) -> io::Result<()> {
        if !self.cmd_in.is_empty() || !self.raw_in.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "data sent before the TLS handshake",
            ));
        }
        let Transport::Plain(tcp) = std::mem::replace(&mut self.io, Transport::Upgrading) else {
            return Err(io::Error::other("already upgraded"));
        };
        let tls = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await?;
        self.io = Transport::Tls(Box::new(tls));
        Ok(())
    }

    /// Switches both directions to `make()` (after the IDENTIFY/TLS `OK` was flushed).
    pub fn upgrade_compression(&mut self, make: impl Fn() -> Compression) -> io::Result<()> {
        if !self.cmd_in.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "data sent before the compression upgrade",
            ));
        }
        self.rx = make();
        self.tx = make();
        Ok(())
    }

    /// After a fatal error: reads and discards what the client is still sending (at most
    /// `budget` bytes, for at most `within`) so that closing does not reset the connection
    /// while the client is mid-write. Without this, a client still writing an oversized body
    /// gets `ECONNRESET` and never reads the error frame that says what was wrong.
    pub async fn linger(&mut self, budget: usize, within: std::time::Duration) {
        let drain = async {
            let mut scratch = vec![0u8; 64 * 1024];
            let mut left = budget;
            while left > 0 {
                let n = match &mut self.io {
                    Transport::Plain(s) => s.read(&mut scratch).await,
                    Transport::Tls(s) => s.read(&mut scratch).await,
                    Transport::Upgrading => return,
                };
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(within, drain).await;
    }

    /// Shuts the write side down (best effort).
    pub async fn shutdown(&mut self) {
        let _ = self.flush().await;
        match &mut self.io {
            Transport::Plain(s) => {
                let _ = s.shutdown().await;
            }
            Transport::Tls(s) => {
                let _ = s.shutdown().await;
            }
            Transport::Upgrading => {}
        }
    }
}
