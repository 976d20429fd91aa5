//! The NSQ V2 TCP listener: accepts, enforces `limits.max_connections`, runs one
//! [`session::Session`] per connection.

pub mod conn;
pub mod errors;
pub mod session;
mod trace;

use std::sync::Arc;

use rustqueue_protocol::{ErrorCode, ProtocolError, frame};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::state::Shared;

/// Accepts until shutdown, then waits (bounded by the caller) for sessions to end.
pub async fn serve(shared: Arc<Shared>, listener: TcpListener, sessions: &mut JoinSet<()>) {
    let permits = Arc::new(Semaphore::new(shared.cfg.limits.max_connections));
    let mut shutdown = shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            a = listener.accept() => a,
        };
        let (mut stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let max = shared.cfg.limits.max_connections;
            sessions.spawn(async move {
                let mut out = bytes::BytesMut::new();
                let err = ProtocolError::new(
                    ErrorCode::Invalid,
                    format!("too many connections (limit {max})"),
                );
                frame::put_error(&mut out, &err);
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&out))
                        .await;
            });
            continue;
        };
        let shared = shared.clone();
        sessions.spawn(async move {
            let connections = shared.control.metrics.tcp_connections.clone();
            connections.inc();
            let stats = shared.clients.register(peer);
            let id = stats.id;
            session::Session::new(shared.clone(), conn::Conn::new(stream), peer, stats)
                .run()
                .await;
            shared.clients.remove(id);
            connections.dec();
            drop(permit);
        });
        while sessions.try_join_next().is_some() {}
    }
}
