//! Shared helpers for the testbed's own scenario tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use rustqueue_testbed::{Image, Testbed, TestbedOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Image of plain shell tools (`/bin`), for scripted containers.
pub const TOOLS: &str = "testbed/tools:1";

/// Runs a scenario inside the testbed's private network namespace (see
/// `rustqueue_testbed::netns`): the runtime is built after the switch so all its threads,
/// and every process they start, live there.
pub fn run<F: std::future::Future>(scenario: F) -> F::Output {
    rustqueue_testbed::netns::isolated_runtime()
        .expect("private network namespace for the testbed")
        .block_on(scenario)
}

pub async fn start() -> Testbed {
    let bin = Path::new(env!("CARGO_BIN_EXE_rustqueue-testbed"));
    let opts = TestbedOptions::default()
        .nodes(3)
        .node_label("rustqueue.io/eligible", "true")
        .tiny_image_dir(bin.parent().expect("binary dir"))
        .image(TOOLS, Image::dir("/bin"));
    Testbed::start(opts).await.expect("testbed starts")
}

/// A minimal HTTP/1.1 exchange; returns (status, body).
pub async fn http(
    method: &str,
    addr: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.pod_ip.clone())
}

/// Waits until `check(pod)` holds for the named Pod and returns it.
pub async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    limit: Duration,
    check: impl Fn(&Pod) -> bool,
) -> Pod {
    let start = std::time::Instant::now();
    let mut last = None;
    loop {
        if let Ok(Some(p)) = api.get_opt(name).await {
            if check(&p) {
                return p;
            }
            last = Some(p);
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for pod {name}: {what}; last seen status: {:#?}",
            last.and_then(|p| p.status)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether a process still runs (a zombie awaiting its reaper does not count).
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
            state != Some('Z')
        }
        Err(_) => false,
    }
}

/// Host mounts whose source or target mentions `needle`.
pub fn host_mounts_mentioning(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The tiny server as an OCI image, `testbed/tiny-oci:1`, pushed into the testbed's registry:
/// the `rustqueue-testbed` binary, the shared libraries `ldd` names (copied from this
/// machine), `/etc/passwd` with nonroot 65532, entrypoint `rustqueue-testbed serve`, user
/// 65532:65532. No shell. Returns the manifest digest.
pub async fn push_tiny_oci_image(bed: &Testbed) -> String {
    let reg = bed
        .registry()
        .expect("the testbed runs a registry (scripts/deps.sh crane)");
    let crane = rustqueue_testbed::registry::crane_path();
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path().join("root");
    let bin = Path::new(env!("CARGO_BIN_EXE_rustqueue-testbed"));
    let put = |src: &Path, dst: &str| {
        let target = root.join(dst.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(src, &target).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    };
    put(bin, "/usr/local/bin/rustqueue-testbed");
    let ldd = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .expect("ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        put(&std::fs::canonicalize(lib).unwrap(), lib);
    }
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
    let layer = work.path().join("layer.tar");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let crane = crane.to_str().unwrap();
    run(&[
        "tar",
        "--numeric-owner",
        "-C",
        root.to_str().unwrap(),
        "-cf",
        layer.to_str().unwrap(),
        ".",
    ]);
    let base = format!("{reg}/testbed/tiny-oci:layers");
    let image = format!("{reg}/{TINY_OCI}");
    run(&[
        crane,
        "append",
        "--insecure",
        "--oci-empty-base",
        "-f",
        layer.to_str().unwrap(),
        "-t",
        &base,
    ]);
    run(&[
        crane,
        "mutate",
        "--insecure",
        &base,
        "--entrypoint",
        "/usr/local/bin/rustqueue-testbed",
        "--cmd",
        "serve",
        "--user",
        "65532:65532",
        "-e",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "-t",
        &image,
    ]);
    run(&[crane, "digest", "--insecure", &image])
}

/// The tiny server's OCI image reference (a `docker.io` name the testbed registry serves).
pub const TINY_OCI: &str = "testbed/tiny-oci:1";
