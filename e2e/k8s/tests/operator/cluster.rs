//! The scenario's cluster: a 3-Node testbed running the images `make images` built (or the
//! kind cluster `$KUBECONFIG` names, with those images loaded), the API handles the steps use,
//! and a read-only view of the RustQueue written against the CRD's JSON field names (so the
//! steps check what `kubectl` and Argo CD see, whatever the Rust types look like).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::DeleteParams;
use kube::api::{ApiResource, DynamicObject};
use rustqueue_api::crd::RustQueue;
use rustqueue_e2e::tools::{Output, kubectl};
use rustqueue_e2e::{Poll, eventually, repo_root};
use rustqueue_testbed::{Image, STORAGE_CLASS, Testbed, TestbedOptions};
use serde_json::Value;

/// The operator's namespace (config/default), where the sample is applied too.
pub const NS: &str = "rustqueue-system";
/// The sample's RustQueue.
pub const RQ: &str = "queue";
/// The broker Pods' label selector.
pub const BROKERS: &str = "app.kubernetes.io/instance=queue,app.kubernetes.io/component=broker";
/// Generous bound for a whole cluster change on a loaded 2-core machine.
pub const LONG: Duration = Duration::from_secs(180);

/// `<$RUSTQUEUE_E2E_IMAGE_REGISTRY/>rustqueue:<tag>`: an image reference as the cluster's
/// Pods name it. The registry is empty by default (`rustqueue:dev`, as `config/` and the
/// sample name it; the testbed's registry and `kind load` both serve that name).
pub fn image(tag: &str) -> String {
    match std::env::var("RUSTQUEUE_E2E_IMAGE_REGISTRY") {
        Ok(r) if !r.is_empty() => format!("{}/rustqueue:{tag}", r.trim_end_matches('/')),
        _ => format!("rustqueue:{tag}"),
    }
}

/// The release under test: `make images`' `rustqueue:<IMAGE_TAG>` (`$RUSTQUEUE_E2E_IMAGE_TAG`,
/// default `dev`).
pub static DEV: LazyLock<String> = LazyLock::new(|| {
    image(&std::env::var("RUSTQUEUE_E2E_IMAGE_TAG").unwrap_or_else(|_| "dev".into()))
});
/// The same image under a second tag: a new release to roll to (`e2e/k8s/fixture-images.sh`
/// derives this and the next two from `make images`' archive).
pub static NEXT: LazyLock<String> = LazyLock::new(|| image("next"));
/// The release with `RUSTQUEUE_MAX_FEATURE_LEVEL=1` in its image config, the way an older
/// release reports and enforces its ceiling.
pub static LEVEL1: LazyLock<String> = LazyLock::new(|| image("level1"));
/// A release whose configuration is refused at once, even for the capability probe.
pub static BROKEN: LazyLock<String> = LazyLock::new(|| image("broken"));
/// A release that passes the capability probe but whose broker exits until the file
/// [`FLAKY_FIXED`] exists in the scratch dir (a bad release, fixed in place). A directory
/// image around the workspace's `rustqueued`, so the testbed alone runs it.
pub const FLAKY: &str = "rustqueue:flaky";
/// See [`FLAKY`].
pub const FLAKY_FIXED: &str = "flaky-fixed";
/// The user the rendered broker Pods run as (the images' `nonroot`).
const NONROOT: u32 = 65532;

/// `$RUSTQUEUE_E2E_IMAGES`: where `make images` wrote the archives (`rustqueue.tar`) and
/// `e2e/k8s/fixture-images.sh` the scenario's releases (`e2e/rustqueue-<tag>.tar`).
pub fn images_dir() -> PathBuf {
    let dir = std::env::var_os("RUSTQUEUE_E2E_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/images"));
    for f in ["rustqueue.tar", "e2e/rustqueue-next.tar"] {
        assert!(
            dir.join(f).exists(),
            "{} missing: run `make e2e-operator` (it builds the images)",
            dir.join(f).display()
        );
    }
    dir
}

