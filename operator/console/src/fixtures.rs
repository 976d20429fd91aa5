//! Builders for tests: a RustQueue, observations with topics and channels, broker views and
//! snapshots.

use rustqueue_api::contract::{
    BinaryCapabilities, Capabilities, DeliveryBudget, GroupCommit, Histograms,
    OBSERVE_SCHEMA_VERSION, Observation, ObserveHead, ObservedDisk, ObservedLimits,
    ObservedManagement, ObservedNode, ObservedStorage, QueueAggregates, QueueObservation,
    Readiness, RuntimeCounters, StatsChannel, StatsTopic, StorageCapabilities,
};
use rustqueue_api::crd::{RustQueue, RustQueueSpec, RustQueueStatus};

use crate::snapshot::{BrokerView, Snapshot};

/// A RustQueue `q` in namespace `ns`, uid `rq-uid`, phase Ready with `brokers` desired.
pub fn rustqueue(brokers: i32) -> RustQueue {
    let spec: RustQueueSpec =
        serde_json::from_value(serde_json::json!({"image": "rustqueue:test"})).expect("spec");
    let mut rq = RustQueue::new("q", spec);
    rq.metadata.namespace = Some("ns".into());
    rq.metadata.uid = Some("rq-uid".into());
    rq.metadata.generation = Some(1);
    rq.status = Some(RustQueueStatus {
        phase: Some("Ready".into()),
        desired_brokers: Some(brokers),
        ready_brokers: Some(brokers),
        observed_generation: Some(1),
        ..RustQueueStatus::default()
    });
    rq
}

/// A topic `name` holding `messages`, with `channels` (name, depth).
pub fn topic(name: &str, messages: u64, channels: &[(&str, u64)]) -> StatsTopic {
    StatsTopic {
        name: name.into(),
        paused: false,
        published_count: messages,
        message_count: messages,
        segment_count: 1,
        segment_bytes: 100,
        last_durable_position: messages,
        unsynced_messages: 0,
        unsynced_bytes: 0,
        sync_lag_ms: 0,
        channels: channels
            .iter()
            .map(|(c, depth)| StatsChannel {
                name: (*c).into(),
                depth: *depth,
                message_count: *depth,
                in_flight_count: 0,
                deferred_count: 0,
                requeue_count: 0,
                timeout_count: 0,
                paused: false,
                ephemeral: c.ends_with("#ephemeral"),
                ack_cursor: 0,
                ack_gap: 0,
            })
            .collect(),
    }
}

fn capabilities() -> Capabilities {
    Capabilities {
        binary: BinaryCapabilities {
            binary_version: "test".into(),
            data_format: 7,
            minimum_reader_feature_level: 1,
            maximum_reader_feature_level: 2,
            maximum_writer_feature_level: 2,
            maximum_message_bytes: 1 << 20,
            maximum_batch_bytes: 1 << 20,
        },
        storage: StorageCapabilities {
            data_format: 7,
            active_writer_feature_level: 1,
            minimum_reader_feature_level: 1,
            generation: 1,
        },
    }
}

/// A healthy broker `node_id` holding `topics`.
pub fn observation(node_id: u32, topics: Vec<StatsTopic>) -> Observation {
    let head = ObserveHead {
        schema_version: OBSERVE_SCHEMA_VERSION,
        registry_revision: 1,
        collected_at_ms: 0,
        node: ObservedNode {
            id: node_id,
            address: format!("10.0.0.{node_id}"),
            version: "test".into(),
            data_format: 7,
            compatibility: capabilities(),
        },
        readiness: Readiness {
            process_ready: true,
            storage_healthy: true,
            disk_ready: true,
            publish_ready: true,
            consume_ready: true,
            draining: false,
            management_fences_ready: true,
        },
        disk: ObservedDisk {
            total_bytes: 1000,
            available_bytes: 800,
            used_percent: 20.0,
            pressure: false,
            high_watermark_percent: 85,
            low_watermark_percent: 80,
            min_free_bytes: 10,
            protective_eviction_enabled: false,
        },
        runtime: RuntimeCounters::default(),
        delivery_budget: DeliveryBudget::default(),
        limits: ObservedLimits {
            max_message_bytes: 1 << 20,
            publish_ack_mode: "durable".into(),
            relaxed_sync_messages: 0,
            relaxed_sync_bytes: 0,
            relaxed_sync_interval_ms: 0,
            message_index_cache_bytes: 0,
            max_connections: 0,
        },
        management: ObservedManagement {
            enabled: true,
            fence_revision: String::new(),
            tombstones: 0,
        },
    };
    let aggregates = QueueAggregates {
        topics: topics.len() as u64,
        stored_messages: topics.iter().map(|t| t.message_count).sum(),
        depth: topics
            .iter()
            .flat_map(|t| &t.channels)
            .map(|c| c.depth)
            .sum(),
        ..QueueAggregates::default()
    };
    Observation {
        head,
        storage: ObservedStorage::default(),
        catalog_collected_at_ms: 0,
        queue: QueueObservation {
            aggregates,
            group_commit: GroupCommit::default(),
            histograms: Histograms::default(),
            topics,
        },
    }
}

/// A ready broker Pod `name` (uid `uid-<name>`) with an empty, healthy observation.
pub fn broker_view(name: &str, node_id: u32) -> BrokerView {
    BrokerView {
        uid: format!("uid-{name}"),
        name: name.into(),
        node_name: Some("node".into()),
        pod_ip: Some(format!("10.0.0.{node_id}")),
        phase: "Running".into(),
        ready: true,
        restarts: 0,
        image: "rustqueue:test".into(),
        image_id: String::new(),
        started_at: None,
        pvc: None,
        observation: Some(observation(node_id, Vec::new())),
        error: None,
    }
}

/// A complete snapshot of a Ready `q` with `brokers` (topics aggregated from them).
pub fn snapshot(brokers: Vec<BrokerView>) -> Snapshot {
    let states = brokers
        .iter()
        .map(|b| crate::snapshot::BrokerState {
            pod: crate::cluster::BrokerPod {
                uid: b.uid.clone(),
                name: b.name.clone(),
                node_name: b.node_name.clone(),
                pod_ip: b.pod_ip.clone(),
                phase: b.phase.clone(),
                ready: b.ready,
                ..Default::default()
            },
            pvc: None,
            observation: b.observation.clone(),
            error: b.error.clone(),
        })
        .collect();
    let n = i32::try_from(brokers.len()).unwrap_or(0);
    crate::snapshot::build(crate::snapshot::Collected {
        now_ms: 1_000_000,
        rustqueue: rustqueue(n),
        brokers: states,
        events: Vec::new(),
        errors: Vec::new(),
    })
}
