//! AUTH against nsqd-style external auth servers.
//!
//! `GET <server>/auth?remote_ip=&tls=&secret=&common_name=` answers
//! `{ttl, identity, identity_url, authorizations:[{permissions, topic, channels}]}`. Servers are
//! tried in order: 401/403 is a definitive denial; other failures try the next server. Topic and
//! channel patterns are unanchored regexes, like nsqd.

use std::time::{Duration, Instant};

use regex::Regex;
use serde::Deserialize;

/// Why AUTH failed; maps to `E_AUTH_FAILED` or `E_UNAUTHORIZED`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The auth server said no (401/403).
    #[error("AUTH denied by {0}")]
    Denied(String),
    /// No server could answer usefully.
    #[error("AUTH failed: {0}")]
    Unavailable(String),
    /// The answer held no usable grants.
    #[error("AUTH no authorizations found")]
    NoGrants,
}

#[derive(Deserialize)]
struct Response {
    ttl: i64,
    #[serde(default)]
    identity: String,
    #[serde(default)]
    identity_url: String,
    #[serde(default)]
    authorizations: Vec<RawGrant>,
}

#[derive(Deserialize)]
struct RawGrant {
    #[serde(default)]
    permissions: Vec<String>,
    topic: String,
    #[serde(default)]
    channels: Vec<String>,
}

/// One compiled grant.
#[derive(Clone, Debug)]
pub struct Grant {
    publish: bool,
    subscribe: bool,
    topic: Regex,
    channels: Vec<Regex>,
}

/// A successful AUTH: identity and grants valid until `expires`.
#[derive(Clone, Debug)]
pub struct AuthState {
    /// Identity reported by the server.
    pub identity: String,
    /// Identity URL reported by the server.
    pub identity_url: String,
    /// Grants.
    pub grants: Vec<Grant>,
    /// When to ask again.
    pub expires: Instant,
}

impl AuthState {
    /// Whether a publish to `topic` is allowed.
    pub fn may_publish(&self, topic: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.publish && g.topic.is_match(topic))
    }

    /// Whether a subscribe to `topic`/`channel` is allowed.
    pub fn may_subscribe(&self, topic: &str, channel: &str) -> bool {
        self.grants.iter().any(|g| {
            g.subscribe && g.topic.is_match(topic) && g.channels.iter().any(|c| c.is_match(channel))
        })
    }

    /// The AUTH reply body.
    pub fn reply_json(&self) -> Vec<u8> {
        serde_json::json!({
            "identity": self.identity,
            "identity_url": self.identity_url,
            "permission_count": self.grants.len(),
        })
        .to_string()
        .into_bytes()
    }
}

/// Parses an auth server answer into an [`AuthState`].
pub fn parse_response(
    body: &[u8],
    max_ttl: Duration,
    now: Instant,
) -> Result<AuthState, AuthError> {
    let r: Response = serde_json::from_slice(body)
        .map_err(|e| AuthError::Unavailable(format!("bad JSON: {e}")))?;
    if r.ttl <= 0 {
        return Err(AuthError::Unavailable(format!("ttl {} must be > 0", r.ttl)));
    }
    let ttl = Duration::from_secs(r.ttl as u64).min(max_ttl);
    let mut grants = Vec::new();
    for g in r.authorizations.iter().take(256) {
        let (Ok(topic), Ok(channels)) = (
            Regex::new(&g.topic),
            g.channels
                .iter()
                .map(|c| Regex::new(c))
                .collect::<Result<Vec<_>, _>>(),
        ) else {
            continue;
        };
        let publish = g.permissions.iter().any(|p| p == "publish");
        let subscribe = g.permissions.iter().any(|p| p == "subscribe");
        if publish || subscribe {
            grants.push(Grant {
                publish,
                subscribe,
                topic,
                channels,
            });
        }
    }
    if grants.is_empty() {
        return Err(AuthError::NoGrants);
    }
    Ok(AuthState {
        identity: r.identity,
        identity_url: r.identity_url,
        grants,
        expires: now + ttl,
    })
}

/// The facts sent to the auth server.
#[derive(Clone, Debug)]
pub struct AuthRequest {
    /// Client IP.
    pub remote_ip: String,
    /// Connection is TLS.
    pub tls: bool,
    /// Client certificate CN (empty without one).
    pub common_name: String,
    /// The secret from the AUTH body.
    pub secret: String,
}

/// HTTP client for the configured auth servers.
#[derive(Clone)]
pub struct AuthClient {
    servers: Vec<String>,
    http: reqwest::Client,
    max_ttl: Duration,
    max_response: usize,
}

