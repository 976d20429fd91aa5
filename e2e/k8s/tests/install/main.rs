//! The Helm chart (config/helm/rustqueue) on the testbed, the way docs/install.md tells a user
//! to run it: the rendered chart passes a server-side dry run, `helm install` brings up the
//! operator and a 1-broker RustQueue that becomes Ready, `helm upgrade` carries a value change
//! into the operator's Deployment, and `helm uninstall` removes what the chart installed.
//!
//! Needs the images `make images` built in `$RUSTQUEUE_E2E_IMAGES` (`rustqueue.tar`), the
//! testbed's control plane, kubectl and helm (`scripts/deps.sh k8s kubectl helm`); `make
//! e2e-install` does all of it. One Node, its own testbed; about 2 minutes.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rustqueue_e2e::steps::step;
use rustqueue_e2e::tools::{Output, kubectl, kubectl_ok};
use rustqueue_e2e::{Poll, eventually, repo_root};
use rustqueue_testbed::{STORAGE_CLASS, Testbed, TestbedOptions, cache_dir, pinned};

/// The release and its namespace, as docs/install.md names them.
const RELEASE: &str = "rustqueue";
const NS: &str = "rustqueue-system";
/// The chart's RustQueue (`queue.name`'s default).
const RQ: &str = "queue";
/// Generous bound for a cluster change on a loaded 2-core machine.
const LONG: Duration = Duration::from_secs(180);

/// Runs `f(args)` as the step named `f`.
macro_rules! step {
    ($f:ident($($a:expr),*)) => {
        step(stringify!($f), $f($($a),*))
    };
}

/// The testbed and where helm keeps its state for this run.
struct Bed {
    kc: PathBuf,
    helm_home: tempfile::TempDir,
}

fn chart() -> String {
    repo_root()
        .join("config/helm/rustqueue")
        .to_string_lossy()
        .into_owned()
}

/// `$RUSTQUEUE_HELM`, else the pinned helm that `scripts/deps.sh helm` builds.
fn helm_path() -> PathBuf {
    let p = std::env::var_os("RUSTQUEUE_HELM").map_or_else(
        || cache_dir().join(format!("helm-{}/bin/helm", pinned("HELM_VERSION"))),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} missing: run `scripts/deps.sh helm`",
        p.display()
    );
    p
}

