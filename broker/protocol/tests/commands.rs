//! Table tests for the command decoder: every command, every error, every split point.

use bytes::{Bytes, BytesMut};
use rustqueue_protocol::command::{decode_mpub_body, encode_mpub_body, split_text_mpub};
use rustqueue_protocol::{Command, Decoder, DecoderLimits, ErrorCode, MessageId};

fn limits() -> DecoderLimits {
    DecoderLimits {
        max_line_bytes: 64,
        max_message_bytes: 10,
        max_body_bytes: 40,
        max_control_body_bytes: 20,
        max_defer_ms: 1000,
    }
}

fn decode_all(input: &[u8]) -> Result<Vec<Command>, (ErrorCode, String)> {
    let mut d = Decoder::new(limits());
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    loop {
        match d.decode(&mut buf) {
            Ok(Some(c)) => out.push(c),
            Ok(None) => return Ok(out),
            Err(e) => return Err((e.code, e.detail)),
        }
    }
}

fn body(cmd: &str, b: &[u8]) -> Vec<u8> {
    let mut v = cmd.as_bytes().to_vec();
    v.extend_from_slice(&(b.len() as u32).to_be_bytes());
    v.extend_from_slice(b);
    v
}

const ID: &[u8; 16] = b"0123456789abcdef";

#[test]
fn decodes_every_command() {
    let mut input = Vec::new();
    input.extend(body("IDENTIFY\n", b"{}"));
    input.extend(body("AUTH\n", b"secret"));
    input.extend(b"SUB t c#ephemeral\n");
    input.extend(body("PUB t\n", b"hi"));
    input.extend(body("MPUB t\n", &encode_mpub_body(&[b"a", b"bc"])));
    input.extend(body("DPUB t 500\n", b"later"));
    input.extend(b"RDY 7\r\nRDY\nFIN 0123456789abcdef\nREQ 0123456789abcdef -5\n");
    input.extend(b"TOUCH 0123456789abcdef\nNOP\nCLS\n");
    let got = decode_all(&input).unwrap();
    let id = MessageId(*ID);
    let want = vec![
        Command::Identify(Bytes::from_static(b"{}")),
        Command::Auth(Bytes::from_static(b"secret")),
        Command::Sub {
            topic: "t".into(),
            channel: "c#ephemeral".into(),
        },
        Command::Pub {
            topic: "t".into(),
            body: Bytes::from_static(b"hi"),
        },
        Command::Mpub {
            topic: "t".into(),
            bodies: vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")],
        },
        Command::Dpub {
            topic: "t".into(),
            defer_ms: 500,
            body: Bytes::from_static(b"later"),
        },
        Command::Rdy(7),
        Command::Rdy(1),
        Command::Fin(id),
        Command::Req { id, delay_ms: -5 },
        Command::Touch(id),
        Command::Nop,
        Command::Cls,
    ];
    assert_eq!(got, want);
}

