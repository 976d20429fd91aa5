//! Cross-field validation (docs/configuration.md, "Keys and defaults" gives each allowed range).

use super::{Config, ConfigError, LimitsConfig, QueueConfig, SecurityConfig, StorageConfig};

const MIB: u64 = 1024 * 1024;

fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid(msg()))
    }
}

/// Validates `cfg`; the error names the key and the allowed range. Rules are checked in the
/// order of the file's tables, and the first broken one is reported.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    node_and_network(cfg)?;
    storage(&cfg.storage)?;
    sizes(cfg)?;
    queue(&cfg.queue)?;
    limits(&cfg.limits, &cfg.queue)?;
    security(&cfg.security)?;
    let Some(t) = &cfg.tiering else {
        return Ok(());
    };
    super::tiering::validate(t)?;
    // The engine refuses it too; said here, `--check-config` says it before a start.
    let level = rustqueue_engine::LOCAL_RETENTION_LEVEL;
    let retains = t.local_retention_bytes.is_some() || t.local_retention_seconds.is_some();
    check(!retains || cfg.storage.feature_level >= level, || {
        format!(
            "tiering.local_retention_bytes / local_retention_seconds need storage.feature_level \
             = {level} (it is {}): the level fences out releases that would drop evicted \
             segments; set storage.feature_level = {level}, or leave local retention unset \
             (docs/tiering.md)",
            cfg.storage.feature_level
        )
    })
}

/// `[node]` and `[network]`.
fn node_and_network(cfg: &Config) -> Result<(), ConfigError> {
    let n = &cfg.node;
    check((1..=65_535).contains(&n.id), || {
        format!("node.id = {} must be 1..=65535", n.id)
    })?;
    for (key, addr) in [
        ("network.tcp_address", &cfg.network.tcp_address),
        ("network.http_address", &cfg.network.http_address),
    ] {
        check(addr.parse::<std::net::SocketAddr>().is_ok(), || {
            format!("{key} = {addr:?} is not an ip:port socket address")
        })?;
    }
    if let Some(addr) = &cfg.network.https_address {
        check(addr.parse::<std::net::SocketAddr>().is_ok(), || {
            format!("network.https_address = {addr:?} is not an ip:port socket address")
        })?;
        check(cfg.security.tls.is_some(), || {
            "network.https_address needs [security.tls] (its certificate and key)".into()
        })?;
    }
    check(cfg.network.kodo_http_address.is_none(), || {
        "network.kodo_http_address is only allowed with Kodo cleanup, which is disabled".into()
    })?;
    for addr in &cfg.network.lookupd_tcp_addresses {
        // host:port with a host name allowed (nsqd resolves it on every connection)
        let port = addr
            .rsplit_once(':')
            .and_then(|(host, port)| (!host.is_empty()).then_some(port.parse::<u16>().ok()?));
        check(port.is_some_and(|p| p > 0), || {
            format!("network.lookupd_tcp_addresses: {addr:?} is not a host:port address")
        })?;
    }
    check((1..=9).contains(&cfg.network.max_deflate_level), || {
        format!(
            "network.max_deflate_level = {} must be 1..=9",
            cfg.network.max_deflate_level
        )
    })?;
    Ok(())
}

/// `[storage]` levels and watermarks.
fn storage(s: &StorageConfig) -> Result<(), ConfigError> {
    check(
        (1..=rustqueue_engine::MAX_FEATURE_LEVEL).contains(&s.feature_level),
        || {
            format!(
                "storage.feature_level = {} must be 1..={}",
                s.feature_level,
                rustqueue_engine::MAX_FEATURE_LEVEL
            )
        },
    )?;
    check(
        s.disk_low_watermark_percent <= s.disk_high_watermark_percent
            && s.disk_high_watermark_percent <= 100,
        || {
            "storage.disk_low_watermark_percent must be <= disk_high_watermark_percent <= 100"
                .into()
        },
    )?;
    Ok(())
}

/// Message, body and segment sizes, which constrain one another.
fn sizes(cfg: &Config) -> Result<(), ConfigError> {
    let (q, l, s) = (&cfg.queue, &cfg.limits, &cfg.storage);
    check(
        q.max_message_bytes > 0 && q.max_message_bytes <= 100 * MIB,
        || {
            format!(
                "queue.max_message_bytes = {} must be 1..=104857600",
                q.max_message_bytes
            )
        },
    )?;
    check(l.max_body_bytes <= 128 * MIB, || {
        format!(
            "limits.max_body_bytes = {} must be <= 134217728",
            l.max_body_bytes
        )
    })?;
    check(q.max_message_bytes <= l.max_body_bytes, || {
        "queue.max_message_bytes must be <= limits.max_body_bytes".into()
    })?;
    check(s.max_segment_bytes >= l.max_body_bytes + 64, || {
        "storage.max_segment_bytes must be >= limits.max_body_bytes + 64".into()
    })?;
    Ok(())
}

