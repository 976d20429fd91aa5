//! Process bookkeeping: every process the testbed starts runs in its own process group, and
//! every group is registered here so teardown (including `Drop` during a panic) can kill them
//! all synchronously, without an async runtime.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Child;
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

/// The long-running processes one part of the testbed started (control plane, registry,
/// cluster network), each the leader of its own process group and registered in
/// [`ProcessGroups`], with the name its log is written under (`<dir>/<name>.log`).
/// [`ProcessSet::stop`] kills them newest first; dropping the set (a panic between start and
/// stop) kills them too.
#[derive(Debug, Default)]
pub(crate) struct ProcessSet {
    procs: Vec<(String, Child)>,
}

impl ProcessSet {
    /// Starts `program args` as the leader of its own process group, stdin closed, stdout and
    /// stderr to `<dir>/<name>.log`, and adds it.
    pub(crate) fn spawn<S: AsRef<std::ffi::OsStr>>(
        &mut self,
        dir: &Path,
        groups: &ProcessGroups,
        name: &str,
        program: &Path,
        args: impl IntoIterator<Item = S>,
    ) -> Result<(), crate::Error> {
        use std::os::unix::process::CommandExt;
        let log_path = dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(|e| crate::Error::io("creating", &log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| crate::Error::io("cloning", &log_path, e))?;
        let child = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|source| crate::Error::Spawn {
                name: name.into(),
                source,
            })?;
        self.push(name, child, groups);
        Ok(())
    }

    /// Adds a started process (its own group leader) and registers its group in `groups`.
    pub(crate) fn push(&mut self, name: &str, child: Child, groups: &ProcessGroups) {
        groups.add(child.id());
        self.procs.push((name.to_string(), child));
    }

    /// Errors with the exit status and the last lines of `<dir>/<name>.log` of the first process
    /// that has exited.
    pub(crate) fn check_alive(&mut self, dir: &Path) -> Result<(), crate::Error> {
        for (name, child) in &mut self.procs {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(crate::Error::Exited {
                    name: name.clone(),
                    status: status.to_string(),
                    log_tail: crate::controlplane::tail(&dir.join(format!("{name}.log")), 30),
                });
            }
        }
        Ok(())
    }

    /// SIGKILLs every process's group, newest first, reaps them and unregisters the groups.
    pub(crate) fn stop(&mut self, groups: &ProcessGroups) {
        self.kill();
        for (_, child) in &self.procs {
            groups.remove(child.id());
        }
        self.procs.clear();
    }

    fn kill(&mut self) {
        for (_, child) in self.procs.iter_mut().rev() {
            signal_group(child.id(), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl Drop for ProcessSet {
    fn drop(&mut self) {
        self.kill();
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
