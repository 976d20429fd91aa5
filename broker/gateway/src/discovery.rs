//! The discovery client: polls every configured rustqueue-discovery replica and replaces the
//! [`Pools`] only with a snapshot all live replicas agree on (docs/gateway.md, "Discovery").
//!
//! Every 2 s each URL answers `GET /v1/publishers/head`; when its revision is new, or the last
//! full fetch is 3 s old, `GET /v1/publishers` and `GET /v1/brokers` (404: the brokers are the
//! publishers) are fetched and must carry that same revision. A replica unseen for 5 s no
//! longer counts. While live replicas disagree (or none answers) the last coherent snapshot
//! is kept for at most 5 s; then the pools are emptied, so the gateway stops placing work on
//! brokers it can no longer vouch for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::error::{FetchError, read_capped};
use crate::metrics::Metrics;
use crate::pool::{Backend, Pools};

/// Poll period per discovery URL.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
/// A replica (and the last coherent snapshot) older than this no longer counts.
pub const STALE_AFTER: Duration = Duration::from_secs(5);
/// Full lists are re-fetched at least this often even when the revision is unchanged.
pub const REFETCH_AFTER: Duration = Duration::from_secs(3);
const HEAD_MAX_BYTES: usize = 64 * 1024;
const LIST_MAX_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
struct Head {
    revision: u64,
}

/// `/v1/publishers` or `/v1/brokers`: nsqlookupd's peer shape, each with its `node_id`.
#[derive(Debug, Deserialize)]
struct List {
    revision: u64,
    producers: Vec<rustqueue_protocol::lookup::Producer>,
}

/// A discovery body the gateway cannot use.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not the JSON shape discovery sends.
    #[error("not discovery's JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A listed broker without a `node_id` (the pools are keyed by it).
    #[error("a listed broker has no node_id")]
    NoNodeId,
}

/// Why one poll of one replica gave no usable snapshot.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The replica could not be read.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// It answered something that is not a discovery body.
    #[error("{url}: {source}")]
    Parse {
        /// What was asked.
        url: String,
        /// Why it is unusable.
        source: ParseError,
    },
    /// Its revision moved between the head and the lists: read again next round.
    #[error("{url} changed while read (revisions {head}, {publishers}, {brokers})")]
    Changed {
        /// The replica.
        url: String,
        /// Revision of the head.
        head: u64,
        /// Revision of `/v1/publishers`.
        publishers: u64,
        /// Revision of `/v1/brokers`.
        brokers: u64,
    },
}

/// Parse a `/v1/publishers/head` body into its revision.
pub fn parse_head(body: &[u8]) -> Result<u64, ParseError> {
    Ok(serde_json::from_slice::<Head>(body)?.revision)
}

/// Parse a `/v1/publishers` or `/v1/brokers` body into its revision and backends.
pub fn parse_list(body: &[u8]) -> Result<(u64, Vec<Backend>), ParseError> {
    let list: List = serde_json::from_slice(body)?;
    let mut backends = Vec::with_capacity(list.producers.len());
    for p in list.producers {
        let node_id = p.node_id.ok_or(ParseError::NoNodeId)?;
        if p.broadcast_address.is_empty() {
            continue;
        }
        backends.push(Backend {
            node_id,
            host: p.broadcast_address,
            tcp_port: p.tcp_port,
            http_port: p.http_port,
        });
    }
    Ok((list.revision, backends))
}

/// What one discovery replica last told us.
#[derive(Debug, Clone)]
pub struct SourceState {
    /// Routing revision of the lists.
    pub revision: u64,
    /// Publish-ready brokers.
    pub publishers: Vec<Backend>,
    /// Every observed broker.
    pub brokers: Vec<Backend>,
    /// Last successful head poll.
    pub seen: Instant,
    /// Last full fetch.
    pub fetched: Instant,
}

/// The snapshot every live replica agrees on: `None` when there is no live replica or two
/// live replicas report different revisions.
pub fn agree(sources: &[Option<SourceState>], now: Instant) -> Option<&SourceState> {
    let mut live = sources
        .iter()
        .flatten()
        .filter(|s| now.saturating_duration_since(s.seen) <= STALE_AFTER);
    let first = live.next()?;
    live.all(|s| s.revision == first.revision).then_some(first)
}

/// Polls the replicas until `stop` and keeps `pools` current.
#[derive(Debug)]
pub struct Client {
    urls: Vec<String>,
    http: reqwest::Client,
    pools: Arc<Pools>,
    metrics: Metrics,
    sources: Vec<Option<SourceState>>,
    last_coherent: Option<Instant>,
    applied_revision: Option<u64>,
}

