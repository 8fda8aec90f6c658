//! One pipelined connection as a state machine that does no I/O: it is told what happened
//! (a connect finished, bytes were sent, bytes arrived, the peer closed, time passed) and says
//! what to do next (which address to connect to, which bytes to send, where to receive, when to
//! wake), in the style of quinn-proto. [`super::Conn`] drives it over a real socket; the tests
//! drive it byte by byte with a controlled clock.
//!
//! Requests queue in order; the oldest `sent` of them are on the wire awaiting replies (RESP
//! answers in order), the next may be partly written. A driver whose sends complete later than
//! they start (the io_uring loop) says so ([`ConnCore::on_send_started`]): the bytes it lent
//! the kernel are on their way, never failed or let go as unsent, but not sent, so a reply to
//! them is one that overtook its request, refused as the poll loop refuses a reply to a request
//! it has only partly written. A send gathers header, value and trailer
//! of many requests into one gather list; replies are parsed from a small scratch buffer while
//! GET payloads are received straight into their destination.
//!
//! It connects lazily, authenticates through the shared handshake, reconnects with bounded
//! backoff after transient failures, and retries a permanent one only when it checks it again
//! ([`ReconnectPolicy::recheck_permanent_after`]).

use super::reader::{ReadEvent, Reader, RecvTarget};
use super::request::{Completion, Kind, Outcome, Request, Scope};
use crate::cluster::{NodeAddr, Redirect};
use crate::error::{Error, ErrorKind};
use crate::health::EndpointHealth;
use crate::net::ServerIdentity;
use crate::net::handshake::{self, Verdict};
use crate::net::{ConnectOptions, Endpoint, Interest, IoVecs};
use crate::op::Op;
use crate::resp::Reply;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much a connection keeps on the wire at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineLimits {
    /// Bytes sent but unanswered, plus the replies they may bring.
    pub max_inflight_bytes: usize,
    /// Requests sent but unanswered.
    pub max_inflight_requests: usize,
}

impl Default for PipelineLimits {
    /// Measured on redis-server 7 with 8 connections (bench/archive/journal-2026-11-30-to-12-02.md):
    /// one large value in flight per connection moves the most. Deeper pipelines of 256 KiB to
    /// 4 MiB values make the single-threaded server hold and fault in more buffers at once and
    /// cost 10-40% of GET and SET throughput. 512 KiB keeps a 256 KiB value (LMCache's default
    /// chunk) alone on its connection too: at 1 MiB, three of them went out at once, and
    /// LMCache's own benchmark stored 32 x 256 KiB about 13% slower (the same journal,
    /// 2026-12-02, later).
    /// Smaller values still pipeline (4 KiB values about 125 deep).
    fn default() -> Self {
        PipelineLimits { max_inflight_bytes: 512 << 10, max_inflight_requests: 256 }
    }
}

/// What a connection does after a transient failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// After this many consecutive failed attempts to (re)connect, requests waiting for the
    /// connection fail with the last error instead of waiting for their deadline. Later
    /// requests start new attempts.
    pub fail_after_attempts: u32,
    /// The delay before the second attempt; it doubles per failure up to `max_delay`. The
    /// first reconnect is immediate.
    pub base_delay: Duration,
    /// The longest delay between attempts.
    pub max_delay: Duration,
    /// How long a permanent failure (a certificate, a plaintext port, a wrong password) stands:
    /// requests fail at once with it until then; the next one after it tries a new connection,
    /// so a server whose certificate or password was fixed is found again without a restart.
    pub recheck_permanent_after: Duration,
}

/// The default [`ReconnectPolicy::recheck_permanent_after`]: a misconfigured server costs one
/// connection per half-minute per connection slot, and a fixed one is back within that.
pub const RECHECK_PERMANENT_AFTER: Duration = Duration::from_secs(30);

/// A subscriber's connection reads no more while this many messages wait to be taken
/// ([`ConnCore::take_pushes`]): a publisher that floods it meets TCP's flow control, not a
/// buffer that grows (one receive's worth may come on top).
pub const MAX_PENDING_PUSHES: usize = 1024;

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            fail_after_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
            recheck_permanent_after: RECHECK_PERMANENT_AFTER,
        }
    }
}

impl ReconnectPolicy {
    /// Delay before the next attempt after `failures` consecutive failures.
    pub fn delay(&self, failures: u32) -> Duration {
        match failures {
            0 | 1 => Duration::ZERO,
            n => self.base_delay.saturating_mul(1 << (n - 2).min(16)).min(self.max_delay),
        }
    }
}

/// The connection's state; the driver holds a socket exactly in `Connecting`,
/// `TlsHandshaking`, `Handshaking` and `Ready` ([`ConnState::has_socket`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// No socket; one is opened when work arrives.
    Disconnected,
    /// A non-blocking connect to address number `address` is under way.
    Connecting {
        /// Which of the endpoint's resolved addresses.
        address: usize,
        /// When the connect started (it has `connect_timeout`).
        since: Instant,
    },
    /// Connected to a TLS endpoint: the driver runs the TLS handshake (it has the same
    /// `connect_timeout`, from `since`); nothing else is sent or read.
    TlsHandshaking {
        /// When the TLS handshake started.
        since: Instant,
    },
    /// AUTH / SELECT / PING are in flight; user requests wait.
    Handshaking,
    /// Requests flow.
    Ready,
    /// A (re)connect failed; the next attempt is not made before `retry_at`.
    Backoff {
        /// When the next attempt may start.
        retry_at: Instant,
    },
    /// A permanent failure (a certificate or a plaintext port, bad credentials): every request
    /// fails at once with it, until `recheck_at` (then it is `Disconnected`, and the next
    /// request connects anew); never, for a connection that can never work.
    Failed {
        /// When the failure is checked again (see [`ReconnectPolicy::recheck_permanent_after`]).
        recheck_at: Option<Instant>,
    },
}

impl ConnState {
    /// Whether a socket belongs to this state.
    pub fn has_socket(self) -> bool {
        matches!(
            self,
            ConnState::Connecting { .. } | ConnState::TlsHandshaking { .. } | ConnState::Handshaking | ConnState::Ready
        )
    }
}

/// Why a request leaves its connection to be sent elsewhere (Redis Cluster): the worker that
/// owns the connection re-routes it.
#[derive(Debug)]
pub enum Handoff {
    /// `-MOVED` or `-ASK`: another node serves the key's slot.
    Redirect(Redirect),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, or the node cannot be reached: worth another
    /// try once the slot map is refreshed, while the deadline allows.
    Retry(Error),
}

