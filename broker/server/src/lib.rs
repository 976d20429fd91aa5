//! `rustqueued`: the RustQueue broker process.
//!
//! It puts the NSQ V2 TCP protocol (`tcp`), the nsqd-compatible HTTP API (`http`), TLS,
//! AUTH and stream compression in front of `rustqueue-engine`, configured by `config`.
//! [`start`] binds both listeners and returns a [`Running`] handle, which the binary and the
//! integration tests use alike.

pub mod auth;
pub mod clients;
pub mod compress;
pub mod config;
pub mod control;
pub mod http;
pub mod https;
pub mod isolation;
pub mod lookupd;
pub mod server;
pub mod state;
pub mod tcp;
pub mod tls;

pub use server::{Running, StartError, start};
