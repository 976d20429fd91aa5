//! Types shared by the RustQueue broker and its operator.
//!
//! - [`contract`]: the broker control contract (`/v1/capabilities`, `/v1/health`, `/v1/drain`,
//!   `/v1/registry`, `/v1/registry/head`). The broker serves these types and the operator reads
//!   them, so both sides compile the same definitions. Versioned: every type here is the
//!   `v1` wire shape; a breaking change gets a new module.
//! - [`broker_config`]: the broker's TOML configuration and its environment overrides; the
//!   broker reads it and the operator renders it from the same types.
//! - [`gateway`]: the gateway's environment names, limits, and the Kodo gateway's ports and
//!   grace; the operator renders them and the gateway checks them.
//! - [`labels`]: label keys, annotation keys, well-known ports and file paths that rendered
//!   Kubernetes objects and the broker agree on.
//! - `telemetry` (feature `telemetry`): the log format switch and the build-info and process
//!   metrics every binary shares.
//! - `otel` (feature `otel`): traces over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and
//!   the one tracer hot paths check before they build a span (docs/observability.md).
//! - `http_client` (feature `http-client`): the one way every crate builds a reqwest client,
//!   with its TLS on ring.
//! - `crd` (feature `kube`): the `RustQueue` custom resource (`rustqueue.io/v1alpha1`). The
//!   broker builds this crate without the feature and so never compiles `kube`.

pub mod broker_config;
pub mod contract;
pub mod gateway;
pub mod labels;

#[cfg(feature = "kube")]
pub mod crd;

#[cfg(feature = "telemetry")]
pub mod telemetry;

#[cfg(feature = "http-client")]
pub mod http_client;

#[cfg(feature = "otel")]
pub mod otel;