/// The I/O-free core of one connection.
pub struct ConnCore {
    options: Arc<ConnectOptions>,
    /// How many addresses the endpoint resolved to; the driver holds them.
    address_count: usize,
    policy: ReconnectPolicy,
    limits: PipelineLimits,
    state: ConnState,
    /// The address to try next when a connect starts (after one failed, the next one).
    next_address: usize,
    /// Consecutive failed attempts to establish a connection.
    failures: u32,
    last_error: Option<Error>,
    permanent_error: Option<Error>,
    queue: VecDeque<Request>,
    /// The first `sent` requests of the queue are fully written.
    sent: usize,
    /// Bytes of `queue[sent]` already written.
    write_offset: usize,
    /// Bytes after those handed to a send the kernel has not finished (see
    /// [`ConnCore::on_send_started`]); 0 with the poll loop's sends, which finish in the call.
    lent: usize,
    /// Pipeline cost of the `sent` requests.
    inflight_bytes: usize,
    /// Pipeline cost of every user request in the queue; what load balancing looks at.
    outstanding_cost: usize,
    /// User requests queued or in flight.
    outstanding_requests: usize,
    /// The last send did not take everything: wait for writability before trying again.
    write_blocked: bool,
    reader: Reader,
    /// Cluster mode: redirects and node failures hand requests back instead of failing them.
    hands_off: bool,
    /// A subscriber's connection: replies nobody asked for (pub/sub messages) are kept in
    /// `pushes` rather than breaking the connection.
    keeps_pushes: bool,
    pushes: Vec<Reply>,
    handoffs: Vec<(Request, Handoff)>,
    /// A `WATCH` scope was sent on this connection and not closed yet.
    scope_open: bool,
    /// The connection dropped with a scope open, or a scope's `WATCH` failed before it was
    /// sent: requests meant for it fail until a new one opens.
    scope_lost: bool,
    /// The server's health, shared with every connection to it: while it is down, new
    /// requests fail at once (see [`crate::health`]).
    health: Option<Arc<EndpointHealth>>,
    /// The server's recovery count when this connection last backed off: a recovery since
    /// then ends the backoff.
    recoveries_at_backoff: u64,
    /// Bytes arrived on this connection since it connected.
    received_any: bool,
    /// What the server said it is in this connection's handshake (`HELLO`), if it said.
    server: Option<ServerIdentity>,
    /// When a TLS handshake the server has not answered gets a plaintext check (see
    /// [`ConnCore::take_plaintext_check`]).
    plaintext_check_at: Option<Instant>,
    /// TLS 1.2 only: the send key reached its limit, which TLS 1.2 cannot renew; nothing new is
    /// sent, and once every reply is in the connection is replaced (see
    /// [`ConnCore::drain_for_new_keys`]).
    draining: bool,
}

impl ConnCore {
    /// A disconnected connection to `options.endpoint`, which resolved to `address_count`
    /// addresses (tried in order). With none, the connection awaits them: requests queue and
    /// wait (up to their deadlines) until [`ConnCore::set_address_count`] says how many there
    /// are (its host name was being looked up elsewhere).
    pub fn new(
        options: Arc<ConnectOptions>,
        address_count: usize,
        policy: ReconnectPolicy,
        limits: PipelineLimits,
    ) -> ConnCore {
        ConnCore {
            options,
            address_count,
            policy,
            limits,
            state: ConnState::Disconnected,
            next_address: 0,
            failures: 0,
            last_error: None,
            permanent_error: None,
            queue: VecDeque::new(),
            sent: 0,
            write_offset: 0,
            lent: 0,
            inflight_bytes: 0,
            outstanding_cost: 0,
            outstanding_requests: 0,
            write_blocked: false,
            reader: Reader::default(),
            hands_off: false,
            keeps_pushes: false,
            pushes: Vec::new(),
            handoffs: Vec::new(),
            scope_open: false,
            scope_lost: false,
            health: None,
            recoveries_at_backoff: 0,
            received_any: false,
            server: None,
            plaintext_check_at: None,
            draining: false,
        }
    }

    /// What the server said it is in the last handshake (`HELLO`); `None` before one, or from a
    /// server that did not say.
    pub fn server_identity(&self) -> Option<&ServerIdentity> {
        self.server.as_ref()
    }

    /// Shares `health` with the other connections to the same server: failed attempts mark it
    /// down, a completed handshake marks it up, and while it is down new requests fail at once.
    pub fn with_health(mut self, health: Arc<EndpointHealth>) -> ConnCore {
        self.health = Some(health);
        self
    }

    /// In Redis Cluster: requests redirected by the node, or stranded by its failure, are handed
    /// back through [`ConnCore::take_handoffs`] rather than failed.
    pub fn handing_off(mut self) -> ConnCore {
        self.hands_off = true;
        self
    }

    /// A subscriber's connection (after `SUBSCRIBE`): a reply nobody asked for is a pub/sub
    /// message, kept for [`ConnCore::take_pushes`], not a broken stream.
    pub fn keep_pushes(&mut self) {
        self.keeps_pushes = true;
    }

