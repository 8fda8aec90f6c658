//! What comes back: bytes the driver received ([`ConnCore::on_received`]) become replies, and
//! each completes the oldest request sent whole; a reply that overtakes its request, a payload
//! cut short, and what a reply means for the caller (`user_outcome`).

use super::*;

impl ConnCore {
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

    /// A receive into the payload being received in place ended without saying how much it
    /// wrote (its ring died): the destination may hold part of the value.
    pub fn on_receive_lost(&mut self) {
        if self.reader.payload_in_place().is_some() && self.sent > 0 {
            let front = &mut self.queue[0];
            front.partially_written = front.partially_written.max(1);
        }
    }

    /// The destination and exact-length rule of the reply expected next.
    pub(super) fn expected_destination(&self) -> (Option<crate::memory::RawBuf>, bool) {
        match self.queue.front() {
            Some(front) if self.sent > 0 => (front.destination(), front.exact_length),
            _ => (None, false),
        }
    }

    /// The reader is about to forget a payload it was receiving into the oldest request's
    /// destination: that request must not end in a miss, nor in a hit shorter than that.
    pub(super) fn note_partial_write(&mut self) {
        let written = self.reader.partially_written();
        if written > 0 && self.sent > 0 {
            let front = &mut self.queue[0];
            front.partially_written = front.partially_written.max(written);
        }
    }

    /// Nothing on the wire and nothing half-received.
    pub(super) fn is_quiet(&self) -> bool {
        self.sent == 0 && self.write_offset == 0 && self.lent == 0 && self.reader.is_idle()
    }

    /// A reply came for the oldest request before all of it was sent (written, or counted by
    /// its send's completion): the server or a proxy answered early. A success answered that
    /// way vouches for bytes the server never read, and the caller's memory may still be read
    /// by the kernel: that request fails as a protocol error, whatever the loop. A refusal (an
    /// error reply) fails it as the refusal it is. Either way the connection goes: its stream
    /// no longer lines up with the requests (the other requests on it are retried or fail as
    /// on any broken connection).
    pub(super) fn overtaken(&mut self, now: Instant, event: ReadEvent, out: &mut Vec<Completion>) {
        let front = &self.queue[0];
        let what = front.describe();
        let frame = front.frame_len();
        let sent = self.write_offset.min(frame);
        let err = match &event {
            ReadEvent::Reply(Reply::Error(text)) => refused_by_server(front, text),
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

    pub(super) fn complete_front(&mut self, now: Instant, event: ReadEvent, out: &mut Vec<Completion>) {
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
/// the server has read it (see `ConnCore::overtaken`).
pub(super) fn refused_by_server(request: &Request, text: &[u8]) -> Error {
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
        (_, ReadEvent::Reply(Reply::Error(text))) => Outcome::Failed(refused_by_server(request, &text)),
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
