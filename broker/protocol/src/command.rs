//! Command lines, bodies and the incremental stream [`Decoder`].
//!
//! A command is `NAME arg arg\n` (a trailing `\r` is tolerated, arguments are split on single
//! spaces like nsqd). IDENTIFY, AUTH, PUB, MPUB and DPUB are followed by `[u32 BE size][body]`.
//! The decoder validates everything that can be validated without broker state (names, sizes
//! against the configured limits, DPUB defer range, message IDs) so that a fatal error is known
//! before a body is read, exactly like nsqd.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{ErrorCode, ProtocolError};
use crate::names::is_valid_name;

/// Most messages accepted in one MPUB.
pub const MAX_MPUB_MESSAGES: u32 = 65_536;

/// A 16-byte message ID as written on the wire (ASCII hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageId(pub [u8; 16]);

impl MessageId {
    /// Parses a wire ID: exactly 16 ASCII hex digits.
    pub fn parse(raw: &[u8]) -> Option<Self> {
        let arr: [u8; 16] = raw.try_into().ok()?;
        arr.iter().all(u8::is_ascii_hexdigit).then_some(Self(arr))
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        // Constructed only from ASCII hex digits or by callers that promise ASCII.
        std::str::from_utf8(&self.0).unwrap_or("<invalid id>")
    }
}

/// A fully decoded client command (bodies included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `IDENTIFY` + JSON body (decode with [`crate::identify::IdentifyRequest::parse`]).
    Identify(Bytes),
    /// `AUTH` + secret.
    Auth(Bytes),
    /// `SUB <topic> <channel>`.
    Sub {
        /// Topic name (validated).
        topic: String,
        /// Channel name (validated).
        channel: String,
    },
    /// `PUB <topic>` + one message.
    Pub {
        /// Topic name (validated).
        topic: String,
        /// The message.
        body: Bytes,
    },
    /// `MPUB <topic>` + `[u32 n]([u32 len][bytes])*`, already split into messages.
    Mpub {
        /// Topic name (validated).
        topic: String,
        /// The messages, in order.
        bodies: Vec<Bytes>,
    },
    /// `DPUB <topic> <defer_ms>` + one message.
    Dpub {
        /// Topic name (validated).
        topic: String,
        /// Deferral in milliseconds, within `0..=max_defer_ms`.
        defer_ms: u64,
        /// The message.
        body: Bytes,
    },
    /// `RDY [count]` (bare `RDY` means 1). Range checked by the session.
    Rdy(i64),
    /// `FIN <id>`.
    Fin(MessageId),
    /// `REQ <id> <delay_ms>`; the session clamps the delay.
    Req {
        /// Message ID.
        id: MessageId,
        /// Requested delay, possibly out of range.
        delay_ms: i64,
    },
    /// `TOUCH <id>`.
    Touch(MessageId),
    /// `NOP`.
    Nop,
    /// `CLS`.
    Cls,
}

impl Command {
    /// The command's name as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Identify(_) => "IDENTIFY",
            Self::Auth(_) => "AUTH",
            Self::Sub { .. } => "SUB",
            Self::Pub { .. } => "PUB",
            Self::Mpub { .. } => "MPUB",
            Self::Dpub { .. } => "DPUB",
            Self::Rdy(_) => "RDY",
            Self::Fin(_) => "FIN",
            Self::Req { .. } => "REQ",
            Self::Touch(_) => "TOUCH",
            Self::Nop => "NOP",
            Self::Cls => "CLS",
        }
    }
}

/// Limits the decoder enforces.
#[derive(Clone, Debug)]
pub struct DecoderLimits {
    /// Longest command line, newline included (1,024).
    pub max_line_bytes: usize,
    /// Largest single message (PUB/DPUB body, each MPUB message).
    pub max_message_bytes: u64,
    /// Largest MPUB body.
    pub max_body_bytes: u64,
    /// Largest IDENTIFY/AUTH body (1 MiB).
    pub max_control_body_bytes: u64,
    /// Largest DPUB defer.
    pub max_defer_ms: u64,
}

impl Default for DecoderLimits {
    fn default() -> Self {
        Self {
            max_line_bytes: 1024,
            max_message_bytes: 20 * 1024 * 1024,
            max_body_bytes: 64 * 1024 * 1024,
            max_control_body_bytes: 1024 * 1024,
            max_defer_ms: 3_600_000,
        }
    }
}

/// A command line whose body has not arrived yet.
#[derive(Clone, Debug, PartialEq, Eq)]
enum BodyCommand {
    Identify,
    Auth,
    Pub(String),
    Mpub(String),
    Dpub(String, u64),
}

/// The result of parsing one line: either complete, or waiting for a body.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Parsed {
    Done(Command),
    NeedsBody(BodyCommand),
}

#[derive(Clone, Debug)]
enum State {
    Line,
    Size(BodyCommand),
    Body(BodyCommand, usize),
}

