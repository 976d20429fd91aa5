//! AUTH inside a session: the AUTH command and nsqd's `CheckAuth` before PUB/SUB.

use crate::auth::{AuthError, AuthRequest};
use crate::tcp::session::{Next, Session, State};
use rustqueue_protocol::{ErrorCode, ProtocolError};

impl Session {
    pub(super) fn auth_request(&self, secret: &[u8]) -> AuthRequest {
        AuthRequest {
            remote_ip: self.peer.ip().to_string(),
            tls: self.conn.is_tls(),
            common_name: self.conn.peer_common_name().unwrap_or_default(),
            secret: String::from_utf8_lossy(secret).into_owned(),
        }
    }

    pub(super) async fn authenticate(&mut self, secret: Vec<u8>) -> std::io::Result<Next> {
        if !self.shared.auth.enabled() {
            return self
                .fail(ProtocolError::new(ErrorCode::AuthDisabled, "AUTH disabled"))
                .await;
        }
        if self.auth.is_some() {
            return self.fail(ProtocolError::invalid("AUTH already set")).await;
        }
        if self.state != State::Init {
            return self
                .fail(ProtocolError::invalid("cannot AUTH in current state"))
                .await;
        }
        let req = self.auth_request(&secret);
        match self.shared.auth.authenticate(&req).await {
            Ok(state) => {
                let reply = state.reply_json();
                self.stats.update(|f| {
                    f.authed = true;
                    f.auth_identity = state.identity.clone();
                });
                self.auth = Some((state, secret));
                self.conn.response(&reply);
                self.flush_now().await?;
                Ok(Next::Continue)
            }
            Err(e) => {
                self.shared.control.metrics.auth_failures_total.inc();
                self.fail(auth_error(&e)).await
            }
        }
    }

    /// nsqd `CheckAuth`: AUTH first, refresh after the TTL, then the grant.
    pub(super) async fn check_auth(
        &mut self,
        cmd: &str,
        topic: &str,
        channel: Option<&str>,
    ) -> Option<ProtocolError> {
        if !self.shared.auth.enabled() {
            return None;
        }
        let Some((state, secret)) = &self.auth else {
            return Some(ProtocolError::new(
                ErrorCode::AuthFirst,
                "AUTH required before ".to_owned() + cmd,
            ));
        };
        if state.expires <= std::time::Instant::now() {
            let req = self.auth_request(&secret.clone());
            match self.shared.auth.authenticate(&req).await {
                Ok(fresh) => {
                    if let Some(a) = self.auth.as_mut() {
                        a.0 = fresh;
                    }
                }
                Err(e) => {
                    self.shared.control.metrics.auth_failures_total.inc();
                    return Some(auth_error(&e));
                }
            }
        }
        let state = &self.auth.as_ref()?.0;
        let allowed = match channel {
            Some(ch) => state.may_subscribe(topic, ch),
            None => state.may_publish(topic),
        };
        (!allowed).then(|| {
            ProtocolError::new(
                ErrorCode::Unauthorized,
                format!(
                    "AUTH failed for {cmd} on {topic:?} {:?}",
                    channel.unwrap_or("")
                ),
            )
        })
    }
}

fn auth_error(e: &AuthError) -> ProtocolError {
    match e {
        AuthError::NoGrants => {
            ProtocolError::new(ErrorCode::Unauthorized, "AUTH no authorizations found")
        }
        AuthError::Denied(_) | AuthError::Unavailable(_) => {
            tracing::info!("{e}");
            ProtocolError::new(ErrorCode::AuthFailed, "AUTH failed")
        }
    }
}
