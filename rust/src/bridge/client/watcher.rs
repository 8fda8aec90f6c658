//! The watcher thread, and this process's own event fd that it signals.
//!
//! The bridge signals completions on this client's end of a socketpair; the watcher turns them
//! (and the bridge going away: its end closed, or the control socket hung up) into an event fd
//! of this process, which asyncio and waiting threads poll and which no other process holds.
//! A client that only waits for its event fd (asyncio) thus learns of the bridge's end at once,
//! in its next `drain`. The thread ends when the bridge's side closes.

use crate::bridge::signal::{Drained, SignalEnd};
use crate::error::{Error, Result};
use crate::net::EventFd;
use rustix::event::{PollFd, PollFlags, poll};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// This process's event fd, and whether the watcher saw the bridge go.
pub(super) struct Wakeups {
    /// Signalled by the watcher when the bridge completes something or goes away, and by this
    /// client for its other waiters.
    notifier: EventFd,
    /// Set by the watcher thread when the bridge's end of the socket closes.
    hung_up: Arc<AtomicBool>,
}

impl Wakeups {
    /// A fresh event fd, and the watcher thread on `socket` (the control socket) and `signal`
    /// (this client's end of its signal socketpair).
    pub(super) fn start(socket: &UnixStream, signal: &SignalEnd) -> Result<Wakeups> {
        let notifier = EventFd::new().map_err(|e| Error::os("eventfd", e))?;
        let hung_up = Arc::new(AtomicBool::new(false));
        spawn_watcher(socket, signal, &notifier, hung_up.clone())?;
        Ok(Wakeups { notifier, hung_up })
    }

    /// Readable while something waits to be collected (or the bridge went away).
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.notifier.as_fd()
    }

    /// Wakes every waiter.
    pub(super) fn signal(&self) {
        self.notifier.signal();
    }

    /// Clears the event fd, before collecting what woke it.
    pub(super) fn reset(&self) {
        self.notifier.reset();
    }

    /// Whether the watcher saw the bridge's side close.
    pub(super) fn hung_up(&self) -> bool {
        self.hung_up.load(Ordering::Acquire)
    }

    /// Waits until the bridge posts something or its socket (`watch`) says something, at most
    /// `limit` and never more than 50 ms.
    pub(super) fn wait(&self, watch: &UnixStream, limit: Duration) {
        let mut fds =
            [PollFd::from_borrowed_fd(self.notifier.as_fd(), PollFlags::IN), PollFd::new(watch, PollFlags::IN)];
        let limit = limit.min(Duration::from_millis(50));
        let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: limit.as_nanos() as _ };
        let _ = poll(&mut fds, Some(&timeout));
    }
}

/// The watcher thread: turns the bridge's signals on this client's socketpair end into this
/// process's event fd, and the bridge going away (its end closed, or the control socket hung
/// up) into a last signal. It ends when the bridge's side closes.
fn spawn_watcher(stream: &UnixStream, signal: &SignalEnd, notifier: &EventFd, hung_up: Arc<AtomicBool>) -> Result<()> {
    let socket = stream.try_clone().map_err(|e| Error::os("dup", e))?;
    let signal = signal.try_clone().map_err(|e| Error::os("dup", e))?;
    let notifier = notifier.try_clone().map_err(|e| Error::os("dup", e))?;
    let watch = move || {
        loop {
            let mut fds = [PollFd::new(&signal, PollFlags::IN), PollFd::new(&socket, PollFlags::RDHUP)];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
            let socket_gone = !fds[1].revents().is_empty();
            let signalled = !fds[0].revents().is_empty();
            if signalled && signal.drain() == Drained::Closed || socket_gone {
                break;
            }
            notifier.signal();
        }
        hung_up.store(true, Ordering::Release);
        notifier.signal();
    };
    std::thread::Builder::new()
        .name("lmcache-resp-bridge-watch".into())
        .spawn(watch)
        .map(drop)
        .map_err(|e| Error::os("spawning the bridge watcher", e))
}
