//! `pods/portforward` over WebSockets, the kubelet's side.
//!
//! A client that offers the channel subprotocols (`v4.channel.k8s.io`, as kube-rs's
//! `Api::portforward` and other non-Go clients do) is proxied by the API server unchanged to
//! `GET /portForward/<ns>/<pod>?port=<p>...` on the kubelet (it translates to SPDY only for the
//! `SPDY/3.1+portforward.k8s.io` tunnelling protocol kubectl offers). The kubelet then speaks
//! the protocol of the upstream kubelet's `cri/streaming/portforward/websocket.go`: for the
//! k-th port, channel `2k` carries data both ways and `2k+1` errors to the client; every
//! binary frame starts with its channel byte, and the first frame the kubelet sends on each
//! channel is the port as a little-endian u16. Each port is one TCP connection to the Pod IP
//! (all Pods live in the testbed's network namespace, like the kubelet itself); a failed
//! connection is reported as text on the error channel, and the WebSocket closes when every
//! connection has ended.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::Kubelet;

/// The subprotocols the upstream kubelet accepts with binary frames ("" = none offered).
/// (`v4.base64.channel.k8s.io`, the base64 variant, is not implemented.)
const BINARY_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", ""];

/// The first subprotocol the client offers that is served, as upstream's handshake picks it.
pub(crate) fn choose_protocol(offered: Option<&str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered
        .map(|h| h.split(',').map(str::trim).collect())
        .unwrap_or_else(|| vec![""]);
    offered
        .iter()
        .find_map(|o| BINARY_PROTOCOLS.iter().find(|p| *p == o).copied())
}

/// The ports of the request: every `port` value (comma-separated lists too).
pub(crate) fn ports(query: &[(String, String)]) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for (k, v) in query.iter().filter(|(k, _)| k == "port") {
        for p in v.split(',') {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => out.push(n),
                _ => return Err(format!("unable to parse {v:?} as a port ({k})")),
            }
        }
    }
    if out.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    Ok(out)
}

/// `GET /portForward/{ns}/{pod}`.
pub(crate) async fn handle(
    State(k): State<Arc<Kubelet>>,
    Path((ns, pod)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    mut req: Request,
) -> Response {
    let fail = |code: StatusCode, msg: String| (code, msg).into_response();
    let headers = req.headers().clone();
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return fail(
            StatusCode::BAD_REQUEST,
            "only WebSocket port forwarding is implemented (no SPDY)".into(),
        );
    };
    let offered = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok());
    let Some(protocol) = choose_protocol(offered) else {
        return fail(
            StatusCode::BAD_REQUEST,
            format!("none of the subprotocols {offered:?} is supported"),
        );
    };
    let ports = match ports(&query) {
        Ok(p) => p,
        Err(e) => return fail(StatusCode::BAD_REQUEST, e),
    };
    let pods: Api<Pod> = Api::namespaced(k.cfg.client.clone(), &ns);
    let ip = match pods.get_opt(&pod).await {
        Ok(Some(p)) => p.status.and_then(|s| s.pod_ip),
        Ok(None) => return fail(StatusCode::NOT_FOUND, format!("pod {ns}/{pod} not found")),
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(ip) = ip else {
        return fail(StatusCode::BAD_REQUEST, format!("pod {ns}/{pod} has no IP"));
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                forward(ws, &ip, &pod, &ports).await;
            }
            Err(e) => tracing::warn!(%e, "port-forward upgrade failed"),
        }
    });
    switching_protocols(key.as_bytes(), protocol)
}

fn switching_protocols(key: &[u8], protocol: &str) -> Response {
    let mut res = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, derive_accept_key(key));
    if !protocol.is_empty() {
        res = res.header(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    res.body(Body::empty())
        .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
}

/// `[channel] ++ data` as a binary frame.
fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

async fn forward<S>(ws: WebSocketStream<S>, ip: &str, pod: &str, ports: &[u16])
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut source) = ws.split();
    let (out, mut outgoing) = mpsc::channel::<Message>(64);
    let mut writers: HashMap<u8, OwnedWriteHalf> = HashMap::new();
    let mut open = 0usize;
    for (i, &port) in ports.iter().enumerate() {
        let data = u8::try_from(2 * i).unwrap_or(u8::MAX - 1);
        let _ = out.send(frame(data, &port.to_le_bytes())).await;
        let _ = out.send(frame(data + 1, &port.to_le_bytes())).await;
        match tokio::net::TcpStream::connect((ip, port)).await {
            Ok(tcp) => {
                let (mut read, write) = tcp.into_split();
                writers.insert(data, write);
                open += 1;
                let out = out.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    while let Ok(n @ 1..) = read.read(&mut buf).await {
                        if out.send(frame(data, &buf[..n])).await.is_err() {
                            break;
                        }
                    }
                    let _ = out.send(Message::Text("eof".into())).await;
                });
            }
            Err(e) => {
                let msg = format!("error forwarding port {port} to pod {pod}: {e}");
                let _ = out.send(frame(data + 1, msg.as_bytes())).await;
            }
        }
    }
    drop(out);
    // Our own marker: a Text "eof" from a reader task, never sent to the client.
    let mut ended = 0usize;
    loop {
        tokio::select! {
            m = outgoing.recv() => match m {
                Some(Message::Text(_)) => {
                    ended += 1;
                    if ended >= open { break; }
                }
                Some(m) => if sink.send(m).await.is_err() { return; },
                None => break,
            },
            m = source.next() => match m {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => {
                    if let Some(w) = writers.get_mut(&b[0])
                        && w.write_all(&b[1..]).await.is_err()
                    {
                        writers.remove(&b[0]);
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    for (_, mut w) in writers.drain() {
                        let _ = w.shutdown().await;
                    }
                    return;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    // Flush what the readers queued before their end, then close like upstream's conn.Close().
    while let Ok(m) = outgoing.try_recv() {
        if !matches!(m, Message::Text(_)) {
            let _ = sink.send(m).await;
        }
    }
    let _ = sink.send(Message::Close(None)).await;
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_offered_binary_protocol_is_chosen_as_upstream_does() {
        assert_eq!(
            choose_protocol(Some("v5.channel.k8s.io, v4.channel.k8s.io")),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(choose_protocol(None), Some(""));
        assert_eq!(choose_protocol(Some("SPDY/3.1+portforward.k8s.io")), None);
        assert_eq!(choose_protocol(Some("v4.base64.channel.k8s.io")), None);
    }

    #[test]
    fn ports_come_from_every_port_parameter() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            ports(&q(&[("port", "80"), ("port", "8080")])),
            Ok(vec![80, 8080])
        );
        assert_eq!(ports(&q(&[("port", "80,81")])), Ok(vec![80, 81]));
        assert!(ports(&q(&[])).is_err());
        assert!(ports(&q(&[("port", "0")])).is_err());
        assert!(ports(&q(&[("port", "x")])).is_err());
    }
}
