//! `rustqueue-bench`: a load generator and ledger checker for NSQ V2 brokers, used to measure
//! RustQueue side by side with official nsqd on the same machine.
//!
//! - [`wire`] and [`client`]: a small hand-written NSQ V2 client (the benchmark shares no code
//!   with the broker it measures).
//! - [`ledger`]: every body carries a unique sequence id; missing, duplicate and unexpected
//!   deliveries are counted, and a result only counts after a complete drain.
//! - [`load`] and [`run`]: producers (PUB/MPUB, timed acks) and consumers (RDY/FIN), one run.
//! - [`procstat`]: broker RSS and CPU from `/proc`.
//! - [`broker`], [`compare`] and [`report`]: the side-by-side driver behind `make bench`.
//! - [`disk`], [`restart`] and [`idle`]: the cases that are not producer/consumer loads (the
//!   disk's own limits, restart time with a backlog, many idle topics); [`http`] is the small
//!   HTTP client they use.
//! - [`floor`]: a server doing only the protocol's socket work, run beside the brokers to show
//!   the part of their cost the protocol and the host set.
//! - [`sweep`] and [`cluster`]: the curves (one parameter swept at a time, drawn as SVG), and
//!   the servers the brokers curve starts (several brokers behind the gateway, or several nsqd).

pub mod broker;
pub mod client;
pub mod cluster;
pub mod compare;
pub mod disk;
pub mod floor;
pub mod http;
pub mod idle;
pub mod ledger;
pub mod load;
pub mod procstat;
pub mod report;
pub mod restart;
pub mod run;
pub mod sweep;
pub mod tiered;
pub mod wire;
