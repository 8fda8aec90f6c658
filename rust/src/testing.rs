//! Helpers for the crate's own unit tests.

use std::time::{Duration, Instant};

/// Polls `done` every millisecond until it holds; fails the test, naming `what`, after 10 s.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