#[test]
fn decodes_the_same_commands_when_fed_one_byte_at_a_time() {
    let mut input = body("PUB t\n", b"hello");
    input.extend(b"NOP\n");
    input.extend(body("MPUB t\n", &encode_mpub_body(&[b"x"])));
    let mut d = Decoder::new(limits());
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in input {
        buf.extend_from_slice(&[b]);
        while let Some(c) = d.decode(&mut buf).unwrap() {
            got.push(c.name());
        }
    }
    assert_eq!(got, ["PUB", "NOP", "MPUB"]);
    assert!(d.between_commands());
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test table or scenario reads best in one piece"
)]
fn rejects_bad_input_with_the_nsqd_error_code() {
    let mpub = |b: &[u8]| body("MPUB t\n", b);
    let table: Vec<(Vec<u8>, ErrorCode, &str)> = vec![
        (
            b"BOGUS\n".to_vec(),
            ErrorCode::Invalid,
            "invalid command BOGUS",
        ),
        (b"\n".to_vec(), ErrorCode::Invalid, "invalid command "),
        (
            b"pub t\n".to_vec(),
            ErrorCode::Invalid,
            "invalid command pub",
        ),
        (
            vec![b'A'; 64],
            ErrorCode::Invalid,
            "command line exceeds limit",
        ),
        (
            b"PUB\n".to_vec(),
            ErrorCode::Invalid,
            "PUB insufficient number of parameters",
        ),
        (
            b"PUB bad/name\n".to_vec(),
            ErrorCode::BadTopic,
            "PUB topic name \"bad/name\" is not valid",
        ),
        (
            b"PUB  t\n".to_vec(),
            ErrorCode::BadTopic,
            "PUB topic name \"\" is not valid",
        ),
        (
            b"SUB t\n".to_vec(),
            ErrorCode::Invalid,
            "SUB insufficient number of parameters",
        ),
        (
            b"SUB t! c\n".to_vec(),
            ErrorCode::BadTopic,
            "SUB topic name \"t!\" is not valid",
        ),
        (
            b"SUB t c!\n".to_vec(),
            ErrorCode::BadChannel,
            "SUB channel name \"c!\" is not valid",
        ),
        (
            b"DPUB t\n".to_vec(),
            ErrorCode::Invalid,
            "DPUB insufficient number of parameters",
        ),
        (
            b"DPUB t x\n".to_vec(),
            ErrorCode::Invalid,
            "DPUB could not parse timeout x",
        ),
        (
            b"DPUB t -1\n".to_vec(),
            ErrorCode::Invalid,
            "DPUB timeout -1 out of range 0-1000",
        ),
        (
            b"DPUB t 1001\n".to_vec(),
            ErrorCode::Invalid,
            "DPUB timeout 1001 out of range 0-1000",
        ),
        (
            b"RDY x\n".to_vec(),
            ErrorCode::Invalid,
            "RDY could not parse count x",
        ),
        (
            b"FIN\n".to_vec(),
            ErrorCode::Invalid,
            "FIN insufficient number of parameters",
        ),
        (
            b"FIN 123\n".to_vec(),
            ErrorCode::Invalid,
            "invalid message ID",
        ),
        (
            b"FIN 0123456789abcdeg\n".to_vec(),
            ErrorCode::Invalid,
            "invalid message ID",
        ),
        (
            b"REQ 0123456789abcdef\n".to_vec(),
            ErrorCode::Invalid,
            "REQ insufficient number of parameters",
        ),
        (
            b"REQ 0123456789abcdef z\n".to_vec(),
            ErrorCode::Invalid,
            "REQ could not parse timeout z",
        ),
        (
            b"TOUCH nope\n".to_vec(),
            ErrorCode::Invalid,
            "invalid message ID",
        ),
        (
            body("PUB t\n", b""),
            ErrorCode::BadMessage,
            "PUB invalid body size 0",
        ),
        (
            body("PUB t\n", &[0; 11]),
            ErrorCode::BadMessage,
            "PUB message too big 11 > 10",
        ),
        (
            body("DPUB t 1\n", &[0; 11]),
            ErrorCode::BadMessage,
            "DPUB message too big 11 > 10",
        ),
        (
            body("IDENTIFY\n", b""),
            ErrorCode::BadBody,
            "IDENTIFY invalid body size 0",
        ),
        (
            body("IDENTIFY\n", &[b' '; 21]),
            ErrorCode::BadBody,
            "IDENTIFY body too big 21 > 20",
        ),
        (
            body("AUTH\n", &[b's'; 21]),
            ErrorCode::BadBody,
            "AUTH body too big 21 > 20",
        ),
        (
            mpub(&[0; 41]),
            ErrorCode::BadBody,
            "MPUB body too big 41 > 40",
        ),
        (mpub(b""), ErrorCode::BadBody, "MPUB invalid body size 0"),
        (
            mpub(&[0, 0, 0, 0]),
            ErrorCode::BadBody,
            "MPUB invalid message count 0",
        ),
        (
            mpub(&[0, 0, 0, 9, 0, 0, 0, 1, b'a']),
            ErrorCode::BadBody,
            "MPUB invalid message count 9",
        ),
        (mpub(&[0, 0]), ErrorCode::BadBody, "MPUB invalid body size"),
        (
            mpub(&[0, 0, 0, 1, 0, 0, 0, 0, b'a']),
            ErrorCode::BadMessage,
            "MPUB invalid message(0) body size 0",
        ),
        (
            mpub(&[0, 0, 0, 1, 0, 0, 0, 11, b'a']),
            ErrorCode::BadMessage,
            "MPUB invalid message(0) body size 11",
        ),
        (
            mpub(&[0, 0, 0, 1, 0, 0, 0, 2, b'a']),
            ErrorCode::BadBody,
            "MPUB body truncated",
        ),
        (
            mpub(&[0, 0, 0, 1, 0, 0, 0, 1, b'a', b'z']),
            ErrorCode::BadBody,
            "MPUB 1 trailing bytes after 1 messages",
        ),
    ];
    for (input, code, detail) in table {
        let got = decode_all(&input);
        assert_eq!(
            got,
            Err((code, detail.to_string())),
            "input {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn waits_for_the_rest_of_a_partial_line_or_body() {
    assert_eq!(decode_all(b"PUB t").unwrap(), vec![]);
    assert_eq!(decode_all(b"PUB t\n\x00\x00").unwrap(), vec![]);
    assert_eq!(decode_all(b"PUB t\n\x00\x00\x00\x05hel").unwrap(), vec![]);
    let mut d = Decoder::new(limits());
    let mut buf = BytesMut::from(&b"PUB t\n\x00\x00\x00\x05hel"[..]);
    assert_eq!(d.decode(&mut buf).unwrap(), None);
    assert_eq!(d.pending_body_len(), Some(5));
    assert!(!d.between_commands());
}

#[test]
fn mpub_round_trips_and_text_mpub_drops_empty_lines() {
    let msgs: [&[u8]; 3] = [b"one", b"two", b"three"];
    let enc = Bytes::from(encode_mpub_body(&msgs));
    let dec = decode_mpub_body(enc, 100).unwrap();
    assert_eq!(
        dec,
        msgs.iter()
            .map(|m| Bytes::copy_from_slice(m))
            .collect::<Vec<_>>()
    );
    let text = Bytes::from_static(b"a\n\nb\nc");
    assert_eq!(split_text_mpub(&text), vec![&b"a"[..], b"b", b"c"]);
    assert!(split_text_mpub(&Bytes::from_static(b"\n\n")).is_empty());
}
