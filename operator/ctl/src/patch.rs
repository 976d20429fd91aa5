//! The merge patches of the RustQueue spec that `maintenance`, `storage` and `rollout` send.
//! Pure: each returns the JSON body, so the operator-facing contract is testable without a
//! cluster (docs/cli.md lists them).

use rustqueue_api::crd::{OperationPhase, RustQueue};
use serde_json::{Value, json};

/// Why a patch was not sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// `rollout approve` while no canary waits.
    #[error(
        "nothing to approve: {0}; `rollout approve` needs a canary waiting \
         (operation phase AwaitingCanaryApproval, see `rustqueuectl status`)"
    )]
    NoCanaryWaiting(String),
    /// A blank image or size.
    #[error("{0} must not be blank")]
    Blank(&'static str),
    /// A broker name that is not one of this RustQueue's.
    #[error("{broker} is not a broker of RustQueue {name} (brokers are named {name}-<ordinal>)")]
    NotABroker {
        /// The name given.
        broker: String,
        /// The RustQueue's name.
        name: String,
    },
}

fn spec(v: Value) -> Value {
    json!({ "spec": v })
}

fn rollout(v: Value) -> Value {
    spec(json!({ "rollout": v }))
}

/// `spec.maintenance = {broker, enabled}`.
pub fn maintenance(name: &str, broker: &str, enabled: bool) -> Result<Value, Refusal> {
    let ordinal = broker
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix('-'))
        .filter(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()));
    if ordinal.is_none() {
        return Err(Refusal::NotABroker {
            broker: broker.into(),
            name: name.into(),
        });
    }
    Ok(spec(
        json!({ "maintenance": { "broker": broker, "enabled": enabled } }),
    ))
}

/// `spec.storageSize = size`.
pub fn storage(size: &str) -> Result<Value, Refusal> {
    let size = size.trim();
    if size.is_empty() {
        return Err(Refusal::Blank("the storage size"));
    }
    Ok(spec(json!({ "storageSize": size })))
}

/// `rollout.paused = paused`.
pub fn pause(paused: bool) -> Value {
    rollout(json!({ "paused": paused }))
}

/// Unpause with a new `retryNonce` (the operator retries a Failed rollout when it changes).
pub fn retry(nonce: &str) -> Value {
    rollout(json!({ "paused": false, "retryNonce": nonce }))
}

/// Unpause with `rollbackToImage = image`.
pub fn rollback(image: &str) -> Result<Value, Refusal> {
    let image = image.trim();
    if image.is_empty() {
        return Err(Refusal::Blank("the rollback image"));
    }
    Ok(rollout(
        json!({ "paused": false, "rollbackToImage": image }),
    ))
}

/// Unpause with `rollbackToImage = null`: forward to `spec.image` again.
pub fn forward() -> Value {
    rollout(json!({ "paused": false, "rollbackToImage": null }))
}

/// `rollout.approvedRevision = <the canary's revision>`, only while a canary waits.
/// Returns the revision approved and the patch.
pub fn approve(rq: &RustQueue) -> Result<(String, Value), Refusal> {
    let op = rq
        .status
        .as_ref()
        .and_then(|s| s.current_operation.as_ref());
    let Some(op) = op else {
        return Err(Refusal::NoCanaryWaiting("no operation runs".into()));
    };
    if op.phase != OperationPhase::AwaitingCanaryApproval || op.revision.is_empty() {
        return Err(Refusal::NoCanaryWaiting(format!(
            "the {} operation is {:?}",
            op.kind.as_str(),
            op.phase
        )));
    }
    let patch = rollout(json!({ "approvedRevision": op.revision }));
    Ok((op.revision.clone(), patch))
}

/// A fresh retry nonce: the Unix time in nanoseconds.
pub fn retry_nonce() -> String {
    jiff::Timestamp::now().as_nanosecond().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{QueueExt, operation, queue};

    #[test]
    fn maintenance_names_the_broker_and_the_switch() {
        assert_eq!(
            maintenance("queue", "queue-1", true).unwrap(),
            json!({"spec":{"maintenance":{"broker":"queue-1","enabled":true}}})
        );
        assert_eq!(
            maintenance("queue", "queue-0", false).unwrap()["spec"]["maintenance"]["enabled"],
            false
        );
        for wrong in ["queue", "queue-", "other-1", "queue-x", "queue-1-2"] {
            assert!(
                maintenance("queue", wrong, true).is_err(),
                "{wrong} is not a broker"
            );
        }
    }

    #[test]
    fn storage_and_rollout_patches_touch_only_their_fields() {
        let table = [
            (
                storage("200Gi").unwrap(),
                json!({"spec":{"storageSize":"200Gi"}}),
            ),
            (pause(true), json!({"spec":{"rollout":{"paused":true}}})),
            (pause(false), json!({"spec":{"rollout":{"paused":false}}})),
            (
                retry("17"),
                json!({"spec":{"rollout":{"paused":false,"retryNonce":"17"}}}),
            ),
            (
                rollback("rq:old").unwrap(),
                json!({"spec":{"rollout":{"paused":false,"rollbackToImage":"rq:old"}}}),
            ),
            (
                forward(),
                json!({"spec":{"rollout":{"paused":false,"rollbackToImage":null}}}),
            ),
        ];
        for (got, want) in table {
            assert_eq!(got, want);
        }
        assert_eq!(storage(" "), Err(Refusal::Blank("the storage size")));
        assert_eq!(rollback(""), Err(Refusal::Blank("the rollback image")));
    }

    #[test]
    fn approve_sets_the_revision_the_canary_waits_with() {
        let rq = queue().with_operation(operation("Rollout", "AwaitingCanaryApproval", "abc123"));
        let (rev, patch) = approve(&rq).unwrap();
        assert_eq!(rev, "abc123");
        assert_eq!(
            patch,
            json!({"spec":{"rollout":{"approvedRevision":"abc123"}}})
        );
    }

    #[test]
    fn approve_refuses_unless_a_canary_waits() {
        let err = approve(&queue()).unwrap_err();
        assert!(err.to_string().contains("no operation runs"), "{err}");
        for phase in ["Paused", "Draining", "Completed", "Failed"] {
            let rq = queue().with_operation(operation("Rollout", phase, "abc123"));
            let err = approve(&rq).unwrap_err();
            assert!(err.to_string().contains(phase), "{phase}: {err}");
        }
    }

    #[test]
    fn retry_nonces_change() {
        let a = retry_nonce();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_ne!(a, retry_nonce());
    }
}
