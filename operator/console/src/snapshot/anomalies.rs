//! What needs attention in a snapshot.

use super::{Anomaly, Snapshot};

/// `cluster_not_ready` (warning) unless the phase is Ready; per broker `broker_unreachable`,
/// `disk_pressure`, `storage_unhealthy` (critical); `partial_snapshot` (warning) when the
/// snapshot is incomplete and nothing above explains it.
pub fn anomalies(s: &Snapshot) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let phase = s.cluster.phase.as_deref().unwrap_or("Unknown");
    if phase != "Ready" {
        out.push(Anomaly {
            severity: "warning",
            code: "cluster_not_ready",
            broker: None,
            message: format!("the RustQueue is {phase}"),
        });
    }
    for b in &s.brokers {
        let critical = |code, message: String| Anomaly {
            severity: "critical",
            code,
            broker: Some(b.name.clone()),
            message,
        };
        if let Some(e) = &b.error {
            out.push(critical("broker_unreachable", format!("{}: {e}", b.name)));
        }
        let Some(o) = &b.observation else { continue };
        if o.head.disk.pressure {
            let used = o.head.disk.used_percent;
            out.push(critical(
                "disk_pressure",
                format!("{} is under disk pressure ({used:.1} % used)", b.name),
            ));
        }
        if !o.head.readiness.storage_healthy {
            out.push(critical(
                "storage_unhealthy",
                format!("{} isolated its storage after a fault", b.name),
            ));
        }
    }
    if !s.complete && out.is_empty() {
        out.push(Anomaly {
            severity: "warning",
            code: "partial_snapshot",
            broker: None,
            message: s
                .errors
                .first()
                .cloned()
                .unwrap_or_else(|| "not every broker was observed".into()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{broker_view, snapshot};

    fn codes(s: &Snapshot) -> Vec<(&'static str, &'static str)> {
        anomalies(s).iter().map(|a| (a.severity, a.code)).collect()
    }

    #[test]
    fn a_ready_complete_cluster_has_no_anomaly() {
        assert!(codes(&snapshot(vec![broker_view("q-0", 1)])).is_empty());
    }

    #[test]
    fn each_condition_raises_its_code() {
        let mut s = snapshot(vec![
            broker_view("q-0", 1),
            broker_view("q-1", 2),
            broker_view("q-2", 3),
        ]);
        s.cluster.phase = Some("Rolling".into());
        s.brokers[0].error = Some("connection failed".into());
        s.brokers[1]
            .observation
            .as_mut()
            .unwrap()
            .head
            .disk
            .pressure = true;
        s.brokers[2]
            .observation
            .as_mut()
            .unwrap()
            .head
            .readiness
            .storage_healthy = false;
        s.complete = false;
        assert_eq!(
            codes(&s),
            vec![
                ("warning", "cluster_not_ready"),
                ("critical", "broker_unreachable"),
                ("critical", "disk_pressure"),
                ("critical", "storage_unhealthy"),
            ]
        );
    }

    #[test]
    fn an_incomplete_snapshot_is_partial_only_when_nothing_else_explains_it() {
        let mut s = snapshot(vec![broker_view("q-0", 1)]);
        s.complete = false;
        s.errors = vec!["listing events: forbidden".into()];
        assert_eq!(codes(&s), vec![("warning", "partial_snapshot")]);
        assert_eq!(anomalies(&s)[0].message, "listing events: forbidden");
    }
}