    /// The messages received since the last call, in order.
    pub fn take_pushes(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.pushes)
    }

    /// Refuses a reply of more than `max_reply_bytes` (the connection breaks, the request
    /// fails naming the cap) instead of the parser's default: for connections to servers asked
    /// only for small replies, such as Sentinels. Set before the connection is used.
    pub fn cap_replies(&mut self, max_reply_bytes: u64) {
        debug_assert!(self.reader.is_idle(), "the cap is set before any reply");
        self.reader = Reader::capped(max_reply_bytes);
    }

    /// The endpoint's addresses are known now: `count` of them (at least one), tried in order.
    /// Requests that waited for them go out once the driver connects.
    pub fn set_address_count(&mut self, count: usize) {
        assert!(count > 0, "a connection needs at least one address");
        self.address_count = count;
        self.next_address = 0;
    }

    /// Whether the connection still awaits its endpoint's addresses.
    pub fn awaits_addresses(&self) -> bool {
        self.address_count == 0
    }

    /// The connection can never work (its host name cannot be looked up): every request
    /// queued fails with `err` now, and every later one at once.
    pub fn fail_for_good(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        self.fail_permanently(now, err, None, out);
    }

    /// Requests handed back since the last call, with why.
    pub fn take_handoffs(&mut self) -> Vec<(Request, Handoff)> {
        std::mem::take(&mut self.handoffs)
    }

    /// The server this connection goes to.
    pub fn endpoint(&self) -> &crate::net::Endpoint {
        &self.options.endpoint
    }

    /// How the connection reaches and authenticates to its server.
    pub fn options(&self) -> Arc<ConnectOptions> {
        self.options.clone()
    }

    /// The connection's state.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// User requests queued or in flight.
    pub fn outstanding_requests(&self) -> usize {
        self.outstanding_requests
    }

    /// No user request queued or in flight.
    pub fn is_empty(&self) -> bool {
        self.outstanding_requests == 0
    }

    /// Pipeline cost of all user requests not yet completed.
    pub fn outstanding_cost(&self) -> usize {
        self.outstanding_cost
    }

    /// Queues a request (it fails at once if the connection failed permanently, until that
    /// failure is checked again).
    pub fn push(&mut self, request: Request, out: &mut Vec<Completion>) {
        self.recheck_before_queueing();
        if let Some(err) = &self.permanent_error {
            out.push(request.completion(Outcome::Failed(err.clone())));
            return;
        }
        if let Some(err) = self.refusal(&request) {
            return self.refuse(request, err, out);
        }
        match request.scope {
            Scope::Opens => self.scope_lost = false,
            Scope::Within | Scope::Closes if self.scope_lost => {
                let err = Error::connection_lost(
                    &self.options.endpoint,
                    "the WATCH this command belongs with was lost (its connection dropped, or it was never sent)",
                );
                out.push(request.completion(Outcome::Failed(err)));
                return;
            }
            _ => {}
        }
        self.outstanding_cost += request.pipeline_cost();
        self.outstanding_requests += 1;
        self.queue.push_back(request);
    }

    /// Queues `request` right behind an `ASKING`, as an `-ASK` redirect requires.
    pub fn push_asking(&mut self, request: Request, out: &mut Vec<Completion>) {
        if let Some(err) = self.refusal(&request) {
            return self.refuse(request, err, out);
        }
        self.recheck_before_queueing();
        if self.permanent_error.is_none() {
            self.queue.push_back(Request::asking(request.deadline));
        }
        self.push(request, out);
    }

    // -- what the driver must do ---------------------------------------------------------

    /// Whether a connect should start now: work is waiting and no socket exists (after a
    /// backoff, only once it has passed).
    pub fn wants_connect(&self, now: Instant) -> bool {
        if self.awaits_addresses() {
            return false;
        }
        match self.state {
            ConnState::Disconnected => self.has_user_work(),
            ConnState::Backoff { retry_at } => {
                (retry_at <= now || self.recovered_since_backoff()) && self.has_user_work()
            }
            _ => false,
        }
    }

    /// Starts a connect if one is wanted: the index of the address the driver must connect
    /// to. The driver then reports [`ConnCore::on_connected`] or
    /// [`ConnCore::on_connect_failed`].
    pub fn poll_connect(&mut self, now: Instant) -> Option<usize> {
        if !self.wants_connect(now) {
            return None;
        }
        let address = self.next_address;
        self.state = ConnState::Connecting { address, since: now };
        Some(address)
    }

    /// What to wait for before the next event, and the instant by which
    /// [`ConnCore::handle_timeout`] (or a connect) must run regardless.
    pub fn interest(&self, now: Instant) -> (Interest, Option<Instant>) {
        let mut wake = self.queue.iter().map(|r| r.deadline).min();
        let interest = match self.state {
            ConnState::Connecting { since, .. } => {
                wake = earliest(wake, Some(since + self.options.connect_timeout));
                Interest { read: false, write: true }
            }
            ConnState::TlsHandshaking { since } => {
                wake = earliest(wake, Some(since + self.options.connect_timeout));
                wake = earliest(wake, self.plaintext_check_at);
                Interest { read: true, write: self.write_blocked }
            }
            ConnState::Handshaking | ConnState::Ready => Interest { read: true, write: self.write_blocked },
            ConnState::Backoff { retry_at } if self.has_user_work() => {
                wake = earliest(wake, Some(retry_at));
                Interest::default()
            }
            ConnState::Disconnected if self.has_user_work() && !self.awaits_addresses() => {
                // A connection dropped outside a drive (a stall found by handle_timeout):
                // reconnect at once rather than at the next deadline.
                wake = Some(now);
                Interest::default()
            }
            _ => Interest::default(),
        };
        (interest, wake)
    }

    /// Whether a deadline, a connect's or a request's, has come by `now`: the driver calls
    /// [`ConnCore::handle_timeout`].
    pub fn is_due(&self, now: Instant) -> bool {
        self.interest(now).1.is_some_and(|wake| wake <= now)
    }

    /// Whether anything is waiting to be sent (the driver calls [`ConnCore::transmit`]).
    pub fn has_sendable(&self) -> bool {
        self.sent < self.queue.len() && !self.write_blocked && self.lent == 0 && self.state.has_socket()
    }

    /// Whether the last send did not take everything: wait until the socket is writable.
    #[cfg(test)]
    pub fn is_write_blocked(&self) -> bool {
        self.write_blocked
    }

    /// Fills `iov` with what may be sent now (header, value and trailer of each request, from
    /// the partly written one on), within the pipeline limits. Empty: nothing to send. Report
    /// what the socket took with [`ConnCore::on_sent`].
    pub fn transmit<'a, const N: usize>(&'a self, iov: &mut IoVecs<'a, N>) {
        if !matches!(self.state, ConnState::Handshaking | ConnState::Ready) || self.write_blocked || self.lent > 0 {
            return;
        }
        let mut inflight_bytes = self.inflight_bytes;
        let mut offset = self.write_offset;
        let mut scope_open = self.scope_open;
        for (in_flight, request) in (self.sent..).zip(self.queue.iter().skip(self.sent)) {
            if self.state == ConnState::Handshaking && !matches!(request.kind, Kind::Handshake(_)) {
                break;
            }
            if offset == 0 && self.drain_holds_back(request, scope_open) {
                break;
            }
            scope_open = match request.scope {
                Scope::Opens => true,
                Scope::Closes => false,
                Scope::None | Scope::Within => scope_open,
            };
            // The request bound to one already on its way (an EXEC behind its MULTI) goes
            // whatever the limits say: a MULTI must never wait on the wire for its EXEC.
            let bound = in_flight > 0 && self.queue[in_flight - 1].leaves_with_next;
            // A request and the one bound to it are one unit for the limits and the gather list.
            let (cost, frames) = match self.queue.get(in_flight + 1) {
                Some(next) if request.leaves_with_next => (request.pipeline_cost() + next.pipeline_cost(), 2),
                _ => (request.pipeline_cost(), 1),
            };
            if offset == 0
                && in_flight > 0
                && !bound
                && (inflight_bytes + cost > self.limits.max_inflight_bytes
                    || in_flight + frames > self.limits.max_inflight_requests)
            {
                break;
            }
            if frames == 2 && !iov.is_empty() && iov.room() < 6 {
                break;
            }
            if !push_frame(iov, request, offset) {
                break;
            }
            inflight_bytes += request.pipeline_cost();
            offset = 0;
        }
    }

    /// Where the next bytes read from the socket go. `None`: nothing is to be read now, or the
    /// connection cannot take more bytes and was dropped (see [`ConnCore::state`]).
    pub fn recv_target(&mut self, now: Instant, out: &mut Vec<Completion>) -> Option<RecvTarget<'_>> {
        if !matches!(self.state, ConnState::Handshaking | ConnState::Ready) || self.pushes.len() >= MAX_PENDING_PUSHES {
            return None;
        }
        let dest_len = self.expected_destination().0.map(|d| d.len());
        // Checked before the borrow is handed out: a reader that cannot take more bytes breaks
        // the connection instead.
        if let Err(err) = self.reader.recv_target(dest_len) {
            let err = Error::from(err).context(&self.options.endpoint);
            self.connection_broke(now, err, out);
            return None;
        }
        self.reader.recv_target(dest_len).ok()
    }

    /// The bytes still to come of the value being received straight into its destination.
    pub fn payload_in_place(&self) -> Option<usize> {
        self.reader.payload_in_place()
    }

    // -- what happened -------------------------------------------------------------------

    /// A receive into the payload being received in place ended without saying how much it
    /// wrote (its ring died): the destination may hold part of the value.
    pub fn on_receive_lost(&mut self) {
        if self.reader.payload_in_place().is_some() && self.sent > 0 {
            let front = &mut self.queue[0];
            front.partially_written = front.partially_written.max(1);
        }
    }

    /// The connect to the address [`ConnCore::poll_connect`] named succeeded: to a TLS
    /// endpoint the TLS handshake comes next (the driver reports
    /// [`ConnCore::on_tls_established`] or [`ConnCore::on_tls_failed`]), then AUTH/SELECT/PING.
    pub fn on_connected(&mut self, now: Instant) {
        debug_assert!(matches!(self.state, ConnState::Connecting { .. }), "{:?}", self.state);
        self.next_address = 0;
        super::hook::connected();
        self.write_blocked = false;
        self.received_any = false;
        self.draining = false;
        if self.options.tls.is_some() {
            self.state = ConnState::TlsHandshaking { since: now };
            self.plaintext_check_at = Some(now + self.options.connect_timeout / 2);
            return;
        }
        self.start_handshake(now);
    }

    /// Whether the driver should check now (once per connection) whether the port is a
    /// plaintext server: half of `connect_timeout` has passed in the TLS handshake. A plaintext
    /// Redis or Valkey reads a TLS hello as the start of an inline command and waits, silent,
    /// for its end of line; the driver asks with a `PING` on a second connection (see
    /// `conn::plaintext_check`), and never writes anything but TLS to this one, so a TLS server
    /// that answers late is not harmed. The driver skips it if the server has answered.
    pub fn take_plaintext_check(&mut self, now: Instant) -> bool {
        match (self.state, self.plaintext_check_at) {
            (ConnState::TlsHandshaking { .. }, Some(at)) if at <= now => {
                self.plaintext_check_at = None;
                true
            }
            _ => false,
        }
    }

    /// TLS 1.2 only (TLS 1.3 renews its keys in band): the connection's send key reached its
    /// limit. Nothing new is sent on it (the request being written is finished, and so are the
    /// commands of an open WATCH scope); once every reply is in, the connection is replaced
    /// without counting as a failure. No request fails for it.
    pub fn drain_for_new_keys(&mut self) {
        if !self.draining && matches!(self.state, ConnState::Handshaking | ConnState::Ready) {
            self.draining = true;
            self.finish_drain_if_quiet();
        }
    }

    /// While draining, whether `request` (next to be written, from its start) must wait for
    /// the next connection: all but what belongs to a WATCH scope already open on this one.
    fn drain_holds_back(&self, request: &Request, scope_open: bool) -> bool {
        self.draining && !(scope_open && matches!(request.scope, Scope::Within | Scope::Closes))
    }

    /// A drained connection with every reply in is closed (the driver sends close_notify);
    /// the requests held back reconnect as after an idle close.
    fn finish_drain_if_quiet(&mut self) {
        if self.draining && self.state == ConnState::Ready && self.is_quiet() {
            self.draining = false;
            self.reset_wire();
            self.state = ConnState::Disconnected;
        }
    }

    /// Before a request is queued: a permanent failure whose recheck is due gives way. The
    /// clock is read only on a connection that failed so: every key of every batch is pushed
    /// here, and reading it for each cost about 4% of an I/O thread's CPU on EXISTS over TLS
    /// (bench/results/2026-12-04/tls-exists).
    fn recheck_before_queueing(&mut self) {
        if matches!(self.state, ConnState::Failed { recheck_at: Some(_) }) {
            self.recheck_if_due(Instant::now());
        }
    }

    /// A permanent failure whose recheck is due gives way: the next request connects anew.
    fn recheck_if_due(&mut self, now: Instant) {
        if let ConnState::Failed { recheck_at: Some(at) } = self.state {
            if at <= now {
                self.permanent_error = None;
                self.failures = 0;
                self.state = ConnState::Disconnected;
            }
        }
    }

    /// The TLS handshake completed: AUTH/SELECT/PING follow over TLS.
    pub fn on_tls_established(&mut self, now: Instant) {
        debug_assert!(matches!(self.state, ConnState::TlsHandshaking { .. }), "{:?}", self.state);
        self.write_blocked = false;
        self.start_handshake(now);
    }

    /// TLS failed: during its handshake, or after it when the server refused this client's
    /// certificate (TLS 1.3 servers say so only once the client has finished). A permanent
    /// failure (what the server's certificate or configuration decides: see
    /// `net::tls::failure`) is not retried, as a wrong password is not, until it is checked
    /// again ([`ReconnectPolicy::recheck_permanent_after`]); a transient one (the network path
    /// garbled, injected or broke something) counts as a failed attempt, retried with backoff.
    pub fn on_tls_failed(&mut self, now: Instant, err: Error, permanent: bool, out: &mut Vec<Completion>) {
        if permanent {
            let recheck_at = now + self.policy.recheck_permanent_after;
            return self.fail_permanently(now, err, Some(recheck_at), out);
        }
        self.drop_connection(now, &err, out);
        self.after_failed_attempt(now, err, out);
    }

    fn start_handshake(&mut self, now: Instant) {
        self.state = ConnState::Handshaking;
        let deadline = now + self.options.connect_timeout;
        for (step, header) in handshake::commands(&self.options).into_iter().rev() {
            self.queue.push_front(Request::handshake(step, header, deadline));
        }
    }

    /// The connect failed: the next address is tried (the driver sees
    /// [`ConnCore::poll_connect`] name it at once), or, after the last, the attempt counts as
    /// failed.
    pub fn on_connect_failed(&mut self, now: Instant, err: &io::Error, out: &mut Vec<Completion>) {
        let ConnState::Connecting { address, .. } = self.state else { return };
        if address + 1 < self.address_count {
            self.next_address = address + 1;
            self.state = ConnState::Disconnected;
            return;
        }
        self.next_address = 0;
        let err = Error::connect_failed(&self.options.endpoint, err);
        self.after_failed_attempt(now, err, out);
    }

    /// The driver handed the `offered` bytes of the last [`ConnCore::transmit`] to a send that
    /// completes later (an io_uring send), whose completion it reports with
    /// [`ConnCore::on_sent`]. Until then the kernel may read them: the requests they belong to
    /// are on their way (a timeout or a closing store never fails them as unsent, and nothing
    /// more is sent behind them), but not sent: a reply to one of them overtook it.
    pub fn on_send_started(&mut self, offered: usize) {
        debug_assert_eq!(self.lent, 0, "one send at a time");
        self.lent = offered;
    }

    /// The socket took `written` of the `offered` bytes of the last [`ConnCore::transmit`]
    /// (after [`ConnCore::on_send_started`]: the send completed, and the kernel reads none of
    /// them any more).
    pub fn on_sent(&mut self, written: usize, offered: usize) {
        self.lent = 0;
        self.advance_written(written);
        if written < offered {
            self.write_blocked = true;
        }
    }

    /// The socket would block: wait for writability before sending again.
    pub fn on_send_blocked(&mut self) {
        self.write_blocked = true;
    }

    /// The socket became writable.
    pub fn on_writable(&mut self) {
        self.write_blocked = false;
    }

    /// `n` (> 0) bytes arrived where [`ConnCore::recv_target`] said: the replies they complete
    /// complete their requests.
    pub fn on_received(&mut self, now: Instant, n: usize, out: &mut Vec<Completion>) {
        self.received_any = true;
        self.reader.received(n);
        while matches!(self.state, ConnState::Handshaking | ConnState::Ready) {
            let (dest, exact) = self.expected_destination();
            match self.reader.next_event(dest, exact) {
                Ok(None) => return self.finish_drain_if_quiet(),
                Ok(Some(ReadEvent::Reply(message @ Reply::Array(_))))
                    if self.sent == 0 && self.keeps_pushes && self.state == ConnState::Ready =>
                {
                    self.pushes.push(message);
                }
                Ok(Some(event)) if self.sent == 0 && (self.write_offset > 0 || self.lent > 0) => {
                    return self.overtaken(now, event, out);
                }
                Ok(Some(_)) if self.sent == 0 => {
                    let err = Error::new(
                        ErrorKind::Protocol,
                        format!("{} sent a reply to a request that was never made", self.options.endpoint),
                    );
                    return self.connection_broke(now, err, out);
                }
                Ok(Some(event)) => self.complete_front(now, event, out),
                Err(err) => {
                    let err = match (self.reader.reply_cap_exceeded(), self.queue.front()) {
                        (Some(cap), Some(front)) => Error::new(
                            ErrorKind::Protocol,
                            format!(
                                "the reply to {} from {} exceeds {}, the cap on the size of one reply (the \
                                 connection was dropped)",
                                front.describe(),
                                self.options.endpoint,
                                crate::resp::parser::size_text(cap)
                            ),
                        ),
                        _ => Error::from(err).context(&self.options.endpoint),
                    };
                    return self.connection_broke(now, err, out);
                }
            }
        }
    }

    /// What a connection that broke in its handshake before any reply may mean: a TLS port
    /// resets a plaintext hello at once (Redis, Valkey); a server that requires a client
    /// certificate (TLS 1.3) closes a connection without one right after the TLS handshake,
    /// often without saying why.
    fn broken_before_any_reply_hint(&self) -> &'static str {
        if self.state != ConnState::Handshaking || self.received_any {
            return "";
        }
        match &self.options.tls {
            None => " (before any reply: if this port speaks TLS, use rediss:// or ssl=True)",
            Some(tls) if tls.options().certfile.is_none() => {
                " (right after the TLS handshake: if the server requires client certificates, set ssl_certfile and \
                 ssl_keyfile)"
            }
            Some(_) => {
                " (right after the TLS handshake: the server may have refused this client's certificate; see its log)"
            }
        }
    }

    /// The peer closed the connection (a read returned 0).
    pub fn on_peer_closed(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if self.is_quiet() && self.state == ConnState::Ready {
            // An idle connection closed by the server (timeout, restart): reconnect when there
            // is work again, without counting it as a failure.
            self.reader.reset();
            self.state = ConnState::Disconnected;
            return;
        }
        let hint = self.broken_before_any_reply_hint();
        let err = Error::connection_lost(&self.options.endpoint, format!("the server closed the connection{hint}"));
        self.connection_broke(now, err, out);
    }

    /// A send or receive failed.
    pub fn on_io_error(&mut self, now: Instant, err: io::Error, out: &mut Vec<Completion>) {
        let hint = self.broken_before_any_reply_hint();
        let err = Error::connection_lost(&self.options.endpoint, format!("{err}{hint}"));
        self.connection_broke(now, err, out);
    }

    /// Fails what is overdue. A connection whose oldest outstanding reply is overdue is
    /// stalled: it is dropped, since the replies it still owes would arrive out of sync.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if let ConnState::Connecting { since, .. } = self.state {
            if now >= since + self.options.connect_timeout {
                let err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
                self.on_connect_failed(now, &err, out);
            }
        }
        self.recheck_if_due(now);
        if let ConnState::TlsHandshaking { since } = self.state {
            if now >= since + self.options.connect_timeout {
                let err = Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the TLS handshake with {} did not complete within {:?}: the server accepted the connection \
                         but did not finish the handshake, and it is not a plaintext Redis on this port (one answers \
                         the PING this client sends it on a second connection at half the timeout): is it \
                         overloaded, or is something on the path holding the connection?",
                        self.options.endpoint, self.options.connect_timeout
                    ),
                );
                self.drop_connection(now, &err, out);
                self.after_failed_attempt(now, err, out);
            }
        }
        if self.on_its_way() > 0 && self.queue[0].deadline <= now {
            let waiting_for = match self.queue[0].kind {
                Kind::User(op) => format!("the reply to {}", op.name()),
                Kind::Command => format!("the reply to {}", self.queue[0].describe()),
                Kind::Asking => "the reply to ASKING".into(),
                Kind::Handshake(step) => format!("the reply to the handshake's {step:?}"),
            };
            let err = Error::new(
                ErrorKind::Timeout,
                format!("timed out waiting for {waiting_for} from {}", self.options.endpoint),
            );
            let handshake = matches!(self.queue[0].kind, Kind::Handshake(_));
            self.drop_connection(now, &err, out);
            if handshake {
                self.after_failed_attempt(now, err, out);
            } else {
                // The server answered before; reconnect right away for the requests left.
                self.state = ConnState::Disconnected;
            }
        }
        self.expire_unsent(now, out);
    }

    /// Drops the connection at once and fails every request, those on the wire too: nothing
    /// reads from or writes into their memory afterwards (the engine failed and must let go
    /// of every buffer now).
    pub fn abort(&mut self, err: &Error, out: &mut Vec<Completion>) {
        self.note_partial_write();
        self.reset_wire();
        self.state = ConnState::Disconnected;
        let all: Vec<Request> = self.queue.drain(..).collect();
        for request in all {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    /// Fails requests that have not started to go out (the store is closing). Requests on the
    /// wire finish normally or at their deadline, and so does one bound to them (an `EXEC`
    /// whose `MULTI` left).
    pub fn fail_unsent(&mut self, err: &Error, out: &mut Vec<Completion>) {
        let first = self.first_uncommitted();
        let unsent: Vec<Request> = self.queue.drain(first..).collect();
        for request in unsent {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    // -- inside --------------------------------------------------------------------------

    /// The destination and exact-length rule of the reply expected next.
    fn expected_destination(&self) -> (Option<crate::memory::RawBuf>, bool) {
        match self.queue.front() {
            Some(front) if self.sent > 0 => (front.destination(), front.exact_length),
            _ => (None, false),
        }
    }

    /// The first request that has not started to leave and is not bound to one that has (see
    /// [`Request::leaves_with_next`]): those before it are on their way.
    fn first_uncommitted(&self) -> usize {
        let first_unsent = self.on_its_way();
        match first_unsent.checked_sub(1).map(|on_its_way| &self.queue[on_its_way]) {
            Some(leader) if leader.leaves_with_next && first_unsent < self.queue.len() => first_unsent + 1,
            _ => first_unsent,
        }
    }

    /// Fails the requests not yet sent whose deadline passed (a request bound to the next one
    /// fails with it). A `WATCH` scope needs more, or the server would keep state no one
    /// closes: a command of a scope the server holds (its `WATCH` left, the `EXEC` or
    /// `UNWATCH` that closes it did not), or an `EXEC` whose `MULTI` left, that expires here
    /// drops the connection, since only a fresh one is known to hold no `WATCH` and no
    /// `MULTI`; and the rest of a scope whose `WATCH` expired here fails with it (an `EXEC`
    /// without its `WATCH` would vouch for nothing).
    fn expire_unsent(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let first = self.on_its_way();
        if !self.queue.iter().skip(first).any(|r| r.deadline <= now) {
            return;
        }
        // Whether the server holds a scope when the next request reaches it (the one partly
        // written will have reached it).
        let mut open = self.queue.range(self.sent..first).fold(self.scope_open, |open, r| match r.scope {
            Scope::Opens => true,
            Scope::Closes => false,
            Scope::None | Scope::Within => open,
        });
        let leader_left = first > 0 && self.queue[first - 1].leaves_with_next;
        let rest: Vec<Request> = self.queue.drain(first..).collect();
        let mut expired: Vec<bool> = rest.iter().map(|r| r.deadline <= now).collect();
        for i in (0..rest.len().saturating_sub(1)).filter(|&i| rest[i].leaves_with_next) {
            let either = expired[i] || expired[i + 1];
            (expired[i], expired[i + 1]) = (either, either);
        }
        // The WATCH of the scope being walked expired here.
        let mut orphaned = false;
        // An expired command leaves a scope, or a MULTI, on the server.
        let mut stranded = leader_left && expired.first() == Some(&true);
        for (request, expired) in rest.into_iter().zip(expired) {
            let scoped = matches!(request.scope, Scope::Within | Scope::Closes);
            let lost = orphaned && scoped;
            stranded |= expired && open && scoped;
            match request.scope {
                Scope::Opens => {
                    orphaned = expired;
                    open |= !expired;
                }
                Scope::Closes => (orphaned, open) = (false, false),
                Scope::None | Scope::Within => {}
            }
            if !expired && !lost {
                self.queue.push_back(request);
                continue;
            }
            let what = request.describe();
            let err = match lost {
                true => Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{what} to {} failed: the WATCH it belongs with timed out before it was sent",
                        self.options.endpoint
                    ),
                ),
                false => self.unsent_timeout(&what),
            };
            self.finish(request, Outcome::Failed(err), out);
        }
        // Commands of the expired WATCH's scope queued later fail at once.
        self.scope_lost |= orphaned;
        if stranded {
            let err = Error::connection_lost(
                &self.options.endpoint,
                "dropped because a command of a WATCH or MULTI it held timed out before it was sent, which left \
                 that WATCH or MULTI with nothing to end it",
            );
            self.drop_connection(now, &err, out);
        }
    }

    /// The error of a request whose deadline passed before it could be sent.
    fn unsent_timeout(&self, what: &str) -> Error {
        let why = match &self.last_error {
            Some(last) => format!(" (last connection error: {last})"),
            None => String::new(),
        };
        let message = match (&self.options.endpoint, self.awaits_addresses()) {
            (Endpoint::Tcp { host, .. }, true) => format!(
                "timed out before {what} could be sent to {}: the lookup of its host name {host} has not finished",
                self.options.endpoint
            ),
            _ => format!("timed out before {what} could be sent to {}{why}", self.options.endpoint),
        };
        Error::new(ErrorKind::Timeout, message)
    }

    /// Why a request newly queued here must fail at once: its server is known to be down.
    /// The rest of a `WATCH` scope is never refused: its fate is its `WATCH`'s (refused with
    /// it, see [`ConnCore::refuse`], or bound to this connection), and refusing an `EXEC` or
    /// `UNWATCH` whose `WATCH` left would leave that `WATCH` on the connection.
    fn refusal(&self, request: &Request) -> Option<Error> {
        let health = self.health.as_ref().filter(|h| h.is_down())?;
        match (request.kind, request.scope) {
            (_, Scope::Within | Scope::Closes) => None,
            (Kind::User(_) | Kind::Command, _) => health.refusal(Instant::now()),
            (Kind::Handshake(_) | Kind::Asking, _) => None,
        }
    }

    /// Fails a request its server's health refuses (only callers' requests are refused, see
    /// [`ConnCore::refusal`]); in Redis Cluster, a request on its first
    /// route goes back to the worker once, which refreshes the slot map: a failover may have
    /// moved its slot to a live node.
    fn refuse(&mut self, request: Request, err: Error, out: &mut Vec<Completion>) {
        if request.scope == Scope::Opens {
            // The commands of a refused WATCH's scope fail at once as they are queued.
            self.scope_lost = true;
        }
        let movable = matches!(request.kind, Kind::User(op) if op.is_idempotent()) && request.reroutes == 0;
        if self.hands_off && movable {
            self.handoffs.push((request, Handoff::Retry(err)));
        } else {
            out.push(request.completion(Outcome::Failed(err)));
        }
    }

    /// The server came back since this connection last backed off from it.
    fn recovered_since_backoff(&self) -> bool {
        self.health.as_ref().is_some_and(|h| h.recoveries() != self.recoveries_at_backoff)
    }

    fn has_user_work(&self) -> bool {
        self.outstanding_requests > 0
    }

    /// A connection attempt failed (connect, handshake, or the connection broke before the
    /// handshake finished).
    fn after_failed_attempt(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        self.failures += 1;
        if let Some(health) = &self.health {
            // Only the want of a server marks it down; a reply it gave (LOADING) does not.
            if matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
                health.mark_down(now, &err);
            }
            self.recoveries_at_backoff = health.recoveries();
        }
        self.last_error = Some(err.clone());
        self.state = ConnState::Backoff { retry_at: now + self.policy.delay(self.failures) };
        if self.failures >= self.policy.fail_after_attempts {
            let waiting: Vec<Request> = self.queue.drain(..).collect();
            for request in waiting {
                self.finish_or_hand_off(now, request, err.clone(), out);
            }
        }
    }

    /// Fails every request with `err`, now and (until `recheck_at`) later.
    fn fail_permanently(&mut self, now: Instant, err: Error, recheck_at: Option<Instant>, out: &mut Vec<Completion>) {
        self.drop_connection(now, &err, out);
        self.state = ConnState::Failed { recheck_at };
        self.permanent_error = Some(err.clone());
        let waiting: Vec<Request> = self.queue.drain(..).collect();
        for request in waiting {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    /// An established connection broke.
    fn connection_broke(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        let handshaking = self.state == ConnState::Handshaking;
        self.drop_connection(now, &err, out);
        if handshaking {
            self.after_failed_attempt(now, err, out);
        } else {
            self.last_error = Some(err);
            self.state = ConnState::Disconnected;
        }
    }

    /// Forgets everything about the wire: what was sent, half-sent and half-received.
    fn reset_wire(&mut self) {
        self.reader.reset();
        self.sent = 0;
        self.write_offset = 0;
        self.lent = 0;
        self.inflight_bytes = 0;
        self.write_blocked = false;
    }

    /// Drops the connection. Requests on the wire are retried if that is safe and time allows,
    /// otherwise they fail: with a timeout if theirs passed, else with `err`.
    fn drop_connection(&mut self, now: Instant, err: &Error, out: &mut Vec<Completion>) {
        self.note_partial_write();
        let in_flight = self.on_its_way();
        let on_wire: Vec<Request> = self.queue.drain(..in_flight).collect();
        self.queue.retain(|r| !matches!(r.kind, Kind::Handshake(_)));
        // A WATCH scope does not survive its connection: everything that belongs to one fails.
        self.scope_lost |= std::mem::take(&mut self.scope_open);
        let (scoped, rest): (Vec<Request>, Vec<Request>) =
            std::mem::take(&mut self.queue).into_iter().partition(|r| r.scope != Scope::None);
        self.queue = rest.into();
        self.reset_wire();
        // Whatever happens next, the socket is gone.
        self.state = ConnState::Disconnected;
        for request in scoped {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
        for request in on_wire.into_iter().rev() {
            match request.kind {
                Kind::Handshake(_) | Kind::Asking => {}
                _ if request.scope != Scope::None => self.finish(request, Outcome::Failed(err.clone()), out),
                Kind::User(_) if request.may_retry(now) => self.queue.push_front(request),
                Kind::User(op) if self.hands_off && op.is_idempotent() && request.deadline > now => {
                    self.hand_off(request, Handoff::Retry(err.clone()));
                }
                Kind::Command => self.finish(request, Outcome::Failed(err.clone()), out),
                Kind::User(op) => {
                    let failure = if request.deadline <= now {
                        Error::new(ErrorKind::Timeout, format!("{} to {} timed out", op.name(), self.options.endpoint))
                            .context(err.message())
                    } else {
                        Error::new(
                            err.kind(),
                            format!("{} (the {} may or may not have been applied)", err.message(), op.name()),
                        )
                    };
                    self.finish(request, Outcome::Failed(failure), out);
                }
            }
        }
    }

    fn finish(&mut self, request: Request, outcome: Outcome, out: &mut Vec<Completion>) {
        let outcome = match outcome {
            Outcome::Failed(err) if request.partially_written > 0 && err.kind() != ErrorKind::PartialRead => {
                Outcome::Failed(Error::new(
                    ErrorKind::PartialRead,
                    format!("{err}; part of a value had already been received into the destination: do not read it"),
                ))
            }
            outcome => outcome,
        };
        if request.is_callers() {
            self.outstanding_cost -= request.pipeline_cost();
            self.outstanding_requests -= 1;
            out.push(request.completion(outcome));
        }
    }

    /// Leaves `request` to the worker (cluster mode): it no longer counts here.
    fn hand_off(&mut self, request: Request, why: Handoff) {
        self.outstanding_cost -= request.pipeline_cost();
        self.outstanding_requests -= 1;
        self.handoffs.push((request, why));
    }

    /// A request this connection cannot complete (its node is unreachable): handed back in
    /// cluster mode when it can go elsewhere in time, failed otherwise.
    fn finish_or_hand_off(&mut self, now: Instant, request: Request, err: Error, out: &mut Vec<Completion>) {
        let movable = matches!(request.kind, Kind::User(op) if op.is_idempotent()) && request.deadline > now;
        if self.hands_off && movable {
            self.hand_off(request, Handoff::Retry(err));
        } else {
            self.finish(request, Outcome::Failed(err), out);
        }
    }

    /// What a cluster node's error reply asks of a request: another node, or another try.
    fn handoff_for(&self, text: &[u8]) -> Option<Handoff> {
        let asked = match &self.options.endpoint {
            Endpoint::Tcp { host, port } => NodeAddr::new(host.clone(), *port),
            Endpoint::Unix { .. } => return None,
        };
        match Redirect::parse(text, &asked) {
            Ok(Some(redirect)) => Some(Handoff::Redirect(redirect)),
            // READONLY: a primary demoted by a Sentinel failover; the write was not applied.
            // LOADING or MASTERDOWN: a replica in a full resync or cut off from its primary;
            // another try goes to the primary (reads from replicas), or to the node once ready.
            Ok(None)
                if crate::cluster::transient(text).is_some()
                    || text.starts_with(b"MASTERDOWN")
                    || text.starts_with(b"READONLY")
                    || text.starts_with(b"LOADING") =>
            {
                Some(Handoff::Retry(Error::server(text).context(&self.options.endpoint)))
            }
            Ok(None) => None,
            Err(why) => Some(Handoff::Retry(Error::new(ErrorKind::Protocol, why).context(&self.options.endpoint))),
        }
    }

    fn advance_written(&mut self, mut written: usize) {
        while written > 0 {
            let request = &mut self.queue[self.sent];
            if self.write_offset == 0 {
                request.attempts += 1;
                if request.attempts > 1 && matches!(request.kind, Kind::User(_)) {
                    super::hook::retry();
                }
            }
            let left = request.frame_len() - self.write_offset;
            if written < left {
                self.write_offset += written;
                return;
            }
            written -= left;
            self.write_offset = 0;
            self.inflight_bytes += request.pipeline_cost();
            match request.scope {
                Scope::Opens => self.scope_open = true,
                Scope::Closes => self.scope_open = false,
                Scope::None | Scope::Within => {}
            }
            self.sent += 1;
        }
    }

    /// The reader is about to forget a payload it was receiving into the oldest request's
    /// destination: that request must not end in a miss, nor in a hit shorter than that.
    fn note_partial_write(&mut self) {
        let written = self.reader.partially_written();
        if written > 0 && self.sent > 0 {
            let front = &mut self.queue[0];
            front.partially_written = front.partially_written.max(written);
        }
    }

    /// Nothing on the wire and nothing half-received.
    fn is_quiet(&self) -> bool {
        self.sent == 0 && self.write_offset == 0 && self.lent == 0 && self.reader.is_idle()
    }

    /// How many requests, from the oldest, have bytes on their way: sent whole, partly written,
    /// or lent to a send the kernel has not finished.
    fn on_its_way(&self) -> usize {
        let mut handed = self.write_offset + self.lent;
        let mut count = self.sent;
        while handed > 0 && count < self.queue.len() {
            handed = handed.saturating_sub(self.queue[count].frame_len());
            count += 1;
        }
        count
    }

    /// A reply came for the oldest request before all of it was sent (written, or counted by
    /// its send's completion): the server or a proxy answered early. A success answered that
    /// way vouches for bytes the server never read, and the caller's memory may still be read
    /// by the kernel: that request fails as a protocol error, whatever the loop. A refusal (an
    /// error reply) fails it as the refusal it is. Either way the connection goes: its stream
    /// no longer lines up with the requests (the other requests on it are retried or fail as
    /// on any broken connection).
    fn overtaken(&mut self, now: Instant, event: ReadEvent, out: &mut Vec<Completion>) {
        let front = &self.queue[0];
        let what = front.describe();
        let frame = front.frame_len();
        let sent = self.write_offset.min(frame);
        let err = match &event {
            ReadEvent::Reply(Reply::Error(text)) => refusal(front, text),
            other => Error::new(
                ErrorKind::Protocol,
                format!(
                    "{} answered {what} ({}) after {sent} of its {frame} bytes were sent: a server that replies \
                     before it has read the whole request (a proxy answering early?) is not speaking RESP as Redis \
                     does, so the {what} failed and the connection was dropped",
                    self.options.endpoint,
                    brief(other),
                ),
            ),
        };
        let front = self.queue.pop_front().expect("a partly sent request");
        // The connection goes; nothing of it is on the books any more (the driver reaps its
        // send before it lets go of anything that send reads).
        self.write_offset = 0;
        self.lent = 0;
        self.finish(front, Outcome::Failed(err.clone()), out);
        self.connection_broke(now, err, out);
    }

    fn complete_front(&mut self, now: Instant, event: ReadEvent, out: &mut Vec<Completion>) {
        let request = self.queue.pop_front().expect("a reply completes a sent request");
        self.sent -= 1;
        self.inflight_bytes -= request.pipeline_cost();
        match request.kind {
            Kind::Handshake(step) => {
                let reply = match event {
                    ReadEvent::Reply(reply) => reply,
                    ReadEvent::Bulk { len, .. } => Reply::Bulk(vec![0; len.min(16)]),
                };
                match handshake::judge(step, &reply, &self.options) {
                    Verdict::Proceed => {
                        if step == handshake::Step::Hello {
                            self.server = ServerIdentity::from_hello(&reply);
                            if let (Some(health), Some(server)) = (&self.health, &self.server) {
                                health.learned(server);
                            }
                        }
                        if !self.queue.iter().any(|r| matches!(r.kind, Kind::Handshake(_))) {
                            self.state = ConnState::Ready;
                            self.failures = 0;
                            self.last_error = None;
                            if let Some(health) = &self.health {
                                health.mark_up();
                            }
                        }
                    }
                    Verdict::Permanent(err) => {
                        let recheck_at = now + self.policy.recheck_permanent_after;
                        self.fail_permanently(now, err, Some(recheck_at), out);
                    }
                    Verdict::Transient(err) => {
                        self.drop_connection(now, &err, out);
                        self.after_failed_attempt(now, err, out);
                    }
                }
            }
            Kind::User(op) => {
                if let (true, ReadEvent::Reply(Reply::Error(text))) = (self.hands_off, &event) {
                    if let Some(handoff) = self.handoff_for(text).filter(|_| request.deadline > now) {
                        return self.hand_off(request, handoff);
                    }
                }
                let outcome = user_outcome(op, event, &request, &self.options.endpoint);
                self.finish(request, outcome, out);
            }
            Kind::Command => {
                // A ranged read's command redirected by a cluster node goes back to the read.
                if let (true, Scope::Opens | Scope::Within, ReadEvent::Reply(Reply::Error(text))) =
                    (self.hands_off, request.scope, &event)
                {
                    if let Some(handoff) = self.handoff_for(text).filter(|_| request.deadline > now) {
                        return self.hand_off(request, handoff);
                    }
                }
                let outcome = match event {
                    ReadEvent::Reply(Reply::Error(text)) => Outcome::Failed(Error::server(&text)),
                    ReadEvent::Reply(reply) => Outcome::Reply(reply),
                    ReadEvent::Bulk { len, .. } => Outcome::Failed(Error::new(
                        ErrorKind::Protocol,
                        format!("a {len}-byte bulk reply to a command is not kept"),
                    )),
                };
                self.finish(request, outcome, out);
            }
            // The redirected request that follows gets its own reply; an error here shows there.
            Kind::Asking => {}
        }
    }
}

/// The error of a request the server refused, with what to do where the refusal says it: a value
/// longer than the server's `proto-max-bulk-len` is refused with a protocol error, often before
/// the server has read it (see [`ConnCore::overtaken`]).
fn refusal(request: &Request, text: &[u8]) -> Error {
    let err = Error::server(text);
    match (request.value(), text.windows(19).any(|w| w == b"invalid bulk length")) {
        (Some(value), true) => Error::new(
            ErrorKind::Server,
            format!(
                "{} (the {} carried a {}-byte value, longer than the server's proto-max-bulk-len: raise it on the \
                 server, CONFIG SET proto-max-bulk-len, or store smaller values)",
                err.message(),
                request.describe(),
                value.len()
            ),
        ),
        _ => err,
    }
}

/// A reply, for a message: its kind and start, never a value.
fn brief(event: &ReadEvent) -> String {
    match event {
        ReadEvent::Reply(reply) => reply.brief(64),
        ReadEvent::Bulk { len, .. } => format!("a {len}-byte bulk string"),
    }
}

fn user_outcome(op: Op, event: ReadEvent, request: &Request, endpoint: &impl std::fmt::Display) -> Outcome {
    let capacity = request.destination().map_or(0, |d| d.len());
    let outcome = match (op, event) {
        (_, ReadEvent::Reply(Reply::Error(text))) => Outcome::Failed(refusal(request, &text)),
        (Op::Set, ReadEvent::Reply(Reply::Simple(ok))) if ok == b"OK" => Outcome::Done,
        (Op::Ping, ReadEvent::Reply(Reply::Simple(pong))) if pong == b"PONG" => Outcome::Done,
        (Op::Get, ReadEvent::Reply(Reply::Nil)) => Outcome::Miss,
        (Op::Get, ReadEvent::Bulk { len, fitted: true }) => Outcome::Hit(len),
        // A fixed-size chunk of another size is not this chunk: a miss, destination untouched.
        (Op::Get, ReadEvent::Bulk { len, fitted: false }) if request.exact_length && len != capacity => Outcome::Miss,
        (Op::Get, ReadEvent::Bulk { len, fitted: false }) => {
            Outcome::Failed(Error::value_too_large(len as u64, capacity as u64))
        }
        (Op::Exists | Op::Del, ReadEvent::Reply(Reply::Integer(n))) => Outcome::Bool(n > 0),
        (op, other) => {
            Outcome::Failed(Error::new(ErrorKind::Protocol, format!("unexpected reply to {}: {other:?}", op.name())))
        }
    };
    match outcome {
        // The retry answered after an earlier attempt had written part of a value: only a
        // value that was received whole into the destination is good, and only one at least
        // as long as what was written (past a hit's end the destination is as it was).
        Outcome::Hit(len) if len < request.partially_written => Outcome::Failed(Error::new(
            ErrorKind::PartialRead,
            format!(
                "GET: the connection to {endpoint} broke while the value was being received, and the retry \
                 found a shorter one ({len} bytes): past its end the destination holds bytes of the earlier value; \
                 do not read it"
            ),
        )),
        Outcome::Miss if request.partially_written > 0 => Outcome::Failed(Error::new(
            ErrorKind::PartialRead,
            format!(
                "GET: the connection to {endpoint} broke while the value was being received, and the retry \
                 found {}: the destination holds part of the earlier value; do not read it",
                if request.exact_length { "no value of the expected length" } else { "no value" }
            ),
        )),
        outcome => outcome,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Adds the unwritten part of `request`'s frame (header, value, trailer) from `offset` on.
/// Returns false, adding nothing, when the list has no room for a whole frame.
fn push_frame<'a, const N: usize>(iov: &mut IoVecs<'a, N>, request: &'a Request, offset: usize) -> bool {
    if iov.room() < 3 {
        return false;
    }
    let header = &request.header;
    if offset < header.len() {
        iov.push_slice(&header[offset..]);
    }
    if let Some(value) = request.value() {
        let value_start = offset.saturating_sub(header.len());
        if value_start < value.len() {
            iov.push_raw(value, value_start);
        }
        let trailer = &request.trailer;
        let trailer_start = offset.saturating_sub(header.len() + value.len());
        if trailer_start < trailer.len() {
            iov.push_slice(&trailer[trailer_start..]);
        }
    }
    true
}
