//! `[tiering]`: the rules of the section, and the engine's [`TieringOptions`] built from it
//! with the credentials read from their files or the environment (docs/configuration.md).

use std::path::Path;
use std::time::Duration;

use rustqueue_api::broker_config::{
    MAX_CHECKPOINT_UPLOAD_SECONDS, TIERING_ACCESS_KEY_ENV, TIERING_SECRET_KEY_ENV, TieringConfig,
};
use rustqueue_engine::{BucketConfig, Credentials, LocalRetention, ObjectKey, TieringOptions};

use super::ConfigError;

fn invalid(msg: String) -> ConfigError {
    ConfigError::Invalid(msg)
}

/// The largest `local_retention_seconds`: ten years.
pub const MAX_LOCAL_RETENTION_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Checks `[tiering]` without reading any file or variable: local retention's ranges, bucket,
/// endpoint, region, prefix, and the credential files named in pairs.
pub fn validate(t: &TieringConfig) -> Result<(), ConfigError> {
    if let Some(secs) = t.local_retention_seconds
        && !(1..=MAX_LOCAL_RETENTION_SECONDS).contains(&secs)
    {
        return Err(invalid(format!(
            "tiering.local_retention_seconds = {secs} is out of range: give 1 to \
             {MAX_LOCAL_RETENTION_SECONDS} seconds, or leave it unset to keep the local copy of \
             every uploaded segment however old (docs/tiering.md, local retention)"
        )));
    }
    if !(1..=MAX_CHECKPOINT_UPLOAD_SECONDS).contains(&t.checkpoint_upload_seconds) {
        return Err(invalid(format!(
            "tiering.checkpoint_upload_seconds = {} is out of range: give 1 to \
             {MAX_CHECKPOINT_UPLOAD_SECONDS} seconds (default 60). It is how often the topics' \
             checkpoints go up, and so about how much a lost volume's restore cannot account for",
            t.checkpoint_upload_seconds
        )));
    }
    if t.bucket.is_empty() {
        return Err(invalid(
            "tiering.bucket is empty: name the bucket sealed segments are uploaded to (it must \
             exist; the broker never creates it)"
                .into(),
        ));
    }
    if !valid_bucket_name(&t.bucket) {
        return Err(invalid(format!(
            "tiering.bucket = {:?} is not an S3 bucket name: 3 to 63 characters of a-z, 0-9, '.' \
             and '-', starting and ending with a letter or digit, no \"..\" (the bucket would \
             refuse every upload with InvalidBucketName)",
            t.bucket
        )));
    }
    let http = t.endpoint.starts_with("http://");
    let host = t
        .endpoint
        .strip_prefix("https://")
        .or_else(|| t.endpoint.strip_prefix("http://"));
    if host.is_none_or(str::is_empty) {
        return Err(invalid(format!(
            "tiering.endpoint = {:?} is not an https:// URL of the S3 endpoint",
            t.endpoint
        )));
    }
    if http && !t.allow_http {
        return Err(invalid(format!(
            "tiering.endpoint = {:?} is plain http: the data and the request signatures would \
             cross the network in clear; use https, or set tiering.allow_http = true for a test \
             server on a trusted network",
            t.endpoint
        )));
    }
    if t.region.is_empty() {
        return Err(invalid(
            "tiering.region is empty: name the region requests are signed for (most \
             S3-compatible servers take us-east-1)"
                .into(),
        ));
    }
    if let Some(prefix) = &t.prefix
        && let Err(e) = ObjectKey::new(prefix.clone())
    {
        return Err(invalid(format!(
            "tiering.prefix: {e}; use `/`-separated segments of [A-Za-z0-9._-] (cluster-a/prod)"
        )));
    }
    match (&t.access_key_file, &t.secret_key_file) {
        (None, None) => {}
        (Some(a), Some(s)) => {
            for (key, path) in [("access_key_file", a), ("secret_key_file", s)] {
                if !path.is_file() {
                    return Err(invalid(format!(
                        "tiering.{key} = {} does not exist",
                        path.display()
                    )));
                }
            }
        }
        _ => {
            return Err(invalid(
                "tiering.access_key_file and tiering.secret_key_file go together: set both, or \
                 neither to take the credentials from AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// The access key pair: from the two files when `[tiering]` names them, else from the standard
/// environment variables.
pub fn credentials(
    t: &TieringConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Credentials, ConfigError> {
    let (access_key_id, secret_access_key) = match (&t.access_key_file, &t.secret_key_file) {
        (Some(a), Some(s)) => (
            read_secret("access_key_file", a)?,
            read_secret("secret_key_file", s)?,
        ),
        _ => {
            let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
            match (var(TIERING_ACCESS_KEY_ENV), var(TIERING_SECRET_KEY_ENV)) {
                (Some(a), Some(s)) => (a.trim().to_owned(), s.trim().to_owned()),
                _ => {
                    return Err(invalid(format!(
                        "[tiering] has no credentials: set tiering.access_key_file and \
                         tiering.secret_key_file, or the environment variables \
                         {TIERING_ACCESS_KEY_ENV} and {TIERING_SECRET_KEY_ENV}"
                    )));
                }
            }
        }
    };
    Ok(Credentials {
        access_key_id,
        secret_access_key,
    })
}

fn read_secret(key: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        invalid(format!(
            "tiering.{key} = {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    let value = text.trim();
    if value.is_empty() {
        return Err(invalid(format!(
            "tiering.{key} = {} is empty",
            path.display()
        )));
    }
    Ok(value.to_owned())
}

/// The engine's uploads for `[tiering]`, or `None` without the section. Reads the credentials.
pub fn options(
    t: Option<&TieringConfig>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TieringOptions>, ConfigError> {
    let Some(t) = t else { return Ok(None) };
    let mut bucket = BucketConfig::new(
        t.endpoint.clone(),
        t.region.clone(),
        t.bucket.clone(),
        credentials(t, env)?,
    );
    bucket.prefix = t.prefix.clone();
    bucket.allow_http = t.allow_http;
    let mut options = TieringOptions::new(bucket);
    options.upload_after = Duration::from_secs(t.upload_after_seconds);
    options.checkpoint_interval = Duration::from_secs(t.checkpoint_upload_seconds);
    options.local_retention = LocalRetention {
        bytes: t.local_retention_bytes,
        age: t.local_retention_seconds.map(Duration::from_secs),
    };
    Ok(Some(options))
}

/// The S3 bucket naming rules every S3 server checks (AWS's general-purpose buckets): a name
/// that breaks them is refused by the server on every request, so it is refused here first.
fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
}
