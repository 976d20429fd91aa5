//! TCP tunnels over real sockets: least-active spread, rotation by age and by discovery,
//! the connection cap, and what a producer sees with no broker.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::*;
use tokio::io::AsyncReadExt;

async fn brokers(n: u32) -> Vec<Listed> {
    let mut out = Vec::new();
    for id in 1..=n {
        out.push(Listed {
            node_id: id,
            tcp_port: tcp_broker(id).await,
            http_port: dead_port().await,
        });
    }
    out
}

async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 64];
    loop {
        match tokio::time::timeout(within, s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn n_producer_connections_spread_over_n_brokers_before_any_is_reused() {
    let d = FakeDiscovery::start(brokers(3).await).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 3
    })
    .await;
    let mut open = Vec::new();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for round in 1..=3 {
        for _ in 0..3 {
            let (s, node) = tunnel(&gw).await;
            *per_node.entry(node).or_default() += 1;
            open.push(s);
        }
        assert_eq!(per_node.len(), 3, "{per_node:?}");
        assert!(
            per_node.values().all(|n| *n == round),
            "round {round}: {per_node:?}"
        );
    }
    for (i, s) in open.iter_mut().enumerate() {
        assert!(
            echoes(s, &format!("payload {i}")).await,
            "tunnel {i} carries bytes"
        );
    }
    assert_eq!(metric(&gw, "rustqueue_gateway_tcp_active_tunnels"), 9.0);
    drop(open);
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().actives().iter().all(|(_, a)| *a == 0)
    })
    .await;
    gw.shutdown().await;
}

#[tokio::test]
async fn a_tunnel_is_rotated_after_its_jittered_age() {
    let d = FakeDiscovery::start(brokers(1).await).await;
    let gw = gateway(&[&d], &["--tcp-max-connection-age-seconds", "1"]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let started = Instant::now();
    let (mut s, _) = tunnel(&gw).await;
    assert!(echoes(&mut s, "still open").await);
    assert!(
        closed_within(&mut s, Duration::from_secs(3)).await,
        "rotated"
    );
    let age = started.elapsed();
    // Base 1 s with ±10% jitter, never below 1 s: closed between 1.0 and 1.1 s (+ slack for
    // a loaded CI machine; the default age would be 270 s).
    assert!(
        age >= Duration::from_millis(990) && age < Duration::from_millis(2500),
        "{age:?}"
    );
    assert_eq!(
        metric(&gw, "rustqueue_gateway_tcp_connection_rotations_total"),
        1.0
    );
    // The producer reconnects and is placed again.
    let (mut again, _) = tunnel(&gw).await;
    assert!(echoes(&mut again, "reconnected").await);
    drop(again);
    gw.shutdown().await;
}

#[tokio::test]
async fn zero_age_never_rotates() {
    let d = FakeDiscovery::start(brokers(1).await).await;
    let gw = gateway(&[&d], &["--tcp-max-connection-age-seconds", "0"]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let (mut s, _) = tunnel(&gw).await;
    assert!(!closed_within(&mut s, Duration::from_millis(1500)).await);
    assert!(echoes(&mut s, "open").await);
    drop(s);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_broker_leaving_discovery_closes_only_its_tunnels() {
    let listed = brokers(2).await;
    let d = FakeDiscovery::start(listed.clone()).await;
    let gw = gateway(&[&d], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    let (a, node_a) = tunnel(&gw).await;
    let (b, node_b) = tunnel(&gw).await;
    assert_ne!(node_a, node_b);
    let (mut leaving, mut staying) = if node_a == "node-1" { (a, b) } else { (b, a) };
    d.set(vec![listed[1].clone()]);
    assert!(
        closed_within(&mut leaving, Duration::from_secs(5)).await,
        "node 1's tunnel closed"
    );
    assert!(echoes(&mut staying, "node 2 still serves").await);
    assert_eq!(
        metric(&gw, "rustqueue_gateway_tcp_connection_rotations_total"),
        1.0
    );
    let (_, next) = tunnel(&gw).await;
    assert_eq!(next, "node-2");
    drop((leaving, staying));
    gw.shutdown().await;
}

#[tokio::test]
async fn a_flood_above_the_cap_is_refused_while_existing_tunnels_keep_working() {
    let d = FakeDiscovery::start(brokers(2).await).await;
    let gw = gateway(&[&d], &["--max-connections", "5"]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(tunnel(&gw).await.0);
    }
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(
            tokio::net::TcpStream::connect(gw.tcp_address)
                .await
                .unwrap(),
        );
    }
    for (i, s) in flood.iter_mut().enumerate() {
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "flood connection {i} was not closed at once: {n:?}"
        );
    }
    for (i, s) in held.iter_mut().enumerate() {
        assert!(
            echoes(s, &format!("held {i}")).await,
            "held tunnel {i} harmed by the flood"
        );
    }
    assert_eq!(
        metric(&gw, "rustqueue_gateway_tcp_refused_connections_total"),
        200.0
    );
    // A slot freed is a slot usable again.
    drop(held.pop());
    wait_until(Duration::from_secs(2), || {
        metric(&gw, "rustqueue_gateway_tcp_active_tunnels") == 4.0
    })
    .await;
    let (mut s, _) = tunnel(&gw).await;
    assert!(echoes(&mut s, "after").await);
    drop((held, flood, s));
    gw.shutdown().await;
}

#[tokio::test]
async fn with_no_publish_ready_broker_a_connection_is_closed_at_once() {
    let d = FakeDiscovery::start(vec![]).await;
    let gw = gateway(&[&d], &[]).await;
    let mut s = tokio::net::TcpStream::connect(gw.tcp_address)
        .await
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(1)).await);
    assert_eq!(
        metric(&gw, "rustqueue_gateway_tcp_refused_connections_total"),
        1.0
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn shutdown_lets_open_tunnels_finish_then_cuts_them_after_the_grace() {
    let d = FakeDiscovery::start(brokers(1).await).await;
    let gw = gateway(&[&d], &["--shutdown-grace-seconds", "1"]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let (mut s, _) = tunnel(&gw).await;
    let tcp = gw.tcp_address;
    let started = Instant::now();
    let stopping = tokio::spawn(gw.shutdown());
    // Shutdown has begun once the listener is closed.
    wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(tcp).is_err()
    })
    .await;
    assert!(
        echoes(&mut s, "during the grace").await,
        "open tunnel served during the grace"
    );
    stopping.await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(
        closed_within(&mut s, Duration::from_secs(1)).await,
        "cut after the grace"
    );
}
