//! The brokers curve: the same PUB+FIN load against one server and against several, each a
//! fresh process on loopback like every other run.
//!
//! - **RustQueue**: `n` rustqueued, one `rustqueue-discovery` in static mode listing them, and
//!   one `rustqueue-gateway` following it, the binaries the cluster's Pods run. Every
//!   producer connects to the gateway (TCP tunnels, least-active placement, rotation off for
//!   the run); the consumers are dealt round robin to the brokers themselves, as an NSQ
//!   consumer connects to every broker that holds its topic (docs/gateway.md). One broker
//!   behind the gateway is the first point, so the curve shows what more brokers change.
//! - **nsqd** has no gateway: producers and consumers are dealt round robin to the `n` nsqd
//!   directly, the way NSQ deployments spread load.
//!
//! The servers' CPU is summed over every process (brokers, gateway, discovery); memory is the
//! first broker's. All of them share the machine's cores with the load generator, so on a
//! small machine the curve shows what the extra hop and processes cost, not a speed-up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::broker::{Binaries, Broker, BrokerError, Kind, Profile, StartOptions};

/// What a cluster case starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Servers in the cluster.
    pub brokers: usize,
}

/// A started cluster: where producers and consumers go, and every server process.
pub struct Cluster {
    brokers: Vec<Broker>,
    helpers: Vec<Helper>,
    /// Producer addresses (the gateway, or every nsqd).
    pub producer_addresses: Vec<String>,
    /// Consumer addresses (every broker).
    pub consumer_addresses: Vec<String>,
}

/// A discovery or gateway process, stopped on drop.
struct Helper {
    name: &'static str,
    child: Child,
    log: PathBuf,
    http: String,
}

/// How long the gateway may take to route to every broker: discovery and the gateway each
/// poll every 2 s, and the gateway waits for one agreed revision.
const ROUTED_WITHIN: Duration = Duration::from_secs(30);

