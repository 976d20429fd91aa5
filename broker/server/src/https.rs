//! The HTTPS listener (`network.https_address`, nsqd's `--https-address`): the same HTTP API
//! over TLS with the broker's certificate.
//!
//! Handshakes run in their own tasks, bounded by [`HANDSHAKE_TIMEOUT`], so a client that
//! connects and never speaks cannot hold up the others; finished connections are handed to
//! axum through [`TlsListener`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections that finished their handshake, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` until `stop` turns true, handshaking each connection with `tls`.
    pub fn new(
        tcp: TcpListener,
        tls: Arc<crate::tls::TlsReloader>,
        mut stop: watch::Receiver<bool>,
    ) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    () = stopped(&mut stop) => return,
                    accepted = tcp.accept() => match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("HTTPS accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                // The configuration in force now: a renewed certificate serves new handshakes.
                let (acceptor, tx) = (TlsAcceptor::from(tls.current()), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "HTTPS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

/// Resolves once shutdown has begun.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // the acceptor stopped: shutdown has begun and axum's graceful shutdown ends this
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
