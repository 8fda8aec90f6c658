//! One pipelined connection as a non-blocking state machine.
//!
//! Requests queue in order; the oldest `sent` of them are on the wire awaiting replies (RESP
//! answers in order), the next may be partly written. Writes gather header, value and trailer
//! of many requests into one `sendmsg`; replies are parsed from a small scratch buffer while
//! GET payloads are received straight into their destination.
//!
//! The same machine serves the blocking [`crate::client::BlockingClient`] (driven by a
//! deadline-bounded poll on one socket) and the engine's workers (many connections, one poll).
//! It connects lazily, authenticates through the shared handshake, reconnects with bounded
//! backoff after transient failures, and never retries permanent ones.

pub mod reader;
pub mod request;

use crate::cluster::{NodeAddr, Redirect};
use crate::error::{Error, ErrorKind};
use crate::net::IoVecs;
use crate::net::handshake::{self, Verdict};
use crate::net::{Address, ConnectOptions, Interest, Readiness, Stream};
use crate::op::Op;
use crate::resp::{Reply, TRAILER};
use reader::{ReadError, ReadEvent, Reader};
pub use request::{Completion, Kind, Outcome, Request};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much a connection keeps on the wire at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineLimits {
    /// Bytes sent but unanswered, plus the replies they may bring.
    pub max_inflight_bytes: usize,
    pub max_inflight_requests: usize,
}

impl Default for PipelineLimits {
    /// Measured on redis-server 7 with 8 connections (bench/RESULTS.md): one large value in
    /// flight per connection moves the most. Deeper pipelines of 256 KiB to 4 MiB values make
    /// the single-threaded server hold and fault in more buffers at once and cost 10-40% of
    /// GET and SET throughput; values below 1 MiB still pipeline (4 KiB values 256 deep).
    fn default() -> Self {
        PipelineLimits { max_inflight_bytes: 1 << 20, max_inflight_requests: 256 }
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
    pub max_delay: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            fail_after_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
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

/// The connection's state; the socket exists exactly in `Connecting`, `Handshaking`, `Ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// No socket; one is opened when work arrives.
    Disconnected,
    /// A non-blocking connect to `addresses[address]` is under way.
    Connecting {
        address: usize,
        since: Instant,
    },
    /// AUTH / SELECT / PING are in flight; user requests wait.
    Handshaking,
    Ready,
    /// A (re)connect failed; the next attempt is not made before `retry_at`.
    Backoff {
        retry_at: Instant,
    },
    /// A permanent failure (bad credentials): every request fails at once with it.
    Failed,
}

/// Why a request leaves its connection to be sent elsewhere (Redis Cluster): the worker that
/// owns the connection re-routes it.
#[derive(Debug)]
pub enum Handoff {
    /// `-MOVED` or `-ASK`: another node serves the key's slot.
    Redirect(Redirect),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, or the node cannot be reached: worth another
    /// try once the slot map is refreshed, while the deadline allows.
    Retry(Error),
}

/// Bytes read from one connection before others get a turn.
const READ_BUDGET: usize = 8 << 20;
/// Gather-list entries per `sendmsg`.
const MAX_IOV: usize = 128;

pub struct Conn {
    options: Arc<ConnectOptions>,
    addresses: Arc<[Address]>,
    policy: ReconnectPolicy,
    limits: PipelineLimits,
    state: ConnState,
    stream: Option<Stream>,
    /// Consecutive failed attempts to establish a connection.
    failures: u32,
    last_error: Option<Error>,
    permanent_error: Option<Error>,
    queue: VecDeque<Request>,
    /// The first `sent` requests of the queue are fully written.
    sent: usize,
    /// Bytes of `queue[sent]` already written.
    write_offset: usize,
    /// Pipeline cost of the `sent` requests.
    inflight_bytes: usize,
    /// Pipeline cost of every user request in the queue; what load balancing looks at.
    outstanding_cost: usize,
    /// User requests queued or in flight.
    outstanding_requests: usize,
    /// The last write did not take everything: wait for writability before trying again.
    write_blocked: bool,
    reader: Reader,
    /// Cluster mode: redirects and node failures hand requests back instead of failing them.
    hands_off: bool,
    handoffs: Vec<(Request, Handoff)>,
}

impl Conn {
    pub fn new(
        options: Arc<ConnectOptions>,
        addresses: Arc<[Address]>,
        policy: ReconnectPolicy,
        limits: PipelineLimits,
    ) -> Conn {
        assert!(!addresses.is_empty(), "a connection needs at least one address");
        Conn {
            options,
            addresses,
            policy,
            limits,
            state: ConnState::Disconnected,
            stream: None,
            failures: 0,
            last_error: None,
            permanent_error: None,
            queue: VecDeque::new(),
            sent: 0,
            write_offset: 0,
            inflight_bytes: 0,
            outstanding_cost: 0,
            outstanding_requests: 0,
            write_blocked: false,
            reader: Reader::default(),
            hands_off: false,
            handoffs: Vec::new(),
        }
    }

