//! The HTTP client object_store talks to the bucket through: a reqwest client from
//! [`rustqueue_api::http_client`] (TLS on ring, no process-wide provider), never one that
//! object_store builds itself (its `reqwest` feature would, and its `aws` feature would compile
//! aws-lc-rs).
//!
//! Two jobs besides carrying requests:
//! - every failure is given object_store's [`HttpErrorKind`] (connect, timeout, interrupted, ...),
//!   as object_store's own reqwest client does, so [`crate::retry`] can tell transient from
//!   permanent;
//! - a response with a retryable status (5xx, 408, 429) or a refusal of our credentials (401,
//!   403) is returned as a transport error that holds a [`ServerStatus`]: object_store does not
//!   export the error type that carries a status (and maps 403 to a typed error for some
//!   operations only, not for a listing), so this is how the status reaches
//!   [`crate::retry`] and [`crate::Error`]. The S3 error code and message of the body are kept.
//!   Other statuses (404, 412, ...) stay object_store's: it relies on them. One exception: a
//!   404 whose S3 error code says the access key is unknown (versitygw answers
//!   `404 XAdminUserNotFound` where S3 answers `403 InvalidAccessKeyId`) is a refusal of our
//!   credentials too, not a missing object.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::BodyExt;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};

/// How long to wait for a connection, and for a whole request (response body included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect and TLS handshake.
    pub connect: Duration,
    /// One request from the first byte sent to the last byte of the response body. A part
    /// upload (8 MiB) or a ranged read must fit in it; a hung server (a stopped process, a
    /// black-holed route) is noticed after it and the request retried.
    pub request: Duration,
}

impl Default for Timeouts {
    /// 5 s to connect, 60 s for a request: an 8 MiB part at 1 Mbit/s still fits.
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(60),
        }
    }
}

/// An HTTP status the server answered with that is ours to classify (5xx, 408, 429, 401,
/// 403), and what its body said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// The HTTP status code.
    pub status: u16,
    /// The S3 error code of the body (`SignatureDoesNotMatch`), if it is an S3 error document.
    pub code: Option<String>,
    /// The S3 error message of the body, or the start of a body that is not an S3 error
    /// document.
    pub message: String,
}

/// S3 error codes that mean the access key is unknown, whatever the status they come with.
const UNKNOWN_KEY_CODES: [&str; 2] = ["InvalidAccessKeyId", "XAdminUserNotFound"];

impl ServerStatus {
    /// The status and the S3 error document (if any) of a response.
    fn new(status: u16, body: &[u8]) -> Self {
        let (code, message) = error_summary(body);
        Self {
            status,
            code,
            message,
        }
    }

    /// Whether the server refused our credentials (401, 403, or an unknown-key code).
    pub fn refuses_credentials(&self) -> bool {
        matches!(self.status, 401 | 403)
            || self
                .code
                .as_deref()
                .is_some_and(|code| UNKNOWN_KEY_CODES.contains(&code))
    }
}

impl fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server answered HTTP {}", self.status)?;
        match (&self.code, self.message.is_empty()) {
            (Some(code), false) => write!(f, " {code}: {}", self.message),
            (Some(code), true) => write!(f, " {code}"),
            (None, false) => write!(f, ": {}", self.message),
            (None, true) => Ok(()),
        }
    }
}

impl StdError for ServerStatus {}

/// The most of an error body kept in a [`ServerStatus`].
const ERROR_BODY_LIMIT: usize = 512;

/// Whether object_store should see `status` as a transport failure (see the module doc).
fn is_our_status(status: u16) -> bool {
    matches!(status, 401 | 403 | 408 | 429 | 500..=599)
}

/// Hands object_store a client from `rustqueue_api::http_client` with our timeouts.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pub(crate) timeouts: Timeouts,
}

