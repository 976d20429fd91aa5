//! `[tiering]` (docs/configuration.md): what the section accepts, what it refuses and what each
//! refusal says to do, credentials from files or the standard environment variables, and the
//! binary's `--check-config` over it.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use rustqueue_server::{Config, ConfigError, ConfigFile};

const ENV_KEYS: [(&str, &str); 2] = [
    ("AWS_ACCESS_KEY_ID", "AK"),
    ("AWS_SECRET_ACCESS_KEY", "the-secret-key"),
];

/// Loads `toml` (`{dir}` replaced by a directory holding the files `access` = "AK\n",
/// `secret` = "SK\n" and `empty` = "\n") with `env`.
fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("access", "AK\n"), ("secret", "SK\n"), ("empty", "\n")] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().join("rq.toml");
    std::fs::write(
        &path,
        toml.replace("{dir}", &dir.path().display().to_string()),
    )
    .unwrap();
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load(Some(&path), |k| env.get(k).cloned())
}

/// A configuration file, its environment, and what its refusal must say.
type Refusal = (
    String,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const MINIMAL: &str = "[tiering]\nbucket = \"rq-b\"\nendpoint = \"https://s3.example.test\"\n";

#[test]
fn without_the_section_tiering_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rq.toml");
    std::fs::write(&path, "").unwrap();
    let cfg = Config::load(Some(&path), |_| None).unwrap();
    assert_eq!(cfg.tiering, None);
}