impl Cluster {
    /// Starts `config.brokers` servers of `profile` and, for RustQueue, the discovery and the
    /// gateway in front of them; returns once producers can reach every broker. A helper that
    /// exits because another process took its port first starts the whole cluster again
    /// (three tries; the brokers retry their own ports themselves).
    pub fn start(
        profile: &Profile,
        bins: &Binaries,
        config: ClusterConfig,
    ) -> Result<Cluster, BrokerError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::start_once(profile, bins, config) {
                Err(e @ BrokerError::NotReady { .. })
                    if tries < 3
                        && e.to_string()
                            .to_ascii_lowercase()
                            .contains("address already in use") =>
                {
                    eprintln!("{}: {e}; starting the cluster again", profile.name);
                }
                other => return other,
            }
        }
    }

    fn start_once(
        profile: &Profile,
        bins: &Binaries,
        config: ClusterConfig,
    ) -> Result<Cluster, BrokerError> {
        let mut brokers = Vec::new();
        for id in 1..=config.brokers.max(1) {
            // distinct node ids: discovery and the gateway key brokers by them
            let options = StartOptions {
                rustqueue_toml: format!("[node]\nid = {id}\n"),
                nsqd_args: vec![format!("--node-id={id}")],
            };
            brokers.push(Broker::start_with(profile, bins, &options, None)?);
        }
        let consumer_addresses: Vec<String> = brokers.iter().map(|b| b.tcp.clone()).collect();
        if profile.kind == Kind::Nsqd {
            return Ok(Cluster {
                producer_addresses: consumer_addresses.clone(),
                consumer_addresses,
                brokers,
                helpers: Vec::new(),
            });
        }
        let scratch = brokers[0].data_path().to_path_buf();
        let discovery_http = free_address("discovery")?;
        let statics: Vec<String> = brokers.iter().map(|b| b.http.clone()).collect();
        let discovery = Helper::spawn(
            "rustqueue-discovery",
            &sibling(bins, "rustqueue-discovery")?,
            &[
                "--address",
                &discovery_http,
                "--static-brokers",
                &statics.join(","),
            ],
            &scratch,
            discovery_http.clone(),
        )?;
        let gateway_tcp = free_address("gateway")?;
        let gateway_http = free_address("gateway")?;
        let gateway = Helper::spawn(
            "rustqueue-gateway",
            &sibling(bins, "rustqueue-gateway")?,
            &[
                "--tcp-address",
                &gateway_tcp,
                "--http-address",
                &gateway_http,
                "--discovery-urls",
                &format!("http://{discovery_http}"),
                // a rotation mid-run would fail a publish in flight and void the run
                "--tcp-max-connection-age-seconds",
                "0",
            ],
            &scratch,
            gateway_http.clone(),
        )?;
        let mut cluster = Cluster {
            brokers,
            helpers: vec![discovery, gateway],
            producer_addresses: vec![gateway_tcp],
            consumer_addresses,
        };
        cluster.wait_routed(config.brokers.max(1))?;
        Ok(cluster)
    }

    /// Every broker's HTTP address.
    pub fn http_addresses(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.http.clone()).collect()
    }

    /// Every server process: the brokers first, then the helpers.
    pub fn pids(&self) -> Vec<u32> {
        self.brokers
            .iter()
            .map(Broker::pid)
            .chain(self.helpers.iter().map(|h| h.child.id()))
            .collect()
    }

    /// Until the gateway's `/v1/health` says it routes to all `n` brokers.
    fn wait_routed(&mut self, n: usize) -> Result<(), BrokerError> {
        let started = Instant::now();
        loop {
            for h in &mut self.helpers {
                if let Ok(Some(status)) = h.child.try_wait() {
                    return Err(h.not_ready(format!("exited with {status}")));
                }
            }
            for b in &mut self.brokers {
                if let Some(e) = b.exited("cluster broker") {
                    return Err(e);
                }
            }
            let gateway = &self.helpers[1];
            let last = match crate::http::get(&gateway.http, "/v1/health") {
                Ok(r) => {
                    let body = String::from_utf8_lossy(&r.body);
                    if r.status == 200 && routed(&body) == Some(n) {
                        return Ok(());
                    }
                    format!("/v1/health {}: {}", r.status, body.trim())
                }
                Err(e) => format!("/v1/health: {e}"),
            };
            if started.elapsed() > ROUTED_WITHIN {
                // what discovery saw decides what the gateway routes to
                let discovery = &self.helpers[0];
                let lookup = crate::http::get(&discovery.http, "/nodes").map_or_else(
                    |e| format!("/nodes: {e}"),
                    |r| {
                        format!(
                            "/nodes {}: {}",
                            r.status,
                            String::from_utf8_lossy(&r.body).trim()
                        )
                    },
                );
                return Err(gateway.not_ready(format!(
                    "not routing to {n} broker(s) after {ROUTED_WITHIN:?} (last {last}; \
                     discovery {lookup}; discovery log: {})",
                    crate::broker::log_tail(&discovery.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the helpers, then the brokers.
    pub fn stop(mut self) {
        for h in self.helpers.drain(..) {
            drop(h);
        }
        for b in self.brokers.drain(..) {
            b.stop();
        }
    }
}

/// The `brokers` count of a gateway `/v1/health` body.
fn routed(body: &str) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    usize::try_from(v.get("brokers")?.as_u64()?).ok()
}

/// `rustqueue-gateway` or `rustqueue-discovery` next to rustqueued (one cargo target dir).
fn sibling(bins: &Binaries, name: &'static str) -> Result<PathBuf, BrokerError> {
    let path = bins
        .rustqueued
        .as_deref()
        .and_then(Path::parent)
        .map(|dir| dir.join(name))
        .filter(|p| p.is_file());
    path.ok_or(BrokerError::NoBinary(name))
}

fn free_address(what: &str) -> Result<String, BrokerError> {
    let io = |source| BrokerError::Io {
        what: format!("{what} (free port)"),
        source,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io)?;
    Ok(listener.local_addr().map_err(io)?.to_string())
}

impl Helper {
    fn spawn(
        name: &'static str,
        bin: &Path,
        args: &[&str],
        dir: &Path,
        http: String,
    ) -> Result<Helper, BrokerError> {
        let io = |what: &str| {
            let what = format!("{name} ({what})");
            move |source| BrokerError::Io { what, source }
        };
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(io("log"))?;
        let child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().map_err(io("log"))?)
            .stderr(file)
            .spawn()
            .map_err(io("spawn"))?;
        Ok(Helper {
            name,
            child,
            log,
            http,
        })
    }

    fn not_ready(&self, reason: String) -> BrokerError {
        BrokerError::NotReady {
            name: self.name.to_owned(),
            reason,
            log: crate::broker::log_tail(&self.log),
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // nothing of the run depends on a clean exit: 5 s before SIGKILL
        crate::broker::terminate(&mut self.child, Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_health_body_names_how_many_brokers_it_routes_to() {
        let body = r#"{"status":"ready","brokers":3,"revision":7,"publishers":[]}"#;
        assert_eq!(routed(body), Some(3));
        assert_eq!(routed(r#"{"status":"not ready"}"#), None);
        assert_eq!(routed("E_NO_BROKER"), None);
    }

    #[test]
    fn missing_gateway_binaries_are_a_clear_error() {
        let bins = Binaries {
            nsqd: PathBuf::from("/nonexistent"),
            rustqueued: Some(PathBuf::from("/nonexistent/rustqueued")),
            versitygw: None,
        };
        let err = sibling(&bins, "rustqueue-gateway").unwrap_err();
        assert!(
            matches!(err, BrokerError::NoBinary("rustqueue-gateway")),
            "{err}"
        );
    }
}
