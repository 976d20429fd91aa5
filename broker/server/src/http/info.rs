//! `/ping`, `/info`, `/stats` and the single-node lookupd view (`/lookup`, `/topics`,
//! `/channels`, `/nodes`) that lets lookupd-only clients discover this broker directly.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rustqueue_engine::EngineError;
use rustqueue_protocol::lookup::{
    ChannelsResponse, LookupResponse, Node, NodesResponse, Producer, TopicsResponse,
};
use rustqueue_protocol::names::is_valid_name;
use serde_json::{Value, json};

use super::{ApiError, ApiResult};
use crate::state::{Shared, VERSION};

type Params = Query<HashMap<String, String>>;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/ping", get(ping))
        .route("/info", get(info))
        .route("/stats", get(stats))
        .route("/lookup", get(lookup))
        .route("/topics", get(topics))
        .route("/channels", get(channels))
        .route("/nodes", get(nodes))
}

/// Maps an admin failure to nsqd's answer.
pub(crate) fn engine_error(e: &EngineError) -> ApiError {
    match e {
        EngineError::TopicNotFound => ApiError::new(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND"),
        EngineError::ChannelNotFound => ApiError::new(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND"),
        EngineError::BadName(_) => ApiError::new(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC"),
        EngineError::TooManyTopics | EngineError::TooManyChannels => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "E_THROTTLED")
        }
        other => {
            tracing::warn!("admin operation failed: {other}");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
        }
    }
}

fn health(shared: &Shared) -> Result<(), String> {
    match shared.engine.health().storage_fault {
        None => Ok(()),
        Some(fault) => Err(format!("NOK - {fault}")),
    }
}

async fn ping(State(shared): State<Arc<Shared>>) -> Response {
    match health(&shared) {
        Ok(()) => "OK".into_response(),
        Err(h) => (StatusCode::INTERNAL_SERVER_ERROR, h).into_response(),
    }
}

async fn info(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let l = &shared.cfg.limits;
    Json(json!({
        "version": VERSION,
        "broadcast_address": shared.cfg.node.broadcast_address,
        "hostname": shared.hostname,
        "http_port": shared.http_port(),
        "tcp_port": shared.tcp_port(),
        "start_time": shared.start_unix(),
        "max_heartbeat_interval": l.max_heartbeat_interval_ms * 1_000_000,
        "max_output_buffer_size": l.max_output_buffer_size,
        "max_output_buffer_timeout": l.max_output_buffer_timeout_ms * 1_000_000,
        "max_deflate_level": shared.cfg.network.max_deflate_level,
        "topology_zone": "",
        "topology_region": "",
        "node_id": shared.cfg.node.id,
        "data_format": 7,
        "mode": "share-nothing",
    }))
}

fn flag(q: &HashMap<String, String>, key: &str) -> bool {
    q.get(key)
        .is_none_or(|v| !matches!(v.as_str(), "false" | "0"))
}

/// The `/stats` document: engine topics/channels, our clients, producers and memory.
fn stats_json(shared: &Shared, q: &HashMap<String, String>) -> Value {
    let topic = q.get("topic").map(String::as_str);
    let channel = q.get("channel").map(String::as_str);
    let engine = serde_json::to_value(shared.engine.stats(topic, channel)).unwrap_or(Value::Null);
    let mut topics = match engine.get("topics") {
        Some(Value::Array(t)) => t.clone(),
        _ => Vec::new(),
    };
    let include_clients = flag(q, "include_clients");
    // nsqd without --e2e-processing-latency-percentiles reports an empty aggregate; nsqadmin
    // dereferences it when it merges the nodes' stats, so it must be there.
    let no_latency = || json!({"count": 0, "percentiles": null});
    for t in &mut topics {
        t["e2e_processing_latency"] = no_latency();
        let tname = t
            .get("topic_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Some(Value::Array(chs)) = t.get_mut("channels") {
            for c in chs {
                let cname = c
                    .get("channel_name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                c["e2e_processing_latency"] = no_latency();
                let clients = shared.clients.subscribers_json(&tname, &cname);
                c["client_count"] = json!(clients.len());
                c["clients"] = if include_clients {
                    json!(clients)
                } else {
                    json!([])
                };
            }
        }
    }
    let mut doc = json!({
        "version": VERSION,
        "health": health(shared).err().unwrap_or_else(|| "OK".into()),
        "start_time": shared.start_unix(),
        "topics": topics,
        "producers": if include_clients { shared.clients.producers_json() } else { Vec::new() },
    });
    if flag(q, "include_mem") {
        doc["memory"] = memory_json();
    }
    doc
}

/// nsqd's memory keys, filled from /proc where a Rust process has an equivalent.
fn memory_json() -> Value {
    let page = 4096u64;
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut it = statm
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let (_size, resident) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    json!({
        "heap_objects": 0,
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": resident * page,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
        "next_gc_bytes": 0,
        "gc_total_runs": 0,
        "resident_bytes": resident * page,
    })
}

async fn stats(State(shared): State<Arc<Shared>>, Query(q): Params) -> Response {
    let doc = stats_json(&shared, &q);
    if q.get("format").is_some_and(|f| f == "json") {
        Json(doc).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            super::stats_text::render(&doc, std::time::SystemTime::now()),
        )
            .into_response()
    }
}

fn producer(shared: &Shared) -> Producer {
    Producer {
        remote_address: format!(
            "{}:{}",
            shared.cfg.node.broadcast_address,
            shared.tcp_port()
        ),
        hostname: shared.hostname.clone(),
        broadcast_address: shared.cfg.node.broadcast_address.clone(),
        tcp_port: shared.tcp_port(),
        http_port: shared.http_port(),
        version: VERSION.to_owned(),
        topology_zone: Some(String::new()),
        topology_region: Some(String::new()),
        node_id: None,
    }
}

async fn lookup(
    State(shared): State<Arc<Shared>>,
    Query(q): Params,
) -> ApiResult<Json<LookupResponse>> {
    let topic = q
        .get("topic")
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC"))?;
    if !is_valid_name(topic) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC"));
    }
    // A single broker serves any topic (SUB creates it), so it is always a producer.
    let channels = shared.engine.channels(topic).unwrap_or_default();
    Ok(Json(LookupResponse {
        channels,
        producers: vec![producer(&shared)],
    }))
}

async fn topics(State(shared): State<Arc<Shared>>) -> Json<TopicsResponse> {
    Json(TopicsResponse {
        topics: shared.engine.topics(),
    })
}

async fn channels(
    State(shared): State<Arc<Shared>>,
    Query(q): Params,
) -> ApiResult<Json<ChannelsResponse>> {
    let topic = q
        .get("topic")
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC"))?;
    let channels = shared.engine.channels(topic).unwrap_or_default();
    Ok(Json(ChannelsResponse { channels }))
}

async fn nodes(State(shared): State<Arc<Shared>>) -> Json<NodesResponse> {
    let topics = shared.engine.topics();
    Json(NodesResponse {
        producers: vec![Node {
            producer: producer(&shared),
            tombstones: vec![false; topics.len()],
            topics,
        }],
    })
}
