//! The HTTP server: health, readiness, the snapshot, the management routes (registered only
//! when management is on) and the web pages with a single-page-app fallback.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::collector::Shared;
use crate::config::Config;
use crate::manage::{self, Manager};

/// What every handler reads.
#[derive(Clone)]
pub struct App {
    /// The configuration.
    pub config: Arc<Config>,
    /// The collector's output.
    pub shared: Arc<Shared>,
    /// The management flow.
    pub manager: Arc<Manager>,
}

/// Placeholder page served when the web pages are not built.
const PLACEHOLDER: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>RustQueue console</title></head><body><h1>RustQueue console</h1>\
<p>The web UI is not built into this image. The API is served: \
<a href=\"api/v1/snapshot\">/api/v1/snapshot</a>, \
<a href=\"api/v1/management\">/api/v1/management</a>.</p></body></html>";

/// The router.
pub fn router(app: App) -> Router {
    let mut r = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/snapshot", get(snapshot))
        .route("/api/v1/management", get(manage::http::status));
    if app.config.management_enabled {
        r = r
            .route("/api/v1/management/unlock", post(manage::http::unlock))
            .route("/api/v1/management/lock", post(manage::http::lock))
            .route("/api/v1/management/preview", post(manage::http::preview))
            .route("/api/v1/management/apply", post(manage::http::apply));
    }
    r.fallback(static_file)
        .layer(DefaultBodyLimit::max(64 * 1024))
        .layer(axum::middleware::from_fn(body_timeout))
        .with_state(app)
}

/// Requests (body included) must finish within 10 s.
async fn body_timeout(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match tokio::time::timeout(Duration::from_secs(10), next.run(req)).await {
        Ok(r) => r,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            Json(json!({"code": "E_TIMEOUT", "detail": "the request took longer than 10 s"})),
        )
            .into_response(),
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(app): State<App>) -> Response {
    let fresh = app
        .shared
        .last_success()
        .is_some_and(|t| t.elapsed() <= app.config.ready_staleness());
    if fresh {
        Json(json!({"status": "ready"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "stale"})),
        )
            .into_response()
    }
}

async fn snapshot(State(app): State<App>) -> Response {
    match app.shared.snapshot() {
        Some(s) => {
            let mut r = Json(&*s).into_response();
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
            r
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "collecting"})),
        )
            .into_response(),
    }
}

/// A file under the static directory, else `index.html` (the pages route by hash), else the
/// placeholder when the pages are not built.
async fn static_file(State(app): State<App>, uri: Uri) -> Response {
    let root = &app.config.static_dir;
    if let Some(path) = safe_join(root, uri.path())
        && let Ok(bytes) = tokio::fs::read(&path).await
    {
        return file_response(&path, bytes);
    }
    if uri.path().starts_with("/api/") {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"code": "E_NOT_FOUND", "detail": "no such API route"})),
        )
            .into_response();
    }
    let index = root.join("index.html");
    match tokio::fs::read(&index).await {
        Ok(bytes) => file_response(&index, bytes),
        Err(_) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            PLACEHOLDER,
        )
            .into_response(),
    }
}

fn safe_join(root: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(rel))
}

fn file_response(path: &Path, bytes: Vec<u8>) -> Response {
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, kind)], Body::from(bytes)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_paths_never_leave_the_root() {
        let root = Path::new("/srv");
        assert_eq!(
            safe_join(root, "/app.js"),
            Some(PathBuf::from("/srv/app.js"))
        );
        assert_eq!(
            safe_join(root, "/a/b.css"),
            Some(PathBuf::from("/srv/a/b.css"))
        );
        assert_eq!(safe_join(root, "/../etc/passwd"), None);
        assert_eq!(safe_join(root, "/"), None);
    }
}
