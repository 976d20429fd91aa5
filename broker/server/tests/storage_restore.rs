//! `rustqueued storage restore --from-bucket` on the real binary (docs/operations.md,
//! "Recovering a lost volume"): a broker with `[tiering]` on a real versitygw, its data
//! directory deleted once its segments and a checkpoint are up, the command's JSON report, its
//! refusals, `storage verify` on the result, and the broker delivering from it.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::Broker;
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_tier::ObjectKey;
use rustqueue_tier::test_server::{self, TestServer};
use serde_json::Value;

const PREFIX: &str = "restore-cli";

fn body(i: u32) -> Vec<u8> {
    format!("{i:06}").repeat(150).into_bytes()
}

fn rustqueued(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rustqueued"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap()
}

/// The topic `t`'s checkpoint in the bucket, through the catalog, as JSON.
async fn checkpoint(server: &TestServer) -> Option<Value> {
    let bucket = rustqueue_tier::Bucket::new(server.bucket_config(PREFIX)).unwrap();
    let get = |key: String| {
        let bucket = bucket.clone();
        async move {
            let (bytes, _) = bucket
                .get_verified(&ObjectKey::new(key).unwrap())
                .await
                .ok()?;
            serde_json::from_slice::<Value>(&bytes).ok()
        }
    };
    let catalog = get("nodes/1/catalog.json".into()).await?;
    let incarnation = catalog["topics"][0]["incarnation"].as_str()?.to_owned();
    get(format!("nodes/1/topics/74/{incarnation}/checkpoint.json")).await
}

