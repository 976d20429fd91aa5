//! Kodo mode's HTTP listeners: the three stats shards (4151, 4154, 4155) and the probe and
//! metrics port (4160). Nothing is forwarded: HTTP publishing is off in Kodo mode.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::stats;
use crate::http::GatewayError;
use crate::metrics::Metrics;
use crate::pool::{Backend, Pools};

/// A whole `/stats` call must finish within this (else 504 `E_STATS_TIMEOUT`).
pub const STATS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the HTTP handlers share.
#[derive(Debug)]
pub struct KodoHttp {
    /// The broker pools.
    pub pools: Arc<Pools>,
    /// Metrics.
    pub metrics: Metrics,
    /// The node-wide in-flight byte budget.
    pub budget: Arc<Semaphore>,
    /// Client for the brokers' `/stats`.
    pub client: reqwest::Client,
}

impl KodoHttp {
    /// Handlers' state with its own broker client.
    pub fn new(
        pools: Arc<Pools>,
        metrics: Metrics,
        budget: Arc<Semaphore>,
    ) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(500))
            // The whole call's 10 s (504) must fire before a single request's limit (503).
            .timeout(STATS_TIMEOUT + Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(KodoHttp {
            pools,
            metrics,
            budget,
            client,
        })
    }
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
            any(|| async { not_found("Kodo cleanup compatibility is disabled") }),
        )
        .fallback(|| async { not_found("Kodo Gateway HTTP forwarding is disabled") })
        .with_state(state)
}

/// The router of the probe and metrics port.
pub fn metrics_router(state: Arc<KodoHttp>) -> Router {
    Router::new()
        .route("/ping", get(|| async { "OK" }))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { not_found("this port serves /ping, /v1/health and /metrics") })
        .with_state(state)
}

fn not_found(detail: &'static str) -> Response {
    GatewayError::new(StatusCode::NOT_FOUND, "E_NOT_FOUND", detail).into_response()
}

async fn health(State(s): State<Arc<KodoHttp>>) -> Response {
    let brokers = s.pools.publish_count();
    if brokers > 0 {
        (
            StatusCode::OK,
            axum::Json(json!({ "status": "ready", "brokers": brokers })),
        )
            .into_response()
    } else {
        let body = json!({
            "status": "not_ready",
            "brokers": 0,
            "reason": "no publish-ready broker agreed on by the discovery replicas",
        });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

async fn metrics(State(s): State<Arc<KodoHttp>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn shard_stats(
    State(s): State<Arc<KodoHttp>>,
    Query(pairs): Query<Vec<(String, String)>>,
    shard: usize,
) -> Response {
    let members = stats::shard_members(&s.pools.broker_backends(), shard);
    if members.len() > stats::MAX_SHARD_BROKERS {
        let detail = format!(
            "stats shard {shard} has {} brokers, more than {}",
            members.len(),
            stats::MAX_SHARD_BROKERS
        );
        return GatewayError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_STATS_UNAVAILABLE",
            detail,
        )
        .into_response();
    }
    let Ok(_reserved) = s
        .budget
        .clone()
        .try_acquire_many_owned(stats::STATS_RESERVATION_BYTES)
    else {
        s.metrics.http_throttled.inc();
        return GatewayError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "E_THROTTLED",
            "the gateway's in-flight byte budget is spent; retry after the Retry-After delay",
        )
        .retry_after()
        .into_response();
    };
    let query = stats::broker_query(&pairs);
    match tokio::time::timeout(STATS_TIMEOUT, gather(&s.client, &members, &query)).await {
        Err(_) => GatewayError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "E_STATS_TIMEOUT",
            "the brokers' /stats did not all answer within 10 s",
        )
        .into_response(),
        Ok(Err(why)) => {
            GatewayError::new(StatusCode::SERVICE_UNAVAILABLE, "E_STATS_UNAVAILABLE", why)
                .into_response()
        }
        Ok(Ok(docs)) => axum::Json(stats::merge(&docs)).into_response(),
    }
}

/// Every member's `/stats`, or why one could not be had.
async fn gather(
    client: &reqwest::Client,
    members: &[Backend],
    query: &[(String, String)],
) -> Result<Vec<Value>, String> {
    let calls = members.iter().map(|b| fetch(client, b, query));
    let bodies = futures::future::try_join_all(calls).await?;
    let total: usize = bodies.iter().map(Vec::len).sum();
    if total > stats::MAX_AGGREGATE_BYTES {
        return Err(format!(
            "the brokers' /stats add up to {total} bytes, more than {}",
            stats::MAX_AGGREGATE_BYTES
        ));
    }
    bodies
        .iter()
        .map(|b| {
            serde_json::from_slice(b).map_err(|e| format!("a broker's /stats is not JSON: {e}"))
        })
        .collect()
}

async fn fetch(
    client: &reqwest::Client,
    b: &Backend,
    query: &[(String, String)],
) -> Result<Vec<u8>, String> {
    let url = format!("{}/stats", b.http_base());
    let mut resp = client
        .get(&url)
        .query(query)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url} answered {}", resp.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > stats::MAX_BACKEND_BYTES {
            return Err(format!(
                "{url}: answer larger than {} bytes",
                stats::MAX_BACKEND_BYTES
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
