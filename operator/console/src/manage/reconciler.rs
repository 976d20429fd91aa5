//! The reconciler: every poll, under the mutation lock and only on a fresh, complete snapshot,
//! it moves each pending operation one owner forward. Progress is recorded in the object's
//! `operation.completedOwners` before the next owner is touched, so a console that restarts
//! resumes where it stopped; brokers answer a replayed operation id with its recorded result.
//!
//! An operation's Events are recorded before the write that moves it on (audit): Accepted
//! before its first owner, Succeeded before it is cleared, Failed before it is `FAILED`. A
//! console that dies in between leaves the operation pending, and the next pass records the
//! Event again (the same name, so at most one exists) and then writes.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt as _;
use rustqueue_api::contract::{ManageAction, ManageKind, ManageRequest};
use rustqueue_api::crd::{
    CatalogAction, CatalogOperation, CatalogPhase, RustQueueChannel, RustQueueTopic,
};

use super::Manager;
use super::audit;
use super::catalog::Catalog;
use crate::broker::{BrokerError, FENCE_PARALLELISM};
use crate::cluster::StoreError;
use crate::snapshot::Snapshot;

/// A topic or channel object with an operation.
#[derive(Debug, Clone)]
enum Item {
    Topic(RustQueueTopic),
    Channel(RustQueueChannel),
}

macro_rules! spec {
    ($item:expr, $s:ident => $e:expr) => {
        match $item {
            Item::Topic(t) => {
                let $s = &t.spec;
                $e
            }
            Item::Channel(c) => {
                let $s = &c.spec;
                $e
            }
        }
    };
}

macro_rules! spec_mut {
    ($item:expr, $s:ident => $e:expr) => {
        match $item {
            Item::Topic(t) => {
                let $s = &mut t.spec;
                $e
            }
            Item::Channel(c) => {
                let $s = &mut c.spec;
                $e
            }
        }
    };
}

impl Item {
    fn kind(&self) -> ManageKind {
        match self {
            Item::Topic(_) => ManageKind::Topic,
            Item::Channel(_) => ManageKind::Channel,
        }
    }
    fn topic(&self) -> String {
        spec!(self, s => s.topic.clone())
    }
    fn channel(&self) -> Option<String> {
        match self {
            Item::Topic(_) => None,
            Item::Channel(c) => Some(c.spec.channel.clone()),
        }
    }
    fn target(&self) -> String {
        match self.channel() {
            Some(c) => format!("channel {}/{c}", self.topic()),
            None => format!("topic {}", self.topic()),
        }
    }
    fn owners(&self) -> Vec<String> {
        spec!(self, s => s.owners.clone())
    }
    fn operation(&self) -> Option<CatalogOperation> {
        spec!(self, s => s.operation.clone())
    }
    fn tombstone(&self) -> Option<i64> {
        spec!(self, s => s.tombstone_until_ms)
    }
    fn last_error(&self) -> Option<String> {
        spec!(self, s => s.last_error.clone())
    }
    fn set_operation(&mut self, op: Option<CatalogOperation>) {
        spec_mut!(self, s => s.operation = op);
    }
    fn set_error(&mut self, e: Option<String>) {
        spec_mut!(self, s => s.last_error = e.map(|e| e.chars().take(1024).collect()));
    }
    fn set_phase(&mut self, p: CatalogPhase) {
        spec_mut!(self, s => { s.phase = p; s.revision += 1; });
    }
    fn set_paused(&mut self, paused: bool) {
        spec_mut!(self, s => s.paused = paused);
    }
}

/// How a broker's refusal is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Try again next poll; only `lastError` is noted.
    Retry(String),
    /// The operation FAILED; a person must retry it.
    Fail(String),
}

