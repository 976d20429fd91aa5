//! Starts the upstream control plane the way controller-runtime's envtest does, plus the
//! controller-manager and scheduler: etcd, then kube-apiserver (TLS with generated certificates,
//! client-certificate auth, RBAC, the default admission plugins, service-account tokens), then
//! kube-controller-manager (every default controller, including the service-account token
//! controller, the endpointslice controller and the PV binder) and kube-scheduler.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::Error;
use crate::pki::{CertPair, Pki};
use crate::process::{ProcessGroups, ProcessSet};

/// A running control plane.
pub(crate) struct ControlPlane {
    procs: ProcessSet,
    /// The apiserver's secure port on 127.0.0.1.
    pub(crate) apiserver_port: u16,
    /// Admin kubeconfig (group `system:masters`).
    pub(crate) admin_kubeconfig: PathBuf,
}

/// The ports below the ephemeral range the testbed binds at a fixed number, never handed out
/// by [`free_port`]: the kubelet API's (a control-plane process given it once failed a run,
/// the kubelet's bind finding it taken).
const FIXED_PORTS: [u16; 1] = [crate::kubelet::api::PORT];

/// The ports of `low..high` in the scattered order [`free_port`] tries them for `seed`, the
/// fixed ones left out.
fn candidate_ports(seed: u32, low: u16, high: u16) -> impl Iterator<Item = u16> {
    let span = u32::from(high - low);
    // a stride coprime with most spans walks the range in a scattered order
    (0..span)
        .map(move |i| low + ((seed.wrapping_add(i.wrapping_mul(7919))) % span) as u16)
        .filter(|p| !FIXED_PORTS.contains(p))
}

/// A loopback port nothing listens on, for a process started next to listen on.
///
/// The port comes from below the kernel's ephemeral range: a port the kernel hands out for
/// `:0` can be taken as the source port of any outgoing connection between this check and the
/// server's own bind (which once failed a run with "address already in use"). Ports handed out
/// by this process are remembered so that two testbeds in one test binary never share one.
pub(crate) fn free_port() -> Result<u16, Error> {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_001));
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for port in candidate_ports(seed, low, high) {
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return Ok(port);
        }
    }
    Err(Error::io(
        "binding",
        "127.0.0.1",
        std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("no free loopback port in {low}..{high}"),
        ),
    ))
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::io("writing", path, e))
}

/// Renders a kubeconfig with embedded credentials.
pub(crate) fn kubeconfig(server: &str, ca_pem: &str, user: &str, client: &CertPair) -> String {
    let b64 = |s: &str| STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testbed\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    \
         client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: testbed\n  \
         context:\n    cluster: testbed\n    user: {user}\ncurrent-context: testbed\n",
        ca = b64(ca_pem),
        cert = b64(&client.cert),
        key = b64(&client.key),
    )
}

/// The last `n` lines of a log file (for error messages).
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Writes the CA, serving and client certificates and the service-account keys into
/// `<dir>/pki` and returns that directory.
fn write_pki(dir: &Path, pki: &Pki) -> Result<PathBuf, Error> {
    let pki_dir = dir.join("pki");
    std::fs::create_dir_all(&pki_dir).map_err(|e| Error::io("creating", &pki_dir, e))?;
    let files = [
        ("ca.crt", &pki.ca.cert),
        ("ca.key", &pki.ca.key),
        ("apiserver.crt", &pki.apiserver.cert),
        ("apiserver.key", &pki.apiserver.key),
        ("kubelet-client.crt", &pki.apiserver_kubelet_client.cert),
        ("kubelet-client.key", &pki.apiserver_kubelet_client.key),
        ("sa.key", &pki.sa_key),
        ("sa.pub", &pki.sa_pub),
    ];
    for (name, text) in files {
        write(&pki_dir.join(name), text)?;
    }
    Ok(pki_dir)
}

/// Where the control plane's processes find their files and each other.
struct Layout<'a> {
    bin: &'a Path,
    dir: &'a Path,
    groups: &'a ProcessGroups,
    pki_dir: PathBuf,
    /// `https://127.0.0.1:<port>`, the apiserver's URL in every kubeconfig.
    server: String,
}

impl Layout<'_> {
    fn pki(&self, name: &str) -> String {
        self.pki_dir.join(name).to_string_lossy().into_owned()
    }

    /// Writes the kubeconfig of one control-plane client and returns its path.
    fn kubeconfig(
        &self,
        file: &str,
        ca_pem: &str,
        user: &str,
        pair: &CertPair,
    ) -> Result<PathBuf, Error> {
        let path = self.dir.join(file);
        write(&path, &kubeconfig(&self.server, ca_pem, user, pair))?;
        Ok(path)
    }
}

impl ControlPlane {
    /// Starts etcd and the apiserver and waits until the apiserver answers; the controller
    /// manager and scheduler are started right after (they wait for the apiserver themselves).
    pub(crate) async fn start(
        bin: &Path,
        dir: &Path,
        pki: &Pki,
        groups: &ProcessGroups,
    ) -> Result<ControlPlane, Error> {
        let pki_dir = write_pki(dir, pki)?;
        let apiserver_port = free_port()?;
        let at = Layout {
            bin,
            dir,
            groups,
            pki_dir,
            server: format!("https://127.0.0.1:{apiserver_port}"),
        };
        let mut cp = ControlPlane {
            procs: ProcessSet::default(),
            apiserver_port,
            admin_kubeconfig: at.kubeconfig("kubeconfig", &pki.ca.cert, "admin", &pki.admin)?,
        };
        let etcd_url = cp.start_etcd(&at)?;
        cp.start_apiserver(&at, &etcd_url)?;
        let admin = crate::client_from_kubeconfig(&cp.admin_kubeconfig).await?;
        cp.wait_ready(dir, &admin).await?;
        let cm_kubeconfig = at.kubeconfig(
            "controller-manager.kubeconfig",
            &pki.ca.cert,
            "kube-controller-manager",
            &pki.controller_manager,
        )?;
        cp.start_controller_manager(&at, &cm_kubeconfig)?;
        let sched_kubeconfig = at.kubeconfig(
            "scheduler.kubeconfig",
            &pki.ca.cert,
            "kube-scheduler",
            &pki.scheduler,
        )?;
        cp.start_scheduler(&at, &sched_kubeconfig)?;
        Ok(cp)
    }

