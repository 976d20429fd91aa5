//! `brokers`: one row per broker Pod from the Pod, its claim, its `/metrics` disk gauge and
//! its `/v1/stats` depth. Building a row is pure; what could not be read shows as `?`.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use rustqueue_api::labels::REVISION_ANNOTATION;
use serde::Serialize;

use crate::cluster::{pod_ip, pod_name, pod_ready};

/// One broker as `brokers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BrokerRow {
    /// Pod name.
    pub broker: String,
    /// Pod Ready.
    pub ready: bool,
    /// Node it runs on.
    pub node: Option<String>,
    /// Pod IP.
    pub ip: Option<String>,
    /// Pod-template revision (annotation).
    pub revision: Option<String>,
    /// Image of its first container.
    pub image: Option<String>,
    /// Its claim.
    pub pvc: Option<String>,
    /// The claim's capacity (or request while unbound).
    pub size: Option<String>,
    /// Disk used, percent (`rustqueue_disk_used_ratio` × 100).
    pub used_percent: Option<f64>,
    /// Messages waiting over every channel.
    pub depth: Option<u64>,
}

/// The claim a broker Pod mounts (the first `persistentVolumeClaim` volume).
pub fn claim_name(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
}

/// A row from what was read; `pvc` is the Pod's claim if it was found.
pub fn row(
    pod: &Pod,
    pvc: Option<&PersistentVolumeClaim>,
    used_percent: Option<f64>,
    depth: Option<u64>,
) -> BrokerRow {
    let size = pvc.and_then(|c| {
        let cap = c
            .status
            .as_ref()?
            .capacity
            .as_ref()?
            .get("storage")
            .cloned();
        cap.or_else(|| {
            c.spec
                .as_ref()?
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")
                .cloned()
        })
        .map(|q| q.0)
    });
    BrokerRow {
        broker: pod_name(pod).to_string(),
        ready: pod_ready(pod),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ip: pod_ip(pod).map(str::to_string),
        revision: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION_ANNOTATION).cloned()),
        image: pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone()),
        pvc: claim_name(pod),
        size,
        used_percent,
        depth,
    }
}

/// The disk's used share as a percent, from `rustqueue_disk_used_ratio` in Prometheus text.
pub fn used_percent(metrics: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix("rustqueue_disk_used_ratio")?;
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            return None;
        }
        let value = rest.trim_start_matches(|c| c != ' ').trim();
        value.parse::<f64>().ok().map(|ratio| ratio * 100.0)
    })
}

/// The table.
pub fn render(rows: &[BrokerRow]) -> String {
    fn or_q<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map_or_else(|| "?".into(), ToString::to_string)
    }
    let mut t = crate::table::Table::new([
        "BROKER", "READY", "NODE", "IP", "REVISION", "IMAGE", "PVC", "SIZE", "USED", "DEPTH",
    ]);
    for r in rows {
        t.row([
            r.broker.clone(),
            r.ready.to_string(),
            or_q(&r.node),
            or_q(&r.ip),
            or_q(&r.revision),
            or_q(&r.image),
            or_q(&r.pvc),
            or_q(&r.size),
            r.used_percent
                .map_or_else(|| "?".into(), |u| format!("{u:.0}%")),
            or_q(&r.depth),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "queue-0", "annotations": {"rustqueue.io/revision": "abc"}},
            "spec": {"nodeName": "node-1",
                "containers": [{"name": "broker", "image": "rq:1"}],
                "volumes": [{"name": "config", "configMap": {"name": "c"}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": "data-queue-0"}}]},
            "status": {"podIP": "10.244.0.5",
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_row_reads_pod_claim_disk_and_depth() {
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-queue-0"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
            "status": {"capacity": {"storage": "2Gi"}}
        }))
        .unwrap();
        let r = row(&pod(), Some(&pvc), Some(12.4), Some(7));
        let text = render(&[r]);
        let cells: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "queue-0",
                "true",
                "node-1",
                "10.244.0.5",
                "abc",
                "rq:1",
                "data-queue-0",
                "2Gi",
                "12%",
                "7"
            ]
        );
        let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "BROKER", "READY", "NODE", "IP", "REVISION", "IMAGE", "PVC", "SIZE", "USED",
                "DEPTH"
            ]
        );
    }

    #[test]
    fn what_could_not_be_read_shows_as_a_question_mark() {
        let r = row(&pod(), None, None, None);
        let text = render(&[r]);
        let cells: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(cells[6..], ["data-queue-0", "?", "?", "?"]);
    }

    #[test]
    fn disk_use_comes_from_the_gauge() {
        let text = "# HELP rustqueue_disk_used_ratio Share of the data disk in use\n\
                    rustqueue_disk_used_ratio 0.415\nrustqueue_disk_pressure 0\n";
        assert!((used_percent(text).unwrap() - 41.5).abs() < 1e-9);
        assert_eq!(used_percent("nothing 1\n"), None);
    }
}