/// Incremental decoder: feed it the connection's read buffer, take commands out.
///
/// After an error the stream is out of sync; the caller sends the error and closes (every
/// decode error is fatal).
#[derive(Clone, Debug)]
pub struct Decoder {
    limits: DecoderLimits,
    state: State,
}

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: DecoderLimits) -> Self {
        Self {
            limits,
            state: State::Line,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &DecoderLimits {
        &self.limits
    }

    /// True between commands (no partial line/size/body consumed into the state).
    pub fn between_commands(&self) -> bool {
        matches!(self.state, State::Line)
    }

    /// Bytes still needed to finish the body being read (for buffer reservation).
    pub fn pending_body_len(&self) -> Option<usize> {
        match self.state {
            State::Body(_, len) => Some(len),
            _ => None,
        }
    }

    /// Takes one command out of `buf` if it is complete. `Ok(None)` means "need more bytes".
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Command>, ProtocolError> {
        loop {
            match std::mem::replace(&mut self.state, State::Line) {
                State::Line => {
                    let window = buf.len().min(self.limits.max_line_bytes);
                    let Some(pos) = buf[..window].iter().position(|&b| b == b'\n') else {
                        if buf.len() >= self.limits.max_line_bytes {
                            return Err(ProtocolError::invalid("command line exceeds limit"));
                        }
                        return Ok(None);
                    };
                    let line = buf.split_to(pos + 1);
                    match parse_line(&line[..pos], &self.limits)? {
                        Parsed::Done(cmd) => return Ok(Some(cmd)),
                        Parsed::NeedsBody(pending) => self.state = State::Size(pending),
                    }
                }
                State::Size(pending) => {
                    if buf.len() < 4 {
                        self.state = State::Size(pending);
                        return Ok(None);
                    }
                    let size = buf.get_u32();
                    check_body_size(&pending, u64::from(size), &self.limits)?;
                    self.state = State::Body(pending, size as usize);
                }
                State::Body(pending, len) => {
                    if buf.len() < len {
                        self.state = State::Body(pending, len);
                        return Ok(None);
                    }
                    let body = buf.split_to(len).freeze();
                    return finish_body(pending, body, &self.limits).map(Some);
                }
            }
        }
    }
}

fn check_body_size(
    cmd: &BodyCommand,
    size: u64,
    limits: &DecoderLimits,
) -> Result<(), ProtocolError> {
    let (name, max, code) = match cmd {
        BodyCommand::Identify => (
            "IDENTIFY",
            limits.max_control_body_bytes,
            ErrorCode::BadBody,
        ),
        BodyCommand::Auth => ("AUTH", limits.max_control_body_bytes, ErrorCode::BadBody),
        BodyCommand::Pub(_) => ("PUB", limits.max_message_bytes, ErrorCode::BadMessage),
        BodyCommand::Dpub(..) => ("DPUB", limits.max_message_bytes, ErrorCode::BadMessage),
        BodyCommand::Mpub(_) => ("MPUB", limits.max_body_bytes, ErrorCode::BadBody),
    };
    if size == 0 {
        return Err(ProtocolError::new(
            code,
            format!("{name} invalid body size 0"),
        ));
    }
    if size > max {
        let what = if code == ErrorCode::BadMessage {
            "message"
        } else {
            "body"
        };
        return Err(ProtocolError::new(
            code,
            format!("{name} {what} too big {size} > {max}"),
        ));
    }
    Ok(())
}

fn finish_body(
    cmd: BodyCommand,
    body: Bytes,
    limits: &DecoderLimits,
) -> Result<Command, ProtocolError> {
    Ok(match cmd {
        BodyCommand::Identify => Command::Identify(body),
        BodyCommand::Auth => Command::Auth(body),
        BodyCommand::Pub(topic) => Command::Pub { topic, body },
        BodyCommand::Dpub(topic, defer_ms) => Command::Dpub {
            topic,
            defer_ms,
            body,
        },
        BodyCommand::Mpub(topic) => Command::Mpub {
            topic,
            bodies: decode_mpub_body(body, limits.max_message_bytes)?,
        },
    })
}

fn text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

fn need(params: &[&[u8]], n: usize, cmd: &str) -> Result<(), ProtocolError> {
    if params.len() < n {
        return Err(ProtocolError::invalid(format!(
            "{cmd} insufficient number of parameters"
        )));
    }
    Ok(())
}

fn topic_param(raw: &[u8], cmd: &str) -> Result<String, ProtocolError> {
    match std::str::from_utf8(raw) {
        Ok(t) if is_valid_name(t) => Ok(t.to_owned()),
        _ => Err(ProtocolError::new(
            ErrorCode::BadTopic,
            format!("{cmd} topic name {:?} is not valid", text(raw)),
        )),
    }
}

fn id_param(raw: &[u8]) -> Result<MessageId, ProtocolError> {
    MessageId::parse(raw).ok_or_else(|| ProtocolError::invalid("invalid message ID"))
}

fn int_param(raw: &[u8], cmd: &str, what: &str) -> Result<i64, ProtocolError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| {
            ProtocolError::invalid(format!("{cmd} could not parse {what} {}", text(raw)))
        })
}

