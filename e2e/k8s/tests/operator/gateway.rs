//! The two addresses a user gives applications: producers know only the gateway Service
//! (`<n>-gateway`, TCP 4150 / HTTP 4151), consumers only the discovery Service (`<n>-discovery`,
//! port 4161). The official go-nsq `Producer` and HTTP publishes through the gateway reach every
//! broker; go-nsq's `ConnectToNSQLookupd` and pynsq's `lookupd_http_addresses` drain them with a
//! ledger; a deleted broker's consumers reconnect when it returns; the gateway rotates producer
//! connections at `proxyTcpMaxConnectionAgeSeconds`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::{
    Produce, Sub, gonsq_consume_in, gonsq_consumer, gonsq_produce, pynsq_consume_in,
};
use rustqueue_e2e::{Poll, eventually};
use serde_json::Value;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::discovery::{delete_and_see_it_leave_lookup, producers, pub_http};
use crate::dns::pod_resolv_conf;
use crate::rollout::brokers;

/// The ClusterIP of Service `name`.
pub async fn service_ip(c: &Cluster, name: &str) -> String {
    Api::<Service>::namespaced(c.client.clone(), NS)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("the Service {name}: {e}"))
        .spec
        .and_then(|s| s.cluster_ip)
        .unwrap_or_else(|| panic!("{name} has a ClusterIP"))
}

/// Messages `topic` took in on each broker (`/v1/stats`), by broker.
pub async fn published_per_broker(c: &Cluster, topic: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for b in brokers() {
        let ip = c.pod_ip(&b).await;
        let url = format!("http://{ip}:4151/v1/stats?topic={topic}");
        let stats: Value = rustqueue_api::http_client::get(&url)
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let n = stats["topics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["name"] == topic)
            .filter_map(|t| t["published_count"].as_u64())
            .sum();
        out.insert(b, n);
    }
    out
}

/// Prints `client`'s ledger and fails if it missed any body of `published`.
fn check_ledger(client: &str, published: &[String], received: &[String]) {
    let got: BTreeSet<&String> = received.iter().collect();
    let lost: Vec<&String> = published.iter().filter(|b| !got.contains(b)).collect();
    eprintln!(
        "ledger {client}: published {} received {} missing {}",
        published.len(),
        got.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "{client} never received {lost:?}");
}

/// The gateway Pods of the sample, with their IPs (Pods without one yet are left out).
async fn gateway_pods(c: &Cluster) -> Vec<(String, String)> {
    let lp = ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={RQ},app.kubernetes.io/component=gateway"
    ));
    let pods = c.pods.list(&lp).await.expect("list gateway Pods");
    pods.items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.status?.pod_ip?)))
        .collect()
}

/// The ready endpoint addresses the EndpointSlices of Service `name` list (what kube-proxy
/// routes the Service's address to).
async fn service_endpoints(c: &Cluster, name: &str) -> BTreeSet<String> {
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), NS);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    let Ok(list) = slices.list(&lp).await else {
        return BTreeSet::new();
    };
    list.items
        .into_iter()
        .flat_map(|s| s.endpoints.unwrap_or_default())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses)
        .collect()
}

/// GETs `url` as JSON, or says why not.
async fn get_json(url: &str) -> Result<Value, String> {
    let resp = rustqueue_api::http_client::get(url)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    resp.json().await.map_err(|e| format!("{url}: {e}"))
}

/// `(revision, {"<broadcast address>:<tcp port>", ...})` of a discovery `/v1/publishers` or a
/// gateway `/v1/health` body.
fn routing(body: &Value, list: &str) -> (Option<u64>, BTreeSet<String>) {
    let addresses = body[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| match p["address"].as_str() {
            Some(a) => Some(a.to_owned()),
            None => Some(format!(
                "{}:{}",
                p["broadcast_address"].as_str()?,
                p["tcp_port"]
            )),
        })
        .collect();
    (body["revision"].as_u64(), addresses)
}

