//! The Kodo compatibility profile (docs/kodo.md) on the testbed, driven by the Kodo stand-in
//! (e2e/kodo/standin: go-nsq used the way Kodo uses it, refreshing `/nodes` on an interval):
//! the profile is enabled under a publishing fleet, which moves from the brokers to the three
//! Gateway identities without stopping; the fences hold the broker rollout until the producer
//! restart is confirmed; a broker killed while 100 MiB messages are being published costs no
//! acknowledged message; disabling is blocked until confirmed and then returns the fleet to the
//! brokers. At the end every acknowledged message is consumed through discovery.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::DeleteParams;
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::tools::{in_pod_dns, kodo_standin, kubectl_ok, run};
use rustqueue_e2e::{Poll, eventually};
use serde_json::Value;

use crate::cluster::{Cluster, LONG, NS, RQ, http_post};
use crate::dns::pod_resolv_conf;
use crate::gateway::{published_per_broker, service_ip};
use crate::rollout::brokers;

/// The stand-ins' topics (the fleet's, the large messages') and the channel created on every
/// broker before the first publish.
const TOPIC: &str = "kodo";
const LARGE_TOPIC: &str = "kodo-large";
const CHANNEL: &str = "verify";
/// Kodo's largest message: 100 MiB - 100 B.
const LARGE: usize = 104_857_500;
/// The grace the operator is started with for this test (the CRD's floor is 630 s).
const GRACE: u64 = 20;
/// The longest the publishing fleet may go without an acknowledgement.
const MAX_GAP: Duration = Duration::from_secs(30);

/// A running Kodo stand-in publishing small messages at a steady pace, and when each of its
/// acknowledgements arrived.
pub struct Fleet {
    child: Child,
    acks: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The fleet's ledger.
    ledger: PathBuf,
}

impl Fleet {
    /// Acknowledged messages so far.
    fn acked(&self) -> usize {
        self.acks.lock().unwrap().len()
    }

    /// The `/nodes` entries (host:port) the acknowledged messages since `since` went to.
    fn nodes_since(&self, since: Instant) -> Vec<String> {
        let acks = self.acks.lock().unwrap();
        let mut nodes: Vec<String> = acks
            .iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, n)| n.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// The longest time between two acknowledgements (or since the last one).
    fn max_gap(&self) -> Duration {
        let acks = self.acks.lock().unwrap();
        let mut gap = acks.last().map_or(Duration::MAX, |(t, _)| t.elapsed());
        for w in acks.windows(2) {
            gap = gap.max(w[1].0 - w[0].0);
        }
        gap
    }

    /// Waits until the latest acknowledgement went to a `/nodes` entry `to` accepts (the fleet
    /// re-reads `/nodes` every 2 s); returns when that acknowledgement came.
    async fn wait_moved(&self, what: &str, to: impl Fn(&str) -> bool) -> Instant {
        eventually(what, LONG, || async {
            let last = self.acks.lock().unwrap().last().cloned();
            match last {
                Some((t, node)) if to(&node) => Poll::Done(t),
                other => Poll::Saw(other.map(|(_, node)| node)),
            }
        })
        .await
    }

    async fn wait_acked(&self, more_than: usize, what: &str) {
        eventually(what, LONG, || async {
            let n = self.acked();
            if n > more_than {
                Poll::Done(())
            } else {
                Poll::Saw(n)
            }
        })
        .await;
    }

