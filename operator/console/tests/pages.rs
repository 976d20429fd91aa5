//! The console's web pages in a real browser: Debian's headless Chromium, driven by
//! `operator/console/ui/browser/check.mjs` (playwright-core), loads the built pages from the real
//! console backend, which collects from three real `rustqueued` brokers, with management on.
//! The script checks every page in both themes (an axe-core scan, no console error, no failed
//! request), the numbers against the snapshot the backend served, theme and language across a
//! reload, and creates a topic through the dialogs; the test then sees the topic on its owner.
//!
//! Needs the built pages (`make console-ui`), Node.js with the UI's npm packages (the same
//! command installs them) and Chromium (`scripts/deps.sh chromium`): `make console-browser`
//! provides all three. Screenshots go to `<target>/console-screenshots` (docs/console.md shows
//! them).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use support::{Cluster, Served, wait_for};

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ui")
}

fn screenshots_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // <target>/debug/deps/browser-<hash> -> <target>/console-screenshots
    exe.ancestors().nth(3).unwrap().join("console-screenshots")
}

fn chromium() -> PathBuf {
    let bin =
        PathBuf::from(std::env::var("CHROMIUM_BIN").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        bin.exists(),
        "no Chromium at {}: run `scripts/deps.sh chromium` (make console-browser does), or set CHROMIUM_BIN",
        bin.display()
    );
    bin
}

/// A topic on two owners with a backlog of 8 on its channel, and one on the third broker.
async fn seed(cluster: &Cluster, served: &Served) {
    for (b, n) in [(0, 5), (1, 3)] {
        let broker = &cluster.brokers[b];
        broker.admin("/topic/create?topic=orders").await;
        broker
            .admin("/channel/create?topic=orders&channel=billing")
            .await;
        for i in 0..n {
            let status = broker.publish("orders", &format!("order {i}")).await;
            assert!(status.is_success(), "{status}");
        }
    }
    cluster.brokers[2].admin("/topic/create?topic=clicks").await;
    wait_for("a complete snapshot with the backlog", 60, || async {
        let (status, s) = served.snapshot().await;
        let orders = s["topics"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == "orders")?
            .clone();
        (status.is_success() && s["complete"] == true && orders["channels"][0]["depth"] == 8)
            .then_some(())
    })
    .await;
}

/// Runs the browser check against `url`; its output.
fn check_in_chromium(ui: &Path, url: &str, out: &Path) -> String {
    let start = Instant::now();
    let run = Command::new("node")
        .current_dir(ui)
        .arg("browser/check.mjs")
        .args(["--url", &format!("{url}/")])
        .arg("--out")
        .arg(out)
        .args(["--management", "--topic", "created-in-browser"])
        .env("CHROMIUM_BIN", chromium())
        .output()
        .expect("running node (Node.js 20 or newer is needed)");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    println!("{stdout}");
    eprintln!("{stderr}");
    // The panic names the failed check and the error itself: CI's summary of a failed run shows
    // the panic, not the whole output above it.
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(
        run.status.success(),
        "the browser check failed after {:.1} s ({}): {}\n{}",
        start.elapsed().as_secs_f64(),
        run.status,
        failed.join("\n"),
        stderr.trim()
    );
    println!(
        "browser check: {:.1} s; screenshots in {}",
        start.elapsed().as_secs_f64(),
        out.display()
    );
    stdout
}

/// The topic the dialogs created is ACTIVE in the catalog and held by exactly its owners.
async fn assert_created(cluster: &Cluster, topic: &str) {
    let t = cluster
        .mem
        .topic(topic)
        .expect("a RustQueueTopic was created");
    assert_eq!(
        serde_json::to_value(t.spec.phase).unwrap(),
        "ACTIVE",
        "{:?}",
        t.spec
    );
    let mut holders = Vec::new();
    for b in &cluster.brokers {
        if b.topic(topic).await.is_some() {
            holders.push(b.name.clone());
        }
    }
    assert_eq!(
        holders, t.spec.owners,
        "the owners the CR names hold the topic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_works_in_chromium_against_real_brokers() {
    let ui = ui_dir();
    assert!(
        ui.join("dist/index.html").exists() && ui.join("node_modules").exists(),
        "the console's pages are not built in {}: run `make console-ui`",
        ui.display()
    );
    let cluster = Cluster::start(3, true).await;
    let mut config = cluster.config(true);
    config.static_dir = ui.join("dist");
    let mut served = Served::start_with(&cluster, config).await;
    // With management on, a broker takes nothing until the console's first fence sync.
    served.run_loops();
    wait_for(
        "the first complete snapshot (fences synced)",
        60,
        || async {
            let (status, s) = served.snapshot().await;
            (status.is_success() && s["complete"] == true).then_some(())
        },
    )
    .await;
    seed(&cluster, &served).await;
    let out = screenshots_dir();
    let stdout = check_in_chromium(&ui, &served.url, &out);
    assert!(
        stdout.contains("ok   created topic on the topics page"),
        "{stdout}"
    );
    assert_created(&cluster, "created-in-browser").await;
    for page in [
        "overview",
        "brokers",
        "topics",
        "storage",
        "operations",
        "configuration",
    ] {
        for theme in ["light", "dark"] {
            let shot = out.join(format!("{page}-{theme}.png"));
            assert!(
                std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
                "no screenshot {}",
                shot.display()
            );
        }
    }
}