/// Waits until every gateway Pod routes to the `n` publish-ready brokers discovery publishes
/// now, at discovery's revision (its `/v1/health` lists them). The RustQueue's `Ready` says the
/// brokers and the gateway Pods are up, not that every gateway has taken in a broker that just
/// came back: that follows within a poll or two of discovery (docs/gateway.md).
pub async fn gateways_route_to_every_broker(c: &Cluster, n: usize) {
    let discovery = service_ip(c, &format!("{RQ}-discovery")).await;
    let started = std::time::Instant::now();
    eventually(
        "every gateway Pod routing to every broker",
        LONG,
        || async {
            let published = match get_json(&format!("http://{discovery}:4161/v1/publishers")).await
            {
                Ok(body) => routing(&body, "producers"),
                Err(e) => return Poll::Saw(e),
            };
            if published.1.len() != n {
                return Poll::Saw(format!(
                    "discovery publishes {published:?}, not {n} brokers"
                ));
            }
            let mut behind = Vec::new();
            let pods = gateway_pods(c).await;
            let ips: BTreeSet<String> = pods.iter().map(|(_, ip)| ip.clone()).collect();
            let served = service_endpoints(c, &format!("{RQ}-gateway")).await;
            if served != ips {
                behind.push(format!(
                    "the gateway Service's endpoints {served:?}, its Pods {ips:?}"
                ));
            }
            for (pod, ip) in pods {
                match get_json(&format!("http://{ip}:4151/v1/health")).await {
                    Ok(body) if routing(&body, "publishers") == published => {}
                    Ok(body) => behind.push(format!(
                        "{pod} routes by {:?}",
                        routing(&body, "publishers")
                    )),
                    Err(e) => behind.push(format!("{pod}: {e}")),
                }
            }
            if behind.is_empty() {
                Poll::Done(())
            } else {
                Poll::Saw(format!("discovery publishes {published:?}; {behind:?}"))
            }
        },
    )
    .await;
    eprintln!(
        "every gateway Pod routes to the {n} brokers discovery publishes ({:.1} s after Ready)",
        started.elapsed().as_secs_f64()
    );
}

pub async fn producers_reach_every_broker_through_the_gateway_and_consumers_through_discovery(
    c: &Cluster,
) {
    let rq = c.ready(3).await;
    let runtime = rq.condition("RuntimeAvailable");
    eprintln!("RuntimeAvailable: {runtime:?}");
    // The step before replaced a broker Pod: publish only once every gateway routes to it.
    gateways_route_to_every_broker(c, 3).await;
    let gw = service_ip(c, &format!("{RQ}-gateway")).await;
    let lookupd = format!(
        "http://{}:4161",
        service_ip(c, &format!("{RQ}-discovery")).await
    );
    let topic = "through-gateway";

    // six go-nsq Producers, one TCP tunnel each, placed on the least busy broker
    let tcp = Produce {
        n: 300,
        conns: 6,
        prefix: "tcp",
        interval: Duration::ZERO,
    };
    let (mut published, _) = gonsq_produce(&format!("{gw}:4150"), topic, tcp);
    assert_eq!(published.len(), 300, "every go-nsq publish acknowledged");
    published.extend(pub_http(&gw, topic, "http", 30).await);
    let batch: Vec<String> = (0..10).map(|i| format!("mpub-{i}")).collect();
    let url = format!("http://{gw}:4151/mpub?topic={topic}");
    assert_eq!(
        http_post(&url, None, &batch.join("\n")).await,
        200,
        "/mpub via the gateway"
    );
    published.extend(batch);

    let per_broker = published_per_broker(c, topic).await;
    eprintln!(
        "through the gateway: {} published, per broker {per_broker:?}",
        published.len()
    );
    assert!(
        per_broker.values().all(|n| *n > 0),
        "the gateway spreads producers over every broker: {per_broker:?}"
    );
    assert_eq!(
        per_broker.values().sum::<u64>(),
        published.len() as u64,
        "the brokers took in exactly what was acknowledged"
    );

    // consumers given only the discovery Service, names resolved as in a Pod
    let resolv = pod_resolv_conf(c).await;
    let sub = |channel| Sub {
        resolv_conf: Some(&resolv),
        addr: &lookupd,
        topic,
        channel,
        n: published.len(),
        limit: Duration::from_secs(90),
    };
    let go = gonsq_consume_in(&sub("go"));
    let py = pynsq_consume_in(&sub("py"));
    check_ledger("go-nsq via discovery", &published, &go);
    check_ledger("pynsq via discovery", &published, &py);
}

