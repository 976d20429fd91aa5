//! Configuration: defaults without a file, unknown keys, env overrides, validation, and the
//! `--check-config` flag of the real binary.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use rustqueue_server::{Config, ConfigError, ConfigFile};

mod common;

fn load(toml: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rq.toml");
    if let Some(t) = toml {
        std::fs::write(&path, t).unwrap();
    }
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load(toml.map(|_| path.as_path()), |k| env.get(k).cloned())
}

#[test]
fn no_file_gives_the_documented_defaults() {
    let c = load(None, &[]).unwrap();
    assert_eq!(c.network.tcp_address, "0.0.0.0:4150");
    assert_eq!(c.network.http_address, "0.0.0.0:4151");
    assert_eq!(c.storage.data_path, Path::new("data"));
    assert_eq!(c.node.id, 1);
    assert_eq!(c.queue.max_message_bytes, 20_971_520);
    assert_eq!(c.limits.max_rdy_count, 2_500);
    assert_eq!(c.queue.publish_ack_mode, "durable");
    assert!(!c.storage.protective_eviction_enabled, "eviction is opt-in");
    assert_eq!(c.storage.disk_pressure_grace_seconds, 60);
    let c = load(
        Some("[storage]\nprotective_eviction_enabled = true\ndisk_pressure_grace_seconds = 2\n"),
        &[],
    )
    .unwrap();
    assert!(c.storage.protective_eviction_enabled);
    assert_eq!(c.storage.disk_pressure_grace_seconds, 2);
}

