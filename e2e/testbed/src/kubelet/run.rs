//! One container of a Pod across its runs: start, exit handling and restart back-off, probe
//! verdicts, the termination message, and its ContainerStatus.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::Kubelet;
use super::container;
use super::env;
use super::pod::now;
use super::probe::{self, ProbeState};
use super::security;
use super::volumes::Sources;
use crate::ImageTable;
use crate::process::{group_alive, signal_group};

const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Whether a container will run (again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Running, or will be (re)started.
    Running,
    /// Finished with exit code 0 and will not run again.
    Succeeded,
    /// Finished with an error and will not run again.
    Failed,
}

struct Run {
    child: tokio::process::Child,
    pid: u32,
    started: Instant,
    started_at: String,
    term_file: PathBuf,
    log_file: PathBuf,
    env: BTreeMap<String, String>,
    kill_deadline: Option<Instant>,
}

/// What [`Ctr::start`] needs from the Pod.
pub(crate) struct StartCtx<'a> {
    pub(crate) k: &'a Kubelet,
    pub(crate) pod: &'a Pod,
    pub(crate) ip: &'a str,
    pub(crate) hostname: &'a str,
    pub(crate) sources: &'a Sources,
    pub(crate) dir: &'a Path,
    pub(crate) log_dir: &'a Path,
}

/// One container of a Pod.
pub(crate) struct Ctr {
    spec: Container,
    run: Option<Run>,
    runs: u32,
    restarts: i32,
    waiting: Option<(String, String)>,
    terminated: Option<Value>,
    last_terminated: Option<Value>,
    last_exit_ok: Option<bool>,
    last_pid: Option<u32>,
    next_start: Instant,
    /// Will not run again.
    pub(crate) done: bool,
    readiness: ProbeState,
    liveness: ProbeState,
    startup: ProbeState,
    started_ok: bool,
    /// `registry/repository@digest` of the image the last run used (OCI images only).
    image_id: Option<String>,
    /// uid and gid of an OCI image container (exec probes and hooks enter its root as them).
    image_user: Option<(u32, u32)>,
    /// When the last image pull failed (the status shows `ImagePullBackOff` after a moment).
    pull_failed_at: Option<Instant>,
    pull_failures: u32,
}

/// How long a failed pull shows `ErrImagePull` before the back-off shows `ImagePullBackOff`.
const ERR_IMAGE_PULL_SHOWN: Duration = Duration::from_secs(3);

/// What a run executes: a program from the image table (host root) or an OCI image's.
enum Prepared {
    Host(Vec<String>),
    Image {
        pulled: Box<crate::oci::Pulled>,
        id: security::Identity,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    },
}

impl Ctr {
    pub(crate) fn new(spec: Container) -> Ctr {
        Ctr {
            spec,
            run: None,
            runs: 0,
            restarts: 0,
            waiting: None,
            terminated: None,
            last_terminated: None,
            last_exit_ok: None,
            last_pid: None,
            next_start: Instant::now(),
            done: false,
            readiness: ProbeState::default(),
            liveness: ProbeState::default(),
            startup: ProbeState::default(),
            started_ok: false,
            image_id: None,
            image_user: None,
            pull_failed_at: None,
            pull_failures: 0,
        }
    }

