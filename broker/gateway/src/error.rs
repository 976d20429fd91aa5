//! The gateway's errors, one type per failing operation: [`StartError`] (binding, the HTTP
//! clients), [`FetchError`] (one bounded HTTP read of discovery or a broker) and
//! [`ErrorAnswer`], the JSON error body every HTTP answer of the gateway's own uses, shaped
//! like the broker's control errors (docs/gateway.md, "Errors").

use std::net::SocketAddr;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address is taken or not ours.
    #[error("cannot listen on {addr}: {source}; free the address or pick another one")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The HTTP client could not be built (TLS provider).
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// One bounded HTTP read (a discovery list or a broker's `/stats`) that gave nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer: connect, send or read failed, or it timed out.
    #[error("{url}: {source}")]
    Transport {
        /// What was asked.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// An answer with a status the caller does not take.
    #[error("{url} answered {status}")]
    Status {
        /// What was asked.
        url: String,
        /// Its status.
        status: reqwest::StatusCode,
    },
    /// A body above the caller's limit.
    #[error("{url}: body larger than {limit} bytes")]
    TooLarge {
        /// What was asked.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// A body that is not the expected JSON.
    #[error("{url}: not the expected JSON: {source}")]
    Json {
        /// What was asked.
        url: String,
        /// The parser's complaint.
        source: serde_json::Error,
    },
}

/// Read `resp`'s body, at most `limit` bytes of it.
pub(crate) async fn read_capped(
    url: &str,
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, FetchError> {
    let mut body = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|source| FetchError::Transport {
            url: url.to_string(),
            source,
        })?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if body.len() + chunk.len() > limit {
            return Err(FetchError::TooLarge {
                url: url.to_string(),
                limit,
            });
        }
        body.extend_from_slice(&chunk);
    }
}

/// An HTTP error answer of the gateway's own: `{"message":<code>,"detail":<detail>}`
/// (the detail is left out when empty).
#[derive(Debug)]
pub struct ErrorAnswer {
    status: StatusCode,
    code: &'static str,
    detail: String,
    retry_after: bool,
}

impl ErrorAnswer {
    /// `status` with error `code` and a `detail` saying what to do.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        ErrorAnswer {
            status,
            code,
            detail: detail.into(),
            retry_after: false,
        }
    }

    /// A 404 whose whole text is `message` (no detail), as discovery answers them.
    pub fn not_found(message: &'static str) -> Self {
        Self::new(StatusCode::NOT_FOUND, message, "")
    }

    /// 429 `E_THROTTLED` with `Retry-After: 1`: the in-flight byte budget is spent.
    pub fn throttled() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "E_THROTTLED",
            "the gateway's in-flight byte budget is spent; retry after the Retry-After delay",
        )
        .retry_after()
    }

    /// Also send `Retry-After: 1`.
    pub fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }

    /// The error code (for tests and logs).
    #[cfg(test)]
    pub fn code(&self) -> &'static str {
        self.code
    }
}

impl IntoResponse for ErrorAnswer {
    fn into_response(self) -> Response {
        let body = if self.detail.is_empty() {
            json!({ "message": self.code })
        } else {
            json!({ "message": self.code, "detail": self.detail })
        };
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body.to_string(),
        )
            .into_response();
        if self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}
