//! One pipelined connection as a state machine that does no I/O: it is told what happened
//! (a connect finished, bytes were sent, bytes arrived, the peer closed, time passed) and says
//! what to do next (which address to connect to, which bytes to send, where to receive, when to
//! wake), in the style of quinn-proto. [`super::Conn`] drives it over a real socket; the tests
//! drive it byte by byte with a controlled clock.
//!
//! Requests queue in order; the oldest `sent` of them are on the wire awaiting replies (RESP
//! answers in order), the next may be partly written. A send gathers header, value and trailer
//! of many requests into one gather list; replies are parsed from a small scratch buffer while
//! GET payloads are received straight into their destination.
//!
//! It connects lazily, authenticates through the shared handshake, reconnects with bounded
//! backoff after transient failures, and retries a permanent one only when it checks it again
//! ([`ReconnectPolicy::recheck_permanent_after`]).
//!
//! Split by concern, as quinn-proto splits its connection: this file holds the state and what
//! the driver asks of it; `pipeline.rs` what goes out, `replies.rs` what comes back,
//! `backoff.rs` connecting, failing and backing off, `handoff.rs` Redis Cluster's redirects.

use super::reader::{ReadEvent, Reader, RecvTarget};
use super::request::{Completion, Kind, Outcome, Request, Scope};
use crate::clock::earliest;
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

mod backoff;
mod handoff;
mod pipeline;
mod replies;

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
///
/// **The calling contract** (what a driver calls, and in which order; `Conn` is the one driver,
/// over the poll loop or an io_uring):
/// 1. Requests arrive with [`ConnCore::push`] (or [`ConnCore::push_asking`]) at any time.
/// 2. When [`ConnCore::poll_connect`] names an address, the driver starts a connect and reports
///    [`ConnCore::on_connected`] or [`ConnCore::on_connect_failed`]; over TLS it then runs the
///    handshake and reports [`ConnCore::on_tls_established`] or [`ConnCore::on_tls_failed`].
/// 3. While [`ConnCore::has_sendable`], it takes a gather list from [`ConnCore::transmit`] and
///    reports what the socket took with [`ConnCore::on_sent`] (a send that finishes later, on a
///    ring: [`ConnCore::on_send_started`] first, `on_sent` at its completion, and no other
///    `transmit` between), [`ConnCore::on_send_blocked`], and later [`ConnCore::on_writable`].
/// 4. It receives where [`ConnCore::recv_target`] says and reports [`ConnCore::on_received`],
///    [`ConnCore::on_peer_closed`] or [`ConnCore::on_io_error`]; what the target borrows is not
///    touched by anything else until that report.
/// 5. It waits for what [`ConnCore::interest`] names and calls [`ConnCore::handle_timeout`] once
///    its instant comes ([`ConnCore::is_due`]): after telling the core everything the socket did
///    before it.
/// 6. Completions come out in `out` of every call above; the driver posts them only after it has
///    let go of the socket's operations that use their memory ([`ConnState::has_socket`] false:
///    the socket goes). Redis Cluster's handed-back requests come from
///    [`ConnCore::take_handoffs`].
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

    fn has_user_work(&self) -> bool {
        self.outstanding_requests > 0
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
}