    pub(crate) fn outcome(&self) -> Outcome {
        match (self.done, self.last_exit_ok) {
            (true, Some(true)) => Outcome::Succeeded,
            (true, _) => Outcome::Failed,
            (false, _) => Outcome::Running,
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        self.run.is_some()
    }

    pub(crate) fn ever_started(&self) -> bool {
        self.runs > 0
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.run.as_ref().map(|r| r.pid)
    }

    pub(crate) fn should_start(&self) -> bool {
        self.run.is_none() && !self.done && Instant::now() >= self.next_start
    }

    pub(crate) fn ready(&self) -> bool {
        self.run.is_some()
            && self.started_ok
            && (self.spec.readiness_probe.is_none() || self.readiness.ok)
    }

    /// A failed pull: `ErrImagePull` now, `ImagePullBackOff` while waiting for the next try
    /// (1 s doubling, capped like restarts).
    fn fail_pull(&mut self, reason: &str, message: String) {
        self.pull_failures += 1;
        self.pull_failed_at = Some(Instant::now());
        let backoff = (ERR_IMAGE_PULL_SHOWN
            + Duration::from_secs(1u64 << self.pull_failures.min(3)))
        .min(MAX_BACKOFF);
        self.fail_start(reason, message, backoff);
    }

    fn fail_start(&mut self, reason: &str, message: String, retry: Duration) {
        tracing::debug!(container = %self.spec.name, reason, %message, "container not started");
        self.waiting = Some((reason.to_string(), message));
        self.next_start = Instant::now() + retry;
    }

    pub(crate) async fn start(&mut self, ctx: &StartCtx<'_>) {
        let Some((plan, env)) = self.prepare(ctx).await else {
            return;
        };
        let n = self.runs;
        let term_file = ctx
            .dir
            .join("termination")
            .join(format!("{}-{n}", self.spec.name));
        let log_file = ctx.log_dir.join(format!("{}-{n}.log", self.spec.name));
        let mut cmd = match self.command(ctx, &plan, &env, &term_file, &log_file) {
            Ok(c) => c,
            Err(m) => return self.fail_start("CreateContainerError", m, Duration::from_secs(2)),
        };
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return self.fail_start(
                    "RunContainerError",
                    format!("spawn: {e}"),
                    Duration::from_secs(2),
                );
            }
        };
        self.started(ctx, child, plan, env, term_file, log_file);
    }

    /// Resolves the environment and what the container runs: a program from the image table
    /// (host root), or a pulled image's entrypoint under its identity. `None` once it recorded
    /// why the container cannot start.
    async fn prepare(
        &mut self,
        ctx: &StartCtx<'_>,
    ) -> Option<(Prepared, BTreeMap<String, String>)> {
        let client = &ctx.k.cfg.client;
        let env = match env::resolve(
            client,
            ctx.pod,
            ctx.ip,
            &self.spec,
            ctx.k.cfg.apiserver_port,
        )
        .await
        {
            Ok(e) => e,
            Err(m) => {
                self.fail_start("CreateContainerConfigError", m, Duration::from_secs(2));
                return None;
            }
        };
        let expand = |v: &Option<Vec<String>>| -> Vec<String> {
            v.iter().flatten().map(|s| env::expand(s, &env)).collect()
        };
        let image = self.spec.image.clone().unwrap_or_default();
        let (command, args) = (expand(&self.spec.command), expand(&self.spec.args));
        if ctx.k.cfg.images.get(&image).is_some() {
            return match ctx.k.cfg.images.resolve(&image, &command, &args) {
                Ok(a) => Some((Prepared::Host(a), env)),
                Err(e) => {
                    self.fail_start(e.reason, e.message, Duration::from_secs(5));
                    None
                }
            };
        }
        let policy = self
            .spec
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| crate::oci::default_pull_policy(&image).to_string());
        let pulled = match ctx.k.pulled.get(&image, &policy).await {
            Ok(p) => p,
            Err(e) => {
                self.fail_pull(e.reason, e.message);
                return None;
            }
        };
        self.pull_failures = 0;
        self.pull_failed_at = None;
        let id = match security::identity(ctx.pod, &self.spec, &pulled) {
            Ok(id) => id,
            Err(m) => {
                self.fail_start("CreateContainerConfigError", m, Duration::from_secs(2));
                return None;
            }
        };
        let mut image_env = env::image_env(&pulled.config);
        image_env.extend(env.clone());
        let argv = match image_argv(&pulled, &command, &args, &image_env) {
            Ok(a) => a,
            Err(m) => {
                self.fail_start("CreateContainerError", m, Duration::from_secs(2));
                return None;
            }
        };
        let plan = Prepared::Image {
            pulled: Box::new(pulled),
            id,
            argv,
            env: image_env,
        };
        Some((plan, env))
    }

    /// The command of run `term_file`/`log_file`: its termination-message file (world
    /// writable, as the kubelet makes it), its log, its mounts, and either the host program
    /// or the image's root file system under the container's identity.
    fn command(
        &self,
        ctx: &StartCtx<'_>,
        plan: &Prepared,
        env: &BTreeMap<String, String>,
        term_file: &Path,
        log_file: &Path,
    ) -> Result<tokio::process::Command, String> {
        for d in [term_file.parent(), log_file.parent()]
            .into_iter()
            .flatten()
        {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        std::fs::write(term_file, b"").map_err(|e| format!("termination file: {e}"))?;
        // World-writable, as the kubelet makes it: a non-root container writes its message.
        std::fs::set_permissions(term_file, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("termination file: {e}"))?;
        let mut mounts = container::mounts(&self.spec, ctx.sources, term_file)?;
        mounts.extend(resolv_conf(ctx)?);
        let log = std::fs::File::create(log_file).map_err(|e| format!("log file: {e}"))?;
        match plan {
            Prepared::Host(argv) => {
                for m in &mounts {
                    ctx.k
                        .ensure_mountpoint(&m.dst, m.src.is_file())
                        .map_err(|e| format!("mountpoint {}: {e}", m.dst.display()))?;
                }
                container::command(
                    ctx.hostname,
                    &mounts,
                    argv,
                    env,
                    self.spec.working_dir.as_deref(),
                    log,
                )
            }
            Prepared::Image {
                pulled,
                id,
                argv,
                env,
            } => {
                mounts.extend(etc_files(ctx)?);
                let rootfs = container::RootFs {
                    image: pulled.rootfs.clone(),
                    run_dir: ctx
                        .dir
                        .join("rootfs")
                        .join(format!("{}-{}", self.spec.name, self.runs)),
                    read_only: id.read_only_root,
                };
                let mut exec = id.setpriv_args();
                exec.extend(id.chroot_args(&rootfs.root()));
                exec.extend(argv.iter().cloned());
                container::image_command(ctx.hostname, &rootfs, &mounts, &exec, env, log)
            }
        }
    }

    /// Records a spawned run: its process group, its log, what it runs, and fresh probes.
    fn started(
        &mut self,
        ctx: &StartCtx<'_>,
        child: tokio::process::Child,
        plan: Prepared,
        env: BTreeMap<String, String>,
        term_file: PathBuf,
        log_file: PathBuf,
    ) {
        let pid = child.id().unwrap_or(0);
        ctx.k.cfg.groups.add(pid);
        let ns = ctx.pod.metadata.namespace.clone().unwrap_or_default();
        let name = ctx.pod.metadata.name.clone().unwrap_or_default();
        ctx.k
            .record_log((ns, name, self.spec.name.clone()), log_file.clone());
        let (argv, env) = match plan {
            Prepared::Host(argv) => {
                self.image_id = None;
                self.image_user = None;
                (argv, env)
            }
            Prepared::Image {
                pulled,
                id,
                argv,
                env,
            } => {
                self.image_id = Some(pulled.image_id);
                self.image_user = Some((id.uid, id.gid));
                (argv, env)
            }
        };
        tracing::debug!(container = %self.spec.name, pid, ?argv, "container started");
        if self.runs > 0 {
            self.restarts += 1;
        }
        self.runs += 1;
        self.waiting = None;
        self.terminated = None;
        self.last_pid = Some(pid);
        self.readiness = ProbeState::default();
        self.liveness = ProbeState::default();
        self.startup = ProbeState::default();
        self.started_ok = self.spec.startup_probe.is_none();
        self.run = Some(Run {
            child,
            pid,
            started: Instant::now(),
            started_at: now(),
            term_file,
            log_file,
            env,
            kill_deadline: None,
        });
    }

    /// Sends a signal to the running process group (the first SIGTERM starts no deadline:
    /// the pod worker owns the grace period on deletion).
    pub(crate) fn signal(&mut self, sig: Signal) {
        if let Some(r) = &self.run {
            signal_group(r.pid, sig);
        }
    }

    /// SIGTERM now, SIGKILL when `grace` has passed (liveness/startup failures).
    fn kill_for_restart(&mut self, grace: Duration) {
        if let Some(r) = &mut self.run
            && r.kill_deadline.is_none()
        {
            signal_group(r.pid, Signal::SIGTERM);
            r.kill_deadline = Some(Instant::now() + grace);
        }
    }

    /// Notices an exit and applies the restart policy.
    pub(crate) fn reap(&mut self, k: &Kubelet, policy: &str, _grace: Duration) {
        let Some(r) = &mut self.run else { return };
        let status = match r.child.try_wait() {
            Ok(Some(s)) => s,
            Ok(None) => {
                if r.kill_deadline.is_some_and(|d| Instant::now() >= d) {
                    signal_group(r.pid, Signal::SIGKILL);
                }
                return;
            }
            Err(_) => return,
        };
        self.exited(k, policy, status);
    }

    /// Waits for the (already killed) process so nothing is left behind.
    pub(crate) async fn reap_blocking(&mut self, k: &Kubelet) {
        if let Some(r) = &mut self.run
            && let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(5), r.child.wait()).await
        {
            self.exited(k, "Never", status);
        }
    }

    fn exited(&mut self, k: &Kubelet, policy: &str, status: std::process::ExitStatus) {
        let Some(r) = self.run.take() else { return };
        // A container's exit ends every process in it, as with a real runtime.
        if group_alive(r.pid) {
            signal_group(r.pid, Signal::SIGKILL);
        }
        k.cfg.groups.remove(r.pid);
        let (code, signal) = match (status.code(), status.signal()) {
            (Some(c), _) => (c, None),
            (None, Some(s)) => (128 + s, Some(s)),
            (None, None) => (255, None),
        };
        let mut message = std::fs::read_to_string(&r.term_file).unwrap_or_default();
        message.truncate(4096);
        let fallback =
            self.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        if message.is_empty() && fallback && code != 0 {
            let log = crate::controlplane::tail(&r.log_file, 80);
            let start = log.len().saturating_sub(2048);
            message = log.get(start..).unwrap_or(&log).to_string();
        }
        let mut term = json!({
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": r.started_at,
            "finishedAt": now(),
            "containerID": format!("process://{}", r.pid),
        });
        if let Some(s) = signal {
            term["signal"] = json!(s);
        }
        if !message.is_empty() {
            term["message"] = json!(message);
        }
        let ok = code == 0;
        self.last_exit_ok = Some(ok);
        let restart = match policy {
            "Always" => true,
            "OnFailure" => !ok,
            _ => false,
        };
        tracing::debug!(container = %self.spec.name, code, restart, "container exited");
        if restart {
            // restartCount grows when the next run starts, as with a real kubelet
            self.last_terminated = Some(term);
            let backoff =
                Duration::from_secs(1u64 << self.restarts.clamp(0, 4) as u32).min(MAX_BACKOFF);
            self.next_start = Instant::now() + backoff;
            self.waiting = Some((
                "CrashLoopBackOff".into(),
                format!(
                    "back-off {}s restarting failed container={}",
                    backoff.as_secs(),
                    self.spec.name
                ),
            ));
        } else {
            self.done = true;
            self.terminated = Some(term);
        }
    }

    /// Runs the probes that are due and applies their verdicts.
    pub(crate) async fn probe(&mut self, images: &ImageTable, ip: &str, grace: Duration) {
        let Some(r) = &self.run else { return };
        if r.kill_deadline.is_some() {
            return;
        }
        let ports = self.spec.ports.clone().unwrap_or_default();
        let exec_for = |p: &k8s_openapi::api::core::v1::Probe| {
            in_container(
                &self.spec,
                self.image_user,
                images,
                r,
                p.exec.as_ref()?.command.clone(),
            )
        };
        let started = r.started;
        let mut kill = None;
        if !self.started_ok {
            if let Some(p) = self.spec.startup_probe.clone()
                && self.startup.due(&p, started)
            {
                let ok = probe::run(&p, ip, &ports, exec_for(&p)).await;
                self.startup.record(&p, ok);
                if ok {
                    self.started_ok = true;
                } else if self.startup.failures() >= p.failure_threshold.unwrap_or(3) {
                    kill = Some(
                        p.termination_grace_period_seconds
                            .map_or(grace, |s| Duration::from_secs(s.max(0) as u64)),
                    );
                }
            }
            if let Some(g) = kill {
                self.kill_for_restart(g);
            }
            return;
        }
        if let Some(p) = self.spec.liveness_probe.clone()
            && self.liveness.due(&p, started)
        {
            let ok = probe::run(&p, ip, &ports, exec_for(&p)).await;
            self.liveness.record(&p, ok);
            if self.liveness.failures() >= p.failure_threshold.unwrap_or(3) {
                kill = Some(
                    p.termination_grace_period_seconds
                        .map_or(grace, |s| Duration::from_secs(s.max(0) as u64)),
                );
            }
        }
        if let Some(p) = self.spec.readiness_probe.clone()
            && self.readiness.due(&p, started)
        {
            let ok = probe::run(&p, ip, &ports, exec_for(&p)).await;
            self.readiness.record(&p, ok);
        }
        if let Some(g) = kill {
            self.kill_for_restart(g);
        }
    }

    /// Runs the preStop hook (exec or httpGet), bounded by `deadline`.
    pub(crate) async fn pre_stop(&self, images: &ImageTable, ip: &str, deadline: Instant) {
        let (Some(r), Some(hook)) = (
            &self.run,
            self.spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref()),
        ) else {
            return;
        };
        let budget = deadline.saturating_duration_since(Instant::now());
        let as_probe = k8s_openapi::api::core::v1::Probe {
            exec: hook.exec.clone(),
            http_get: hook.http_get.clone(),
            tcp_socket: hook.tcp_socket.clone(),
            timeout_seconds: Some(budget.as_secs().max(1) as i32),
            ..Default::default()
        };
        let exec = hook
            .exec
            .as_ref()
            .and_then(|e| in_container(&self.spec, self.image_user, images, r, e.command.clone()));
        if let Some(sleep) = &hook.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64).min(budget)).await;
            return;
        }
        let ports = self.spec.ports.clone().unwrap_or_default();
        let _ = probe::run(&as_probe, ip, &ports, exec).await;
    }

    pub(crate) fn status_json(&self, waiting_reason: &str, message: Option<&str>) -> Value {
        let state = if let Some(r) = &self.run {
            json!({"running": {"startedAt": r.started_at}})
        } else if let Some(t) = &self.terminated {
            json!({"terminated": t})
        } else if let Some((reason, msg)) = &self.waiting {
            let backing_off = reason == "ErrImagePull"
                && self
                    .pull_failed_at
                    .is_some_and(|t| t.elapsed() >= ERR_IMAGE_PULL_SHOWN);
            if backing_off {
                let image = self.spec.image.clone().unwrap_or_default();
                json!({"waiting": {"reason": "ImagePullBackOff",
                                   "message": format!("Back-off pulling image {image:?}: {msg}")}})
            } else {
                json!({"waiting": {"reason": reason, "message": msg}})
            }
        } else {
            let mut w = json!({"reason": waiting_reason});
            if let Some(m) = message {
                w["message"] = json!(m);
            }
            json!({"waiting": w})
        };
        let image = self.spec.image.clone().unwrap_or_default();
        let mut s = json!({
            "name": self.spec.name,
            "image": image,
            "imageID": self.image_id.clone().unwrap_or_else(|| format!("testbed://{image}")),
            "ready": self.ready(),
            "started": self.run.is_some() && self.started_ok,
            "restartCount": self.restarts,
            "state": state,
            "lastState": self.last_terminated.as_ref().map_or(json!({}), |t| json!({"terminated": t})),
        });
        if let Some(pid) = self.last_pid {
            s["containerID"] = json!(format!("process://{pid}"));
        }
        s
    }
}

