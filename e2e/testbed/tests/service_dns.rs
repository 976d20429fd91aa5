//! Service networking and cluster DNS: a ClusterIP Service routes (HTTP to its ClusterIP reaches
//! a Pod, through kube-proxy's nftables rules) and both it and a headless Service resolve through
//! CoreDNS from inside a Pod, via the `/etc/resolv.conf` the kubelet writes (search paths
//! included).

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, PostParams};
use rustqueue_testbed::testserver;
use serde_json::json;
use support::wait_pod;

const NS: &str = "net";
const LONG: Duration = Duration::from_secs(90);

fn web_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "hostname": name,
            "subdomain": "web-headless",
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "tiny",
                "image": testserver::TINY_IMAGE,
                "args": ["--data-dir", "/tmp/tiny-data"],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "ports": [{"name": "http", "containerPort": testserver::TINY_PORT}],
            }],
        },
    }))
    .unwrap()
}

/// Retries `GET path` on `addr` until the body satisfies `ok`; returns the last body.
async fn eventually(addr: &str, path: &str, what: &str, ok: impl Fn(u16, &str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let last = match support::http("GET", addr, path, b"").await {
            Ok((status, body)) if ok(status, &body) => return body,
            Ok((status, body)) => format!("{status} {body}"),
            Err(e) => e.to_string(),
        };
        assert!(
            start.elapsed() < LONG,
            "{what}: GET http://{addr}{path} never gave the expected answer; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn lines(body: &str) -> BTreeSet<String> {
    body.lines().map(str::to_string).collect()
}

#[test]
fn cluster_ip_and_headless_services_resolve_through_coredns_and_route() {
    support::run(scenario());
}

async fn scenario() {
    let coredns = rustqueue_testbed::network::coredns_path();
    assert!(
        coredns.exists(),
        "CoreDNS not installed at {}: run scripts/deps.sh coredns",
        coredns.display()
    );
    let bed = support::start().await;
    bed.create_namespace(NS).await.unwrap();
    let client = bed.client();
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);

    let web: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": testserver::TINY_PORT}]},
    }))
    .unwrap();
    let web = services.create(&pp, &web).await.unwrap();
    let cluster_ip = web.spec.unwrap().cluster_ip.expect("a ClusterIP");
    let headless: Service = serde_json::from_value(json!({
        "metadata": {"name": "web-headless"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": testserver::TINY_PORT}]},
    }))
    .unwrap();
    services.create(&pp, &headless).await.unwrap();
    for name in ["web-0", "web-1"] {
        pods.create(&pp, &web_pod(name)).await.unwrap();
    }
    let mut ips = Vec::new();
    for name in ["web-0", "web-1"] {
        let p = wait_pod(&pods, name, "Ready", LONG, support::is_ready).await;
        ips.push(support::pod_ip(&p).expect("pod IP"));
    }
    let all_ips: BTreeSet<String> = ips.iter().cloned().collect();

    // Routing: the ClusterIP's port 80 reaches the Pods' 8080 (kube-proxy's DNAT), and both
    // Pods answer in turn.
    let front = format!("{cluster_ip}:80");
    let mut seen = BTreeSet::new();
    let start = Instant::now();
    while seen.len() < 2 {
        let who = eventually(&front, "/whoami", "HTTP through the ClusterIP", |s, _| {
            s == 200
        })
        .await;
        seen.insert(who);
        assert!(
            start.elapsed() < LONG,
            "only {seen:?} answered through {front}"
        );
    }
    assert_eq!(
        seen,
        BTreeSet::from(["web-0".to_string(), "web-1".to_string()])
    );

    // DNS, asked from inside web-0 through its resolv.conf.
    let pod0 = format!("{}:{}", ips[0], testserver::TINY_PORT);
    let want_cluster_ip = BTreeSet::from([cluster_ip.clone()]);
    for name in ["web", "web.net.svc", "web.net.svc.cluster.local"] {
        let body = eventually(&pod0, &format!("/resolve/{name}"), name, |s, b| {
            s == 200 && lines(b) == want_cluster_ip
        })
        .await;
        assert_eq!(lines(&body), want_cluster_ip, "{name}");
    }
    // Headless: the Service name gives every ready Pod, `<hostname>.<subdomain>` one Pod.
    for name in ["web-headless", "web-headless.net.svc"] {
        eventually(&pod0, &format!("/resolve/{name}"), name, |s, b| {
            s == 200 && lines(b) == all_ips
        })
        .await;
    }
    for (i, pod) in ["web-0", "web-1"].iter().enumerate() {
        let name = format!("{pod}.web-headless.net.svc.cluster.local");
        let want = BTreeSet::from([ips[i].clone()]);
        eventually(&pod0, &format!("/resolve/{name}"), &name, |s, b| {
            s == 200 && lines(b) == want
        })
        .await;
    }
    // A name CoreDNS does not know resolves to nothing.
    let (status, body) = support::http("GET", &pod0, "/resolve/nope.net.svc", b"")
        .await
        .unwrap();
    assert_eq!(status, 404, "nope.net.svc resolved: {body}");

    // The kubelet reports its cluster DNS as a real one does, on its API's /configz (the API
    // server's nodes/proxy refuses the testbed's loopback Node address, so ask it directly).
    let configz: serde_json::Value =
        serde_json::from_str(&kubelet_get(&bed, "/configz").await).expect("configz is JSON");
    assert_eq!(
        configz["kubeletconfig"]["clusterDNS"],
        json!([rustqueue_testbed::network::CLUSTER_DNS]),
        "{configz}"
    );
    assert_eq!(configz["kubeletconfig"]["clusterDomain"], "cluster.local");
}

/// `GET path` on the kubelet API (TLS on 127.0.0.1:10250, verified against the testbed's CA);
/// returns the body.
async fn kubelet_get(bed: &rustqueue_testbed::Testbed, path: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = std::fs::read(bed.dir().join("pki/ca.crt")).expect("the testbed's CA");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect("127.0.0.1:10250")
        .await
        .unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS to the kubelet API");
    tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.0 200"), "GET {path}: {text}");
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}
