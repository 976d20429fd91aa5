//! `/v1/registry`, `/v1/registry/head` and `/v1/stats` bodies.
//!
//! Readiness: `publish_ready` = accepting ∧ storage healthy ∧ disk admission ok;
//! `consume_ready` = delivering ∧ storage healthy ∧ (accepting ∨ backlog/in-flight remains);
//! head `ready` = delivering ∧ storage healthy. (Management fences are not implemented, so
//! they are always ready.)

use std::time::{SystemTime, UNIX_EPOCH};

use rustqueue_api::contract::{DATA_FORMAT, Registry, RegistryHead, RegistryTopic};
use rustqueue_engine::EngineStats;
use serde::Serialize;

use super::ControlState;
use super::capabilities::CapabilityError;
use super::drain::{counts, topic_stored};

fn head_from(state: &ControlState, stats: &EngineStats) -> RegistryHead {
    let h = state.engine.health();
    let storage_ok = h.storage_fault.is_none() && !h.shutting_down;
    let accepting = !state.is_draining();
    let delivering = !h.deliveries_frozen;
    let c = counts(stats);
    let has_work = c.stored_messages > 0 || c.depth > 0 || c.in_flight > 0;
    let consume_ready = delivering && storage_ok && (accepting || has_work);
    RegistryHead {
        format: DATA_FORMAT,
        revision: state.engine.registry_revision(),
        node_id: state.node.node_id,
        ready: delivering && storage_ok,
        publish_ready: accepting && storage_ok && h.disk_pressure.is_none(),
        consume_ready,
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

/// `GET /v1/stats` body.
#[derive(Debug, Serialize)]
pub struct NativeStats {
    /// Always true: this broker reports every topic it holds.
    pub complete: bool,
    /// Node id.
    pub node_id: u32,
    /// Wall clock of collection (ms since the epoch).
    pub collected_at_ms: u64,
    /// Topics in name order.
    pub topics: Vec<NativeTopic>,
}

/// One topic in `/v1/stats`.
#[derive(Debug, Serialize)]
pub struct NativeTopic {
    /// Topic name.
    pub name: String,
    /// Paused.
    pub paused: bool,
    /// Monotonic published count.
    pub published_count: u64,
    /// Messages still held for consumers.
    pub message_count: u64,
    /// Highest position on stable storage.
    pub last_durable_position: u64,
    /// Appended but not yet fsynced messages.
    pub unsynced_messages: u64,
    /// Appended but not yet fsynced bytes.
    pub unsynced_bytes: u64,
    /// Channels in name order.
    pub channels: Vec<NativeChannel>,
}

/// One channel in `/v1/stats`.
#[derive(Debug, Serialize)]
pub struct NativeChannel {
    /// Channel name.
    pub name: String,
    /// Ready backlog.
    pub depth: u64,
    /// Monotonic count of messages that reached the channel.
    pub message_count: u64,
    /// In flight.
    pub in_flight_count: u64,
    /// Deferred.
    pub deferred_count: u64,
    /// Monotonic REQ count.
    pub requeue_count: u64,
    /// Monotonic timeout count.
    pub timeout_count: u64,
    /// Paused.
    pub paused: bool,
}

/// `GET /v1/stats`, optionally filtered to a topic and channel.
pub fn stats(state: &ControlState, topic: Option<&str>, channel: Option<&str>) -> NativeStats {
    let s = state.engine.stats(topic, channel);
    NativeStats {
        complete: true,
        node_id: state.node.node_id,
        collected_at_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        topics: s
            .topics
            .iter()
            .map(|t| NativeTopic {
                name: t.name.clone(),
                paused: t.paused,
                published_count: t.message_count,
                message_count: topic_stored(t),
                last_durable_position: t.last_durable_position,
                unsynced_messages: t.unsynced_messages,
                unsynced_bytes: t.unsynced_bytes,
                channels: t
                    .channels
                    .iter()
                    .map(|c| NativeChannel {
                        name: c.name.clone(),
                        depth: c.depth,
                        message_count: c.message_count,
                        in_flight_count: c.in_flight_count,
                        deferred_count: c.deferred_count,
                        requeue_count: c.requeue_count,
                        timeout_count: c.timeout_count,
                        paused: c.paused,
                    })
                    .collect(),
            })
            .collect(),
    }
}
