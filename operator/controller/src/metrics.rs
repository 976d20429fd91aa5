//! Operator metrics and the `:8080` health server (`/healthz`, `/readyz`, `/metrics`).
//! Both replicas report Ready: a standby is healthy, it just does not lead.
//!
//! Besides the process series, the leader exports each RustQueue's status as it wrote it
//! (phase, conditions, desired and ready brokers), so alerts see a failed or blocked rollout
//! without reading the API server (docs/monitoring.md). A replica that loses the Lease keeps
//! its last values; alerts join them with `rustqueue_operator_leader == 1`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use rustqueue_api::crd::{ConditionStatus, RustQueueStatus};

/// The operator's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// 1 while this replica holds the Lease.
    pub leader: IntGauge,
    /// Reconciles by result (`ok`, `error`).
    pub reconciles: IntCounterVec,
    /// Failed reconciles by what failed (`Error::metric_label`).
    pub reconcile_errors: IntCounterVec,
    /// Reconcile duration.
    pub reconcile_duration: Histogram,
    status: StatusGauges,
}

/// The status series of every RustQueue this replica wrote a status for.
#[derive(Clone)]
struct StatusGauges {
    /// `rustqueue_operator_phase{namespace,name,phase}`: 1 for the current phase only.
    phase: IntGaugeVec,
    /// `rustqueue_operator_condition{namespace,name,type}`: 1 while True, else 0.
    condition: IntGaugeVec,
    /// `rustqueue_operator_desired_brokers{namespace,name}`.
    desired: IntGaugeVec,
    /// `rustqueue_operator_ready_brokers{namespace,name}`.
    ready: IntGaugeVec,
    /// What each RustQueue last exported, so a changed phase or a deleted object leaves no
    /// stale series.
    seen: Arc<Mutex<HashMap<Key, Exported>>>,
}

/// A RustQueue: (namespace, name).
type Key = (String, String);
/// Its exported phase and condition types.
type Exported = (String, Vec<String>);

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

impl StatusGauges {
    fn new() -> Self {
        Self {
            phase: gauge_vec(
                "rustqueue_operator_phase",
                "1 for the status.phase the leader last wrote for a RustQueue",
                &["namespace", "name", "phase"],
            ),
            condition: gauge_vec(
                "rustqueue_operator_condition",
                "1 while a RustQueue status condition is True, 0 otherwise",
                &["namespace", "name", "type"],
            ),
            desired: gauge_vec(
                "rustqueue_operator_desired_brokers",
                "status.desiredBrokers of a RustQueue",
                &["namespace", "name"],
            ),
            ready: gauge_vec(
                "rustqueue_operator_ready_brokers",
                "status.readyBrokers of a RustQueue",
                &["namespace", "name"],
            ),
            seen: Arc::default(),
        }
    }

    fn collectors(&self) -> [Box<dyn prometheus::core::Collector>; 4] {
        [
            Box::new(self.phase.clone()),
            Box::new(self.condition.clone()),
            Box::new(self.desired.clone()),
            Box::new(self.ready.clone()),
        ]
    }

