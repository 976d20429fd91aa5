//! Builds a [`Snapshot`] from one collection: brokers as observed, topics and channels summed
//! over their owners, storage totals and merged histograms.

use std::collections::BTreeMap;

use rustqueue_api::contract::Observation;
use rustqueue_api::crd::RustQueue;

use super::{
    BrokerView, ChannelView, ClusterView, MAX_EVENTS, ManagementView, SNAPSHOT_SCHEMA_VERSION,
    Snapshot, StorageView, Summary, TopicView,
};
use crate::cluster::{BrokerPod, BrokerPvc, ClusterEvent};

/// One broker as this collection saw it.
#[derive(Debug, Clone, Default)]
pub struct BrokerState {
    /// The Pod.
    pub pod: BrokerPod,
    /// Its PVC.
    pub pvc: Option<BrokerPvc>,
    /// Its latest observation.
    pub observation: Option<Observation>,
    /// Why this collection failed to observe it.
    pub error: Option<String>,
}

/// What one collection read.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Wall clock, ms since the Unix epoch.
    pub now_ms: u64,
    /// The RustQueue.
    pub rustqueue: RustQueue,
    /// Broker Pods with what was observed of each.
    pub brokers: Vec<BrokerState>,
    /// Events of the namespace.
    pub events: Vec<ClusterEvent>,
    /// Failures outside the brokers (listing Pods, PVCs, Events).
    pub errors: Vec<String>,
}

/// The snapshot of `c`, without rates, trend, anomalies or management facts (the collector
/// adds those).
pub fn build(c: Collected) -> Snapshot {
    let cluster = cluster_view(&c.rustqueue);
    let status = c.rustqueue.status.clone().unwrap_or_default();
    let mut errors = c.errors;
    for b in &c.brokers {
        if let Some(e) = &b.error {
            errors.push(format!("broker {}: {e}", b.pod.name));
        }
    }
    let desired = usize::try_from(cluster.desired_brokers.unwrap_or(0)).unwrap_or(0);
    let complete = !c.brokers.is_empty() && errors.is_empty() && c.brokers.len() >= desired;
    let events = events_of(&c.rustqueue, c.events);
    let mut brokers: Vec<BrokerView> = c.brokers.into_iter().map(broker_view).collect();
    brokers.sort_by(|a, b| a.name.cmp(&b.name));
    Snapshot {
        schema_version: SNAPSHOT_SCHEMA_VERSION,
        collected_at_ms: c.now_ms,
        complete,
        errors,
        summary: summary(&brokers),
        topics: topics(&brokers),
        storage: storage(&brokers),
        brokers,
        cluster,
        conditions: status.conditions,
        current_operation: status.current_operation,
        operation_history: status.operation_history,
        events,
        anomalies: Vec::new(),
        history: Vec::new(),
        management: ManagementView::default(),
    }
}

fn cluster_view(rq: &RustQueue) -> ClusterView {
    let status = rq.status.clone().unwrap_or_default();
    ClusterView {
        name: rq.metadata.name.clone().unwrap_or_default(),
        namespace: rq.metadata.namespace.clone().unwrap_or_default(),
        uid: rq.metadata.uid.clone().unwrap_or_default(),
        phase: status.phase,
        message: status.message,
        desired_brokers: status.desired_brokers,
        ready_brokers: status.ready_brokers,
        active_storage_feature_level: status.active_storage_feature_level,
        observed_generation: status.observed_generation,
        generation: rq.metadata.generation,
        spec: serde_json::to_value(&rq.spec).unwrap_or_default(),
    }
}

/// Events involving the RustQueue (by uid) or an object named `<n>` or `<n>-*`, newest first.
fn events_of(rq: &RustQueue, mut events: Vec<ClusterEvent>) -> Vec<ClusterEvent> {
    let name = rq.metadata.name.clone().unwrap_or_default();
    let uid = rq.metadata.uid.clone().unwrap_or_default();
    let prefix = format!("{name}-");
    events.retain(|e| {
        (!uid.is_empty() && e.object_uid == uid)
            || e.object_name == name
            || e.object_name.starts_with(&prefix)
    });
    events.sort_by_key(|e| std::cmp::Reverse(e.last_seen_ms));
    events.truncate(MAX_EVENTS);
    events
}