/// 409 `E_REVISION_CONFLICT` (a stale observation) and 5xx or transport errors are retried;
/// any other 409 is `E_BROKER_STATE_DRIFT` and 400/404/422 `E_BROKER_REJECTED`, both final.
pub fn classify(e: &BrokerError) -> Outcome {
    match e {
        BrokerError::Status {
            status: 409, code, ..
        } if code == "E_REVISION_CONFLICT" => Outcome::Retry(format!("E_REVISION_CONFLICT: {e}")),
        BrokerError::Status { status: 409, .. } => {
            Outcome::Fail(format!("E_BROKER_STATE_DRIFT: {e}"))
        }
        BrokerError::Status {
            status: 400 | 404 | 422,
            ..
        } => Outcome::Fail(format!("E_BROKER_REJECTED: {e}")),
        _ => Outcome::Retry(format!("E_BROKER_UNAVAILABLE: {e}")),
    }
}

fn manage_action(a: CatalogAction) -> ManageAction {
    match a {
        CatalogAction::Create => ManageAction::Create,
        CatalogAction::Pause => ManageAction::Pause,
        CatalogAction::Unpause => ManageAction::Unpause,
        CatalogAction::Empty => ManageAction::Empty,
        CatalogAction::Delete => ManageAction::Delete,
    }
}

fn pending(phase: CatalogPhase) -> bool {
    matches!(phase, CatalogPhase::Preparing | CatalogPhase::Applying)
}

/// The reconciler.
pub struct Reconciler {
    m: Arc<Manager>,
}

impl Reconciler {
    /// A reconciler for `m`.
    pub fn new(m: Arc<Manager>) -> Self {
        Self { m }
    }