impl Bed {
    /// `helm <args> --kubeconfig <testbed>`, with helm's cache and config in a scratch dir.
    fn helm(&self, args: &[&str]) -> Output {
        let home = self.helm_home.path();
        let out = Command::new(helm_path())
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kc)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("running helm");
        Output {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn helm_ok(&self, args: &[&str]) -> String {
        let out = self.helm(args);
        assert!(
            out.success,
            "helm {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        kubectl_ok(&self.kc, args)
    }
}

/// The values the testbed needs and a user's cluster would not: its StorageClass, and no disk
/// watermarks (a testbed volume is a directory on the shared host disk, without a quota).
fn testbed_values() -> Vec<String> {
    [
        "queue.create=true".to_string(),
        format!("queue.spec.storageClassName={STORAGE_CLASS}"),
        "queue.spec.diskHighWatermarkPercent=100".into(),
        "queue.spec.diskLowWatermarkPercent=99".into(),
        "queue.spec.minFreeBytes=0".into(),
    ]
    .into_iter()
    .flat_map(|v| ["--set".to_string(), v])
    .collect()
}

/// `helm template` (the operator and the CRD) applied with `kubectl apply --dry-run=server`:
/// the API server accepts every object the chart renders, and nothing is created.
async fn the_rendered_chart_passes_a_server_side_dry_run(b: &Bed) {
    b.kubectl_ok(&["create", "namespace", NS]);
    let rendered = b.helm_ok(&["template", RELEASE, &chart(), "-n", NS, "--include-crds"]);
    let file = b.helm_home.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).unwrap();
    let out = b.kubectl_ok(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/rustqueues.rustqueue.io created (server dry run)",
        "customresourcedefinition.apiextensions.k8s.io/rustqueuetopics.rustqueue.io created (server dry run)",
        "customresourcedefinition.apiextensions.k8s.io/rustqueuechannels.rustqueue.io created (server dry run)",
        "deployment.apps/rustqueue-operator created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/rustqueue-operator created (server dry run)",
        "role.rbac.authorization.k8s.io/rustqueue-operator created (server dry run)",
    ] {
        assert!(out.contains(object), "dry run lacks {object}:\n{out}");
    }
    let crds = kubectl(&b.kc, &["get", "crd", "rustqueues.rustqueue.io"]);
    assert!(!crds.success, "a dry run must create nothing");
}

/// `helm install --set queue.create=true`: the CRD from crds/, the operator (two replicas, one
/// leading) and the RustQueue, which the operator brings to Ready with its one broker.
async fn helm_install_runs_the_operator_which_brings_the_queue_to_ready(b: &Bed) {
    let chart = chart();
    let mut args = vec![
        "install",
        RELEASE,
        &chart,
        "-n",
        NS,
        "--wait",
        "--timeout",
        "3m",
    ];
    let values = testbed_values();
    args.extend(values.iter().map(String::as_str));
    let out = b.helm_ok(&args);
    for note in [
        "STATUS: deployed",
        "kubectl -n rustqueue-system get rustqueue queue -w",
        "http://queue-discovery.rustqueue-system.svc:4161",
        "queue-gateway.rustqueue-system.svc:4150",
    ] {
        assert!(
            out.contains(note),
            "helm install's NOTES lack {note:?}:\n{out}"
        );
    }
    let ready = b.kubectl_ok(&[
        "get",
        "deployment",
        "rustqueue-operator",
        "-n",
        NS,
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    assert_eq!(
        ready, "2",
        "helm --wait returned with the operator not Ready"
    );
    b.kubectl_ok(&[
        "wait",
        &format!("rustqueue/{RQ}"),
        "-n",
        NS,
        "--for=condition=Ready",
        &format!("--timeout={}s", LONG.as_secs()),
    ]);
    let brokers = b.kubectl_ok(&[
        "get",
        "rustqueue",
        RQ,
        "-n",
        NS,
        "-o",
        "jsonpath={.status.readyBrokers}/{.status.desiredBrokers}",
    ]);
    assert_eq!(brokers, "1/1");
}

/// `helm upgrade --reuse-values --set operator.log=...`: revision 2 rolls the operator's
/// Deployment to the new environment, and the queue stays Ready.
async fn helm_upgrade_carries_a_value_change_into_the_deployment(b: &Bed) {
    b.helm_ok(&[
        "upgrade",
        RELEASE,
        &chart(),
        "-n",
        NS,
        "--reuse-values",
        "--set",
        "operator.log=rustqueue_operator=debug",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let env = b.kubectl_ok(&[
        "get",
        "deployment",
        "rustqueue-operator",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"RUST_LOG\")].value}",
    ]);
    assert_eq!(env, "rustqueue_operator=debug");
    b.kubectl_ok(&[
        "rollout",
        "status",
        "deployment/rustqueue-operator",
        "-n",
        NS,
        "--timeout=120s",
    ]);
    let status = b.helm_ok(&["status", RELEASE, "-n", NS, "-o", "json"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["version"], 2, "{status}");
    assert_eq!(status["info"]["status"], "deployed");
    b.kubectl_ok(&[
        "wait",
        &format!("rustqueue/{RQ}"),
        "-n",
        NS,
        "--for=condition=Ready",
        "--timeout=60s",
    ]);
}

/// `helm uninstall`: the operator, its RBAC and the RustQueue go; the CRD stays (Helm never
/// deletes what crds/ installed, so no other release's data goes with it).
async fn helm_uninstall_removes_the_release_but_keeps_the_crd(b: &Bed) {
    b.helm_ok(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "2m"]);
    for object in [
        "deployment/rustqueue-operator",
        "serviceaccount/rustqueue-operator",
        "role/rustqueue-operator",
        "clusterrole/rustqueue-operator",
        "clusterrolebinding/rustqueue-operator",
    ] {
        let out = kubectl(&b.kc, &["get", object, "-n", NS]);
        assert!(!out.success, "{object} survived helm uninstall");
    }
    eventually("the RustQueue deleted", LONG, || async {
        let out = kubectl(&b.kc, &["get", "rustqueue", RQ, "-n", NS]);
        if out.success {
            Poll::Saw(out.stdout)
        } else {
            Poll::Done(())
        }
    })
    .await;
    b.kubectl_ok(&["get", "crd", "rustqueues.rustqueue.io"]);
    let list = b.helm_ok(&["list", "-n", NS, "-q"]);
    assert_eq!(list.trim(), "", "no release left");
}

fn images_archive() -> PathBuf {
    let dir = std::env::var_os("RUSTQUEUE_E2E_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/images"));
    let tar = dir.join("rustqueue.tar");
    assert!(
        tar.exists(),
        "{} missing: run `make e2e-install` (it builds the images)",
        tar.display()
    );
    tar
}

#[test]
fn the_helm_chart_installs_upgrades_and_uninstalls_the_operator() {
    let rt = rustqueue_testbed::netns::isolated_runtime().expect("private network namespace");
    rt.block_on(async {
        let opts = TestbedOptions::default()
            .nodes(1)
            .node_label("rustqueue.io/eligible", "true")
            .registry_image("rustqueue:dev", images_archive());
        let bed = Testbed::start(opts).await.expect("testbed starts");
        let b = Bed {
            kc: bed.kubeconfig_path().to_path_buf(),
            helm_home: tempfile::tempdir().expect("scratch dir"),
        };
        eprintln!(
            "helm {}, kubeconfig {}",
            helm_path().display(),
            b.kc.display()
        );
        step!(the_rendered_chart_passes_a_server_side_dry_run(&b)).await;
        step!(helm_install_runs_the_operator_which_brings_the_queue_to_ready(&b)).await;
        step!(helm_upgrade_carries_a_value_change_into_the_deployment(&b)).await;
        step!(helm_uninstall_removes_the_release_but_keeps_the_crd(&b)).await;
        bed.shutdown();
    });
}
