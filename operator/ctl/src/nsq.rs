//! Just enough of the NSQ V2 consumer protocol for `tail`: magic, `SUB`, `RDY`, `FIN`, `NOP`
//! for heartbeats, and the frame decoding (pure, tested with byte tables).

use anyhow::{anyhow, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Frame types of the V2 protocol.
const FRAME_RESPONSE: u32 = 0;
const FRAME_ERROR: u32 = 1;
const FRAME_MESSAGE: u32 = 2;
/// How many messages a connection may hold unfinished.
const RDY: u32 = 100;

/// One decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// `OK`, `_heartbeat_`, ...
    Response(Vec<u8>),
    /// `E_INVALID ...`
    Error(String),
    /// A message: its 16-byte id and body.
    Message {
        /// The id to `FIN`.
        id: [u8; 16],
        /// The body.
        body: Vec<u8>,
    },
}

/// Takes one whole frame off the front of `buf`, if it holds one.
pub fn decode(buf: &mut BytesMut) -> anyhow::Result<Option<Frame>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if size < 4 {
        bail!("frame of size {size}");
    }
    if buf.len() < 4 + size {
        return Ok(None);
    }
    buf.advance(4);
    let mut frame = buf.split_to(size);
    let kind = frame.get_u32();
    Ok(Some(match kind {
        FRAME_RESPONSE => Frame::Response(frame.to_vec()),
        FRAME_ERROR => Frame::Error(String::from_utf8_lossy(&frame).into_owned()),
        FRAME_MESSAGE => {
            if frame.len() < 26 {
                bail!("message frame of {} bytes", frame.len());
            }
            frame.advance(10); // timestamp (8) and attempts (2)
            let mut id = [0u8; 16];
            frame.copy_to_slice(&mut id);
            Frame::Message {
                id,
                body: frame.to_vec(),
            }
        }
        other => bail!("unknown frame type {other}"),
    }))
}

/// Subscribes to `topic`/`channel` on `stream` and sends every body to `out` (FINishing it)
/// until the stream ends or `out` is closed.
pub async fn consume<S>(
    mut stream: S,
    topic: &str,
    channel: &str,
    out: tokio::sync::mpsc::Sender<Vec<u8>>,
) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream.write_all(b"  V2").await?;
    stream
        .write_all(format!("SUB {topic} {channel}\n").as_bytes())
        .await?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut subscribed = false;
    loop {
        while let Some(frame) = decode(&mut buf)? {
            match frame {
                Frame::Response(r) if r == b"_heartbeat_" => stream.write_all(b"NOP\n").await?,
                Frame::Response(r) if r == b"OK" && !subscribed => {
                    subscribed = true;
                    stream.write_all(format!("RDY {RDY}\n").as_bytes()).await?;
                }
                Frame::Response(_) => {}
                Frame::Error(e) => bail!("{e}"),
                Frame::Message { id, body } => {
                    let mut fin = b"FIN ".to_vec();
                    fin.extend_from_slice(&id);
                    fin.push(b'\n');
                    stream.write_all(&fin).await?;
                    if out.send(body).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(anyhow!("the broker closed the connection"));
        }
    }
}

/// `rustqueuectl-<6 hex>#ephemeral`: a channel of this tail alone, gone when it disconnects.
pub fn ephemeral_channel() -> String {
    format!(
        "rustqueuectl-{:06x}#ephemeral",
        rand::random::<u32>() & 0xff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
        let mut v = ((data.len() + 4) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&kind.to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn frames_decode_only_when_whole() {
        let mut msg = vec![0u8; 10];
        msg.extend_from_slice(b"0123456789abcdef");
        msg.extend_from_slice(b"hello");
        let mut bytes = frame(FRAME_RESPONSE, b"OK");
        bytes.extend(frame(FRAME_MESSAGE, &msg));
        bytes.extend(frame(FRAME_ERROR, b"E_INVALID bad"));
        let mut buf = BytesMut::from(&bytes[..bytes.len() - 1]);
        assert_eq!(
            decode(&mut buf).unwrap(),
            Some(Frame::Response(b"OK".to_vec()))
        );
        assert_eq!(
            decode(&mut buf).unwrap(),
            Some(Frame::Message {
                id: *b"0123456789abcdef",
                body: b"hello".to_vec()
            })
        );
        assert_eq!(decode(&mut buf).unwrap(), None, "the last frame is cut");
        buf.extend_from_slice(&bytes[bytes.len() - 1..]);
        assert_eq!(
            decode(&mut buf).unwrap(),
            Some(Frame::Error("E_INVALID bad".into()))
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn broken_frames_are_errors() {
        assert!(decode(&mut BytesMut::from(&frame(9, b"x")[..])).is_err());
        assert!(decode(&mut BytesMut::from(&frame(FRAME_MESSAGE, b"short")[..])).is_err());
    }

    #[test]
    fn ephemeral_channels_are_valid_nsq_names() {
        let c = ephemeral_channel();
        assert!(
            c.starts_with("rustqueuectl-") && c.ends_with("#ephemeral"),
            "{c}"
        );
        assert!(c.len() <= 64);
    }

    #[tokio::test]
    async fn a_consumer_subscribes_acknowledges_and_finishes_each_message() {
        let (client, mut server) = tokio::io::duplex(4096);
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let task = tokio::spawn(async move { consume(client, "t", "c#ephemeral", tx).await });
        let mut got = vec![0u8; 4 + "SUB t c#ephemeral\n".len()];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"  V2SUB t c#ephemeral\n");
        server
            .write_all(&frame(FRAME_RESPONSE, b"OK"))
            .await
            .unwrap();
        let mut rdy = vec![0u8; "RDY 100\n".len()];
        server.read_exact(&mut rdy).await.unwrap();
        assert_eq!(rdy, b"RDY 100\n");
        let mut msg = vec![0u8; 10];
        msg.extend_from_slice(b"0123456789abcdef");
        msg.extend_from_slice(b"body-1");
        server.write_all(&frame(FRAME_MESSAGE, &msg)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), b"body-1");
        let mut fin = vec![0u8; 21];
        server.read_exact(&mut fin).await.unwrap();
        assert_eq!(fin, b"FIN 0123456789abcdef\n");
        server
            .write_all(&frame(FRAME_RESPONSE, b"_heartbeat_"))
            .await
            .unwrap();
        let mut nop = vec![0u8; 4];
        server.read_exact(&mut nop).await.unwrap();
        assert_eq!(nop, b"NOP\n");
        drop(server);
        assert!(task.await.unwrap().is_err(), "a closed connection ends it");
    }
}
