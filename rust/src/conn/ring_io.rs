//! A connection's operations on its worker's io_uring (`io_backend = uring`), driven by
//! `Conn::drive_ring`.
//!
//! A plaintext connection that is `Handshaking` or `Ready` runs on completions: one send (the
//! whole gather list `ConnCore::transmit` filled, `MSG_WAITALL`) and one receive (into what
//! `ConnCore::recv_target` names: scratch, or the rest of a value straight into its page) in
//! flight at a time, both submitted with the worker's wait. Everything else (connecting, the
//! TLS handshake and TLS traffic, the plaintext check) runs as in the poll loop, by readiness,
//! with the ring's poll standing in for `ppoll`.
//!
//! A send is lent to the kernel when it is submitted (`ConnCore::on_send_started`) and sent when
//! its completion says how much the socket took (`ConnCore::on_sent`, as the poll loop reports a
//! `sendmsg`): until then its requests are on their way but unanswerable, and what they point
//! into stays theirs. A short send is followed by one for the rest, which waits for room first.
//! Completions are told to the core send first ([`RingIo::take_send`] before
//! [`RingIo::take_recv`]): a reply can only answer bytes a completion counted (`net::uring`,
//! "When the kernel runs"), so one that answers a request still lent overtook it, and the core
//! refuses it as the poll loop refuses a reply to a request it has only partly written.
//!
//! Before the core decides on what a deadline or a failed send means, the operations in flight
//! are cancelled and reaped and their results told to it first ([`RingIo::settle`]): a receive
//! cancelled half-way reports the bytes it put into a page, so the key fails as partly read, as
//! on the poll loop.
//!
//! A value's payload is received with the socket's receive low-water mark at the rest of it
//! (up to 1 MiB), as the poll loop does, so the receive is woken once per value or MiB, not at
//! every burst the server writes: `RecvWait::Marked`, re-armed with a lower mark as the value
//! arrives; where no mark is in force (a Unix socket), `MSG_WAITALL` does the same.
//!
//! Memory (see `net::uring`): nothing the ring's operations use is let go while they are in
//! flight. `Conn::sync_socket` cancels and reaps them ([`RingIo::quiesce`]) before the socket,
//! the TLS session or the requests they point into are released, and [`RingIo`] reaps them
//! when the connection is dropped (it is the connection's first field, so it drops first).

use super::core::ConnCore;
use super::reader::RecvTarget;
use super::request::Completion;
use crate::net::uring::{OpId, RecvWait, Ring};
use crate::net::{Interest, IoVecs, Readiness, Stream, socket::poll_flags};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
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
    /// What a send and a receive that [`RingIo::settle`] reaped came to, not yet taken.
    settled_send: Option<(i32, usize)>,
    settled_recv: Option<i32>,
    /// The last send came back short (the socket was full): the next waits for room first.
    socket_full: bool,
}

/// What became of an attempt to start a receive.
pub(super) enum Started {
    /// One is in flight (it was, or it was started).
    Yes,
    /// The core wants none now (or dropped the connection: see its state).
    Nothing,
    /// The ring refused it.
    Failed(io::Error),
}

impl RingIo {
    pub(super) fn new(ring: &Arc<Ring>) -> RingIo {
        RingIo {
            ring: ring.clone(),
            send: None,
            recv: None,
            poll: None,
            settled_send: None,
            settled_recv: None,
            socket_full: false,
        }
    }

    /// Whether a send or a receive is in flight, or reaped and not yet told to the core (then
    /// nothing else may read or write the socket, and nothing they point into may be let go).
    pub(super) fn moving_data(&self) -> bool {
        self.send.is_some() || self.recv.is_some() || self.settled_send.is_some() || self.settled_recv.is_some()
    }

