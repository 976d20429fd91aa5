//! The Kodo gateway's `/stats` shards against real `rustqueued` brokers: shard k sums the
//! brokers whose `(node_id - 1) mod 3 = k`, exactly as their own `/stats` say; a broker
//! that cannot answer makes its shard 503.

mod kodo_support;
mod support;

use std::time::Duration;

use kodo_support::*;
use serde_json::Value;

async fn shard(gw: &rustqueue_gateway::KodoGateway, k: usize, query: &str) -> reqwest::Response {
    rustqueue_api::http_client::get(format!("http://{}/stats{query}", gw.shard_addresses[k]))
        .await
        .unwrap()
}

fn channel_count(stats: &Value, topic: &str, channel: &str) -> Option<u64> {
    let t = stats["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)?;
    let c = t["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)?;
    c["message_count"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_sums_its_brokers_own_stats() {
    // Node ids 1 and 4 are shard 0, node 2 is shard 1, shard 2 has none.
    let mut brokers = Vec::new();
    for id in [1, 2, 4] {
        brokers.push(Broker::start(id).await);
    }
    for (b, n) in brokers.iter().zip([2usize, 3, 5]) {
        let r = b
            .post("/channel/create?topic=metrics&channel=agg", "")
            .await;
        assert!(r.status().is_success());
        for i in 0..n {
            let r = b.post("/pub?topic=metrics", format!("m{i}")).await;
            assert!(r.status().is_success());
        }
    }
    let d = FakeDiscovery::start(brokers.iter().map(Broker::listed).collect()).await;
    let gw = kodo_gateway(&d, &[]).await;
    wait_until(Duration::from_secs(10), || {
        gw.observe().pools().broker_count() == 3
    })
    .await;
    let own: Vec<Value> = futures::future::join_all(brokers.iter().map(Broker::stats)).await;
    let s0: Value = shard(&gw, 0, "?format=text").await.json().await.unwrap();
    assert_eq!(
        topic_count(&s0, "metrics"),
        topic_count(&own[0], "metrics") + topic_count(&own[2], "metrics")
    );
    assert_eq!(topic_count(&s0, "metrics"), 7);
    assert_eq!(channel_count(&s0, "metrics", "agg"), Some(7));
    let s1: Value = shard(&gw, 1, "").await.json().await.unwrap();
    assert_eq!(topic_count(&s1, "metrics"), topic_count(&own[1], "metrics"));
    assert_eq!(topic_count(&s1, "metrics"), 3);
    let s2: Value = shard(&gw, 2, "").await.json().await.unwrap();
    assert_eq!(s2["topics"], serde_json::json!([]));
    let filtered: Value = shard(&gw, 0, "?topic=other").await.json().await.unwrap();
    assert_eq!(
        topic_count(&filtered, "metrics"),
        0,
        "the topic filter reaches the brokers"
    );
    // A broker of shard 0 that cannot answer makes shard 0 unavailable, not partial.
    brokers[2].kill();
    assert_eq!(shard(&gw, 0, "").await.status(), 503);
    assert_eq!(shard(&gw, 1, "").await.status(), 200);
    // A broker that accepts but never answers: the whole call gives up after 10 s.
    brokers[1].pause().await;
    let started = std::time::Instant::now();
    let r = shard(&gw, 1, "").await;
    let waited = started.elapsed();
    assert_eq!(r.status(), 504);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["message"], "E_STATS_TIMEOUT");
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(14),
        "{waited:?}"
    );
    gw.shutdown().await;
}
