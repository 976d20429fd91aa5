//! Consumers that know only a lookupd address: the operator's discovery Service answers as
//! nsqlookupd would, so the official pynsq `Reader` given `lookupd_http_addresses` finds a topic
//! on every broker and drains it; a deleted broker leaves `/lookup` within 5 s and comes back
//! with its Pod.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::DeleteParams;
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::{Sub, pynsq_consume_in};
use rustqueue_e2e::{Poll, eventually};
use serde_json::Value;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::dns::pod_resolv_conf;
use crate::rollout::brokers;

/// The brokers `/lookup?topic=` lists, as `<broadcast address>:<tcp port>` (their cluster DNS
/// names).
pub async fn producers(lookupd: &str, topic: &str) -> Result<BTreeSet<String>, String> {
    let url = format!("{lookupd}/lookup?topic={topic}");
    let resp = rustqueue_api::http_client::get(&url)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status} {body}"));
    }
    Ok(body["producers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{}:{}",
                p["broadcast_address"].as_str().unwrap_or("?"),
                p["tcp_port"]
            )
        })
        .collect())
}

/// POSTs `<prefix>-<i>` for `i` in `0..n` to `http://<at>:4151/pub?topic=<topic>` (a broker or
/// the gateway), each answered 200; returns the bodies.
pub async fn pub_http(at: &str, topic: &str, prefix: &str, n: usize) -> Vec<String> {
    let url = format!("http://{at}:4151/pub?topic={topic}");
    let mut bodies = Vec::new();
    for i in 0..n {
        let body = format!("{prefix}-{i}");
        assert_eq!(http_post(&url, None, &body).await, 200, "POST {url} {body}");
        bodies.push(body);
    }
    bodies
}

/// Deletes broker Pod `gone`, waits (at most 5 s) until `/lookup?topic=` no longer lists it,
/// then until its replacement (another Pod UID) is Ready: the RustQueue's status may still say
/// Ready from before the deletion, so it cannot tell that the broker is back.
pub async fn delete_and_see_it_leave_lookup(c: &Cluster, lookupd: &str, topic: &str, gone: &str) {
    let gone_at = format!("{gone}.{RQ}-brokers.{NS}.svc:4150");
    let old_uid = c
        .ready_pod_uid(gone)
        .await
        .unwrap_or_else(|| panic!("{gone} Ready before it is deleted"));
    let start = Instant::now();
    c.pods
        .delete(gone, &DeleteParams::default())
        .await
        .expect("delete a broker Pod");
    eventually(
        &format!("{gone} leaving /lookup within 5 s"),
        Duration::from_secs(5),
        || async {
            match producers(lookupd, topic).await {
                Ok(p) if !p.contains(&gone_at) => Poll::Done(()),
                other => Poll::Saw(other),
            }
        },
    )
    .await;
    figure(
        "broker Pod deleted -> gone from discovery /lookup",
        start.elapsed().as_secs_f64(),
        "s",
    );
    eventually(&format!("{gone} recreated and Ready"), LONG, || async {
        match c.ready_pod_uid(gone).await {
            Some(u) if u != old_uid => Poll::Done(()),
            other => Poll::Saw(format!("Ready uid {other:?} (old {old_uid})")),
        }
    })
    .await;
}

pub async fn consumers_find_every_broker_through_the_discovery_service(c: &Cluster) {
    c.ready(3).await;
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), NS);
    eventually("discovery Pods Ready", LONG, || async {
        let d = deployments
            .get_opt(&format!("{RQ}-discovery"))
            .await
            .ok()
            .flatten();
        let ready = d.as_ref().and_then(|d| d.status.as_ref()?.ready_replicas);
        if ready.unwrap_or(0) >= 2 {
            Poll::Done(())
        } else {
            Poll::Saw(d.map(|d| d.status))
        }
    })
    .await;
    let svc = Api::<Service>::namespaced(c.client.clone(), NS)
        .get(&format!("{RQ}-discovery"))
        .await
        .expect("the discovery Service");
    let ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
    let lookupd = format!("http://{ip}:4161");

    let topic = "found";
    let mut published = Vec::new();
    for b in brokers() {
        published.extend(pub_http(&c.pod_ip(&b).await, topic, &b, 20).await);
    }
    let all: BTreeSet<String> = eventually("/lookup lists all 3 brokers", LONG, || async {
        match producers(&lookupd, topic).await {
            Ok(p) if p.len() == 3 => Poll::Done(p),
            other => Poll::Saw(other),
        }
    })
    .await;

    // the Reader connects to the names discovery gives, so it resolves them as a Pod would
    let resolv = pod_resolv_conf(c).await;
    let mut got = pynsq_consume_in(&Sub {
        resolv_conf: Some(&resolv),
        addr: &lookupd,
        topic,
        channel: "c",
        n: published.len(),
        limit: Duration::from_secs(60),
    });
    got.sort();
    published.sort();
    let missing: Vec<&String> = published.iter().filter(|b| !got.contains(b)).collect();
    eprintln!(
        "through discovery: published {} received {} missing {}",
        published.len(),
        got.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "never delivered through discovery: {missing:?}"
    );

    let gone = format!("{RQ}-1");
    let gone_at = format!("{gone}.{RQ}-brokers.{NS}.svc:4150");
    assert!(all.contains(&gone_at), "{gone_at} not in {all:?}");
    delete_and_see_it_leave_lookup(c, &lookupd, topic, &gone).await;
    c.ready(3).await;
    eventually("the returned broker back in /lookup", LONG, || async {
        match producers(&lookupd, topic).await {
            Ok(p) if p.len() == 3 => Poll::Done(()),
            other => Poll::Saw(other),
        }
    })
    .await;
}
