//! One pipelined connection: its I/O-free state machine ([`ConnCore`]) and the thin driver
//! that runs it over a non-blocking socket ([`Conn`]).
//!
//! The same connection serves the blocking [`crate::blocking::BlockingClient`] (driven by a
//! deadline-bounded poll on one socket) and the engine's workers (many connections, one poll).
//! Every decision (when to connect, what to send, where a payload lands, what a reply means,
//! when to retry, back off or give up) is the core's; the driver only moves bytes and reports
//! what the socket did. On a TLS endpoint it feeds the I/O-free [`TlsSession`] the same way
//! (`tls_io`), and asks a silent port whether it is a plaintext server on a second
//! connection (`plaintext_check`).

pub mod core;
pub mod hook;
mod plaintext_check;
pub mod reader;
pub mod request;
mod ring_io;
#[cfg(test)]
mod tests;
mod tls_io;

pub use self::core::{ConnCore, ConnState, Handoff, PipelineLimits, ReconnectPolicy};
pub use reader::RecvTarget;
pub use request::{Completion, Outcome, Request, Scope};

use crate::net::tls::{Failure, Progress, TlsSession, failure};
use crate::net::{Address, ConnectOptions, Interest, IoVecs, Readiness, Stream};
use plaintext_check::{PlaintextCheck, Verdict};
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

    /// Makes every step the socket's readiness allows: connecting, reading, writing.
    pub fn drive(&mut self, now: Instant, mut ready: Readiness, out: &mut Vec<Completion>) {
        // A connection found broken is replaced at once, once per call so a flapping server
        // cannot make this spin.
        for _ in 0..2 {
            self.connect(now, ready, out);
            if let ConnState::TlsHandshaking { .. } = self.core.state() {
                if !self.tls_handshake(now, out) {
                    return;
                }
                // Finished: AUTH/PING go out now, and records that came with the handshake's
                // end are read.
                ready = Readiness::OPTIMISTIC;
            }
            if !matches!(self.core.state(), ConnState::Handshaking | ConnState::Ready) {
                return;
            }
            if ready.readable || self.tls_input_waiting {
                self.read(now, out);
            }
            if ready.writable {
                self.core.on_writable();
                self.flush_tls(now, out);
            }
            self.write(now, out);
            // A handshake that just finished lets user requests go out.
            if self.core.state() == ConnState::Ready && self.core.has_sendable() {
                self.write(now, out);
            }
            if self.core.state() != ConnState::Disconnected {
                return;
            }
            ready = Readiness::OPTIMISTIC;
        }
    }

    /// Drives this connection over its worker's `ring` from now on (instead of
    /// [`Conn::drive`]; see `ring_io`).
    pub fn attach_ring(&mut self, ring: &Arc<crate::net::uring::Ring>) {
        if self.ring.is_none() {
            self.ring = Some(ring_io::RingIo::new(ring));
        }
    }

    /// One round over the ring: takes what completed, then starts what may start. Call once
    /// per round of the worker, after its wait.
    pub fn drive_ring(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let Some(io) = &mut self.ring else { return };
        let ready = io.take_poll().unwrap_or_default();
        self.absorb_ring(now, out);
        self.sync_socket();
        if !self.on_completions() {
            if self.ring.as_ref().is_some_and(ring_io::RingIo::moving_data) {
                // Cannot be: data moves only while on completions, and leaving them drops
                // the socket, which reaps it. Wait for it rather than touch the socket.
                return;
            }
            self.drive(now, ready, out);
        }
        if self.on_completions() {
            self.start_ring_ops(now, out);
        } else {
            let (fd, interest, _) = self.interest();
            let fd = fd.map(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd));
            if let Some(io) = &mut self.ring {
                io.arm_poll(fd, interest);
            }
        }
    }

    /// Tells the core what the ring's send and receive did, once they completed: the send
    /// first, since a reply can only answer bytes a send's completion counted (see `ring_io`).
    fn absorb_ring(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let Some(io) = &mut self.ring else { return };
        match io.take_send() {
            Some(Ok((written, offered))) => {
                self.core.on_sent(written, offered);
                if written < offered {
                    // The socket is full: the ring's next send waits for room itself.
                    self.core.on_writable();
                }
            }
            Some(Err(err)) => return self.on_send_failed(now, err, out),
            None => {}
        }
        self.absorb_recv(now, out);
    }

    fn absorb_recv(&mut self, now: Instant, out: &mut Vec<Completion>) {
        match self.ring.as_mut().and_then(ring_io::RingIo::take_recv) {
            Some(Ok(0)) => self.core.on_peer_closed(now, out),
            Some(Ok(n)) => self.core.on_received(now, n, out),
            Some(Err(err)) => self.core.on_io_error(now, err, out),
            None => {}
        }
    }

    /// Before the core decides on a deadline or a failure: the ring's send and receive are
    /// cancelled and reaped, and what they moved is told to the core (see `ring_io`).
    fn settle_ring(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if let Some(io) = self.ring.as_mut().filter(|io| io.moving_data()) {
            io.settle();
            self.absorb_ring(now, out);
            self.sync_socket();
        }
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

    /// The worker's ring died (see `net::uring`): this connection goes back to the poll loop.
    /// What its send and receive were doing is lost with the ring, and their socket was shut
    /// down: the connection goes, and its requests are retried or fail as on any broken
    /// connection (a value that was being received into its page counts as partly received).
    pub fn leave_ring(&mut self, now: Instant, why: &str, out: &mut Vec<Completion>) {
        let Some(io) = self.ring.take() else { return };
        let lost = io.moving_data();
        drop(io);
        if lost && self.core.state().has_socket() {
            self.core.on_receive_lost();
            let err = io::Error::other(format!("{why}; the connection is opened again on the poll loop"));
            self.core.on_io_error(now, err, out);
        }
        self.sync_socket();
    }

    /// Whether the connection runs on completions now (on a ring): plaintext, with its
    /// handshake or its requests flowing.
    fn on_completions(&self) -> bool {
        self.socket.tls.is_none()
            && self.socket.stream.is_some()
            && self.plaintext_check.is_none()
            && matches!(self.core.state(), ConnState::Handshaking | ConnState::Ready)
    }

    /// Starts the send and the receive the core wants, where none is in flight.
    fn start_ring_ops(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let (Some(io), Some(stream)) = (&mut self.ring, &self.socket.stream) else { return };
        io.drop_poll();
        let endpoint = self.core.endpoint().clone();
        let before = |offered| {
            if let Err(err) = stream.before_send(offered) {
                log::warn!(target: "lmcache_resp::conn", "{endpoint}: {err}");
            }
        };
        if let Err(err) = io.start_send(&mut self.core, stream, before) {
            // The ring refused the send (it died): nothing was lent.
            self.core.on_io_error(now, err, out);
            self.sync_socket();
            return;
        }
        // The mark goes to the rest of a value about to be received in place (see ring_io).
        self.set_low_water(now, out);
        let (Some(io), Some(stream)) = (&mut self.ring, &self.socket.stream) else { return };
        match io.start_recv(&mut self.core, stream, stream.recv_low_water(), now, out) {
            ring_io::Started::Yes => {}
            ring_io::Started::Nothing => self.sync_socket(),
            ring_io::Started::Failed(err) => {
                self.core.on_io_error(now, err, out);
                self.sync_socket();
            }
        }
    }

    /// Right before the connection's first large send (a value, not its handshake, PINGs or
    /// lookups): restarts the socket's congestion control (BBR only; see `net::congestion`). A
    /// failure leaves the connection working on another congestion control, and says which.
    fn before_send(&self, stream: &Stream, offered: usize) {
        if let Err(err) = stream.before_send(offered) {
            log::warn!(target: "lmcache_resp::conn", "{}: {err}", self.core.endpoint());
        }
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

    /// Asks the port, on a second connection, whether it speaks plaintext (see
    /// [`plaintext_check`]). Where that cannot even start, a held failure is reported as it is.
    fn start_plaintext_check(&mut self) {
        if self.plaintext_check.is_none() {
            self.plaintext_check = self.addresses.get(self.address).and_then(|a| PlaintextCheck::start(a).ok());
        }
    }

    /// Acts on the plaintext check's verdict, if there is one, during the TLS handshake.
    fn settle_plaintext_check(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let ConnState::TlsHandshaking { since } = self.core.state() else { return };
        let verdict = self.plaintext_check.as_mut().map(PlaintextCheck::poll);
        let endpoint = self.core.endpoint().clone();
        let report = match (verdict, self.held_failure.take()) {
            (Some(Some(Verdict::Plaintext(shown))), held) => {
                held.unwrap_or_else(|| failure::silent_plaintext_server(&endpoint, &shown))
            }
            (Some(Some(Verdict::NotPlaintext)), Some(held)) => {
                failure::plaintext_injected(&endpoint, held.plaintext_reply.as_deref().unwrap_or_default())
            }
            (Some(Some(Verdict::NotPlaintext)), None) => {
                // A TLS server, slow to answer: the handshake waits on, to its deadline.
                self.plaintext_check = None;
                return;
            }
            // No verdict by the deadline: the plaintext first bytes may have been injected.
            (Some(None), Some(held)) if now >= since + self.core.options().connect_timeout => {
                failure::plaintext_unconfirmed(&endpoint, held.plaintext_reply.as_deref().unwrap_or_default())
            }
            (Some(None), held) => {
                self.held_failure = held;
                return;
            }
            (None, Some(held)) => held,
            (None, None) => return,
        };
        self.core.on_tls_failed(now, report.error, report.permanent, out);
        self.sync_socket();
    }

    /// Starts TLS on a socket that just connected, if the endpoint wants it.
    fn start_tls(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let ConnState::TlsHandshaking { .. } = self.core.state() else { return };
        let options = self.core.options();
        let config = options.tls.as_ref().expect("TlsHandshaking only with TLS settings");
        match TlsSession::new(config, &options.endpoint) {
            Ok(session) => self.socket.tls = Some(session),
            Err(failure) => {
                self.core.on_tls_failed(now, failure.error, failure.permanent, out);
                self.sync_socket();
            }
        }
    }

    /// Moves the TLS handshake on; whether it is done.
    fn tls_handshake(&mut self, now: Instant, out: &mut Vec<Completion>) -> bool {
        let (Some(stream), Some(tls)) = (&self.socket.stream, &mut self.socket.tls) else { return false };
        if self.held_failure.is_some() {
            return false;
        }
        match tls_io::handshake(tls, stream, self.core.endpoint()) {
            Ok(Progress::Done) => {
                self.plaintext_check = None;
                self.core.on_tls_established(now);
                true
            }
            Ok(Progress::Pending) => false,
            Err(failure) if failure.plaintext_reply.is_some() => {
                // A plaintext port, or bytes injected on the path: the check decides. This
                // connection has nothing more to say (and is not polled while it waits).
                self.socket.stream = None;
                self.socket.tls = None;
                self.held_failure = Some(failure);
                self.start_plaintext_check();
                self.settle_plaintext_check(now, out);
                false
            }
            Err(failure) => {
                self.core.on_tls_failed(now, failure.error, failure.permanent, out);
                self.sync_socket();
                false
            }
        }
    }

    /// Sends sealed TLS bytes the socket did not take before.
    fn flush_tls(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let (Some(stream), Some(tls)) = (&self.socket.stream, &mut self.socket.tls) else { return };
        match tls_io::flush(tls, stream) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => {
                self.core.on_io_error(now, err, out);
                self.sync_socket();
            }
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

    fn write(&mut self, now: Instant, out: &mut Vec<Completion>) {
        while self.core.has_sendable() {
            let Some(stream) = &self.socket.stream else { return };
            let mut iov = IoVecs::<MAX_IOV>::new();
            self.core.transmit(&mut iov);
            if iov.is_empty() {
                return;
            }
            let offered = iov.total_len();
            self.before_send(stream, offered);
            let sent = match &mut self.socket.tls {
                Some(tls) => tls_io::send(tls, stream, &iov),
                None => stream.send(iov.as_slice()),
            };
            let drain = self.socket.tls.as_ref().is_some_and(TlsSession::must_drain);
            match sent {
                Ok(written) => {
                    self.core.on_sent(written, offered);
                    if drain {
                        self.core.drain_for_new_keys();
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.core.on_send_blocked(),
                Err(err) => self.on_send_failed(now, err, out),
            }
        }
    }

    fn read(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let mut budget = READ_BUDGET;
        self.tls_input_waiting = false;
        while budget > 0 {
            let Some(stream) = &self.socket.stream else { return };
            // How much a plaintext receive asked for: a shorter answer emptied the socket, so
            // the next receive would only say "would block" (one wasted system call per wake-up,
            // which a large reply arriving in 64 KiB bursts pays dozens of times).
            let mut asked = None;
            let received = match (self.core.recv_target(now, out), &mut self.socket.tls) {
                (None, _) => break,
                (Some(RecvTarget::Scratch(buf)), None) => {
                    asked = Some(buf.len());
                    stream.recv(buf)
                }
                (Some(RecvTarget::Payload { dest, offset, len }), None) => {
                    asked = Some(len);
                    stream.recv_into(dest, offset, len)
                }
                (Some(RecvTarget::Scratch(buf)), Some(tls)) => {
                    let room = buf.len();
                    tls_io::recv(tls, stream, room, |plaintext| buf[..plaintext.len()].copy_from_slice(plaintext))
                }
                (Some(RecvTarget::Payload { dest, offset, len }), Some(tls)) => {
                    // Straight from the opened record into the page.
                    let mut at = offset;
                    tls_io::recv(tls, stream, len, |plaintext| {
                        dest.write_at(at, plaintext);
                        at += plaintext.len();
                    })
                }
            };
            let mut drained = false;
            match received {
                Ok(0) => self.core.on_peer_closed(now, out),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    drained = asked.is_some_and(|asked| n < asked);
                    self.core.on_received(now, n, out);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => match self.socket.tls.as_ref().and_then(TlsSession::refusal) {
                    // The server refused this client's certificate: as permanent as a wrong password.
                    Some(refusal) => self.core.on_tls_failed(now, refusal, true, out),
                    None => self.core.on_io_error(now, err, out),
                },
            }
            self.sync_socket();
            if drained {
                // Poll says when more has come (level-triggered: nothing is missed).
                break;
            }
        }
        self.tls_input_waiting = budget == 0 && self.socket.tls.as_ref().is_some_and(TlsSession::has_buffered_input);
        self.sync_socket();
        self.set_low_water(now, out);
    }

    /// While a large value arrives in place, poll wakes the worker only once the rest of it
    /// (up to [`LOW_WATER_MAX`]) is queued, not at every burst of the server's writes: fewer
    /// wake-ups, polls and receives per value. Back to 1 byte for headers and small replies.
    /// Plaintext only (TLS records are opened whole, and the session buffers them).
    fn set_low_water(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let (Some(stream), None) = (&self.socket.stream, &self.socket.tls) else { return };
        let bytes = match self.core.payload_in_place() {
            Some(rest) if rest >= LOW_WATER_MIN => rest.min(LOW_WATER_MAX),
            _ => 1,
        };
        // A refused raise only costs the wake-ups it would have saved; a refused lowering would
        // leave poll deaf to the next short reply, so the connection goes (and is reopened).
        if let Err(err) = stream.set_recv_low_water(bytes) {
            let err = io::Error::new(
                err.kind(),
                format!(
                    "the socket refused to lower its receive low-water mark (SO_RCVLOWAT) to {bytes} byte(s), which \
                     would leave a short reply unnoticed ({err}); the connection is dropped and opened again"
                ),
            );
            self.core.on_io_error(now, err, out);
            self.sync_socket();
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
