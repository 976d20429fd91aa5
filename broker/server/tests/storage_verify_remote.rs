//! `rustqueued storage verify` on a data directory whose segments local retention evicted
//! (docs/tiering.md, "Local retention and read-through"), on the real binary: remote-only
//! segments are neither missing nor damaged, and are counted as not checked; `--remote` reads
//! their objects from the bucket in ranges and checks their CRC-32C: a flipped byte in one
//! object is damage (exit 4) named by its key, and a local `.rqlog` removed without eviction is
//! damage without the flag.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Broker, metric};
use rustqueue_api::broker_config::TieringConfig;
use rustqueue_tier::test_server::{self, TestServer};
use serde_json::Value;

const PREFIX: &str = "verify-remote";

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

/// `storage verify --json [--remote]`: its exit status and report.
fn verify(config: &Path, dir: &Path, remote: bool) -> (Option<i32>, Value) {
    let mut args = vec![
        "storage",
        "verify",
        "--json",
        "--data-path",
        dir.to_str().unwrap(),
    ];
    if remote {
        args.push("--remote");
    }
    let out = rustqueued(&args, config);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

fn statuses<'a>(report: &'a Value, status: &str) -> Vec<&'a str> {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == status)
        .map(|f| f["file"].as_str().unwrap())
        .collect()
}

/// A broker's data directory after 40 messages in 8 KiB segments, every sealed segment
/// uploaded and evicted; with the configuration file `storage verify` runs with, and the
/// number of segments evicted.
async fn evicted_directory(
    server: &TestServer,
    keys: &Path,
) -> (tempfile::TempDir, PathBuf, usize) {
    std::fs::write(keys.join("access"), test_server::ACCESS_KEY).unwrap();
    std::fs::write(keys.join("secret"), test_server::SECRET_KEY).unwrap();
    let tiering = TieringConfig {
        bucket: test_server::BUCKET.into(),
        endpoint: server.endpoint(),
        prefix: Some(PREFIX.into()),
        allow_http: true,
        access_key_file: Some(keys.join("access")),
        secret_key_file: Some(keys.join("secret")),
        // Every uploaded segment's local copy goes.
        local_retention_bytes: Some(0),
        ..TieringConfig::default()
    };
    let with_tiering = tiering.clone();
    let b = Broker::start_with(move |cfg| {
        cfg.tiering = Some(with_tiering);
        // Local retention needs the level that fences out releases that cannot read evicted
        // segments (docs/tiering.md).
        cfg.storage.feature_level = rustqueue_engine::LOCAL_RETENTION_LEVEL;
        cfg.storage.max_segment_bytes = 8_192;
        cfg.limits.max_body_bytes = 2_048;
        cfg.queue.max_message_bytes = 2_048;
    })
    .await;
    let mut first = b.client().await;
    first.subscribe("t", "c", 0).await;
    drop(first);
    let mut producer = b.client().await;
    for i in 0..40 {
        producer.publish("t", &body(i)).await;
    }
    common::eventually_within(Duration::from_secs(60), async || {
        let text = b.metrics().await;
        metric(&text, "rustqueue_tiering_upload_backlog_segments") == Some(0.0)
            && metric(&text, "rustqueue_tiering_evicted_segments_total").unwrap_or(0.0) >= 4.0
            && metric(&text, "rustqueue_tiering_evicted_segments_total")
                == metric(&text, "rustqueue_tiering_uploads_total")
    })
    .await;
    let evicted = metric(
        &b.metrics().await,
        "rustqueue_tiering_evicted_segments_total",
    )
    .unwrap() as usize;
    let dir = b.stop_keep_dir().await;
    let config = keys.join("rq.toml");
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
            keys.join("access"),
            keys.join("secret"),
        ),
    )
    .unwrap();
    (dir, config, evicted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_counts_remote_only_segments_and_checks_their_objects_with_remote() {
    let server = TestServer::start();
    let keys = tempfile::tempdir().unwrap();
    let (dir, config, evicted) = evicted_directory(&server, keys.path()).await;

    // Without --remote: nothing damaged, the remote-only segments counted as not checked.
    let (code, report) = verify(&config, dir.path(), false);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["damaged_files"], 0);
    assert_eq!(statuses(&report, "remote").len(), evicted);
    assert_eq!(report["remote_unchecked"], evicted);
    assert_eq!(report["remote_checked"].as_array().unwrap().len(), 0);
    let text = rustqueued(
        &[
            "storage",
            "verify",
            "--data-path",
            dir.path().to_str().unwrap(),
        ],
        &config,
    );
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("{evicted} remote-only segments were not checked")),
        "{text}"
    );

    // --remote: every object read back and matching.
    let (code, report) = verify(&config, dir.path(), true);
    assert_eq!(code, Some(0), "{report:#}");
    let checked = report["remote_checked"].as_array().unwrap();
    assert_eq!(checked.len(), evicted);
    assert!(checked.iter().all(|c| c["problem"].is_null()), "{report:#}");
    assert_eq!(report["remote_unchecked"], 0);

    // One byte flipped in the second object: damage, named by its key.
    let key = report["remote_segments"][1]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let object = server.object_file(&format!("{PREFIX}/{key}"));
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&object, bytes).unwrap();
    let (code, report) = verify(&config, dir.path(), true);
    assert_eq!(code, Some(4), "{report:#}");
    assert_eq!(report["remote_damaged"], 1);
    let bad: Vec<&Value> = report["remote_checked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["problem"].is_null())
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["key"], key.as_str());
    assert!(
        bad[0]["problem"].as_str().unwrap().contains("CRC-32C"),
        "{report:#}"
    );
    // Without --remote the damage in the bucket is not seen.
    assert_eq!(verify(&config, dir.path(), false).0, Some(0));

    // A local segment file removed without eviction: damage even without --remote.
    let segments = dir.path().join("topics/74/segments");
    let mut local: Vec<String> = std::fs::read_dir(&segments)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rqlog"))
        .collect();
    local.sort();
    assert_eq!(
        local.len(),
        1,
        "only the active segment stays local: {local:?}"
    );
    // The record gone, the evicted segments look never evicted: their messages are lost.
    let record_path = dir.path().join("topics/74/tiered");
    std::fs::remove_file(&record_path).unwrap();
    let (code, report) = verify(&config, dir.path(), false);
    assert_eq!(code, Some(4), "{report:#}");
    assert_eq!(report["damaged_files"], evicted, "{report:#}");
    assert!(statuses(&report, "remote").is_empty());
}
