//! `rustqueue-gateway`: one address for NSQ producers in front of a RustQueue cluster
//! (docs/gateway.md), in two front-ends over one core.
//!
//! ```text
//!  discovery replicas ──(2 s polls, revisions must agree)──> discovery::Client
//!                                                               │ replace
//!                                                               v
//!  core: bind, pool::Pools, budget (bytes, connections), probes, drain, errors
//!    ├─ standard: TCP :4150 tunnels (cap, least-active) │ HTTP :4151 forwarding
//!    └─ kodo:     TCP :4150 producer protocol, publish  │ HTTP stats shards, :4160 probes
//! ```
//!
//! The face: [`Cli`] and [`Config`] (flags, environment and the startup rules),
//! [`KodoSettings`] (what Kodo mode adds), the two running gateways [`Gateway`] and
//! [`KodoGateway`], and their errors. Everything else is private; the integration tests use
//! the feature `test-support` to read the pools, the metrics and the budget through
//! `observe()`.

mod budget;
mod config;
mod core;
mod discovery;
mod error;
mod kodo;
mod metrics;
mod pool;
mod standard;

pub use crate::config::{Cli, Config, ConfigError};
#[cfg(feature = "test-support")]
pub use crate::core::Running;
pub use crate::error::StartError;
pub use crate::kodo::{KodoConfigError, KodoGateway, KodoSettings};
#[cfg(feature = "test-support")]
pub use crate::pool::{Backend, Pools};
pub use crate::standard::Gateway;