/// A go-nsq consumer that knows only discovery keeps receiving from a broker whose Pod was
/// deleted: it leaves `/lookup` within 5 s, and the consumer reconnects when it returns.
pub async fn consumers_reconnect_to_a_broker_that_returns(c: &Cluster) {
    c.ready(3).await;
    let lookupd = format!(
        "http://{}:4161",
        service_ip(c, &format!("{RQ}-discovery")).await
    );
    let topic = "rejoin";
    let mut published = Vec::new();
    for b in brokers() {
        published.extend(pub_http(&c.pod_ip(&b).await, topic, &format!("{b}-before"), 10).await);
    }
    let resolv = pod_resolv_conf(c).await;
    let total = published.len() + 10;
    let mut consumer = gonsq_consumer(&Sub {
        resolv_conf: Some(&resolv),
        addr: &lookupd,
        topic,
        channel: "c",
        n: total,
        limit: Duration::from_secs(150),
    });
    let child = consumer
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the go-nsq consumer");
    let waiting = tokio::task::spawn_blocking(move || child.wait_with_output());

    let gone = format!("{RQ}-2");
    eventually(
        "the consumer's topic on every broker in /lookup",
        LONG,
        || async {
            match producers(&lookupd, topic).await {
                Ok(p) if p.len() == 3 => Poll::Done(()),
                other => Poll::Saw(other),
            }
        },
    )
    .await;
    delete_and_see_it_leave_lookup(c, &lookupd, topic, &gone).await;
    c.ready(3).await;
    eventually("the returned broker back in /lookup", LONG, || async {
        match producers(&lookupd, topic).await {
            Ok(p) if p.len() == 3 => Poll::Done(()),
            other => Poll::Saw(other),
        }
    })
    .await;
    let ip = c.pod_ip(&gone).await;
    published.extend(pub_http(&ip, topic, &format!("{gone}-after"), 10).await);
    let out = waiting.await.unwrap().expect("the go-nsq consumer ran");
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        out.status.success(),
        "the consumer did not get everything back after {gone} returned:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_ledger("go-nsq across a broker's return", &published, &got);
}

/// `proxyTcpMaxConnectionAgeSeconds: 2` reaches every gateway Pod, and one long-lived go-nsq
/// Producer publishing for 8 s is rotated (reconnected and placed again) several times, so its
/// messages land on more than one broker; back to the default afterwards.
pub async fn the_gateway_rotates_producer_connections_at_the_configured_age(c: &Cluster) {
    c.patch_spec_ok(r#"{"proxyTcpMaxConnectionAgeSeconds":2}"#);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(c.client.clone(), NS);
    eventually(
        "the gateway DaemonSet carrying the new age",
        LONG,
        || async {
            let ds = daemon_sets.get(&format!("{RQ}-gateway")).await.ok();
            let age = ds.as_ref().and_then(|d| {
                let env = d.spec.template.spec.as_ref()?.containers[0].env.clone()?;
                env.into_iter()
                    .find(|e| e.name == "RUSTQUEUE_GATEWAY_TCP_MAX_CONNECTION_AGE_SECONDS")?
                    .value
            });
            if age.as_deref() == Some("2") {
                Poll::Done(())
            } else {
                Poll::Saw(age)
            }
        },
    )
    .await;
    c.ready(3).await;
    // The gateway Pods were just replaced: each starts with the pools of its first agreed poll.
    gateways_route_to_every_broker(c, 3).await;
    let before = rotations(c).await;
    let gw = service_ip(c, &format!("{RQ}-gateway")).await;
    let topic = "rotation";
    let one = Produce {
        n: 40,
        conns: 1,
        prefix: "rot",
        interval: Duration::from_millis(200),
    };
    let (published, log) = gonsq_produce(&format!("{gw}:4150"), topic, one);
    assert_eq!(published.len(), 40);
    let rotated = rotations(c).await - before;
    let per_broker = published_per_broker(c, topic).await;
    let owners = per_broker.values().filter(|n| **n > 0).count();
    eprintln!("rotation at 2 s: per broker {per_broker:?}; {}", log.trim());
    figure(
        "gateway tunnels rotated in 8 s at proxyTcpMaxConnectionAgeSeconds 2",
        rotated,
        "rotations",
    );
    assert!(rotated >= 2.0, "{rotated} rotations in 8 s at a 2 s age");
    assert!(owners >= 2, "one producer reached only {per_broker:?}");
    // drain what was published (a scale-down later waits for every broker to be empty)
    let lookupd = format!(
        "http://{}:4161",
        service_ip(c, &format!("{RQ}-discovery")).await
    );
    let resolv = pod_resolv_conf(c).await;
    let got = gonsq_consume_in(&Sub {
        resolv_conf: Some(&resolv),
        addr: &lookupd,
        topic,
        channel: "c",
        n: published.len(),
        limit: Duration::from_secs(90),
    });
    check_ledger("go-nsq after rotation", &published, &got);

    c.patch_spec_ok(r#"{"proxyTcpMaxConnectionAgeSeconds":300}"#);
    c.ready(3).await;
}

/// `rustqueue_gateway_tcp_connection_rotations_total` summed over the gateway Pods.
async fn rotations(c: &Cluster) -> f64 {
    let mut total = 0.0;
    for (_, ip) in gateway_pods(c).await {
        let url = format!("http://{ip}:4151/metrics");
        let Ok(text) = rustqueue_api::http_client::get(&url)
            .await
            .and_then(|r| r.error_for_status())
        else {
            continue;
        };
        let text = text.text().await.unwrap_or_default();
        total += text
            .lines()
            .filter(|l| l.starts_with("rustqueue_gateway_tcp_connection_rotations_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}
