//! Native RustQueue endpoints: the `/v1/*` control contract and `/metrics`.
//!
//! Issue 5 (control contract) adds `/v1/capabilities`, `/v1/registry`, `/v1/drain`,
//! `/v1/observe`, `/v1/stats` and `/metrics` here; only the liveness/readiness probe exists so
//! far.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::state::Shared;

pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/v1/health", get(health))
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let node_id = shared.cfg.node.id;
    match shared.engine.health().storage_fault {
        None if !*shared.shutdown.borrow() => Json(json!({
            "status": "ready", "node_id": node_id, "storage": "healthy",
            "mode": "share-nothing", "data_format": 7,
        }))
        .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": "draining", "node_id": node_id})),
        )
            .into_response(),
        Some(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": "storage_fault", "node_id": node_id})),
        )
            .into_response(),
    }
}
