//! `GET /v1/stats` (and the topic catalog of `GET /v1/observe`): the engine's stats in the
//! contract's [`Stats`] shape. Counts only; no message body is ever read here.

use std::time::{SystemTime, UNIX_EPOCH};

use rustqueue_api::contract::{Stats, StatsChannel, StatsTopic};
use rustqueue_engine::{ChannelStats, EngineStats, TopicStats};

use super::ControlState;
use super::drain::topic_stored;

/// Wall clock, ms since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `GET /v1/stats`, optionally filtered to a topic and channel.
pub fn stats(state: &ControlState, topic: Option<&str>, channel: Option<&str>) -> Stats {
    let s = state.engine.stats(topic, channel);
    Stats {
        complete: true,
        node_id: state.node.node_id,
        collected_at_ms: now_ms(),
        topics: topics(&s),
    }
}

/// Every topic of an engine stats document, in name order.
pub fn topics(s: &EngineStats) -> Vec<StatsTopic> {
    s.topics.iter().map(topic).collect()
}

fn topic(t: &TopicStats) -> StatsTopic {
    StatsTopic {
        name: t.name.clone(),
        paused: t.paused,
        published_count: t.message_count,
        message_count: topic_stored(t),
        segment_count: t.segment_count,
        segment_bytes: t.segment_bytes,
        last_durable_position: t.last_durable_position,
        unsynced_messages: t.unsynced_messages,
        unsynced_bytes: t.unsynced_bytes,
        sync_lag_ms: t.sync_lag_ms,
        channels: t.channels.iter().map(channel).collect(),
    }
}

fn channel(c: &ChannelStats) -> StatsChannel {
    StatsChannel {
        name: c.name.clone(),
        depth: c.depth,
        message_count: c.message_count,
        in_flight_count: c.in_flight_count,
        deferred_count: c.deferred_count,
        requeue_count: c.requeue_count,
        timeout_count: c.timeout_count,
        paused: c.paused,
        ephemeral: c.ephemeral,
        ack_cursor: c.ack_cursor,
        ack_gap: c.ack_gap,
    }
}
