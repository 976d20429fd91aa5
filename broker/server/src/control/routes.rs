//! The control router: `/v1/health`, `/v1/capabilities`, `/v1/drain`, `/v1/registry`,
//! `/v1/registry/head`, `/v1/stats`, `/v1/storage/scrub`, `/v1/observe/head`, `/v1/observe`,
//! `/metrics` and, with console management on, `/v1/manage/*`, with the token scopes of
//! docs/api.md, "Tokens".

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rustqueue_api::contract::{DrainRequest, ErrorBody, ScrubReport, TokenScope, paths};

use super::tokens::AuthOutcome;
use super::{ControlState, drain, observe, registry};

/// Registry reads accept the registry or the console token.
const READERS: [TokenScope; 2] = [TokenScope::Registry, TokenScope::Console];
const ADMIN: [TokenScope; 1] = [TokenScope::Admin];
/// Observation and management: the console token only.
pub(super) const CONSOLE: [TokenScope; 1] = [TokenScope::Console];

/// The control endpoints over `state`, ready to merge into the broker's HTTP router (of any
/// state type).
pub fn router<S: Clone + Send + Sync + 'static>(state: Arc<ControlState>) -> Router<S> {
    let router = Router::new()
        .route(paths::HEALTH, get(health))
        .route(paths::CAPABILITIES, get(capabilities))
        .route(paths::DRAIN, get(drain_get).post(drain_post))
        .route(paths::REGISTRY, get(registry_full))
        .route(paths::REGISTRY_HEAD, get(registry_head))
        .route(paths::STATS, get(stats))
        .route(paths::STORAGE_SCRUB, post(scrub))
        .route(paths::OBSERVE_HEAD, get(observe_head))
        .route(paths::OBSERVE, get(observe_full))
        .route(paths::METRICS, get(metrics));
    // Not registered at all with management off: the paths answer 404 like any unknown one.
    let router = if state.management.is_some() {
        router.merge(super::manage::routes::routes())
    } else {
        router
    };
    router.with_state(state)
}

/// A contract error response `{"message": code, "detail": detail}`.
pub fn error(status: StatusCode, code: &str, detail: impl Into<String>) -> Response {
    (
        status,
        Json(ErrorBody {
            message: code.to_owned(),
            detail: detail.into(),
        }),
    )
        .into_response()
}

/// `None` when the request may proceed, else the 401/503 answer.
pub(super) fn authorize(
    state: &ControlState,
    headers: &HeaderMap,
    scopes: &[TokenScope],
) -> Option<Response> {
    match state.tokens.check(headers, scopes) {
        AuthOutcome::Open | AuthOutcome::Granted => None,
        AuthOutcome::Unauthorized => {
            state.metrics.auth_failures_total.inc();
            Some(error(
                StatusCode::UNAUTHORIZED,
                "E_UNAUTHORIZED",
                "missing or wrong token for this endpoint",
            ))
        }
        AuthOutcome::Unavailable => Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_AUTH_UNAVAILABLE",
            "a configured token file is unreadable or empty",
        )),
    }
}

/// Middleware for the nsqd-compatible routes: `/pub`, `/mpub` need the publish token,
/// `/topic/*` and `/channel/*` the admin token (docs/api.md, "Tokens").
pub async fn nsq_scopes(
    State(s): State<Arc<ControlState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let scopes: &[TokenScope] = if path == "/pub" || path == "/mpub" {
        &[TokenScope::Publish]
    } else if path.starts_with("/topic/") || path.starts_with("/channel/") {
        &ADMIN
    } else {
        &[]
    };
    if !scopes.is_empty()
        && let Some(r) = authorize(&s, req.headers(), scopes)
    {
        return r;
    }
    next.run(req).await
}

/// The contract's `Health` body plus the `storage_damage` detail (docs/api.md, "Damage at
/// rest"); clients that do not know the key ignore it.
async fn health(State(s): State<Arc<ControlState>>) -> Response {
    let h = drain::health(&s);
    let status = StatusCode::from_u16(h.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut body = serde_json::to_value(&h).unwrap_or_default();
    if let serde_json::Value::Object(map) = &mut body {
        map.insert(
            "storage_damage".into(),
            serde_json::to_value(s.engine.storage_damage()).unwrap_or_default(),
        );
    }
    (status, Json(body)).into_response()
}

async fn capabilities(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &READERS) {
        return r;
    }
    match s.capabilities() {
        Ok(c) => Json(c).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE", e.to_string()),
    }
}

async fn drain_get(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &READERS) {
        return r;
    }
    Json(drain::status(&s)).into_response()
}

async fn drain_post(
    State(s): State<Arc<ControlState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = authorize(&s, &headers, &ADMIN) {
        return r;
    }
    let req = if body.iter().all(u8::is_ascii_whitespace) {
        DrainRequest::default()
    } else {
        match serde_json::from_slice::<DrainRequest>(&body) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, "E_BAD_BODY", e.to_string()),
        }
    };
    drain::apply(&s, req);
    tracing::info!(
        enabled = req.enabled,
        freeze_deliveries = req.freeze_deliveries,
        "drain request applied"
    );
    Json(drain::status(&s)).into_response()
}

async fn registry_full(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &READERS) {
        return r;
    }
    match registry::full(&s) {
        Ok(r) => Json(r).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE", e.to_string()),
    }
}

async fn registry_head(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &READERS) {
        return r;
    }
    Json(registry::head(&s)).into_response()
}

async fn stats(
    State(s): State<Arc<ControlState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let topic = q.get("topic").map(String::as_str);
    let channel = q.get("channel").map(String::as_str);
    Json(super::stats::stats(&s, topic, channel)).into_response()
}

async fn observe_head(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &CONSOLE) {
        return r;
    }
    match observe::head(&s) {
        Ok(h) => Json(h).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE", e.to_string()),
    }
}

async fn observe_full(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &CONSOLE) {
        return r;
    }
    match observe::full(&s) {
        Ok(o) => Json(o).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE", e.to_string()),
    }
}

async fn scrub(State(s): State<Arc<ControlState>>, headers: HeaderMap) -> Response {
    if let Some(r) = authorize(&s, &headers, &ADMIN) {
        return r;
    }
    // The engine times the pass and counts a failure as a storage error.
    match s.engine.scrub().await {
        Ok(records_checked) => Json(ScrubReport {
            status: "ok".into(),
            records_checked,
        })
        .into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "E_STORAGE", e.to_string()),
    }
}

async fn metrics(State(s): State<Arc<ControlState>>) -> Response {
    let text = s.metrics.render(&s);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
