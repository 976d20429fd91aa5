//! The discovery client against two fake replicas over real sockets: pools follow only an
//! agreed revision, disagreement empties them after the 5 s bound, a silent replica stops
//! counting after 5 s.

mod support;

use std::time::{Duration, Instant};

use support::*;

async fn listed(ids: &[u32]) -> Vec<Listed> {
    let mut out = Vec::new();
    for id in ids {
        out.push(Listed {
            node_id: *id,
            tcp_port: tcp_broker(*id).await,
            http_port: dead_port().await,
        });
    }
    out
}

#[tokio::test]
async fn replicas_must_agree_and_disagreement_empties_the_pools_after_five_seconds() {
    let brokers = listed(&[1, 2]).await;
    let a = FakeDiscovery::start(brokers.clone()).await;
    let b = FakeDiscovery::start(brokers.clone()).await;
    let gw = gateway(&[&a, &b], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    // Replica a moves on (broker 2 gone), b does not: the agreed snapshot is kept ≤ 5 s,
    // then the pools are emptied (never a list that only one replica gives).
    a.set(vec![brokers[0].clone()]);
    let changed = Instant::now();
    wait_until(Duration::from_secs(9), || {
        let n = gw.observe().pools().publish_count();
        assert!(
            n == 2 || n == 0,
            "{n} brokers: kept while within the bound, then none"
        );
        n == 0
    })
    .await;
    let emptied = changed.elapsed();
    // The last agreeing poll came just before the change (we saw its result within 20 ms).
    assert!(
        emptied >= Duration::from_millis(4900),
        "emptied after {emptied:?}"
    );
    let mut s = tokio::net::TcpStream::connect(gw.tcp_address)
        .await
        .unwrap();
    let mut buf = [0u8; 8];
    let n = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
    assert!(matches!(n, Ok(0) | Err(_)), "no broker: closed at once");
    // b agrees again (same content, so the same revision as a's): back to one broker.
    let (revision, publishers) = {
        let sa = a.state.lock().unwrap();
        (sa.revision, sa.publishers.clone())
    };
    {
        let mut sb = b.state.lock().unwrap();
        sb.revision = revision;
        sb.publishers = publishers;
    }
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 1
    })
    .await;
    let (_, node) = tunnel(&gw).await;
    assert_eq!(node, "node-1");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_silent_replica_stops_counting_after_five_seconds() {
    let brokers = listed(&[1, 2]).await;
    let a = FakeDiscovery::start(brokers.clone()).await;
    let b = FakeDiscovery::start(brokers.clone()).await;
    let gw = gateway(&[&a, &b], &[]).await;
    wait_until(Duration::from_secs(5), || {
        gw.observe().pools().publish_count() == 2
    })
    .await;
    b.stop();
    a.set(vec![brokers[1].clone()]);
    // Until b's last answer is 5 s old, a and b disagree; then a alone decides.
    wait_until(Duration::from_secs(9), || {
        gw.observe()
            .pools()
            .actives()
            .iter()
            .map(|(id, _)| *id)
            .eq([2])
    })
    .await;
    let (_, node) = tunnel(&gw).await;
    assert_eq!(node, "node-2");
    gw.shutdown().await;
}
