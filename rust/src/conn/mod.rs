//! One pipelined connection: its I/O-free state machine ([`ConnCore`], `core/`) and the thin
//! driver that runs it over a non-blocking socket ([`Conn`]).
//!
//! The same connection serves the blocking [`crate::blocking::BlockingClient`] (driven by a
//! deadline-bounded poll on one socket) and the engine's workers (many connections, one poll or
//! one io_uring each). Every decision (when to connect, what to send, where a payload lands,
//! what a reply means, when to retry, back off or give up) is the core's; the driver only moves
//! bytes and reports what the socket did. This file holds what both drivers share (the socket,
//! connecting, deadlines, a failed send); `poll_driver.rs` drives by readiness, `ring_driver.rs`
//! (with `ring_io.rs`) on an io_uring's completions. On a TLS endpoint the driver feeds the
//! I/O-free [`TlsSession`] the same way (`tls_io`), and asks a silent port whether it is a
//! plaintext server on a second connection (`plaintext_check`).

pub mod core;
pub mod hook;
mod plaintext_check;
mod poll_driver;
pub mod reader;
pub mod request;
mod ring_driver;
mod ring_io;
#[cfg(test)]
mod tests;
mod tls_driver;
mod tls_io;

pub use self::core::{ConnCore, ConnState, Handoff, PipelineLimits, ReconnectPolicy};
pub use reader::RecvTarget;
pub use request::{Completion, Outcome, Request, Scope};

use crate::net::tls::{Failure, TlsSession};
use crate::net::{Address, ConnectOptions, Interest, IoVecs, Readiness, Stream};
use plaintext_check::PlaintextCheck;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Instant;

/// Bytes read from one connection before others get a turn.
const READ_BUDGET: usize = 8 << 20;
/// The rest of a value below which the worker is woken at every arrival (a low-water mark
/// costs a system call to set and one to clear).
const LOW_WATER_MIN: usize = 128 << 10;
/// The most a low-water mark waits for: the kernel sizes the receive buffer to fit it.
const LOW_WATER_MAX: usize = 1 << 20;
/// Gather-list entries per `sendmsg`.
const MAX_IOV: usize = 128;

/// A connection over a real socket.
pub struct Conn {
    /// Its operations on the worker's io_uring, when it runs there (`io_backend = uring`).
    /// First: dropped first, it waits for those operations before anything they use goes.
    ring: Option<ring_io::RingIo>,
    core: ConnCore,
    addresses: Arc<[Address]>,
    /// The socket, and its TLS on a TLS endpoint.
    socket: Socket,
    /// The last read stopped at its budget with records still in the TLS session, which poll
    /// cannot see: drive again at once.
    tls_input_waiting: bool,
    /// Which of `addresses` the socket connected to.
    address: usize,
    /// During a TLS handshake: whether the port is a plaintext server, asked on a second
    /// connection (see [`plaintext_check`]).
    plaintext_check: Option<PlaintextCheck>,
    /// A TLS failure over plaintext first bytes, reported once the check says whether the port
    /// is plaintext (permanent) or the bytes were injected on the path (transient).
    held_failure: Option<Failure>,
}

impl Conn {
    /// A disconnected connection to `options.endpoint`, reached at `addresses` (tried in
    /// order).
    pub fn new(
        options: Arc<ConnectOptions>,
        addresses: Arc<[Address]>,
        policy: ReconnectPolicy,
        limits: PipelineLimits,
    ) -> Conn {
        Conn {
            ring: None,
            core: ConnCore::new(options, addresses.len(), policy, limits),
            addresses,
            socket: Socket { stream: None, tls: None },
            tls_input_waiting: false,
            address: 0,
            plaintext_check: None,
            held_failure: None,
        }
    }

    /// A disconnected connection to `options.endpoint`, whose host name is being looked up
    /// elsewhere: requests queue until [`Conn::set_addresses`] (see [`ConnCore::new`]).
    pub fn awaiting_addresses(options: Arc<ConnectOptions>, policy: ReconnectPolicy, limits: PipelineLimits) -> Conn {
        Conn {
            ring: None,
            core: ConnCore::new(options, 0, policy, limits),
            addresses: Arc::new([]),
            socket: Socket { stream: None, tls: None },
            tls_input_waiting: false,
            address: 0,
            plaintext_check: None,
            held_failure: None,
        }
    }

