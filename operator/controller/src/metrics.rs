//! Operator metrics and the `:8080` health server (`/healthz`, `/readyz`, `/metrics`).
//! Both replicas report Ready: a standby is healthy, it just does not lead.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry};

/// The operator's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// 1 while this replica holds the Lease.
    pub leader: IntGauge,
    /// Reconciles by result (`ok`, `error`).
    pub reconciles: IntCounterVec,
    /// Reconcile duration.
    pub reconcile_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Register every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        let up = IntGauge::new("rustqueue_operator_up", "1 while the operator process runs")
            .expect("valid metric");
        up.set(1);
        let leader = IntGauge::new(
            "rustqueue_operator_leader",
            "1 while this replica holds the leader Lease",
        )
        .expect("valid metric");
        let reconciles = IntCounterVec::new(
            Opts::new(
                "rustqueue_operator_reconciles_total",
                "Reconciles by result",
            ),
            &["result"],
        )
        .expect("valid metric");
        let reconcile_duration = Histogram::with_opts(HistogramOpts::new(
            "rustqueue_operator_reconcile_duration_seconds",
            "Time to observe, plan and apply one RustQueue",
        ))
        .expect("valid metric");
        for c in [
            Box::new(up) as Box<dyn prometheus::core::Collector>,
            Box::new(leader.clone()),
            Box::new(reconciles.clone()),
            Box::new(reconcile_duration.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        Self {
            registry,
            leader,
            reconciles,
            reconcile_duration,
        }
    }

    /// Count one reconcile.
    pub fn observe_reconcile(&self, ok: bool, took: Duration) {
        self.reconciles
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], m.render())
}

/// The health and metrics router.
pub fn router(m: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(m)
}

/// Serve the router on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, m: Metrics) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(m)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_and_metrics_are_served_over_http() {
        let m = Metrics::new();
        m.leader.set(1);
        m.observe_reconcile(true, Duration::from_millis(20));
        m.observe_reconcile(false, Duration::from_millis(5));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router(m)).await });
        let base = format!("http://{addr}");
        let get = |p: &str| reqwest::get(format!("{base}{p}"));
        assert_eq!(get("/healthz").await.unwrap().text().await.unwrap(), "ok");
        assert_eq!(get("/readyz").await.unwrap().text().await.unwrap(), "ok");
        let text = get("/metrics").await.unwrap().text().await.unwrap();
        assert!(text.contains("rustqueue_operator_up 1"), "{text}");
        assert!(text.contains("rustqueue_operator_leader 1"), "{text}");
        assert!(
            text.contains("rustqueue_operator_reconciles_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rustqueue_operator_reconciles_total{result=\"error\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rustqueue_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
        server.abort();
    }
}
