//! Stream compression negotiated by IDENTIFY, as sans-IO transforms over byte buffers.
//!
//! - Snappy: the snappy *framing* format (stream identifier, compressed/uncompressed chunks
//!   with masked CRC-32C), as go-nsq/pynsq/nsqjs use it. Encoding goes through
//!   `snap::write::FrameEncoder`; decoding is incremental here so a partial chunk just waits.
//! - Deflate: raw DEFLATE (no zlib header) with a sync flush after every write, like nsqd's
//!   `flate.NewWriter` + `Flush`.

use bytes::{Buf, BytesMut};
use std::io::Write;

/// Why an incoming compressed stream is unusable.
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    /// Snappy framing or data error.
    #[error("snappy stream error: {0}")]
    Snappy(String),
    /// Deflate data error.
    #[error("deflate stream error: {0}")]
    Deflate(String),
}

/// One direction-pair of stream transforms.
pub enum Compression {
    /// No compression.
    None,
    /// Snappy framing.
    Snappy {
        /// Outgoing encoder writing into a Vec we drain.
        enc: Box<snap::write::FrameEncoder<Vec<u8>>>,
        /// Raw decoder for chunk bodies.
        dec: snap::raw::Decoder,
    },
    /// Raw deflate.
    Deflate {
        /// Outgoing encoder writing into a Vec we drain.
        enc: Box<flate2::write::DeflateEncoder<Vec<u8>>>,
        /// Incoming decoder writing into a Vec we drain.
        dec: Box<flate2::write::DeflateDecoder<Vec<u8>>>,
    },
}

const MAX_CHUNK: usize = 1 << 24;
const MAX_SNAPPY_BLOCK: usize = 65_536;

impl Compression {
    /// Snappy framing.
    pub fn snappy() -> Self {
        Self::Snappy {
            enc: Box::new(snap::write::FrameEncoder::new(Vec::new())),
            dec: snap::raw::Decoder::new(),
        }
    }

    /// Raw deflate at `level` (1..=9).
    pub fn deflate(level: u32) -> Self {
        Self::Deflate {
            enc: Box::new(flate2::write::DeflateEncoder::new(
                Vec::new(),
                flate2::Compression::new(level),
            )),
            dec: Box::new(flate2::write::DeflateDecoder::new(Vec::new())),
        }
    }

    /// Transforms outgoing plaintext into wire bytes appended to `out`.
    pub fn encode(&mut self, plain: &[u8], out: &mut Vec<u8>) {
        match self {
            Self::None => out.extend_from_slice(plain),
            Self::Snappy { enc, .. } => {
                // Writing into a Vec cannot fail.
                let _ = enc.write_all(plain);
                let _ = enc.flush();
                out.append(enc.get_mut());
            }
            Self::Deflate { enc, .. } => {
                // Writing into a Vec cannot fail; flush() emits a sync flush block.
                let _ = enc.write_all(plain);
                let _ = enc.flush();
                out.append(enc.get_mut());
            }
        }
    }

    /// Consumes wire bytes from `raw` (leaving an incomplete tail) and appends plaintext.
    pub fn decode(
        &mut self,
        raw: &mut BytesMut,
        plain: &mut BytesMut,
    ) -> Result<(), CompressError> {
        match self {
            Self::None => {
                plain.extend_from_slice(raw);
                raw.clear();
                Ok(())
            }
            Self::Snappy { dec, .. } => decode_snappy(dec, raw, plain),
            Self::Deflate { dec, .. } => {
                dec.write_all(raw)
                    .map_err(|e| CompressError::Deflate(e.to_string()))?;
                dec.flush()
                    .map_err(|e| CompressError::Deflate(e.to_string()))?;
                raw.clear();
                plain.extend_from_slice(dec.get_ref());
                dec.get_mut().clear();
                Ok(())
            }
        }
    }
}

