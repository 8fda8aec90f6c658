//! Wake-ups: an eventfd (pollable by asyncio, LMCache, any poll loop) and futexes on the
//! arena's batch counters (for threads that wait for one batch).

use rustix::event::{EventfdFlags, eventfd};
use rustix::thread::futex;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// A non-blocking eventfd: readable while signalled, cleared by [`EventFd::reset`].
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        Ok(EventFd(eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?))
    }

    /// One received from another process (a bridge's doorbell and notifier).
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Another handle on the same counter.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        Ok(EventFd(self.0.try_clone()?))
    }

    pub fn signal(&self) {
        // Only fails if the counter would overflow (2^64 - 2 pending signals): it is then
        // readable anyway, which is all a signal means.
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Clears the signal; true if it was set.
    pub fn reset(&self) -> bool {
        let mut count = [0u8; 8];
        matches!(rustix::io::read(&self.0, &mut count), Ok(8))
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout`. The counters live in the engine's
/// private memory, so the futex is process-private (cheaper in the kernel).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let timeout =
        rustix::thread::futex::Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // EAGAIN (the value changed), ETIMEDOUT and EINTR all mean: look again.
    let _ = futex::wait(word, futex::Flags::PRIVATE, expected, Some(&timeout));
}

pub fn futex_wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::PRIVATE, i32::MAX as u32);
}
