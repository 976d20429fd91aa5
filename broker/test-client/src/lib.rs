//! One raw NSQ V2 test client for the workspace's integration tests: it speaks the wire
//! protocol with `rustqueue-protocol`'s frame decoder and nothing else, so a test sees exactly
//! what a broker or a gateway sent. The broker's tests and the gateway's use it alike.
//!
//! [`Client`] runs over a plain TCP connection by default and over any other stream a test
//! builds from one (a TLS session after `tls_v1`, say) with [`Client::over`]. Every failure
//! is a panic, and every wait for a frame is bounded by the client's patience (60 s unless
//! [`Client::with_patience`] says otherwise), so a hung peer fails the test instead of
//! hanging it.
//!
//! [`spawn`] starts a real `rustqueued` and waits until it is up (the tests of the broker,
//! the gateway and the console start brokers that way).

pub mod spawn;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use rustqueue_protocol::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame the client decodes (a 100 MiB message and its header fit).
const MAX_FRAME_BYTES: u32 = 200 * 1024 * 1024;

/// How long a client waits for a frame unless told otherwise.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(60);

/// How long [`Client::expect_closed`] waits for the peer to close.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// A raw NSQ V2 client over the stream `S`: bytes in, decoded frames out.
#[derive(Debug)]
pub struct Client<S = TcpStream> {
    /// The connection, for tests that write or shut down by hand.
    pub io: S,
    /// Bytes read and not decoded yet, for tests that decode by hand.
    pub buf: BytesMut,
    patience: Duration,
}

impl Client<TcpStream> {
    /// Connect and send the magic.
    pub async fn connect(addr: SocketAddr) -> Client {
        let mut c = Client::raw(addr).await;
        c.send(b"  V2").await;
        c
    }

    /// Connect without sending anything. Nagle's algorithm is off, as in the official
    /// clients: a small command it holds back is lost with the send queue if the test then
    /// drops the connection while the broker's frames are still unread.
    pub async fn raw(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Client::over(stream)
    }
}

impl<S> Client<S> {
    /// A client over a connection the test set up itself; sends nothing.
    pub fn over(io: S) -> Client<S> {
        Client {
            io,
            buf: BytesMut::new(),
            patience: DEFAULT_PATIENCE,
        }
    }

    /// Waits at most `patience` for each frame from now on.
    pub fn with_patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Write `bytes` as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
    }

    /// A command line without a body (the newline is added).
    pub async fn cmd(&mut self, line: &str) {
        self.send(format!("{line}\n").as_bytes()).await;
    }

    /// A command line and its `[u32 size][body]`.
    pub async fn cmd_body(&mut self, line: &str, body: &[u8]) {
        let mut out = format!("{line}\n").into_bytes();
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
        self.send(&out).await;
    }

    /// The next frame within `within`; `None` when the connection closed first.
    pub async fn frame_within(&mut self, within: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(f) = Frame::decode(&mut self.buf, MAX_FRAME_BYTES).unwrap() {
                return Some(f);
            }
            match tokio::time::timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(_)) => {}
                Err(_) => panic!("no frame within {within:?}"),
            }
        }
    }

    /// The next frame within the client's patience; `None` when the connection closed first.
    pub async fn frame(&mut self) -> Option<Frame> {
        self.frame_within(self.patience).await
    }

    /// The next frame that is not a heartbeat (answered with NOP).
    pub async fn answer(&mut self) -> Option<Frame> {
        loop {
            match self.frame().await {
                Some(Frame::Response(r)) if &r[..] == b"_heartbeat_" => self.send(b"NOP\n").await,
                other => return other,
            }
        }
    }

    /// Expect `OK` (heartbeats answered on the way).
    pub async fn expect_ok(&mut self) {
        match self.answer().await {
            Some(Frame::Response(r)) if &r[..] == b"OK" => {}
            other => panic!("expected OK, got {other:?}"),
        }
    }

    /// Expect a response frame; returns its body.
    pub async fn expect_response(&mut self) -> Vec<u8> {
        match self.answer().await {
            Some(Frame::Response(r)) => r.to_vec(),
            other => panic!("expected a response, got {other:?}"),
        }
    }

    /// Expect an error frame starting with `code`; returns its text.
    pub async fn expect_error(&mut self, code: &str) -> String {
        match self.answer().await {
            Some(Frame::Error(e)) if e.starts_with(code.as_bytes()) => {
                String::from_utf8_lossy(&e).into_owned()
            }
            other => panic!("expected {code}, got {other:?}"),
        }
    }

    /// Expect a message; returns its id, attempts and body.
    pub async fn expect_message(&mut self) -> ([u8; 16], u16, Vec<u8>) {
        match self.answer().await {
            Some(Frame::Message {
                id, attempts, body, ..
            }) => (id, attempts, body.to_vec()),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Expect the connection to close with no frame.
    pub async fn expect_closed(&mut self) {
        match self.frame_within(CLOSE_WITHIN).await {
            None => {}
            Some(f) => panic!("expected the connection to close without an answer, got {f:?}"),
        }
    }

    /// IDENTIFY with the JSON body `json`; its answer.
    pub async fn identify(&mut self, json: &str) -> Frame {
        self.send_identify(json).await;
        self.answer().await.expect("an IDENTIFY answer")
    }

    /// IDENTIFY with the JSON body `json`, leaving its answer to the test.
    pub async fn send_identify(&mut self, json: &str) {
        self.cmd_body("IDENTIFY", json.as_bytes()).await;
    }

    /// PUB one message and expect `OK`.
    pub async fn publish(&mut self, topic: &str, body: &[u8]) {
        self.cmd_body(&format!("PUB {topic}"), body).await;
        self.expect_ok().await;
    }

    /// SUB and RDY (for consuming straight from a broker).
    pub async fn subscribe(&mut self, topic: &str, channel: &str, rdy: u32) {
        self.cmd(&format!("SUB {topic} {channel}")).await;
        self.expect_ok().await;
        self.cmd(&format!("RDY {rdy}")).await;
    }

    /// FIN the message `id`.
    pub async fn fin(&mut self, id: &[u8; 16]) {
        let mut line = b"FIN ".to_vec();
        line.extend_from_slice(id);
        line.push(b'\n');
        self.send(&line).await;
    }

    /// The next `n` message bodies, FINed, each awaited with the client's patience: a slow
    /// machine delays them, only a missing one fails. Pair it with
    /// [`Client::expect_no_message`] to check nothing more follows.
    pub async fn receive(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match self.answer().await {
                Some(Frame::Message { id, body, .. }) => {
                    out.push(body.to_vec());
                    self.fin(&id).await;
                }
                other => panic!("expected message {} of {n}, got {other:?}", out.len() + 1),
            }
        }
        out
    }

    /// Expect no message within `quiet` (heartbeats answered on the way).
    pub async fn expect_no_message(&mut self, quiet: Duration) {
        match tokio::time::timeout(quiet, self.answer()).await {
            Err(_) | Ok(None) => {}
            Ok(Some(f)) => panic!("expected nothing more, got {f:?}"),
        }
    }
}
