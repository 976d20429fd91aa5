//! The refresh loop: every 2 s (and at once when the endpoint set changes) poll each broker's
//! `/v1/registry/head`, fetch `/v1/registry` only when the head says the registry changed,
//! update the index incrementally and expire brokers that left or went silent.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rustqueue_api::contract::{DATA_FORMAT, Registry, RegistryHead, paths};
use tokio::sync::watch;

use crate::index::Broker;
use crate::source::View;
use crate::{STALE_AFTER, Shared};

/// Poll period.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// At most this many broker polls run at once.
pub const MAX_CONCURRENT_POLLS: usize = 128;
/// Largest `/v1/registry/head` body read.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest `/v1/registry` body read.
pub const MAX_REGISTRY_BYTES: usize = 16 * 1024 * 1024;

/// Poller settings.
#[derive(Debug, Clone, Default)]
pub struct PollerConfig {
    /// File holding the broker registry token (re-read every cycle).
    pub registry_token_file: Option<PathBuf>,
}

/// What one broker poll found.
#[derive(Debug)]
enum Outcome {
    /// Head identical to the cached observation.
    Unchanged,
    /// Same revision, different readiness flags.
    Flags { publish: bool, consume: bool },
    /// A new full registry.
    Full(Box<Broker>),
    /// The broker reports a registry format we do not read: ignored.
    Ignored,
}

/// HTTP client with the poller's timeouts (connect 300 ms, total 750 ms, idle pool 10 s, no
/// redirects).
pub fn client() -> reqwest::Client {
    rustqueue_api::http_client::builder()
        .connect_timeout(Duration::from_millis(300))
        .timeout(Duration::from_millis(750))
        .pool_idle_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("reqwest client with static settings")
}

/// Why one broker poll gave nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// Nothing listens at the endpoint, or it is unreachable: the broker is gone, not slow,
    /// and leaves the lookup at once.
    #[error("connect failed: {url}: {cause}")]
    Unreachable {
        /// What was asked.
        url: String,
        /// The cause with its sources.
        cause: String,
    },
    /// The request failed after connecting, or timed out.
    #[error("{url}: {cause}")]
    Transport {
        /// What was asked.
        url: String,
        /// The cause with its sources.
        cause: String,
    },
    /// A body above the limit.
    #[error("{url}: body larger than {limit} bytes")]
    TooLarge {
        /// What was asked.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// An answer with a status other than success.
    #[error("{endpoint}: {what} answered {status}")]
    Status {
        /// The broker.
        endpoint: String,
        /// `registry head` or `registry`.
        what: &'static str,
        /// Its status.
        status: reqwest::StatusCode,
    },
    /// A body that is not the contract's JSON.
    #[error("{what}: {source}")]
    Parse {
        /// `registry head` or `registry`.
        what: &'static str,
        /// The parser's complaint.
        source: serde_json::Error,
    },
}

