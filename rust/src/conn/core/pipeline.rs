//! What goes out: the gather lists [`ConnCore::transmit`] fills within the pipeline limits, and
//! what the driver says became of them (sent, lent to the kernel, blocked); what has bytes on
//! their way (never failed as unsent), and the unsent requests a deadline or a closing store
//! fails.

use super::*;

impl ConnCore {
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

    pub(super) fn advance_written(&mut self, mut written: usize) {
        while written > 0 {
            let request = &mut self.queue[self.sent];
            if self.write_offset == 0 {
                request.attempts += 1;
                if request.attempts > 1 && matches!(request.kind, Kind::User(_)) {
                    crate::conn::hook::retry();
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

    /// How many requests, from the oldest, have bytes on their way: sent whole, partly written,
    /// or lent to a send the kernel has not finished.
    pub(super) fn on_its_way(&self) -> usize {
        let mut handed = self.write_offset + self.lent;
        let mut count = self.sent;
        while handed > 0 && count < self.queue.len() {
            handed = handed.saturating_sub(self.queue[count].frame_len());
            count += 1;
        }
        count
    }

    /// The first request that has not started to leave and is not bound to one that has (see
    /// [`Request::leaves_with_next`]): those before it are on their way.
    pub(super) fn first_uncommitted(&self) -> usize {
        let first_unsent = self.on_its_way();
        match first_unsent.checked_sub(1).map(|on_its_way| &self.queue[on_its_way]) {
            Some(leader) if leader.leaves_with_next && first_unsent < self.queue.len() => first_unsent + 1,
            _ => first_unsent,
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
    pub(super) fn drain_holds_back(&self, request: &Request, scope_open: bool) -> bool {
        self.draining && !(scope_open && matches!(request.scope, Scope::Within | Scope::Closes))
    }

    /// A drained connection with every reply in is closed (the driver sends close_notify);
    /// the requests held back reconnect as after an idle close.
    pub(super) fn finish_drain_if_quiet(&mut self) {
        if self.draining && self.state == ConnState::Ready && self.is_quiet() {
            self.draining = false;
            self.reset_wire();
            self.state = ConnState::Disconnected;
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

    /// Fails the requests not yet sent whose deadline passed (a request bound to the next one
    /// fails with it). A `WATCH` scope needs more, or the server would keep state no one
    /// closes: a command of a scope the server holds (its `WATCH` left, the `EXEC` or
    /// `UNWATCH` that closes it did not), or an `EXEC` whose `MULTI` left, that expires here
    /// drops the connection, since only a fresh one is known to hold no `WATCH` and no
    /// `MULTI`; and the rest of a scope whose `WATCH` expired here fails with it (an `EXEC`
    /// without its `WATCH` would vouch for nothing).
    pub(super) fn expire_unsent(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
    pub(super) fn unsent_timeout(&self, what: &str) -> Error {
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
}

/// Adds the unwritten part of `request`'s frame (header, value, trailer) from `offset` on.
/// Returns false, adding nothing, when the list has no room for a whole frame.
pub(super) fn push_frame<'a, const N: usize>(iov: &mut IoVecs<'a, N>, request: &'a Request, offset: usize) -> bool {
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
