//! Prometheus metrics, served on `GET /metrics` (docs/gateway.md, "Metrics").

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntGauge, Registry, TextEncoder};

/// Every metric the gateway exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// One forwarded HTTP request to a broker, until its response body is read.
    pub backend_duration: Histogram,
    /// One poll of one discovery URL.
    pub discovery_poll_duration: Histogram,
    /// Tunnels closed because their age elapsed or their backend left discovery.
    pub tcp_rotations: IntCounter,
    /// Idempotent HTTP requests tried on a second backend; in Kodo mode, publishes retried
    /// on another broker after a provably pre-commit failure.
    pub producer_retries: IntCounter,
    /// Publishes whose outcome is unknown (HTTP 502 / Kodo `E_AMBIGUOUS`; never retried).
    pub ambiguous_failures: IntCounter,
    /// 1 when this process runs in Kodo gateway mode.
    pub kodo_gateway: IntGauge,
    /// Kodo producer connections closed because a command's working set did not fit the
    /// in-flight budget.
    pub kodo_budget_closes: IntCounter,
    /// Open Kodo producer sessions.
    pub kodo_sessions: IntGauge,
    /// Publish-ready backends in the current snapshot.
    pub publish_backends: IntGauge,
    /// Observed brokers in the current snapshot.
    pub broker_backends: IntGauge,
    /// The discovery routing revision the pools follow; -1 while they follow none.
    pub discovery_revision: IntGauge,
    /// Open TCP tunnels.
    pub tcp_active_tunnels: IntGauge,
    /// TCP connections closed at once: over the cap or no publish backend.
    pub tcp_refused: IntCounter,
    /// HTTP connections closed at once: over the HTTP connection cap.
    pub http_refused: IntCounter,
    /// TCP connections whose backend did not accept within the connect timeout.
    pub tcp_connect_failures: IntCounter,
    /// HTTP requests answered 429 because the in-flight byte budget was spent.
    pub http_throttled: IntCounter,
    /// Discovery polls that failed or disagreed.
    pub discovery_poll_failures: IntCounter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Create and register every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        rustqueue_api::telemetry::register_build_info(&registry, "rustqueue-gateway")
            .expect("unique metric");
        let hist = |name: &str, help: &str, buckets: Vec<f64>| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                .expect("valid histogram");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid counter");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid gauge");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let latency = vec![
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ];
        Metrics {
            backend_duration: hist(
                "rustqueue_gateway_backend_duration_seconds",
                "Forwarded HTTP request duration at the broker",
                latency.clone(),
            ),
            discovery_poll_duration: hist(
                "rustqueue_gateway_discovery_poll_duration_seconds",
                "Duration of one poll of one discovery URL",
                latency,
            ),
            tcp_rotations: counter(
                "rustqueue_gateway_tcp_connection_rotations_total",
                "TCP tunnels closed for re-placement (age elapsed or backend left discovery)",
            ),
            producer_retries: counter(
                "rustqueue_gateway_producer_retries_total",
                "Requests or Kodo publishes retried on another broker (provably not applied)",
            ),
            ambiguous_failures: counter(
                "rustqueue_gateway_producer_ambiguous_failures_total",
                "Publishes whose outcome is unknown (E_AMBIGUOUS; never retried)",
            ),
            kodo_gateway: gauge(
                "rustqueue_gateway_kodo_gateway",
                "1 when the gateway runs in Kodo gateway mode",
            ),
            kodo_budget_closes: counter(
                "rustqueue_gateway_kodo_budget_closes_total",
                "Kodo producer connections closed: a command's working set did not fit the in-flight budget",
            ),
            kodo_sessions: gauge(
                "rustqueue_gateway_kodo_sessions",
                "Open Kodo producer sessions",
            ),
            publish_backends: gauge(
                "rustqueue_gateway_publish_backends",
                "Publish-ready brokers",
            ),
            broker_backends: gauge("rustqueue_gateway_broker_backends", "Observed brokers"),
            discovery_revision: gauge(
                "rustqueue_gateway_discovery_revision",
                "Discovery routing revision the backend pools follow (-1: none agreed on yet)",
            ),
            tcp_active_tunnels: gauge("rustqueue_gateway_tcp_active_tunnels", "Open TCP tunnels"),
            tcp_refused: counter(
                "rustqueue_gateway_tcp_refused_connections_total",
                "TCP connections closed at once (connection cap reached or no publish-ready broker)",
            ),
            http_refused: counter(
                "rustqueue_gateway_http_refused_connections_total",
                "HTTP connections closed at once (HTTP connection cap reached)",
            ),
            tcp_connect_failures: counter(
                "rustqueue_gateway_tcp_connect_failures_total",
                "TCP tunnels whose broker could not be reached within 2 s",
            ),
            http_throttled: counter(
                "rustqueue_gateway_http_throttled_total",
                "HTTP requests refused with 429 (in-flight byte budget spent)",
            ),
            discovery_poll_failures: counter(
                "rustqueue_gateway_discovery_poll_failures_total",
                "Discovery polls that failed or whose answers disagreed",
            ),
            registry,
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
