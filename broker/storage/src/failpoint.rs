//! Compile-time failpoints for real SIGKILL crash tests.
//!
//! Without the `crash-injection` feature [`crash_failpoint`] is an empty inline function. With
//! it, the call fires once when env `RUSTQUEUE_CRASH_FAILPOINT` equals `name` and
//! `RUSTQUEUE_CRASH_MARKER` names a file: the marker is written and fsynced, then the thread
//! parks forever so the test can SIGKILL the process at exactly this persistence boundary.

/// Marks a persistence boundary named `name`.
#[cfg(not(feature = "crash-injection"))]
#[inline(always)]
pub fn crash_failpoint(_name: &str) {}

/// Marks a persistence boundary named `name`.
#[cfg(feature = "crash-injection")]
pub fn crash_failpoint(name: &str) {
    use std::io::Write;
    if std::env::var("RUSTQUEUE_CRASH_FAILPOINT").ok().as_deref() != Some(name) {
        return;
    }
    let Ok(marker) = std::env::var("RUSTQUEUE_CRASH_MARKER") else {
        return;
    };
    if let Ok(mut f) = std::fs::File::create(&marker) {
        let _ = f.write_all(name.as_bytes());
        let _ = f.sync_all();
    }
    if let Some(dir) = std::path::Path::new(&marker).parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    loop {
        std::thread::park();
    }
}