/// `$RUSTQUEUE_E2E_BIN_DIR/rustqueued`: the release build the images hold, run by [`FLAKY`].
pub fn broker_binary() -> PathBuf {
    let bin = std::env::var_os("RUSTQUEUE_E2E_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release"))
        .join("rustqueued");
    assert!(
        bin.exists(),
        "{} missing: run `make e2e-operator`",
        bin.display()
    );
    bin
}

/// The testbed's images: the user's artifacts and the derived releases from the archives, pushed
/// into its registry and run from their own root file system as the rendered securityContext
/// says; [`FLAKY`] as a directory holding a `rustqueued` wrapper script (and working
/// `rustqueue-discovery`, `rustqueue-gateway` and `rustqueue-console` wrappers). A directory image runs
/// as root in the host's file system, so the wrapper runs the broker as [`NONROOT`] itself:
/// files it writes on a claim stay writable for the images' brokers that follow it.
fn testbed_images(mut opts: TestbedOptions, scratch: &Path) -> TestbedOptions {
    let archives = images_dir();
    opts = opts.registry_image(&DEV, archives.join("rustqueue.tar"));
    for (reference, tag) in [(&*NEXT, "next"), (&*LEVEL1, "level1"), (&*BROKEN, "broken")] {
        opts = opts.registry_image(reference, archives.join(format!("e2e/rustqueue-{tag}.tar")));
    }
    let real = broker_binary();
    let real = real.display();
    let fixed = scratch.join(FLAKY_FIXED);
    let fixed = fixed.display();
    let body = format!(
        "case \"$*\" in *--capabilities-output*) exec {real} \"$@\";; esac\n\
         [ -e {fixed} ] || {{ echo 'flaky release: not fixed yet' >&2; exit 1; }}\n\
         exec setpriv --reuid={NONROOT} --regid={NONROOT} --clear-groups --no-new-privs \
         {real} \"$@\""
    );
    let dir = scratch.join("rustqueue-flaky");
    std::fs::create_dir_all(&dir).expect("image dir");
    let mut scripts = vec![("rustqueued".to_string(), body)];
    // The release's runtime binaries work (only its broker is bad): the operator moves
    // discovery, the gateway and the console to the release once every broker runs it. They
    // write nothing, so they may run as the directory image's root.
    for runtime in [
        "rustqueue-discovery",
        "rustqueue-gateway",
        "rustqueue-console",
    ] {
        let real = broker_binary().with_file_name(runtime);
        let real = real.display();
        let run = format!("exec {real} \"$@\"");
        scripts.push((runtime.to_string(), run));
    }
    use std::os::unix::fs::PermissionsExt;
    for (name, body) in scripts {
        let script = dir.join(name);
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).expect("wrapper script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("chmod wrapper");
    }
    opts.image(FLAKY, Image::dir(dir))
}

/// The scenario's runtime: on the testbed, inside its private network namespace (Pod IPs are
/// reachable from this test); with `$KUBECONFIG`, in the host's, which reaches that cluster.
pub fn runtime() -> tokio::runtime::Runtime {
    if std::env::var_os("KUBECONFIG").is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    } else {
        rustqueue_testbed::netns::isolated_runtime().expect("private network namespace")
    }
}

/// Where the scenario runs.
pub enum Backend {
    /// A testbed it started (CI, `make e2e-operator`).
    Testbed(Box<Testbed>),
    /// The cluster `$KUBECONFIG` names (kind, docs/e2e.md), with the images already loaded.
    Kubeconfig,
}

/// The cluster and the handles every step uses.
pub struct Cluster {
    pub backend: Backend,
    pub client: kube::Client,
    pub kc: PathBuf,
    pub pods: Api<Pod>,
    pub pvcs: Api<PersistentVolumeClaim>,
    rqs: Api<DynamicObject>,
    /// The StorageClass the sample is given (`$RUSTQUEUE_E2E_STORAGE_CLASS`, else the
    /// testbed's, else kind's `standard`).
    pub storage_class: String,
    /// Scratch space (kustomize overlays, the wrapper image), removed on drop.
    pub scratch: tempfile::TempDir,
}

