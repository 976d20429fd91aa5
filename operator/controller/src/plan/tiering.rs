//! Tiering in the plan (docs/tiering.md, "The operator's part"): the credentials Secret gate,
//! the `RestoringFromBucket` phase of a broker whose restore init container runs, and
//! `status.restores`, the latest restore of each broker as its init container reported it.

use rustqueue_api::broker_config::MAX_CHECKPOINT_UPLOAD_SECONDS;
use rustqueue_api::contract::{LOCAL_RETENTION_FEATURE_LEVEL, RestoreOutcome};
use rustqueue_api::crd::{BrokerRestore, MAX_LOCAL_RETENTION_SECONDS, RustQueueSpec};

use super::model::{RESTORING, RestoreRun, TieringSecret, last_line};
use super::{Observed, Phase, Plan};

/// `status.restores` phase of a finished restore.
pub const RESTORED: &str = "Restored";
/// `status.restores` phase of a failed restore.
pub const FAILED: &str = "Failed";

/// What the CRD schema cannot refuse of `spec.tiering`, or an older CRD let through: the broker
/// would refuse the rendered `[tiering]` (docs/configuration.md), or the operator could not
/// write it (TOML integers are signed 64-bit).
pub(super) fn validate(spec: &RustQueueSpec) -> Vec<String> {
    let Some(t) = &spec.tiering else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    let b = t.bucket.as_bytes();
    let bucket_ok = (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && !t.bucket.contains("..");
    if !bucket_ok {
        errs.push(format!(
            "spec.tiering.bucket {:?} is not an S3 bucket name: 3 to 63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit, no '..'",
            t.bucket
        ));
    }
    let host = t
        .endpoint
        .strip_prefix("https://")
        .or_else(|| t.endpoint.strip_prefix("http://"));
    if host.is_none_or(str::is_empty) {
        errs.push(format!(
            "spec.tiering.endpoint {:?} is not an https:// URL of the S3 endpoint",
            t.endpoint
        ));
    } else if t.endpoint.starts_with("http://") && !t.allow_http {
        errs.push("spec.tiering.endpoint is plain http: use https, or set spec.tiering.allowHttp for a test server on a trusted network".into());
    }
    if t.region.trim().is_empty() {
        errs.push("spec.tiering.region is empty: name the region requests are signed for (most S3-compatible servers take us-east-1)".into());
    }
    if let Some(p) = &t.prefix {
        let key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if p.len() > 512
            || p.split('/').any(|seg| {
                seg.is_empty() || seg == "." || seg == ".." || !seg.chars().all(key_char)
            })
        {
            errs.push(format!(
                "spec.tiering.prefix {p:?} must be `/`-separated segments of [A-Za-z0-9._-], none '.' or '..', at most 512 bytes (cluster-a/prod)"
            ));
        }
    }
    if !(1..=MAX_CHECKPOINT_UPLOAD_SECONDS).contains(&t.checkpoint_upload_seconds) {
        errs.push(format!(
            "spec.tiering.checkpointUploadSeconds ({}) must be 1 to {MAX_CHECKPOINT_UPLOAD_SECONDS}",
            t.checkpoint_upload_seconds
        ));
    }
    if t.local_retention_seconds
        .is_some_and(|s| !(1..=MAX_LOCAL_RETENTION_SECONDS).contains(&s))
    {
        errs.push(format!(
            "spec.tiering.localRetentionSeconds must be 1 to {MAX_LOCAL_RETENTION_SECONDS}, or unset for no age limit"
        ));
    }
    if t.local_retention() && spec.storage_feature_level < LOCAL_RETENTION_FEATURE_LEVEL {
        errs.push(format!(
            "spec.tiering.localRetentionBytes/localRetentionSeconds need spec.storageFeatureLevel {LOCAL_RETENTION_FEATURE_LEVEL} (it is {}): the level fences a rollback to a release that would drop evicted segments, and the broker refuses local retention below it; roll an image that writes level {LOCAL_RETENTION_FEATURE_LEVEL} first, then raise the level (docs/tiering.md)",
            spec.storage_feature_level
        ));
    }
    let too_big = |v: u64| i64::try_from(v).is_err();
    if too_big(t.upload_after_seconds) || t.local_retention_bytes.is_some_and(too_big) {
        errs.push("spec.tiering.uploadAfterSeconds and localRetentionBytes must be at most 9223372036854775807".into());
    }
    errs
}

/// `spec.tiering` removed after local retention ran (`status.tieringLocalRetentionUsed`). The
/// CRD refuses that at `kubectl apply`; this catches an object written under an older CRD,
/// which would otherwise roll brokers onto a config whose evicted segments no consumer gets.
pub(super) fn removed_after_retention(
    spec: &RustQueueSpec,
    previous: &rustqueue_api::crd::RustQueueStatus,
) -> Option<String> {
    (spec.tiering.is_none() && previous.tiering_local_retention_used == Some(true)).then(|| {
        "spec.tiering was removed, but local retention has run (status.tieringLocalRetentionUsed): evicted segments exist only in the bucket and would never be delivered again; put spec.tiering back as it was (docs/tiering.md, turning tiering off)".to_string()
    })
}

/// Why the bucket credentials cannot be mounted, naming the Secret, the keys and what to do;
/// `None` when they can (or there is no tiering).
pub(super) fn secret_problem(spec: &RustQueueSpec, secret: &TieringSecret) -> Option<String> {
    let t = spec.tiering.as_ref()?;
    let c = &t.credentials_secret;
    let create = format!(
        "create it in the RustQueue's namespace with keys {} (the access key id) and {} (the secret access key), e.g. `kubectl create secret generic {} --from-literal={}=... --from-literal={}=...`",
        c.access_key_id_key,
        c.secret_access_key_key,
        c.name,
        c.access_key_id_key,
        c.secret_access_key_key
    );
    match secret {
        TieringSecret::Valid { .. } => None,
        TieringSecret::Missing { name } => Some(format!(
            "Secret {name} named by spec.tiering.credentialsSecret does not exist: {create}; the brokers are left as they run until it does"
        )),
        TieringSecret::MissingKeys { name, keys } => Some(format!(
            "Secret {name} named by spec.tiering.credentialsSecret has no (or an empty) key {}: add it, or name the keys it has in spec.tiering.credentialsSecret.accessKeyIdKey / secretAccessKeyKey; the brokers are left as they run until then",
            keys.join(" and ")
        )),
        // Observed before the spec had tiering: the next reconcile reads it.
        TieringSecret::Unused => Some(format!(
            "Secret {} named by spec.tiering.credentialsSecret was not read yet",
            c.name
        )),
    }
}

/// `status.restores` after this reading: each broker's latest restore. A restore that ran
/// (or runs, or failed) is recorded under its Pod's uid; a look that found data, or a
/// bucket with nothing for the node, replaces nothing but its own `RestoringFromBucket`
/// entry. Finished entries of Pods gone stay: they are the only record of what a restore
/// lost; a `RestoringFromBucket` entry goes with its Pod.
pub(super) fn records(obs: &Observed, previous: &[BrokerRestore]) -> Vec<BrokerRestore> {
    let mut out: Vec<BrokerRestore> = previous.to_vec();
    for b in obs.brokers.iter().filter(|b| !b.terminating) {
        let entry = |phase: &str, message: String| BrokerRestore {
            broker: b.name.clone(),
            phase: phase.into(),
            pod_uid: b.uid.clone(),
            started_at: None,
            finished_at: None,
            messages_restored: None,
            lost_messages: None,
            damaged_objects: None,
            message,
        };
        let next = match &b.restore {
            None | Some(RestoreRun::Pending) => continue,
            Some(RestoreRun::Running { started_at }) => BrokerRestore {
                started_at: started_at.clone(),
                ..entry(
                    RESTORING,
                    "its restore init container runs: an empty volume is rebuilt from the bucket before the broker starts".into(),
                )
            },
            Some(RestoreRun::Done {
                summary,
                started_at,
                finished_at,
            }) if summary.outcome == RestoreOutcome::Restored => BrokerRestore {
                started_at: started_at.clone(),
                finished_at: finished_at.clone(),
                messages_restored: Some(summary.messages_restored),
                lost_messages: Some(summary.lost_messages),
                damaged_objects: Some(summary.damaged_objects),
                ..entry(RESTORED, summary.describe())
            },
            Some(RestoreRun::Done { .. }) => {
                out.retain(|r| !(r.broker == b.name && r.pod_uid == b.uid && r.phase == RESTORING));
                continue;
            }
            Some(RestoreRun::Failed {
                message,
                finished_at,
            }) => BrokerRestore {
                finished_at: finished_at.clone(),
                ..entry(FAILED, last_line(message))
            },
        };
        match out.iter_mut().find(|r| r.broker == b.name) {
            Some(r) => *r = next,
            None => out.push(next),
        }
    }
    // A restore whose Pod is gone is not running: its next Pod reports again (a restore cut
    // short fails there, visibly).
    out.retain(|r| {
        r.phase != RESTORING
            || obs
                .brokers
                .iter()
                .any(|b| b.uid == r.pod_uid && !b.terminating)
    });
    out.sort_by(|a, b| a.broker.cmp(&b.broker));
    // The CRD bounds the list (a status write over it would fail every reconcile).
    out.truncate(MAX_RESTORE_RECORDS);
    out
}

/// The most `status.restores` entries (the CRD's `maxItems`).
const MAX_RESTORE_RECORDS: usize = 500;

/// While a broker is down for its restore, the phase says so instead of `WaitingForBrokers`
/// (or `Scaling`): which broker, and why it is not Ready yet; a failed restore needs a person
/// (`RestoreFromBucketFailed`, Degraded).
pub(super) fn overlay(obs: &Observed, out: &mut Plan) {
    if !matches!(out.phase, Phase::WaitingForBrokers | Phase::Scaling) {
        return;
    }
    let live = || obs.brokers.iter().filter(|b| !b.terminating);
    let failed: Vec<String> = live()
        .filter_map(|b| match &b.restore {
            Some(RestoreRun::Failed { message, .. }) => {
                Some(format!("{}: {}", b.name, last_line(message)))
            }
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        out.phase = Phase::RestoreFromBucketFailed;
        out.message = format!(
            "the restore from the bucket failed, so the broker does not start ({}); read `kubectl logs <pod> -c restore`, fix the cause (the bucket, its credentials, a volume a restore was cut short on: docs/operations.md) and delete the Pod to run it again",
            failed.join("; ")
        );
        return;
    }
    let restoring: Vec<&str> = live()
        .filter(|b| matches!(b.restore, Some(RestoreRun::Running { .. })))
        .map(|b| b.name.as_str())
        .collect();
    if !restoring.is_empty() {
        out.phase = Phase::RestoringFromBucket;
        out.message = format!(
            "{} not started yet: the restore init container runs, rebuilding an empty volume (a replaced PVC) from the bucket's uploaded segments and checkpoints (a volume holding data is only looked at); the broker starts when it ends, and status.restores has the report",
            restoring.join(", ")
        );
    }
}
