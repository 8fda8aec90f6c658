//! Futexes on the engine's batch counters: how a thread waits for its one batch, and how the
//! worker that closes the batch wakes it.

use rustix::thread::futex;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. The counters live in the engine's
/// private memory, so the futex is process-private (cheaper in the kernel).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let timeout =
        rustix::thread::futex::Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // EAGAIN (the value changed), ETIMEDOUT and EINTR all mean: look again.
    let _ = futex::wait(word, futex::Flags::PRIVATE, expected, Some(&timeout));
}

/// Wakes every thread waiting on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::PRIVATE, i32::MAX as u32);
}