impl Cluster {
    /// With `$KUBECONFIG` set, the cluster it names (see [`Cluster::existing`]); else a 3-Node
    /// testbed whose registry holds the images (see [`testbed_images`]).
    pub async fn start() -> Cluster {
        let scratch = tempfile::tempdir().expect("scratch dir");
        let (backend, kc) = match std::env::var_os("KUBECONFIG") {
            Some(kc) => (Backend::Kubeconfig, Cluster::existing(PathBuf::from(kc))),
            None => {
                // The wrapper image's dir must be reachable for a non-root broker, too.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
                    .expect("chmod scratch");
                let opts = TestbedOptions::default()
                    .nodes(3)
                    .node_label("rustqueue.io/eligible", "true");
                let opts = testbed_images(opts, scratch.path());
                let bed = Testbed::start(opts).await.expect("testbed starts");
                let kc = bed.kubeconfig_path().to_path_buf();
                (Backend::Testbed(Box::new(bed)), kc)
            }
        };
        let client = match &backend {
            Backend::Testbed(bed) => bed.client(),
            Backend::Kubeconfig => rustqueue_testbed::client_from_kubeconfig(&kc)
                .await
                .expect("a client for $KUBECONFIG"),
        };
        let storage_class =
            std::env::var("RUSTQUEUE_E2E_STORAGE_CLASS").unwrap_or_else(|_| match backend {
                Backend::Testbed(_) => STORAGE_CLASS.into(),
                Backend::Kubeconfig => "standard".into(),
            });
        let ar = ApiResource::erase::<RustQueue>(&());
        Cluster {
            pods: Api::namespaced(client.clone(), NS),
            pvcs: Api::namespaced(client.clone(), NS),
            rqs: Api::namespaced_with(client.clone(), NS, &ar),
            client,
            kc,
            backend,
            storage_class,
            scratch,
        }
    }

    /// Checks the cluster `kubeconfig` names before anything is installed into it: its
    /// current context must be a kind cluster's (`kind-*`) unless
    /// `RUSTQUEUE_E2E_ANY_CLUSTER=1` says otherwise (the scenario installs the operator and
    /// kills Pods).
    fn existing(kubeconfig: PathBuf) -> PathBuf {
        let context = kubectl(&kubeconfig, &["config", "current-context"]);
        let context = context.stdout.trim();
        assert!(
            context.starts_with("kind-")
                || std::env::var("RUSTQUEUE_E2E_ANY_CLUSTER").as_deref() == Ok("1"),
            "KUBECONFIG={} has current context {context:?}, not a kind cluster's; set \
             RUSTQUEUE_E2E_ANY_CLUSTER=1 to run the scenario there anyway (docs/e2e.md)",
            kubeconfig.display()
        );
        eprintln!(
            "running on the cluster of KUBECONFIG={} (context {context}), images {}",
            kubeconfig.display(),
            &*DEV
        );
        kubeconfig
    }

    /// Whether the sample's StorageClass allows volume expansion (kind's `standard` does not).
    pub async fn storage_class_expands(&self) -> bool {
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        let class = classes
            .get(&self.storage_class)
            .await
            .unwrap_or_else(|e| panic!("StorageClass {}: {e}", self.storage_class));
        class.allow_volume_expansion == Some(true)
    }

    /// Whether this is the scenario's own testbed.
    pub fn is_testbed(&self) -> bool {
        matches!(self.backend, Backend::Testbed(_))
    }

    /// The RustQueue as the API server has it now.
    pub async fn rq(&self) -> Option<Rq> {
        let o = self.rqs.get_opt(RQ).await.ok()??;
        Some(Rq(serde_json::to_value(o).ok()?))
    }

