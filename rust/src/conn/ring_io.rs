//! The connection driven over its worker's io_uring (`io_backend = uring`).
//!
//! A plaintext connection that is `Handshaking` or `Ready` runs on completions: one send (the
//! whole gather list `ConnCore::transmit` filled, `MSG_WAITALL`) and one receive (into what
//! `ConnCore::recv_target` names: scratch, or the rest of a value straight into its page with
//! `MSG_WAITALL`, so a large value wakes the worker once) in flight at a time, both submitted
//! with the worker's wait. Everything else (connecting, the TLS handshake and TLS traffic, the
//! plaintext check) runs as in the poll loop, by readiness, with the ring's poll standing in
//! for `ppoll`.
//!
//! The core is told a send went out when it is submitted (`on_sent` with all of it): a reply
//! may then be read before the send's own completion is seen, and the kernel has read every
//! byte a server answered before it answers. The send's completion only confirms it; a send
//! that fails breaks the connection as a failed `sendmsg` does.
//!
//! Memory (see `net::uring`): nothing the ring's operations use is let go while they are in
//! flight. `Conn::sync_socket` cancels and reaps them before the socket, the TLS session or
//! the requests they point into are released, and [`RingIo`] reaps them when the connection is
//! dropped (it is the connection's first field, so it drops first).

use super::{Conn, ConnState, RecvTarget};
use crate::net::uring::{OpId, Ring};
use crate::net::{IoVecs, Readiness, socket::poll_flags};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Instant;

/// Gather-list entries per send.
const MAX_IOV: usize = 128;

/// A connection's operations on its worker's ring.
pub(super) struct RingIo {
    ring: Arc<Ring>,
    /// The send in flight, and how many bytes it carries.
    send: Option<(OpId, usize)>,
    recv: Option<OpId>,
    /// A poll for the readiness of a connection not running on completions, and its events.
    poll: Option<(OpId, u32)>,
}

impl RingIo {
    pub(super) fn new(ring: Arc<Ring>) -> RingIo {
        RingIo { ring, send: None, recv: None, poll: None }
    }

    /// Whether a send or a receive is in flight (then nothing else may read or write the
    /// socket, and nothing they point into may be let go).
    fn moving_data(&self) -> bool {
        self.send.is_some() || self.recv.is_some()
    }

    /// Cancels every operation and waits for their completions; their results are dropped
    /// (the socket they were for is going).
    pub(super) fn quiesce(&mut self) {
        let mut ids = Vec::with_capacity(3);
        ids.extend(self.send.take().map(|(id, _)| id));
        ids.extend(self.recv.take());
        ids.extend(self.poll.take().map(|(id, _)| id));
        if !ids.is_empty() {
            self.ring.cancel_and_reap(&ids);
        }
    }
}

impl Drop for RingIo {
    fn drop(&mut self) {
        self.quiesce();
    }
}

impl Conn {
    /// Drives this connection over `ring` from now on (instead of [`Conn::drive`]).
    pub fn attach_ring(&mut self, ring: &Arc<Ring>) {
        if self.ring.is_none() {
            self.ring = Some(RingIo::new(ring.clone()));
        }
    }

    /// One round over the ring: takes what completed, then starts what may start. Call once
    /// per round of the worker, after its wait.
    pub fn drive_ring(&mut self, now: Instant, out: &mut Vec<super::Completion>) {
        let Some(io) = &mut self.ring else { return };
        let ring = io.ring.clone();
        let mut ready = Readiness::default();
        if let Some((id, _)) = io.poll {
            if let Some(result) = ring.take(id) {
                io.poll = None;
                // An error (or a cancel) reads as ready: the next call says what it is.
                ready = match result {
                    events if events >= 0 => {
                        Readiness::from_poll(rustix::event::PollFlags::from_bits_truncate(events as _))
                    }
                    _ => Readiness::OPTIMISTIC,
                };
            }
        }
        if let Some((id, offered)) = io.send {
            if let Some(result) = ring.take(id) {
                io.send = None;
                self.on_ring_sent(now, result, offered, out);
            }
        }
        if let Some(id) = self.ring.as_ref().and_then(|io| io.recv) {
            if let Some(result) = ring.take(id) {
                self.ring.as_mut().expect("attached").recv = None;
                self.on_ring_received(now, result, out);
            }
        }
        if !self.on_completions() {
            if self.ring.as_ref().is_some_and(RingIo::moving_data) {
                // Left by a connection that just stopped running on completions (a drain):
                // it is reaped by sync_socket when the socket goes.
                return;
            }
            self.drive(now, ready, out);
        }
        if self.on_completions() {
            self.start_ring_ops(now, out);
        } else {
            self.arm_poll();
        }
    }

    /// Whether the connection runs on completions now: plaintext, with its handshake or its
    /// requests flowing.
    fn on_completions(&self) -> bool {
        self.socket.tls.is_none()
            && self.socket.stream.is_some()
            && self.plaintext_check.is_none()
            && matches!(self.core.state(), ConnState::Handshaking | ConnState::Ready)
    }

    /// A send completed: all of it, or the connection failed (it broke, or the socket took
    /// only part before an error).
    fn on_ring_sent(&mut self, now: Instant, result: i32, offered: usize, out: &mut Vec<super::Completion>) {
        if result >= 0 && result as usize == offered {
            return;
        }
        let err = match result {
            r if r < 0 => io::Error::from_raw_os_error(-r),
            r => io::Error::new(io::ErrorKind::WriteZero, format!("the socket took {r} of {offered} bytes and failed")),
        };
        self.core.on_io_error(now, err, out);
        self.sync_socket();
    }