    /// etcd on two free loopback ports, without fsync (its data is thrown away); returns the
    /// client URL.
    fn start_etcd(&mut self, at: &Layout<'_>) -> Result<String, Error> {
        let etcd_url = format!("http://127.0.0.1:{}", free_port()?);
        let peer_url = format!("http://127.0.0.1:{}", free_port()?);
        let etcd_dir = at.dir.join("etcd");
        self.spawn(
            at.bin,
            at.dir,
            at.groups,
            "etcd",
            vec![
                format!("--data-dir={}", etcd_dir.display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        Ok(etcd_url)
    }

    /// kube-apiserver with TLS, client-certificate auth, RBAC and service-account tokens.
    fn start_apiserver(&mut self, at: &Layout<'_>, etcd_url: &str) -> Result<(), Error> {
        let p = |name: &str| at.pki(name);
        let cert_dir = at.dir.join("apiserver-certs");
        self.spawn(
            at.bin,
            at.dir,
            at.groups,
            "kube-apiserver",
            vec![
                format!("--etcd-servers={etcd_url}"),
                format!("--cert-dir={}", cert_dir.display()),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--secure-port={}", self.apiserver_port),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                // a loopback advertise address is refused by the endpoint reconcilers
                "--endpoint-reconciler-type=none".into(),
                format!(
                    "--service-cluster-ip-range={}",
                    crate::network::SERVICE_CIDR
                ),
                "--allow-privileged=true".into(),
                "--authorization-mode=RBAC".into(),
                format!("--client-ca-file={}", p("ca.crt")),
                format!("--service-account-issuer={}", at.server),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                format!("--kubelet-client-certificate={}", p("kubelet-client.crt")),
                format!("--kubelet-client-key={}", p("kubelet-client.key")),
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ],
        )
    }

    /// kube-controller-manager with every default controller, signing service-account tokens
    /// and CSRs with the testbed's CA.
    fn start_controller_manager(
        &mut self,
        at: &Layout<'_>,
        kubeconfig: &Path,
    ) -> Result<(), Error> {
        let p = |name: &str| at.pki(name);
        let port = free_port()?;
        self.spawn(
            at.bin,
            at.dir,
            at.groups,
            "kube-controller-manager",
            vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--authentication-kubeconfig={}", kubeconfig.display()),
                format!("--authorization-kubeconfig={}", kubeconfig.display()),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!(
                    "--cert-dir={}",
                    at.dir.join("controller-manager-certs").display()
                ),
                "--controllers=*".into(),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("ca.crt")),
                format!("--cluster-signing-cert-file={}", p("ca.crt")),
                format!("--cluster-signing-key-file={}", p("ca.key")),
                "--leader-elect=false".into(),
                "--allocate-node-cidrs=false".into(),
                "--node-monitor-period=2s".into(),
                "--v=1".into(),
            ],
        )
    }

    fn start_scheduler(&mut self, at: &Layout<'_>, kubeconfig: &Path) -> Result<(), Error> {
        let port = free_port()?;
        self.spawn(
            at.bin,
            at.dir,
            at.groups,
            "kube-scheduler",
            vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--authentication-kubeconfig={}", kubeconfig.display()),
                format!("--authorization-kubeconfig={}", kubeconfig.display()),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                "--leader-elect=false".into(),
                "--v=1".into(),
            ],
        )
    }

    fn spawn(
        &mut self,
        bin: &Path,
        dir: &Path,
        groups: &ProcessGroups,
        name: &str,
        args: Vec<String>,
    ) -> Result<(), Error> {
        self.procs.spawn(dir, groups, name, &bin.join(name), args)
    }

    /// Errors if a control-plane process has exited.
    pub(crate) fn check_alive(&mut self, dir: &Path) -> Result<(), Error> {
        self.procs.check_alive(dir)
    }

    async fn wait_ready(&mut self, dir: &Path, client: &kube::Client) -> Result<(), Error> {
        let limit = Duration::from_secs(90);
        let start = Instant::now();
        loop {
            self.check_alive(dir)?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Kubeconfig(e.to_string()))?;
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(Error::NotReady {
                    name: "kube-apiserver".into(),
                    secs: limit.as_secs(),
                    log_tail: tail(&dir.join("kube-apiserver.log"), 30),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// SIGKILLs every component (etcd's data is throwaway) and reaps them.
    pub(crate) fn stop(&mut self, groups: &ProcessGroups) {
        self.procs.stop(groups);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_never_include_the_kubelet_api_port() {
        for seed in [0, 1, 7919, 250, u32::MAX] {
            let ports: Vec<u16> = candidate_ports(seed, 10_000, 32_768).collect();
            assert!(!ports.contains(&10_250), "seed {seed}");
            assert!(ports.iter().all(|p| (10_000..32_768).contains(p)));
        }
        // Seed 250 would have tried 10,250 first; it goes on to the next in the walk.
        assert_eq!(candidate_ports(250, 10_000, 32_768).next(), Some(18_169));
    }
}
