//! The completion driver: what `Conn` does on its worker's io_uring (`io_backend = uring`).
//! Each round takes what completed (the send first: see `ring_io`), then starts the send and the
//! receive the core wants; a deadline, an abort or a failed send first settles what is in
//! flight. A connection that is not on completions (connecting, TLS) is driven by readiness
//! (`poll_driver`), with the ring's poll standing in for `ppoll`.

use super::*;

impl Conn {
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
    pub(super) fn absorb_ring(&mut self, now: Instant, out: &mut Vec<Completion>) {
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

    pub(super) fn absorb_recv(&mut self, now: Instant, out: &mut Vec<Completion>) {
        match self.ring.as_mut().and_then(ring_io::RingIo::take_recv) {
            Some(Ok(0)) => self.core.on_peer_closed(now, out),
            Some(Ok(n)) => self.core.on_received(now, n, out),
            Some(Err(err)) => self.core.on_io_error(now, err, out),
            None => {}
        }
    }

    /// Before the core decides on a deadline or a failure: the ring's send and receive are
    /// cancelled and reaped, and what they moved is told to the core (see `ring_io`).
    pub(super) fn settle_ring(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if let Some(io) = self.ring.as_mut().filter(|io| io.moving_data()) {
            io.settle();
            self.absorb_ring(now, out);
            self.sync_socket();
        }
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
    pub(super) fn on_completions(&self) -> bool {
        self.socket.tls.is_none()
            && self.socket.stream.is_some()
            && self.plaintext_check.is_none()
            && matches!(self.core.state(), ConnState::Handshaking | ConnState::Ready)
    }

    /// Starts the send and the receive the core wants, where none is in flight.
    pub(super) fn start_ring_ops(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
}
