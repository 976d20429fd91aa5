//! Probes (httpGet, tcpSocket, exec, grpc as a TCP connect) and their threshold bookkeeping.
//! HTTP probes speak plain HTTP/1.1; an `HTTPS` scheme is checked as a TCP connect (the
//! testbed does not verify probe TLS).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Threshold state of one probe of one container run.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProbeState {
    successes: i32,
    failures: i32,
    last: Option<Instant>,
    /// The probe's current verdict (after thresholds).
    pub(crate) ok: bool,
}

impl ProbeState {
    /// Whether the probe is due now for a container started at `started`.
    pub(crate) fn due(&self, p: &Probe, started: Instant) -> bool {
        let now = Instant::now();
        let initial = Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        if now < started + initial {
            return false;
        }
        let period = Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        self.last.is_none_or(|l| now >= l + period)
    }

    /// Records a result; returns true when the verdict changed.
    pub(crate) fn record(&mut self, p: &Probe, success: bool) -> bool {
        self.last = Some(Instant::now());
        let before = self.ok;
        if success {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= p.success_threshold.unwrap_or(1).max(1) {
                self.ok = true;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= p.failure_threshold.unwrap_or(3).max(1) {
                self.ok = false;
            }
        }
        before != self.ok
    }

    /// Consecutive failures so far.
    pub(crate) fn failures(&self) -> i32 {
        self.failures
    }
}

fn port(p: &IntOrString, ports: &[ContainerPort]) -> Option<u16> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(s) => s.parse().ok().or_else(|| {
            ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(s.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
        }),
    }
}

/// How to run an exec probe: the full argv, already wrapped to enter the container.
pub(crate) type ExecArgv = Vec<String>;

/// Runs one probe attempt; `exec` gives the argv and env for exec probes.
pub(crate) async fn run(
    p: &Probe,
    pod_ip: &str,
    ports: &[ContainerPort],
    exec: Option<(ExecArgv, BTreeMap<String, String>)>,
) -> bool {
    let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
    let attempt = async {
        if let Some(h) = &p.http_get {
            let Some(port) = port(&h.port, ports) else {
                return false;
            };
            let host = h.host.clone().unwrap_or_else(|| pod_ip.to_string());
            if h.scheme.as_deref() == Some("HTTPS") {
                return TcpStream::connect((host.as_str(), port)).await.is_ok();
            }
            let path = h.path.clone().unwrap_or_else(|| "/".into());
            let mut req = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/testbed\r\nAccept: */*\r\nConnection: close\r\n"
            );
            for hdr in h.http_headers.iter().flatten() {
                req.push_str(&format!("{}: {}\r\n", hdr.name, hdr.value));
            }
            req.push_str("\r\n");
            let Ok(mut s) = TcpStream::connect((host.as_str(), port)).await else {
                return false;
            };
            if s.write_all(req.as_bytes()).await.is_err() {
                return false;
            }
            let mut buf = [0u8; 64];
            let mut n = 0;
            while n < 12 {
                match s.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let code: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (200..400).contains(&code)
        } else if let Some(t) = &p.tcp_socket {
            let Some(port) = port(&t.port, ports) else {
                return false;
            };
            let host = t.host.clone().unwrap_or_else(|| pod_ip.to_string());
            TcpStream::connect((host.as_str(), port)).await.is_ok()
        } else if let Some(g) = &p.grpc {
            let Ok(port) = u16::try_from(g.port) else {
                return false;
            };
            TcpStream::connect((pod_ip, port)).await.is_ok()
        } else if let Some((argv, env)) = exec {
            let Some((prog, args)) = argv.split_first() else {
                return false;
            };
            let status = tokio::process::Command::new(prog)
                .args(args)
                .env_clear()
                .envs(env)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await;
            status.is_ok_and(|s| s.success())
        } else {
            false
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(success: i32, failure: i32) -> Probe {
        Probe {
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            ..Default::default()
        }
    }

    #[test]
    fn verdict_flips_only_after_the_thresholds() {
        let p = probe(2, 2);
        let mut s = ProbeState::default();
        assert!(!s.record(&p, true));
        assert!(s.record(&p, true), "second success makes it ok");
        assert!(!s.record(&p, false));
        assert!(s.ok);
        assert!(s.record(&p, false), "second failure flips it");
        assert!(!s.ok);
    }

    #[tokio::test]
    async fn http_probe_passes_on_2xx_and_fails_on_5xx_and_refused() {
        use tokio::net::TcpListener;
        async fn serve(status: &'static str) -> u16 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = l.local_addr().unwrap().port();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = l.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                        )
                        .await;
                }
            });
            port
        }
        let http = |port: u16| Probe {
            http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
                port: IntOrString::Int(port.into()),
                path: Some("/healthz".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ok = serve("200 OK").await;
        let bad = serve("503 Service Unavailable").await;
        assert!(run(&http(ok), "127.0.0.1", &[], None).await);
        assert!(!run(&http(bad), "127.0.0.1", &[], None).await);
        let closed = crate::controlplane::free_port().unwrap();
        assert!(!run(&http(closed), "127.0.0.1", &[], None).await);
    }
}