#[test]
fn unknown_keys_are_rejected_with_their_name() {
    let err = load(Some("[network]\ntcp_adress = \"0.0.0.0:1\"\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("tcp_adress"), "{err}");
    let err = load(Some("bogus = 1\n"), &[]).unwrap_err().to_string();
    assert!(err.contains("bogus"), "{err}");
}

#[test]
fn environment_overrides_the_file() {
    let c = load(
        Some("[network]\ntcp_address = \"127.0.0.1:1\"\n[storage]\ndata_path = \"/file\"\n"),
        &[
            ("RUSTQUEUE_TCP_ADDRESS", "127.0.0.1:2"),
            ("RUSTQUEUE_HTTP_ADDRESS", "127.0.0.1:3"),
            ("RUSTQUEUE_DATA_PATH", "/env"),
            ("RUSTQUEUE_MAX_MESSAGE_BYTES", "1024"),
            ("RUSTQUEUE_PUBLISH_ACK_MODE", "write_ack"),
            ("RUSTQUEUE_LOG_FORMAT", "json"),
            ("RUSTQUEUE_PROTECTIVE_EVICTION_ENABLED", "true"),
            ("RUSTQUEUE_DISK_PRESSURE_GRACE_SECONDS", "5"),
            (
                "RUSTQUEUE_LOOKUPD_TCP_ADDRESSES",
                "lookupd-0.lookupd:4160, 127.0.0.1:4160",
            ),
        ],
    )
    .unwrap();
    assert_eq!(
        c.network.lookupd_tcp_addresses,
        ["lookupd-0.lookupd:4160", "127.0.0.1:4160"]
    );
    assert!(c.storage.protective_eviction_enabled);
    assert_eq!(c.storage.disk_pressure_grace_seconds, 5);
    assert_eq!(c.network.tcp_address, "127.0.0.1:2");
    assert_eq!(c.network.http_address, "127.0.0.1:3");
    assert_eq!(c.storage.data_path, Path::new("/env"));
    assert_eq!(c.queue.max_message_bytes, 1024);
    assert_eq!(c.queue.publish_ack_mode, "write_ack");
}

#[test]
fn node_id_comes_from_the_statefulset_ordinal_unless_set() {
    assert_eq!(
        load(None, &[("POD_NAME", "rq-broker-2")]).unwrap().node.id,
        3
    );
    assert_eq!(
        load(
            None,
            &[("POD_NAME", "rq-broker-2"), ("RUSTQUEUE_NODE_ID", "9")]
        )
        .unwrap()
        .node
        .id,
        9
    );
}

/// (file, environment, key the error must name)
type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn invalid_values_are_refused_with_the_key_name() {
    let cases: &[Case] = &[
        (
            None,
            &[("RUSTQUEUE_MAX_MESSAGE_BYTES", "lots")],
            "RUSTQUEUE_MAX_MESSAGE_BYTES",
        ),
        (None, &[("RUSTQUEUE_NODE_ID", "0")], "node.id"),
        (
            None,
            &[("RUSTQUEUE_TCP_ADDRESS", "nowhere")],
            "network.tcp_address",
        ),
        (
            Some("[network]\nlookupd_tcp_addresses = [\"lookupd\"]\n"),
            &[],
            "network.lookupd_tcp_addresses",
        ),
        (
            Some("[network]\nhttps_address = \"127.0.0.1:4152\"\n"),
            &[],
            "network.https_address needs [security.tls]",
        ),
        (
            Some(concat!(
                "[security.tls]\ncertificate_file = \"",
                env!("CARGO_MANIFEST_DIR"),
                "/Cargo.toml\"\nprivate_key_file = \"",
                env!("CARGO_MANIFEST_DIR"),
                "/Cargo.toml\"\nmin_version = \"tls1.0\"\n"
            )),
            &[],
            "security.tls.min_version",
        ),
        (
            None,
            &[("RUSTQUEUE_PUBLISH_ACK_MODE", "maybe")],
            "publish_ack_mode",
        ),
        (
            None,
            &[("RUSTQUEUE_DEAD_LETTER_SUFFIX", "bad/suffix")],
            "dead_letter_suffix",
        ),
        (
            None,
            &[("RUSTQUEUE_MAX_MESSAGE_BYTES", "104857601")],
            "max_message_bytes",
        ),
        (
            Some("[limits]\nheartbeat_interval_ms = 10\n"),
            &[],
            "heartbeat_interval_ms",
        ),
        (
            Some("[network]\nmax_deflate_level = 10\n"),
            &[],
            "max_deflate_level",
        ),
        (
            Some("[security]\nkodo_cleanup_enabled = true\n"),
            &[],
            "kodo_cleanup_enabled",
        ),
        (
            Some(
                "[security.tls]\ncertificate_file = \"/nope.pem\"\nprivate_key_file = \"/nope.key\"\n",
            ),
            &[],
            "certificate_file",
        ),
    ];
    for (toml, env, key) in cases {
        let err = load(*toml, env).unwrap_err().to_string();
        assert!(
            err.contains(key),
            "expected an error naming {key}, got {err}"
        );
    }
}

#[test]
fn check_config_validates_and_exits() {
    let bin = env!("CARGO_BIN_EXE_rustqueued");
    let ok = Command::new(bin)
        .arg("--check-config")
        .env("RUSTQUEUE_TCP_ADDRESS", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("configuration OK"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[queue]\nnot_a_key = 1\n").unwrap();
    let bad = Command::new(bin)
        .arg("--check-config")
        .env("RUSTQUEUE_CONFIG", &file)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not_a_key"));
}

#[test]
fn check_config_prints_toml_that_the_binary_reads_back_unchanged() {
    let bin = env!("CARGO_BIN_EXE_rustqueued");
    let overrides = [
        ("RUSTQUEUE_TCP_ADDRESS", "127.0.0.1:0"),
        ("RUSTQUEUE_MAX_TOPICS", "77"),
    ];
    let first = Command::new(bin)
        .args(["--check-config", "--lookupd-tcp-address", "127.0.0.1:4160"])
        .envs(overrides)
        .output()
        .unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let printed = String::from_utf8(first.stdout).unwrap();
    let parsed: Config = toml::from_str(&printed)
        .unwrap_or_else(|e| panic!("--check-config output is not a config file: {e}\n{printed}"));
    let with_flag = [("RUSTQUEUE_LOOKUPD_TCP_ADDRESSES", "127.0.0.1:4160")];
    let expected = load(None, &[overrides.as_slice(), with_flag.as_slice()].concat()).unwrap();
    assert_eq!(
        parsed, expected,
        "the output is the effective configuration"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("effective.toml");
    std::fs::write(&file, &printed).unwrap();
    let second = Command::new(bin)
        .arg("--config")
        .arg(&file)
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(String::from_utf8(second.stdout).unwrap(), printed);
}

#[test]
fn the_configuration_doc_shows_the_help_the_binary_prints() {
    let help = Command::new(env!("CARGO_BIN_EXE_rustqueued"))
        .arg("--help")
        .env_remove("RUSTQUEUE_CONFIG")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    assert!(
        doc.contains(&format!("$ rustqueued --help\n{help}```")),
        "docs/configuration.md does not show this --help output verbatim:\n{help}"
    );
}

#[test]
fn the_disk_guard_file_for_spawned_test_brokers_matches_the_in_process_one() {
    let dir = tempfile::tempdir().unwrap();
    let from_file = load(Some(common::DISK_GUARD_TOML), &[]).unwrap();
    let in_process = common::test_config(dir.path());
    for c in [&from_file, &in_process] {
        assert_eq!(c.storage.disk_high_watermark_percent, 100);
        assert_eq!(c.storage.disk_low_watermark_percent, 99);
        assert_eq!(c.storage.min_free_bytes, 1);
    }
}
