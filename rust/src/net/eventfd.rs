//! A non-blocking eventfd: how the engine wakes its submitters (asyncio, LMCache, any poll
//! loop) and its workers, and how a bridge and its clients ring each other.

use rustix::event::{EventfdFlags, eventfd};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Readable while signalled; cleared by [`EventFd::reset`].
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd, not signalled.
    pub fn new() -> io::Result<EventFd> {
        Ok(EventFd(eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?))
    }

    /// Another handle on the same counter.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        Ok(EventFd(self.0.try_clone()?))
    }

    /// Makes it readable.
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
