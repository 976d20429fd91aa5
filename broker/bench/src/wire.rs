//! The few NSQ V2 commands and frames the load generator speaks, written by hand on purpose:
//! the benchmark must not share code with the broker it measures.
//!
//! Commands are appended to a caller's buffer so a connection can batch many (FINs) into one
//! write. Frames are `size:u32 | type:u32 | data`, with message data
//! `timestamp:i64 | attempts:u16 | id:[u8;16] | body`.

use bytes::{Buf, Bytes, BytesMut};

/// The protocol magic a client writes first.
pub const MAGIC: &[u8; 4] = b"  V2";
/// Frame type of a response (`OK`, `CLOSE_WAIT`, `_heartbeat_`).
pub const FRAME_RESPONSE: u32 = 0;
/// Frame type of an error (`E_INVALID ...`).
pub const FRAME_ERROR: u32 = 1;
/// Frame type of a delivered message.
pub const FRAME_MESSAGE: u32 = 2;
/// Largest frame accepted from a server; larger means a corrupt stream.
pub const MAX_FRAME: usize = 64 << 20;

/// A decoded server frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A response such as `OK`, `CLOSE_WAIT` or `_heartbeat_`.
    Response(Bytes),
    /// An error frame, e.g. `E_BAD_TOPIC ...`.
    Error(Bytes),
    /// A message for a subscribed consumer.
    Message(Message),
}

/// A delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Nanoseconds since the epoch when the broker accepted it.
    pub timestamp: i64,
    /// Delivery attempts so far (1 on the first delivery).
    pub attempts: u16,
    /// The 16-byte message ID, echoed in FIN.
    pub id: [u8; 16],
    /// The body as published.
    pub body: Bytes,
}

/// A stream the server sent that is not valid NSQ V2.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The size prefix is below 4 (no type) or above [`MAX_FRAME`].
    #[error("frame size {0} is out of range (corrupt stream or not an NSQ V2 server)")]
    BadSize(usize),
    /// A message frame shorter than its 26-byte header.
    #[error("message frame of {0} bytes is shorter than the 26-byte header")]
    ShortMessage(usize),
    /// An unknown frame type.
    #[error("unknown frame type {0}")]
    BadType(u32),
}

/// Takes one complete frame off the front of `buf`, or `None` if more bytes are needed.
pub fn parse_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(4..=MAX_FRAME).contains(&size) {
        return Err(FrameError::BadSize(size));
    }
    if buf.len() < 4 + size {
        buf.reserve(4 + size - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    let mut data = buf.split_to(size).freeze();
    let kind = data.get_u32();
    match kind {
        FRAME_RESPONSE => Ok(Some(Frame::Response(data))),
        FRAME_ERROR => Ok(Some(Frame::Error(data))),
        FRAME_MESSAGE => {
            if data.len() < 26 {
                return Err(FrameError::ShortMessage(data.len()));
            }
            let timestamp = data.get_i64();
            let attempts = data.get_u16();
            let mut id = [0u8; 16];
            data.copy_to_slice(&mut id);
            Ok(Some(Frame::Message(Message {
                timestamp,
                attempts,
                id,
                body: data,
            })))
        }
        other => Err(FrameError::BadType(other)),
    }
}

/// `IDENTIFY` with a small JSON body (no feature negotiation, so the reply is a plain `OK`).
pub fn identify(out: &mut Vec<u8>, client_id: &str) {
    let body = serde_json::json!({
        "client_id": client_id,
        "hostname": client_id,
        "user_agent": concat!("rustqueue-bench/", env!("CARGO_PKG_VERSION")),
        "feature_negotiation": false,
    })
    .to_string();
    out.extend_from_slice(b"IDENTIFY\n");
    push_len(out, body.len());
    out.extend_from_slice(body.as_bytes());
}

/// `PUB <topic>` with one body.
pub fn publish(out: &mut Vec<u8>, topic: &str, body: &[u8]) {
    out.extend_from_slice(b"PUB ");
    out.extend_from_slice(topic.as_bytes());
    out.push(b'\n');
    push_len(out, body.len());
    out.extend_from_slice(body);
}

/// `MPUB <topic>` with several bodies.
pub fn multi_publish<'a>(out: &mut Vec<u8>, topic: &str, bodies: impl Iterator<Item = &'a [u8]>) {
    out.extend_from_slice(b"MPUB ");
    out.extend_from_slice(topic.as_bytes());
    out.push(b'\n');
    let size_at = out.len();
    out.extend_from_slice(&[0; 8]);
    let mut count = 0usize;
    for body in bodies {
        push_len(out, body.len());
        out.extend_from_slice(body);
        count += 1;
    }
    let size = out.len() - size_at - 4;
    out[size_at..size_at + 4].copy_from_slice(&(size as u32).to_be_bytes());
    out[size_at + 4..size_at + 8].copy_from_slice(&(count as u32).to_be_bytes());
}