    /// SIGTERM, which the stand-in takes between messages (the one in progress gets its
    /// ledger line: killed mid-publish, a stored message would be missing from the ledger and
    /// show as unknown); SIGKILL if it has not exited within a minute.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(60);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The discovery Service's address (`host:4161`), which Kodo is configured with as its
/// nsqlookupd.
async fn lookupd(c: &Cluster) -> String {
    format!("{}:4161", service_ip(c, &format!("{RQ}-discovery")).await)
}

/// `GET /nodes` from discovery: (broadcast address, tcp port, node id) of each entry.
async fn nodes(c: &Cluster) -> Vec<(String, u64, u64)> {
    let url = format!("http://{}/nodes", lookupd(c).await);
    let Ok(doc) = rustqueue_api::http_client::get(&url).await else {
        return Vec::new();
    };
    let doc: Value = doc.json().await.unwrap_or_default();
    doc["producers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["broadcast_address"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["tcp_port"].as_u64().unwrap_or_default(),
                p["node_id"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// Starts `standin publish` with `args`, resolving names through the cluster DNS; returns the
/// child with its stdout piped.
async fn standin(c: &Cluster, topic: &str, ledger: &PathBuf, args: &[&str]) -> Child {
    let resolv = pod_resolv_conf(c).await;
    let mut cmd = in_pod_dns(&resolv, &kodo_standin());
    cmd.arg("publish")
        .args(["-lookupd", &lookupd(c).await, "-topic", topic, "-ledger"])
        .arg(ledger)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd.spawn().expect("start the Kodo stand-in")
}

/// The operator takes a short Kodo grace (test clusters only, docs/kodo.md), the brokers roll
/// to what the profile needs while it is still off (the recommended first change), and the
/// verification channel exists on every broker before anything is published.
pub async fn the_brokers_take_kodo_sized_messages_before_the_profile(c: &Cluster) {
    kubectl_ok(
        &c.kc,
        &[
            "-n",
            NS,
            "set",
            "env",
            "deployment/rustqueue-operator",
            &format!("RUSTQUEUE_OPERATOR_KODO_MAX_GRACE_SECONDS={GRACE}"),
        ],
    );
    kubectl_ok(
        &c.kc,
        &[
            "-n",
            NS,
            "rollout",
            "status",
            "deployment/rustqueue-operator",
            "--timeout=180s",
        ],
    );
    c.patch_spec_ok(
        r#"{"minBrokers":3,"maxBrokers":3,"storageFeatureLevel":2,"maxMessageBytes":104857600,
            "connectionDeliveryInflightBytes":134217728,"nodeDeliveryInflightBytes":536870912,
            "bootstrapRetentionSeconds":180,"publishAckMode":"durable","imagePullPolicy":"Never",
            "brokerResources":{"cpuRequest":"1","memoryRequest":"2Gi"}}"#,
    );
    c.ready(3).await;
    let token = c.admin_token().await;
    for b in brokers() {
        let ip = c.pod_ip(&b).await;
        for topic in [TOPIC, LARGE_TOPIC] {
            let url = format!("http://{ip}:4151/channel/create?topic={topic}&channel={CHANNEL}");
            let status = http_post(&url, Some(&token), "").await;
            assert_eq!(status, 200, "{url}");
        }
    }
}

/// A Kodo fleet publishes through `/nodes` (the brokers, in direct mode) while the profile is
/// enabled: Gateways, discovery's atomic switch and the grace come first and the phase names
/// each open fence; the fleet moves onto the three Gateway identities without a gap; only the
/// producer-restart nonce lets the brokers roll and the cluster become Ready.
pub async fn enabling_kodo_keeps_a_kodo_producer_publishing(c: &Cluster) -> Fleet {
    let dir = c.scratch.path();
    let ledger = dir.join("fleet.jsonl");
    let child = standin(
        c,
        TOPIC,
        &ledger,
        &[
            "-n",
            "1000000",
            "-size",
            "16384",
            "-refresh",
            "2s",
            "-interval",
            "100ms",
        ],
    )
    .await;
    let fleet = Fleet::watch(child, ledger);
    fleet
        .wait_acked(20, "the fleet publishing to the brokers")
        .await;

    let enabled = Instant::now();
    c.patch_spec_ok(r#"{"kodoCompatibility":{"enabled":true}}"#);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let rq = c
        .until(
            "WaitingForKodoProducerRestart: every other fence holds",
            LONG * 2,
            |rq| {
                let mut s = seen.lock().unwrap();
                if s.last().map(String::as_str) != Some(rq.phase()) {
                    s.push(rq.phase().to_string());
                }
                rq.phase() == "WaitingForKodoProducerRestart"
            },
        )
        .await;
    eprintln!("phases while enabling: {:?}", seen.lock().unwrap());
    figure(
        "kodo enabled -> Gateways advertised and grace elapsed (grace 20 s)",
        enabled.elapsed().as_secs_f64(),
        "s",
    );
    for cond in [
        "KodoGatewaysReady",
        "KodoGatewaysAdvertised",
        "KodoCutoverReady",
    ] {
        assert!(rq.condition_true(cond), "{cond}: {:?}", rq.condition(cond));
    }
    assert!(
        !rq.is_ready(),
        "Ready before the producer restart: {:?}",
        rq.status()
    );
    let gateway_host = format!("{RQ}-kodo-publish.{NS}.svc");
    let listed = nodes(c).await;
    let ports: Vec<u64> = listed.iter().map(|n| n.1).collect();
    assert!(
        listed.iter().all(|n| n.0 == gateway_host) && ports == [4150, 4152, 4153],
        "/nodes in Kodo mode lists the three Gateway identities: {listed:?}"
    );
    // At its next 2 s /nodes refresh the fleet publishes through the Gateways.
    let moved = fleet
        .wait_moved("the fleet publishing through the Gateways", |n| {
            n.starts_with(&gateway_host)
        })
        .await;
    fleet
        .wait_acked(fleet.acked() + 20, "the fleet publishing after the cutover")
        .await;
    let through = fleet.nodes_since(moved);
    assert!(
        !through.is_empty() && through.iter().all(|n| n.starts_with(&gateway_host)),
        "after /nodes changed the fleet publishes through the Gateways only: {through:?}"
    );

    c.patch_spec_ok(
        r#"{"kodoCompatibility":{"enabled":true,"producerRestartNonce":"restarted-1"}}"#,
    );
    let rq = c.ready(3).await;
    assert!(rq.condition_true("KodoProducerRestartConfirmed"));
    let gap = fleet.max_gap();
    figure(
        "kodo enable: longest gap between the fleet's acks",
        gap.as_secs_f64(),
        "s",
    );
    assert!(
        gap <= MAX_GAP,
        "the fleet stopped for {gap:?} while the profile was enabled"
    );
    fleet
}

/// While 100 MiB - 100 B messages go through the Gateways, the broker taking them is killed:
/// each message is acknowledged (a pre-commit retry on another broker) or reported
/// `E_AMBIGUOUS`, and the cluster comes back Ready.
pub async fn a_broker_killed_mid_publish_keeps_every_acknowledged_kodo_message(
    c: &Cluster,
) -> PathBuf {
    let n = 6;
    let ledger = c.scratch.path().join("large.jsonl");
    let mut child = standin(
        c,
        LARGE_TOPIC,
        &ledger,
        &[
            "-n",
            &n.to_string(),
            "-size",
            &LARGE.to_string(),
            "-refresh",
            "2s",
        ],
    )
    .await;
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let mut out = String::new();
    let mut take = |line: String| {
        eprintln!("large: {line}");
        out.push_str(&line);
        out.push('\n');
    };
    // The first acknowledgement names the broker the Gateway session publishes to (it keeps
    // that broker while it stays in the pool): kill it while the next body is on the wire.
    take(
        lines
            .next()
            .and_then(Result::ok)
            .expect("a first large publish"),
    );
    let per_broker = published_per_broker(c, LARGE_TOPIC).await;
    let victim = per_broker
        .iter()
        .find(|(_, n)| **n > 0)
        .map(|(b, _)| b.clone())
        .unwrap_or_else(|| panic!("no broker took the first large message: {per_broker:?}"));
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    c.pods
        .delete(&victim, &params)
        .await
        .expect("kill a broker");
    eprintln!("killed {victim} (grace 0) after the first large acknowledgement");
    for line in lines.map_while(Result::ok) {
        take(line);
    }
    let status = child.wait().expect("the large stand-in");
    assert!(
        status.success(),
        "the large-message stand-in failed:\n{out}"
    );
    let summary: Value = out
        .lines()
        .find_map(|l| l.strip_prefix("summary "))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| panic!("no summary from the stand-in:\n{out}"));
    eprintln!("large messages with {victim} killed: {summary}");
    let count = |k: &str| summary[k].as_u64().unwrap_or(0);
    assert_eq!(
        count("acknowledged") + count("ambiguous"),
        n,
        "every large message acknowledged or reported ambiguous: {summary}"
    );
    figure(
        "kodo: large messages retried after a broker was killed mid-publish",
        (count("connection_errors") + count("ambiguous_errors")) as f64,
        "failed attempts",
    );
    c.ready(3).await;
    ledger
}

/// `enabled: false` alone is refused with a clear status and changes nothing; with
/// `decommissionConfirmed: true` the brokers and discovery return to direct mode, the fleet
/// follows `/nodes` back to the brokers, and the Gateways go only after that. Then every
/// acknowledged message is consumed through discovery.
pub async fn disabling_kodo_waits_for_confirmation_then_returns_to_the_brokers(
    c: &Cluster,
    fleet: &mut Fleet,
    large: &Path,
) {
    c.patch_spec_ok(r#"{"kodoCompatibility":{"enabled":false}}"#);
    let rq = c
        .until("KodoDecommissionBlocked", LONG, |rq| {
            rq.phase() == "KodoDecommissionBlocked"
        })
        .await;
    let confirmed = rq.condition("KodoDecommissionConfirmed").cloned();
    assert_eq!(
        confirmed.as_ref().map(|c| c["reason"].clone()),
        Some(Value::from("ConfirmationRequired")),
        "{confirmed:?}"
    );
    assert!(rq.condition_true("Degraded"));
    // A hold, not a synchronisation: nothing may change for 10 s while unconfirmed.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let gateways = Api::<StatefulSet>::namespaced(c.client.clone(), NS);
    let replicas = |s: Option<StatefulSet>| s.and_then(|s| s.spec.replicas).unwrap_or(0);
    let gw = format!("{RQ}-kodo-gateway");
    assert_eq!(replicas(gateways.get_opt(&gw).await.unwrap()), 3);
    assert!(
        nodes(c).await.iter().all(|n| n.2 >= 1_000_000),
        "still Kodo mode"
    );

    let confirmed_at = Instant::now();
    c.patch_spec_ok(r#"{"kodoCompatibility":{"enabled":false,"decommissionConfirmed":true}}"#);
    c.ready(3).await;
    figure(
        "kodo decommission confirmed -> Ready in direct mode",
        confirmed_at.elapsed().as_secs_f64(),
        "s",
    );
    let listed = nodes(c).await;
    assert!(
        listed.len() == 3 && listed.iter().all(|n| n.2 < 1_000_000),
        "/nodes lists the brokers again: {listed:?}"
    );
    // Removed, not scaled to 0: the StatefulSet the operator created is deleted too.
    assert!(
        gateways.get_opt(&gw).await.unwrap().is_none(),
        "{gw} still exists after the decommission"
    );
    let services = Api::<Service>::namespaced(c.client.clone(), NS);
    assert!(
        services
            .get_opt(&format!("{RQ}-kodo-publish"))
            .await
            .unwrap()
            .is_none()
    );
    let back = fleet
        .wait_moved("the fleet publishing to the brokers again", |n| {
            !n.contains("kodo-publish")
        })
        .await;
    fleet
        .wait_acked(
            fleet.acked() + 20,
            "the fleet publishing to the brokers again",
        )
        .await;
    let through = fleet.nodes_since(back);
    assert!(
        !through.is_empty() && through.iter().all(|n| !n.contains("kodo-publish")),
        "the fleet follows /nodes back to the brokers: {through:?}"
    );
    let gap = fleet.max_gap();
    figure(
        "kodo enable + disable: longest gap between the fleet's acks",
        gap.as_secs_f64(),
        "s",
    );
    assert!(gap <= MAX_GAP, "the fleet stopped for {gap:?}");
    fleet.stop();
    let fleet_ledger = std::fs::read_to_string(&fleet.ledger).expect("the fleet's ledger");
    let failed: Vec<&str> = fleet_ledger
        .lines()
        .filter(|l| l.contains(r#""acknowledged":"no""#))
        .collect();
    assert!(
        failed.is_empty(),
        "the fleet gave up on messages (every attempt failed): {failed:?}"
    );

    verify(c, TOPIC, &fleet.ledger).await;
    verify(c, LARGE_TOPIC, large).await;
}

/// `standin verify`: consumes `topic` through discovery and checks `ledger` against it (every
/// acknowledged message arrived intact, none missing).
async fn verify(c: &Cluster, topic: &str, ledger: &Path) {
    let resolv = pod_resolv_conf(c).await;
    let mut cmd = in_pod_dns(&resolv, &kodo_standin());
    cmd.arg("verify")
        .args([
            "-lookupd",
            &lookupd(c).await,
            "-topic",
            topic,
            "-channel",
            CHANNEL,
        ])
        .arg("-ledger")
        .arg(ledger)
        .args(["-timeout", "300s"]);
    let out = run(cmd);
    eprintln!("verify {topic}: {}{}", out.stdout, out.stderr);
    assert!(
        out.success,
        "acknowledged Kodo messages missing on {topic}: {}{}",
        out.stdout, out.stderr
    );
}

impl Fleet {
    /// Reads `child`'s `published id=.. acknowledged=yes .. node=<host:port>` lines as they
    /// come, timing each acknowledgement.
    fn watch(mut child: Child, ledger: PathBuf) -> Fleet {
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = Arc::clone(&acks);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !line.contains("acknowledged=yes") {
                    if !line.starts_with("published ") || line.contains("attempts=1 ") {
                        eprintln!("fleet: {line}");
                    }
                    continue;
                }
                if let Some(node) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("node="))
                {
                    sink.lock()
                        .unwrap()
                        .push((Instant::now(), node.to_string()));
                }
            }
        });
        Fleet {
            child,
            acks,
            ledger,
        }
    }
}
