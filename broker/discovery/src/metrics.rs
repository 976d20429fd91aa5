//! Prometheus metrics of the discovery service (`GET /metrics`).

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntGauge, Registry, TextEncoder};

/// Every metric, registered in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Duration of one broker poll (head, plus full registry when fetched).
    pub poll_duration: Histogram,
    /// Duration of one refresh cycle over all brokers.
    pub refresh_duration: Histogram,
    /// Broker polls that failed (connect, status, body, JSON).
    pub poll_failures: IntCounter,
    /// Full `/v1/registry` fetches.
    pub registry_fetches: IntCounter,
    /// EndpointSlice watch and probe errors.
    pub endpoint_slice_errors: IntCounter,
    /// EndpointSlice probes that timed out.
    pub endpoint_slice_timeouts: IntCounter,
    /// 1 while the source is fresh.
    pub source_ready: IntGauge,
    /// 1 while lookups are served.
    pub lookup_ready: IntGauge,
    /// Consume-ready brokers (distinct node ids).
    pub brokers: IntGauge,
    /// Publish-ready brokers (distinct node ids).
    pub publishers: IntGauge,
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid gauge");
    r.register(Box::new(g.clone())).expect("unique gauge");
    g
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid counter");
    r.register(Box::new(c.clone())).expect("unique counter");
    c
}

fn histogram(r: &Registry, name: &str, help: &str) -> Histogram {
    let buckets = vec![
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
    ];
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .expect("valid histogram");
    r.register(Box::new(h.clone())).expect("unique histogram");
    h
}

impl Metrics {
    /// Register every metric.
    pub fn new() -> Self {
        let r = Registry::new();
        rustqueue_api::telemetry::register_build_info(&r, "rustqueue-discovery")
            .expect("unique metric");
        Metrics {
            poll_duration: histogram(
                &r,
                "rustqueue_discovery_registry_poll_duration_seconds",
                "Duration of one broker registry poll",
            ),
            refresh_duration: histogram(
                &r,
                "rustqueue_discovery_refresh_duration_seconds",
                "Duration of one refresh over every broker",
            ),
            poll_failures: counter(
                &r,
                "rustqueue_discovery_registry_poll_failures_total",
                "Broker registry polls that failed",
            ),
            registry_fetches: counter(
                &r,
                "rustqueue_discovery_registry_fetches_total",
                "Full /v1/registry fetches (head revision changed)",
            ),
            endpoint_slice_errors: counter(
                &r,
                "rustqueue_discovery_endpoint_slice_errors_total",
                "EndpointSlice watch and probe errors",
            ),
            endpoint_slice_timeouts: counter(
                &r,
                "rustqueue_discovery_endpoint_slice_timeouts_total",
                "EndpointSlice probes that took longer than 1.5 s",
            ),
            source_ready: gauge(
                &r,
                "rustqueue_discovery_source_ready",
                "1 while the source is fresh",
            ),
            lookup_ready: gauge(
                &r,
                "rustqueue_discovery_lookup_ready",
                "1 while lookups are served",
            ),
            brokers: gauge(&r, "rustqueue_discovery_brokers", "Consume-ready brokers"),
            publishers: gauge(
                &r,
                "rustqueue_discovery_publishers",
                "Publish-ready brokers",
            ),
            registry: r,
        }
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding our own well-formed families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
