//! The operation catalog (`management-operations.json`, docs/storage-format.md): every
//! management request is recorded `pending` (with the plan that makes a replay act exactly as
//! the first attempt did) before the broker acts, and `completed` with its result after. A
//! replayed `operation_id` answers the recorded result; the newest 8,192 completed operations
//! are kept.
//!
//! The decisions are pure ([`Catalog::lookup`]); the file is written by [`super::Management`].

use rustqueue_api::contract::{ManageAction, ManageKind, ManageRequest, ManageResponse};
use serde::{Deserialize, Serialize};

/// File name in the data root.
pub const CATALOG_FILE: &str = "management-operations.json";
/// The `format` of [`CATALOG_FILE`].
pub const CATALOG_FORMAT: u32 = 1;
/// Completed operations kept (oldest dropped first).
pub const MAX_COMPLETED: usize = 8_192;

/// Where an operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpState {
    /// Recorded, maybe (partly) applied; a replay of its id applies it again and completes it.
    Pending,
    /// Applied; its result is recorded.
    Completed,
}

/// What the first attempt decided, so a replay after a crash acts the same way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The answer's `changed`, judged before acting.
    pub changed: bool,
    /// `empty`: the last topic position it empties (later messages are never emptied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_through: Option<u64>,
}

/// The subject and action of a request: what an `operation_id` is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// Topic or channel request.
    pub kind: ManageKind,
    /// The action.
    pub action: ManageAction,
    /// Topic name.
    pub topic: String,
    /// Channel name (channel requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Fence expiry of delete / tombstone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_until_ms: Option<u64>,
}

impl Subject {
    /// The subject of `req` on the route `kind`/`action`.
    pub fn of(kind: ManageKind, action: ManageAction, req: &ManageRequest) -> Subject {
        Subject {
            kind,
            action,
            topic: req.topic.clone(),
            channel: match kind {
                ManageKind::Topic => None,
                ManageKind::Channel => req.channel.clone(),
            },
            tombstone_until_ms: req.tombstone_until_ms.filter(|_| action.fences()),
        }
    }

    /// A stable text form: two requests with equal fingerprints ask for the same thing.
    pub fn fingerprint(&self) -> String {
        let kind = match self.kind {
            ManageKind::Topic => "topic",
            ManageKind::Channel => "channel",
        };
        let channel = self.channel.as_deref().unwrap_or("");
        let until = self
            .tombstone_until_ms
            .map_or(String::new(), |u| u.to_string());
        format!(
            "{kind}/{}/{}:{}/{}:{channel}/{until}",
            self.action,
            self.topic.len(),
            self.topic,
            channel.len()
        )
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRecord {
    /// The request's idempotency key.
    pub operation_id: String,
    /// [`Subject::fingerprint`] of the request.
    pub fingerprint: String,
    /// What it is about.
    #[serde(flatten)]
    pub subject: Subject,
    /// Pending or completed.
    pub state: OpState,
    /// Decided before acting.
    pub plan: Plan,
    /// The answer, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ManageResponse>,
    /// Wall clock of the last change of this record, ms since the Unix epoch.
    pub recorded_at_ms: u64,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// [`CATALOG_FORMAT`].
    pub format: u32,
    /// Pending operations, then completed ones oldest first.
    #[serde(default)]
    pub operations: Vec<OperationRecord>,
}

/// What the catalog says about a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Not seen: check the revision, plan, record pending, act.
    Fresh,
    /// Completed before: answer the recorded result.
    Replay(ManageResponse),
    /// The id was used for another request (409 `E_OPERATION_CONFLICT`).
    Conflict,
    /// Pending under this id (or, adopted, under the named id): act again with its plan,
    /// then complete.
    Resume(OperationRecord),
    /// Another operation on the topic is pending (503 `E_MANAGEMENT_UNAVAILABLE`).
    Blocked(String),
}

impl Catalog {
    /// Decides how to treat a request with `operation_id` and `subject`.
    pub fn lookup(&self, operation_id: &str, subject: &Subject) -> Lookup {
        let fingerprint = subject.fingerprint();
        if let Some(r) = self
            .operations
            .iter()
            .find(|r| r.operation_id == operation_id)
        {
            return match (r.fingerprint == fingerprint, r.state, r.result) {
                (false, ..) => Lookup::Conflict,
                (true, OpState::Completed, Some(res)) => Lookup::Replay(res),
                (true, ..) => Lookup::Resume(r.clone()),
            };
        }
        match self
            .operations
            .iter()
            .find(|r| r.state == OpState::Pending && r.subject.topic == subject.topic)
        {
            Some(r) if r.fingerprint == fingerprint => Lookup::Resume(r.clone()),
            Some(r) => Lookup::Blocked(r.operation_id.clone()),
            None => Lookup::Fresh,
        }
    }

