//! Kodo mode's HTTP listeners: the three stats shards (4151, 4154, 4155) and the core's probe
//! routes on 4160. Nothing is forwarded: HTTP publishing is off in Kodo mode. A 404 is
//! `{"message":"E_NOT_FOUND <why>"}`, the body discovery answers for the same routes.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use rustqueue_api::gateway::kodo::{CLEANUP_DISABLED, FORWARDING_DISABLED};
use serde_json::Value;

use super::stats;
use crate::core::{Health, Shared, probe_router};
use crate::error::{ErrorAnswer, FetchError, read_capped};
use crate::pool::Backend;

/// A whole `/stats` call must finish within this (else 504 `E_STATS_TIMEOUT`).
pub const STATS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the stats handlers share.
#[derive(Debug)]
pub struct KodoHttp {
    /// Pools, metrics and the in-flight byte budget.
    pub shared: Shared,
    /// Client for the brokers' `/stats`.
    pub client: reqwest::Client,
}

impl KodoHttp {
    /// Handlers' state with its own broker client.
    pub fn new(shared: Shared) -> reqwest::Result<Self> {
        let client = rustqueue_api::http_client::builder()
            .connect_timeout(Duration::from_millis(500))
            // The whole call's 10 s (504) must fire before a single request's limit (503).
            .timeout(STATS_TIMEOUT + Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(KodoHttp { shared, client })
    }
}

/// Why a shard's `/stats` could not be served whole.
#[derive(Debug, thiserror::Error)]
enum StatsError {
    /// One broker's `/stats` could not be read.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The brokers' answers together are above the limit.
    #[error("the brokers' /stats add up to {total} bytes, more than {limit}")]
    TooLarge {
        /// Their size.
        total: usize,
        /// The limit.
        limit: usize,
    },
}

/// The router of stats shard `shard` (0..2).
pub fn shard_router(state: Arc<KodoHttp>, shard: usize) -> Router {
    Router::new()
        .route(
            "/stats",
            get(
                move |s: State<Arc<KodoHttp>>, q: Query<Vec<(String, String)>>| {
                    shard_stats(s, q, shard)
                },
            ),
        )
        .route(
            "/channel/delete",
            any(|| async { ErrorAnswer::not_found(CLEANUP_DISABLED) }),
        )
        .fallback(|| async { ErrorAnswer::not_found(FORWARDING_DISABLED) })
        .with_state(state)
}

/// The router of the probe and metrics port.
pub fn metrics_router(shared: Shared) -> Router {
    probe_router(shared, Health::Brief).fallback(|| async { ErrorAnswer::not_found("NOT_FOUND") })
}

async fn shard_stats(
    State(s): State<Arc<KodoHttp>>,
    Query(pairs): Query<Vec<(String, String)>>,
    shard: usize,
) -> Response {
    let members = stats::shard_members(&s.shared.pools.broker_backends(), shard);
    if members.len() > stats::MAX_SHARD_BROKERS {
        let detail = format!(
            "stats shard {shard} has {} brokers, more than {}",
            members.len(),
            stats::MAX_SHARD_BROKERS
        );
        return ErrorAnswer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_STATS_UNAVAILABLE",
            detail,
        )
        .into_response();
    }
    let Some(_reserved) = s.shared.budget.try_reserve(stats::STATS_RESERVATION_BYTES) else {
        s.shared.metrics.http_throttled.inc();
        return ErrorAnswer::throttled().into_response();
    };
    let query = stats::broker_query(&pairs);
    match tokio::time::timeout(STATS_TIMEOUT, gather(&s.client, &members, &query)).await {
        Err(_) => ErrorAnswer::new(
            StatusCode::GATEWAY_TIMEOUT,
            "E_STATS_TIMEOUT",
            "the brokers' /stats did not all answer within 10 s",
        )
        .into_response(),
        Ok(Err(why)) => ErrorAnswer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_STATS_UNAVAILABLE",
            why.to_string(),
        )
        .into_response(),
        Ok(Ok(docs)) => axum::Json(stats::merge(&docs)).into_response(),
    }
}

/// Every member's `/stats`, or why one could not be had.
async fn gather(
    client: &reqwest::Client,
    members: &[Backend],
    query: &[(String, String)],
) -> Result<Vec<Value>, StatsError> {
    let calls = members.iter().map(|b| fetch(client, b, query));
    let bodies = futures::future::try_join_all(calls).await?;
    let total: usize = bodies.iter().map(|(_, body)| body.len()).sum();
    if total > stats::MAX_AGGREGATE_BYTES {
        return Err(StatsError::TooLarge {
            total,
            limit: stats::MAX_AGGREGATE_BYTES,
        });
    }
    let parsed = bodies.into_iter().map(|(url, body)| {
        serde_json::from_slice(&body).map_err(|source| FetchError::Json { url, source })
    });
    Ok(parsed.collect::<Result<_, _>>()?)
}

/// One broker's `/stats` body, with the URL it came from.
async fn fetch(
    client: &reqwest::Client,
    b: &Backend,
    query: &[(String, String)],
) -> Result<(String, Vec<u8>), FetchError> {
    let url = format!("{}/stats", b.http_base());
    let resp = client
        .get(&url)
        .query(query)
        .send()
        .await
        .map_err(|source| FetchError::Transport {
            url: url.clone(),
            source,
        })?;
    if !resp.status().is_success() {
        return Err(FetchError::Status {
            status: resp.status(),
            url,
        });
    }
    let body = read_capped(&url, resp, stats::MAX_BACKEND_BYTES).await?;
    Ok((url, body))
}