impl HttpConnector for Connector {
    /// object_store's `ClientOptions` are not consulted: the settings that matter here are
    /// the timeouts, and they come from [`Timeouts`].
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = rustqueue_api::http_client::builder()
            .connect_timeout(self.timeouts.connect)
            .timeout(self.timeouts.request)
            .build()
            .map_err(|error| object_store::Error::Generic {
                store: "S3",
                source: Box::new(error),
            })?;
        Ok(HttpClient::new(Service(client)))
    }
}

#[derive(Debug)]
struct Service(reqwest::Client);

#[async_trait]
impl HttpService for Service {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = request.into_parts();
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|error| HttpError::new(HttpErrorKind::Unknown, error))?;
        // object_store's bodies are in memory already (a part is one buffer): collecting
        // copies at most once and gives reqwest a body with a known length.
        let body = match body.as_bytes() {
            Some(bytes) => bytes.clone(),
            None => body.collect().await?.to_bytes(),
        };
        let mut outgoing = reqwest::Request::new(parts.method, url);
        *outgoing.headers_mut() = parts.headers;
        *outgoing.body_mut() = Some(reqwest::Body::from(body));

        let response = self.0.execute(outgoing).await.map_err(transport_error)?;
        let status = response.status().as_u16();
        // `Request` is a kind object_store would retry; it does not (max_retries = 0), and
        // crate::retry decides by the status.
        if is_our_status(status) {
            let body = response.bytes().await.unwrap_or_default();
            return Err(HttpError::new(
                HttpErrorKind::Request,
                ServerStatus::new(status, &body),
            ));
        }
        let response: http::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        if status == 404 {
            // A 404 body is a small error document: read it to tell an unknown key from a
            // missing object, and hand object_store the same bytes.
            let body = body.collect().await.map_err(transport_error)?.to_bytes();
            let server = ServerStatus::new(status, &body);
            if server.refuses_credentials() {
                return Err(HttpError::new(HttpErrorKind::Request, server));
            }
            return Ok(HttpResponse::from_parts(
                parts,
                HttpResponseBody::from(body),
            ));
        }
        let body = HttpResponseBody::new(body.map_err(transport_error));
        Ok(HttpResponse::from_parts(parts, body))
    }
}

/// The `Code` and `Message` of an S3 error document, else no code and the body's start, the
/// message at most [`ERROR_BODY_LIMIT`] bytes. S3 errors carry diagnostics (the string to
/// sign, in hex) that would drown the message.
fn error_summary(body: &[u8]) -> (Option<String>, String) {
    let text = String::from_utf8_lossy(body);
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = start + text.get(start..)?.find(&format!("</{name}>"))?;
        text.get(start..end)
    };
    let code = element("Code").map(str::to_owned);
    let message = match (&code, element("Message")) {
        (Some(_), message) => message.unwrap_or_default(),
        (None, _) => text.trim(),
    };
    let mut end = message.len().min(ERROR_BODY_LIMIT);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    (code, message.get(..end).unwrap_or_default().to_owned())
}

/// A reqwest failure as object_store's kinds, refined as object_store's own client does: the
/// source chain's hyper or I/O error tells a reset or early close from an unknown failure.
fn transport_error(error: reqwest::Error) -> HttpError {
    let kind = if error.is_timeout() {
        HttpErrorKind::Timeout
    } else if error.is_connect() {
        HttpErrorKind::Connect
    } else if error.is_decode() {
        HttpErrorKind::Decode
    } else {
        refine(&error)
    };
    HttpError::new(kind, error)
}

