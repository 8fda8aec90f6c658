//! The connection's life: connecting (address by address), the TLS and RESP handshakes, what a
//! failure costs (a bounded backoff, or a permanent failure checked again later), deadlines,
//! and dropping the connection (requests on the wire retried or failed).

use super::*;

impl ConnCore {
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

    /// The connect to the address [`ConnCore::poll_connect`] named succeeded: to a TLS
    /// endpoint the TLS handshake comes next (the driver reports
    /// [`ConnCore::on_tls_established`] or [`ConnCore::on_tls_failed`]), then AUTH/SELECT/PING.
    pub fn on_connected(&mut self, now: Instant) {
        debug_assert!(matches!(self.state, ConnState::Connecting { .. }), "{:?}", self.state);
        self.next_address = 0;
        crate::conn::hook::connected();
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

    pub(super) fn start_handshake(&mut self, now: Instant) {
        self.state = ConnState::Handshaking;
        let deadline = now + self.options.connect_timeout;
        for (step, header) in handshake::commands(&self.options).into_iter().rev() {
            self.queue.push_front(Request::handshake(step, header, deadline));
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

    /// What a connection that broke in its handshake before any reply may mean: a TLS port
    /// resets a plaintext hello at once (Redis, Valkey); a server that requires a client
    /// certificate (TLS 1.3) closes a connection without one right after the TLS handshake,
    /// often without saying why.
    pub(super) fn broken_before_any_reply_hint(&self) -> &'static str {
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

    /// The connection can never work (its host name cannot be looked up): every request
    /// queued fails with `err` now, and every later one at once.
    pub fn fail_for_good(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
        self.fail_permanently(now, err, None, out);
    }

    /// Before a request is queued: a permanent failure whose recheck is due gives way. The
    /// clock is read only on a connection that failed so: every key of every batch is pushed
    /// here, and reading it for each cost about 4% of an I/O thread's CPU on EXISTS over TLS
    /// (bench/results/2026-12-04/tls-exists).
    pub(super) fn recheck_before_queueing(&mut self) {
        if matches!(self.state, ConnState::Failed { recheck_at: Some(_) }) {
            self.recheck_if_due(Instant::now());
        }
    }

    /// A permanent failure whose recheck is due gives way: the next request connects anew.
    pub(super) fn recheck_if_due(&mut self, now: Instant) {
        if let ConnState::Failed { recheck_at: Some(at) } = self.state {
            if at <= now {
                self.permanent_error = None;
                self.failures = 0;
                self.state = ConnState::Disconnected;
            }
        }
    }

    /// The server came back since this connection last backed off from it.
    pub(super) fn recovered_since_backoff(&self) -> bool {
        self.health.as_ref().is_some_and(|h| h.recoveries() != self.recoveries_at_backoff)
    }

    /// Why a request newly queued here must fail at once: its server is known to be down.
    /// The rest of a `WATCH` scope is never refused: its fate is its `WATCH`'s (refused with
    /// it, see [`ConnCore::refuse`], or bound to this connection), and refusing an `EXEC` or
    /// `UNWATCH` whose `WATCH` left would leave that `WATCH` on the connection.
    pub(super) fn refusal(&self, request: &Request) -> Option<Error> {
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
    pub(super) fn refuse(&mut self, request: Request, err: Error, out: &mut Vec<Completion>) {
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

    /// A connection attempt failed (connect, handshake, or the connection broke before the
    /// handshake finished).
    pub(super) fn after_failed_attempt(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
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
    pub(super) fn fail_permanently(
        &mut self,
        now: Instant,
        err: Error,
        recheck_at: Option<Instant>,
        out: &mut Vec<Completion>,
    ) {
        self.drop_connection(now, &err, out);
        self.state = ConnState::Failed { recheck_at };
        self.permanent_error = Some(err.clone());
        let waiting: Vec<Request> = self.queue.drain(..).collect();
        for request in waiting {
            self.finish(request, Outcome::Failed(err.clone()), out);
        }
    }

    /// An established connection broke.
    pub(super) fn connection_broke(&mut self, now: Instant, err: Error, out: &mut Vec<Completion>) {
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
    pub(super) fn reset_wire(&mut self) {
        self.reader.reset();
        self.sent = 0;
        self.write_offset = 0;
        self.lent = 0;
        self.inflight_bytes = 0;
        self.write_blocked = false;
    }

    /// Drops the connection. Requests on the wire are retried if that is safe and time allows,
    /// otherwise they fail: with a timeout if theirs passed, else with `err`.
    pub(super) fn drop_connection(&mut self, now: Instant, err: &Error, out: &mut Vec<Completion>) {
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
}
