//! Process bookkeeping: every process the testbed starts runs in its own process group, and
//! every group is registered here so teardown (including `Drop` during a panic) can kill them
//! all synchronously, without an async runtime.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The process groups a testbed owns.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProcessGroups {
    groups: Arc<Mutex<BTreeSet<i32>>>,
}

impl ProcessGroups {
    pub(crate) fn add(&self, pgid: u32) {
        if let Ok(pgid) = i32::try_from(pgid) {
            self.lock().insert(pgid);
        }
    }

    pub(crate) fn remove(&self, pgid: u32) {
        if let Ok(pgid) = i32::try_from(pgid) {
            self.lock().remove(&pgid);
        }
    }

    /// The registered group leaders.
    pub(crate) fn list(&self) -> Vec<u32> {
        self.lock().iter().map(|p| *p as u32).collect()
    }

    /// SIGKILLs every registered group and forgets them.
    pub(crate) fn kill_all(&self) {
        let groups = std::mem::take(&mut *self.lock());
        for pgid in groups {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sends `signal` to the process group led by `pid` (ignoring groups that are already gone).
pub(crate) fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// Whether any process of group `pgid` is still alive.
pub(crate) fn group_alive(pgid: u32) -> bool {
    match i32::try_from(pgid) {
        Ok(pgid) => killpg(Pid::from_raw(pgid), None).is_ok(),
        Err(_) => false,
    }
}
