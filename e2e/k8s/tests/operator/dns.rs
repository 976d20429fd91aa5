//! Clients find brokers by name: inside the cluster's network, with the `/etc/resolv.conf` a
//! Pod gets, the official pynsq client publishes to and consumes from every broker by its
//! stable DNS name (`<rq>-<i>.<rq>-brokers.<namespace>.svc.cluster.local`, the headless
//! Service's records) and every acknowledged message is delivered.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use rustqueue_e2e::ledger::Ledger;
use rustqueue_e2e::{Poll, eventually};

use crate::cluster::{Backend, Cluster, NS, RQ};
use crate::rollout::brokers;

/// The cluster DNS server's address: the testbed's, or the `kube-dns` Service's ClusterIP.
async fn cluster_dns(c: &Cluster) -> String {
    match c.backend {
        Backend::Testbed(_) => rustqueue_testbed::network::CLUSTER_DNS.to_string(),
        Backend::Kubeconfig => Api::<Service>::namespaced(c.client.clone(), "kube-system")
            .get("kube-dns")
            .await
            .expect("Service kube-system/kube-dns")
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("kube-dns has a ClusterIP"),
    }
}

/// A `resolv.conf` as a Pod in the operator's namespace gets it (the cluster DNS, the
/// namespace's search path), for clients that must resolve cluster names.
pub async fn pod_resolv_conf(c: &Cluster) -> std::path::PathBuf {
    let resolv = c.scratch.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        format!(
            "nameserver {}\nsearch {NS}.svc.cluster.local svc.cluster.local cluster.local\n\
             options ndots:5\n",
            cluster_dns(c).await
        ),
    )
    .expect("resolv.conf");
    resolv
}

/// 60 messages a second for a few seconds through `queue-<i>.queue-brokers...:4150`: nothing
/// acknowledged goes missing, and each broker's own stats show the topic, so every name
/// reached its broker.
pub async fn a_client_reaches_every_broker_by_its_dns_name(c: &Cluster) {
    c.ready(3).await;
    let resolv = pod_resolv_conf(c).await;
    let names: Vec<String> = brokers()
        .iter()
        .map(|b| format!("{b}.{RQ}-brokers.{NS}.svc.cluster.local:4150"))
        .collect();
    let topic = "by-name";
    let ledger = Ledger::start_resolving(&resolv, &names, topic, "c", 60);
    eventually(
        "the ledger's messages flowing through the brokers' names",
        Duration::from_secs(60),
        || async {
            let p = ledger.progress();
            if p.acked >= 180 && p.delivered >= 180 {
                Poll::Done(())
            } else {
                Poll::Saw(p)
            }
        },
    )
    .await;
    let report = ledger.finish(Duration::from_secs(60)).await;
    eprintln!("by DNS name: ledger {report:?}");
    assert!(
        report.missing.is_empty(),
        "{} acknowledged messages never delivered: {report:?}",
        report.missing.len()
    );
    for b in brokers() {
        let stats = c.broker_get(&b, "/stats?format=json").await;
        let topics = stats["topics"].as_array().cloned().unwrap_or_default();
        assert!(
            topics.iter().any(|t| t["topic_name"] == topic),
            "{b} has no topic {topic:?}: the client never published to its name: {stats:#}"
        );
    }
}