    /// A receive completed with `result` bytes (0: the server closed), or failed.
    fn on_ring_received(&mut self, now: Instant, result: i32, out: &mut Vec<super::Completion>) {
        match result {
            0 => self.core.on_peer_closed(now, out),
            n if n > 0 => self.core.on_received(now, n as usize, out),
            e if e == -libc::EAGAIN || e == -libc::EINTR || e == -libc::ECANCELED => {}
            e => self.core.on_io_error(now, io::Error::from_raw_os_error(-e), out),
        }
        self.sync_socket();
    }

    /// Starts the send and the receive the core wants, where none is in flight.
    fn start_ring_ops(&mut self, now: Instant, out: &mut Vec<super::Completion>) {
        if let Some((id, _)) = self.ring.as_mut().and_then(|io| io.poll.take()) {
            self.ring.as_ref().expect("attached").ring.detach_poll(id);
        }
        self.start_ring_send(now, out);
        if self.on_completions() {
            self.start_ring_recv(now, out);
        }
    }

    fn start_ring_send(&mut self, now: Instant, out: &mut Vec<super::Completion>) {
        let Some(io) = &self.ring else { return };
        if io.send.is_some() || !self.core.has_sendable() {
            return;
        }
        let ring = io.ring.clone();
        let Some(stream) = &self.socket.stream else { return };
        let mut iov = IoVecs::<MAX_IOV>::new();
        self.core.transmit(&mut iov);
        if iov.is_empty() {
            return;
        }
        let offered = iov.total_len();
        self.before_send(stream, offered);
        // SAFETY: the entries point into requests of the core's queue (headers and trailers
        // are heap bytes of their `Request`, values caller pages by `RawBuf`'s contract). Each
        // stays valid until the send's completion: the core counts them sent now, so only a
        // reply (which the server sends after the kernel has read every byte of the request)
        // or the loss of the connection (`sync_socket` reaps this send first) finishes them.
        // The socket stays open as long (sync_socket again).
        let sent = unsafe { ring.send(stream.as_fd().as_raw_fd(), iov.as_slice()) };
        match sent {
            Ok(id) => {
                self.core.on_sent(offered, offered);
                self.ring.as_mut().expect("attached").send = Some((id, offered));
            }
            Err(err) => {
                self.core.on_io_error(now, err, out);
                self.sync_socket();
            }
        }
    }

    fn start_ring_recv(&mut self, now: Instant, out: &mut Vec<super::Completion>) {
        if self.ring.as_ref().is_none_or(|io| io.recv.is_some()) {
            return;
        }
        // The kernel's receive retries wake on the same readiness poll does: with the mark at
        // the rest of a large value, a MSG_WAITALL receive is woken (and the worker with it)
        // once, not at every burst the server writes (measured: 41 switches a 32 x 256 KiB GET
        // batch with the mark, 55 without).
        self.set_low_water(now, out);
        let (Some(io), Some(stream)) = (&self.ring, &self.socket.stream) else { return };
        let (ring, fd) = (&io.ring, stream.as_fd().as_raw_fd());
        let queued = match self.core.recv_target(now, out) {
            None => None,
            Some(RecvTarget::Scratch(buf)) => {
                let len = buf.len();
                // SAFETY: a &mut [u8] into the reader's scratch, a heap allocation the reader
                // keeps (a reset keeps it too) for as long as the connection lives; the core
                // touches it only in `on_received`, after this receive's completion, and the
                // connection reaps this receive before it is dropped. The socket stays open
                // until the receive is reaped (sync_socket).
                Some(unsafe { ring.recv(fd, crate::memory::RawBuf::new(buf.as_mut_ptr(), len), 0, len, false) })
            }
            // SAFETY: the rest of the value being received, inside the page of the request at
            // the front of the queue, valid by `RawBuf`'s contract until that request finishes,
            // which only this receive's completion or the loss of the connection (which reaps it
            // first, in sync_socket) can do. The socket stays open as long.
            Some(RecvTarget::Payload { dest, offset, len }) => Some(unsafe { ring.recv(fd, dest, offset, len, true) }),
        };
        match queued {
            None => self.sync_socket(),
            Some(Ok(id)) => self.ring.as_mut().expect("attached").recv = Some(id),
            Some(Err(err)) => {
                self.core.on_io_error(now, err, out);
                self.sync_socket();
            }
        }
    }

    /// A connection not running on completions waits for its socket's readiness on the ring.
    fn arm_poll(&mut self) {
        let (fd, interest, _) = self.interest();
        let fd = fd.map(|fd| fd.as_raw_fd());
        let events = if fd.is_some() { poll_flags(interest).bits() as u32 } else { 0 };
        let Some(io) = &mut self.ring else { return };
        match io.poll {
            Some((_, armed)) if events != 0 && armed & events == events => return,
            Some((id, _)) => {
                io.ring.detach_poll(id);
                io.poll = None;
            }
            None => {}
        }
        let Some(fd) = fd.filter(|_| events != 0) else { return };
        // A poll that cannot be queued leaves the connection to its timers, as a failed ppoll
        // would: the next round tries again.
        if let Ok(id) = io.ring.poll(fd, events, false) {
            io.poll = Some((id, events));
        }
    }
}
