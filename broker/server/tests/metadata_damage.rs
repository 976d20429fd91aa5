//! Damage to the small root metadata files, on the real binary (docs/storage-format.md,
//! "Damage to FORMAT, COMPATIBILITY and broker.meta"): a damaged `FORMAT` is rewritten from
//! the other two; a damaged `broker.meta` or `COMPATIBILITY` refuses the start with a message
//! naming the repair, `storage verify` reports it, and `storage repair` rebuilds it only when
//! told the node id (never for another node) and the feature level, or the lowest level the
//! stored records need; a missing `COMPATIBILITY` beside data is refused the same way.
//! Afterwards every message is served and new ids are above every stored one.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "7";

struct Proc {
    b: common::Spawned,
    _config: tempfile::TempDir,
}

fn command(data: &Path) -> (Command, tempfile::TempDir) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustqueued"));
    let config = common::with_disk_guard(&mut cmd);
    cmd.env("RUSTQUEUE_DATA_PATH", data)
        .env("RUSTQUEUE_NODE_ID", NODE)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    (cmd, config)
}

async fn start(data: &Path) -> Proc {
    let (mut cmd, config) = command(data);
    Proc {
        b: common::spawn_broker(&mut cmd, "/ping", common::T).await,
        _config: config,
    }
}

/// Starts the broker and expects it to refuse: returns its stderr. On port 0: it binds before
/// it opens the data directory, and no port can be taken from it.
fn refused_start(data: &Path) -> String {
    let (mut cmd, _config) = command(data);
    let mut child = common::KillOnDrop(
        cmd.env("RUSTQUEUE_TCP_ADDRESS", "127.0.0.1:0")
            .env("RUSTQUEUE_HTTP_ADDRESS", "127.0.0.1:0")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the broker started on damaged metadata"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    err
}

fn tool(data: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rustqueued"))
        .arg("storage")
        .args(args)
        .arg("--data-path")
        .arg(data)
        .env("RUSTQUEUE_NODE_ID", NODE)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// Flips the lowest bit of the middle byte of `file`.
fn flip(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(file, bytes).unwrap();
}

async fn drain(p: &Proc, n: usize) -> Vec<u64> {
    let mut c = common::connect(p.b.tcp).await;
    c.subscribe("meta", "c", 100).await;
    let mut ids = Vec::new();
    for _ in 0..n {
        let (id, _, body) = c.expect_message().await;
        assert!(body.starts_with(b"message "), "{body:?}");
        ids.push(u64::from_str_radix(std::str::from_utf8(&id).unwrap(), 16).unwrap());
        c.fin(&id).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_metadata_is_rewritten_when_derivable_and_refused_with_the_repair_otherwise() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path();
    {
        let p = start(dir).await;
        let mut c = common::connect(p.b.tcp).await;
        c.subscribe("meta", "c", 0).await;
        let mut pubc = common::connect(p.b.tcp).await;
        for i in 0..50 {
            pubc.publish("meta", format!("message {i}").as_bytes())
                .await;
        }
    } // SIGKILL

    // FORMAT: derivable from COMPATIBILITY and broker.meta, so the start rewrites it.
    flip(&dir.join("FORMAT"));
    let (code, text) = tool(dir, &["verify"]);
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("damaged") && l.contains("FORMAT")),
        "{text}"
    );
    drop(start(dir).await);

    // broker.meta: the node id is never guessed.
    flip(&dir.join("broker.meta"));
    let err = refused_start(dir);
    assert!(
        err.contains("broker.meta is damaged") && err.contains("--rebuild-broker-meta"),
        "{err}"
    );
    let (code, text) = tool(dir, &["verify"]);
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("damaged") && l.contains("broker.meta")),
        "{text}"
    );
    let (code, text) = tool(dir, &["repair"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("--rebuild-broker-meta"), "{text}");
    let (code, text) = tool(dir, &["repair", "--rebuild-broker-meta", "--node-id", "8"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not node 8's"), "{text}");
    let (code, text) = tool(dir, &["repair", "--rebuild-broker-meta", "--node-id", NODE]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("50 stored message ids checked"), "{text}");

    // COMPATIBILITY: the fence is not derivable; repair rewrites it at the level it is told.
    flip(&dir.join("COMPATIBILITY"));
    let err = refused_start(dir);
    assert!(
        err.contains("COMPATIBILITY is damaged") && err.contains("--rebuild-compatibility"),
        "{err}"
    );
    let (code, text) = tool(
        dir,
        &["repair", "--rebuild-compatibility", "--feature-level", "1"],
    );
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = tool(dir, &["verify"]);
    assert_eq!(code, Some(0), "{text}");

    // COMPATIBILITY missing beside data: never recreated at level 1; without --feature-level
    // repair writes the lowest level the stored records need (these small ones need 1).
    std::fs::remove_file(dir.join("COMPATIBILITY")).unwrap();
    let err = refused_start(dir);
    assert!(
        err.contains("COMPATIBILITY is missing while the directory holds data")
            && err.contains("storage repair --rebuild-compatibility --feature-level <L>"),
        "{err}"
    );
    assert!(
        !dir.join("COMPATIBILITY").exists(),
        "the start recreated it"
    );
    let (code, text) = tool(dir, &["verify"]);
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("damaged") && l.contains("COMPATIBILITY is missing")),
        "{text}"
    );
    let (code, text) = tool(dir, &["repair", "--feature-level", "1"]);
    assert_eq!(
        code,
        Some(2),
        "--feature-level alone is a flag error: {text}"
    );
    let (code, text) = tool(dir, &["repair", "--rebuild-compatibility"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("with feature level 1") && text.contains("every stored record fits level 1"),
        "{text}"
    );
    let (code, text) = tool(dir, &["verify"]);
    assert_eq!(code, Some(0), "{text}");

    // Everything is served, and new ids are above every stored one.
    let p = start(dir).await;
    let old = drain(&p, 50).await;
    let mut c = common::connect(p.b.tcp).await;
    c.publish("meta", b"message new").await;
    let new = drain(&p, 1).await;
    assert!(new[0] > *old.iter().max().unwrap(), "{new:x?} vs {old:x?}");
    assert_eq!(new[0] >> 48, 7);
}
