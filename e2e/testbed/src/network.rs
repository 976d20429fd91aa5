//! Service networking and cluster DNS, as a cluster has them.
//!
//! - **kube-proxy** (upstream, the `kube-proxy` name of the multi-call control-plane binary) runs
//!   in `nftables` mode inside the testbed's network namespace, so a connection to a Service's
//!   ClusterIP (from [`SERVICE_CIDR`], routed to `lo` as local) is DNAT-ed to one of its ready
//!   Pods' `10.244.x.y` addresses, exactly as on a node. It needs the `nft` tool
//!   (`scripts/deps.sh nftables`).
//! - **CoreDNS** (`COREDNS_VERSION` in `scripts/versions.env`, built by `scripts/deps.sh
//!   coredns`) with its `kubernetes` plugin reading the testbed's API server answers for
//!   [`CLUSTER_DOMAIN`] on [`CLUSTER_DNS`]:53, an address of its own in the namespace. The kubelet
//!   writes each Pod's `/etc/resolv.conf` pointing at it (`search <ns>.svc.cluster.local
//!   svc.cluster.local cluster.local`, `options ndots:5`), as a kubelet started with
//!   `--cluster-dns` does.
//!
//! Both run whenever CoreDNS is installed; see `docs/e2e.md`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Error;
use crate::process::{ProcessGroups, ProcessSet};

/// The Service (ClusterIP) range, given to the API server and routed locally in the namespace.
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The cluster DNS server's address (CoreDNS listens on port 53 there).
pub const CLUSTER_DNS: &str = "10.96.0.10";
/// The cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Where `scripts/deps.sh coredns` installs CoreDNS (`$RUSTQUEUE_COREDNS` overrides it).
pub fn coredns_path() -> PathBuf {
    match std::env::var_os("RUSTQUEUE_COREDNS") {
        Some(p) => PathBuf::from(p),
        None => crate::cache_dir()
            .join(format!("coredns-{}", crate::pinned("COREDNS_VERSION")))
            .join("bin/coredns"),
    }
}

/// The `/etc/resolv.conf` a Pod in `namespace` gets (dnsPolicy `ClusterFirst`).
pub fn resolv_conf(namespace: &str) -> String {
    format!(
        "# Kubernetes-managed resolv.conf (testbed).\nnameserver {CLUSTER_DNS}\n\
         search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n\
         options ndots:5\n"
    )
}

/// kube-proxy and CoreDNS, running.
pub(crate) struct ClusterNetwork {
    procs: ProcessSet,
}

impl ClusterNetwork {
    /// Routes [`SERVICE_CIDR`] locally, adds [`CLUSTER_DNS`], then starts kube-proxy (as Node
    /// `node`) and CoreDNS with `kubeconfig`; returns once CoreDNS is ready (its informers
    /// synced) and kube-proxy reports healthy (its first sync done).
    pub(crate) async fn start(
        bin: &Path,
        dir: &Path,
        kubeconfig: &Path,
        node: &str,
        groups: &ProcessGroups,
    ) -> Result<ClusterNetwork, Error> {
        let coredns = coredns_path();
        if !coredns.exists() {
            return Err(Error::MissingTool {
                tool: "coredns",
                path: coredns,
                install: "scripts/deps.sh coredns",
            });
        }
        crate::netns::ip(&[
            "route",
            "add",
            "local",
            SERVICE_CIDR,
            "dev",
            "lo",
            "table",
            "local",
        ])?;
        crate::netns::ip(&["addr", "add", &format!("{CLUSTER_DNS}/32"), "dev", "lo"])?;

        let mut net = ClusterNetwork {
            procs: ProcessSet::default(),
        };
        let proxy_health = crate::controlplane::free_port()?;
        let proxy_metrics = crate::controlplane::free_port()?;
        net.spawn(
            dir,
            groups,
            "kube-proxy",
            &bin.join("kube-proxy"),
            vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--proxy-mode=nftables".into(),
                format!("--hostname-override={node}"),
                format!("--cluster-cidr={}", crate::netns::POD_CIDR),
                format!("--healthz-bind-address=127.0.0.1:{proxy_health}"),
                format!("--metrics-bind-address=127.0.0.1:{proxy_metrics}"),
                // the namespace's conntrack table is the kernel's; leave its size alone
                "--conntrack-max-per-core=0".into(),
                "--nodeport-addresses=primary".into(),
                "--v=1".into(),
            ],
        )?;

        let ready_port = crate::controlplane::free_port()?;
        let corefile = dir.join("Corefile");
        let text = format!(
            ".:53 {{\n    bind {CLUSTER_DNS}\n    ready 127.0.0.1:{ready_port}\n    errors\n    log\n    \
             kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        kubeconfig {}\n        \
             pods insecure\n        ttl 5\n    }}\n}}\n",
            kubeconfig.display()
        );
        std::fs::write(&corefile, text).map_err(|e| Error::io("writing", &corefile, e))?;
        net.spawn(
            dir,
            groups,
            "coredns",
            &coredns,
            vec!["-conf".into(), corefile.display().to_string()],
        )?;

        net.wait_http(dir, "coredns", ready_port, "/ready").await?;
        net.wait_http(dir, "kube-proxy", proxy_health, "/healthz")
            .await?;
        Ok(net)
    }

    fn spawn(
        &mut self,
        dir: &Path,
        groups: &ProcessGroups,
        name: &str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<(), Error> {
        self.procs.spawn(dir, groups, name, program, args)
    }

    /// Waits until `GET http://127.0.0.1:{port}{path}` answers 200, failing early if a process
    /// exits.
    async fn wait_http(
        &mut self,
        dir: &Path,
        name: &str,
        port: u16,
        path: &str,
    ) -> Result<(), Error> {
        let limit = Duration::from_secs(60);
        let start = Instant::now();
        loop {
            self.procs.check_alive(dir)?;
            if http_status(port, path).await == Some(200) {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(Error::NotReady {
                    name: name.into(),
                    secs: limit.as_secs(),
                    log_tail: crate::controlplane::tail(&dir.join(format!("{name}.log")), 30),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILLs both and reaps them.
    pub(crate) fn stop(&mut self, groups: &ProcessGroups) {
        self.procs.stop(groups);
    }
}

/// The status code of a plain HTTP/1.0 GET on loopback, if it answers.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        text.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    #[test]
    fn resolv_conf_searches_the_namespace_first() {
        let text = super::resolv_conf("ns1");
        assert!(text.contains("nameserver 10.96.0.10\n"), "{text}");
        assert!(
            text.contains("search ns1.svc.cluster.local svc.cluster.local cluster.local\n"),
            "{text}"
        );
        assert!(text.contains("options ndots:5\n"), "{text}");
    }
}
