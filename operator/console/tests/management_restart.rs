//! A console that dies in the middle of a two-owner operation: the next one resumes at the
//! next owner, and a replay after a crash between a broker's answer and its record changes
//! nothing on that broker.

mod support;

use reqwest::StatusCode;
use rustqueue_api::crd::CatalogPhase;
use support::Cluster;
use support::manage::{ready, topic_on, topic_phase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_restarted_mid_operation_completes_it_exactly_once() {
    let cluster = Cluster::start(2, true).await;
    let (served, b) = ready(&cluster).await;
    topic_on(&cluster, &served, "orders", &["q-0", "q-1"]).await;
    let (s, v) = b.act("topic", "pause", "orders", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let op_id = v["operation_id"].as_str().unwrap().to_string();

    // One reconciler pass applies exactly one owner and records it.
    served.tick().await;
    let t = cluster.mem.topic("orders").unwrap();
    let op = t.spec.operation.clone().unwrap();
    assert_eq!(
        (t.spec.phase, op.completed_owners.clone()),
        (CatalogPhase::Applying, vec!["q-0".to_string()])
    );
    assert_eq!(
        cluster.broker("q-0").topic("orders").await.unwrap()["paused"],
        true
    );
    assert_eq!(
        cluster.broker("q-1").topic("orders").await.unwrap()["paused"],
        false
    );
    let q0_revision = cluster.broker("q-0").head().await["registry_revision"].clone();

    // The console dies; a new one on the same store resumes at the next owner.
    drop(served);
    let (served, _) = ready(&cluster).await;
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    let t = cluster.mem.topic("orders").unwrap();
    assert!(t.spec.paused && t.spec.operation.is_none());
    for br in &cluster.brokers {
        assert_eq!(
            br.topic("orders").await.unwrap()["paused"],
            true,
            "{}",
            br.name
        );
    }
    assert_eq!(
        cluster.broker("q-0").head().await["registry_revision"],
        q0_revision,
        "q-0 applied once"
    );
    let done = cluster
        .mem
        .recorded_events()
        .into_iter()
        .filter(|e| e.reason == "ConsoleManagementSucceeded" && e.message.contains(&op_id))
        .count();
    assert_eq!(done, 1);

    // A crash between a broker's answer and its record: the replay is answered from the
    // broker's operation catalog and changes nothing there.
    cluster.mem.edit_topic("orders", |t| {
        t.spec.phase = CatalogPhase::Applying;
        t.spec.operation = Some(rustqueue_api::crd::CatalogOperation {
            completed_owners: Vec::new(),
            ..op.clone()
        });
    });
    topic_phase(&served, &cluster, "orders", CatalogPhase::Active).await;
    assert_eq!(
        cluster.broker("q-0").head().await["registry_revision"],
        q0_revision,
        "replayed, not reapplied"
    );
}
