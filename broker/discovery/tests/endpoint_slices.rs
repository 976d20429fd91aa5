//! The EndpointSlice source against the testbed's real kube-apiserver: slices created, patched
//! and deleted by hand (as the EndpointSlice controller would for the brokers' headless Service)
//! and `/lookup` following them within 5 s: ready and not-ready endpoints are polled,
//! terminating ones are not, a removed slice's brokers leave. Discovery reaches the apiserver
//! through a TCP proxy the test can freeze: a silent apiserver makes it fail closed, and it
//! recovers when the apiserver answers again.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rustqueue_discovery::{Shared, View, watch_endpoint_slices};
use rustqueue_testbed::{Testbed, TestbedOptions};
use serde_json::{Value, json};
use support::{Discovery, FakeBroker, start_discovery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

const NS: &str = "discovery";
const SERVICE: &str = "rq-brokers";
const BOUND: Duration = Duration::from_secs(5);

fn endpoint(ip: &str, ready: bool, terminating: bool) -> Value {
    json!({
        "addresses": [ip],
        "conditions": {"ready": ready, "serving": ready, "terminating": terminating},
    })
}

fn slice(name: &str, port: u16, endpoints: Vec<Value>) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "rustqueue-discovery-test",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "tcp", "port": 4150, "protocol": "TCP"},
                  {"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Copies `r` to `w`, holding every chunk while `frozen` is set.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A TCP proxy to `target` on 127.0.0.1 that goes silent (no error, no close) while the
/// returned flag is set: a partitioned apiserver.
async fn freezable_proxy(target: SocketAddr) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let f = frozen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, f.clone()));
            tokio::spawn(pump(sr, cw, f.clone()));
        }
    });
    (addr, frozen)
}

