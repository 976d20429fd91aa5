//! The snapshot against three real brokers with management off: complete, topics aggregated
//! over their owners, rates that integrate back to exactly the messages published and
//! finished, and no `body` key anywhere.

mod support;

use reqwest::StatusCode;
use serde_json::Value;
use support::{Cluster, Consumer, Served, body_path, wait_for_or};

/// The integral of a rate over the trend: each rate times the time since the previous
/// sample with a later timestamp (a sample in the same millisecond carries rate 0).
fn total(s: &Value, f: impl Fn(&Value) -> f64) -> f64 {
    let h = s["history"].as_array().unwrap();
    let mut prev = h[0]["at_ms"].as_u64().unwrap();
    let mut sum = 0.0;
    for x in &h[1..] {
        let at = x["at_ms"].as_u64().unwrap();
        if at > prev {
            sum += f(x) * (at - prev) as f64 / 1000.0;
            prev = at;
        }
    }
    sum
}

/// The sum over the snapshot's brokers of the observation field at `path`.
fn per_broker(s: &Value, path: &[&str]) -> u64 {
    s["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            path.iter()
                .fold(&b["observation"], |v, k| &v[*k])
                .as_u64()
                .unwrap()
        })
        .sum()
}

/// 20 messages published to each broker's `orders` (a collection after every 15), 10 of
/// each consumed and finished on `billing` by a consumer that then closes cleanly; returns
/// how many were published.
async fn load(cluster: &Cluster, served: &Served) -> u64 {
    let mut consumers = Vec::new();
    for b in &cluster.brokers {
        consumers.push(Consumer::subscribe(b.tcp, "orders", "billing", 100).await);
    }
    let mut published = 0u64;
    for round in 0..4 {
        for b in &cluster.brokers {
            for i in 0..5 {
                let status = b.publish("orders", &format!("m{round}-{i}")).await;
                assert_eq!(status, StatusCode::OK);
                published += 1;
            }
        }
        served.collect().await;
    }
    for mut c in consumers {
        c.finish(10).await;
        c.close().await;
    }
    published
}

