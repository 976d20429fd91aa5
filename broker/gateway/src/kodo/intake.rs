//! Reading a producer's commands: the task that decodes the socket with the shared codec
//! and hands each command, with its in-flight reservation, to the session through a
//! 1-deep channel.
//!
//! The working set of a command with a body is reserved from the node-wide in-flight budget
//! as soon as its size is known, before the body is read (at most one read buffer of it has
//! arrived). When the budget cannot hold it the connection is closed without an answer, so
//! the producer fails over to another advertised gateway identity.

use std::time::Duration;

use bytes::BytesMut;
use rustqueue_protocol::{Command, Decoder, DecoderLimits, ProtocolError};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::config::MPUB_ENTRY_OVERHEAD;
use crate::budget::ByteBudget;
use crate::metrics::Metrics;

/// A producer has this long to send each whole command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// What the session receives.
#[derive(Debug)]
pub enum Intake {
    /// A command; the reservation is held until the session has finished with it.
    Command(Command, Option<OwnedSemaphorePermit>),
    /// A decode error: sent to the producer, then the connection closes.
    Fatal(ProtocolError),
}

/// Which working-set rule a body follows (from the command line's first word; the codec
/// has already validated the line when the size is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// IDENTIFY: the body, its parsed copy and the reply.
    Identify,
    /// MPUB: the body plus per-entry bookkeeping.
    Mpub,
    /// PUB, DPUB, AUTH: the body.
    Plain,
}

impl BodyKind {
    /// The kind of the command line at the start of `buf`.
    pub fn of_line(buf: &[u8]) -> BodyKind {
        let name = buf
            .split(|b| *b == b' ' || *b == b'\n' || *b == b'\r')
            .next()
            .unwrap_or_default();
        match name {
            b"IDENTIFY" => BodyKind::Identify,
            b"MPUB" => BodyKind::Mpub,
            _ => BodyKind::Plain,
        }
    }
}

/// Bytes reserved for a body of `len` bytes.
pub fn working_set(kind: BodyKind, len: usize) -> u64 {
    let len = len as u64;
    match kind {
        BodyKind::Identify => 3 * len + 4096,
        BodyKind::Mpub => {
            let most_entries =
                (len / 5).min(u64::from(rustqueue_protocol::command::MAX_MPUB_MESSAGES));
            len + most_entries * MPUB_ENTRY_OVERHEAD
        }
        BodyKind::Plain => len,
    }
}

/// Why reading stopped.
enum Stop {
    /// EOF, a read error, or the budget could not hold the next command.
    Close,
    /// The codec refused the stream.
    Fatal(ProtocolError),
}

/// Read commands from `rd` (with `buf` holding what was read after the magic) until the
/// producer leaves, the channel closes, or a command is refused.
pub async fn run(
    mut rd: OwnedReadHalf,
    mut buf: BytesMut,
    limits: DecoderLimits,
    budget: ByteBudget,
    metrics: Metrics,
    tx: mpsc::Sender<Intake>,
) {
    let mut decoder = Decoder::new(limits);
    buf.reserve(READ_BUFFER_BYTES);
    loop {
        let next = next_command(&mut rd, &mut buf, &mut decoder, &budget, &metrics);
        let intake = match tokio::time::timeout(COMMAND_TIMEOUT, next).await {
            Err(_) | Ok(Err(Stop::Close)) => return,
            Ok(Err(Stop::Fatal(e))) => Intake::Fatal(e),
            Ok(Ok(i)) => i,
        };
        let fatal = matches!(intake, Intake::Fatal(_));
        if tx.send(intake).await.is_err() || fatal {
            return;
        }
    }
}

async fn next_command(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
    decoder: &mut Decoder,
    budget: &ByteBudget,
    metrics: &Metrics,
) -> Result<Intake, Stop> {
    let mut kind = BodyKind::Plain;
    let mut reserved: Option<OwnedSemaphorePermit> = None;
    loop {
        if decoder.between_commands() {
            kind = BodyKind::of_line(buf);
        }
        let decoded = decoder.decode(buf).map_err(Stop::Fatal)?;
        let pending = match &decoded {
            Some(cmd) => body_len(cmd),
            None => decoder.pending_body_len(),
        };
        if reserved.is_none()
            && let Some(len) = pending
        {
            reserved = Some(reserve(budget, working_set(kind, len), metrics)?);
            buf.reserve(len.saturating_sub(buf.len()));
        }
        if let Some(cmd) = decoded {
            return Ok(Intake::Command(cmd, reserved));
        }
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(Stop::Close),
            Ok(_) => {}
        }
    }
}

/// The body length of a command decoded in one go (its body arrived with its line).
fn body_len(cmd: &Command) -> Option<usize> {
    match cmd {
        Command::Identify(b) | Command::Auth(b) => Some(b.len()),
        Command::Pub { body, .. } | Command::Dpub { body, .. } => Some(body.len()),
        Command::Mpub { bodies, .. } => Some(4 + bodies.iter().map(|b| 4 + b.len()).sum::<usize>()),
        _ => None,
    }
}

fn reserve(
    budget: &ByteBudget,
    bytes: u64,
    metrics: &Metrics,
) -> Result<OwnedSemaphorePermit, Stop> {
    let permits = u32::try_from(bytes).map_err(|_| Stop::Close)?;
    budget.try_reserve(permits).ok_or_else(|| {
        metrics.kodo_budget_closes.inc();
        tracing::info!(
            bytes,
            "in-flight budget spent: closing the producer connection"
        );
        Stop::Close
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_kind_is_the_command_lines_first_word() {
        let cases: [(&[u8], BodyKind); 7] = [
            (b"IDENTIFY\n\0\0", BodyKind::Identify),
            (b"MPUB t\n", BodyKind::Mpub),
            (b"MPUB", BodyKind::Mpub),
            (b"PUB t\n", BodyKind::Plain),
            (b"MPUBX t\n", BodyKind::Plain),
            (b"DPUB t 10\n", BodyKind::Plain),
            (b"", BodyKind::Plain),
        ];
        for (line, want) in cases {
            assert_eq!(BodyKind::of_line(line), want, "{line:?}");
        }
    }

    #[test]
    fn working_sets_cover_what_a_command_holds() {
        let mib = 1024 * 1024;
        assert_eq!(working_set(BodyKind::Plain, 100 * mib), 100 * mib as u64);
        assert_eq!(working_set(BodyKind::Identify, mib), 3 * mib as u64 + 4096);
        // A 128 MiB MPUB may hold at most 65,536 entries.
        assert_eq!(
            working_set(BodyKind::Mpub, 128 * mib),
            128 * mib as u64 + 65_536 * 128
        );
        // A small MPUB holds at most len / 5 entries ([u32 len][>= 1 byte]).
        assert_eq!(working_set(BodyKind::Mpub, 4 + 5 * 10), 54 + 10 * 128);
        // The largest never exceeds what Kodo's validation demands of the budget.
        assert!(
            working_set(BodyKind::Mpub, 128 * mib)
                <= super::super::config::worst_case_working_set(100 * mib as u64, 128 * mib as u64)
        );
    }
}
