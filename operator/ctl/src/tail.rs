//! `tail`: what nsq_tail does, through the cluster's own discovery. Looks the topic up on a
//! discovery Pod (`/lookup`, every few seconds, so brokers that take the topic later are
//! joined), maps each producer to its broker Pod, and consumes from each on an ephemeral
//! channel of its own; Pods are reached by IP or through a port-forward ([`Reach`]).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use rustqueue_api::labels::{BROKER_TCP_PORT, COMPONENT_DISCOVERY, DISCOVERY_HTTP_PORT};
use tokio::sync::mpsc;

use crate::cluster::{Target, pod_ip, pod_name, pod_ready};
use crate::nsq;
use crate::reach::Reach;

/// How often discovery is asked again.
const LOOKUP_EVERY: Duration = Duration::from_secs(3);

/// The broker Pods discovery lists for a topic, from a `/lookup` body (nsqlookupd's shape,
/// bare or under `data`): a producer is its Pod by `hostname`, by the first label of its
/// `broadcast_address`, or by Pod IP.
pub fn producers_to_pods(lookup: &serde_json::Value, pods: &[Pod]) -> BTreeSet<String> {
    let producers = lookup
        .get("producers")
        .or_else(|| lookup.get("data").and_then(|d| d.get("producers")))
        .and_then(|p| p.as_array())
        .cloned()
        .unwrap_or_default();
    producers
        .iter()
        .filter_map(|p| {
            let host = p.get("hostname").and_then(|h| h.as_str()).unwrap_or("");
            let addr = p
                .get("broadcast_address")
                .and_then(|h| h.as_str())
                .unwrap_or("");
            let first = addr.split('.').next().unwrap_or("");
            pods.iter()
                .find(|pod| {
                    let n = pod_name(pod);
                    n == host || n == first || pod_ip(pod) == Some(addr)
                })
                .map(|pod| pod_name(pod).to_string())
        })
        .collect()
}

/// Runs the tail until `count` messages, `timeout`, or Ctrl-C.
pub async fn tail(
    target: &Target,
    reach: &Reach,
    topic: &str,
    count: Option<u64>,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    target.queue().await?;
    let channel = nsq::ephemeral_channel();
    eprintln!(
        "tailing topic {topic} of RustQueue {} on channel {channel}",
        target.what()
    );
    let (bodies, mut received) = mpsc::channel::<Vec<u8>>(256);
    let (ended, mut endings) = mpsc::channel::<(String, String)>(16);
    let mut consuming: BTreeSet<String> = BTreeSet::new();
    let mut lookups = tokio::time::interval(LOOKUP_EVERY);
    let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    let mut seen = 0u64;
    let mut last_lookup_error = String::new();
    loop {
        tokio::select! {
            _ = lookups.tick() => {
                match lookup(target, reach, topic).await {
                    Ok(found) => for pod in found {
                        if consuming.insert(pod.0.clone()) {
                            spawn_consumer(reach, pod, topic, &channel, &bodies, &ended);
                        }
                    },
                    Err(e) => {
                        let e = format!("{e:#}");
                        if e != last_lookup_error {
                            eprintln!("rustqueuectl: discovery: {e} (retrying)");
                            last_lookup_error = e;
                        }
                    }
                }
            }
            Some(body) = received.recv() => {
                let mut out = std::io::stdout().lock();
                out.write_all(&body)?;
                out.write_all(b"\n")?;
                out.flush()?;
                seen += 1;
                if count.is_some_and(|c| seen >= c) {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Some((pod, why)) = endings.recv() => {
                eprintln!("rustqueuectl: {pod}: {why} (reconnecting)");
                consuming.remove(&pod);
            }
            () = &mut deadline => {
                return match count {
                    Some(c) if seen < c => bail!(
                        "timed out after {}s with {seen} of {c} messages",
                        timeout.unwrap_or_default().as_secs()
                    ),
                    _ => Ok(ExitCode::SUCCESS),
                };
            }
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

fn spawn_consumer(
    reach: &Reach,
    (name, pod): (String, Pod),
    topic: &str,
    channel: &str,
    bodies: &mpsc::Sender<Vec<u8>>,
    ended: &mpsc::Sender<(String, String)>,
) {
    let (reach, topic, channel) = (reach.clone(), topic.to_string(), channel.to_string());
    let (bodies, ended) = (bodies.clone(), ended.clone());
    tokio::spawn(async move {
        let why = match reach.connect(&pod, BROKER_TCP_PORT).await {
            Ok(stream) => nsq::consume(stream, &topic, &channel, bodies).await,
            Err(e) => Err(e),
        };
        let why = why
            .err()
            .map_or_else(|| "stopped".to_string(), |e| format!("{e:#}"));
        let _ = ended.send((name, why)).await;
    });
}

/// The broker Pods (with their objects) that discovery lists for `topic`.
async fn lookup(target: &Target, reach: &Reach, topic: &str) -> anyhow::Result<Vec<(String, Pod)>> {
    let discovery = target.pods(COMPONENT_DISCOVERY).await?;
    let pod = discovery
        .iter()
        .find(|p| pod_ready(p))
        .ok_or_else(|| anyhow!("no Ready discovery Pod of RustQueue {}", target.what()))?;
    let path = format!("/lookup?topic={topic}");
    let (status, body) = reach
        .http(pod, DISCOVERY_HTTP_PORT, http::Method::GET, &path, None)
        .await?;
    if status == 404 {
        return Ok(Vec::new());
    }
    let v = crate::reach::json_2xx(&path, status, &body)?;
    let brokers = target.brokers().await?;
    let names = producers_to_pods(&v, &brokers);
    Ok(brokers
        .into_iter()
        .filter(|p| names.contains(pod_name(p)))
        .map(|p| (pod_name(&p).to_string(), p))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "status": {"podIP": ip}
        }))
        .unwrap()
    }

    #[test]
    fn producers_map_to_their_broker_pods() {
        let pods = [
            pod("queue-0", "10.244.0.2"),
            pod("queue-1", "10.244.0.3"),
            pod("queue-2", "10.244.0.4"),
        ];
        let lookup = serde_json::json!({"channels": [], "producers": [
            {"broadcast_address": "queue-0.queue-brokers.ns.svc", "hostname": "x", "tcp_port": 4150},
            {"broadcast_address": "10.244.0.4", "hostname": "y", "tcp_port": 4150},
            {"broadcast_address": "elsewhere", "hostname": "queue-1", "tcp_port": 4150},
        ]});
        let got = producers_to_pods(&lookup, &pods);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            ["queue-0", "queue-1", "queue-2"]
        );
        let old = serde_json::json!({"status_code": 200, "data": {"producers": [
            {"broadcast_address": "queue-2.queue-brokers.ns.svc"}]}});
        assert_eq!(producers_to_pods(&old, &pods).len(), 1);
        assert!(producers_to_pods(&serde_json::json!({}), &pods).is_empty());
    }
}
