//! `Conn`'s TLS steps, by readiness: starting a session on a socket that just connected, moving
//! the handshake on (`tls_io` moves the bytes), flushing sealed bytes, and the plaintext check
//! of a silent port (`plaintext_check`), whose verdict decides what a failed handshake means.

use super::plaintext_check::Verdict;
use super::*;
use crate::net::tls::{Progress, failure};

impl Conn {
    /// Asks the port, on a second connection, whether it speaks plaintext (see
    /// [`plaintext_check`]). Where that cannot even start, a held failure is reported as it is.
    pub(super) fn start_plaintext_check(&mut self) {
        if self.plaintext_check.is_none() {
            self.plaintext_check = self.addresses.get(self.address).and_then(|a| PlaintextCheck::start(a).ok());
        }
    }

    /// Acts on the plaintext check's verdict, if there is one, during the TLS handshake.
    pub(super) fn settle_plaintext_check(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
    pub(super) fn start_tls(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
    pub(super) fn tls_handshake(&mut self, now: Instant, out: &mut Vec<Completion>) -> bool {
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
    pub(super) fn flush_tls(&mut self, now: Instant, out: &mut Vec<Completion>) {
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
}