/// The bases of `t`'s segment files in `dir`.
fn bases(dir: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(dir.join("topics/74/segments"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("segment-")?
                .strip_suffix(".rqlog")?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::too_many_lines,
    reason = "one story on one bucket: publish, checkpoint, lose the directory, restore, refuse, verify, deliver"
)]
async fn the_restore_command_rebuilds_a_deleted_directory_and_reports_the_loss() {
    let server = TestServer::start();
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(keys.path().join("secret"), test_server::SECRET_KEY).unwrap();
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: server.endpoint(),
        prefix: Some(PREFIX.into()),
        allow_http: true,
        access_key_file: Some(keys.path().join("access")),
        secret_key_file: Some(keys.path().join("secret")),
        checkpoint_upload_seconds: 1,
        ..TieringConfig::default()
    };
    let with_tiering = tiering.clone();
    let b = Broker::start_with(move |cfg| {
        cfg.tiering = Some(with_tiering);
        cfg.storage.max_segment_bytes = 8_192;
        cfg.limits.max_body_bytes = 2_048;
        cfg.queue.max_message_bytes = 2_048;
    })
    .await;
    let mut consumer = b.client().await;
    consumer.subscribe("t", "c", 1).await;
    let mut producer = b.client().await;
    for i in 0..30 {
        producer.publish("t", &body(i)).await;
    }
    let got = consumer.receive(10).await;
    assert_eq!(got, (0..10).map(body).collect::<Vec<_>>());
    drop(consumer);
    // Every sealed segment uploaded and a checkpoint of the final state: head 30, c at 10.
    common::eventually_within(Duration::from_secs(60), async || {
        let sealed: Vec<u64> = {
            let mut all = bases(b.dir.path());
            all.pop();
            all
        };
        let Some(cp) = checkpoint(&server).await else {
            return false;
        };
        let recorded: Vec<u64> = cp["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["base"].as_u64().unwrap())
            .collect();
        cp["head"] == 30 && cp["channels"][0]["ack_floor"] == 10 && recorded == sealed
    })
    .await;
    let dir = b.stop_keep_dir().await;
    // One message per record: the active segment's base is the first position not uploaded.
    let active = *bases(dir.path()).last().unwrap();
    let lost = 30 - (active - 1);
    assert!(lost > 0 && active > 11, "active segment at {active}");

    let config = keys.path().join("rq.toml");
    std::fs::write(
        &config,
        format!(
            "{}data_path = {:?}\nmax_segment_bytes = 8192\n[limits]\nmax_body_bytes = 2048\n\
             [queue]\nmax_message_bytes = 2048\n[tiering]\nbucket = {:?}\nendpoint = {:?}\n\
             prefix = {PREFIX:?}\nallow_http = true\naccess_key_file = {:?}\nsecret_key_file = {:?}\n",
            common::DISK_GUARD_TOML,
            dir.path(),
            tiering.bucket,
            tiering.endpoint,
            keys.path().join("access"),
            keys.path().join("secret"),
        ),
    )
    .unwrap();
    let restore = ["storage", "restore", "--from-bucket", "--json"];
    // Over the broker's own directory: refused, saying what to do.
    let out = rustqueued(&restore, &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is not empty") && stderr.contains("--force"),
        "{stderr}"
    );

    // --if-empty (the operator's init container) leaves the broker's directory alone.
    let summary_file = keys.path().join("summary.json");
    let summary_arg = summary_file.to_str().unwrap();
    let if_empty = [
        "storage",
        "restore",
        "--from-bucket",
        "--if-empty",
        "--summary-file",
        summary_arg,
    ];
    let summary =
        || -> Value { serde_json::from_slice(&std::fs::read(&summary_file).unwrap()).unwrap() };
    let out = rustqueued(&if_empty, &config);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(summary()["outcome"], "has_data");
    assert_eq!(bases(dir.path()).last(), Some(&active), "nothing touched");

    // An empty directory of a node that never uploaded anything (a new broker): started empty.
    let fresh = tempfile::tempdir().unwrap();
    let fresh_path = fresh.path().join("data");
    let mut other_node = if_empty.to_vec();
    other_node.extend([
        "--node-id",
        "7",
        "--data-path",
        fresh_path.to_str().unwrap(),
    ]);
    let out = rustqueued(&other_node, &config);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(summary()["outcome"], "nothing_in_bucket");
    assert_eq!(summary()["node_id"], 7);
    // Files without FORMAT (a restore cut short): refused, never deleted.
    std::fs::create_dir_all(fresh_path.join("topics")).unwrap();
    let out = rustqueued(&other_node, &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no FORMAT") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(fresh_path.join("topics").is_dir());

    std::fs::remove_dir_all(dir.path()).unwrap();
    let mut restore_if_empty = if_empty.to_vec();
    restore_if_empty.push("--json");
    let out = rustqueued(&restore_if_empty, &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let s = summary();
    assert_eq!(s["outcome"], "restored");
    assert_eq!(s["lost_messages"], lost);
    assert_eq!(s["messages_restored"], active - 1);
    assert_eq!(s["topics"], 1);
    assert_eq!(s["damaged_objects"], 0);
    assert!(stderr.contains("segment"), "progress on stderr: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &report["topics"][0];
    assert_eq!(t["topic"], "t");
    assert_eq!(t["lost_messages"], lost);
    assert_eq!(report["lost_messages"], lost);
    assert_eq!(t["lost"][0]["from"], active);
    assert_eq!(t["lost"][0]["through"], 30);
    assert_eq!(t["channels"][0]["channel"], "c");
    assert_eq!(t["channels"][0]["lost_messages"], lost);
    assert_eq!(report["damaged_objects"], 0);

    let verify = rustqueued(
        &[
            "storage",
            "verify",
            "--data-path",
            dir.path().to_str().unwrap(),
        ],
        &config,
    );
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // The broker delivers what c had not finished of the uploaded messages, then new ones.
    let b = Broker::start_in(dir, |cfg| {
        cfg.storage.max_segment_bytes = 8_192;
        cfg.limits.max_body_bytes = 2_048;
        cfg.queue.max_message_bytes = 2_048;
    })
    .await;
    let mut producer = b.client().await;
    producer.publish("t", b"after the restore").await;
    let mut consumer = b.client().await;
    consumer.subscribe("t", "c", 1).await;
    let mut want: Vec<Vec<u8>> = (10..(active - 1) as u32).map(body).collect();
    want.push(b"after the restore".to_vec());
    assert_eq!(consumer.receive(want.len()).await, want);
    b.stop().await;

    // Without [tiering] there is nothing to restore from: said so.
    let bare = keys.path().join("bare.toml");
    std::fs::write(&bare, common::DISK_GUARD_TOML).unwrap();
    let out = rustqueued(&restore, &bare);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("[tiering]"), "{stderr}");
}
