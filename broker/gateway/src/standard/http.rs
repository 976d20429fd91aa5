//! The HTTP side on :4151: `/ping`, `/v1/health` and `/metrics` are answered here; every
//! other request is forwarded to a publish-ready broker by [`crate::forward`].
//!
//! Errors are shaped like the broker's own: `{"message":"E_CODE","detail":"..."}` with
//! `Content-Type: application/json; charset=utf-8` and `X-NSQ-Content-Type: nsq; version=1.0`
//! (docs/gateway.md, "Errors").

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::forward::Forwarder;

/// The NSQ content-type header every answer carries, like the broker's.
const NSQ_CONTENT_TYPE: &str = "x-nsq-content-type";

/// A gateway error answer.
#[derive(Debug)]
pub struct GatewayError {
    status: StatusCode,
    code: &'static str,
    detail: String,
    retry_after: bool,
}

impl GatewayError {
    /// `status` with error `code` and a `detail` saying what to do.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        GatewayError {
            status,
            code,
            detail: detail.into(),
            retry_after: false,
        }
    }

    /// Also send `Retry-After: 1`.
    pub fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }

    /// The error code (for tests and logs).
    pub fn code(&self) -> &'static str {
        self.code
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let body = json!({ "message": self.code, "detail": self.detail }).to_string();
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body,
        )
            .into_response();
        if self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// Whether a request target is in origin form (`/path?query`), the only form forwarded.
pub fn is_origin_form(uri: &axum::http::Uri) -> bool {
    uri.scheme().is_none() && uri.authority().is_none() && uri.path().starts_with('/')
}

/// The whole HTTP service.
pub fn router(fwd: Arc<Forwarder>) -> Router {
    Router::new()
        .route("/ping", get(|| async { "OK" }))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(crate::forward::handle)
        .layer(axum::middleware::from_fn(origin_form_only))
        .layer(axum::middleware::map_response(add_nsq_header))
        .with_state(fwd)
}

async fn origin_form_only(req: Request, next: Next) -> Response {
    if !is_origin_form(req.uri()) {
        return GatewayError::new(
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
            "only origin-form request targets (/path?query) are forwarded; do not use the gateway as an HTTP proxy",
        )
        .into_response();
    }
    next.run(req).await
}

async fn add_nsq_header(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        HeaderName::from_static(NSQ_CONTENT_TYPE),
        HeaderValue::from_static("nsq; version=1.0"),
    );
    resp
}

async fn health(State(fwd): State<Arc<Forwarder>>) -> Response {
    let publishers: Vec<serde_json::Value> = fwd
        .pools
        .publish_backends()
        .iter()
        .map(|b| json!({ "node_id": b.node_id, "address": format!("{}:{}", b.host, b.tcp_port) }))
        .collect();
    let (brokers, revision) = (publishers.len(), fwd.pools.revision());
    if brokers > 0 {
        let body = json!({
            "status": "ready",
            "brokers": brokers,
            "revision": revision,
            "publishers": publishers,
        });
        (StatusCode::OK, axum::Json(body)).into_response()
    } else {
        let body = json!({
            "status": "not_ready",
            "brokers": 0,
            "revision": revision,
            "publishers": publishers,
            "reason": "no publish-ready broker agreed on by the discovery replicas",
        });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

async fn metrics(State(fwd): State<Arc<Forwarder>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        fwd.metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn only_origin_form_targets_pass() {
        let cases = [
            ("/pub?topic=t", true),
            ("/", true),
            ("http://evil/pub", false),
            ("http://evil", false),
            ("*", false),
            ("example.com:443", false),
        ];
        for (target, want) in cases {
            let uri: axum::http::Uri = target.parse().unwrap();
            assert_eq!(is_origin_form(&uri), want, "{target}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Any request target a client can put on the wire, with no broker behind the
        /// gateway, is answered with a documented status; nothing panics.
        #[test]
        fn any_request_target_gets_a_documented_answer(target in "[ -~]{0,200}", method in "(GET|POST|PUT|DELETE|OPTIONS|HEAD|PATCH)") {
            let Ok(uri) = target.parse::<axum::http::Uri>() else { return Ok(()) };
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let status = rt.block_on(async {
                use tower::ServiceExt as _;
                let cfg = crate::config::Cli::try_parse_from(["gw"]).unwrap().validate().unwrap();
                let pools = std::sync::Arc::new(crate::pool::Pools::default());
                let fwd = Forwarder::new(pools, crate::metrics::Metrics::new(), &cfg).unwrap();
                let req = axum::http::Request::builder()
                    .method(method.as_str())
                    .uri(uri.clone())
                    .body(axum::body::Body::empty())
                    .unwrap();
                router(std::sync::Arc::new(fwd)).oneshot(req).await.unwrap().status()
            });
            let local = ["/ping", "/v1/health", "/metrics"].contains(&uri.path()) && is_origin_form(&uri);
            let allowed: &[u16] = if !is_origin_form(&uri) { &[400] } else if local { &[200, 503, 405] } else { &[503] };
            proptest::prop_assert!(allowed.contains(&status.as_u16()), "{} {} -> {}", method, target, status);
        }
    }
}