fn refine(error: &reqwest::Error) -> HttpErrorKind {
    let mut source = error.source();
    while let Some(current) = source {
        if let Some(hyper) = current.downcast_ref::<hyper::Error>() {
            if hyper.is_closed() || hyper.is_incomplete_message() || hyper.is_body_write_aborted() {
                return HttpErrorKind::Request;
            }
            if hyper.is_timeout() {
                return HttpErrorKind::Timeout;
            }
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && let Some(kind) = io_kind(io.kind())
        {
            return kind;
        }
        source = current.source();
    }
    HttpErrorKind::Unknown
}

fn io_kind(kind: std::io::ErrorKind) -> Option<HttpErrorKind> {
    use std::io::ErrorKind as K;
    match kind {
        K::TimedOut => Some(HttpErrorKind::Timeout),
        K::ConnectionRefused => Some(HttpErrorKind::Connect),
        K::ConnectionAborted | K::ConnectionReset | K::BrokenPipe | K::UnexpectedEof => {
            Some(HttpErrorKind::Interrupted)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_trouble_and_refusals_become_transport_errors() {
        let cases = [
            (200, false),
            (204, false),
            (206, false),
            (301, false),
            (400, false),
            (401, true),
            (403, true),
            (404, false),
            (408, true),
            (409, false),
            (429, true),
            (500, true),
            (503, true),
            (599, true),
            (600, false),
        ];
        for (status, want) in cases {
            assert_eq!(is_our_status(status), want, "{status}");
        }
    }

    #[test]
    fn io_failures_map_to_object_store_kinds() {
        use std::io::ErrorKind as K;
        let cases = [
            (K::TimedOut, Some(HttpErrorKind::Timeout)),
            (K::ConnectionRefused, Some(HttpErrorKind::Connect)),
            (K::ConnectionReset, Some(HttpErrorKind::Interrupted)),
            (K::ConnectionAborted, Some(HttpErrorKind::Interrupted)),
            (K::BrokenPipe, Some(HttpErrorKind::Interrupted)),
            (K::UnexpectedEof, Some(HttpErrorKind::Interrupted)),
            (K::PermissionDenied, None),
            (K::Other, None),
        ];
        for (io, want) in cases {
            assert_eq!(io_kind(io), want, "{io:?}");
        }
    }

    #[test]
    fn error_bodies_are_summed_up_by_their_s3_code_and_message() {
        let cases: &[(&[u8], Option<&str>, &str)] = &[
            (
                b"<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The \
                  signature does not match.</Message><StringToSignBytes>41 57</StringToSignBytes></Error>",
                Some("SignatureDoesNotMatch"),
                "The signature does not match.",
            ),
            (b"<Error><Code>SlowDown</Code></Error>", Some("SlowDown"), ""),
            (b"  upstream timed out\n", None, "upstream timed out"),
            (b"<Error><Code>unterminated", None, "<Error><Code>unterminated"),
            (b"", None, ""),
        ];
        for (body, code, message) in cases {
            let (got_code, got_message) = error_summary(body);
            assert_eq!(
                (got_code.as_deref(), got_message.as_str()),
                (*code, *message)
            );
        }
        let long = "é".repeat(ERROR_BODY_LIMIT);
        assert!(error_summary(long.as_bytes()).1.len() <= ERROR_BODY_LIMIT);
    }

    #[test]
    fn refusals_of_our_credentials_are_told_by_status_or_code() {
        let doc = |code: &str| format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
        let cases = [
            (
                403,
                doc("SignatureDoesNotMatch"),
                true,
                "the server answered HTTP 403 SignatureDoesNotMatch: m",
            ),
            (401, String::new(), true, "the server answered HTTP 401"),
            (
                404,
                doc("XAdminUserNotFound"),
                true,
                "the server answered HTTP 404 XAdminUserNotFound: m",
            ),
            (
                400,
                doc("InvalidAccessKeyId"),
                true,
                "the server answered HTTP 400 InvalidAccessKeyId: m",
            ),
            (
                404,
                doc("NoSuchKey"),
                false,
                "the server answered HTTP 404 NoSuchKey: m",
            ),
            (
                503,
                doc("SlowDown"),
                false,
                "the server answered HTTP 503 SlowDown: m",
            ),
            (
                502,
                "bad gateway".into(),
                false,
                "the server answered HTTP 502: bad gateway",
            ),
        ];
        for (status, body, refuses, text) in cases {
            let server = ServerStatus::new(status, body.as_bytes());
            assert_eq!(server.refuses_credentials(), refuses, "{status} {body}");
            assert_eq!(server.to_string(), text);
        }
    }
}