    /// In Redis Cluster: requests redirected by the node, or stranded by its failure, are handed
    /// back through [`Conn::take_handoffs`] rather than failed.
    pub fn handing_off(mut self) -> Conn {
        self.hands_off = true;
        self
    }

    /// Requests handed back since the last call, with why.
    pub fn take_handoffs(&mut self) -> Vec<(Request, Handoff)> {
        std::mem::take(&mut self.handoffs)
    }

    /// Queues `request` right behind an `ASKING`, as an `-ASK` redirect requires.
    pub fn push_asking(&mut self, request: Request, out: &mut Vec<Completion>) {
        if self.permanent_error.is_none() {
            self.queue.push_back(Request::asking(request.deadline));
        }
        self.push(request, out);
    }

    pub fn state(&self) -> ConnState {
        self.state
    }

    /// User requests queued or in flight.
    pub fn outstanding_requests(&self) -> usize {
        self.outstanding_requests
    }

    pub fn is_empty(&self) -> bool {
        self.outstanding_requests == 0
    }

    /// Pipeline cost of all user requests not yet completed.
    pub fn outstanding_cost(&self) -> usize {
        self.outstanding_cost
    }

    /// The socket's options, for tests and diagnostics.
    pub fn stream(&self) -> Option<&Stream> {
        self.stream.as_ref()
    }

    pub fn push(&mut self, request: Request, out: &mut Vec<Completion>) {
        if let Some(err) = &self.permanent_error {
            out.push(request.completion(Outcome::Failed(err.clone())));
            return;
        }
        self.outstanding_cost += request.pipeline_cost();
        self.outstanding_requests += 1;
        self.queue.push_back(request);
    }

    /// Makes every step the socket's readiness allows: connecting, writing, reading.
    pub fn drive(&mut self, now: Instant, mut ready: Readiness, out: &mut Vec<Completion>) {
        // A connection found broken is replaced at once, once per call so a flapping server
        // cannot make this spin.
        for _ in 0..2 {
            self.advance_connection(now, ready, out);
            if !matches!(self.state, ConnState::Handshaking | ConnState::Ready) {
                return;
            }
            if ready.readable {
                self.read(now, out);
            }
            if ready.writable {
                self.write_blocked = false;
            }
            if !self.write_blocked {
                self.write(now, out);
            }
            // A handshake that just finished lets user requests go out.
            if self.state == ConnState::Ready && !self.write_blocked && self.has_sendable() {
                self.write(now, out);
            }
            if self.state != ConnState::Disconnected {
                return;
            }
            ready = Readiness::OPTIMISTIC;
        }
    }

