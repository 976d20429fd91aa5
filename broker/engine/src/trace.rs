//! What the publish pipeline records for one traced publish: when its group's append and the
//! fdatasync that made it durable ran, and how many publishes each carried. The engine knows
//! nothing of OpenTelemetry: the server asks for a record only for a sampled publish and turns
//! it into spans (docs/observability.md). An untraced publish carries `None` and costs one
//! branch per group.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::lock::lock;

/// The commit record of one traced publish, filled by the pipeline's two stages.
#[derive(Debug, Default)]
pub struct CommitTrace(Mutex<CommitTimes>);

/// When each step of a publish's commit ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitTimes {
    /// Its group's append (id reservation and the write, no fsync): began and ended.
    pub append: Option<(Instant, Instant)>,
    /// How many publishes (records) the append group held.
    pub append_group: usize,
    /// The fdatasync that made it durable: began and ended (`None` when it was answered
    /// after the append: a relaxed ack mode or an ephemeral topic).
    pub fsync: Option<(Instant, Instant)>,
    /// How many publishes (records) that fdatasync answered: the group commit's size.
    pub fsync_group: usize,
}

impl CommitTrace {
    /// A record to hand to [`crate::Engine::publish_recorded`].
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// What the pipeline recorded so far (all of it once the publish was answered).
    pub fn times(&self) -> CommitTimes {
        *lock(&self.0)
    }

    pub(crate) fn appended(&self, began: Instant, ended: Instant, group: usize) {
        let mut t = lock(&self.0);
        t.append = Some((began, ended));
        t.append_group = group;
    }

    pub(crate) fn synced(&self, began: Instant, ended: Instant, group: usize) {
        let mut t = lock(&self.0);
        t.fsync = Some((began, ended));
        t.fsync_group = group;
    }
}
