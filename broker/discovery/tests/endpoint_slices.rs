//! The EndpointSlice source against the testbed's real kube-apiserver: slices created, patched
//! and deleted by hand (as the EndpointSlice controller would for the brokers' headless Service)
//! and `/lookup` following them within 5 s: ready and not-ready endpoints are polled,
//! terminating ones are not, a removed slice's brokers leave.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use rustqueue_discovery::{Shared, source};
use rustqueue_testbed::{Testbed, TestbedOptions};
use serde_json::{Value, json};
use support::{FakeBroker, start_discovery};
use tokio::sync::watch;

const NS: &str = "discovery";
const SERVICE: &str = "rq-brokers";
const BOUND: Duration = Duration::from_secs(5);

fn endpoint(ip: &str, ready: bool, terminating: bool) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": terminating}})
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

    let shared = Arc::new(Shared::default());
    let (tx, rx) = watch::channel(source::View {
        problem: Some("EndpointSlices not listed yet".into()),
        ..Default::default()
    });
    let watcher = tokio::spawn(source::watch_endpoint_slices(
        slices.clone(),
        SERVICE.into(),
        4151,
        tx,
        shared.clone(),
    ));
    let d = start_discovery(rx, shared, vec![watcher]).await;

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

    // A slice of another Service is ignored.
    let mut other = slice("other-a", port, vec![endpoint("10.244.200.1", true, false)]);
    other
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/service-name".into(), "other".into());
    slices.create(&pp, &other).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(d.lookup_nodes("orders").await, Some(vec![3]));
    drop(d);
    bed.shutdown();
}
