//! The `/v1/manage/*` routes (console token), merged into the control router only when
//! console management is on.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rustqueue_api::contract::{FenceSync, ManageAction, ManageKind, ManageRequest, paths};
use serde::de::DeserializeOwned;

use super::ManageError;
use crate::control::ControlState;
use crate::control::routes::{CONSOLE, authorize};

/// The management routes over the control state.
pub fn routes() -> Router<Arc<ControlState>> {
    Router::new()
        .route(paths::FENCES_SYNC, post(fences_sync))
        .route(
            &format!("{}/{{action}}", paths::MANAGE_TOPICS),
            post(topics),
        )
        .route(
            &format!("{}/{{action}}", paths::MANAGE_CHANNELS),
            post(channels),
        )
}

fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ManageError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ManageError::BadRequest(format!("invalid request body: {e}")))
}

async fn topics(
    State(s): State<Arc<ControlState>>,
    Path(action): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    manage(&s, ManageKind::Topic, &action, &headers, &bytes).await
}

async fn channels(
    State(s): State<Arc<ControlState>>,
    Path(action): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    manage(&s, ManageKind::Channel, &action, &headers, &bytes).await
}

async fn manage(
    s: &ControlState,
    kind: ManageKind,
    action: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Response {
    if let Some(r) = authorize(s, headers, &CONSOLE) {
        return r;
    }
    let Some(m) = &s.management else {
        return ManageError::Unavailable("console management is off".into()).into_response();
    };
    let result = async {
        let action: ManageAction = action.parse().map_err(ManageError::BadAction)?;
        let req: ManageRequest = body(bytes)?;
        m.request(&s.engine, &s.fences, kind, action, &req).await
    }
    .await;
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => {
            tracing::info!(kind = ?kind, action, error = %e, "management request refused");
            e.into_response()
        }
    }
}

async fn fences_sync(
    State(s): State<Arc<ControlState>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    if let Some(r) = authorize(&s, &headers, &CONSOLE) {
        return r;
    }
    let Some(m) = &s.management else {
        return ManageError::Unavailable("console management is off".into()).into_response();
    };
    let result = async {
        let sync: FenceSync = body(&bytes)?;
        m.sync_fences(&s.fences, &sync).await
    }
    .await;
    match result {
        Ok(()) => Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}