fn broker_view(b: BrokerState) -> BrokerView {
    BrokerView {
        uid: b.pod.uid,
        name: b.pod.name,
        node_name: b.pod.node_name,
        pod_ip: b.pod.pod_ip,
        phase: b.pod.phase,
        ready: b.pod.ready,
        restarts: b.pod.restarts,
        image: b.pod.image,
        image_id: b.pod.image_id,
        started_at: b.pod.started_at,
        pvc: b.pvc,
        observation: b.observation,
        error: b.error,
    }
}

fn observed(brokers: &[BrokerView]) -> impl Iterator<Item = (&str, &Observation)> {
    brokers
        .iter()
        .filter_map(|b| b.observation.as_ref().map(|o| (b.name.as_str(), o)))
}

fn summary(brokers: &[BrokerView]) -> Summary {
    let mut s = Summary::default();
    for (_, o) in observed(brokers) {
        let a = &o.queue.aggregates;
        let r = &o.head.runtime;
        s.stored_messages += a.stored_messages;
        s.depth += a.depth;
        s.in_flight += a.in_flight;
        s.deferred += a.deferred;
        s.connections += r.tcp_connections;
        s.retry_total += r.requeued_messages_total;
        s.dead_letter_total += r.dead_letter_messages_total;
        s.throttled_total += r.publish_throttled_requests_total;
    }
    s
}

/// Topics and channels summed over the brokers that hold them.
pub(crate) fn topics(brokers: &[BrokerView]) -> Vec<TopicView> {
    let mut topics: BTreeMap<String, TopicView> = BTreeMap::new();
    let mut channels: BTreeMap<(String, String), ChannelView> = BTreeMap::new();
    for (owner, o) in observed(brokers) {
        for t in &o.queue.topics {
            let v = topics.entry(t.name.clone()).or_insert_with(|| TopicView {
                name: t.name.clone(),
                ..TopicView::default()
            });
            v.owners.push(owner.to_string());
            v.paused |= t.paused;
            v.stored_messages += t.message_count;
            v.segment_count += t.segment_count;
            v.segment_bytes += t.segment_bytes;
            for c in &t.channels {
                let key = (t.name.clone(), c.name.clone());
                let cv = channels.entry(key).or_insert_with(|| ChannelView {
                    name: c.name.clone(),
                    ..ChannelView::default()
                });
                cv.owners.push(owner.to_string());
                cv.depth += c.depth;
                cv.in_flight += c.in_flight_count;
                cv.deferred += c.deferred_count;
                cv.ack_gap += c.ack_gap;
                cv.paused |= c.paused;
                cv.ephemeral |= c.ephemeral;
            }
        }
    }
    for ((topic, _), c) in channels {
        if let Some(t) = topics.get_mut(&topic) {
            t.channels.push(c);
        }
    }
    topics.into_values().collect()
}

fn storage(brokers: &[BrokerView]) -> StorageView {
    let mut s = StorageView::default();
    for (name, o) in observed(brokers) {
        let d = &o.head.disk;
        s.total_bytes += d.total_bytes;
        s.available_bytes += d.available_bytes;
        s.segment_count += o.storage.segment_count;
        s.segment_bytes += o.storage.segment_bytes;
        if d.pressure {
            s.pressure_brokers.push(name.to_string());
        }
        let h = &o.queue.histograms;
        s.fsync.merge(&h.storage_fsync);
        s.group_commit_wait.merge(&h.group_commit_wait);
        s.payload_read.merge(&h.payload_read);
        s.scrub.merge(&h.storage_scrub);
        s.gc.merge(&h.storage_gc);
    }
    s.used_percent = used_percent(s.total_bytes, s.available_bytes);
    s
}

/// Used share of `total`, percent (0 for an empty disk).
pub(crate) fn used_percent(total: u64, available: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    total.saturating_sub(available) as f64 * 100.0 / total as f64
}

#[cfg(test)]
pub(crate) mod tests;
