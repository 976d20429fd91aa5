//! The broker control contract (docs/api.md): the `/v1/*` endpoints the operator, discovery and
//! CLI rely on, plus `/metrics`. The wire types come from `rustqueue-api`.
//!
//! - [`tokens`]: scoped token files, re-read on every check (rotation without restart).
//! - [`capabilities`]: storage feature levels, the build-time ceiling and the reader fence.
//! - [`drain`]: drain / delivery freeze and the readiness formulas.
//! - [`registry`]: `/v1/registry` and `/v1/registry/head` bodies and the readiness formulas.
//! - [`stats`]: `/v1/stats` in the contract's shape.
//! - [`observe`]: `/v1/observe/head` and `/v1/observe` (console token).
//! - [`manage`]: console management: operation catalog, tombstone fences, fence sync.
//! - [`metrics`]: the Prometheus registry with the metric names listed in docs/api.md.
//! - [`routes`]: the axum router over a [`ControlState`].

pub mod capabilities;
pub mod detailed;
pub mod drain;
pub mod manage;
pub mod metrics;
pub mod observe;
pub mod registry;
pub mod routes;
pub mod stats;
pub mod tokens;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use rustqueue_api::contract::{BinaryCapabilities, Capabilities, StorageCapabilities, TokenScope};
use rustqueue_engine::Engine;

pub use routes::router;

/// Who this broker is, as advertised to clients.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Node id (ordinal + 1 under the operator).
    pub node_id: u32,
    /// Address clients should dial.
    pub broadcast_address: String,
    /// Advertised NSQ TCP port.
    pub tcp_port: u16,
    /// Advertised HTTP port.
    pub http_port: u16,
}

/// Everything the control endpoints need; shared by all handlers.
pub struct ControlState {
    /// The storage engine.
    pub engine: Engine,
    /// Token files per scope.
    pub tokens: tokens::TokenFiles,
    /// Identity and advertised addresses.
    pub node: NodeInfo,
    /// What this binary supports.
    pub binary: BinaryCapabilities,
    /// The data directory (for `COMPATIBILITY` and disk gauges).
    pub data_path: PathBuf,
    /// Prometheus metrics.
    pub metrics: metrics::Metrics,
    /// Tombstone fences (never refusing with management off).
    pub fences: manage::Fences,
    /// The operation catalog; `Some` only with `security.console_management_enabled` (the
    /// `/v1/manage/*` routes exist only then).
    pub management: Option<manage::Management>,
    /// Settings `/v1/observe` reports.
    pub settings: observe::ObserveSettings,
    draining: AtomicBool,
}

impl ControlState {
    /// A state that is not draining.
    pub fn new(
        engine: Engine,
        tokens: tokens::TokenFiles,
        node: NodeInfo,
        binary: BinaryCapabilities,
        data_path: PathBuf,
    ) -> Self {
        Self {
            engine,
            tokens,
            node,
            binary,
            data_path,
            metrics: metrics::Metrics::new(),
            fences: manage::Fences::disabled(),
            management: None,
            settings: observe::ObserveSettings::default(),
            draining: AtomicBool::new(false),
        }
    }

    /// Whether publishes must be refused (`POST /v1/drain` or shutdown in progress). The
    /// TCP and HTTP publish paths consult this and answer `E_DRAINING`.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst) || self.engine.health().shutting_down
    }

    /// Starts or stops draining (publish refusal only; see [`drain::apply`]).
    pub(crate) fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::SeqCst);
    }

    /// `GET /v1/capabilities`: the binary plus the directory's `COMPATIBILITY` as read now.
    pub fn capabilities(&self) -> Result<Capabilities, capabilities::CapabilityError> {
        let storage = capabilities::read_storage(&self.data_path)?.unwrap_or(StorageCapabilities {
            data_format: self.binary.data_format,
            active_writer_feature_level: 1,
            minimum_reader_feature_level: 1,
            generation: 1,
        });
        Ok(Capabilities {
            binary: self.binary.clone(),
            storage,
        })
    }
}

/// Token files of the `[security]` section.
pub fn token_files(sec: &crate::config::SecurityConfig) -> tokens::TokenFiles {
    tokens::TokenFiles::new()
        .with(TokenScope::Admin, sec.admin_token_file.clone())
        .with(TokenScope::Publish, sec.publish_token_file.clone())
        .with(TokenScope::Registry, sec.registry_token_file.clone())
        .with(TokenScope::Console, sec.console_token_file.clone())
}

/// This binary's capabilities under `cfg`'s size limits.
pub fn binary_capabilities(cfg: &crate::config::Config) -> BinaryCapabilities {
    capabilities::binary(cfg.queue.max_message_bytes, cfg.limits.max_body_bytes)
}

/// Refuses a data directory this binary must not open (see [`capabilities::preflight`]).
pub fn preflight(cfg: &crate::config::Config) -> Result<(), capabilities::CapabilityError> {
    capabilities::preflight(
        &cfg.storage.data_path,
        u32::from(cfg.storage.feature_level),
        &binary_capabilities(cfg),
    )
}

/// The control state of a broker started from `cfg` with the given advertised ports. With
/// console management on, the operation catalog and the fences are read from the data root
/// (a damaged one refuses the start).
pub fn from_config(
    cfg: &crate::config::Config,
    engine: Engine,
    tcp_port: u16,
    http_port: u16,
) -> Result<ControlState, rustqueue_engine::StorageError> {
    let mut state = ControlState::new(
        engine,
        token_files(&cfg.security),
        NodeInfo {
            node_id: cfg.node.id,
            broadcast_address: cfg.node.broadcast_address.clone(),
            tcp_port,
            http_port,
        },
        binary_capabilities(cfg),
        cfg.storage.data_path.clone(),
    );
    let m = &cfg.metrics;
    state
        .metrics
        .set_detail(m.detailed_queue_metrics.then_some(m.max_detailed_series));
    state.settings = observe::ObserveSettings::of(cfg);
    if cfg.security.console_management_enabled {
        state.fences = manage::Fences::open(&cfg.storage.data_path)?;
        state.management = Some(manage::Management::open(&cfg.storage.data_path)?);
    }
    Ok(state)
}