/// Why a whole refresh did not succeed (the source then ages towards stale).
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The endpoint source reports a problem (EndpointSlices not listed, apiserver probe).
    #[error("{0}")]
    Source(String),
    /// The registry token file could not be read.
    #[error("registry token file {path}: {source}")]
    TokenUnreadable {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The registry token file is empty.
    #[error("registry token file {path} is empty")]
    TokenEmpty {
        /// The file.
        path: String,
    },
    /// Brokers are known but none answered; the last failure.
    #[error(transparent)]
    Poll(#[from] PollError),
    /// Brokers are known but none answered.
    #[error("no broker answered")]
    NoBrokerAnswered,
}

async fn get_limited(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    limit: usize,
) -> Result<(reqwest::StatusCode, Vec<u8>), PollError> {
    let mut req = http.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let url_owned = || url.to_string();
    let mut resp = req.send().await.map_err(|e| {
        // Nothing listens (refused) or the address is unreachable: the broker is gone, not
        // slow; the caller drops it at once.
        if e.is_connect() {
            PollError::Unreachable {
                url: url_owned(),
                cause: chain(&e),
            }
        } else {
            PollError::Transport {
                url: url_owned(),
                cause: chain(&e),
            }
        }
    })?;
    let status = resp.status();
    let too_large = || PollError::TooLarge {
        url: url_owned(),
        limit,
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| PollError::Transport {
        url: url_owned(),
        cause: chain(&e),
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

/// An error with its sources (reqwest's own message omits the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Parse a `/v1/registry/head` body.
pub fn parse_head(body: &[u8]) -> Result<RegistryHead, PollError> {
    serde_json::from_slice(body).map_err(|source| PollError::Parse {
        what: "registry head",
        source,
    })
}

/// Parse a `/v1/registry` body.
pub fn parse_registry(body: &[u8]) -> Result<Registry, PollError> {
    serde_json::from_slice(body).map_err(|source| PollError::Parse {
        what: "registry",
        source,
    })
}

async fn poll_one(
    http: &reqwest::Client,
    endpoint: &str,
    token: Option<&str>,
    cached: Option<Broker>,
    shared: &Shared,
) -> Result<Outcome, PollError> {
    let base = format!("http://{endpoint}");
    let (status, body) = get_limited(
        http,
        &format!("{base}{}", paths::REGISTRY_HEAD),
        token,
        MAX_HEAD_BYTES,
    )
    .await?;
    let need_full = if status == reqwest::StatusCode::NOT_FOUND {
        true
    } else if !status.is_success() {
        return Err(PollError::Status {
            endpoint: endpoint.to_string(),
            what: "registry head",
            status,
        });
    } else {
        let head = parse_head(&body)?;
        match cached {
            Some(c)
                if head.format == DATA_FORMAT
                    && c.revision == head.revision
                    && c.node_id == head.node_id =>
            {
                if c.publish_ready == head.publish_ready && c.consume_ready == head.consume_ready {
                    return Ok(Outcome::Unchanged);
                }
                return Ok(Outcome::Flags {
                    publish: head.publish_ready,
                    consume: head.consume_ready,
                });
            }
            _ => true,
        }
    };
    debug_assert!(need_full);
    shared.metrics.registry_fetches.inc();
    let (status, body) = get_limited(
        http,
        &format!("{base}{}", paths::REGISTRY),
        token,
        MAX_REGISTRY_BYTES,
    )
    .await?;
    if !status.is_success() {
        return Err(PollError::Status {
            endpoint: endpoint.to_string(),
            what: "registry",
            status,
        });
    }
    let reg = parse_registry(&body)?;
    if reg.head.format != DATA_FORMAT {
        return Ok(Outcome::Ignored);
    }
    Ok(Outcome::Full(Box::new(Broker::from_registry(&reg))))
}

fn read_token(file: &Option<PathBuf>) -> Result<Option<String>, RefreshError> {
    let Some(path) = file else { return Ok(None) };
    let t = std::fs::read_to_string(path).map_err(|source| RefreshError::TokenUnreadable {
        path: path.display().to_string(),
        source,
    })?;
    let t = t.trim();
    if t.is_empty() {
        return Err(RefreshError::TokenEmpty {
            path: path.display().to_string(),
        });
    }
    Ok(Some(t.to_string()))
}

/// The loop state: when each endpoint was last polled successfully.
#[derive(Debug, Default)]
pub struct Poller {
    seen: HashMap<String, Instant>,
}

impl Poller {
    /// One refresh over `view`.
    pub async fn refresh(
        &mut self,
        view: &View,
        cfg: &PollerConfig,
        http: &reqwest::Client,
        shared: &Shared,
    ) {
        let started = Instant::now();
        // Brokers no longer in the endpoint set leave the indexes at once.
        let gone: Vec<String> = shared
            .read()
            .keys()
            .filter(|k| !view.endpoints.contains(*k))
            .cloned()
            .collect();
        for k in &gone {
            shared.write().remove(k);
            self.seen.remove(k);
        }
        self.seen.retain(|k, _| view.endpoints.contains(k));

        let outcome = match read_token(&cfg.registry_token_file) {
            Err(e) => Err(e),
            Ok(token) => {
                let token = token.as_deref();
                let results: Vec<(String, Result<Outcome, PollError>, Duration)> =
                    futures::stream::iter(view.endpoints.iter().cloned())
                        .map(|ep| {
                            let cached = shared.read().get(&ep).cloned();
                            async move {
                                let t = Instant::now();
                                let r = poll_one(http, &ep, token, cached, shared).await;
                                (ep, r, t.elapsed())
                            }
                        })
                        .buffer_unordered(MAX_CONCURRENT_POLLS)
                        .collect()
                        .await;
                let mut ok = 0usize;
                let mut last_err = None;
                for (ep, r, took) in results {
                    shared.metrics.poll_duration.observe(took.as_secs_f64());
                    match r {
                        Ok(o) => {
                            ok += 1;
                            self.seen.insert(ep.clone(), Instant::now());
                            self.apply(&ep, o, shared);
                        }
                        Err(e) => {
                            shared.metrics.poll_failures.inc();
                            if matches!(e, PollError::Unreachable { .. }) {
                                // A broker nobody can connect to is no use to a consumer:
                                // leave the lookup now rather than after the staleness bound.
                                shared.write().remove(&ep);
                                self.seen.remove(&ep);
                            }
                            tracing::debug!(endpoint = %ep, error = %e, "registry poll failed");
                            last_err = Some(e);
                        }
                    }
                }
                if let Some(p) = &view.problem {
                    Err(RefreshError::Source(p.clone()))
                } else if view.endpoints.is_empty() || ok > 0 {
                    Ok(())
                } else {
                    Err(last_err.map_or(RefreshError::NoBrokerAnswered, RefreshError::Poll))
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::warn!(error = %e, "discovery refresh did not succeed");
        }
        shared.record(outcome);
        // Observations not seen for longer than the staleness bound expire.
        let stale: Vec<String> = shared
            .read()
            .keys()
            .filter(|k| self.seen.get(*k).is_none_or(|t| t.elapsed() > STALE_AFTER))
            .cloned()
            .collect();
        for k in stale {
            shared.write().remove(&k);
            self.seen.remove(&k);
        }
        self.update_gauges(shared);
        shared
            .metrics
            .refresh_duration
            .observe(started.elapsed().as_secs_f64());
    }

    fn apply(&mut self, ep: &str, o: Outcome, shared: &Shared) {
        match o {
            Outcome::Unchanged => {}
            Outcome::Flags { publish, consume } => {
                let mut ix = shared.write();
                if let Some(mut b) = ix.get(ep).cloned() {
                    b.publish_ready = publish;
                    b.consume_ready = consume;
                    ix.upsert(ep, b);
                }
            }
            Outcome::Full(b) => shared.write().upsert(ep, *b),
            Outcome::Ignored => shared.write().remove(ep),
        }
    }

    fn update_gauges(&self, shared: &Shared) {
        let ready = shared.source_ready().is_ok();
        let m = &shared.metrics;
        m.source_ready.set(i64::from(ready));
        m.lookup_ready.set(i64::from(shared.lookup_ready()));
        let ix = shared.read();
        m.brokers.set(ix.consume_ready_count() as i64);
        m.publishers.set(ix.publishers().len() as i64);
    }
}

/// Run forever: refresh every [`POLL_INTERVAL`] and whenever the view changes.
pub async fn run(mut rx: watch::Receiver<View>, cfg: PollerConfig, shared: Arc<Shared>) {
    let http = client();
    let mut poller = Poller::default();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let view = rx.borrow_and_update().clone();
        poller.refresh(&view, &cfg, &http, &shared).await;
        tokio::select! {
            _ = tick.tick() => {}
            changed = rx.changed() => {
                if changed.is_err() {
                    // The source is gone (only at shutdown): keep polling the last view.
                    tick.tick().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn registry_parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_head(&b);
            let _ = parse_registry(&b);
        }

        #[test]
        fn registry_parsers_never_panic_on_jsonish(s in "[{}\\[\\]\":,0-9a-z_ .-]{0,300}") {
            let _ = parse_head(s.as_bytes());
            let _ = parse_registry(s.as_bytes());
        }
    }

    #[test]
    fn heads_parse_and_reject_missing_fields() {
        let head = br#"{"format":7,"revision":3,"node_id":2,"ready":true,
            "publish_ready":true,"consume_ready":false}"#;
        let h = parse_head(head).unwrap();
        assert_eq!((h.revision, h.node_id, h.consume_ready), (3, 2, false));
        assert!(parse_head(br#"{"format":7}"#).is_err());
        assert!(parse_registry(br#"{"format":7,"revision":1}"#).is_err());
    }
}
