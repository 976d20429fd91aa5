//! Maintenance of one named broker: drained (publishing refused, consumers keep reading) while
//! requested, resumed when disabled.

use std::time::Duration;

use rustqueue_e2e::tools::pynsq_consume;

use crate::cluster::{Cluster, LONG, RQ, http_post};

/// `spec.maintenance {broker: queue-1}`: phase `Maintenance`, queue-1 refuses publishes but
/// still delivers its backlog; `enabled: false` resumes it and the cluster is Ready.
pub async fn maintenance_drains_a_named_broker_and_resumes_it(c: &Cluster) {
    c.ready(3).await;
    let b = format!("{RQ}-1");
    let token = c.admin_token().await;
    let ip = c.pod_ip(&b).await;
    let url = |p: &str| format!("http://{ip}:4151{p}");
    assert_eq!(
        http_post(
            &url("/channel/create?topic=maint&channel=c"),
            Some(&token),
            ""
        )
        .await,
        200
    );
    for i in 0..3 {
        assert_eq!(
            http_post(&url("/pub?topic=maint"), None, &format!("k{i}")).await,
            200
        );
    }
    c.patch_spec_ok(&format!(
        r#"{{"maintenance":{{"broker":"{b}","enabled":true}}}}"#
    ));
    let rq = c
        .until("phase Maintenance", LONG, |rq| rq.phase() == "Maintenance")
        .await;
    assert_eq!(rq.operation()["kind"], "Maintenance", "{rq:?}");
    assert_eq!(rq.operation()["currentBroker"], b, "{rq:?}");
    let drain = c.broker_get(&b, "/v1/drain").await;
    assert_eq!(drain["draining"], true, "{b} /v1/drain: {drain}");
    assert_ne!(
        http_post(&url("/pub?topic=maint"), None, "refused").await,
        200,
        "{b} accepted a publish in maintenance"
    );
    let mut got = pynsq_consume(
        &format!("{ip}:4150"),
        "maint",
        "c",
        3,
        Duration::from_secs(30),
    );
    got.sort();
    assert_eq!(got, ["k0", "k1", "k2"], "the backlog in maintenance");

    c.patch_spec_ok(&format!(
        r#"{{"maintenance":{{"broker":"{b}","enabled":false}}}}"#
    ));
    c.ready(3).await;
    let drain = c.broker_get(&b, "/v1/drain").await;
    assert_eq!(drain["draining"], false, "{b} after maintenance: {drain}");
    assert_eq!(
        http_post(&url("/pub?topic=maint"), None, "after").await,
        200,
        "{b} refuses publishes after maintenance"
    );
    c.patch_spec_ok(r#"{"maintenance":null}"#);
    c.ready(3).await;
}
