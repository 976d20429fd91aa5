//! Reaching a Pod's port from wherever the tool runs: its Pod IP when that answers (inside the
//! cluster network), else a port-forward through the API server (`pods/portforward`, what
//! `kubectl port-forward` uses), and HTTP/1.1 over either.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::Portforwarder;
use rustqueue_api::contract::headers;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::TcpStream;

use crate::cli::Via;
use crate::cluster::{Target, one_line, pod_ip, pod_name};

/// How long a connection to a Pod IP may take before `auto` tries a port-forward.
const CONNECT: Duration = Duration::from_secs(2);
/// How long one HTTP exchange may take.
const REQUEST: Duration = Duration::from_secs(30);

/// A byte stream to a Pod's port.
pub enum Stream {
    /// Straight to the Pod IP.
    Direct(TcpStream),
    /// Through the API server; the forwarder lives as long as the stream.
    Forwarded(DuplexStream, Portforwarder),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Direct(s) => Pin::new(s).poll_read(cx, buf),
            Self::Forwarded(s, _) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Direct(s) => Pin::new(s).poll_write(cx, buf),
            Self::Forwarded(s, _) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Direct(s) => Pin::new(s).poll_flush(cx),
            Self::Forwarded(s, _) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Direct(s) => Pin::new(s).poll_shutdown(cx),
            Self::Forwarded(s, _) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Self::Forwarded(_, pf) = self {
            pf.abort();
        }
    }
}

/// Opens streams to Pods the way `--via` says.
#[derive(Clone)]
pub struct Reach {
    target: Target,
    via: Via,
}

impl Reach {
    /// Pods of `target`, reached `via`.
    pub fn new(target: Target, via: Via) -> Self {
        Self { target, via }
    }

    /// A stream to `port` of `pod`.
    pub async fn connect(&self, pod: &Pod, port: u16) -> anyhow::Result<Stream> {
        let name = pod_name(pod);
        let ip = pod_ip(pod);
        match (self.via, ip) {
            (Via::PortForward, _) | (Via::Auto, None) => self.forward(name, port).await,
            (Via::PodIp, None) => bail!("Pod {name} has no IP yet"),
            (Via::PodIp, Some(ip)) => direct(ip, port)
                .await
                .with_context(|| format!("{name} at {ip}:{port}")),
            (Via::Auto, Some(ip)) => match direct(ip, port).await {
                Ok(s) => Ok(s),
                // The Pod IP answered: the port itself is closed, a port-forward would be too.
                Err(e) if refused(&e) => Err(e.context(format!("{name} at {ip}:{port}"))),
                Err(direct_err) => self
                    .forward(name, port)
                    .await
                    .map_err(|e| anyhow!("{ip}:{port}: {direct_err:#}; port-forward: {e:#}")),
            },
        }
    }

    async fn forward(&self, pod: &str, port: u16) -> anyhow::Result<Stream> {
        let api: Api<Pod> = Api::namespaced(self.target.client.clone(), &self.target.namespace);
        let mut pf = tokio::time::timeout(REQUEST, api.portforward(pod, &[port]))
            .await
            .map_err(|_| anyhow!("port-forward to {pod}:{port} timed out"))?
            .map_err(|e| anyhow!("port-forward to {pod}:{port}: {}", one_line(&e)))?;
        let stream = pf
            .take_stream(port)
            .ok_or_else(|| anyhow!("port-forward to {pod}:{port} gave no stream"))?;
        Ok(Stream::Forwarded(stream, pf))
    }

    /// An HTTP request to `pod:port`; returns the status and the body.
    pub async fn http(
        &self,
        pod: &Pod,
        port: u16,
        method: http::Method,
        path: &str,
        token: Option<&str>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let exchange = async {
            let stream = self.connect(pod, port).await?;
            request(stream, pod_name(pod), method, path, token).await
        };
        tokio::time::timeout(REQUEST, exchange)
            .await
            .map_err(|_| anyhow!("{path}: no answer within {}s", REQUEST.as_secs()))?
    }

    /// `GET path` answering 2xx with JSON.
    pub async fn get_json(
        &self,
        pod: &Pod,
        port: u16,
        path: &str,
        token: Option<&str>,
    ) -> anyhow::Result<serde_json::Value> {
        let (status, body) = self.http(pod, port, http::Method::GET, path, token).await?;
        json_2xx(path, status, &body)
    }
}

async fn direct(ip: &str, port: u16) -> anyhow::Result<Stream> {
    let tcp = tokio::time::timeout(CONNECT, TcpStream::connect((ip, port)))
        .await
        .map_err(|_| anyhow!("no connection within {}s", CONNECT.as_secs()))??;
    Ok(Stream::Direct(tcp))
}

/// Whether a connection attempt reached the host and was refused.
fn refused(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

async fn request(
    stream: Stream,
    host: &str,
    method: http::Method,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, Bytes)> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| anyhow!("{path}: {e}"))?;
    let driver = tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, host);
    if let Some(t) = token {
        req = req.header(headers::TOKEN, t);
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| anyhow!("{path}: {e}"))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| anyhow!("{path}: {e}"))?;
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| anyhow!("{path}: reading the body: {e}"))?
        .to_bytes();
    driver.abort();
    Ok((status, body))
}

/// The body as JSON when `status` is 2xx, else an error with the broker's `message`.
pub fn json_2xx(path: &str, status: u16, body: &[u8]) -> anyhow::Result<serde_json::Value> {
    let value: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        let why = value
            .as_ref()
            .and_then(|v| v.get("message"))
            .and_then(|m| m.as_str())
            .map_or_else(
                || String::from_utf8_lossy(body).trim().to_string(),
                str::to_string,
            );
        bail!("{path}: HTTP {status} {why}");
    }
    value.ok_or_else(|| anyhow!("{path}: HTTP {status} with a body that is not JSON"))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_refused_connection_is_told_from_an_unreachable_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = super::direct("127.0.0.1", port).await.err().unwrap();
        assert!(super::refused(&err), "{err:#}");
        assert!(!super::refused(&anyhow::anyhow!("no connection within 2s")));
    }

    #[test]
    fn errors_carry_the_brokers_code() {
        let err = super::json_2xx("/v1/stats", 401, br#"{"message":"E_UNAUTHORIZED"}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "/v1/stats: HTTP 401 E_UNAUTHORIZED");
        let ok = super::json_2xx("/v1/health", 200, br#"{"status":"ready"}"#).unwrap();
        assert_eq!(ok["status"], "ready");
        assert!(super::json_2xx("/x", 200, b"OK").is_err());
    }
}
