//! Console management (docs/api.md, "Management"): `POST /v1/manage/{topics,channels}/{action}`
//! and `POST /v1/manage/fences/sync`, served only with `security.console_management_enabled`.
//!
//! One request, step by step (each step durable before the next; a SIGKILL between any two
//! replays to the same result when the console resends the same `operation_id`):
//!
//! ```text
//! validate ─► fences ready? ─► catalog lookup ─┬─ completed: answer the recorded result
//!                                              ├─ pending (same id, or adopted): ─► act ─► completed
//!                                              └─ fresh: revision ─► plan ─► pending ─► act ─► completed
//! ```
//!
//! - [`catalog`]: the durable operation catalog and its pure decisions.
//! - [`fences`]: tombstone fences, checked on the publish and SUB paths.
//! - [`ops`]: plan and apply one action.

pub mod catalog;
mod durable;
pub mod error;
pub mod fences;
pub mod ops;
pub mod routes;

use std::path::{Path, PathBuf};

use rustqueue_api::contract::{
    FenceSync, ManageAction, ManageKind, ManageRequest, ManageResponse, valid_operation_id,
};
use rustqueue_engine::durable::crash_failpoint;
use rustqueue_engine::{Engine, StorageError, valid_name};
use tokio::sync::Mutex;

pub use catalog::{CATALOG_FILE, Catalog, Lookup, Subject};
pub use error::ManageError;
pub use fences::{Fences, Refusal};

use crate::control::stats::now_ms;

/// The operation catalog; its lock serializes every management change on this broker.
#[derive(Debug)]
pub struct Management {
    catalog: Mutex<Catalog>,
    path: PathBuf,
}

impl Management {
    /// The catalog persisted in `data_root` (empty on a fresh directory).
    pub fn open(data_root: &Path) -> Result<Management, StorageError> {
        let path = data_root.join(CATALOG_FILE);
        Ok(Management {
            catalog: Mutex::new(durable::read_or_default(&path)?),
            path,
        })
    }

    async fn save(&self, c: &Catalog, failpoint: &'static str) -> Result<(), StorageError> {
        durable::write(self.path.clone(), c.clone(), failpoint).await
    }

    /// `POST /v1/manage/fences/sync`.
    pub async fn sync_fences(&self, fences: &Fences, sync: &FenceSync) -> Result<(), ManageError> {
        let _serial = self.catalog.lock().await;
        for c in &sync.channels {
            validate_names(&c.topic, Some(&c.channel))?;
        }
        for t in sync.topics.keys() {
            validate_names(t, None)?;
        }
        fences.sync(sync).await?;
        Ok(())
    }

    /// One management request on `kind`/`action` (see the module docs for the steps).
    pub async fn request(
        &self,
        engine: &Engine,
        fences: &Fences,
        kind: ManageKind,
        action: ManageAction,
        req: &ManageRequest,
    ) -> Result<ManageResponse, ManageError> {
        validate(kind, action, req)?;
        if !fences.ready() {
            return Err(ManageError::Fenced(Refusal::Unavailable));
        }
        let subject = Subject::of(kind, action, req);
        let mut catalog = self.catalog.lock().await;
        match catalog.lookup(&req.operation_id, &subject) {
            Lookup::Replay(r) => Ok(r),
            Lookup::Conflict => Err(ManageError::OperationConflict(req.operation_id.clone())),
            Lookup::Blocked(id) => Err(ManageError::Unavailable(format!(
                "operation {id} on topic {:?} is pending; resend it (same operation_id) first",
                subject.topic
            ))),
            Lookup::Resume(rec) => {
                let ctx = Ctx { engine, fences };
                self.finish(
                    &mut catalog,
                    ctx,
                    &rec.operation_id,
                    &req.operation_id,
                    &rec.subject,
                    rec.plan,
                )
                .await
            }
            Lookup::Fresh => {
                let current = engine.registry_revision();
                if req.expected_revision != current {
                    return Err(ManageError::RevisionConflict {
                        expected: req.expected_revision,
                        current,
                    });
                }
                let plan = ops::plan(engine, fences, &subject)?;
                let mut next = catalog.clone();
                next.add_pending(&req.operation_id, subject.clone(), plan, now_ms());
                self.save(&next, "manage_pending_before_rename").await?;
                *catalog = next;
                crash_failpoint("manage_after_pending");
                let ctx = Ctx { engine, fences };
                self.finish(
                    &mut catalog,
                    ctx,
                    &req.operation_id,
                    &req.operation_id,
                    &subject,
                    plan,
                )
                .await
            }
        }
    }

    /// Acts on a pending operation and records it completed.
    async fn finish(
        &self,
        catalog: &mut Catalog,
        ctx: Ctx<'_>,
        pending_id: &str,
        request_id: &str,
        subject: &Subject,
        plan: catalog::Plan,
    ) -> Result<ManageResponse, ManageError> {
        if let Err(e) = ops::apply(ctx.engine, ctx.fences, subject, plan).await {
            if matches!(e, ManageError::Throttled(_)) {
                // A topic or channel limit refused the create before it changed anything:
                // forget it, so it does not hold its topic as pending.
                let mut next = catalog.clone();
                next.forget(pending_id);
                self.save(&next, "manage_forget_before_rename").await?;
                *catalog = next;
            }
            return Err(e);
        }
        crash_failpoint("manage_after_action");
        let result = ManageResponse {
            revision: ctx.engine.registry_revision(),
            changed: plan.changed,
        };
        let mut next = catalog.clone();
        next.complete(pending_id, Some(request_id), result, now_ms());
        self.save(&next, "manage_completed_before_rename").await?;
        *catalog = next;
        tracing::info!(
            operation_id = request_id,
            fingerprint = subject.fingerprint(),
            changed = result.changed,
            revision = result.revision,
            "management operation completed"
        );
        Ok(result)
    }
}

#[derive(Clone, Copy)]
struct Ctx<'a> {
    engine: &'a Engine,
    fences: &'a Fences,
}

fn validate_names(topic: &str, channel: Option<&str>) -> Result<(), ManageError> {
    if !valid_name(topic) {
        return Err(ManageError::BadTopic {
            status: axum::http::StatusCode::BAD_REQUEST,
            detail: format!("invalid topic name {topic:?}"),
        });
    }
    if let Some(c) = channel
        && !valid_name(c)
    {
        return Err(ManageError::BadChannel {
            status: axum::http::StatusCode::BAD_REQUEST,
            detail: format!("invalid channel name {c:?}"),
        });
    }
    Ok(())
}

/// Checks what needs no broker state: the id, the names, the fence expiry.
pub fn validate(
    kind: ManageKind,
    action: ManageAction,
    req: &ManageRequest,
) -> Result<(), ManageError> {
    if !valid_operation_id(&req.operation_id) {
        return Err(ManageError::BadRequest(
            "operation_id must be 16 to 128 characters of [A-Za-z0-9_-]".into(),
        ));
    }
    let channel = match kind {
        ManageKind::Topic => None,
        ManageKind::Channel => {
            Some(
                req.channel
                    .as_deref()
                    .ok_or_else(|| ManageError::BadChannel {
                        status: axum::http::StatusCode::BAD_REQUEST,
                        detail: "channel requests need a channel".into(),
                    })?,
            )
        }
    };
    validate_names(&req.topic, channel)?;
    if action.fences() && req.tombstone_until_ms.is_none_or(|u| u <= now_ms()) {
        return Err(ManageError::BadTombstone);
    }
    Ok(())
}
