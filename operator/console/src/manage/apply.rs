//! `apply`: consumes the action token, re-checks everything under the mutation lock, and
//! records the operation in the catalog object for the reconciler to carry out.

use rustqueue_api::contract::ManageKind;
use rustqueue_api::crd::{
    CatalogAction, CatalogOperation, CatalogPhase, RustQueueChannelSpec, RustQueueTopicSpec,
};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::Manager;
use super::catalog::{Catalog, new_channel, new_topic};
use super::decide::{self, Decision, View};
use super::error::{ApiError, codes};
use super::request::{ActionRequest, UiAction};
use super::session::Challenge;
use crate::cluster::StoreError;
use crate::snapshot::ClusterView;

/// An accepted apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The operation id the brokers will see.
    pub operation: CatalogOperation,
    /// The object's revision after the write.
    pub resource_revision: u64,
    /// `topic <topic>` or `channel <topic>/<channel>`.
    pub target: String,
}

impl Accepted {
    /// The 202 body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "status": "accepted",
            "operation_id": self.operation.id,
            "resource_revision": self.resource_revision,
            "refresh_required": true,
        })
    }
}

/// `op-` and 32 hex digits of SHA-256 over the token, kind, topic and channel.
pub fn operation_id(token: &str, req: &ActionRequest) -> String {
    let mut h = Sha256::new();
    for part in [
        token,
        match req.kind {
            ManageKind::Topic => "topic",
            ManageKind::Channel => "channel",
        },
        &req.topic,
        req.channel.as_deref().unwrap_or(""),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let digest = h.finalize();
    format!("op-{}", hex::encode(digest.get(..16).unwrap_or_default()))
}

/// Takes the token out of the session and checks it fits the request.
fn take_token(
    m: &Manager,
    session: &str,
    req: &ActionRequest,
) -> Result<(String, Challenge), ApiError> {
    let expired = || {
        ApiError::new(
            codes::ACTION_TOKEN_EXPIRED,
            "the action token is unknown, used or expired: preview again",
        )
    };
    let token = req.action_token.clone().ok_or_else(expired)?;
    let now = crate::now_ms();
    let ch = m
        .sessions()
        .get(session, now)
        .and_then(|s| s.take(&token, now))
        .ok_or_else(expired)?;
    if ch.request != req.fingerprint() {
        return Err(ApiError::new(
            codes::ACTION_TOKEN_MISMATCH,
            "the action token was issued for another kind, action, topic or channel",
        ));
    }
    if let Some(expected) = &ch.confirmation
        && req.confirmation.as_deref() != Some(expected.as_str())
    {
        return Err(ApiError::new(
            codes::CONFIRMATION_MISMATCH,
            format!("type {expected} to confirm"),
        ));
    }
    Ok((token, ch))
}

/// Applies `req` for session `session`.
pub async fn apply(m: &Manager, session: &str, req: &ActionRequest) -> Result<Accepted, ApiError> {
    req.validate()?;
    let (token, ch) = take_token(m, session, req)?;
    let _guard = m.shared.mutation.lock().await;
    let now = crate::now_ms();
    if ch.expires_at_ms <= now {
        return Err(ApiError::new(
            codes::ACTION_TOKEN_EXPIRED,
            "the action token expired",
        ));
    }
    let snapshot = m.shared.snapshot().ok_or_else(|| {
        ApiError::new(
            codes::MANAGEMENT_UNAVAILABLE,
            "no snapshot has been collected yet",
        )
    })?;
    let catalog = Catalog::list(m.store.as_ref())
        .await
        .map_err(|e| ApiError::new(codes::MANAGEMENT_UNAVAILABLE, e))?;
    let view = View {
        snapshot: &snapshot,
        catalog: &catalog,
        now_ms: now,
        staleness_ms: m.staleness_ms(),
    };
    decide::fresh(&view)?;
    if decide::subject_of(req, &view) != ch.subject {
        return Err(changed("the object changed since the preview"));
    }
    let d = recheck(req, &view, &ch)?;
    let tombstone = i64::try_from(now + m.config.tombstone.as_millis() as u64).unwrap_or(i64::MAX);
    let write = Write {
        req,
        decision: &d,
        op_id: operation_id(&token, req),
        now: i64::try_from(now).unwrap_or(i64::MAX),
        tombstone,
    };
    persist(m, &write, &catalog, &snapshot.cluster).await
}

/// The decision again; a new topic keeps the owner its preview chose (if still healthy).
fn recheck(req: &ActionRequest, view: &View<'_>, ch: &Challenge) -> Result<Decision, ApiError> {
    let mut d = decide::decide(req, view)?;
    let new_topic = req.kind == ManageKind::Topic && d.action == CatalogAction::Create;
    if new_topic {
        decide::owners_healthy(&ch.owners, &view.snapshot.brokers)?;
        d.owners.clone_from(&ch.owners);
    } else if d.owners != ch.owners {
        return Err(changed(format!(
            "the owners changed since the preview ({} now)",
            d.owners.join(", ")
        )));
    }
    Ok(d)
}

fn changed(detail: impl Into<String>) -> ApiError {
    ApiError::new(codes::RESOURCE_CHANGED, detail)
}

struct Write<'a> {
    req: &'a ActionRequest,
    decision: &'a Decision,
    op_id: String,
    now: i64,
    tombstone: i64,
}

/// The next phase, revision, operation and tombstone of an object (pure).
struct Next {
    phase: CatalogPhase,
    revision: u64,
    operation: CatalogOperation,
    tombstone: Option<i64>,
}