/// `[queue]` timeouts, ack mode and dead letters.
fn queue(q: &QueueConfig) -> Result<(), ConfigError> {
    check(q.max_message_timeout_ms >= 1_000, || {
        "queue.max_message_timeout_ms must be >= 1000".into()
    })?;
    check(
        q.message_timeout_ms > 0 && q.message_timeout_ms <= q.max_message_timeout_ms,
        || "queue.message_timeout_ms must be 1..=queue.max_message_timeout_ms".into(),
    )?;
    check(q.max_defer_ms > 0, || {
        "queue.max_defer_ms must be > 0".into()
    })?;
    check(
        matches!(
            q.publish_ack_mode.as_str(),
            "durable" | "write_ack" | "nsq_relaxed"
        ),
        || {
            format!(
                "queue.publish_ack_mode = {:?} must be durable, write_ack or nsq_relaxed",
                q.publish_ack_mode
            )
        },
    )?;
    if q.publish_ack_mode != "durable" {
        check(
            q.relaxed_sync_messages >= 1
                && q.relaxed_sync_bytes >= 4_096
                && q.relaxed_sync_interval_ms > 0,
            || {
                "relaxed ack modes need relaxed_sync_messages >= 1, relaxed_sync_bytes >= 4096, relaxed_sync_interval_ms > 0".into()
            },
        )?;
    }
    let suffix = &q.dead_letter_suffix;
    check(
        (1..=16).contains(&suffix.len())
            && suffix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')),
        || format!("queue.dead_letter_suffix = {suffix:?} must be 1..=16 chars of [A-Za-z0-9._-]"),
    )?;
    check(q.max_delivery_attempts > 0 && q.max_topics > 0, || {
        "queue.max_delivery_attempts and queue.max_topics must be > 0".into()
    })?;
    Ok(())
}

/// `[limits]`: protocol bounds and byte budgets.
fn limits(l: &LimitsConfig, q: &QueueConfig) -> Result<(), ConfigError> {
    check(
        l.heartbeat_interval_ms >= 1_000 && l.heartbeat_interval_ms <= l.max_heartbeat_interval_ms,
        || "limits.heartbeat_interval_ms must be 1000..=limits.max_heartbeat_interval_ms".into(),
    )?;
    check(
        l.output_buffer_size >= 64 && l.output_buffer_size <= l.max_output_buffer_size,
        || "limits.output_buffer_size must be 64..=limits.max_output_buffer_size".into(),
    )?;
    check(
        l.min_output_buffer_timeout_ms <= l.output_buffer_timeout_ms
            && l.output_buffer_timeout_ms <= l.max_output_buffer_timeout_ms,
        || {
            "limits: min_output_buffer_timeout_ms <= output_buffer_timeout_ms <= max_output_buffer_timeout_ms".into()
        },
    )?;
    check(
        l.max_rdy_count > 0
            && l.max_connections > 0
            && l.client_handshake_timeout_ms > 0
            && l.tcp_command_timeout_ms > 0
            && l.http_body_timeout_ms > 0
            && l.auth_timeout_ms > 0
            && l.auth_max_ttl_seconds > 0
            && l.auth_cache_max_entries > 0,
        || "limits: counts and timeouts must be > 0".into(),
    )?;
    check(
        l.connection_publish_inflight_bytes <= l.node_publish_inflight_bytes,
        || "limits.connection_publish_inflight_bytes must be <= node_publish_inflight_bytes".into(),
    )?;
    check(
        l.connection_publish_inflight_bytes >= l.max_body_bytes.max(q.max_message_bytes),
        || "limits.connection_publish_inflight_bytes must hold the largest PUB/MPUB body".into(),
    )?;
    check(
        l.node_delivery_inflight_bytes >= 2 * l.connection_delivery_inflight_bytes,
        || {
            "limits.node_delivery_inflight_bytes must be >= 2 x connection_delivery_inflight_bytes"
                .into()
        },
    )?;
    check(l.auth_memory_bytes >= 4 * l.auth_response_bytes, || {
        "limits.auth_memory_bytes must be >= 4 x auth_response_bytes".into()
    })?;
    Ok(())
}

/// `[security]`: TLS files, token files and the disabled Kodo cleanup.
fn security(sec: &SecurityConfig) -> Result<(), ConfigError> {
    check(!sec.kodo_cleanup_enabled, || {
        "security.kodo_cleanup_enabled = true is not supported".into()
    })?;
    check(
        !sec.console_management_enabled || sec.console_token_file.is_some(),
        || "security.console_management_enabled requires security.console_token_file".into(),
    )?;
    if let Some(tls) = &sec.tls {
        for (key, path) in [
            ("certificate_file", Some(&tls.certificate_file)),
            ("private_key_file", Some(&tls.private_key_file)),
            ("client_ca_file", tls.client_ca_file.as_ref()),
        ] {
            if let Some(p) = path {
                check(p.is_file(), || {
                    format!("security.tls.{key} = {} does not exist", p.display())
                })?;
            }
        }
        check(
            !tls.require_client_certificate || tls.client_ca_file.is_some(),
            || "security.tls.require_client_certificate needs security.tls.client_ca_file".into(),
        )?;
        if let Some(v) = &tls.min_version {
            check(matches!(v.as_str(), "tls1.2" | "tls1.3"), || {
                format!(
                    "security.tls.min_version = {v:?}: use \"tls1.2\" or \"tls1.3\" \
                     (TLS 1.0, 1.1 and SSL 3.0 are not offered at all)"
                )
            })?;
        }
    }
    for (key, p) in [
        ("admin_token_file", &sec.admin_token_file),
        ("publish_token_file", &sec.publish_token_file),
        ("registry_token_file", &sec.registry_token_file),
        ("console_token_file", &sec.console_token_file),
    ] {
        if let Some(p) = p {
            check(p.is_file(), || {
                format!("security.{key} = {} does not exist", p.display())
            })?;
        }
    }
    Ok(())
}
