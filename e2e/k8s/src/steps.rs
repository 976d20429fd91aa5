//! Named scenario steps: several behaviours are checked on one cluster start-up, each as an
//! `async fn` named for the behaviour. [`step`] prints where each begins and ends, so a failure
//! reads as "step X FAILED" right after the assertion message that says what was seen.

use std::future::Future;
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
