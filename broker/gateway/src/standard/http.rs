//! The standard gateway's HTTP service on :4151: the core's probe routes (`/ping`,
//! `/v1/health` with the publishers, `/metrics`); every other request is forwarded to a
//! publish-ready broker by [`super::forward`]. Only origin-form targets are taken, and every
//! answer carries `X-NSQ-Content-Type: nsq; version=1.0` like the broker's
//! (docs/gateway.md, "HTTP" and "Errors").

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::forward::{self, Forwarder};
use crate::core::{Health, Shared, probe_router};
use crate::error::ErrorAnswer;

/// The NSQ content-type header every answer carries, like the broker's.
const NSQ_CONTENT_TYPE: &str = "x-nsq-content-type";

/// Whether a request target is in origin form (`/path?query`), the only form forwarded.
pub fn is_origin_form(uri: &axum::http::Uri) -> bool {
    uri.scheme().is_none() && uri.authority().is_none() && uri.path().starts_with('/')
}

/// The whole HTTP service.
pub fn router(shared: Shared, fwd: Arc<Forwarder>) -> Router {
    let forwarded = Router::new().fallback(forward::handle).with_state(fwd);
    probe_router(shared, Health::Detailed)
        .merge(forwarded)
        .layer(axum::middleware::from_fn(origin_form_only))
        .layer(axum::middleware::map_response(add_nsq_header))
}

async fn origin_form_only(req: Request, next: Next) -> Response {
    if !is_origin_form(req.uri()) {
        return ErrorAnswer::new(
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
                let shared = Shared {
                    pools: Arc::new(crate::pool::Pools::default()),
                    metrics: crate::metrics::Metrics::new(),
                    budget: crate::budget::ByteBudget::new(cfg.max_inflight_bytes),
                };
                let fwd = Forwarder::new(shared.clone(), &cfg).unwrap();
                let req = axum::http::Request::builder()
                    .method(method.as_str())
                    .uri(uri.clone())
                    .body(axum::body::Body::empty())
                    .unwrap();
                router(shared, Arc::new(fwd)).oneshot(req).await.unwrap().status()
            });
            let local = ["/ping", "/v1/health", "/metrics"].contains(&uri.path()) && is_origin_form(&uri);
            let allowed: &[u16] = if !is_origin_form(&uri) { &[400] } else if local { &[200, 503, 405] } else { &[503] };
            proptest::prop_assert!(allowed.contains(&status.as_u16()), "{} {} -> {}", method, target, status);
        }
    }
}
