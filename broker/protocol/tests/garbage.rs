//! Randomised robustness: every decoder fed arbitrary bytes must return (never panic, never
//! loop), and valid commands survive arbitrary split points. This is the stable-toolchain
//! counterpart of the cargo-fuzz targets in `fuzz/` (which need nightly).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use rustqueue_protocol::command::{decode_mpub_body, encode_mpub_body};
use rustqueue_protocol::identify::{IdentifyLimits, IdentifyRequest, negotiate};
use rustqueue_protocol::{Decoder, DecoderLimits, Frame};

fn drain(input: &[u8], chunk: usize) -> usize {
    let mut d = Decoder::new(DecoderLimits::default());
    let mut buf = BytesMut::new();
    let mut n = 0;
    for part in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(part);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(_)) => n += 1,
                Ok(None) => break,
                Err(_) => return n,
            }
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn command_decoder_survives_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..2048), chunk in 1usize..64) {
        drain(&input, chunk);
    }

    #[test]
    fn command_decoder_survives_plausible_command_soup(
        parts in proptest::collection::vec(prop_oneof![
            Just(b"PUB t\n".to_vec()), Just(b"MPUB t\n".to_vec()), Just(b"DPUB t 5\n".to_vec()),
            Just(b"IDENTIFY\n".to_vec()), Just(b"RDY 5\n".to_vec()), Just(b"NOP\n".to_vec()),
            Just(vec![0, 0, 0, 3]), Just(vec![0, 0, 0, 1]), Just(vec![255, 255, 255, 255]),
            proptest::collection::vec(any::<u8>(), 0..16),
        ], 0..32),
        chunk in 1usize..32,
    ) {
        drain(&parts.concat(), chunk);
    }

    #[test]
    fn valid_commands_decode_identically_at_any_split(msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 1..8), chunk in 1usize..40) {
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let body = encode_mpub_body(&refs);
        let mut input = b"MPUB topic\n".to_vec();
        input.extend_from_slice(&(body.len() as u32).to_be_bytes());
        input.extend_from_slice(&body);
        input.extend_from_slice(b"NOP\n");
        prop_assert_eq!(drain(&input, chunk), 2);
    }

    #[test]
    fn mpub_body_decoder_survives_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_mpub_body(Bytes::from(input), 64);
    }

    #[test]
    fn identify_decoder_survives_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(req) = IdentifyRequest::parse(&input) {
            let _ = negotiate(&req, &IdentifyLimits::default());
        }
    }

    #[test]
    fn identify_decoder_survives_arbitrary_values(hb in any::<i64>(), obs in any::<i64>(), obt in any::<i64>(), sr in any::<i64>(), mt in any::<i64>(), dl in any::<i64>(), fnz in any::<bool>(), d in any::<bool>(), s in any::<bool>()) {
        let json = format!(r#"{{"heartbeat_interval":{hb},"output_buffer_size":{obs},"output_buffer_timeout":{obt},"sample_rate":{sr},"msg_timeout":{mt},"deflate_level":{dl},"feature_negotiation":{fnz},"deflate":{d},"snappy":{s}}}"#);
        let req = IdentifyRequest::parse(json.as_bytes()).unwrap();
        if let Ok(n) = negotiate(&req, &IdentifyLimits::default()) {
            prop_assert!(n.sample_rate <= 99);
            prop_assert!(n.deflate_level.unwrap_or(1) <= 6);
            prop_assert!(n.output_buffer_size >= 1 && n.output_buffer_size <= 65_536);
        }
    }

    #[test]
    fn frame_decoder_survives_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = Frame::decode(&mut buf, 1 << 20) {}
    }
}
