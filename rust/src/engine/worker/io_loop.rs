//! The seam between the worker's loop and how it waits and moves bytes (`io_backend`): the
//! poll loop (one `ppoll` over the doorbell and every socket, then the socket calls of
//! `Conn::drive`) or the ring (`net::uring`: each round's sends and receives and the wait in
//! one `io_uring_enter`, `Conn::drive_ring`). Everything else in the loop is the same.

use crate::conn::{Completion, Conn};
use crate::net::uring::{OpId, Ring};
use crate::net::{EventFd, Readiness};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

/// Which loop a worker runs, as the engine chose it (`settings::IoBackend` resolved by the
/// probe at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Poll,
    Uring,
}

/// A worker's I/O, one kind or the other.
pub enum IoLoop {
    /// Per connection (as `nodes.conns`): what poll last said.
    Poll {
        readiness: Vec<Readiness>,
    },
    Ring(RingLoop),
}

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
            Backend::Poll => IoLoop::Poll { readiness: Vec::new() },
            Backend::Uring => match Ring::new() {
                Ok(ring) => IoLoop::Ring(RingLoop { ring: Arc::new(ring), doorbell: None }),
                Err(err) => {
                    log::warn!(
                        target: "lmcache_resp::engine",
                        "I/O worker {index} could not make its io_uring ({err}); it runs the poll loop"
                    );
                    IoLoop::Poll { readiness: Vec::new() }
                }
            },
        }
    }

    /// Once the ring died (`net::uring`, "A ring the kernel stops serving"): every connection
    /// leaves it, and this worker runs the poll loop from then on.
    pub fn fall_back_if_ring_died(
        &mut self,
        index: usize,
        conns: &mut [Conn],
        out: &mut Vec<Completion>,
        told: &std::sync::Mutex<Option<String>>,
    ) {
        let IoLoop::Ring(ring) = self else { return };
        let Some(why) = ring.ring.failure() else { return };
        log::warn!(target: "lmcache_resp::engine", "I/O worker {index}: {why}; it runs the poll loop from now on");
        told.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get_or_insert_with(|| why.clone());
        let now = std::time::Instant::now();
        for conn in conns {
            conn.leave_ring(now, &why, out);
        }
        *self = IoLoop::Poll { readiness: Vec::new() };
    }

    /// Makes every step connection `c` can make now.
    pub fn drive(&mut self, c: usize, conn: &mut Conn, now: std::time::Instant, out: &mut Vec<Completion>) {
        match self {
            IoLoop::Poll { readiness } => {
                let ready = readiness.get(c).copied().unwrap_or(Readiness::OPTIMISTIC);
                conn.drive(now, ready, out);
            }
            IoLoop::Ring(ring) => {
                conn.attach_ring(&ring.ring);
                conn.drive_ring(now, out);
            }
        }
    }
}

impl RingLoop {
    /// Submits what the connections queued and waits until something completes, the doorbell
    /// rings, or `timeout` passes.
    pub fn wait(&mut self, doorbell: &EventFd, timeout: Option<Duration>) {
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
