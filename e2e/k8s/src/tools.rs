//! The real command-line tools a user would run: `kubectl` at the testbed's Kubernetes version
//! and a pynsq consumer, both from `~/.cache/rustqueue` (`scripts/deps.sh kubectl python`).
//! They are started from the test's thread, so on the testbed they share its network namespace.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rustqueue_testbed::{cache_dir, k8s_version, pinned};

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    /// Whether it exited 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

fn run(mut cmd: Command) -> Output {
    let what = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `$RUSTQUEUE_KUBECTL`, else the pinned build in the cache.
pub fn kubectl_path() -> PathBuf {
    let p = std::env::var_os("RUSTQUEUE_KUBECTL").map_or_else(
        || cache_dir().join(format!("kubectl-{}/bin/kubectl", k8s_version())),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} missing: run `scripts/deps.sh kubectl`",
        p.display()
    );
    p
}

/// Runs `kubectl --kubeconfig <kubeconfig> <args>` and returns what it printed.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    run(cmd)
}

/// Like [`kubectl`], panicking with its output unless it succeeds; returns stdout.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.success,
        "kubectl {} failed:\n{}{}",
        args.join(" "),
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// `$RUSTQUEUE_PYNSQ_PYTHON`, else the pinned pynsq virtualenv's interpreter.
pub fn pynsq_python() -> PathBuf {
    let p = std::env::var_os("RUSTQUEUE_PYNSQ_PYTHON").map_or_else(
        || {
            cache_dir().join(format!(
                "pynsq-{}-tornado-{}/bin/python",
                pinned("PYNSQ_VERSION"),
                pinned("TORNADO_VERSION")
            ))
        },
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} missing: run `scripts/deps.sh python`",
        p.display()
    );
    p
}

/// Consumes `n` messages from `topic`/`channel` at `addr` with the official pynsq `Reader`
/// (FIN each) and returns their bodies; panics with pynsq's output if they do not all arrive
/// within `limit`.
pub fn pynsq_consume(
    addr: &str,
    topic: &str,
    channel: &str,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    pynsq_consume_in(None, addr, topic, channel, n, limit)
}

/// [`pynsq_consume`], resolving names with `resolv_conf` as `/etc/resolv.conf` (bind-mounted
/// in a mount namespace of its own, as a Pod's is) when given: for a lookupd whose answers name
/// brokers by their cluster DNS names.
pub fn pynsq_consume_in(
    resolv_conf: Option<&Path>,
    addr: &str,
    topic: &str,
    channel: &str,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    let script = crate::crate_dir().join("pynsq_consume.py");
    let mut cmd = match resolv_conf {
        None => Command::new(pynsq_python()),
        Some(resolv) => {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
                .arg(resolv)
                .arg(pynsq_python());
            c
        }
    };
    cmd.arg(script).args([
        addr,
        topic,
        channel,
        &n.to_string(),
        &limit.as_secs().to_string(),
    ]);
    let out = run(cmd);
    assert!(
        out.success,
        "pynsq did not read {n} messages from {addr} {topic}/{channel}:\n{}{}",
        out.stdout, out.stderr
    );
    out.stdout.lines().map(str::to_string).collect()
}
