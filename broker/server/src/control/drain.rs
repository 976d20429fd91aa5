//! Drain and delivery freeze (`GET|POST /v1/drain`) and readiness (`GET /v1/health`).
//!
//! Draining refuses publishes; freezing stops handing out messages so in-flight work can
//! reach zero. `quiesced` = draining ∧ frozen ∧ nothing in flight ∧ both in-flight byte
//! gauges 0; `empty` additionally needs nothing stored and zero depth.

use rustqueue_api::contract::{DrainRequest, DrainStatus, Health, NotReadyReason};
use rustqueue_engine::EngineStats;

use super::ControlState;

/// Message counts over all topics and channels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Messages not yet finished by every channel of their topic (for a topic without
    /// channels: every message it retains, since unrouted messages are never collected).
    pub stored_messages: u64,
    /// Messages waiting for delivery (ready + deferred) over all channels.
    pub depth: u64,
    /// Messages delivered and not yet finished over all channels.
    pub in_flight: u64,
}

/// Sums an engine stats document into [`Counts`].
pub fn counts(stats: &EngineStats) -> Counts {
    let mut c = Counts::default();
    for t in &stats.topics {
        c.stored_messages += topic_stored(t);
        for ch in &t.channels {
            c.depth += ch.depth + ch.deferred_count;
            c.in_flight += ch.in_flight_count;
        }
    }
    c
}

/// Messages a topic still holds for its consumers (see [`Counts::stored_messages`]).
pub fn topic_stored(t: &rustqueue_engine::TopicStats) -> u64 {
    if t.channels.is_empty() {
        t.message_count
    } else {
        t.channels
            .iter()
            .map(|ch| ch.depth + ch.deferred_count + ch.in_flight_count)
            .max()
            .unwrap_or(0)
    }
}

/// Applies a drain request: `enabled:false` clears drain and freeze.
pub fn apply(state: &ControlState, req: DrainRequest) {
    state.set_draining(req.enabled);
    state
        .engine
        .set_deliveries_frozen(req.enabled && req.freeze_deliveries);
}

/// The current drain status.
pub fn status(state: &ControlState) -> DrainStatus {
    let c = counts(&state.engine.stats(None, None));
    let (publish_inflight_bytes, delivery_inflight_bytes) = state.engine.inflight_bytes();
    let draining = state.is_draining();
    let delivery_frozen = state.engine.health().deliveries_frozen;
    let quiesced = draining
        && delivery_frozen
        && c.in_flight == 0
        && publish_inflight_bytes == 0
        && delivery_inflight_bytes == 0;
    let empty = c.stored_messages == 0
        && c.depth == 0
        && c.in_flight == 0
        && publish_inflight_bytes == 0
        && delivery_inflight_bytes == 0;
    DrainStatus {
        draining,
        delivery_frozen,
        quiesced,
        empty,
        drained: empty,
        stored_messages: c.stored_messages,
        depth: c.depth,
        in_flight: c.in_flight,
        publish_inflight_bytes,
        delivery_inflight_bytes,
    }
}

/// Readiness, checked in the documented order: draining, disk pressure, storage fault,
/// management fences not synced since start.
pub fn health(state: &ControlState) -> Health {
    let h = state.engine.health();
    let reason = if state.is_draining() {
        Some(NotReadyReason::Draining)
    } else if h.disk_pressure.is_some() {
        Some(NotReadyReason::DiskPressure)
    } else if h.storage_fault.is_some() {
        Some(NotReadyReason::StorageFault)
    } else if !state.fences.ready() {
        Some(NotReadyReason::ManagementFencesStale)
    } else {
        None
    };
    match reason {
        None => Health::ready(state.node.node_id),
        Some(reason) => Health::NotReady {
            reason,
            node_id: state.node.node_id,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustqueue_engine::{ChannelStats, TopicStats};

    fn channel(depth: u64, in_flight: u64, deferred: u64) -> ChannelStats {
        ChannelStats {
            channel_name: "c".into(),
            name: "c".into(),
            depth,
            memory_depth: 0,
            backend_depth: depth,
            message_count: 0,
            in_flight_count: in_flight,
            deferred_count: deferred,
            requeue_count: 0,
            timeout_count: 0,
            client_count: 0,
            clients: vec![],
            paused: false,
            ..ChannelStats::default()
        }
    }

    fn topic(message_count: u64, channels: Vec<ChannelStats>) -> TopicStats {
        TopicStats {
            topic_name: "t".into(),
            name: "t".into(),
            depth: 0,
            memory_depth: 0,
            backend_depth: 0,
            message_count,
            paused: false,
            channels,
            unsynced_messages: 0,
            unsynced_bytes: 0,
            last_durable_position: 0,
            ..TopicStats::default()
        }
    }

    #[test]
    fn counts_sum_channels_and_keep_unrouted_topics_stored() {
        let stats = EngineStats {
            health: "OK".into(),
            start_time: 0,
            topics: vec![
                topic(10, vec![channel(3, 1, 1), channel(0, 0, 0)]),
                topic(7, vec![]),
            ],
        };
        let c = counts(&stats);
        assert_eq!(c.depth, 4);
        assert_eq!(c.in_flight, 1);
        assert_eq!(c.stored_messages, 5 + 7);
    }
}
