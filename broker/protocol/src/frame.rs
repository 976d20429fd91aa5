//! Server-to-client frames: `[u32 size][i32 type][data]`, size counting type + data.
//!
//! Encoding is what the server uses; [`Frame::decode`] is for clients and tests.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::ProtocolError;

/// Frame type 0: response (`OK`, `CLOSE_WAIT`, `_heartbeat_`, JSON).
pub const FRAME_RESPONSE: i32 = 0;
/// Frame type 1: error.
pub const FRAME_ERROR: i32 = 1;
/// Frame type 2: message.
pub const FRAME_MESSAGE: i32 = 2;
/// The heartbeat response text.
pub const HEARTBEAT: &[u8] = b"_heartbeat_";
/// The `OK` response text.
pub const OK: &[u8] = b"OK";
/// The reply to CLS.
pub const CLOSE_WAIT: &[u8] = b"CLOSE_WAIT";

/// The three frame types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// Type 0.
    Response,
    /// Type 1.
    Error,
    /// Type 2.
    Message,
}

/// Appends a response frame.
pub fn put_response(out: &mut BytesMut, data: &[u8]) {
    put_frame(out, FRAME_RESPONSE, data);
}

/// Appends an error frame for `err`.
pub fn put_error(out: &mut BytesMut, err: &ProtocolError) {
    put_frame(out, FRAME_ERROR, err.frame_text().as_bytes());
}

fn put_frame(out: &mut BytesMut, kind: i32, data: &[u8]) {
    out.reserve(8 + data.len());
    out.put_u32(4 + data.len() as u32);
    out.put_i32(kind);
    out.put_slice(data);
}

/// Appends a message frame: `[i64 ts][u16 attempts][16-byte id][body]`.
pub fn put_message(
    out: &mut BytesMut,
    timestamp_ns: i64,
    attempts: u16,
    id: &[u8; 16],
    body: &[u8],
) {
    let size = 4 + 8 + 2 + 16 + body.len();
    out.reserve(4 + size);
    out.put_u32(size as u32);
    out.put_i32(FRAME_MESSAGE);
    out.put_i64(timestamp_ns);
    out.put_u16(attempts);
    out.put_slice(id);
    out.put_slice(body);
}

/// A decoded frame (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A response.
    Response(Bytes),
    /// An error; the text is `"<CODE> <detail>"`.
    Error(Bytes),
    /// A message.
    Message {
        /// Nanosecond timestamp.
        timestamp_ns: i64,
        /// Delivery attempts so far, this one included.
        attempts: u16,
        /// The ID to FIN/REQ/TOUCH.
        id: [u8; 16],
        /// The payload.
        body: Bytes,
    },
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size field is smaller than the frame type, or above the caller's limit.
    #[error("invalid frame size {0}")]
    BadSize(u32),
    /// Unknown frame type.
    #[error("unknown frame type {0}")]
    BadType(i32),
    /// A message frame shorter than its 26-byte header.
    #[error("message frame too short ({0} bytes)")]
    ShortMessage(usize),
}

impl Frame {
    /// Takes one frame out of `buf` if complete. `max_size` bounds the size field.
    pub fn decode(buf: &mut BytesMut, max_size: u32) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if size < 4 || size > max_size {
            return Err(FrameError::BadSize(size));
        }
        if buf.len() < 4 + size as usize {
            return Ok(None);
        }
        buf.advance(4);
        let kind = buf.get_i32();
        let mut data = buf.split_to(size as usize - 4).freeze();
        match kind {
            FRAME_RESPONSE => Ok(Some(Frame::Response(data))),
            FRAME_ERROR => Ok(Some(Frame::Error(data))),
            FRAME_MESSAGE => {
                if data.len() < 26 {
                    return Err(FrameError::ShortMessage(data.len()));
                }
                let timestamp_ns = data.get_i64();
                let attempts = data.get_u16();
                let mut id = [0u8; 16];
                data.copy_to_slice(&mut id);
                Ok(Some(Frame::Message {
                    timestamp_ns,
                    attempts,
                    id,
                    body: data,
                }))
            }
            other => Err(FrameError::BadType(other)),
        }
    }

    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Response(_) => FrameType::Response,
            Frame::Error(_) => FrameType::Error,
            Frame::Message { .. } => FrameType::Message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn encodes_frames_with_big_endian_size_and_type() {
        let mut out = BytesMut::new();
        put_response(&mut out, OK);
        assert_eq!(&out[..], b"\x00\x00\x00\x06\x00\x00\x00\x00OK");
        let mut out = BytesMut::new();
        put_error(&mut out, &ProtocolError::new(ErrorCode::BadProtocol, "bad"));
        assert_eq!(&out[..8], b"\x00\x00\x00\x16\x00\x00\x00\x01");
        assert_eq!(&out[8..], b"E_BAD_PROTOCOL bad");
    }

    #[test]
    fn message_frames_round_trip() {
        let mut out = BytesMut::new();
        put_message(&mut out, 42, 3, b"0123456789abcdef", b"hello");
        assert_eq!(out.len(), 4 + 4 + 26 + 5);
        let frame = Frame::decode(&mut out, 1 << 20).unwrap().unwrap();
        assert_eq!(
            frame,
            Frame::Message {
                timestamp_ns: 42,
                attempts: 3,
                id: *b"0123456789abcdef",
                body: Bytes::from_static(b"hello"),
            }
        );
        assert!(out.is_empty());
    }

    #[test]
    fn decode_waits_for_a_whole_frame_and_rejects_bad_sizes() {
        let mut buf = BytesMut::from(&b"\x00\x00\x00\x06\x00\x00\x00\x00O"[..]);
        assert_eq!(Frame::decode(&mut buf, 100), Ok(None));
        let mut buf = BytesMut::from(&b"\x00\x00\x00\x02\x00\x00"[..]);
        assert_eq!(Frame::decode(&mut buf, 100), Err(FrameError::BadSize(2)));
        let mut buf = BytesMut::from(&b"\x00\x00\x00\x05\x00\x00\x00\x09x"[..]);
        assert_eq!(Frame::decode(&mut buf, 100), Err(FrameError::BadType(9)));
    }
}
