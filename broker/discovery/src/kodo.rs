//! Kodo mode (docs/discovery.md, docs/kodo.md): the same service, but `/nodes` advertises the
//! three Kodo Gateway identities behind one Service address instead of the brokers, so an
//! unchanged go-nsq producer fleet that picks its publish targets from `/nodes` publishes
//! through the gateways. `/lookup`, `/topics`, `/channels` and `/v1/*` keep listing the real
//! brokers (consumers and the gateways themselves still need them).
//!
//! Everything mode-specific lives here: the startup check of the three settings, the gateway
//! identities, and `lookup_ready` (in Kodo mode every stats shard must be served).

use std::collections::BTreeSet;

use rustqueue_api::gateway::kodo;
use rustqueue_protocol::lookup::Producer;

/// Node id of gateway identity 0; identity k is `GATEWAY_NODE_ID_BASE + k`.
pub const GATEWAY_NODE_ID_BASE: u32 = 1_000_000;
/// TCP port of gateway identity k (the Service maps each to a gateway's 4150).
pub const GATEWAY_TCP_PORTS: [u16; 3] = kodo::TCP_IDENTITY_PORTS;
/// HTTP (stats shard) port of gateway identity k: shard k serves brokers with
/// `(node_id - 1) mod 3 == k`.
pub const GATEWAY_HTTP_PORTS: [u16; 3] = kodo::STATS_PORTS;
/// The message of `POST /channel/delete`, in both modes, and of the Kodo gateways' own.
/// Deliberately not `CHANNEL_NOT_FOUND`: Kodo's cleanup treats that as success and would go
/// on deleting.
pub const CLEANUP_DISABLED: &str = kodo::CLEANUP_DISABLED;

/// Which `/nodes` the service answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Mode {
    /// `/nodes` lists the publish-ready brokers.
    #[default]
    Direct,
    /// `/nodes` lists the three gateway identities at this host (the `<n>-kodo-publish`
    /// Service); `lookup_ready` needs all three stats shards.
    Kodo {
        /// Host (DNS name or IP, no port) every identity advertises.
        gateway_address: String,
    },
}

/// A Kodo setting refused at startup; each says which setting to change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KodoConfigError {
    /// Kodo mode without a gateway address.
    #[error(
        "RUSTQUEUE_KODO_GATEWAY_ADDRESS (--kodo-gateway-address) must name the Kodo gateway \
         Service host when RUSTQUEUE_KODO_COMPATIBILITY_ENABLED is true"
    )]
    MissingAddress,
    /// A gateway address in direct mode.
    #[error(
        "RUSTQUEUE_KODO_GATEWAY_ADDRESS (--kodo-gateway-address) is only allowed with \
         RUSTQUEUE_KODO_COMPATIBILITY_ENABLED=true; unset it for direct mode"
    )]
    AddressWithoutKodo,
    /// The gateway address is not a bare host.
    #[error(
        "RUSTQUEUE_KODO_GATEWAY_ADDRESS {0:?} must be a host name or IP without port, scheme \
         or path (the identities use the fixed ports 4150/4152/4153 and 4151/4154/4155)"
    )]
    BadAddress(String),
    /// Cleanup is never supported.
    #[error(
        "RUSTQUEUE_KODO_CLEANUP_ENABLED (--kodo-cleanup-enabled) must be false: Kodo cleanup \
         compatibility is not supported"
    )]
    CleanupEnabled,
}

impl Mode {
    /// The mode the three settings ask for, or why they are refused.
    pub fn from_settings(
        kodo_enabled: bool,
        gateway_address: Option<&str>,
        cleanup_enabled: bool,
    ) -> Result<Mode, KodoConfigError> {
        if cleanup_enabled {
            return Err(KodoConfigError::CleanupEnabled);
        }
        let address = gateway_address.map(str::trim).filter(|a| !a.is_empty());
        match (kodo_enabled, address) {
            (false, None) => Ok(Mode::Direct),
            (false, Some(_)) => Err(KodoConfigError::AddressWithoutKodo),
            (true, None) => Err(KodoConfigError::MissingAddress),
            (true, Some(a)) if !is_bare_host(a) => Err(KodoConfigError::BadAddress(a.into())),
            (true, Some(a)) => Ok(Mode::Kodo {
                gateway_address: a.to_string(),
            }),
        }
    }

