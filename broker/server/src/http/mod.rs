//! The HTTP API on 4151 (axum).
//!
//! - [`nsq`]: nsqd-compatible publish and topic/channel administration.
//! - [`info`]: `/ping`, `/info`, `/stats` and the single-node lookupd view.
//! - [`crate::control`]: the `/v1/*` control-contract endpoints and `/metrics`, merged here;
//!   it also guards the nsqd routes with the publish/admin tokens.
//!
//! Every response carries `X-NSQ-Content-Type: nsq; version=1.0`; errors are nsqd-shaped
//! JSON `{"message":"CODE"}`.

mod info;
mod nsq;
mod stats_text;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::state::Shared;

/// The NSQ content-type header name.
pub const NSQ_CONTENT_TYPE: &str = "x-nsq-content-type";

/// An nsqd-style error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
}

impl ApiError {
    /// A status and an nsqd error code such as `MISSING_ARG_TOPIC`.
    pub fn new(status: StatusCode, code: &'static str) -> Self {
        Self { status, code }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "message": self.code }).to_string();
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body,
        )
            .into_response()
    }
}

/// Result type of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// Builds the whole router.
pub fn router(shared: Arc<Shared>) -> Router {
    let body_limit = shared.cfg.limits.max_body_bytes as usize + 1;
    Router::new()
        .merge(
            nsq::routes().route_layer(axum::middleware::from_fn_with_state(
                shared.control.clone(),
                crate::control::routes::nsq_scopes,
            )),
        )
        .merge(info::routes())
        .merge(crate::control::router(shared.control.clone()))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED")
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(add_nsq_header))
        .with_state(shared)
}

async fn add_nsq_header(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        HeaderName::from_static(NSQ_CONTENT_TYPE),
        HeaderValue::from_static("nsq; version=1.0"),
    );
    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}
