//! Broker resource use read from `/proc/<pid>`: resident memory (`VmRSS`, and the kernel's own
//! high-water mark `VmHWM`) and CPU time (`utime + stime` from `stat`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on every Linux ABI we
/// run on; reading it needs `sysconf`, which is an unsafe libc call).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Resident set size now, bytes.
    pub rss_bytes: u64,
    /// Peak resident set size since the process started, bytes.
    pub hwm_bytes: u64,
    /// User plus system CPU time since start, in clock ticks.
    pub cpu_ticks: u64,
}

/// Reads `/proc/<pid>` once; `None` if the process is gone or the files are unreadable.
pub fn sample(pid: u32) -> Option<Sample> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(base.join("status")).ok()?;
    let stat = std::fs::read_to_string(base.join("stat")).ok()?;
    Some(Sample {
        rss_bytes: status_kib(&status, "VmRSS:")? * 1024,
        hwm_bytes: status_kib(&status, "VmHWM:")? * 1024,
        cpu_ticks: stat_cpu_ticks(&stat)?,
    })
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// `utime + stime` (fields 14 and 15); the command name in field 2 may hold spaces, so count
/// from the closing parenthesis.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // after ')' the first field is #3 (state); utime is #14, stime #15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Samples a process in the background and remembers the peak RSS it saw.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl Sampler {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Some(s) = sample(pid) {
                    peak = peak.max(s.rss_bytes);
                }
                std::thread::sleep(every);
            }
            peak
        });
        Sampler { stop, handle }
    }

    /// Stops and returns the largest RSS seen, bytes.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_ticks_even_with_spaces_in_the_command_name() {
        let stat = "123 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(stat_cpu_ticks(stat), Some(300));
    }

    #[test]
    fn parses_status_sizes_in_kib() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(status_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn samples_this_very_process() {
        let s = sample(std::process::id()).expect("own /proc entry");
        assert!(s.rss_bytes > 0 && s.hwm_bytes >= s.rss_bytes);
        let sampler = Sampler::start(std::process::id(), Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(30));
        assert!(sampler.finish() > 0);
    }
}