/// Kubernetes' command/args rules over the image's ENTRYPOINT and CMD, with `argv[0]` checked
/// against the image (looked up on the container's `PATH` inside the image when relative).
fn image_argv(
    pulled: &crate::oci::Pulled,
    command: &[String],
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let cfg = &pulled.config;
    let mut argv: Vec<String> = match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => cfg
            .entrypoint
            .iter()
            .flatten()
            .chain(args)
            .cloned()
            .collect(),
        (true, true) => cfg
            .entrypoint
            .iter()
            .flatten()
            .chain(cfg.cmd.iter().flatten())
            .cloned()
            .collect(),
    };
    let Some(first) = argv.first_mut() else {
        return Err(
            "no command specified: the container has no command and the image no \
                    entrypoint"
                .into(),
        );
    };
    let inside = |p: &str| pulled.rootfs.join(p.trim_start_matches('/'));
    if first.contains('/') {
        if !inside(first).exists() {
            return Err(format!("executable {first:?} not found in the image"));
        }
    } else {
        let path = env.get("PATH").cloned().unwrap_or_else(|| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        let found = path
            .split(':')
            .map(|d| format!("{}/{first}", d.trim_end_matches('/')))
            .find(|p| inside(p).is_file())
            .ok_or_else(|| format!("executable file {first:?} not found in $PATH ({path})"))?;
        *first = found;
    }
    Ok(argv)
}