    /// `kubectl patch rustqueue queue --type=merge -p {"spec": <spec>}`.
    pub fn patch_spec(&self, spec: &str) -> Output {
        let body = format!(r#"{{"spec":{spec}}}"#);
        kubectl(
            &self.kc,
            &[
                "patch",
                "rustqueue",
                RQ,
                "-n",
                NS,
                "--type=merge",
                "-p",
                &body,
            ],
        )
    }

    /// Like [`Cluster::patch_spec`], panicking when the API server refuses it.
    pub fn patch_spec_ok(&self, spec: &str) {
        let out = self.patch_spec(spec);
        assert!(out.success, "patch {spec}: {}{}", out.stdout, out.stderr);
    }

    /// Waits until the cluster is Ready at its current generation with `brokers` Ready
    /// brokers; on timeout dumps the broker logs and the status it last saw.
    pub async fn ready(&self, brokers: i64) -> Rq {
        self.until("the RustQueue Ready at its generation", LONG, |rq| {
            rq.is_ready() && rq.ready_brokers() == Some(brokers)
        })
        .await
    }

    /// Waits until `check` holds for the RustQueue; on timeout panics with the last status
    /// seen (after dumping the broker logs).
    pub async fn until(&self, what: &str, limit: Duration, check: impl Fn(&Rq) -> bool) -> Rq {
        let got = rustqueue_e2e::wait_until(what, limit, || async {
            match self.rq().await {
                Some(rq) if check(&rq) => Poll::Done(rq),
                other => Poll::Saw(other),
            }
        })
        .await;
        match got {
            Ok(rq) => rq,
            Err(e) => {
                self.dump_broker_logs().await;
                panic!("{e}");
            }
        }
    }

    /// Prints every broker Pod's identity, IP, readiness and current log, and the tail of
    /// the operator leader's log (for a failing step).
    pub async fn dump_broker_logs(&self) {
        let lp = kube::api::ListParams::default().labels(BROKERS);
        let pods = self
            .pods
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for p in pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map_or("?".to_string(), |c| c.status.clone());
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            eprintln!(
                "--- {name} (uid {}, podIP {ip:?}, Ready {ready})\n{}",
                p.metadata.uid.as_deref().unwrap_or("?"),
                self.container_log(&name, "broker")
            );
        }
        if let Some(leader) = self.leader().await {
            let log = self.container_log(&leader, "operator");
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            eprintln!("--- operator {leader} (last 40 lines)\n{tail}");
        }
    }

    fn container_log(&self, pod: &str, container: &str) -> String {
        match &self.backend {
            Backend::Testbed(bed) => bed.logs(NS, pod, container).unwrap_or_default(),
            Backend::Kubeconfig => kubectl(&self.kc, &["logs", "-n", NS, pod, "-c", container])
                .stdout
                .clone(),
        }
    }