/// `SUB <topic> <channel>`.
pub fn subscribe(out: &mut Vec<u8>, topic: &str, channel: &str) {
    out.extend_from_slice(format!("SUB {topic} {channel}\n").as_bytes());
}

/// `RDY <count>`.
pub fn ready(out: &mut Vec<u8>, count: u32) {
    out.extend_from_slice(format!("RDY {count}\n").as_bytes());
}

/// `FIN <id>`.
pub fn finish(out: &mut Vec<u8>, id: &[u8; 16]) {
    out.extend_from_slice(b"FIN ");
    out.extend_from_slice(id);
    out.push(b'\n');
}

/// `NOP`, the answer to a heartbeat.
pub fn nop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"NOP\n");
}

/// `CLS`: stop sending me messages.
pub fn close(out: &mut Vec<u8>) {
    out.extend_from_slice(b"CLS\n");
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u32).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u32, data: &[u8]) -> Vec<u8> {
        let mut out = ((data.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn parses_a_response_only_once_it_is_complete() {
        let whole = frame(FRAME_RESPONSE, b"OK");
        let mut buf = BytesMut::from(&whole[..5]);
        assert_eq!(parse_frame(&mut buf), Ok(None));
        buf.extend_from_slice(&whole[5..]);
        assert_eq!(
            parse_frame(&mut buf),
            Ok(Some(Frame::Response(Bytes::from_static(b"OK"))))
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn parses_back_to_back_message_and_error_frames() {
        let mut data = 7i64.to_be_bytes().to_vec();
        data.extend_from_slice(&3u16.to_be_bytes());
        data.extend_from_slice(b"0123456789abcdef");
        data.extend_from_slice(b"hello");
        let mut stream = frame(FRAME_MESSAGE, &data);
        stream.extend(frame(FRAME_ERROR, b"E_INVALID nope"));
        let mut buf = BytesMut::from(&stream[..]);
        let Ok(Some(Frame::Message(m))) = parse_frame(&mut buf) else {
            panic!("expected a message");
        };
        assert_eq!((m.timestamp, m.attempts), (7, 3));
        assert_eq!(&m.id, b"0123456789abcdef");
        assert_eq!(&m.body[..], b"hello");
        assert_eq!(
            parse_frame(&mut buf),
            Ok(Some(Frame::Error(Bytes::from_static(b"E_INVALID nope"))))
        );
    }

    #[test]
    fn rejects_corrupt_sizes_types_and_short_messages() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 2, 0, 0][..]);
        assert_eq!(parse_frame(&mut buf), Err(FrameError::BadSize(2)));
        let mut buf = BytesMut::from(&frame(9, b"x")[..]);
        assert_eq!(parse_frame(&mut buf), Err(FrameError::BadType(9)));
        let mut buf = BytesMut::from(&frame(FRAME_MESSAGE, &[0; 10])[..]);
        assert_eq!(parse_frame(&mut buf), Err(FrameError::ShortMessage(10)));
    }

    #[test]
    fn encodes_mpub_with_total_size_and_count() {
        let mut out = Vec::new();
        multi_publish(&mut out, "t", [&b"ab"[..], &b"cde"[..]].into_iter());
        let header = b"MPUB t\n".len();
        let size = u32::from_be_bytes(out[header..header + 4].try_into().unwrap());
        let count = u32::from_be_bytes(out[header + 4..header + 8].try_into().unwrap());
        assert_eq!(count, 2);
        assert_eq!(size as usize, out.len() - header - 4);
        assert_eq!(&out[header + 8..header + 12], &2u32.to_be_bytes());
        assert_eq!(&out[out.len() - 3..], b"cde");
    }

    #[test]
    fn encodes_pub_fin_and_control_commands() {
        let mut out = Vec::new();
        publish(&mut out, "t", b"xy");
        finish(&mut out, b"0123456789abcdef");
        ready(&mut out, 2500);
        subscribe(&mut out, "t", "c");
        nop(&mut out);
        close(&mut out);
        let mut expected = b"PUB t\n\0\0\0\x02xy".to_vec();
        expected.extend_from_slice(b"FIN 0123456789abcdef\nRDY 2500\nSUB t c\nNOP\nCLS\n");
        assert_eq!(out, expected);
    }
}