/// Parses one command line (without its `\n`; a trailing `\r` is dropped).
fn parse_line(line: &[u8], limits: &DecoderLimits) -> Result<Parsed, ProtocolError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let params: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let name = params.first().copied().unwrap_or_default();
    let done = |c| Ok(Parsed::Done(c));
    match name {
        b"IDENTIFY" => Ok(Parsed::NeedsBody(BodyCommand::Identify)),
        b"AUTH" => Ok(Parsed::NeedsBody(BodyCommand::Auth)),
        b"PUB" => {
            need(&params, 2, "PUB")?;
            Ok(Parsed::NeedsBody(BodyCommand::Pub(topic_param(
                params[1], "PUB",
            )?)))
        }
        b"MPUB" => {
            need(&params, 2, "MPUB")?;
            Ok(Parsed::NeedsBody(BodyCommand::Mpub(topic_param(
                params[1], "MPUB",
            )?)))
        }
        b"DPUB" => {
            need(&params, 3, "DPUB")?;
            let topic = topic_param(params[1], "DPUB")?;
            let ms = int_param(params[2], "DPUB", "timeout")?;
            if ms < 0 || ms as u64 > limits.max_defer_ms {
                return Err(ProtocolError::invalid(format!(
                    "DPUB timeout {ms} out of range 0-{}",
                    limits.max_defer_ms
                )));
            }
            Ok(Parsed::NeedsBody(BodyCommand::Dpub(topic, ms as u64)))
        }
        b"SUB" => {
            need(&params, 3, "SUB")?;
            let topic = topic_param(params[1], "SUB")?;
            let channel = match std::str::from_utf8(params[2]) {
                Ok(c) if is_valid_name(c) => c.to_owned(),
                _ => {
                    return Err(ProtocolError::new(
                        ErrorCode::BadChannel,
                        format!("SUB channel name {:?} is not valid", text(params[2])),
                    ));
                }
            };
            done(Command::Sub { topic, channel })
        }
        b"RDY" => match params.get(1) {
            None => done(Command::Rdy(1)),
            Some(raw) => done(Command::Rdy(int_param(raw, "RDY", "count")?)),
        },
        b"FIN" => {
            need(&params, 2, "FIN")?;
            done(Command::Fin(id_param(params[1])?))
        }
        b"TOUCH" => {
            need(&params, 2, "TOUCH")?;
            done(Command::Touch(id_param(params[1])?))
        }
        b"REQ" => {
            need(&params, 3, "REQ")?;
            let id = id_param(params[1])?;
            let delay_ms = int_param(params[2], "REQ", "timeout")?;
            done(Command::Req { id, delay_ms })
        }
        b"NOP" => done(Command::Nop),
        b"CLS" => done(Command::Cls),
        other => Err(ProtocolError::invalid(format!(
            "invalid command {}",
            text(other)
        ))),
    }
}

/// Splits an MPUB body `[u32 n]([u32 len][bytes])*` into its messages (zero-copy).
///
/// Errors: bad count or trailing bytes → `E_BAD_BODY`; a message of size 0 or above
/// `max_message_bytes` → `E_BAD_MESSAGE`.
pub fn decode_mpub_body(
    mut body: Bytes,
    max_message_bytes: u64,
) -> Result<Vec<Bytes>, ProtocolError> {
    if body.len() < 4 {
        return Err(ProtocolError::new(
            ErrorCode::BadBody,
            "MPUB invalid body size",
        ));
    }
    let count = body.get_u32();
    let most = (body.len() / 5) as u64;
    if count == 0 || count > MAX_MPUB_MESSAGES || u64::from(count) > most {
        return Err(ProtocolError::new(
            ErrorCode::BadBody,
            format!("MPUB invalid message count {count}"),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        if body.len() < 4 {
            return Err(ProtocolError::new(
                ErrorCode::BadBody,
                "MPUB body truncated",
            ));
        }
        let len = body.get_u32();
        if len == 0 || u64::from(len) > max_message_bytes {
            return Err(ProtocolError::new(
                ErrorCode::BadMessage,
                format!("MPUB invalid message({i}) body size {len}"),
            ));
        }
        if body.len() < len as usize {
            return Err(ProtocolError::new(
                ErrorCode::BadBody,
                "MPUB body truncated",
            ));
        }
        out.push(body.split_to(len as usize));
    }
    if !body.is_empty() {
        return Err(ProtocolError::new(
            ErrorCode::BadBody,
            format!("MPUB {} trailing bytes after {count} messages", body.len()),
        ));
    }
    Ok(out)
}

/// Encodes messages as an MPUB body (for clients and tests).
pub fn encode_mpub_body(messages: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + messages.iter().map(|m| m.len() + 4).sum::<usize>());
    out.extend_from_slice(&(messages.len() as u32).to_be_bytes());
    for m in messages {
        out.extend_from_slice(&(m.len() as u32).to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

/// Splits an HTTP text-mode `/mpub` body on `\n`, dropping empty lines (nsqd behaviour).
pub fn split_text_mpub(body: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in body.iter().enumerate() {
        if b == b'\n' {
            if i > start {
                out.push(body.slice(start..i));
            }
            start = i + 1;
        }
    }
    if start < body.len() {
        out.push(body.slice(start..));
    }
    out
}