#[test]
fn accepted_sections_have_the_documented_defaults() {
    let cfg = load(MINIMAL, &ENV_KEYS).unwrap();
    let t = cfg.tiering.unwrap();
    assert_eq!(t.region, "us-east-1");
    assert_eq!(t.upload_after_seconds, 0, "uploaded as soon as sealed");
    assert_eq!(t.checkpoint_upload_seconds, 60, "checkpoints every minute");
    assert!(!t.allow_http);
    assert_eq!(t.prefix, None);
    assert_eq!(
        (t.local_retention_bytes, t.local_retention_seconds),
        (None, None),
        "every local copy kept"
    );
    let cases: &[(&str, &[(&str, &str)])] = &[
        (MINIMAL, &ENV_KEYS),
        (
            "[tiering]\nbucket = \"rq-b\"\nendpoint = \"https://s3.example.test:9000\"\n\
             region = \"eu-west-3\"\nprefix = \"cluster-a/prod\"\nupload_after_seconds = 60\n\
             checkpoint_upload_seconds = 86400\n\
             access_key_file = \"{dir}/access\"\nsecret_key_file = \"{dir}/secret\"\n",
            &[],
        ),
        (
            "[tiering]\nbucket = \"rq-b\"\nendpoint = \"http://127.0.0.1:7070\"\nallow_http = true\n",
            &ENV_KEYS,
        ),
        (
            "[storage]\nfeature_level = 3\n[tiering]\nbucket = \"rq-b\"\nendpoint = \"https://s3.example.test\"\n\
             local_retention_bytes = 0\nlocal_retention_seconds = 315360000\n",
            &ENV_KEYS,
        ),
        (
            "[storage]\nfeature_level = 3\n[tiering]\nbucket = \"rq-b\"\nendpoint = \"https://s3.example.test\"\n\
             local_retention_bytes = 67108864\nlocal_retention_seconds = 1\n",
            &ENV_KEYS,
        ),
        // Files win over the environment.
        (
            "[tiering]\nbucket = \"rq-b\"\nendpoint = \"https://s3.example.test\"\n\
             access_key_file = \"{dir}/access\"\nsecret_key_file = \"{dir}/secret\"\n",
            &[("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "")],
        ),
    ];
    for (i, (toml, env)) in cases.iter().enumerate() {
        if let Err(e) = load(toml, env) {
            panic!("case {i} refused: {e}\n{toml}");
        }
    }
}

#[test]
fn refusals_name_the_key_and_what_to_do() {
    let with = |extra: &str| format!("{MINIMAL}{extra}");
    let bare = |body: &str| format!("[tiering]\n{body}");
    let cases: Vec<Refusal> = vec![
        (
            with("local_retention_seconds = 0\n"),
            &ENV_KEYS,
            &[
                "tiering.local_retention_seconds = 0",
                "1 to 315360000",
                "leave it unset",
            ],
        ),
        (
            with("local_retention_seconds = 315360001\n"),
            &ENV_KEYS,
            &[
                "tiering.local_retention_seconds = 315360001",
                "out of range",
            ],
        ),
        (
            with("local_retention_bytes = -1\n"),
            &ENV_KEYS,
            &["local_retention_bytes"],
        ),
        (
            bare("endpoint = \"https://s3.example.test\"\n"),
            &ENV_KEYS,
            &["tiering.bucket is empty", "must exist"],
        ),
        (
            bare("bucket = \"rq-b\"\n"),
            &ENV_KEYS,
            &["tiering.endpoint = \"\"", "https:// URL"],
        ),
        (
            bare("bucket = \"rq-b\"\nendpoint = \"s3.example.test\"\n"),
            &ENV_KEYS,
            &["tiering.endpoint", "https:// URL"],
        ),
        (
            bare("bucket = \"rq-b\"\nendpoint = \"https://\"\n"),
            &ENV_KEYS,
            &["tiering.endpoint", "https:// URL"],
        ),
        (
            bare("bucket = \"rq-b\"\nendpoint = \"http://127.0.0.1:7070\"\n"),
            &ENV_KEYS,
            &["plain http", "use https", "tiering.allow_http = true"],
        ),
        (
            with("region = \"\"\n"),
            &ENV_KEYS,
            &["tiering.region is empty", "us-east-1"],
        ),
        (
            with("prefix = \"/cluster-a\"\n"),
            &ENV_KEYS,
            &["tiering.prefix", "empty segment", "[A-Za-z0-9._-]"],
        ),
        (
            with("prefix = \"cluster a\"\n"),
            &ENV_KEYS,
            &["tiering.prefix", "only ASCII letters"],
        ),
        (
            with("access_key_file = \"{dir}/access\"\n"),
            &ENV_KEYS,
            &["go together", "set both"],
        ),
        (
            with("access_key_file = \"{dir}/nope\"\nsecret_key_file = \"{dir}/secret\"\n"),
            &ENV_KEYS,
            &["tiering.access_key_file", "nope does not exist"],
        ),
        (
            with("access_key_file = \"{dir}/access\"\nsecret_key_file = \"{dir}/empty\"\n"),
            &[],
            &["tiering.secret_key_file", "is empty"],
        ),
        (
            MINIMAL.to_owned(),
            &[],
            &[
                "[tiering] has no credentials",
                "access_key_file",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
            ],
        ),
        (
            MINIMAL.to_owned(),
            &[("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", " ")],
            &["[tiering] has no credentials"],
        ),
        // The secret is never a key of the file; a misspelt key is refused by name.
        (with("secret_key = \"SK\"\n"), &ENV_KEYS, &["secret_key"]),
        (with("bukcet = \"b\"\n"), &ENV_KEYS, &["bukcet"]),
    ];
    refused(cases);
}

#[test]
fn local_retention_below_storage_feature_level_three_is_refused_naming_the_level() {
    refused(vec![
        (
            format!("{MINIMAL}local_retention_bytes = 0\n"),
            &ENV_KEYS,
            &[
                "need storage.feature_level = 3 (it is 1)",
                "set storage.feature_level = 3",
            ],
        ),
        (
            format!("[storage]\nfeature_level = 2\n{MINIMAL}local_retention_seconds = 60\n"),
            &ENV_KEYS,
            &["need storage.feature_level = 3 (it is 2)"],
        ),
    ]);
}

#[test]
fn a_checkpoint_period_outside_a_second_to_a_day_is_refused() {
    let with = |extra: &str| format!("{MINIMAL}{extra}");
    refused(vec![
        (
            with("checkpoint_upload_seconds = 0\n"),
            &ENV_KEYS,
            &["tiering.checkpoint_upload_seconds = 0", "1 to 86400"],
        ),
        (
            with("checkpoint_upload_seconds = 86401\n"),
            &ENV_KEYS,
            &["tiering.checkpoint_upload_seconds = 86401", "out of range"],
        ),
    ]);
}

#[test]
fn bucket_names_an_s3_server_would_refuse_are_refused_at_load() {
    let bare = |body: &str| format!("[tiering]\n{body}");
    let cases: Vec<Refusal> = vec![
        (
            bare("bucket = \"rq\"\nendpoint = \"https://s3.example.test\"\n"),
            &ENV_KEYS,
            &[
                "tiering.bucket = \"rq\"",
                "not an S3 bucket name",
                "InvalidBucketName",
            ],
        ),
        (
            bare("bucket = \"Rq-Bucket\"\nendpoint = \"https://s3.example.test\"\n"),
            &ENV_KEYS,
            &[
                "tiering.bucket = \"Rq-Bucket\"",
                "3 to 63 characters of a-z",
            ],
        ),
        (
            bare("bucket = \"rq..b\"\nendpoint = \"https://s3.example.test\"\n"),
            &ENV_KEYS,
            &["tiering.bucket = \"rq..b\"", "not an S3 bucket name"],
        ),
        (
            bare("bucket = \"-rq\"\nendpoint = \"https://s3.example.test\"\n"),
            &ENV_KEYS,
            &[
                "tiering.bucket = \"-rq\"",
                "starting and ending with a letter or digit",
            ],
        ),
    ];
    refused(cases);
    for name in ["rq-b", "abc", "a.b-c.0", &"x".repeat(63)] {
        let toml =
            format!("[tiering]\nbucket = {name:?}\nendpoint = \"https://s3.example.test\"\n");
        assert!(
            load(&toml, &ENV_KEYS).is_ok(),
            "{name:?} is a valid bucket name"
        );
    }
    let toml = format!(
        "[tiering]\nbucket = {:?}\nendpoint = \"https://s3.example.test\"\n",
        "x".repeat(64)
    );
    assert!(
        load(&toml, &ENV_KEYS).is_err(),
        "64 characters is one too many"
    );
}

/// Each configuration is refused with an error naming every wanted string.
fn refused(cases: Vec<Refusal>) {
    for (toml, env, wants) in cases {
        let err = match load(&toml, env) {
            Ok(_) => panic!("accepted:\n{toml}"),
            Err(e) => e.to_string(),
        };
        for want in wants {
            assert!(err.contains(want), "{err:?} lacks {want:?}\n{toml}");
        }
    }
}

#[test]
fn check_config_refuses_missing_credentials_and_prints_a_section_it_reads_back() {
    let bin = env!("CARGO_BIN_EXE_rustqueued");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rq.toml");
    std::fs::write(
        &file,
        format!(
            "{MINIMAL}prefix = \"cluster-a\"\nupload_after_seconds = 30\n\
             checkpoint_upload_seconds = 15\n"
        ),
    )
    .unwrap();
    let check = |env: &[(&str, &str)]| {
        Command::new(bin)
            .arg("--config")
            .arg(&file)
            .arg("--check-config")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let refused = check(&[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("[tiering] has no credentials"), "{stderr}");

    let ok = check(&ENV_KEYS);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let printed = String::from_utf8(ok.stdout).unwrap();
    assert!(
        !printed.contains("the-secret-key"),
        "the secret is never printed:\n{printed}"
    );
    let parsed = Config::from_toml(&printed, Path::new("printed")).unwrap();
    let t = parsed.tiering.expect("the section is printed");
    assert_eq!(
        (
            t.bucket.as_str(),
            t.prefix.as_deref(),
            t.upload_after_seconds,
            t.checkpoint_upload_seconds
        ),
        ("rq-b", Some("cluster-a"), 30, 15)
    );
}
