//! Stamps the commit a release binary was built from into `rustqueued --version`, so that a
//! benchmark's results (docs/benchmarks.md) and a bug report name the build they came from.
//!
//! The release builds of the Makefile and the scripts set `RUSTQUEUE_REVISION` (`git describe
//! --always --dirty`); a plain `cargo build` and the test builds do not, so a new commit never
//! recompiles the test build for the stamp alone.

fn main() {
    println!("cargo:rerun-if-env-changed=RUSTQUEUE_REVISION");
    let version = env!("CARGO_PKG_VERSION");
    let line = match std::env::var("RUSTQUEUE_REVISION") {
        Ok(rev) if !rev.trim().is_empty() => format!("{version} (revision {})", rev.trim()),
        _ => format!("{version} (revision not stamped)"),
    };
    println!("cargo:rustc-env=RUSTQUEUE_VERSION_LINE={line}");
}
