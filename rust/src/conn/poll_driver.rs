//! The readiness driver: what `Conn` does when the socket is ready (`ppoll` said so, or the ring's
//! poll): connect, the TLS handshake, `sendmsg` of the gather list, `recv` into scratch or
//! straight into the page, the receive low-water mark. The poll loop runs every connection on
//! it; the ring runs on it what is not on completions (connecting, TLS, the plaintext check).

use super::*;

impl Conn {
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

    /// Right before the connection's first large send (a value, not its handshake, PINGs or
    /// lookups): restarts the socket's congestion control (BBR only; see `net::congestion`). A
    /// failure leaves the connection working on another congestion control, and says which.
    pub(super) fn before_send(&self, stream: &Stream, offered: usize) {
        if let Err(err) = stream.before_send(offered) {
            log::warn!(target: "lmcache_resp::conn", "{}: {err}", self.core.endpoint());
        }
    }

    pub(super) fn write(&mut self, now: Instant, out: &mut Vec<Completion>) {
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

    pub(super) fn read(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
    pub(super) fn set_low_water(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