    /// What to wait for before driving again: the socket (if any) and its interest, and the
    /// instant by which `expire` or `drive` must run regardless.
    pub fn interest(&self) -> (Option<BorrowedFd<'_>>, Interest, Option<Instant>) {
        let mut wake = self.queue.iter().map(|r| r.deadline).min();
        let interest = match self.state {
            ConnState::Connecting { since, .. } => {
                wake = earliest(wake, Some(since + self.options.connect_timeout));
                Interest { read: false, write: true }
            }
            ConnState::Handshaking | ConnState::Ready => Interest { read: true, write: self.write_blocked },
            ConnState::Backoff { retry_at } if !self.queue.is_empty() => {
                wake = earliest(wake, Some(retry_at));
                Interest::default()
            }
            _ => Interest::default(),
        };
        (self.stream.as_ref().map(|s| s.as_fd()), interest, wake)
    }

    /// Fails what is overdue. A connection whose oldest outstanding reply is overdue is
    /// stalled: it is dropped, since the replies it still owes would arrive out of sync.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if let ConnState::Connecting { address, since } = self.state {
            if now >= since + self.options.connect_timeout {
                let err = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
                self.connect_failed(now, address, err, out);
            }
        }
        let in_flight = self.sent + usize::from(self.write_offset > 0);
        if in_flight > 0 && self.queue[0].deadline <= now {
            let waiting_for = match self.queue[0].kind {
                Kind::User(op) => format!("the reply to {}", op.name()),
                Kind::Command => "the reply to a command".into(),
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

    /// Closes the socket at once and fails every request, those on the wire too: nothing
    /// reads from or writes into their memory afterwards (the engine failed and must let go
    /// of every buffer now).
    pub fn abort(&mut self, err: &Error, out: &mut Vec<Completion>) {
        self.stream = None;
        self.note_partial_write();
        self.reader.reset();
        self.sent = 0;
        self.write_offset = 0;
        self.inflight_bytes = 0;
        self.write_blocked = false;
        self.state = ConnState::Disconnected;
        let all: Vec<Request> = self.queue.drain(..).collect();
        for request in all {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    /// Fails requests that have not started to go out (the store is closing). Requests on the
    /// wire finish normally or at their deadline.
    pub fn fail_unsent(&mut self, err: &Error, out: &mut Vec<Completion>) {
        let first_unsent = self.sent + usize::from(self.write_offset > 0);
        let unsent: Vec<Request> = self.queue.drain(first_unsent..).collect();
        for request in unsent {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    fn expire_unsent(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let first_unsent = self.sent + usize::from(self.write_offset > 0);
        if !self.queue.iter().skip(first_unsent).any(|r| r.deadline <= now) {
            return;
        }
        let rest: Vec<Request> = self.queue.drain(first_unsent..).collect();
        for request in rest {
            if request.deadline > now {
                self.queue.push_back(request);
                continue;
            }
            let mut err = Error::new(
                ErrorKind::Timeout,
                format!(
                    "timed out before {} could be sent to {}",
                    request.op().map_or("the handshake", Op::name),
                    self.options.endpoint
                ),
            );
            if let Some(last) = &self.last_error {
                err = err.context(format!("last connection error: {last}"));
            }
            self.finish(request, Outcome::Failed(err), out);
        }
    }

    fn has_user_work(&self) -> bool {
        self.outstanding_requests > 0
    }

    fn has_sendable(&self) -> bool {
        self.sent < self.queue.len()
    }

    fn advance_connection(&mut self, now: Instant, ready: Readiness, out: &mut Vec<Completion>) {
        match self.state {
            ConnState::Disconnected if self.has_user_work() => self.start_connect(now, 0, out),
            ConnState::Backoff { retry_at } if retry_at <= now && self.has_user_work() => {
                self.start_connect(now, 0, out)
            }
            ConnState::Connecting { address, .. } if ready.writable => {
                let outcome = self.stream.as_ref().expect("connecting has a socket").finish_connect();
                match outcome {
                    Ok(()) => self.begin_handshake(now),
                    Err(err) => self.connect_failed(now, address, err, out),
                }
            }
            _ => {}
        }
    }

    fn start_connect(&mut self, now: Instant, address: usize, out: &mut Vec<Completion>) {
        match Stream::start_connect(&self.addresses[address]) {
            Ok((stream, connected)) => {
                self.stream = Some(stream);
                if connected {
                    self.begin_handshake(now);
                } else {
                    self.state = ConnState::Connecting { address, since: now };
                }
            }
            Err(err) => self.connect_failed(now, address, err, out),
        }
    }

    fn connect_failed(&mut self, now: Instant, address: usize, err: io::Error, out: &mut Vec<Completion>) {
        self.stream = None;
        if address + 1 < self.addresses.len() {
            return self.start_connect(now, address + 1, out);
        }
        let err = Error::connect_failed(&self.options.endpoint, &err);
        self.after_failed_attempt(now, err, out);
    }

    fn begin_handshake(&mut self, now: Instant) {
        self.state = ConnState::Handshaking;
        self.write_blocked = false;
        let deadline = now + self.options.connect_timeout;
        for (step, header) in handshake::commands(&self.options).into_iter().rev() {
            self.queue.push_front(Request::handshake(step, header, deadline));
        }
    }

    /// A connection attempt failed (connect, handshake, or the connection broke before the
    /// handshake finished).
    fn after_failed_attempt(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        self.failures += 1;
        self.last_error = Some(err.clone());
        self.state = ConnState::Backoff { retry_at: now + self.policy.delay(self.failures) };
        if self.failures >= self.policy.fail_after_attempts {
            let waiting: Vec<Request> = self.queue.drain(..).collect();
            for request in waiting {
                self.finish_or_hand_off(now, request, err.clone(), out);
            }
        }
    }

    fn fail_permanently(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        self.drop_connection(now, &err, out);
        self.state = ConnState::Failed;
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

    /// Closes the socket. Requests on the wire are retried if that is safe and time allows,
    /// otherwise they fail: with a timeout if theirs passed, else with `err`.
    fn drop_connection(&mut self, now: Instant, err: &Error, out: &mut Vec<Completion>) {
        self.stream = None;
        self.note_partial_write();
        self.reader.reset();
        let in_flight = self.sent + usize::from(self.write_offset > 0);
        let on_wire: Vec<Request> = self.queue.drain(..in_flight).collect();
        self.queue.retain(|r| !matches!(r.kind, Kind::Handshake(_)));
        self.sent = 0;
        self.write_offset = 0;
        self.inflight_bytes = 0;
        self.write_blocked = false;
        for request in on_wire.into_iter().rev() {
            match request.kind {
                Kind::Handshake(_) | Kind::Asking => {}
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
            Outcome::Failed(err) if request.wrote_partially && err.kind() != ErrorKind::PartialRead => {
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
            crate::net::Endpoint::Tcp { host, port } => NodeAddr::new(host.clone(), *port),
            crate::net::Endpoint::Unix { .. } => return None,
        };
        match Redirect::parse(text, &asked) {
            Ok(Some(redirect)) => Some(Handoff::Redirect(redirect)),
            Ok(None) if crate::cluster::transient(text).is_some() || text.starts_with(b"MASTERDOWN") => {
                Some(Handoff::Retry(Error::server(text).context(&self.options.endpoint)))
            }
            Ok(None) => None,
            Err(why) => Some(Handoff::Retry(Error::new(ErrorKind::Protocol, why).context(&self.options.endpoint))),
        }
    }

    fn write(&mut self, now: Instant, out: &mut Vec<Completion>) {
        loop {
            let (sent, total) = {
                let Some(stream) = &self.stream else { return };
                let mut iov = IoVecs::<MAX_IOV>::new();
                let mut inflight_bytes = self.inflight_bytes;
                let mut offset = self.write_offset;
                for (in_flight, request) in (self.sent..).zip(self.queue.iter().skip(self.sent)) {
                    if self.state == ConnState::Handshaking && !matches!(request.kind, Kind::Handshake(_)) {
                        break;
                    }
                    if offset == 0
                        && in_flight > 0
                        && (inflight_bytes + request.pipeline_cost() > self.limits.max_inflight_bytes
                            || in_flight >= self.limits.max_inflight_requests)
                    {
                        break;
                    }
                    if !push_frame(&mut iov, request, offset) {
                        break;
                    }
                    inflight_bytes += request.pipeline_cost();
                    offset = 0;
                }
                if iov.is_empty() {
                    return;
                }
                (stream.send(iov.as_slice()), iov.total_len())
            };
            match sent {
                Ok(written) => {
                    self.advance_written(written);
                    if written < total {
                        self.write_blocked = true;
                        return;
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked = true;
                    return;
                }
                Err(err) => {
                    let err = Error::connection_lost(&self.options.endpoint, err);
                    return self.connection_broke(now, err, out);
                }
            }
        }
    }

    fn advance_written(&mut self, mut written: usize) {
        while written > 0 {
            let request = &mut self.queue[self.sent];
            if self.write_offset == 0 {
                request.attempts += 1;
            }
            let left = request.frame_len() - self.write_offset;
            if written < left {
                self.write_offset += written;
                return;
            }
            written -= left;
            self.write_offset = 0;
            self.inflight_bytes += request.pipeline_cost();
            self.sent += 1;
        }
    }

    fn read(&mut self, now: Instant, out: &mut Vec<Completion>) {
        let mut budget = READ_BUDGET;
        loop {
            let Some(stream) = &self.stream else { return };
            let (dest, exact) = match self.queue.front() {
                Some(front) if self.sent > 0 => (front.destination(), front.exact_length),
                _ => (None, false),
            };
            match self.reader.next(stream, dest, exact, &mut budget) {
                Ok(None) => return,
                Ok(Some(_)) if self.sent == 0 => {
                    let err = Error::new(
                        ErrorKind::Protocol,
                        format!("{} sent a reply to a request that was never made", self.options.endpoint),
                    );
                    return self.connection_broke(now, err, out);
                }
                Ok(Some(event)) => self.complete_front(now, event, out),
                Err(ReadError::Eof) if self.is_quiet() => {
                    // An idle connection closed by the server (timeout, restart): reconnect
                    // when there is work again, without counting it as a failure.
                    self.stream = None;
                    self.reader.reset();
                    self.state = ConnState::Disconnected;
                    return;
                }
                Err(err) => {
                    let err = match err {
                        ReadError::Eof => {
                            Error::connection_lost(&self.options.endpoint, "the server closed the connection")
                        }
                        ReadError::Io(err) => Error::connection_lost(&self.options.endpoint, err),
                        ReadError::Protocol(err) => Error::from(err).context(&self.options.endpoint),
                    };
                    return self.connection_broke(now, err, out);
                }
            }
        }
    }

    /// The reader is about to forget a payload it was receiving into the oldest request's
    /// destination: that request must not end in a miss.
    fn note_partial_write(&mut self) {
        if self.reader.wrote_partially() && self.sent > 0 {
            self.queue[0].wrote_partially = true;
        }
    }

    /// Nothing on the wire and nothing half-received.
    fn is_quiet(&self) -> bool {
        self.sent == 0 && self.write_offset == 0 && self.reader.is_idle()
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
                        if !self.queue.iter().any(|r| matches!(r.kind, Kind::Handshake(_))) {
                            self.state = ConnState::Ready;
                            self.failures = 0;
                            self.last_error = None;
                        }
                    }
                    Verdict::Permanent(err) => self.fail_permanently(now, err, out),
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

fn user_outcome(op: Op, event: ReadEvent, request: &Request, endpoint: &impl std::fmt::Display) -> Outcome {
    let capacity = request.destination().map_or(0, |d| d.len());
    let outcome = match (op, event) {
        (_, ReadEvent::Reply(Reply::Error(text))) => Outcome::Failed(Error::server(&text)),
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
        // value that was received whole into the destination is good.
        Outcome::Miss if request.wrote_partially => Outcome::Failed(Error::new(
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
        let trailer_start = offset.saturating_sub(header.len() + value.len());
        if trailer_start < TRAILER.len() {
            iov.push_slice(&TRAILER[trailer_start..]);
        }
    }
    true
}
