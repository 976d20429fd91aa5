//! A minimal NSQ V2 consumer for load in tests (the console must not depend on broker crates,
//! so no broker client library is used).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A minimal NSQ V2 consumer: SUB, RDY, FIN every message it reads.
pub struct Consumer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Consumer {
    /// Subscribes to `topic`/`channel` on `addr` with `rdy` in flight.
    pub async fn subscribe(addr: SocketAddr, topic: &str, channel: &str, rdy: u32) -> Consumer {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // As the official clients do: a FIN held back by Nagle's algorithm is discarded
        // with the rest of the send queue if the socket is then closed with unread data.
        stream.set_nodelay(true).unwrap();
        stream.write_all(b"  V2").await.unwrap();
        stream
            .write_all(format!("SUB {topic} {channel}\n").as_bytes())
            .await
            .unwrap();
        let mut c = Consumer {
            stream,
            buf: Vec::new(),
        };
        let (kind, data) = c.frame().await;
        assert_eq!(
            (kind, data.as_slice()),
            (0, b"OK".as_slice()),
            "SUB answered {}",
            String::from_utf8_lossy(&data)
        );
        c.stream
            .write_all(format!("RDY {rdy}\n").as_bytes())
            .await
            .unwrap();
        c
    }

    async fn frame(&mut self) -> (u32, Vec<u8>) {
        loop {
            if self.buf.len() >= 8 {
                let size = u32::from_be_bytes(self.buf[0..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + size {
                    let kind = u32::from_be_bytes(self.buf[4..8].try_into().unwrap());
                    let data = self.buf[8..4 + size].to_vec();
                    self.buf.drain(..4 + size);
                    return (kind, data);
                }
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the broker closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next response (0) or message (2) frame, read by `deadline`; an error frame fails.
    async fn frame_by(&mut self, deadline: Instant, what: &str) -> (u32, Vec<u8>) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (kind, data) = tokio::time::timeout(left, self.frame())
            .await
            .unwrap_or_else(|_| panic!("{what} in time"));
        assert!(
            kind == 0 || kind == 2,
            "error frame: {}",
            String::from_utf8_lossy(&data)
        );
        (kind, data)
    }

    /// Closes cleanly: `CLS`, then reads (and drops) what is still arriving until the
    /// broker's `CLOSE_WAIT`. The broker answers commands in order, so every `FIN` sent before
    /// has been applied. Dropping a consumer instead may reset the connection and lose them.
    pub async fn close(mut self) {
        self.stream.write_all(b"CLS\n").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.frame_by(deadline, "CLOSE_WAIT").await != (0, b"CLOSE_WAIT".to_vec()) {}
    }

    /// Reads and finishes `n` messages (answering heartbeats), within 20 s.
    pub async fn finish(&mut self, n: usize) {
        let mut done = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while done < n {
            match self.frame_by(deadline, "messages").await {
                (0, data) if data == b"_heartbeat_" => {
                    self.stream.write_all(b"NOP\n").await.unwrap();
                }
                (2, data) => {
                    let id = &data[10..26];
                    let mut cmd = b"FIN ".to_vec();
                    cmd.extend_from_slice(id);
                    cmd.push(b'\n');
                    self.stream.write_all(&cmd).await.unwrap();
                    done += 1;
                }
                _ => {}
            }
        }
    }
}