async fn status_of(url: String) -> StatusCode {
    rustqueue_api::http_client::get(url).await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_broker_snapshot_is_complete_and_its_rates_match_the_counters() {
    let cluster = Cluster::start(3, false).await;
    let served = Served::start(&cluster, false).await;
    let (status, v) = served.snapshot().await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("collecting"))
    );
    assert_eq!(
        status_of(format!("{}/readyz", served.url)).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    served.collect().await;
    let (status, s) = served.snapshot().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s["complete"], true, "{}", s["errors"]);
    assert_eq!(s["brokers"].as_array().unwrap().len(), 3);
    assert_eq!(s["management"]["enabled"], false);
    assert_eq!(
        status_of(format!("{}/readyz", served.url)).await,
        StatusCode::OK
    );

    let published = load(&cluster, &served).await;
    // Collect until the counters (head, every poll) and the catalog (full observation, at
    // least every second here) the console saw both show the load.
    // What the last poll saw, for the timeout's message.
    let seen = std::sync::Mutex::new(String::new());
    let s = wait_for_or("the finishes to reach the snapshot", 20, &seen, || async {
        served.collect().await;
        let (_, s) = served.snapshot().await;
        let finished = per_broker(&s, &["runtime", "finished_messages_total"]);
        let channel = &s["topics"][0]["channels"][0];
        let (depth, in_flight) = (channel["depth"].as_u64(), channel["in_flight"].as_u64());
        let each: Vec<_> = s["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    &b["name"],
                    &b["observation"]["runtime"]["finished_messages_total"],
                )
            })
            .collect();
        *seen.lock().unwrap() = format!(
            "finished {finished} {each:?}, channel depth {depth:?} and in flight {in_flight:?}"
        );
        (finished == 30 && depth? + in_flight? == 30).then_some(s)
    })
    .await;
    assert_eq!(s["complete"], true, "{}", s["errors"]);

    let delivered = per_broker(&s, &["runtime", "delivered_messages_total"]);
    assert!(delivered >= 30);
    for (key, want) in [
        ("publish_per_second", published),
        ("finish_per_second", 30),
        ("deliver_per_second", delivered),
    ] {
        let got = total(&s, |x| x[key].as_f64().unwrap());
        assert!(
            (got - want as f64).abs() < 0.01,
            "{key} integrates to {got}, counters say {want}"
        );
    }
    // The console's per-broker counters are the brokers' own.
    for b in &cluster.brokers {
        let head = b.head().await;
        let brokers = s["brokers"].as_array().unwrap();
        let view = brokers
            .iter()
            .find(|x| x["name"] == b.name.as_str())
            .unwrap();
        let key = "publish_messages_total";
        assert_eq!(
            view["observation"]["runtime"][key], head["runtime"][key],
            "{}",
            b.name
        );
    }

    let orders = &s["topics"][0];
    assert_eq!(orders["name"], "orders");
    assert_eq!(orders["owners"].as_array().unwrap().len(), 3);
    assert_eq!(orders["channels"][0]["name"], "billing");
    let stored = per_broker(&s, &["queue", "aggregates", "stored_messages"]);
    assert!(stored > 0);
    assert_eq!(s["summary"]["stored_messages"].as_u64().unwrap(), stored);
    assert_eq!(body_path(&s, "$"), None, "no message body in the snapshot");
    assert!(
        s["anomalies"].as_array().unwrap().is_empty(),
        "{}",
        s["anomalies"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_makes_the_snapshot_partial_with_a_critical_anomaly() {
    let mut cluster = Cluster::start(2, false).await;
    let served = Served::start(&cluster, false).await;
    served.collect().await;
    assert_eq!(served.snapshot().await.1["complete"], true);
    drop(cluster.brokers.pop());
    served.collect().await;
    let (_, s) = served.snapshot().await;
    assert_eq!(s["complete"], false);
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("broker q-1:")),
        "{errors:?}"
    );
    let a = &s["anomalies"][0];
    assert_eq!(
        (a["severity"].as_str(), a["code"].as_str()),
        (Some("critical"), Some("broker_unreachable"))
    );
    let down = s["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "q-1")
        .unwrap();
    assert!(down["error"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_routes_are_absent_when_management_is_off() {
    let cluster = Cluster::start(1, false).await;
    let served = Served::start(&cluster, false).await;
    let m: Value = rustqueue_api::http_client::get(format!("{}/api/v1/management", served.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["enabled"], false);
    assert_eq!(m["confirmation"], "ns/q");
    let (status, _) = served
        .browser()
        .post(
            "/api/v1/management/unlock",
            &serde_json::json!({"confirmation": "ns/q"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let page = rustqueue_api::http_client::get(format!("{}/topics/orders", served.url))
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("not built"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_pages_are_served_with_a_fallback_to_index_html() {
    let cluster = Cluster::start(1, false).await;
    let pages = tempfile::tempdir().unwrap();
    std::fs::write(pages.path().join("index.html"), "<p>console</p>").unwrap();
    std::fs::write(pages.path().join("app.js"), "run()").unwrap();
    let mut config = cluster.config(false);
    config.static_dir = pages.path().to_path_buf();
    let served = Served::start_with(&cluster, config).await;
    let get = |path: &str| rustqueue_api::http_client::get(format!("{}{path}", served.url));
    let js = get("/app.js").await.unwrap();
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(js.text().await.unwrap(), "run()");
    assert_eq!(
        get("/brokers").await.unwrap().text().await.unwrap(),
        "<p>console</p>"
    );
    assert_eq!(
        get("/../../etc/passwd")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "<p>console</p>"
    );
    let api = get("/api/v1/nothing").await.unwrap();
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
    let health: Value = get("/healthz").await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_token_is_read_again_for_every_call() {
    let cluster = Cluster::start(1, false).await;
    let served = Served::start(&cluster, false).await;
    served.collect().await;
    assert_eq!(served.snapshot().await.1["complete"], true);
    cluster.write_token("");
    served.collect().await;
    let (_, s) = served.snapshot().await;
    assert_eq!(s["complete"], false);
    assert!(
        s["errors"][0]
            .as_str()
            .unwrap()
            .contains("console token unavailable"),
        "{}",
        s["errors"]
    );
    cluster.write_token(support::TOKEN);
    served.collect().await;
    assert_eq!(
        served.snapshot().await.1["complete"],
        true,
        "no restart needed"
    );
}