    /// The endpoint's addresses, once its host name was looked up (at least one).
    pub fn set_addresses(&mut self, addresses: Arc<[Address]>) {
        self.core.set_address_count(addresses.len());
        self.addresses = addresses;
    }

    /// Whether the connection still awaits its endpoint's addresses.
    #[cfg(test)]
    pub fn awaits_addresses(&self) -> bool {
        self.core.awaits_addresses()
    }

    /// Fails every request now and every later one at once (see [`ConnCore::fail_for_good`]).
    pub fn fail_for_good(&mut self, now: Instant, err: crate::error::Error, out: &mut Vec<Completion>) {
        self.settle_ring(now, out);
        self.core.fail_for_good(now, err, out);
        self.sync_socket();
    }

    /// Shares the server's health with the other connections to it (see
    /// [`ConnCore::with_health`]).
    pub fn with_health(mut self, health: Arc<crate::health::EndpointHealth>) -> Conn {
        self.core = self.core.with_health(health);
        self
    }

    /// What the server said it is in the last handshake (see [`ConnCore::server_identity`]).
    pub fn server_identity(&self) -> Option<&crate::net::ServerIdentity> {
        self.core.server_identity()
    }

    /// In Redis Cluster: see [`ConnCore::handing_off`].
    pub fn handing_off(mut self) -> Conn {
        self.core = self.core.handing_off();
        self
    }

    /// See [`ConnCore::cap_replies`].
    pub fn cap_replies(&mut self, max_reply_bytes: u64) {
        self.core.cap_replies(max_reply_bytes);
    }

    /// A subscriber's connection: see [`ConnCore::keep_pushes`].
    pub fn keep_pushes(&mut self) {
        self.core.keep_pushes();
    }

    /// Pub/sub messages received since the last call.
    pub fn take_pushes(&mut self) -> Vec<crate::resp::Reply> {
        self.core.take_pushes()
    }

    /// Requests handed back since the last call, with why.
    pub fn take_handoffs(&mut self) -> Vec<(Request, Handoff)> {
        self.core.take_handoffs()
    }

    /// Queues `request` right behind an `ASKING`, as an `-ASK` redirect requires.
    pub fn push_asking(&mut self, request: Request, out: &mut Vec<Completion>) {
        self.core.push_asking(request, out);
    }

    /// Queues a request.
    pub fn push(&mut self, request: Request, out: &mut Vec<Completion>) {
        self.core.push(request, out);
    }

    /// The server this connection goes to.
    pub fn endpoint(&self) -> &crate::net::Endpoint {
        self.core.endpoint()
    }

    /// How the connection reaches and authenticates to its server.
    pub fn options(&self) -> Arc<ConnectOptions> {
        self.core.options()
    }

    /// User requests queued or in flight.
    pub fn outstanding_requests(&self) -> usize {
        self.core.outstanding_requests()
    }