/// Polls `/v1/health` until it answers `code`; returns how long that took.
async fn wait_health(d: &Discovery, code: u16, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let (c, body) = d.get("/v1/health").await;
        if c == code {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "/v1/health still {c} {body}, want {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn lookup_follows_endpoint_slices() {
    rustqueue_testbed::netns::isolated_runtime()
        .expect("private network namespace for the testbed")
        .block_on(scenario());
}

async fn scenario() {
    let bed = Testbed::start(TestbedOptions::default().nodes(1))
        .await
        .expect("testbed starts");
    bed.create_namespace(NS).await.unwrap();
    let client = bed.client();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);

    // Three brokers on Pod-range addresses, one HTTP port (as in a StatefulSet).
    let b1 = FakeBroker::start("10.244.200.1:0", 1, &["orders"]).await;
    let port = b1.addr.port();
    let _b2 = FakeBroker::start(&format!("10.244.200.2:{port}"), 2, &["orders"]).await;
    let _b3 = FakeBroker::start(&format!("10.244.200.3:{port}"), 3, &["orders", "audit"]).await;

    let (d, frozen) = discovery_through_a_freezable_proxy(&bed).await;

    // No slice yet: the source is fresh (an empty set is a valid answer), the topic unknown.
    let start = std::time::Instant::now();
    while d.get("/v1/health").await.0 != 200 {
        assert!(start.elapsed() < BOUND, "health never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(d.lookup_nodes("orders").await, None);

    // Ready and not-ready endpoints are polled; the terminating one is not.
    let pp = PostParams::default();
    slices
        .create(
            &pp,
            &slice(
                "rq-brokers-a",
                port,
                vec![
                    endpoint("10.244.200.1", true, false),
                    endpoint("10.244.200.2", false, false),
                    endpoint("10.244.200.3", false, true),
                ],
            ),
        )
        .await
        .unwrap();
    let took = d.wait_lookup("orders", Some(vec![1, 2]), BOUND).await;
    eprintln!("slice created -> /lookup after {took:?}");
    assert_eq!(
        d.lookup_nodes("audit").await,
        None,
        "terminating broker polled"
    );

    // Broker 2 starts terminating: it leaves /lookup.
    let patch = Patch::Merge(json!({"endpoints": [
        endpoint("10.244.200.1", true, false),
        endpoint("10.244.200.2", false, true),
        endpoint("10.244.200.3", false, true),
    ]}));
    slices
        .patch("rq-brokers-a", &PatchParams::default(), &patch)
        .await
        .unwrap();
    let took = d.wait_lookup("orders", Some(vec![1]), BOUND).await;
    eprintln!("endpoint terminating -> gone from /lookup after {took:?}");

    // A second slice brings broker 3 (not ready yet: still polled).
    slices
        .create(
            &pp,
            &slice(
                "rq-brokers-b",
                port,
                vec![endpoint("10.244.200.3", false, false)],
            ),
        )
        .await
        .unwrap();
    d.wait_lookup("orders", Some(vec![1, 3]), BOUND).await;
    d.wait_lookup("audit", Some(vec![3]), BOUND).await;

    // Slice a removed: broker 1 leaves.
    slices
        .delete("rq-brokers-a", &DeleteParams::default())
        .await
        .unwrap();
    let took = d.wait_lookup("orders", Some(vec![3]), BOUND).await;
    eprintln!("slice deleted -> gone from /lookup after {took:?}");
    let (code, brokers) = d.get("/v1/brokers").await;
    assert_eq!(code, 200);
    assert_eq!(
        brokers["producers"].as_array().unwrap().len(),
        1,
        "{brokers}"
    );

    other_services_slices_are_ignored(&slices, &d, port).await;

    // The apiserver goes silent: no error arrives, yet the service fails closed (probe 2 s +
    // 1.5 s timeout, then the 5 s staleness bound).
    frozen.store(true, Ordering::SeqCst);
    let took = wait_health(&d, 503, Duration::from_secs(12)).await;
    eprintln!("apiserver silent -> /v1/health 503 after {took:?}");
    let (code, v) = d.get("/lookup?topic=orders").await;
    assert_eq!(
        (code, v["message"].as_str()),
        (503, Some("discovery source is not ready"))
    );
    let (_, h) = d.get("/v1/health").await;
    assert!(
        h["reason"].as_str().unwrap().contains("EndpointSlice"),
        "{h}"
    );
    // It answers again: lookups come back.
    frozen.store(false, Ordering::SeqCst);
    let took = wait_health(&d, 200, Duration::from_secs(10)).await;
    eprintln!("apiserver back -> /v1/health 200 after {took:?}");
    d.wait_lookup("orders", Some(vec![3]), BOUND).await;
    drop(d);
    bed.shutdown();
}

/// A discovery service whose EndpointSlice watch goes through a proxy that can be frozen.
async fn discovery_through_a_freezable_proxy(bed: &Testbed) -> (Discovery, Arc<AtomicBool>) {
    // Discovery's own client goes through the freezable proxy.
    let (proxy, frozen) = freezable_proxy(bed.apiserver_addr()).await;
    rustqueue_api::http_client::install_default_provider();
    let kc = kube::config::Kubeconfig::read_from(bed.kubeconfig_path()).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    cfg.cluster_url = format!("https://{proxy}").parse().unwrap();
    let proxied: Api<EndpointSlice> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), NS);

    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(View {
        problem: Some("EndpointSlices not listed yet".into()),
        ..Default::default()
    });
    let watcher = tokio::spawn(watch_endpoint_slices(
        proxied,
        SERVICE.into(),
        4151,
        tx,
        shared.clone(),
    ));
    let d = start_discovery(rx, shared, vec![watcher]).await;
    (d, frozen)
}

/// A slice of another Service never brings its endpoints into the lookup.
async fn other_services_slices_are_ignored(slices: &Api<EndpointSlice>, d: &Discovery, port: u16) {
    let pp = PostParams::default();
    // A slice of another Service is ignored.
    let mut other = slice("other-a", port, vec![endpoint("10.244.200.1", true, false)]);
    other
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/service-name".into(), "other".into());
    slices.create(&pp, &other).await.unwrap();
    // The watch delivers events in order, so a later change to the brokers' own slices is a
    // barrier: once it shows, the other slice has been seen (and must have been ignored).
    // Broker 2 joins through a third slice and leaves with it; broker 1 must never show.
    slices
        .create(
            &pp,
            &slice(
                "rq-brokers-c",
                port,
                vec![endpoint("10.244.200.2", true, false)],
            ),
        )
        .await
        .unwrap();
    d.wait_lookup("orders", Some(vec![2, 3]), BOUND).await;
    slices
        .delete("rq-brokers-c", &DeleteParams::default())
        .await
        .unwrap();
    d.wait_lookup("orders", Some(vec![3]), BOUND).await;
}
