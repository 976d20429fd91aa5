//! The poller against fake brokers on loopback (static mode): heads are polled, the full
//! registry is fetched only when the revision changes, readiness flags move brokers in and out
//! of the lists without a fetch, a broker that stops leaves the lookup, and with every broker
//! gone the service fails closed within the staleness bound.

mod support;

use std::sync::Arc;
use std::time::Duration;

use rustqueue_discovery::PollerConfig;
use rustqueue_discovery::{Shared, static_view};
use support::{FakeBroker, start_discovery, start_discovery_with, wait_until};
use tokio::sync::watch;

/// Two head polls at the 2 s poll period, with half a second to spare.
const TWO_POLLS: Duration = Duration::from_millis(4500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_mode_polls_heads_and_fetches_on_revision_change() {
    let a = FakeBroker::start("127.0.0.1:0", 1, &["orders"]).await;
    let b = FakeBroker::start("127.0.0.1:0", 2, &["orders", "audit"]).await;
    let (_tx, rx) = watch::channel(static_view(&[a.addr.to_string(), b.addr.to_string()]));
    let d = start_discovery(rx, Arc::new(Shared::default()), vec![]).await;
    let bound = Duration::from_secs(5);

    d.wait_lookup("orders", Some(vec![1, 2]), bound).await;
    let (code, v) = d.get("/channels?topic=audit").await;
    assert_eq!(
        (code, v["channels"].clone()),
        (200, serde_json::json!(["c"]))
    );
    assert_eq!(
        d.get("/topics").await.1["topics"],
        serde_json::json!(["audit", "orders"])
    );
    assert_eq!(
        d.get("/v1/brokers").await.1["producers"][0]["version"],
        "9.9.9"
    );

    // Steady state: heads keep coming (two polls, 2 s apart), no full fetch. A poll fetches
    // right after its head, so once the second head is in, the first poll is complete.
    let (fa, ha) = (a.fetches(), a.heads());
    wait_until(TWO_POLLS, "two more head polls of broker a", async || {
        a.heads() >= ha + 2
    })
    .await;
    assert_eq!(
        a.fetches(),
        fa,
        "a full registry fetch without a revision change"
    );

    // A new topic: the revision changes, one fetch, /lookup follows.
    a.set_topics(&["orders", "fresh"]);
    let took = d.wait_lookup("fresh", Some(vec![1]), bound).await;
    assert_eq!(a.fetches(), fa + 1);
    eprintln!("new topic visible after {took:?}");

    // Not consume-ready: out of /lookup (topic still registered), no fetch.
    a.state.lock().unwrap().consume_ready = false;
    d.wait_lookup("fresh", Some(vec![]), bound).await;
    assert_eq!(a.fetches(), fa + 1);
    // Not publish-ready: out of /v1/publishers, and the revision moves.
    let (_, before) = d.get("/v1/publishers/head").await;
    b.state.lock().unwrap().publish_ready = false;
    let start = std::time::Instant::now();
    loop {
        let (_, now) = d.get("/v1/publishers/head").await;
        if now["broker_count"] == 1 {
            assert_ne!(now["revision"], before["revision"]);
            break;
        }
        assert!(
            start.elapsed() < bound,
            "publisher list never shrank: {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A broker stops: it leaves the lookup well within the bound.
    b.stop();
    let took = d.wait_lookup("audit", None, bound).await;
    eprintln!("stopped broker left /lookup after {took:?}");

    // Every broker gone: fail closed within the staleness bound (+ one poll period).
    a.stop();
    let start = std::time::Instant::now();
    loop {
        let (code, v) = d.get("/lookup?topic=orders").await;
        if code == 503 {
            assert_eq!(v["message"], "discovery source is not ready");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "still serving: {code} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, h) = d.get("/v1/health").await;
    assert_eq!(code, 503);
    assert_eq!(h["status"], "source-unavailable");
    assert!(h["reason"].as_str().unwrap().contains("connect"), "{h}");
    assert_eq!(d.get("/ping").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_on_the_revision() {
    let a = FakeBroker::start("127.0.0.1:0", 1, &["t"]).await;
    let b = FakeBroker::start("127.0.0.1:0", 2, &["t"]).await;
    let v1 = static_view(&[a.addr.to_string(), b.addr.to_string()]);
    let v2 = static_view(&[b.addr.to_string(), a.addr.to_string()]);
    let (_t1, r1) = watch::channel(v1);
    let (_t2, r2) = watch::channel(v2);
    let d1 = start_discovery(r1, Arc::new(Shared::default()), vec![]).await;
    let d2 = start_discovery(r2, Arc::new(Shared::default()), vec![]).await;
    d1.wait_lookup("t", Some(vec![1, 2]), Duration::from_secs(5))
        .await;
    d2.wait_lookup("t", Some(vec![1, 2]), Duration::from_secs(5))
        .await;
    let (_, p1) = d1.get("/v1/publishers").await;
    let (_, p2) = d2.get("/v1/publishers").await;
    assert_eq!(p1, p2);
    assert_eq!(d1.get("/v1/brokers").await.1, d2.get("/v1/brokers").await.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_token_is_sent_and_re_read() {
    let a = FakeBroker::start("127.0.0.1:0", 1, &["t"]).await;
    a.state.lock().unwrap().token = Some("secret-1".into());
    let dir = std::env::temp_dir().join(format!("rq-discovery-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("registry-token");
    std::fs::write(&file, "secret-1\n").unwrap();
    let (_tx, rx) = watch::channel(static_view(&[a.addr.to_string()]));
    let cfg = PollerConfig {
        registry_token_file: Some(file.clone()),
    };
    let d = start_discovery_with(rx, Arc::new(Shared::default()), vec![], cfg).await;
    d.wait_lookup("t", Some(vec![1]), Duration::from_secs(5))
        .await;

    // The broker's token rotates; the file follows: still served, no restart. From now on
    // the broker counts a head only when it carries the new token.
    let heads = {
        let mut s = a.state.lock().unwrap();
        s.token = Some("secret-2".into());
        s.heads
    };
    std::fs::write(&file, "secret-2").unwrap();
    wait_until(
        Duration::from_secs(10),
        "a head poll with the new token",
        async || a.heads() > heads,
    )
    .await;
    assert_eq!(d.lookup_nodes("t").await, Some(vec![1]));

    // A token the broker refuses: every poll fails, so the service fails closed.
    std::fs::write(&file, "wrong").unwrap();
    let start = std::time::Instant::now();
    loop {
        let (code, h) = d.get("/v1/health").await;
        if code == 503 {
            assert!(h["reason"].as_str().unwrap().contains("401"), "{h}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still healthy: {h}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An empty token file is refused outright (the next refresh says so, not a 401).
    std::fs::write(&file, "  ").unwrap();
    wait_until(
        Duration::from_secs(10),
        "/v1/health to name the empty token file",
        async || {
            let (_, h) = d.get("/v1/health").await;
            h["reason"].as_str().is_some_and(|r| r.contains("empty"))
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