impl AuthClient {
    /// A client for `servers` (an `http://` scheme is added when missing).
    pub fn new(
        servers: &[String],
        timeout: Duration,
        max_ttl: Duration,
        max_response: usize,
    ) -> Self {
        let servers = servers
            .iter()
            .map(|s| {
                if s.contains("://") {
                    s.trim_end_matches('/').to_owned()
                } else {
                    format!("http://{}", s.trim_end_matches('/'))
                }
            })
            .collect();
        let http = rustqueue_api::http_client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(2)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("static reqwest settings are valid");
        Self {
            servers,
            http,
            max_ttl,
            max_response,
        }
    }

    /// Whether AUTH is enabled.
    pub fn enabled(&self) -> bool {
        !self.servers.is_empty()
    }

    /// Asks the servers in order.
    pub async fn authenticate(&self, req: &AuthRequest) -> Result<AuthState, AuthError> {
        let mut last = AuthError::Unavailable("no auth server configured".into());
        for server in &self.servers {
            let query = [
                ("remote_ip", req.remote_ip.as_str()),
                ("tls", if req.tls { "true" } else { "false" }),
                ("secret", req.secret.as_str()),
                ("common_name", req.common_name.as_str()),
            ];
            let resp = match self
                .http
                .get(format!("{server}/auth"))
                .query(&query)
                .send()
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    last = AuthError::Unavailable(format!("{server}: {e}"));
                    continue;
                }
            };
            let status = resp.status().as_u16();
            if status == 401 || status == 403 {
                return Err(AuthError::Denied(format!("{server} answered {status}")));
            }
            if !resp.status().is_success() {
                last = AuthError::Unavailable(format!("{server} answered {status}"));
                continue;
            }
            match resp.bytes().await {
                Ok(body) if body.len() <= self.max_response => {
                    match parse_response(&body, self.max_ttl, Instant::now()) {
                        Ok(state) => return Ok(state),
                        Err(AuthError::NoGrants) => return Err(AuthError::NoGrants),
                        Err(e) => last = e,
                    }
                }
                Ok(body) => {
                    last = AuthError::Unavailable(format!(
                        "{server}: response of {} bytes",
                        body.len()
                    ))
                }
                Err(e) => last = AuthError::Unavailable(format!("{server}: {e}")),
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> Result<AuthState, AuthError> {
        parse_response(json.as_bytes(), Duration::from_secs(3600), Instant::now())
    }

    #[test]
    fn grants_match_unanchored_regexes_per_permission() {
        let s = state(
            r#"{"ttl":10,"identity":"me","authorizations":[
            {"permissions":["publish"],"topic":"^orders$","channels":[]},
            {"permissions":["subscribe"],"topic":"events","channels":["^audit", "x"]}]}"#,
        )
        .unwrap();
        assert!(s.may_publish("orders"));
        assert!(!s.may_publish("orders2"));
        assert!(!s.may_publish("events"));
        assert!(s.may_subscribe("my-events-topic", "audit1"));
        assert!(s.may_subscribe("events", "box"));
        assert!(!s.may_subscribe("events", "other"));
        assert!(!s.may_subscribe("orders", "audit"));
        let reply: serde_json::Value = serde_json::from_slice(&s.reply_json()).unwrap();
        assert_eq!(reply["permission_count"], 2);
        assert_eq!(reply["identity"], "me");
    }

    #[test]
    fn ttl_is_capped_and_must_be_positive() {
        let s = parse_response(
            br#"{"ttl":99999,"authorizations":[{"permissions":["publish"],"topic":".*"}]}"#,
            Duration::from_secs(60),
            Instant::now(),
        )
        .unwrap();
        assert!(s.expires <= Instant::now() + Duration::from_secs(60));
        assert!(matches!(
            state(r#"{"ttl":0,"authorizations":[]}"#),
            Err(AuthError::Unavailable(_))
        ));
    }

    #[test]
    fn no_usable_grant_is_unauthorized() {
        assert!(matches!(
            state(r#"{"ttl":5,"authorizations":[]}"#),
            Err(AuthError::NoGrants)
        ));
        assert!(matches!(
            state(r#"{"ttl":5,"authorizations":[{"permissions":["read"],"topic":".*"}]}"#),
            Err(AuthError::NoGrants)
        ));
        assert!(matches!(
            state(r#"{"ttl":5,"authorizations":[{"permissions":["publish"],"topic":"("}]}"#),
            Err(AuthError::NoGrants)
        ));
    }
}