    /// True in Kodo mode.
    pub fn is_kodo(&self) -> bool {
        matches!(self, Mode::Kodo { .. })
    }
}

/// A DNS name or an IP literal: no whitespace, scheme, path or port (an IPv6 literal is the only
/// form allowed to hold `:`).
fn is_bare_host(a: &str) -> bool {
    if a.parse::<std::net::Ipv6Addr>().is_ok() {
        return true;
    }
    !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// The three gateway identities as `/nodes` lists them (k = 0, 1, 2).
pub fn gateway_identities(gateway_address: &str) -> Vec<Producer> {
    let host = if gateway_address.contains(':') {
        format!("[{gateway_address}]")
    } else {
        gateway_address.to_string()
    };
    (0..3u32)
        .zip(GATEWAY_TCP_PORTS.iter().zip(GATEWAY_HTTP_PORTS.iter()))
        .map(|(k, (&tcp_port, &http_port))| Producer {
            remote_address: format!("{host}:{tcp_port}"),
            hostname: gateway_address.to_string(),
            broadcast_address: gateway_address.to_string(),
            tcp_port,
            http_port,
            version: env!("CARGO_PKG_VERSION").to_string(),
            topology_zone: None,
            topology_region: None,
            node_id: Some(GATEWAY_NODE_ID_BASE + k),
        })
        .collect()
}

/// The stats shard a broker belongs to: `(node_id - 1) mod 3`; `None` for node id 0 (never a
/// valid broker id).
pub fn shard_of(node_id: u32) -> Option<u32> {
    node_id.checked_sub(1).map(|n| n % 3)
}

/// Whether lookups are fully served. Direct mode: the source is fresh. Kodo mode also needs
/// exactly three distinct consume-ready brokers (non-zero node ids) covering all three stats
/// shards, so every gateway shard port aggregates a real broker.
pub fn lookup_ready(mode: &Mode, source_ready: bool, consume_ready_nodes: &BTreeSet<u32>) -> bool {
    if !source_ready {
        return false;
    }
    match mode {
        Mode::Direct => true,
        Mode::Kodo { .. } => {
            let shards: BTreeSet<u32> = consume_ready_nodes
                .iter()
                .filter_map(|&n| shard_of(n))
                .collect();
            consume_ready_nodes.len() == 3 && !consume_ready_nodes.contains(&0) && shards.len() == 3
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_table() {
        let kodo = |a: &str| {
            Ok(Mode::Kodo {
                gateway_address: a.into(),
            })
        };
        // (enabled, gateway address, cleanup enabled, want)
        type Case = (
            bool,
            Option<&'static str>,
            bool,
            Result<Mode, KodoConfigError>,
        );
        let cases: &[Case] = &[
            (false, None, false, Ok(Mode::Direct)),
            (false, Some("  "), false, Ok(Mode::Direct)),
            (
                false,
                Some("q-kodo-publish.ns.svc"),
                false,
                Err(KodoConfigError::AddressWithoutKodo),
            ),
            (true, None, false, Err(KodoConfigError::MissingAddress)),
            (true, Some(" "), false, Err(KodoConfigError::MissingAddress)),
            (
                true,
                Some(" q-kodo-publish.ns.svc "),
                false,
                kodo("q-kodo-publish.ns.svc"),
            ),
            (true, Some("127.0.17.9"), false, kodo("127.0.17.9")),
            (true, Some("fd00::9"), false, kodo("fd00::9")),
            (
                true,
                Some("q-kodo-publish:4150"),
                false,
                Err(KodoConfigError::BadAddress("q-kodo-publish:4150".into())),
            ),
            (
                true,
                Some("http://q"),
                false,
                Err(KodoConfigError::BadAddress("http://q".into())),
            ),
            (
                true,
                Some("a b"),
                false,
                Err(KodoConfigError::BadAddress("a b".into())),
            ),
            (true, Some("q"), true, Err(KodoConfigError::CleanupEnabled)),
            (false, None, true, Err(KodoConfigError::CleanupEnabled)),
        ];
        for (enabled, address, cleanup, want) in cases {
            assert_eq!(
                &Mode::from_settings(*enabled, *address, *cleanup),
                want,
                "{enabled} {address:?} {cleanup}"
            );
        }
    }

    #[test]
    fn errors_name_the_setting_to_change() {
        for e in [
            KodoConfigError::MissingAddress,
            KodoConfigError::AddressWithoutKodo,
            KodoConfigError::BadAddress("x:1".into()),
        ] {
            assert!(
                e.to_string().contains("RUSTQUEUE_KODO_GATEWAY_ADDRESS"),
                "{e}"
            );
        }
        assert!(
            KodoConfigError::CleanupEnabled
                .to_string()
                .contains("RUSTQUEUE_KODO_CLEANUP_ENABLED")
        );
    }

    #[test]
    fn identities_are_the_three_gateway_ports() {
        let ids = gateway_identities("q-kodo-publish.ns.svc");
        let got: Vec<(String, &str, u16, u16, u32)> = ids
            .iter()
            .map(|p| {
                assert_eq!(p.hostname, p.broadcast_address);
                (
                    p.remote_address.clone(),
                    p.broadcast_address.as_str(),
                    p.tcp_port,
                    p.http_port,
                    p.node_id.unwrap(),
                )
            })
            .collect();
        let h = "q-kodo-publish.ns.svc";
        assert_eq!(
            got,
            vec![
                (format!("{h}:4150"), h, 4150, 4151, 1_000_000),
                (format!("{h}:4152"), h, 4152, 4154, 1_000_001),
                (format!("{h}:4153"), h, 4153, 4155, 1_000_002),
            ]
        );
        assert_eq!(
            gateway_identities("fd00::9")[2].remote_address,
            "[fd00::9]:4153"
        );
    }

    #[test]
    fn lookup_ready_table() {
        let kodo = Mode::Kodo {
            gateway_address: "g".into(),
        };
        let set = |ids: &[u32]| ids.iter().copied().collect::<BTreeSet<u32>>();
        let cases: &[(&Mode, bool, &[u32], bool)] = &[
            (&Mode::Direct, true, &[], true),
            (&Mode::Direct, true, &[1], true),
            (&Mode::Direct, false, &[1, 2, 3], false),
            (&kodo, true, &[1, 2, 3], true),
            (&kodo, true, &[4, 2, 9], true),
            (&kodo, false, &[1, 2, 3], false),
            (&kodo, true, &[], false),
            (&kodo, true, &[1, 2], false),
            // Three brokers, but two on shard 0: shard 2 has nobody.
            (&kodo, true, &[1, 2, 4], false),
            (&kodo, true, &[1, 2, 3, 4], false),
            (&kodo, true, &[0, 1, 2], false),
            (&kodo, true, &[0, 2, 3], false),
        ];
        for (mode, source, ids, want) in cases {
            assert_eq!(
                lookup_ready(mode, *source, &set(ids)),
                *want,
                "{mode:?} source_ready={source} {ids:?}"
            );
        }
    }

    #[test]
    fn shards_follow_node_ids() {
        assert_eq!(shard_of(0), None);
        assert_eq!(
            (1..=7).map(shard_of).collect::<Vec<_>>(),
            [0, 1, 2, 0, 1, 2, 0].map(Some).to_vec()
        );
    }
}
