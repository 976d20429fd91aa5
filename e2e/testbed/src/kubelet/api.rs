//! The kubelet API, as far as `kubectl logs` and port-forwarding need it: the API server proxies
//! `pods/log` to `https://<Node InternalIP>:<kubelet port>/containerLogs/<ns>/<pod>/<container>`,
//! so the process kubelet serves that over TLS (the testbed's kubelet serving certificate) on
//! `127.0.0.1:10250`, the address and port every testbed Node reports. `previous`, `tailLines`
//! and `limitBytes` are honoured; `follow` returns what is written so far. `/configz` reports
//! the kubelet configuration fields the testbed has (`clusterDNS`, `clusterDomain`), in the
//! shape a real kubelet's has (`{"kubeletconfig": {...}}`, reached through the API server's
//! `nodes/<name>/proxy/configz`). `/portForward/<ns>/<pod>` forwards Pod ports over WebSockets
//! (see [`super::portforward`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;

use super::Kubelet;
use crate::Error;

/// The kubelet port every Node advertises (`status.daemonEndpoints.kubeletEndpoint`).
pub(crate) const PORT: u16 = 10250;

/// Serves the kubelet API until the task is aborted.
pub(crate) async fn serve(k: Arc<Kubelet>) -> Result<JoinHandle<()>, Error> {
    let tls = tls_config(&k.cfg.serving.cert, &k.cfg.serving.key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let addr = SocketAddr::from(([127, 0, 0, 1], PORT));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io("binding the kubelet API on", addr.to_string(), e))?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/configz", get(configz))
        .route(
            "/portForward/{ns}/{pod}",
            get(super::portforward::handle).post(super::portforward::handle),
        )
        .with_state(k);
    Ok(tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    }))
}

fn tls_config(cert_pem: &str, key_pem: &str) -> Result<rustls::ServerConfig, Error> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pki(format!("kubelet serving certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| Error::Pki(format!("kubelet serving key: {e}")))?;
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| Error::Pki(format!("kubelet TLS: {e}")))
}

async fn container_logs(
    State(k): State<Arc<Kubelet>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<String, (StatusCode, String)> {
    let previous = q.get("previous").is_some_and(|v| v == "true");
    let text = k
        .logs(&ns, &pod, &container, previous)
        .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
    Ok(trim(
        text,
        q.get("tailLines").and_then(|v| v.parse().ok()),
        q.get("limitBytes").and_then(|v| v.parse().ok()),
    ))
}

async fn configz(State(k): State<Arc<Kubelet>>) -> axum::Json<serde_json::Value> {
    let dns: Vec<&str> = k.cfg.cluster_dns.iter().map(String::as_str).collect();
    axum::Json(serde_json::json!({
        "kubeletconfig": {
            "kind": "KubeletConfiguration",
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "clusterDNS": dns,
            "clusterDomain": crate::network::CLUSTER_DOMAIN,
            "port": PORT,
        }
    }))
}

/// `tailLines` then `limitBytes`, as the kubelet applies them.
fn trim(text: String, tail_lines: Option<usize>, limit_bytes: Option<usize>) -> String {
    let mut out = match tail_lines {
        Some(n) => {
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            lines[lines.len().saturating_sub(n)..].concat()
        }
        None => text,
    };
    if let Some(limit) = limit_bytes
        && out.len() > limit
    {
        let mut cut = limit;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn tail_lines_and_limit_bytes_cut_the_log_like_the_kubelet() {
        let log = "a\nb\nc\n".to_string();
        assert_eq!(super::trim(log.clone(), Some(2), None), "b\nc\n");
        assert_eq!(super::trim(log.clone(), None, Some(3)), "a\nb");
        assert_eq!(super::trim(log, Some(10), None), "a\nb\nc\n");
    }
}