fn next(
    w: &Write<'_>,
    revision: u64,
    current: Option<&CatalogOperation>,
    tombstone: Option<i64>,
) -> Next {
    let action = w.decision.action;
    let operation = match (w.req.action, current) {
        (UiAction::Retry, Some(op)) => CatalogOperation {
            attempt: op.attempt + 1,
            updated_at_ms: w.now,
            ..op.clone()
        },
        _ => CatalogOperation {
            id: w.op_id.clone(),
            action,
            completed_owners: Vec::new(),
            attempt: 1,
            created_at_ms: w.now,
            updated_at_ms: w.now,
        },
    };
    let tombstone = match action {
        CatalogAction::Create => None,
        CatalogAction::Delete if w.req.action != UiAction::Retry => Some(w.tombstone),
        _ => tombstone,
    };
    Next {
        phase: if action == CatalogAction::Create {
            CatalogPhase::Preparing
        } else {
            CatalogPhase::Applying
        },
        revision: revision + 1,
        operation,
        tombstone,
    }
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Conflict(d) => changed(format!("the object changed while writing: {d}")),
        e => ApiError::new(
            codes::MANAGEMENT_UNAVAILABLE,
            format!("writing the catalog: {e}"),
        ),
    }
}

async fn persist(
    m: &Manager,
    w: &Write<'_>,
    catalog: &Catalog,
    cluster: &ClusterView,
) -> Result<Accepted, ApiError> {
    match w.req.kind {
        ManageKind::Topic => persist_topic(m, w, catalog, cluster).await,
        ManageKind::Channel => persist_channel(m, w, catalog, cluster).await,
    }
}

async fn persist_topic(
    m: &Manager,
    w: &Write<'_>,
    catalog: &Catalog,
    cluster: &ClusterView,
) -> Result<Accepted, ApiError> {
    let existing = catalog.topic(&w.req.topic).cloned();
    let mut t = existing.clone().unwrap_or_else(|| {
        new_topic(
            cluster,
            RustQueueTopicSpec {
                queue: cluster.name.clone(),
                topic: w.req.topic.clone(),
                owners: Vec::new(),
                phase: CatalogPhase::Preparing,
                revision: 0,
                paused: false,
                tombstone_until_ms: None,
                last_error: None,
                operation: None,
            },
        )
    });
    let n = next(
        w,
        t.spec.revision,
        t.spec.operation.as_ref(),
        t.spec.tombstone_until_ms,
    );
    if w.decision.action == CatalogAction::Create {
        t.spec.paused = false;
    }
    t.spec.owners.clone_from(&w.decision.owners);
    t.spec.phase = n.phase;
    t.spec.revision = n.revision;
    t.spec.tombstone_until_ms = n.tombstone;
    t.spec.last_error = None;
    let operation = n.operation.clone();
    t.spec.operation = Some(n.operation);
    let saved = match existing {
        Some(_) => m.store.replace_topic(t).await,
        None => m.store.create_topic(t).await,
    }
    .map_err(store_error)?;
    Ok(Accepted {
        operation,
        resource_revision: saved.spec.revision,
        target: format!("topic {}", w.req.topic),
    })
}

async fn persist_channel(
    m: &Manager,
    w: &Write<'_>,
    catalog: &Catalog,
    cluster: &ClusterView,
) -> Result<Accepted, ApiError> {
    let channel = w.req.channel.clone().unwrap_or_default();
    let existing = catalog.channel(&w.req.topic, &channel).cloned();
    let mut c = existing.clone().unwrap_or_else(|| {
        new_channel(
            cluster,
            RustQueueChannelSpec {
                queue: cluster.name.clone(),
                topic: w.req.topic.clone(),
                channel: channel.clone(),
                owners: Vec::new(),
                phase: CatalogPhase::Preparing,
                revision: 0,
                paused: false,
                ephemeral: false,
                tombstone_until_ms: None,
                last_error: None,
                operation: None,
            },
        )
    });
    let n = next(
        w,
        c.spec.revision,
        c.spec.operation.as_ref(),
        c.spec.tombstone_until_ms,
    );
    if w.decision.action == CatalogAction::Create {
        c.spec.paused = false;
    }
    c.spec.owners.clone_from(&w.decision.owners);
    c.spec.phase = n.phase;
    c.spec.revision = n.revision;
    c.spec.tombstone_until_ms = n.tombstone;
    c.spec.last_error = None;
    let operation = n.operation.clone();
    c.spec.operation = Some(n.operation);
    let saved = match existing {
        Some(_) => m.store.replace_channel(c).await,
        None => m.store.create_channel(c).await,
    }
    .map_err(store_error)?;
    Ok(Accepted {
        operation,
        resource_revision: saved.spec.revision,
        target: format!("channel {}/{channel}", w.req.topic),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(channel: Option<&str>) -> ActionRequest {
        ActionRequest {
            kind: if channel.is_some() {
                ManageKind::Channel
            } else {
                ManageKind::Topic
            },
            action: UiAction::Pause,
            topic: "orders".into(),
            channel: channel.map(Into::into),
            action_token: None,
            confirmation: None,
        }
    }

    #[test]
    fn operation_ids_are_valid_and_bound_to_token_and_target() {
        let a = operation_id("tok", &req(None));
        assert!(rustqueue_api::contract::valid_operation_id(&a), "{a}");
        assert_eq!(a.len(), 3 + 32);
        assert_eq!(a, operation_id("tok", &req(None)));
        assert_ne!(a, operation_id("tok2", &req(None)));
        assert_ne!(a, operation_id("tok", &req(Some("billing"))));
    }
}
