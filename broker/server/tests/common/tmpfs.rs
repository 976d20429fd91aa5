//! A real small volume for the full-disk tests: a tmpfs mounted on a fresh directory (so a
//! full volume is a real ENOSPC). Needs root.

use std::path::PathBuf;

/// A tmpfs mounted on a fresh directory, unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB.
    pub fn mount(mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a {mib} MiB tmpfs (the test runs as root)");
        Tmpfs { dir }
    }

    /// Where it is mounted.
    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Bytes in use on the volume.
    pub fn used(&self) -> u64 {
        let s = nix::sys::statvfs::statvfs(self.dir.path()).unwrap();
        (s.blocks() - s.blocks_free()) * s.fragment_size()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