fn decode_snappy(
    dec: &mut snap::raw::Decoder,
    raw: &mut BytesMut,
    plain: &mut BytesMut,
) -> Result<(), CompressError> {
    loop {
        if raw.len() < 4 {
            return Ok(());
        }
        let kind = raw[0];
        let len = usize::from(raw[1]) | usize::from(raw[2]) << 8 | usize::from(raw[3]) << 16;
        if len > MAX_CHUNK {
            return Err(CompressError::Snappy(format!("chunk of {len} bytes")));
        }
        if raw.len() < 4 + len {
            return Ok(());
        }
        raw.advance(4);
        let chunk = raw.split_to(len);
        match kind {
            0xff if &chunk[..] != b"sNaPpY" => {
                return Err(CompressError::Snappy("bad stream identifier".into()));
            }
            0xff => {}
            0x00 | 0x01 => {
                if chunk.len() < 4 {
                    return Err(CompressError::Snappy("chunk without checksum".into()));
                }
                let want = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                let data = if kind == 0x00 {
                    let n = snap::raw::decompress_len(&chunk[4..])
                        .map_err(|e| CompressError::Snappy(e.to_string()))?;
                    if n > MAX_SNAPPY_BLOCK {
                        return Err(CompressError::Snappy(format!("block of {n} bytes")));
                    }
                    dec.decompress_vec(&chunk[4..])
                        .map_err(|e| CompressError::Snappy(e.to_string()))?
                } else {
                    chunk[4..].to_vec()
                };
                if masked_crc32c(&data) != want {
                    return Err(CompressError::Snappy("checksum mismatch".into()));
                }
                plain.extend_from_slice(&data);
            }
            0x02..=0x7f => {
                return Err(CompressError::Snappy(format!(
                    "reserved chunk type {kind:#x}"
                )));
            }
            _ => {} // padding and skippable chunks
        }
    }
}

fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = rustqueue_protocol::checksum::crc32c(&[data]);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn round_trip(mut make: impl FnMut() -> Compression, chunk: usize) {
        let mut tx = make();
        let mut rx = make();
        let mut wire = Vec::new();
        let msgs: Vec<Vec<u8>> = (0..50)
            .map(|i| format!("message {i} ").repeat(i * 40).into_bytes())
            .collect();
        for m in &msgs {
            tx.encode(m, &mut wire);
        }
        let mut raw = BytesMut::new();
        let mut plain = BytesMut::new();
        for part in wire.chunks(chunk) {
            raw.extend_from_slice(part);
            rx.decode(&mut raw, &mut plain).unwrap();
        }
        assert_eq!(&plain[..], &msgs.concat()[..]);
    }

    #[test]
    fn snappy_round_trips_across_arbitrary_splits() {
        for chunk in [1, 7, 4096] {
            round_trip(Compression::snappy, chunk);
        }
    }

    #[test]
    fn deflate_round_trips_across_arbitrary_splits() {
        for chunk in [1, 7, 4096] {
            round_trip(|| Compression::deflate(6), chunk);
        }
    }

    #[test]
    fn snappy_output_is_readable_by_the_reference_decoder() {
        let mut tx = Compression::snappy();
        let mut wire = Vec::new();
        tx.encode(b"hello ", &mut wire);
        tx.encode(b"world", &mut wire);
        let mut out = String::new();
        snap::read::FrameDecoder::new(&wire[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello world");
    }

    #[test]
    fn deflate_output_is_readable_by_a_raw_inflater_after_each_flush() {
        let mut tx = Compression::deflate(6);
        let mut wire = Vec::new();
        tx.encode(b"first frame", &mut wire);
        let mut out = vec![0u8; 64];
        let mut d = flate2::Decompress::new(false);
        d.decompress(&wire, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(&out[..d.total_out() as usize], b"first frame");
    }

    #[test]
    fn deflate_yields_each_sync_flushed_message_without_waiting_for_more_input() {
        // Writers like Go's compress/flate and zlib end each flush with an empty stored
        // block; the command must be decodable from exactly those bytes.
        let mut tx = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut rx = Compression::deflate(6);
        let mut plain = BytesMut::new();
        for msg in [&b"PUB t\n"[..], b"NOP\n", b"TOUCH 0123456789abcdef\n"] {
            let mut wire = Vec::with_capacity(256);
            tx.compress_vec(msg, &mut wire, flate2::FlushCompress::Sync)
                .unwrap();
            assert!(wire.ends_with(&[0, 0, 0xff, 0xff]));
            let before = plain.len();
            rx.decode(&mut BytesMut::from(&wire[..]), &mut plain)
                .unwrap();
            assert_eq!(&plain[before..], msg);
        }
    }

    #[test]
    fn corrupt_snappy_input_is_an_error_not_a_panic() {
        let mut rx = Compression::snappy();
        let mut raw = BytesMut::from(&b"\xff\x06\x00\x00sNaPpX"[..]);
        assert!(rx.decode(&mut raw, &mut BytesMut::new()).is_err());
        let mut raw = BytesMut::from(&b"\x01\x05\x00\x00\x00\x00\x00\x00x"[..]);
        assert!(rx.decode(&mut raw, &mut BytesMut::new()).is_err());
    }
}
