//! Named scenario steps: several behaviours are checked on one cluster start-up, each as an
//! `async fn` named for the behaviour. [`step`] prints where each begins and ends, so a failure
//! reads as "step X FAILED" right after the assertion message that says what was seen.
//! [`figure`] records what a step measured (and every step records its own duration), so a
//! run leaves the operator's reaction times behind for docs/benchmarks.md.

use std::future::Future;
use std::io::Write;
use std::time::Instant;

struct Guard<'a> {
    name: &'a str,
    start: Instant,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let took = self.start.elapsed().as_secs_f64();
        if std::thread::panicking() {
            eprintln!("=== step {} FAILED after {took:.1}s", self.name);
        } else {
            eprintln!("=== step {} ok ({took:.1}s)", self.name);
            record(&format!("step {}", self.name), took, "s");
        }
    }
}

/// Runs the step `name`.
pub async fn step<T>(name: &str, body: impl Future<Output = T>) -> T {
    eprintln!("=== step {name}");
    let _guard = Guard {
        name,
        start: Instant::now(),
    };
    body.await
}

/// Records a figure the scenario measured: printed as `=== figure <name>: <value> <unit>`,
/// and appended as a JSON line to the file `RUSTQUEUE_E2E_FIGURES` names, if set
/// (`make e2e-operator` sets it and lists the figures after the run).
pub fn figure(name: &str, value: f64, unit: &str) {
    eprintln!("=== figure {name}: {value:.2} {unit}");
    record(name, value, unit);
}

fn record(name: &str, value: f64, unit: &str) {
    let Some(path) = std::env::var_os("RUSTQUEUE_E2E_FIGURES") else {
        return;
    };
    let line = serde_json::json!({ "figure": name, "value": value, "unit": unit });
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        eprintln!(
            "could not record figure {name} in {}: {e}",
            path.to_string_lossy()
        );
    }
}