    /// The Pod's IP (it must have one).
    pub async fn pod_ip(&self, name: &str) -> String {
        eventually(&format!("{name} to have an IP"), LONG, || async {
            match self.pods.get_opt(name).await {
                Ok(Some(p)) => match p.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                    Some(ip) => Poll::Done(ip),
                    None => Poll::Saw(format!("{:?}", p.status)),
                },
                other => Poll::Saw(format!("{other:?}")),
            }
        })
        .await
    }

    /// The UID of `name` if it is Ready and not terminating.
    pub async fn ready_pod_uid(&self, name: &str) -> Option<String> {
        let p = self.pods.get_opt(name).await.ok()??;
        let ready = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && p.metadata.deletion_timestamp.is_none())
            .then(|| p.metadata.uid.clone().unwrap_or_default())
    }

    /// The Pod holding the operator Lease, if any.
    pub async fn leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NS);
        leases
            .get("rustqueue-operator-leader")
            .await
            .ok()?
            .spec?
            .holder_identity
    }

    /// Deletes the leader's Pod (`grace` `Some(0)`: SIGKILL; `None`: SIGTERM first, as
    /// `kubectl delete pod` does) and waits for another holder. Returns (old, new, time taken).
    pub async fn replace_leader(&self, grace: Option<u32>) -> (String, String, Duration) {
        let old = self.leader().await.expect("a Lease holder");
        let params = DeleteParams {
            grace_period_seconds: grace,
            ..DeleteParams::default()
        };
        self.pods.delete(&old, &params).await.unwrap();
        let deleted = Instant::now();
        let new = eventually("a new Lease holder", Duration::from_secs(60), || async {
            match self.leader().await {
                Some(h) if h != old => Poll::Done(h),
                other => Poll::Saw(other),
            }
        })
        .await;
        let took = deleted.elapsed();
        eprintln!("leader {old} -> {new} in {took:?}");
        (old, new, took)
    }

    /// The operator-managed admin token (Secret `queue-auth`).
    pub async fn admin_token(&self) -> String {
        self.token("admin-token").await
    }

    /// The token `key` of the operator-managed Secret `queue-auth`.
    pub async fn token(&self, key: &str) -> String {
        let s: Secret = Api::namespaced(self.client.clone(), NS)
            .get("queue-auth")
            .await
            .expect("Secret queue-auth");
        String::from_utf8(s.data.expect("Secret data")[key].0.clone()).expect("utf-8 token")
    }

    /// `GET http://<pod>:4151<path>` with the registry token, as JSON.
    pub async fn broker_get(&self, pod: &str, path: &str) -> Value {
        let ip = self.pod_ip(pod).await;
        let token = self.token("registry-token").await;
        let resp = rustqueue_api::http_client::client()
            .get(format!("http://{ip}:4151{path}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {pod} {path}: {e}"));
        let text = resp.text().await.unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {pod} {path}: {e}: {text}"))
    }

    /// The kubeconfig path.
    pub fn kubeconfig(&self) -> &Path {
        &self.kc
    }
}

/// `POST url` with an optional bearer token; the HTTP status (0 when it did not connect).
pub async fn http_post(url: &str, token: Option<&str>, body: &str) -> u16 {
    let mut req = rustqueue_api::http_client::client()
        .post(url)
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// A RustQueue read through its JSON, with the CRD's field names.
#[derive(Clone)]
pub struct Rq(pub Value);

impl Rq {
    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.0["metadata"]["generation"].as_i64()
    }

    /// `status`.
    pub fn status(&self) -> &Value {
        &self.0["status"]
    }

    /// `status.phase` ("" when unset).
    pub fn phase(&self) -> &str {
        self.status()["phase"].as_str().unwrap_or_default()
    }

    /// `status.message` ("" when unset).
    pub fn message(&self) -> &str {
        self.status()["message"].as_str().unwrap_or_default()
    }

    /// `status.readyBrokers`.
    pub fn ready_brokers(&self) -> Option<i64> {
        self.status()["readyBrokers"].as_i64()
    }

    /// The condition `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Value> {
        self.status()["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
    }

    /// Whether condition `type_` has status `True`.
    pub fn condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c["status"] == "True")
    }

    /// `Ready=True` for the current generation.
    pub fn is_ready(&self) -> bool {
        self.condition_true("Ready")
            && self.status()["observedGeneration"].as_i64() == self.generation()
    }

    /// `status.currentOperation` (`null` when none).
    pub fn operation(&self) -> &Value {
        &self.status()["currentOperation"]
    }

    /// `status.operationHistory`.
    pub fn history(&self) -> Vec<Value> {
        self.status()["operationHistory"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// What a failing wait prints: the status, not the whole object.
impl std::fmt::Debug for Rq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_string_pretty(&serde_json::json!({
            "generation": self.generation(),
            "status": self.status(),
        }))
        .unwrap_or_default();
        f.write_str(&s)
    }
}