impl Client {
    /// A client for `urls` (base URLs without a trailing slash).
    pub fn new(urls: Vec<String>, pools: Arc<Pools>, metrics: Metrics) -> reqwest::Result<Self> {
        let http = rustqueue_api::http_client::builder()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_millis(1500))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(10))
            .build()?;
        let sources = vec![None; urls.len()];
        Ok(Client {
            urls,
            http,
            pools,
            metrics,
            sources,
            last_coherent: None,
            applied_revision: None,
        })
    }

    /// Poll every 2 s until `stop` is cancelled.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(POLL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => self.refresh().await,
            }
        }
    }

    /// One round: poll every replica, then apply the agreed snapshot (or expire).
    pub async fn refresh(&mut self) {
        let polls = self
            .urls
            .iter()
            .zip(self.sources.iter())
            .map(|(url, cached)| poll_source(&self.http, url, cached.as_ref(), &self.metrics));
        let results = futures::future::join_all(polls).await;
        for ((slot, result), url) in self.sources.iter_mut().zip(results).zip(&self.urls) {
            match result {
                Ok(state) => *slot = Some(state),
                Err(e) => {
                    self.metrics.discovery_poll_failures.inc();
                    tracing::debug!(%url, error = %e, "discovery poll failed");
                }
            }
        }
        self.apply(Instant::now());
    }

    fn apply(&mut self, now: Instant) {
        if let Some(s) = agree(&self.sources, now) {
            let (revision, publishers, brokers) =
                (s.revision, s.publishers.clone(), s.brokers.clone());
            let invalidated = self.pools.replace_at(Some(revision), publishers, brokers);
            if self.applied_revision != Some(revision) {
                tracing::info!(
                    revision,
                    publishers = self.pools.publish_count(),
                    invalidated,
                    "routing snapshot applied"
                );
            }
            self.applied_revision = Some(revision);
            self.last_coherent = Some(now);
        } else {
            self.metrics.discovery_poll_failures.inc();
            let fresh = self
                .last_coherent
                .is_some_and(|t| now.saturating_duration_since(t) <= STALE_AFTER);
            if !fresh && self.applied_revision.take().is_some() {
                tracing::warn!(
                    "discovery replicas silent or disagreeing for 5 s: no brokers until they agree"
                );
                self.pools.replace_at(None, Vec::new(), Vec::new());
            }
        }
        self.metrics
            .publish_backends
            .set(self.pools.publish_count() as i64);
        self.metrics
            .broker_backends
            .set(self.pools.broker_count() as i64);
        self.metrics.discovery_revision.set(
            self.pools
                .revision()
                .map_or(-1, |r| i64::try_from(r).unwrap_or(i64::MAX)),
        );
    }
}

async fn poll_source(
    http: &reqwest::Client,
    url: &str,
    cached: Option<&SourceState>,
    metrics: &Metrics,
) -> Result<SourceState, PollError> {
    let _timer = metrics.discovery_poll_duration.start_timer();
    let head_url = format!("{url}/v1/publishers/head");
    let revision = parsed(
        &head_url,
        &get_ok(http, &head_url, HEAD_MAX_BYTES).await?,
        parse_head,
    )?;
    let now = Instant::now();
    if let Some(c) =
        cached.filter(|c| c.revision == revision && now.duration_since(c.fetched) < REFETCH_AFTER)
    {
        return Ok(SourceState {
            seen: now,
            ..c.clone()
        });
    }
    let list_url = format!("{url}/v1/publishers");
    let body = get_ok(http, &list_url, LIST_MAX_BYTES).await?;
    let (pub_rev, publishers) = parsed(&list_url, &body, parse_list)?;
    let brokers_url = format!("{url}/v1/brokers");
    let (status, body) = get(http, &brokers_url, LIST_MAX_BYTES).await?;
    let (brk_rev, brokers) = match status {
        reqwest::StatusCode::NOT_FOUND => (pub_rev, publishers.clone()),
        reqwest::StatusCode::OK => parsed(&brokers_url, &body, parse_list)?,
        status => {
            let url = brokers_url;
            return Err(FetchError::Status { url, status }.into());
        }
    };
    if pub_rev != revision || brk_rev != revision {
        return Err(PollError::Changed {
            url: url.to_string(),
            head: revision,
            publishers: pub_rev,
            brokers: brk_rev,
        });
    }
    Ok(SourceState {
        revision,
        publishers,
        brokers,
        seen: now,
        fetched: now,
    })
}

fn parsed<T>(
    url: &str,
    body: &[u8],
    parse: impl FnOnce(&[u8]) -> Result<T, ParseError>,
) -> Result<T, PollError> {
    parse(body).map_err(|source| PollError::Parse {
        url: url.to_string(),
        source,
    })
}

/// GET `url`, reading at most `cap` bytes of body.
async fn get(
    http: &reqwest::Client,
    url: &str,
    cap: usize,
) -> Result<(reqwest::StatusCode, Vec<u8>), FetchError> {
    let resp = http
        .get(url)
        .send()
        .await
        .map_err(|source| FetchError::Transport {
            url: url.to_string(),
            source,
        })?;
    let status = resp.status();
    Ok((status, read_capped(url, resp, cap).await?))
}

