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

/// Runs `cmd` to the end and collects what it printed.
pub fn run(mut cmd: Command) -> Output {
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

/// The official nsqadmin (`scripts/deps.sh nsqadmin`), pinned in scripts/versions.env.
pub fn nsqadmin_path() -> PathBuf {
    let p = cache_dir().join(format!(
        "nsqadmin-{}/bin/nsqadmin",
        pinned("NSQADMIN_VERSION")
    ));
    assert!(
        p.exists(),
        "{} missing: run `scripts/deps.sh nsqadmin`",
        p.display()
    );
    p
}

/// `program`, resolving names with `resolv_conf` as `/etc/resolv.conf` (bind-mounted in a
/// mount namespace of its own, as a Pod's is) when given.
fn with_resolv_conf(resolv_conf: Option<&Path>, program: &Path) -> Command {
    match resolv_conf {
        None => Command::new(program),
        Some(resolv) => {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
                .arg(resolv)
                .arg(program);
            c
        }
    }
}

/// The official go-nsq client as e2e/k8s/gonsq/main.go drives it, built once per test process.
pub fn gonsq() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| go_build(&crate::crate_dir().join("gonsq"), "e2e-gonsq"))
        .clone()
}

/// The Kodo stand-in (e2e/kodo/standin: go-nsq used the way Kodo uses it), built once per
/// test process.
pub fn kodo_standin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = crate::repo_root().join("e2e/kodo/standin");
        go_build(&dir, "e2e-kodo-standin")
    })
    .clone()
}

/// `go build`s the module in `dir` (static, so it resolves names from `/etc/resolv.conf`
/// itself) into `$CARGO_TARGET_DIR/<name>` (else the repository's `target/`).
fn go_build(dir: &Path, name: &str) -> PathBuf {
    let out_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| crate::repo_root().join("target"), PathBuf::from);
    let bin = out_dir.join(name);
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        .env("CGO_ENABLED", "0")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".");
    let out = run(cmd);
    assert!(
        out.success,
        "go build {} failed:\n{}{}",
        dir.display(),
        out.stdout,
        out.stderr
    );
    bin
}

/// `program` run as [`with_resolv_conf`] says: resolving names with `resolv_conf` as
/// `/etc/resolv.conf` in a mount namespace of its own.
pub fn in_pod_dns(resolv_conf: &Path, program: &Path) -> Command {
    with_resolv_conf(Some(resolv_conf), program)
}

/// How a go-nsq producer run is shaped: `n` bodies `<prefix>-<i>` over `conns` Producers (one
/// TCP connection each), each pausing `interval` between its publishes.
#[derive(Debug, Clone, Copy)]
pub struct Produce<'a> {
    /// Bodies to publish.
    pub n: usize,
    /// Producers (TCP connections).
    pub conns: usize,
    /// Body prefix.
    pub prefix: &'a str,
    /// Pause between one Producer's publishes.
    pub interval: Duration,
}

/// Publishes to `topic` through the nsqd TCP address `addr` with go-nsq as `how` says; returns
/// the acknowledged bodies and what go-nsq logged (its retry count), panicking with its output
/// if any publish failed after its retries.
pub fn gonsq_produce(addr: &str, topic: &str, how: Produce<'_>) -> (Vec<String>, String) {
    let mut cmd = Command::new(gonsq());
    cmd.args([
        "produce", "-nsqd", addr, "-topic", topic, "-prefix", how.prefix,
    ])
    .args(["-n", &how.n.to_string(), "-conns", &how.conns.to_string()])
    .args(["-interval", &how.interval.as_millis().to_string()]);
    let out = run(cmd);
    assert!(
        out.success,
        "go-nsq could not publish {} messages to {addr}:\n{}{}",
        how.n, out.stdout, out.stderr
    );
    (out.stdout.lines().map(str::to_string).collect(), out.stderr)
}

/// What a consumer reads: `n` messages of `topic`/`channel` from `addr` within `limit`, names
/// resolved with `resolv_conf` as `/etc/resolv.conf` (bind-mounted in a mount namespace of its
/// own, as a Pod's is) when given: for a lookupd whose answers name brokers by their cluster
/// DNS names.
#[derive(Debug, Clone, Copy)]
pub struct Sub<'a> {
    /// A resolv.conf to resolve names with.
    pub resolv_conf: Option<&'a Path>,
    /// An nsqd TCP address or a lookupd HTTP URL (pynsq takes either, go-nsq here a lookupd).
    pub addr: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// Channel.
    pub channel: &'a str,
    /// Messages to wait for.
    pub n: usize,
    /// How long to wait.
    pub limit: Duration,
}

impl Sub<'_> {
    fn run(&self, client: &str, cmd: Command) -> Vec<String> {
        let out = run(cmd);
        assert!(
            out.success,
            "{client} did not read {} messages of {}/{} from {}:\n{}{}",
            self.n, self.topic, self.channel, self.addr, out.stdout, out.stderr
        );
        out.stdout.lines().map(str::to_string).collect()
    }
}

/// A go-nsq `Consumer` given only the lookupd HTTP address `sub.addr` (polled every second):
/// the command, to be spawned; it prints each distinct body once and exits 0 after `sub.n` of
/// them, 1 at `sub.limit`.
pub fn gonsq_consumer(sub: &Sub<'_>) -> Command {
    let mut cmd = with_resolv_conf(sub.resolv_conf, &gonsq());
    cmd.args(["consume", "-lookupd", sub.addr, "-topic", sub.topic])
        .args(["-channel", sub.channel, "-n", &sub.n.to_string()])
        .args([
            "-timeout",
            &sub.limit.as_secs().to_string(),
            "-poll",
            "1000",
        ]);
    cmd
}

/// Runs a [`gonsq_consumer`] to the end: the bodies it received, panicking with its output
/// unless all `n` came.
pub fn gonsq_consume_in(sub: &Sub<'_>) -> Vec<String> {
    sub.run("go-nsq", gonsq_consumer(sub))
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
    pynsq_consume_in(&Sub {
        resolv_conf: None,
        addr,
        topic,
        channel,
        n,
        limit,
    })
}

/// [`pynsq_consume`] as `sub` says (a lookupd URL or an nsqd address, a resolv.conf).
pub fn pynsq_consume_in(sub: &Sub<'_>) -> Vec<String> {
    let script = crate::crate_dir().join("pynsq_consume.py");
    let mut cmd = with_resolv_conf(sub.resolv_conf, &pynsq_python());
    cmd.arg(script)
        .args([sub.addr, sub.topic, sub.channel, &sub.n.to_string()])
        .arg(sub.limit.as_secs().to_string());
    sub.run("pynsq", cmd)
}