    /// Records a new pending operation.
    pub fn add_pending(&mut self, operation_id: &str, subject: Subject, plan: Plan, now: u64) {
        self.format = CATALOG_FORMAT;
        self.operations.push(OperationRecord {
            operation_id: operation_id.to_owned(),
            fingerprint: subject.fingerprint(),
            subject,
            state: OpState::Pending,
            plan,
            result: None,
            recorded_at_ms: now,
        });
    }

    /// Completes the pending operation `pending_id` with `result`; when another id adopted it,
    /// that id is recorded completed with the same result too. Keeps the newest
    /// [`MAX_COMPLETED`] completed operations.
    pub fn complete(
        &mut self,
        pending_id: &str,
        adopted_by: Option<&str>,
        result: ManageResponse,
        now: u64,
    ) {
        self.format = CATALOG_FORMAT;
        let Some(i) = self
            .operations
            .iter()
            .rposition(|r| r.operation_id == pending_id)
        else {
            return;
        };
        let mut done = self.operations.remove(i);
        done.state = OpState::Completed;
        done.result = Some(result);
        done.recorded_at_ms = now;
        if let Some(other) = adopted_by.filter(|o| *o != pending_id) {
            let mut twin = done.clone();
            twin.operation_id = other.to_owned();
            self.operations.push(done);
            self.operations.push(twin);
        } else {
            self.operations.push(done);
        }
        self.trim();
    }

    /// Drops a pending operation that was refused before it changed anything.
    pub fn forget(&mut self, pending_id: &str) {
        self.operations
            .retain(|r| r.state != OpState::Pending || r.operation_id != pending_id);
    }

    fn trim(&mut self) {
        if self.operations.len() <= MAX_COMPLETED {
            return;
        }
        let completed = self
            .operations
            .iter()
            .filter(|r| r.state == OpState::Completed)
            .count();
        let mut excess = completed.saturating_sub(MAX_COMPLETED);
        self.operations.retain(|r| {
            if excess > 0 && r.state == OpState::Completed {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(action: ManageAction, topic: &str) -> Subject {
        Subject {
            kind: ManageKind::Topic,
            action,
            topic: topic.into(),
            channel: None,
            tombstone_until_ms: None,
        }
    }

    const RES: ManageResponse = ManageResponse {
        revision: 7,
        changed: true,
    };

    #[test]
    fn a_completed_id_replays_and_a_reused_id_conflicts() {
        let mut c = Catalog::default();
        let s = subject(ManageAction::Pause, "t");
        assert_eq!(c.lookup("op-1", &s), Lookup::Fresh);
        c.add_pending("op-1", s.clone(), Plan::default(), 1);
        c.complete("op-1", None, RES, 2);
        assert_eq!(c.lookup("op-1", &s), Lookup::Replay(RES));
        assert_eq!(
            c.lookup("op-1", &subject(ManageAction::Unpause, "t")),
            Lookup::Conflict
        );
    }

    #[test]
    fn a_pending_operation_blocks_its_topic_and_is_adopted_by_the_same_request() {
        let mut c = Catalog::default();
        let s = subject(ManageAction::Empty, "t");
        let plan = Plan {
            changed: true,
            empty_through: Some(5),
        };
        c.add_pending("op-1", s.clone(), plan, 1);
        let Lookup::Resume(r) = c.lookup("op-1", &s) else {
            panic!("the same id resumes")
        };
        assert_eq!(r.plan, plan);
        assert_eq!(
            c.lookup("op-2", &subject(ManageAction::Pause, "t")),
            Lookup::Blocked("op-1".into())
        );
        assert_eq!(
            c.lookup("op-2", &subject(ManageAction::Pause, "u")),
            Lookup::Fresh
        );
        assert!(matches!(c.lookup("op-2", &s), Lookup::Resume(r) if r.operation_id == "op-1"));
        c.complete("op-1", Some("op-2"), RES, 2);
        assert_eq!(c.lookup("op-1", &s), Lookup::Replay(RES));
        assert_eq!(c.lookup("op-2", &s), Lookup::Replay(RES));
    }

    #[test]
    fn only_the_newest_completed_operations_are_kept() {
        let mut c = Catalog::default();
        let s = subject(ManageAction::Create, "t");
        for i in 0..MAX_COMPLETED + 3 {
            let id = format!("op-{i}");
            c.add_pending(&id, s.clone(), Plan::default(), 1);
            c.complete(&id, None, RES, 2);
        }
        c.add_pending(
            "pending",
            subject(ManageAction::Pause, "u"),
            Plan::default(),
            3,
        );
        assert_eq!(c.operations.len(), MAX_COMPLETED + 1);
        assert_eq!(c.lookup("op-2", &s), Lookup::Fresh, "the oldest are gone");
        assert_eq!(c.lookup("op-3", &s), Lookup::Replay(RES));
    }

    #[test]
    fn fingerprints_separate_every_field() {
        let a = subject(ManageAction::Delete, "ab");
        let mut b = a.clone();
        b.tombstone_until_ms = Some(9);
        let mut c = a.clone();
        c.kind = ManageKind::Channel;
        c.channel = Some("x".into());
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
    }
}
