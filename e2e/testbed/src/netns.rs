//! The testbed's private network.
//!
//! Pod IPs must be ordinary unicast addresses: the API server refuses loopback addresses in
//! EndpointSlices, so `127.x.y.z` Pod IPs leave every Service without endpoints. The testbed
//! therefore runs in a network namespace of its own: [`isolated_runtime`] moves the calling
//! thread into a fresh namespace, brings `lo` up and routes the whole Pod range
//! [`POD_CIDR`] to `lo` as local addresses, so every Pod can bind its own `10.244.x.y`
//! without any per-Pod setup. The control plane, the kubelet's containers and the test itself
//! (its tokio runtime's threads are started from that thread) share the namespace; nothing
//! the testbed does reaches the host's network.
//!
//! Linux keeps network namespaces per thread, and children inherit the namespace of the
//! thread that forks them; that is why the runtime must be built after the switch, on the
//! same thread.

use std::path::Path;
use std::process::Command;

use crate::Error;

/// The Pod address range (a /16 routed to `lo` inside the namespace).
pub const POD_CIDR: &str = "10.244.0.0/16";

/// Moves the calling thread into a new network namespace with `lo` up and [`POD_CIDR`]
/// local, then builds a multi-threaded tokio runtime whose threads live there too.
///
/// Call it first thing in a test (a plain `#[test]`, not `#[tokio::test]`), then `block_on`
/// the test body. Needs `CAP_SYS_ADMIN` (root) and the `ip` command.
pub fn isolated_runtime() -> Result<tokio::runtime::Runtime, Error> {
    enter_private_network()?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Network(format!("building the tokio runtime: {e}")))
}

/// Moves the calling thread (and every thread and process it starts later) into a fresh
/// network namespace and configures it. A thread already in such a namespace is left alone.
pub fn enter_private_network() -> Result<(), Error> {
    if in_private_network() {
        return Ok(());
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
        Error::Network(format!(
            "unshare(CLONE_NEWNET) failed ({e}): the testbed needs root (CAP_SYS_ADMIN) to \
             create its private network namespace"
        ))
    })?;
    ip(&["link", "set", "lo", "up"])?;
    ip(&[
        "route", "add", "local", POD_CIDR, "dev", "lo", "table", "local",
    ])?;
    Ok(())
}

/// True when the calling thread is in a namespace like the one [`enter_private_network`]
/// makes: `lo` is its only interface and Pod addresses can be bound.
pub fn in_private_network() -> bool {
    let Ok(dev) = std::fs::read_to_string("/proc/thread-self/net/dev") else {
        return false;
    };
    let only_lo = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .all(|name| name.trim() == "lo");
    only_lo && std::net::TcpListener::bind("10.244.255.254:0").is_ok()
}

pub(crate) fn ip(args: &[&str]) -> Result<(), Error> {
    let bin = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("ip");
    let out = Command::new(bin).args(args).output().map_err(|e| {
        Error::Network(format!(
            "running `ip {}`: {e} (install iproute2)",
            args.join(" ")
        ))
    })?;
    if !out.status.success() {
        return Err(Error::Network(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_namespace_has_the_pod_range_bindable_and_the_host_unreachable() {
        std::thread::spawn(|| {
            assert!(!in_private_network());
            enter_private_network().unwrap();
            assert!(in_private_network());
            let l = std::net::TcpListener::bind("10.244.3.7:0").expect("pod IPs bind");
            let addr = l.local_addr().unwrap();
            std::net::TcpStream::connect(addr).expect("and are reachable in the namespace");
            // Nothing but lo exists: a non-local address is unreachable.
            let err = std::net::TcpStream::connect_timeout(
                &"192.0.2.1:80".parse().unwrap(),
                std::time::Duration::from_millis(200),
            )
            .unwrap_err();
            assert_ne!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        })
        .join()
        .unwrap();
        assert!(!in_private_network(), "other threads stay where they were");
    }
}
