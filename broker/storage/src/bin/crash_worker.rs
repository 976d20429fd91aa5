//! Crash worker (feature `crash-injection`): filled in below.
fn main() {}
