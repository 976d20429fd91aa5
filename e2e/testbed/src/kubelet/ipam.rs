//! Pod IPs: `10.244.<block>.<2..=254>`. Inside the testbed's network namespace the whole of
//! [`crate::netns::POD_CIDR`] is routed to `lo` as local, so a process can bind such an address
//! without configuring anything per Pod. Each testbed claims one
//! `<block>` with an exclusive `flock` on a file under the temp dir, so testbeds running at the
//! same time (parallel tests, several test binaries) never hand out the same address; the lock
//! dies with the process. The lock file is removed when the block is given back, so the lock
//! directory does not fill up run after run: a claimer that locked a file another one has just
//! removed notices (the path no longer names the locked file) and tries again.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};

use crate::Error;

/// A claimed `/24` of pod IPs.
#[derive(Debug)]
pub(crate) struct Ipam {
    block: u8,
    lock_path: PathBuf,
    _lock: Flock<File>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    used: BTreeSet<u8>,
    next: u8,
}

impl Ipam {
    /// Claims a free block.
    pub(crate) fn claim() -> Result<Ipam, Error> {
        let dir = std::env::temp_dir().join("rustqueue-testbed-ip-blocks");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        let seed = std::process::id() as usize
            + std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as usize)
                .unwrap_or(0);
        for i in 0..256usize {
            let block = ((seed + i) % 256) as u8;
            let path = dir.join(format!("{block}.lock"));
            if let Some(lock) = try_lock(&path)? {
                return Ok(Ipam {
                    block,
                    lock_path: path,
                    _lock: lock,
                    state: Mutex::new(State {
                        used: BTreeSet::new(),
                        next: 2,
                    }),
                });
            }
        }
        Err(Error::io(
            "claiming a pod IP block in",
            dir,
            std::io::Error::other("all 256 blocks are in use"),
        ))
    }

    /// A free address (round robin, so a deleted Pod's address is not reused at once).
    pub(crate) fn allocate(&self) -> Option<Ipv4Addr> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..253 {
            let candidate = s.next;
            s.next = if s.next >= 254 { 2 } else { s.next + 1 };
            if s.used.insert(candidate) {
                return Some(Ipv4Addr::new(10, 244, self.block, candidate));
            }
        }
        None
    }

    /// Returns an address to the pool.
    pub(crate) fn release(&self, ip: Ipv4Addr) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.used.remove(&ip.octets()[3]);
    }
}

impl Drop for Ipam {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the file handle right after.
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Locks `path` (creating it) unless another testbed holds it. A lock on a file that was removed
/// (by its previous owner, between our open and our lock) does not count.
fn try_lock(path: &Path) -> Result<Option<Flock<File>>, Error> {
    for _ in 0..8 {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("opening", path, e))?;
        let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            return Ok(None);
        };
        let held = lock
            .metadata()
            .map_err(|e| Error::io("inspecting", path, e))?;
        match std::fs::metadata(path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => return Ok(Some(lock)),
            _ => continue, // removed or replaced meanwhile: lock the current file instead
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_unicast_addresses_in_the_claimed_block() {
        let ipam = Ipam::claim().unwrap();
        let a = ipam.allocate().unwrap();
        let b = ipam.allocate().unwrap();
        assert_ne!(a, b);
        assert_eq!(&a.octets()[..3], &[10, 244, ipam.block]);
        assert!(!a.is_loopback() && !a.is_link_local() && !a.is_unspecified());
        std::thread::spawn(move || {
            crate::netns::enter_private_network().unwrap();
            std::net::TcpListener::bind((a, 0)).expect("pod IPs are bindable in the namespace");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_released_block_leaves_no_lock_file_behind() {
        let ipam = Ipam::claim().unwrap();
        let path = ipam.lock_path.clone();
        assert!(path.exists());
        drop(ipam);
        assert!(!path.exists(), "{} is left behind", path.display());
    }

    #[test]
    fn two_claims_get_different_blocks() {
        let a = Ipam::claim().unwrap();
        let b = Ipam::claim().unwrap();
        assert_ne!(a.block, b.block);
    }

    #[test]
    fn released_addresses_come_back_after_a_full_cycle() {
        let ipam = Ipam::claim().unwrap();
        let first = ipam.allocate().unwrap();
        ipam.release(first);
        let mut seen = BTreeSet::new();
        for _ in 0..253 {
            seen.insert(ipam.allocate().unwrap());
        }
        assert!(seen.contains(&first));
        assert!(ipam.allocate().is_none(), "the block is exhausted");
    }
}
