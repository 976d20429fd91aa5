//! `pods/portforward` through the real API server to the process kubelet, with the client
//! tools use outside a cluster (kube-rs `Api::portforward`, WebSocket channel protocol): an
//! HTTP exchange with the tiny server over the forwarded stream, two forwards at once, a port
//! nothing listens on reported on the error channel, and an unknown Pod refused.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use rustqueue_testbed::testserver;
use serde_json::json;
use support::wait_pod;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "pf";
const LONG: Duration = Duration::from_secs(90);

fn tiny_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "tiny",
                "image": testserver::TINY_IMAGE,
                "args": ["--data-dir", "/tmp/tiny-pf-data"],
                // Ready once it answers: without a probe a Pod is Ready as soon as its process
                // starts, before the server listens, and a forward then finds nothing there.
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": testserver::TINY_PORT}, "periodSeconds": 1},
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
            }],
        },
    }))
    .unwrap()
}

/// `GET path` over one forwarded stream; returns everything the server sent.
async fn get_over_forward(pods: &Api<Pod>, pod: &str, path: &str) -> String {
    let mut pf = pods
        .portforward(pod, &[testserver::TINY_PORT])
        .await
        .expect("the API server upgrades pods/portforward");
    let mut s = pf.take_stream(testserver::TINY_PORT).expect("a stream");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {pod}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(LONG, s.read_to_end(&mut out))
        .await
        .expect("the forwarded connection ends after the response")
        .unwrap();
    drop(s);
    pf.abort();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn pod_ports_forward_through_the_api_server_over_websockets() {
    support::run(scenario());
}

async fn scenario() {
    let bed = support::start().await;
    bed.create_namespace(NS).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(bed.client(), NS);
    for name in ["web-0", "web-1"] {
        pods.create(&PostParams::default(), &tiny_pod(name))
            .await
            .unwrap();
    }
    for name in ["web-0", "web-1"] {
        wait_pod(&pods, name, "Ready", LONG, support::is_ready).await;
    }

    let (a, b) = tokio::join!(
        get_over_forward(&pods, "web-0", "/whoami"),
        get_over_forward(&pods, "web-1", "/whoami"),
    );
    assert!(a.starts_with("HTTP/1.1 200"), "web-0 answered {a:?}");
    assert!(a.ends_with("web-0"), "web-0 answered {a:?}");
    assert!(b.ends_with("web-1"), "web-1 answered {b:?}");

    // Two ports in one request: one answers, the other (nothing listens) reports on its
    // error channel, as the upstream kubelet does.
    let mut pf = pods
        .portforward("web-0", &[testserver::TINY_PORT, 1])
        .await
        .unwrap();
    let error = pf.take_error(1).expect("an error channel for port 1");
    let error = tokio::time::timeout(LONG, error)
        .await
        .expect("port 1 reports its error")
        .expect("an error message");
    assert!(
        error.contains("error forwarding port 1 to pod web-0"),
        "{error}"
    );
    let mut s = pf.take_stream(testserver::TINY_PORT).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(LONG, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&out).ends_with("ok"), "{out:?}");
    pf.abort();

    let err = pods
        .portforward("nope", &[testserver::TINY_PORT])
        .await
        .map(|_| ())
        .expect_err("an unknown Pod");
    assert!(err.to_string().contains("not found"), "{err}");
}
