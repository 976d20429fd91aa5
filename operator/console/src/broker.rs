//! The console's HTTP client of the brokers' console contract (`/v1/observe*`,
//! `/v1/manage/*`), with the console token re-read from its file on every call so a rotated
//! Secret takes effect without a restart.

use std::path::PathBuf;
use std::time::Duration;

use rustqueue_api::contract::{
    ErrorBody, FenceSync, ManageAction, ManageKind, ManageRequest, ManageResponse, Observation,
    ObserveHead, headers, paths,
};
use serde::de::DeserializeOwned;

/// Most bytes of an observe head.
pub const HEAD_LIMIT: usize = 256 * 1024;
/// Most bytes of a full observation.
pub const OBSERVE_LIMIT: usize = 32 * 1024 * 1024;
/// Brokers polled at once.
pub const OBSERVE_PARALLELISM: usize = 32;
/// Brokers sent a fence sync at once by the reconciler.
pub const FENCE_PARALLELISM: usize = 64;

/// What went wrong talking to a broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The console token file could not be read.
    #[error("console token unavailable: {0}")]
    Token(String),
    /// Connect, timeout or transport error.
    #[error("{0}")]
    Transport(String),
    /// The broker answered with an error status.
    #[error("HTTP {status} {code}: {detail}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The error body's `message` (an `E_*` code), or empty.
        code: String,
        /// The error body's `detail`.
        detail: String,
    },
    /// The body was too large or not the expected JSON.
    #[error("bad response: {0}")]
    Body(String),
}

/// The broker client.
#[derive(Clone)]
pub struct BrokerClient {
    http: reqwest::Client,
    token_file: PathBuf,
    port: u16,
}

impl BrokerClient {
    /// A client: connect 500 ms, total 1.5 s (management posts 15 s).
    pub fn new(token_file: PathBuf, port: u16) -> Self {
        let http = rustqueue_api::http_client::builder()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_millis(1500))
            .build()
            .expect("static reqwest settings are valid");
        Self {
            http,
            token_file,
            port,
        }
    }

    fn url(&self, ip: &str, path: &str) -> String {
        if ip.contains(':') {
            format!("http://[{ip}]:{}{path}", self.port)
        } else {
            format!("http://{ip}:{}{path}", self.port)
        }
    }

    fn token(&self) -> Result<String, BrokerError> {
        let t = std::fs::read_to_string(&self.token_file)
            .map_err(|e| BrokerError::Token(format!("{}: {e}", self.token_file.display())))?;
        let t = t.trim();
        if t.is_empty() {
            return Err(BrokerError::Token(format!(
                "{} is empty",
                self.token_file.display()
            )));
        }
        Ok(t.to_string())
    }

    /// `GET /v1/observe/head`.
    pub async fn head(&self, ip: &str) -> Result<ObserveHead, BrokerError> {
        let req = self.http.get(self.url(ip, paths::OBSERVE_HEAD));
        self.send(req, HEAD_LIMIT).await
    }

    /// `GET /v1/observe`.
    pub async fn observe(&self, ip: &str) -> Result<Observation, BrokerError> {
        let req = self
            .http
            .get(self.url(ip, paths::OBSERVE))
            .timeout(Duration::from_secs(15));
        self.send(req, OBSERVE_LIMIT).await
    }

    /// `POST /v1/manage/fences/sync`.
    pub async fn sync_fences(&self, ip: &str, fences: &FenceSync) -> Result<(), BrokerError> {
        let req = self
            .http
            .post(self.url(ip, paths::FENCES_SYNC))
            .timeout(Duration::from_secs(15))
            .json(fences);
        self.send::<serde_json::Value>(req, HEAD_LIMIT)
            .await
            .map(drop)
    }

    /// `POST /v1/manage/{topics|channels}/{action}`.
    pub async fn manage(
        &self,
        ip: &str,
        kind: ManageKind,
        action: ManageAction,
        body: &ManageRequest,
    ) -> Result<ManageResponse, BrokerError> {
        let base = match kind {
            ManageKind::Topic => paths::MANAGE_TOPICS,
            ManageKind::Channel => paths::MANAGE_CHANNELS,
        };
        let req = self
            .http
            .post(self.url(ip, &format!("{base}/{action}")))
            .timeout(Duration::from_secs(15))
            .json(body);
        self.send(req, HEAD_LIMIT).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        limit: usize,
    ) -> Result<T, BrokerError> {
        let token = self.token()?;
        let resp = req
            .header(headers::TOKEN, token)
            .send()
            .await
            .map_err(|e| BrokerError::Transport(transport_text(&e)))?;
        let status = resp.status();
        let bytes = read_limited(resp, limit).await?;
        if !status.is_success() {
            let body: Option<ErrorBody> = serde_json::from_slice(&bytes).ok();
            return Err(BrokerError::Status {
                status: status.as_u16(),
                code: body.as_ref().map(|b| b.message.clone()).unwrap_or_default(),
                detail: body
                    .map(|b| b.detail)
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(256).collect()),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| BrokerError::Body(e.to_string()))
    }
}

async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, BrokerError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| BrokerError::Transport(transport_text(&e)))?
    {
        if out.len() + chunk.len() > limit {
            return Err(BrokerError::Body(format!("larger than {limit} bytes")));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn transport_text(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    match e.url() {
        Some(u) => format!("{what}: {}{}", u.authority(), u.path()),
        None => what.to_string(),
    }
}
