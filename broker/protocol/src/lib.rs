//! Sans-IO codec for the NSQ V2 TCP protocol as spoken by `rustqueued`.
//!
//! Everything here is a pure function of its input bytes: the server (and test clients) own the
//! sockets and feed buffers in. The crate owns
//! - [`names`]: topic/channel name rules (`^[.a-zA-Z0-9_-]+(#ephemeral)?$`, 1..=64 bytes),
//! - [`error`]: the NSQ error codes and which of them close the connection,
//! - [`command`]: command-line parsing and the incremental [`command::Decoder`] that turns a
//!   byte stream into commands with their bodies (PUB/MPUB/DPUB/IDENTIFY/AUTH),
//! - [`identify`]: IDENTIFY JSON, validation against the nsqd ranges, the negotiation reply,
//! - [`frame`]: response/error/message frame encoding (and decoding, for clients and tests),
//! - [`lookup`]: the nsqlookupd-compatible JSON shapes served on the HTTP port,
//! - [`checksum`]: CRC-32C, for Snappy stream frames and dead-letter topic names.

pub mod checksum;
pub mod command;
pub mod error;
pub mod frame;
pub mod identify;
pub mod lookup;
pub mod names;

pub use command::{Command, Decoder, DecoderLimits, MessageId};
pub use error::{ErrorCode, ProtocolError};
pub use frame::{Frame, FrameType};

/// The 4-byte magic a V2 client sends first.
pub const MAGIC_V2: &[u8; 4] = b"  V2";