    /// Cancels every operation and waits for their completions; their results are dropped
    /// (the socket they were for is going).
    pub(super) fn quiesce(&mut self) {
        let mut ids = Vec::with_capacity(3);
        ids.extend(self.send.take().map(|(id, _)| id));
        ids.extend(self.recv.take());
        ids.extend(self.poll.take().map(|(id, _)| id));
        self.settled_send = None;
        self.settled_recv = None;
        self.socket_full = false;
        if !ids.is_empty() {
            self.ring.cancel_and_reap(&ids);
        }
    }

    /// Cancels the send and the receive in flight and waits for them; what they moved before
    /// they stopped is kept for [`RingIo::take_send`] and [`RingIo::take_recv`]. After this the
    /// kernel touches none of their memory, and the socket may be read directly.
    pub(super) fn settle(&mut self) {
        let send = self.send.take();
        let recv = self.recv.take();
        let ids: Vec<OpId> = send.iter().map(|(id, _)| *id).chain(recv).collect();
        if ids.is_empty() {
            return;
        }
        let mut results = self.ring.cancel_and_reap(&ids).into_iter();
        if let Some((_, offered)) = send {
            self.settled_send = results.next().map(|result| (result, offered));
        }
        if recv.is_some() {
            self.settled_recv = results.next();
        }
    }

    /// The readiness the poll reported, once it completed (an error reads as ready: the next
    /// call on the socket says what it is).
    pub(super) fn take_poll(&mut self) -> Option<Readiness> {
        let (id, _) = self.poll?;
        let result = self.ring.take(id)?;
        self.poll = None;
        Some(match result {
            events if events >= 0 => Readiness::from_poll(rustix::event::PollFlags::from_bits_truncate(events as _)),
            _ => Readiness::OPTIMISTIC,
        })
    }

    /// The send's outcome, once it completed: how many of the bytes it offered the socket
    /// took, and how many it offered (a cancelled send took none), or why it failed.
    pub(super) fn take_send(&mut self) -> Option<io::Result<(usize, usize)>> {
        let (result, offered) = match self.settled_send.take() {
            Some(settled) => settled,
            None => {
                let (id, offered) = self.send?;
                let result = self.ring.take(id)?;
                self.send = None;
                (result, offered)
            }
        };
        let outcome = match result {
            r if r >= 0 => Ok((r as usize, offered)),
            r if r == -libc::ECANCELED => Ok((0, offered)),
            r => Err(io::Error::from_raw_os_error(-r)),
        };
        self.socket_full = matches!(outcome, Ok((written, offered)) if written < offered);
        Some(outcome)
    }

    /// The receive's outcome, once it completed: bytes received (0: the server closed), or
    /// `None` also for a receive that was interrupted and received nothing.
    pub(super) fn take_recv(&mut self) -> Option<io::Result<usize>> {
        let result = match self.settled_recv.take() {
            Some(settled) => settled,
            None => {
                let id = self.recv?;
                let result = self.ring.take(id)?;
                self.recv = None;
                result
            }
        };
        match result {
            n if n >= 0 => Some(Ok(n as usize)),
            e if e == -libc::EAGAIN || e == -libc::EINTR || e == -libc::ECANCELED => None,
            e => Some(Err(io::Error::from_raw_os_error(-e))),
        }
    }

    /// Starts a send of what the core has to send, if none is in flight; `before` runs with the
    /// byte count right before it is queued. The core counts it lent until its completion.
    pub(super) fn start_send(
        &mut self,
        core: &mut ConnCore,
        stream: &Stream,
        before: impl FnOnce(usize),
    ) -> io::Result<()> {
        if self.send.is_some() || self.settled_send.is_some() || !core.has_sendable() {
            return Ok(());
        }
        let mut iov = IoVecs::<MAX_IOV>::new();
        core.transmit(&mut iov);
        if iov.is_empty() {
            return Ok(());
        }
        let offered = iov.total_len();
        before(offered);
        // SAFETY: the entries point into requests of the core's queue (headers and trailers
        // are heap bytes of their `Request`, values caller pages by `RawBuf`'s contract). Each
        // stays valid until the send's completion: the core counts them lent below, so neither
        // a reply (one to a lent request fails the connection), a deadline nor a closing store
        // finishes them, and the loss of the connection reaps this send first
        // (`Conn::sync_socket`, before the worker posts any completion or enters the ring
        // again). The socket stays open as long (sync_socket again).
        let id = unsafe { self.ring.send(stream.as_fd().as_raw_fd(), iov.as_slice(), self.socket_full) }?;
        core.on_send_started(offered);
        self.send = Some((id, offered));
        Ok(())
    }