    /// No user request queued or in flight.
    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }

    /// Pipeline cost of all user requests not yet completed.
    pub fn outstanding_cost(&self) -> usize {
        self.core.outstanding_cost()
    }

    /// Waiting out a backoff after failed attempts, or failed for good until its recheck: a
    /// request queued here now waits for that, or fails.
    pub fn is_out_of_service(&self) -> bool {
        matches!(self.core.state(), ConnState::Backoff { .. } | ConnState::Failed { .. })
    }

    /// The socket, for tests and diagnostics.
    pub fn stream(&self) -> Option<&Stream> {
        self.socket.stream.as_ref()
    }

    /// A send failed. A server that refuses a request may answer and close before it has read
    /// all of it (Redis and Valkey do for a bulk string longer than their proto-max-bulk-len):
    /// what it said, if it came, is heard first, so the request fails with the server's reason
    /// and not with a broken pipe, whatever the loop.
    fn on_send_failed(&mut self, now: Instant, err: io::Error, out: &mut Vec<Completion>) {
        if let Some(io) = &mut self.ring {
            // Nothing of the ring may use the socket while it is read directly below.
            io.settle();
            self.absorb_recv(now, out);
        }
        if self.core.state().has_socket() {
            self.read(now, out);
        }
        if self.core.state().has_socket() {
            self.core.on_io_error(now, err, out);
        }
        self.sync_socket();
    }

    /// What to wait for before driving again: the socket (if any) and its interest, and the
    /// instant by which `expire` or `drive` must run regardless.
    pub fn interest(&self) -> (Option<BorrowedFd<'_>>, Interest, Option<Instant>) {
        let now = Instant::now();
        let (mut interest, mut wake) = self.core.interest(now);
        if let Some(tls) = &self.socket.tls {
            // Sealed bytes the socket did not take yet, which the core counts as sent.
            interest.write |= tls.wants_write();
            if self.tls_input_waiting {
                wake = Some(now);
            }
        }
        if self.plaintext_check.is_some() {
            // Its socket is not polled: looked at on a timer while the handshake lasts.
            let next = now + plaintext_check::POLL_EVERY;
            wake = Some(wake.map_or(next, |wake| wake.min(next)));
        }
        (self.socket.stream.as_ref().map(|s| s.as_fd()), interest, wake)
    }

    /// Fails what is overdue (see [`ConnCore::handle_timeout`]). On a ring, what the send and the
    /// receive in flight moved before the deadline is told to the core first: a value partly
    /// received into its page then fails as partly read, as on the poll loop.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if self.core.is_due(now) {
            self.settle_ring(now, out);
        }
        if self.core.take_plaintext_check(now) && !self.socket.tls.as_ref().is_some_and(TlsSession::heard_from_server) {
            self.start_plaintext_check();
        }
        self.settle_plaintext_check(now, out);
        self.core.handle_timeout(now, out);
        self.sync_socket();
    }

    /// Closes the socket at once and fails every request (see [`ConnCore::abort`]).
    pub fn abort(&mut self, err: &crate::error::Error, out: &mut Vec<Completion>) {
        self.settle_ring(Instant::now(), out);
        self.core.abort(err, out);
        self.sync_socket();
    }

    /// Fails requests that have not started to go out (see [`ConnCore::fail_unsent`]).
    pub fn fail_unsent(&mut self, err: &crate::error::Error, out: &mut Vec<Completion>) {
        self.core.fail_unsent(err, out);
    }

    /// Drops the socket once the core no longer has one.
    fn sync_socket(&mut self) {
        if !self.core.state().has_socket() {
            // Nothing the ring's operations use goes before they are reaped.
            if let Some(io) = &mut self.ring {
                io.quiesce();
            }
            self.socket.close_tls();
            self.socket.stream = None;
            self.socket.tls = None;
            self.tls_input_waiting = false;
            self.plaintext_check = None;
            self.held_failure = None;
        }
    }

    /// Starts connects the core asks for (the next address at once after a failure) and
    /// finishes the one under way once the socket is writable.
    fn connect(&mut self, now: Instant, ready: Readiness, out: &mut Vec<Completion>) {
        self.sync_socket();
        if let (ConnState::Connecting { .. }, true) = (self.core.state(), ready.writable) {
            match self.socket.stream.as_ref().expect("connecting has a socket").finish_connect() {
                Ok(()) => {
                    self.core.on_connected(now);
                    self.start_tls(now, out);
                }
                Err(err) => self.core.on_connect_failed(now, &err, out),
            }
            self.sync_socket();
            if self.core.state() != ConnState::Disconnected {
                return;
            }
        }
        // One attempt per drive: its addresses in turn, until one connects or all failed (then
        // the core backs off, however short the backoff).
        while let Some(address) = self.core.poll_connect(now) {
            match Stream::start_connect(&self.addresses[address]) {
                Ok((stream, connected)) => {
                    self.socket.stream = Some(stream);
                    self.address = address;
                    if connected {
                        self.core.on_connected(now);
                        self.start_tls(now, out);
                    }
                    return;
                }
                Err(err) => self.core.on_connect_failed(now, &err, out),
            }
            if self.core.state() != ConnState::Disconnected {
                return;
            }
        }
    }
}

/// The connection's socket (exactly while the core's state has one) and, on a TLS endpoint,
/// its TLS.
struct Socket {
    stream: Option<Stream>,
    tls: Option<TlsSession>,
}

impl Socket {
    /// Before the socket closes: close_notify on an established session, or the fatal alert a
    /// failed one queued, as far as the socket takes them now.
    fn close_tls(&mut self) {
        if let (Some(stream), Some(tls)) = (&self.stream, &mut self.tls) {
            tls.close();
            let _ = tls_io::flush(tls, stream);
        }
    }
}

impl Drop for Socket {
    /// A connection dropped (its store closed) says close_notify too.
    fn drop(&mut self) {
        self.close_tls();
    }
}
