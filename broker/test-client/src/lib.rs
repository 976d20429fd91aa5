//! One raw NSQ V2 test client for the workspace's integration tests: it speaks the wire
//! protocol with `rustqueue-protocol`'s frame decoder and nothing else, so a test sees exactly
//! what a broker or a gateway sent. The gateway's tests use it; the broker's tests still have
//! their own in `broker/server/tests/common` (generic over TLS and compressed streams).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use rustqueue_protocol::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame the client decodes (a 100 MiB message and its header fit).
const MAX_FRAME_BYTES: u32 = 200 * 1024 * 1024;

/// A raw NSQ V2 client: bytes in, decoded frames out, every failure a panic (it is for tests).
#[derive(Debug)]
pub struct Client {
    /// The connection, for tests that write or shut down by hand.
    pub io: TcpStream,
    buf: BytesMut,
}

impl Client {
    /// Connect and send the magic.
    pub async fn connect(addr: SocketAddr) -> Client {
        let mut c = Client::raw(addr).await;
        c.send(b"  V2").await;
        c
    }

    /// Connect without sending anything.
    pub async fn raw(addr: SocketAddr) -> Client {
        Client {
            io: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
        }
    }

    /// Write `bytes` as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
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

    /// The next frame within 60 s; `None` when the connection closed first.
    pub async fn frame(&mut self) -> Option<Frame> {
        self.frame_within(Duration::from_secs(60)).await
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

    /// Expect an error frame starting with `code`; returns its text.
    pub async fn expect_error(&mut self, code: &str) -> String {
        match self.answer().await {
            Some(Frame::Error(e)) if e.starts_with(code.as_bytes()) => {
                String::from_utf8_lossy(&e).into_owned()
            }
            other => panic!("expected {code}, got {other:?}"),
        }
    }

    /// Expect the connection to close with no frame.
    pub async fn expect_closed(&mut self) {
        match self.frame_within(Duration::from_secs(10)).await {
            None => {}
            Some(f) => panic!("expected the connection to close without an answer, got {f:?}"),
        }
    }

    /// IDENTIFY with the JSON body `json`; its answer.
    pub async fn identify(&mut self, json: &str) -> Frame {
        self.cmd_body("IDENTIFY", json.as_bytes()).await;
        self.answer().await.expect("an IDENTIFY answer")
    }

    /// SUB and RDY (for consuming straight from a broker).
    pub async fn subscribe(&mut self, topic: &str, channel: &str, rdy: u32) {
        self.send(format!("SUB {topic} {channel}\n").as_bytes())
            .await;
        self.expect_ok().await;
        self.send(format!("RDY {rdy}\n").as_bytes()).await;
    }

    /// Every message body arriving within `quiet` of the previous one, FINed.
    pub async fn drain_messages(&mut self, quiet: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let next = tokio::time::timeout(quiet, self.answer()).await;
            match next {
                Ok(Some(Frame::Message { id, body, .. })) => {
                    out.push(body.to_vec());
                    let mut fin = b"FIN ".to_vec();
                    fin.extend_from_slice(&id);
                    fin.push(b'\n');
                    self.send(&fin).await;
                }
                Ok(other) if out.is_empty() && other.is_none() => return out,
                Ok(Some(f)) => panic!("unexpected frame {f:?}"),
                Ok(None) | Err(_) => return out,
            }
        }
    }
}
