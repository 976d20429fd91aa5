//! Steps shared by the management tests: a console ready for management, waits for catalog
//! phases, and topics created directly on brokers (as producers would) and adopted.

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use serde_json::Value;

use super::{Browser, Cluster, Served, wait_for};

pub async fn ready(cluster: &Cluster) -> (Served, Browser) {
    let served = Served::start(cluster, true).await;
    wait_for("a complete snapshot with management usable", 20, || async {
        served.tick().await;
        let (_, s) = served.snapshot().await;
        let m = &s["management"];
        let fenced = s["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["observation"]["readiness"]["management_fences_ready"] == true);
        (s["complete"] == true
            && m["registry_available"] == true
            && m["crd_fresh"] == true
            && fenced)
            .then_some(())
    })
    .await;
    let mut browser = served.browser();
    browser.unlock().await;
    (served, browser)
}

pub async fn topic_phase(served: &Served, cluster: &Cluster, topic: &str, want: CatalogPhase) {
    wait_for(&format!("topic {topic} {want:?}"), 30, || async {
        served.tick().await;
        cluster
            .mem
            .topic(topic)
            .filter(|t| t.spec.phase == want)
            .map(drop)
    })
    .await;
}

pub async fn channel_phase(
    served: &Served,
    cluster: &Cluster,
    topic: &str,
    channel: &str,
    want: CatalogPhase,
) {
    wait_for(
        &format!("channel {topic}/{channel} {want:?}"),
        30,
        || async {
            served.tick().await;
            cluster
                .mem
                .channel(topic, channel)
                .filter(|c| c.spec.phase == want)
                .map(drop)
        },
    )
    .await;
}

pub fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("")
}

/// A topic created directly on `owners` (as producers would), adopted into the catalog.
pub async fn topic_on(cluster: &Cluster, served: &Served, topic: &str, owners: &[&str]) {
    for o in owners {
        let status = cluster
            .broker(o)
            .admin(&format!("/topic/create?topic={topic}"))
            .await;
        assert_eq!(status, StatusCode::OK, "create {topic} on {o}");
    }
    wait_for("the topic adopted with every owner", 20, || async {
        served.tick().await;
        let t = cluster.mem.topic(topic)?;
        (t.spec.phase == CatalogPhase::Active && t.spec.owners.len() == owners.len()).then_some(())
    })
    .await;
}