/// GET `url`, which must answer 200.
async fn get_ok(http: &reqwest::Client, url: &str, cap: usize) -> Result<Vec<u8>, FetchError> {
    match get(http, url, cap).await? {
        (reqwest::StatusCode::OK, body) => Ok(body),
        (status, _) => Err(FetchError::Status {
            url: url.to_string(),
            status,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(revision: u64, seen: Instant) -> Option<SourceState> {
        Some(SourceState {
            revision,
            publishers: vec![],
            brokers: vec![],
            seen,
            fetched: seen,
        })
    }

    #[test]
    fn agreement_needs_every_live_replica_on_one_revision() {
        let now = Instant::now();
        let old = now - Duration::from_secs(6);
        let cases: Vec<(Vec<Option<SourceState>>, Option<u64>)> = vec![
            (vec![], None),
            (vec![None, None], None),
            (vec![state(7, now)], Some(7)),
            (vec![state(7, now), state(7, now)], Some(7)),
            (vec![state(7, now), state(8, now)], None),
            // A replica unseen for more than 5 s no longer has a say.
            (vec![state(7, now), state(8, old)], Some(7)),
            (vec![state(7, old), state(8, old)], None),
            (vec![None, state(9, now - Duration::from_secs(5))], Some(9)),
        ];
        for (sources, want) in cases {
            assert_eq!(
                agree(&sources, now).map(|s| s.revision),
                want,
                "{sources:?}"
            );
        }
    }

    #[test]
    fn disagreement_keeps_the_snapshot_for_five_seconds_then_empties_the_pools() {
        let pools = Arc::new(Pools::default());
        let mut c = Client::new(
            vec!["http://a".into(), "http://b".into()],
            pools.clone(),
            Metrics::new(),
        )
        .unwrap();
        let t0 = Instant::now();
        let b = Backend {
            node_id: 1,
            host: "h".into(),
            tcp_port: 1,
            http_port: 2,
        };
        let mut s = state(3, t0).unwrap();
        s.publishers = vec![b.clone()];
        s.brokers = vec![b];
        c.sources = vec![Some(s.clone()), Some(s.clone())];
        c.apply(t0);
        assert_eq!(pools.publish_count(), 1);
        assert_eq!(
            pools.revision(),
            Some(3),
            "the pools say which revision they follow"
        );
        c.sources[1] = Some(SourceState {
            revision: 4,
            ..s.clone()
        });
        c.apply(t0 + Duration::from_secs(4));
        assert_eq!(pools.publish_count(), 1, "kept within 5 s");
        c.apply(t0 + Duration::from_millis(5100));
        assert_eq!(pools.publish_count(), 0, "emptied after 5 s");
        assert_eq!(pools.broker_count(), 0);
        assert_eq!(pools.revision(), None, "emptied pools follow no revision");
        c.sources[1] = Some(SourceState {
            seen: t0 + Duration::from_secs(6),
            ..s.clone()
        });
        c.sources[0] = Some(SourceState {
            seen: t0 + Duration::from_secs(6),
            ..s
        });
        c.apply(t0 + Duration::from_secs(6));
        assert_eq!(pools.publish_count(), 1, "back when they agree");
    }

    #[test]
    fn lists_parse_the_discovery_shape_and_ignore_unknown_fields() {
        let body = br#"{"revision":42,"producers":[{"remote_address":"b-0:4150","hostname":"b-0",
            "broadcast_address":"b-0","tcp_port":4150,"http_port":4151,"version":"0.1.0",
            "node_id":3,"extra":true}]}"#;
        let (rev, list) = parse_list(body).unwrap();
        assert_eq!(rev, 42);
        assert_eq!(
            list,
            vec![Backend {
                node_id: 3,
                host: "b-0".into(),
                tcp_port: 4150,
                http_port: 4151
            }]
        );
        assert_eq!(
            parse_head(br#"{"revision":9,"broker_count":2}"#).ok(),
            Some(9)
        );
        assert!(parse_list(br#"{"revision":1,"producers":[{"node_id":1}]}"#).is_err());
        let no_id = br#"{"revision":1,"producers":[{"remote_address":"b-0:4150","hostname":"b-0",
            "broadcast_address":"b-0","tcp_port":4150,"http_port":4151,"version":"0.1.0"}]}"#;
        assert!(matches!(parse_list(no_id), Err(ParseError::NoNodeId)));
        assert!(parse_head(b"[]").is_err());
    }

    proptest::proptest! {
        #[test]
        fn discovery_bodies_never_panic_the_parsers(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse_head(&body);
            let _ = parse_list(&body);
        }

        #[test]
        fn json_shaped_garbage_never_panics_the_parsers(
            revision in proptest::prelude::any::<i128>(),
            node in proptest::prelude::any::<i64>(),
            port in proptest::prelude::any::<i64>(),
            addr in ".{0,40}",
        ) {
            let body = format!(
                r#"{{"revision":{revision},"producers":[{{"remote_address":"","hostname":"","broadcast_address":{addr:?},"tcp_port":{port},"http_port":{port},"version":"","node_id":{node}}}]}}"#
            );
            let parsed = parse_list(body.as_bytes());
            if let Ok((rev, list)) = parsed {
                proptest::prop_assert_eq!(i128::from(rev), revision);
                proptest::prop_assert!(list.iter().all(|b| !b.host.is_empty()));
            }
            let _ = parse_head(format!(r#"{{"revision":{revision}}}"#).as_bytes());
        }
    }
}