    /// Runs every poll, forever.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(self.m.config.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.tick().await;
        }
    }

    /// One pass: every pending topic, then every pending channel whose topic is ACTIVE, one
    /// owner each. Returns how many objects it moved (or tried to).
    pub async fn tick(&self) -> usize {
        let Some(s) = self.m.shared.snapshot() else {
            return 0;
        };
        let age = crate::now_ms().saturating_sub(s.collected_at_ms);
        if !s.complete || age > self.m.staleness_ms() {
            return 0;
        }
        let _guard = self.m.shared.mutation.lock().await;
        let Ok(catalog) = Catalog::list(self.m.store.as_ref()).await else {
            return 0;
        };
        let operations = catalog
            .topics
            .iter()
            .filter_map(|t| t.spec.operation.as_ref())
            .chain(
                catalog
                    .channels
                    .iter()
                    .filter_map(|c| c.spec.operation.as_ref()),
            );
        let keep: HashSet<String> = operations
            .map(|op| audit::event_key(audit::ACCEPTED, &op.id, op.attempt))
            .collect();
        self.m.forget_events_but(&keep);
        let mut items: Vec<Item> = catalog
            .topics
            .iter()
            .filter(|t| pending(t.spec.phase) && t.spec.operation.is_some())
            .cloned()
            .map(Item::Topic)
            .collect();
        items.extend(
            catalog
                .channels
                .iter()
                .filter(|c| pending(c.spec.phase) && c.spec.operation.is_some())
                .filter(|c| {
                    catalog
                        .topic(&c.spec.topic)
                        .is_some_and(|t| t.spec.phase == CatalogPhase::Active)
                })
                .cloned()
                .map(Item::Channel),
        );
        let n = items.len();
        for item in items {
            if let Err(e) = self.step(&s, &catalog, item).await {
                tracing::warn!(error = %e, "recording operation progress failed");
            }
        }
        n
    }

    async fn step(
        &self,
        s: &Snapshot,
        catalog: &Catalog,
        mut item: Item,
    ) -> Result<(), StoreError> {
        let Some(mut op) = item.operation() else {
            return Ok(());
        };
        let accepted = audit::accepted_event(&item.target(), &op);
        if !self.m.event_recorded(&accepted.key) {
            let key = accepted.key.clone();
            if let Err(why) = audit::record(self.m.store.as_ref(), accepted).await {
                return self.await_event(item, &op, audit::ACCEPTED, why).await;
            }
            self.m.remember_event(key);
        }
        let owners = item.owners();
        let Some(owner) = owners
            .iter()
            .find(|o| !op.completed_owners.contains(o))
            .cloned()
        else {
            return self.finish(catalog, item, &op).await;
        };
        if let Err(e) = super::decide::owners_healthy(&owners, &s.brokers) {
            return self.note(item, e.detail).await;
        }
        if matches!(op.action, CatalogAction::Create | CatalogAction::Delete)
            && let Err(e) = self.sync_fences(s, catalog).await
        {
            return self
                .note(item, format!("E_BROKER_UNAVAILABLE: syncing fences: {e}"))
                .await;
        }
        let broker = s.brokers.iter().find(|b| b.name == owner);
        let ip = broker.and_then(|b| b.pod_ip.clone()).unwrap_or_default();
        let revision = broker
            .and_then(|b| b.observation.as_ref())
            .map_or(0, |o| o.head.registry_revision);
        let req = ManageRequest {
            operation_id: op.id.clone(),
            topic: item.topic(),
            channel: item.channel(),
            expected_revision: revision,
            tombstone_until_ms: (op.action == CatalogAction::Delete)
                .then(|| item.tombstone().and_then(|t| u64::try_from(t).ok()))
                .flatten(),
        };
        let action = manage_action(op.action);
        match self.m.client.manage(&ip, item.kind(), action, &req).await {
            Ok(_) => {
                tracing::info!(operation = %op.id, %owner, target = %item.target(), %action, "owner applied");
                op.completed_owners.push(owner);
                op.updated_at_ms = i64::try_from(crate::now_ms()).unwrap_or(i64::MAX);
                if owners.iter().all(|o| op.completed_owners.contains(o)) {
                    return self.finish(catalog, item, &op).await;
                }
                item.set_operation(Some(op));
                item.set_error(None);
                self.save(item).await
            }
            Err(e) => match classify(&e) {
                Outcome::Retry(why) => self.note(item, why).await,
                Outcome::Fail(why) => self.fail(item, &op, why).await,
            },
        }
    }

    async fn sync_fences(&self, s: &Snapshot, catalog: &Catalog) -> Result<(), String> {
        let fences = catalog.fences(crate::now_ms());
        let client = &self.m.client;
        let fences = &fences;
        let calls: Vec<futures::future::BoxFuture<'_, Option<String>>> = s
            .brokers
            .iter()
            .map(|b| {
                let ip = b.pod_ip.clone().unwrap_or_default();
                let name = b.name.clone();
                Box::pin(async move {
                    client
                        .sync_fences(&ip, fences)
                        .await
                        .err()
                        .map(|e| format!("{name}: {e}"))
                }) as futures::future::BoxFuture<'_, Option<String>>
            })
            .collect();
        let errors: Vec<String> = futures::stream::iter(calls)
            .buffer_unordered(FENCE_PARALLELISM)
            .collect::<Vec<Option<String>>>()
            .await
            .into_iter()
            .flatten()
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// A retryable failure: only `lastError`, and only when it changed.
    async fn note(&self, mut item: Item, why: String) -> Result<(), StoreError> {
        if item.last_error().as_deref() == Some(why.as_str()) {
            return Ok(());
        }
        tracing::warn!(target = %item.target(), error = %why, "operation step will be retried");
        item.set_error(Some(why));
        self.save(item).await
    }

    /// The Event `reason` of `op` could not be recorded: the operation stays pending (with
    /// the progress in `op`) and `lastError` says why; the next pass records it again.
    async fn await_event(
        &self,
        mut item: Item,
        op: &CatalogOperation,
        reason: &str,
        why: String,
    ) -> Result<(), StoreError> {
        if item.operation().as_ref() != Some(op) {
            item.set_operation(Some(op.clone()));
            item.set_error(None);
        }
        let why = format!("{}: recording {reason}: {why}", audit::EVENT_UNAVAILABLE);
        self.note(item, why).await
    }

    /// A final refusal: the Failed Event, then `FAILED`.
    async fn fail(
        &self,
        mut item: Item,
        op: &CatalogOperation,
        why: String,
    ) -> Result<(), StoreError> {
        let failed = audit::failed_event(&item.target(), op, &why);
        if let Err(unrecorded) = audit::record(self.m.store.as_ref(), failed).await {
            // Not FAILED without its Event: the next pass asks the broker again.
            return self
                .await_event(
                    item,
                    op,
                    audit::FAILED,
                    format!("{unrecorded} (after {why})"),
                )
                .await;
        }
        item.set_error(Some(why));
        item.set_phase(CatalogPhase::Failed);
        self.save(item).await
    }

    async fn finish(
        &self,
        catalog: &Catalog,
        mut item: Item,
        op: &CatalogOperation,
    ) -> Result<(), StoreError> {
        let done = audit::succeeded_event(&item.target(), op);
        if let Err(why) = audit::record(self.m.store.as_ref(), done).await {
            return self.await_event(item, op, audit::SUCCEEDED, why).await;
        }
        match op.action {
            CatalogAction::Pause => item.set_paused(true),
            CatalogAction::Unpause | CatalogAction::Create => item.set_paused(false),
            _ => {}
        }
        let deleted = op.action == CatalogAction::Delete;
        if deleted && let Item::Topic(t) = &item {
            self.tombstone_channels(catalog, &t.spec.topic, t.spec.tombstone_until_ms)
                .await?;
        }
        item.set_operation(None);
        item.set_error(None);
        item.set_phase(if deleted {
            CatalogPhase::Tombstoned
        } else {
            CatalogPhase::Active
        });
        self.save(item).await
    }

    async fn tombstone_channels(
        &self,
        catalog: &Catalog,
        topic: &str,
        until: Option<i64>,
    ) -> Result<(), StoreError> {
        for c in catalog.channels.iter().filter(|c| c.spec.topic == topic) {
            let mut c = c.clone();
            c.spec.phase = CatalogPhase::Tombstoned;
            c.spec.tombstone_until_ms = until;
            c.spec.operation = None;
            c.spec.revision += 1;
            self.m.store.replace_channel(c).await?;
        }
        Ok(())
    }

    async fn save(&self, item: Item) -> Result<(), StoreError> {
        match item {
            Item::Topic(t) => self.m.store.replace_topic(t).await.map(drop),
            Item::Channel(c) => self.m.store.replace_channel(c).await.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, code: &str) -> BrokerError {
        BrokerError::Status {
            status,
            code: code.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn broker_refusals_are_retried_or_fail_by_their_status_and_code() {
        let retry = |o: Outcome| matches!(o, Outcome::Retry(_));
        let table = [
            (
                status(409, "E_REVISION_CONFLICT"),
                true,
                "E_REVISION_CONFLICT",
            ),
            (
                status(409, "E_TOPIC_TOMBSTONED"),
                false,
                "E_BROKER_STATE_DRIFT",
            ),
            (status(400, "E_BAD_TOPIC"), false, "E_BROKER_REJECTED"),
            (status(404, "E_BAD_CHANNEL"), false, "E_BROKER_REJECTED"),
            (status(422, ""), false, "E_BROKER_REJECTED"),
            (
                status(503, "E_MANAGEMENT_UNAVAILABLE"),
                true,
                "E_BROKER_UNAVAILABLE",
            ),
            (status(500, "E_INTERNAL"), true, "E_BROKER_UNAVAILABLE"),
            (
                BrokerError::Transport("timed out".into()),
                true,
                "E_BROKER_UNAVAILABLE",
            ),
        ];
        for (e, want_retry, code) in table {
            let o = classify(&e);
            let text = match &o {
                Outcome::Retry(t) | Outcome::Fail(t) => t.clone(),
            };
            assert_eq!(retry(o), want_retry, "{e}");
            assert!(text.starts_with(code), "{text}");
        }
    }
}
