//! `/v1/registry` and `/v1/registry/head` bodies.
//!
//! Readiness: `publish_ready` = accepting ∧ storage healthy ∧ fences ready ∧ disk admission
//! ok; `consume_ready` = delivering ∧ storage healthy ∧ fences ready ∧ (accepting ∨
//! backlog/in-flight remains); head `ready` = delivering ∧ storage healthy ∧ fences ready.
//! Fences are ready unless console management is on and no `/v1/manage/fences/sync` has
//! arrived since start ([`super::manage::Fences::ready`]).

use rustqueue_api::contract::{DATA_FORMAT, Registry, RegistryHead, RegistryTopic};
use rustqueue_engine::EngineStats;

use super::ControlState;
use super::capabilities::CapabilityError;
use super::drain::{counts, topic_stored};

/// The readiness facts behind the registry's ready flags and the observe head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyFacts {
    /// Storage not isolated and not shutting down.
    pub storage_ok: bool,
    /// Not draining.
    pub accepting: bool,
    /// Deliveries not frozen.
    pub delivering: bool,
    /// No disk pressure.
    pub disk_ok: bool,
    /// Management fences synced (always with management off).
    pub fences_ready: bool,
}

impl ReadyFacts {
    /// The facts as they are now.
    pub fn now(state: &ControlState) -> ReadyFacts {
        let h = state.engine.health();
        ReadyFacts {
            storage_ok: h.storage_fault.is_none() && !h.shutting_down,
            accepting: !state.is_draining(),
            delivering: !h.deliveries_frozen,
            disk_ok: h.disk_pressure.is_none(),
            fences_ready: state.fences.ready(),
        }
    }

    /// Head `ready`: delivering ∧ storage ∧ fences.
    pub fn ready(self) -> bool {
        self.delivering && self.storage_ok && self.fences_ready
    }

    /// `publish_ready`: accepting ∧ storage ∧ fences ∧ disk.
    pub fn publish_ready(self) -> bool {
        self.accepting && self.storage_ok && self.fences_ready && self.disk_ok
    }

    /// `consume_ready`: delivering ∧ storage ∧ fences ∧ (accepting ∨ work left).
    pub fn consume_ready(self, has_work: bool) -> bool {
        self.ready() && (self.accepting || has_work)
    }
}

/// Whether anything is stored, waiting or in flight.
pub fn has_work(stats: &EngineStats) -> bool {
    let c = counts(stats);
    c.stored_messages > 0 || c.depth > 0 || c.in_flight > 0
}

fn head_from(state: &ControlState, stats: &EngineStats) -> RegistryHead {
    let f = ReadyFacts::now(state);
    RegistryHead {
        format: DATA_FORMAT,
        revision: state.engine.registry_revision(),
        node_id: state.node.node_id,
        ready: f.ready(),
        publish_ready: f.publish_ready(),
        consume_ready: f.consume_ready(has_work(stats)),
    }
}

/// `GET /v1/registry/head`.
pub fn head(state: &ControlState) -> RegistryHead {
    head_from(state, &state.engine.stats(None, None))
}

/// `GET /v1/registry`.
pub fn full(state: &ControlState) -> Result<Registry, CapabilityError> {
    let stats = state.engine.stats(None, None);
    let c = counts(&stats);
    let topics = stats
        .topics
        .iter()
        .map(|t| RegistryTopic {
            name: t.name.clone(),
            paused: t.paused,
            channels: t.channels.iter().map(|ch| ch.name.clone()).collect(),
            stored_messages: topic_stored(t),
        })
        .collect();
    Ok(Registry {
        head: head_from(state, &stats),
        broadcast_address: state.node.broadcast_address.clone(),
        tcp_port: state.node.tcp_port,
        http_port: state.node.http_port,
        stored_messages: c.stored_messages,
        depth: c.depth,
        in_flight: c.in_flight,
        topics,
        compatibility: state.capabilities()?,
    })
}