    fn set(&self, namespace: &str, name: &str, status: &RustQueueStatus) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_string(), name.to_string());
        let phase = status.phase.clone().unwrap_or_default();
        let types: Vec<String> = status.conditions.iter().map(|c| c.type_.clone()).collect();
        if let Some((old_phase, old_types)) = seen.get(&key) {
            if *old_phase != phase {
                let _ = self
                    .phase
                    .remove_label_values(&[namespace, name, old_phase]);
            }
            for t in old_types.iter().filter(|t| !types.contains(t)) {
                let _ = self.condition.remove_label_values(&[namespace, name, t]);
            }
        }
        self.phase
            .with_label_values(&[namespace, name, &phase])
            .set(1);
        for c in &status.conditions {
            let holds = matches!(c.status, ConditionStatus::True);
            self.condition
                .with_label_values(&[namespace, name, &c.type_])
                .set(i64::from(holds));
        }
        self.desired
            .with_label_values(&[namespace, name])
            .set(status.desired_brokers.unwrap_or(0).into());
        self.ready
            .with_label_values(&[namespace, name])
            .set(status.ready_brokers.unwrap_or(0).into());
        seen.insert(key, (phase, types));
    }

    fn forget(&self, namespace: &str, name: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let Some((phase, types)) = seen.remove(&(namespace.to_string(), name.to_string())) else {
            return;
        };
        let _ = self.phase.remove_label_values(&[namespace, name, &phase]);
        for t in &types {
            let _ = self.condition.remove_label_values(&[namespace, name, t]);
        }
        let _ = self.desired.remove_label_values(&[namespace, name]);
        let _ = self.ready.remove_label_values(&[namespace, name]);
    }
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
        rustqueue_api::telemetry::register_build_info(&registry, "rustqueue-operator")
            .expect("unique metric");
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
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "rustqueue_operator_reconcile_errors_total",
                "Failed reconciles by what failed (api_conflict, api_unavailable, api_unreachable, api_throttled, api_refused, broker, missing_metadata)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let reconcile_duration = Histogram::with_opts(HistogramOpts::new(
            "rustqueue_operator_reconcile_duration_seconds",
            "Time to observe, plan and apply one RustQueue",
        ))
        .expect("valid metric");
        let status = StatusGauges::new();
        let process: [Box<dyn prometheus::core::Collector>; 5] = [
            Box::new(up),
            Box::new(leader.clone()),
            Box::new(reconciles.clone()),
            Box::new(reconcile_errors.clone()),
            Box::new(reconcile_duration.clone()),
        ];
        for c in process.into_iter().chain(status.collectors()) {
            registry.register(c).expect("metric names are unique");
        }
        Self {
            registry,
            leader,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            status,
        }
    }

    /// Export the status just written for RustQueue `namespace/name`.
    pub fn observe_status(&self, namespace: &str, name: &str, status: &RustQueueStatus) {
        self.status.set(namespace, name, status);
    }

    /// Drop every series of RustQueue `namespace/name` (it was deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.status.forget(namespace, name);
    }

    /// Count one reconcile: `failed` is the failure's `Error::metric_label`, `None` when it
    /// succeeded.
    pub fn observe_reconcile(&self, failed: Option<&str>, took: Duration) {
        self.reconciles
            .with_label_values(&[if failed.is_none() { "ok" } else { "error" }])
            .inc();
        if let Some(reason) = failed {
            self.reconcile_errors.with_label_values(&[reason]).inc();
        }
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
        m.observe_reconcile(None, Duration::from_millis(20));
        m.observe_reconcile(Some("api_conflict"), Duration::from_millis(5));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router(m)).await });
        let base = format!("http://{addr}");
        let get = |p: &str| rustqueue_api::http_client::get(format!("{base}{p}"));
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
            text.contains("rustqueue_operator_reconcile_errors_total{reason=\"api_conflict\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("rustqueue_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
        server.abort();
    }

    fn status(phase: &str, ready: i32, conditions: &[(&str, bool)]) -> RustQueueStatus {
        RustQueueStatus {
            phase: Some(phase.into()),
            desired_brokers: Some(3),
            ready_brokers: Some(ready),
            conditions: conditions
                .iter()
                .map(|(t, holds)| rustqueue_api::crd::Condition {
                    type_: (*t).into(),
                    status: (*holds).into(),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: "t".into(),
                })
                .collect(),
            ..RustQueueStatus::default()
        }
    }

    fn series(m: &Metrics, prefix: &str) -> Vec<String> {
        m.render()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_rustqueue_status_is_exported_with_only_its_current_phase() {
        let m = Metrics::new();
        m.observe_status(
            "ns",
            "q",
            &status("Rolling", 2, &[("Ready", false), ("Degraded", false)]),
        );
        m.observe_status(
            "ns",
            "q",
            &status("RolloutFailed", 2, &[("Ready", false), ("Degraded", true)]),
        );
        assert_eq!(
            series(&m, "rustqueue_operator_phase{"),
            ["rustqueue_operator_phase{name=\"q\",namespace=\"ns\",phase=\"RolloutFailed\"} 1"]
        );
        assert_eq!(
            series(&m, "rustqueue_operator_condition{"),
            [
                "rustqueue_operator_condition{name=\"q\",namespace=\"ns\",type=\"Degraded\"} 1",
                "rustqueue_operator_condition{name=\"q\",namespace=\"ns\",type=\"Ready\"} 0",
            ]
        );
        assert_eq!(
            series(&m, "rustqueue_operator_ready_brokers{"),
            ["rustqueue_operator_ready_brokers{name=\"q\",namespace=\"ns\"} 2"]
        );
        assert_eq!(
            series(&m, "rustqueue_operator_desired_brokers{"),
            ["rustqueue_operator_desired_brokers{name=\"q\",namespace=\"ns\"} 3"]
        );
    }

    #[test]
    fn a_deleted_rustqueue_leaves_no_series_and_others_stay() {
        let m = Metrics::new();
        m.observe_status("ns", "q", &status("Ready", 3, &[("Ready", true)]));
        m.observe_status("ns", "other", &status("Scaling", 1, &[("Ready", false)]));
        m.forget("ns", "q");
        let left: Vec<String> = series(&m, "rustqueue_operator_")
            .into_iter()
            .filter(|l| l.contains("namespace=\"ns\""))
            .collect();
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(
            left.iter().all(|l| l.contains("name=\"other\"")),
            "{left:?}"
        );
    }
}