/// `/etc/resolv.conf` naming the cluster DNS, for a Pod whose dnsPolicy is `ClusterFirst` (the
/// default) while cluster DNS runs; other policies keep the image's (or host's) file, as the
/// testbed has no other resolver to offer.
fn resolv_conf(ctx: &StartCtx<'_>) -> Result<Option<container::Mount>, String> {
    if ctx.k.cfg.cluster_dns.is_none() {
        return Ok(None);
    }
    let spec = ctx.pod.spec.as_ref();
    let policy = spec.and_then(|s| s.dns_policy.as_deref());
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let cluster_first = match policy {
        None | Some("ClusterFirst") => !host_network,
        Some("ClusterFirstWithHostNet") => true,
        Some(_) => false,
    };
    if !cluster_first {
        return Ok(None);
    }
    let ns = ctx.pod.metadata.namespace.as_deref().unwrap_or("default");
    let path = ctx.dir.join("etc-resolv.conf");
    std::fs::write(&path, crate::network::resolv_conf(ns))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(container::Mount {
        src: path,
        dst: PathBuf::from("/etc/resolv.conf"),
        read_only: false,
    }))
}

/// `/etc/hosts` and `/etc/hostname` for an image container (the kubelet manages both).
fn etc_files(ctx: &StartCtx<'_>) -> Result<Vec<container::Mount>, String> {
    let hosts = ctx.dir.join("etc-hosts");
    let hostname = ctx.dir.join("etc-hostname");
    let text = format!(
        "# Kubernetes-managed hosts file (testbed).\n127.0.0.1\tlocalhost\n::1\tlocalhost\n{}\t{}\n",
        ctx.ip, ctx.hostname
    );
    std::fs::write(&hosts, text).map_err(|e| format!("{}: {e}", hosts.display()))?;
    std::fs::write(&hostname, format!("{}\n", ctx.hostname))
        .map_err(|e| format!("{}: {e}", hostname.display()))?;
    Ok(vec![
        container::Mount {
            src: hosts,
            dst: PathBuf::from("/etc/hosts"),
            read_only: false,
        },
        container::Mount {
            src: hostname,
            dst: PathBuf::from("/etc/hostname"),
            read_only: false,
        },
    ])
}

/// An exec probe's or hook's `cmd` as argv that runs it inside running container `r` of `spec`
/// (its namespaces; an image container's root and user, else the command resolved like the
/// container's own), with the container's environment.
fn in_container(
    spec: &Container,
    image_user: Option<(u32, u32)>,
    images: &ImageTable,
    r: &Run,
    cmd: Option<Vec<String>>,
) -> Option<(Vec<String>, BTreeMap<String, String>)> {
    let cmd = cmd.unwrap_or_default();
    let argv = match image_user {
        Some(_) => cmd,
        None => {
            let image = spec.image.clone().unwrap_or_default();
            images.resolve(&image, &cmd, &[]).ok()?
        }
    };
    Some((container::nsenter(r.pid, image_user, &argv), r.env.clone()))
}
