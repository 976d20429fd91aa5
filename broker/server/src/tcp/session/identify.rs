//! IDENTIFY: feature negotiation, then the TLS and compression upgrades it asks for, each
//! answered with its own `OK` in the order nsqd sends them.

use rustqueue_protocol::identify::{IdentifyRequest, IdentifyResponse, negotiate};
use rustqueue_protocol::{ErrorCode, ProtocolError, frame};

use crate::compress::Compression;
use crate::tcp::session::{Next, Session, State};

impl Session {
    pub(super) async fn identify(&mut self, body: &[u8]) -> std::io::Result<Next> {
        if self.commands_seen != 1 || self.state != State::Init {
            return self
                .fail(ProtocolError::invalid("cannot IDENTIFY in current state"))
                .await;
        }
        let parsed =
            IdentifyRequest::parse(body).and_then(|req| negotiate(&req, &self.shared.identify));
        let n = match parsed {
            Ok(n) => n,
            Err(e) => return self.fail(e).await,
        };
        self.params = n.clone();
        self.stats.update(|f| {
            f.client_id = n.client_id.clone();
            f.hostname = n.hostname.clone();
            f.user_agent = n.user_agent.clone();
            f.sample_rate = n.sample_rate;
            f.snappy = n.snappy;
            f.deflate = n.deflate_level.is_some();
        });
        if n.feature_negotiation {
            let reply = IdentifyResponse::new(&n, &self.shared.identify).to_json();
            self.conn.response(&reply);
        } else {
            self.conn.response(frame::OK);
        }
        self.flush_now().await?;
        if n.tls {
            let Some(cfg) = self.shared.tls.as_ref().map(|t| t.current()) else {
                return Ok(Next::Close);
            };
            if let Err(e) = self.conn.upgrade_tls(cfg).await {
                tracing::debug!(peer = %self.peer, "TLS handshake failed: {e}");
                return Ok(Next::Close);
            }
            self.stats.update(|f| f.tls = true);
            self.conn.response(frame::OK);
            self.flush_now().await?;
        }
        // A plaintext client on a TLS-required broker is refused at its next command,
        // after the compression upgrade, so the error frame is readable (like nsqd).
        let upgrade = if n.snappy {
            Some(self.conn.upgrade_compression(Compression::snappy))
        } else {
            n.deflate_level.map(|level| {
                self.conn
                    .upgrade_compression(|| Compression::deflate(level))
            })
        };
        match upgrade {
            None => {}
            Some(Ok(())) => {
                self.conn.response(frame::OK);
                self.flush_now().await?;
            }
            Some(Err(e)) => {
                let err = ProtocolError::new(
                    ErrorCode::IdentifyFailed,
                    format!("compression upgrade failed: {e}"),
                );
                return self.fail(err).await;
            }
        }
        Ok(Next::Continue)
    }
}