    /// Starts a receive where the core wants the next bytes, if none is in flight.
    /// `low_water`: the socket's receive low-water mark in force (1: none).
    pub(super) fn start_recv(
        &mut self,
        core: &mut ConnCore,
        stream: &Stream,
        low_water: usize,
        now: Instant,
        out: &mut Vec<Completion>,
    ) -> Started {
        if self.recv.is_some() || self.settled_recv.is_some() {
            return Started::Yes;
        }
        let fd = stream.as_fd().as_raw_fd();
        let queued = match core.recv_target(now, out) {
            None => return Started::Nothing,
            Some(RecvTarget::Scratch(buf)) => {
                let len = buf.len();
                // SAFETY: a &mut [u8] into the reader's scratch, a heap allocation the reader
                // keeps (a reset keeps it too) for as long as the connection lives; the core
                // touches it only in `on_received`, after this receive's completion, and the
                // connection reaps this receive before it is dropped. The socket stays open
                // until the receive is reaped (Conn::sync_socket).
                let buf = unsafe { crate::memory::RawBuf::new(buf.as_mut_ptr(), len) };
                self.recv_into(fd, buf, 0, len, RecvWait::Any)
            }
            Some(RecvTarget::Payload { dest, offset, len }) => {
                let wait = if low_water > 1 { RecvWait::Marked } else { RecvWait::All };
                self.recv_into(fd, dest, offset, len, wait)
            }
        };
        match queued {
            Ok(id) => {
                self.recv = Some(id);
                Started::Yes
            }
            Err(err) => Started::Failed(err),
        }
    }

    fn recv_into(
        &self,
        fd: RawFd,
        buf: crate::memory::RawBuf,
        offset: usize,
        len: usize,
        wait: RecvWait,
    ) -> io::Result<OpId> {
        // SAFETY: scratch as `start_recv` says; a payload range is the rest of the value being
        // received, inside the page of the request at the front of the queue, valid by
        // `RawBuf`'s contract until that request finishes, which only this receive's completion
        // or the loss of the connection (which reaps it first, in Conn::sync_socket) can do.
        // The socket stays open as long.
        unsafe { self.ring.recv(fd, buf, offset, len, wait) }
    }

    /// Waits for the readiness `interest` asks of `fd` (none: no poll), replacing a poll that
    /// waits for less.
    pub(super) fn arm_poll(&mut self, fd: Option<RawFd>, interest: Interest) {
        let events = if fd.is_some() { poll_flags(interest).bits() as u32 } else { 0 };
        match self.poll {
            Some((_, armed)) if events != 0 && armed & events == events => return,
            Some((id, _)) => {
                self.ring.detach_poll(id);
                self.poll = None;
            }
            None => {}
        }
        let Some(fd) = fd.filter(|_| events != 0) else { return };
        // A poll that cannot be queued leaves the connection to its timers, as a failed ppoll
        // would: the next round tries again.
        if let Ok(id) = self.ring.poll(fd, events, false) {
            self.poll = Some((id, events));
        }
    }

    /// Cancels a poll left from before the connection ran on completions.
    pub(super) fn drop_poll(&mut self) {
        if let Some((id, _)) = self.poll.take() {
            self.ring.detach_poll(id);
        }
    }
}

impl Drop for RingIo {
    fn drop(&mut self) {
        self.quiesce();
    }
}
