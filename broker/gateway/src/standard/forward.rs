//! Forwarding one HTTP request to a publish-ready broker (docs/gateway.md, "HTTP").
//!
//! Order of checks: declared length above the body limit (413), no publish-ready broker
//! (503 + `Retry-After`), the node-wide in-flight byte budget (429 + `Retry-After`, the
//! declared length or the body limit is reserved until the answer is sent), the body read
//! within its deadline (408) and under the limit (413). Then the request goes to shuffled
//! brokers: GET/HEAD/OPTIONS may try two, anything else exactly one. A non-idempotent request
//! whose send fails after connecting, or whose answer cannot be read, may have been applied:
//! it is answered 502 `E_AMBIGUOUS`, counted, and never retried.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Shared;
use crate::error::ErrorAnswer;
use crate::pool::Backend;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rand::seq::SliceRandom;

/// Largest broker answer passed back.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Headers never copied between the two hops (RFC 9110 §7.6.1) plus the ones the client
/// library sets itself.
const HOP_BY_HOP: [header::HeaderName; 8] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::HOST,
    header::CONTENT_LENGTH,
];

/// What every forwarded request shares.
#[derive(Debug)]
pub struct Forwarder {
    /// The pools, the metrics and the in-flight byte budget.
    pub shared: Shared,
    /// Body limit.
    pub max_body_bytes: u64,
    /// Body receive deadline.
    pub body_timeout: Duration,
    /// Client to the brokers (connect 500 ms, whole request 30 s, no redirects).
    pub client: reqwest::Client,
}

impl Forwarder {
    /// A forwarder with its own broker client.
    pub fn new(shared: Shared, cfg: &crate::config::Config) -> reqwest::Result<Self> {
        let client = rustqueue_api::http_client::builder()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(Forwarder {
            shared,
            max_body_bytes: cfg.max_body_bytes,
            body_timeout: cfg.http_body_timeout,
            client,
        })
    }
}

/// How one attempt ended.
enum Attempt {
    /// The broker answered; its status, headers and body.
    Answered(StatusCode, HeaderMap, Bytes),
    /// No connection was made: nothing was sent.
    NotSent(String),
    /// Sent (perhaps partly) but no readable answer: the broker may have applied it.
    Unknown(String),
}

/// The fallback handler: forward `req`.
pub async fn handle(State(fwd): State<Arc<Forwarder>>, req: Request) -> Response {
    match forward(&fwd, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn forward(fwd: &Forwarder, req: Request) -> Result<Response, ErrorAnswer> {
    let declared = declared_length(req.headers())?;
    if declared.is_some_and(|n| n > fwd.max_body_bytes) {
        return Err(too_large(fwd.max_body_bytes));
    }
    if fwd.shared.pools.publish_count() == 0 {
        return Err(no_broker());
    }
    let reserve = declared
        .unwrap_or(fwd.max_body_bytes)
        .min(u64::from(u32::MAX)) as u32;
    let Some(_reserved) = fwd.shared.budget.try_reserve(reserve) else {
        fwd.shared.metrics.http_throttled.inc();
        return Err(ErrorAnswer::throttled());
    };
    let (parts, body) = req.into_parts();
    let body = read_body(fwd, body).await?;
    let idempotent = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let mut backends = fwd.shared.pools.publish_backends();
    backends.shuffle(&mut rand::rng());
    backends.truncate(if idempotent { 2 } else { 1 });
    let target = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let mut last = None;
    for (i, backend) in backends.iter().enumerate() {
        if i > 0 {
            fwd.shared.metrics.producer_retries.inc();
        }
        match attempt(
            fwd,
            backend,
            &parts.method,
            target,
            &parts.headers,
            body.clone(),
        )
        .await
        {
            Attempt::Answered(status, headers, bytes) => {
                return Ok(answer(status, &headers, bytes));
            }
            Attempt::Unknown(e) if !idempotent => {
                fwd.shared.metrics.ambiguous_failures.inc();
                tracing::warn!(node_id = backend.node_id, error = %e, "ambiguous publish outcome");
                return Err(ErrorAnswer::new(
                    StatusCode::BAD_GATEWAY,
                    "E_AMBIGUOUS",
                    format!(
                        "the broker may or may not have applied this request ({e}); automatic retry is unsafe"
                    ),
                ));
            }
            Attempt::Unknown(e) | Attempt::NotSent(e) => last = Some(e),
        }
    }
    let why = last.unwrap_or_else(|| "no publish-ready broker".to_string());
    if backends.is_empty() {
        return Err(no_broker());
    }
    Err(ErrorAnswer::new(
        StatusCode::BAD_GATEWAY,
        "E_BAD_GATEWAY",
        format!("no broker answered ({why}); the request was not applied, retrying is safe"),
    ))
}

fn no_broker() -> ErrorAnswer {
    ErrorAnswer::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "E_NO_BROKER",
        "no publish-ready broker",
    )
    .retry_after()
}

fn too_large(max: u64) -> ErrorAnswer {
    ErrorAnswer::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "E_BAD_BODY",
        format!("request body larger than the gateway's limit of {max} bytes"),
    )
}

