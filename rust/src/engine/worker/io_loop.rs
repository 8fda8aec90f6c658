//! The worker's I/O loop (`io_backend`): how it waits, and how its connections move bytes. The
//! choice is made once, when the worker starts ([`IoLoop::on_this_thread`]); the worker's loop
//! then only calls [`IoLoop::drive`] per connection and [`IoLoop::wait`] once a round.
//!
//! - **The poll loop** ([`PollLoop`]): one `ppoll` a round over the doorbell and every socket;
//!   each connection is then driven by the readiness it reported (`Conn::drive`).
//! - **The io_uring loop** ([`RingLoop`]): the worker owns one ring (`net::uring`), its
//!   connections queue their sends and receives on it and take their results by token
//!   (`Conn::drive_ring`), and the round's submissions and its wait are one `io_uring_enter`,
//!   woken by the doorbell's multishot poll, a completion, or the nearest deadline. A ring the
//!   kernel stops serving moves the worker to the poll loop ([`IoLoop::fall_back_if_ring_died`]).

use crate::clock::earliest;
use crate::conn::{Completion, Conn};
use crate::net::socket::{poll_flags, timeout_until};
use crate::net::uring::{OpId, Ring};
use crate::net::{EventFd, Readiness};
use rustix::event::{PollFd, PollFlags, poll};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which loop a worker runs, as the engine chose it (`settings::IoBackend` resolved by the
/// probe at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Poll,
    Uring,
}

/// A worker's I/O, one loop or the other.
pub enum IoLoop {
    Poll(PollLoop),
    Ring(RingLoop),
}

/// The poll loop's state: per connection (as `nodes.conns`), what the last `ppoll` said.
#[derive(Default)]
pub struct PollLoop {
    readiness: Vec<Readiness>,
}

/// The io_uring loop's state: the worker's ring, and the doorbell's poll on it.
pub struct RingLoop {
    ring: Arc<Ring>,
    /// The doorbell's multishot poll: every ring of it completes the wait. The eventfd is never
    /// read: its count only grows (2^64 rings away from full), and each write wakes the poll.
    doorbell: Option<OpId>,
}

impl IoLoop {
    /// The loop for `backend`, made on the worker's own thread (a ring belongs to the thread
    /// that made it). A ring that cannot be made here, though the engine's probe could, leaves
    /// this worker on the poll loop, with a warning.
    pub fn on_this_thread(backend: Backend, index: usize) -> IoLoop {
        match backend {
            Backend::Poll => IoLoop::Poll(PollLoop::default()),
            Backend::Uring => match Ring::new() {
                Ok(ring) => IoLoop::Ring(RingLoop { ring: Arc::new(ring), doorbell: None }),
                Err(err) => {
                    log::warn!(
                        target: "lmcache_resp::engine",
                        "I/O worker {index} could not make its io_uring ({err}); it runs the poll loop"
                    );
                    IoLoop::Poll(PollLoop::default())
                }
            },
        }
    }

    /// Makes every step connection `c` can make now.
    pub fn drive(&mut self, c: usize, conn: &mut Conn, now: Instant, out: &mut Vec<Completion>) {
        match self {
            IoLoop::Poll(poll) => {
                let ready = poll.readiness.get(c).copied().unwrap_or(Readiness::OPTIMISTIC);
                conn.drive(now, ready, out);
            }
            IoLoop::Ring(ring) => {
                conn.attach_ring(&ring.ring);
                conn.drive_ring(now, out);
            }
        }
    }

    /// Waits until the doorbell rings, a connection can move (its socket is ready, or its
    /// operation completed), or `wake` or a connection's own deadline passes.
    pub fn wait(&mut self, doorbell: &EventFd, conns: &[Conn], wake: Option<Instant>) {
        let wake = conns.iter().fold(wake, |wake, conn| earliest(wake, conn.interest().2));
        match self {
            IoLoop::Poll(poll) => poll.wait(doorbell, conns, wake),
            IoLoop::Ring(ring) => ring.wait(doorbell, wake.map(|at| at.saturating_duration_since(Instant::now()))),
        }
    }

    /// Once the ring died (`net::uring`, "A ring the kernel stops serving"): every connection
    /// leaves it, this worker runs the poll loop from then on, and `told` (the engine's, which
    /// its `io_loop` reports) learns why, from the first worker it happened to.
    pub fn fall_back_if_ring_died(
        &mut self,
        index: usize,
        conns: &mut [Conn],
        out: &mut Vec<Completion>,
        told: &Mutex<Option<String>>,
    ) {
        let IoLoop::Ring(ring) = self else { return };
        let Some(why) = ring.ring.failure() else { return };
        log::warn!(target: "lmcache_resp::engine", "I/O worker {index}: {why}; it runs the poll loop from now on");
        told.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get_or_insert_with(|| why.clone());
        let now = Instant::now();
        for conn in conns {
            conn.leave_ring(now, &why, out);
        }
        *self = IoLoop::Poll(PollLoop::default());
    }
}

impl PollLoop {
    /// One `ppoll` over the doorbell and every socket with an interest, until one is ready or
    /// `wake` passes; what each socket reported is kept for [`IoLoop::drive`].
    fn wait(&mut self, doorbell: &EventFd, conns: &[Conn], wake: Option<Instant>) {
        self.readiness.resize(conns.len(), Readiness::OPTIMISTIC);
        let mut fds = Vec::with_capacity(conns.len() + 1);
        fds.push(PollFd::from_borrowed_fd(doorbell.as_fd(), PollFlags::IN));
        let mut slots = Vec::with_capacity(conns.len());
        for conn in conns {
            let (fd, interest, _) = conn.interest();
            match fd {
                Some(fd) if interest.read || interest.write => {
                    slots.push(Some(fds.len()));
                    fds.push(PollFd::from_borrowed_fd(fd, poll_flags(interest)));
                }
                _ => slots.push(None),
            }
        }
        let timeout = timeout_until(wake, Instant::now());
        let polled = poll(&mut fds, timeout.as_ref());
        let doorbell_rang = matches!(polled, Ok(n) if n > 0) && fds[0].revents().contains(PollFlags::IN);
        for (ready, slot) in self.readiness.iter_mut().zip(&slots) {
            *ready = match (polled, slot) {
                (Ok(n), Some(i)) if n > 0 => Readiness::from_poll(fds[*i].revents()),
                _ => Readiness::default(),
            };
        }
        drop(fds);
        if doorbell_rang {
            doorbell.reset();
        }
    }
}

impl RingLoop {
    /// Submits what the connections queued and waits until something completes, the doorbell
    /// rings, or `timeout` passes.
    fn wait(&mut self, doorbell: &EventFd, timeout: Option<Duration>) {
        if let Some(id) = self.doorbell {
            // A multishot poll that ended (the kernel ends one that overflows the queue) is
            // made again.
            if self.ring.take(id).is_some() {
                self.doorbell = None;
            }
        }
        if self.doorbell.is_none() {
            self.doorbell = self.ring.poll(doorbell.as_fd().as_raw_fd(), libc::POLLIN as u32, true).ok();
            if self.doorbell.is_none() {
                // Without its doorbell the worker would sleep through submissions: look often.
                let short = Duration::from_millis(1);
                return self.wait_at_most(Some(timeout.map_or(short, |t| t.min(short))));
            }
        }
        self.wait_at_most(timeout);
    }

    fn wait_at_most(&self, timeout: Option<Duration>) {
        // A wait the kernel refuses kills the ring, which said why; the worker then falls back
        // (IoLoop::fall_back_if_ring_died).
        let _ = self.ring.wait(timeout);
    }
}