/// The request's `Content-Length`, if any (several or unparsable: 400).
fn declared_length(headers: &HeaderMap) -> Result<Option<u64>, ErrorAnswer> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let bad = || {
        ErrorAnswer::new(
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
            "invalid Content-Length header",
        )
    };
    if values.next().is_some() {
        return Err(bad());
    }
    first
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(bad)
}

async fn read_body(fwd: &Forwarder, body: Body) -> Result<Bytes, ErrorAnswer> {
    let limit = usize::try_from(fwd.max_body_bytes).unwrap_or(usize::MAX);
    let read = Limited::new(body, limit).collect();
    match tokio::time::timeout(fwd.body_timeout, read).await {
        Err(_) => Err(ErrorAnswer::new(
            StatusCode::REQUEST_TIMEOUT,
            "E_BODY_TIMEOUT",
            format!(
                "request body not received within {} ms",
                fwd.body_timeout.as_millis()
            ),
        )),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large(fwd.max_body_bytes)),
        Ok(Err(e)) => Err(ErrorAnswer::new(
            StatusCode::BAD_REQUEST,
            "E_BAD_BODY",
            format!("request body could not be read: {e}"),
        )),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

async fn attempt(
    fwd: &Forwarder,
    b: &Backend,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Attempt {
    let _timer = fwd.shared.metrics.backend_duration.start_timer();
    let mut out = HeaderMap::new();
    for (name, value) in headers.iter().filter(|(n, _)| !HOP_BY_HOP.contains(n)) {
        out.append(name.clone(), value.clone());
    }
    let url = format!("{}{}", b.http_base(), target);
    let sent = fwd
        .client
        .request(method.clone(), &url)
        .headers(out)
        .body(body)
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Attempt::NotSent(format!("connect to {url}: {e}")),
        Err(e) => return Attempt::Unknown(format!("send to {url}: {e}")),
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    let mut bytes = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) if bytes.len() + c.len() > MAX_RESPONSE_BYTES => {
                return Attempt::Unknown(format!(
                    "answer of {url} larger than {MAX_RESPONSE_BYTES} bytes"
                ));
            }
            Ok(Some(c)) => bytes.extend_from_slice(&c),
            Ok(None) => return Attempt::Answered(status, headers, bytes.into()),
            Err(e) => return Attempt::Unknown(format!("read answer of {url}: {e}")),
        }
    }
}

/// The broker's answer as the client gets it. Its `Content-Length` is kept (the whole body
/// was read, so it matches; for `HEAD` it is the only length the client sees).
fn answer(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    let copied = headers
        .iter()
        .filter(|(n, _)| *n == header::CONTENT_LENGTH || !HOP_BY_HOP.contains(n));
    for (name, value) in copied {
        resp.headers_mut().append(name.clone(), value.clone());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn content_length_is_parsed_strictly() {
        let mut h = HeaderMap::new();
        assert_eq!(declared_length(&h).ok(), Some(None));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert_eq!(declared_length(&h).ok(), Some(Some(12)));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("-1"));
        assert_eq!(
            declared_length(&h).map_err(|e| e.code()).err(),
            Some("E_BAD_REQUEST")
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1"));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("2"));
        assert!(declared_length(&h).is_err());
    }
}
