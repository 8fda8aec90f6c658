//! One connection's TLS as a state machine that does no I/O, as `ConnCore` is: the driver
//! (`conn::tls_io`) hands it the bytes the socket received ([`TlsSession::receive_buffer`],
//! [`TlsSession::received`]) and sends what it has sealed ([`TlsSession::pending_output`],
//! [`TlsSession::output_taken`]); the tests drive it against an in-memory rustls server.
//!
//! rustls runs the handshake (through [`super::handshake`], the one file that speaks its API,
//! on this session's buffers), then hands over the traffic secrets and key schedule to
//! [`super::traffic`], which carries the data in the records of [`super::record`].
//!
//! A value goes out in one pass: each record is built by copying up to 16 KiB of the page into
//! the outgoing buffer and sealing it there. A value comes in the same way: the kernel copies
//! records into this session's incoming buffer, each is opened in place, and its plaintext is
//! copied once into the destination page. Everything between the kernel's copy and the page
//! stays within a cache-sized buffer.

use super::config::TlsConfig;
use super::failure::{self, Failure, handshake_failure, path_fault};
use super::handshake::{Handshake, Step};
use super::record::{self, KeyLimit};
use super::traffic::{Fatal, Opened, Traffic};
use crate::error::Error;
use crate::net::{Endpoint, IoVecs};
use std::io;
use std::ops::Range;
use std::sync::Arc;

/// Received records wait here to be opened: several per `recv`, small enough to stay in cache.
const INCOMING_CAPACITY: usize = 128 << 10;
/// Sealed records wait here for the socket; sealing stops once this much is waiting, and the
/// part already sent is dropped from the front once it is this long (a socket that never
/// drains completely costs at most that much memory).
const OUTGOING_LIMIT: usize = 256 << 10;
/// The server's first bytes kept, to show a plaintext reply.
const FIRST_BYTES: usize = 48;

/// Where the handshake stands after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Established: data may flow.
    Done,
    /// Waiting for the server's bytes (or for the socket to take ours).
    Pending,
}

/// What a read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// This many bytes of plaintext went to the sink.
    Data(usize),
    /// No whole record is waiting: receive more.
    NeedBytes,
    /// The server's data has ended: with its close_notify (`clean`), or the connection closed
    /// without one (whatever came before is all there is; a reply cut short shows as such).
    Closed {
        /// The server sent close_notify.
        clean: bool,
    },
}

enum State {
    Handshaking(Handshake),
    Established(Box<Traffic>),
    /// A fatal alert was sent or received; nothing more is sealed or opened.
    Failed,
    /// This client sent close_notify.
    Closed,
}

/// TLS on one connection.
pub struct TlsSession {
    endpoint: Endpoint,
    state: State,
    key_limit: KeyLimit,
    incoming: Vec<u8>,
    /// Received bytes of `incoming` not opened yet.
    unopened: Range<usize>,
    /// Plaintext of the last opened record not yet delivered (before `unopened`).
    plaintext: Range<usize>,
    outgoing: Vec<u8>,
    /// Bytes of `outgoing` the socket took.
    flushed: usize,
    /// The first bytes the server sent, to tell a plaintext reply from a TLS one.
    first_bytes: Vec<u8>,
    /// The socket reached its end (a read returned 0).
    eof: bool,
    /// The server's close_notify arrived.
    close_notify: bool,
    /// A fatal alert the server sent after the handshake refused this client's certificate
    /// (TLS 1.3 servers refuse one only then), as a failure to report.
    refusal: Option<Error>,
}

impl TlsSession {
    /// A session about to say hello to `endpoint`. Fails (permanently) only if the name to
    /// verify is not a valid server name.
    pub fn new(config: &Arc<TlsConfig>, endpoint: &Endpoint) -> Result<TlsSession, Failure> {
        let host = match endpoint {
            Endpoint::Tcp { host, .. } => host.as_str(),
            // TLS over a Unix socket (a local TLS proxy) verifies ssl_server_name, else localhost.
            Endpoint::Unix { .. } => "localhost",
        };
        let name = config.server_name(host).map_err(|err| Failure::permanent(err.context(endpoint)))?;
        let conn = Handshake::new(config.client_config(), name)
            .map_err(|err| Failure::permanent(Error::tls(endpoint, err)))?;
        Ok(TlsSession {
            endpoint: endpoint.clone(),
            state: State::Handshaking(conn),
            key_limit: config.key_limit(),
            incoming: vec![0; INCOMING_CAPACITY],
            unopened: 0..0,
            plaintext: 0..0,
            outgoing: Vec::with_capacity(OUTGOING_LIMIT + 2 * (record::MAX_PLAINTEXT + 64)),
            flushed: 0,
            first_bytes: Vec::new(),
            eof: false,
            close_notify: false,
            refusal: None,
        })
    }

    // -- bytes in and out ------------------------------------------------------------------

    /// Where the socket's next bytes go (report them with [`TlsSession::received`]); never
    /// empty while the session may still take bytes.
    pub fn receive_buffer(&mut self) -> &mut [u8] {
        if self.plaintext.is_empty() {
            if self.unopened.is_empty() {
                self.unopened = 0..0;
            }
            if self.incoming.len() - self.unopened.end < record::HEADER_LEN + record::MAX_BODY {
                let len = self.unopened.len();
                self.incoming.copy_within(self.unopened.clone(), 0);
                self.unopened = 0..len;
            }
            self.plaintext = 0..0;
        }
        let end = self.unopened.end;
        &mut self.incoming[end..]
    }

    /// The socket put `n` bytes into [`TlsSession::receive_buffer`]; 0: it reached its end.
    pub fn received(&mut self, n: usize) {
        if n == 0 {
            self.eof = true;
            return;
        }
        let end = self.unopened.end;
        let keep = (FIRST_BYTES - self.first_bytes.len().min(FIRST_BYTES)).min(n);
        self.first_bytes.extend_from_slice(&self.incoming[end..end + keep]);
        self.unopened.end += n;
    }

    /// Whether the server sent anything yet.
    pub fn heard_from_server(&self) -> bool {
        !self.first_bytes.is_empty()
    }

    /// Sealed bytes (or handshake messages) waiting for the socket.
    pub fn pending_output(&self) -> &[u8] {
        &self.outgoing[self.flushed..]
    }

    /// Whether bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.flushed < self.outgoing.len()
    }

    /// The socket took `n` bytes of [`TlsSession::pending_output`].
    pub fn output_taken(&mut self, n: usize) {
        self.flushed += n;
        debug_assert!(self.flushed <= self.outgoing.len());
        if self.flushed == self.outgoing.len() {
            self.outgoing.clear();
            self.flushed = 0;
        } else if self.flushed >= OUTGOING_LIMIT {
            // A socket that never drains completely: drop what it sent.
            self.outgoing.drain(..self.flushed);
            self.flushed = 0;
        }
    }

    // -- the handshake ---------------------------------------------------------------------

    /// Moves the handshake on as far as the bytes received allow; what it must send waits in
    /// [`TlsSession::pending_output`].
    pub fn handshake(&mut self) -> Result<Progress, Failure> {
        if !matches!(self.state, State::Handshaking(_)) {
            return Ok(Progress::Done);
        }
        if let Some(shown) = failure::plaintext_reply(&self.first_bytes) {
            self.state = State::Failed;
            return Err(failure::answered_in_plaintext(&self.endpoint, &shown));
        }
        loop {
            let State::Handshaking(conn) = &mut self.state else { unreachable!("checked above") };
            let (discard, step) = conn.step(&mut self.incoming[self.unopened.clone()], &mut self.outgoing);
            self.unopened.start += discard;
            match step {
                Ok(Step::Again) => continue,
                Ok(Step::Done) => return self.establish(),
                Ok(Step::Blocked) => return self.blocked(),
                Ok(Step::Unexpected(state)) => {
                    self.state = State::Failed;
                    return Err(path_fault(
                        &self.endpoint,
                        format!("the server sent {state} before its handshake ended"),
                    ));
                }
                Err(err) => {
                    self.queue_alert_after_failure();
                    self.state = State::Failed;
                    return Err(handshake_failure(&self.endpoint, &err));
                }
            }
        }
    }

    /// The handshake waits for the server: fine, unless the server is gone or its messages
    /// outgrew the buffer.
    fn blocked(&mut self) -> Result<Progress, Failure> {
        if self.eof {
            self.state = State::Failed;
            return Err(Failure::transient(Error::connection_lost(
                &self.endpoint,
                "the server closed the connection during the TLS handshake",
            )));
        }
        if self.unopened.len() == self.incoming.len() {
            self.state = State::Failed;
            return Err(path_fault(
                &self.endpoint,
                format!("the server's handshake messages outgrew this client's {INCOMING_CAPACITY}-byte buffer"),
            ));
        }
        Ok(Progress::Pending)
    }

    /// rustls queued an alert to tell the server why the handshake failed: send it too.
    fn queue_alert_after_failure(&mut self) {
        let State::Handshaking(conn) = &mut self.state else { return };
        conn.alert_after_failure(&mut self.incoming[self.unopened.clone()], &mut self.outgoing);
    }

    /// The handshake is complete: the traffic keys and key schedule pass from rustls to
    /// [`Traffic`].
    fn establish(&mut self) -> Result<Progress, Failure> {
        let State::Handshaking(conn) = std::mem::replace(&mut self.state, State::Failed) else {
            unreachable!("establish runs once, at the end of the handshake")
        };
        let (secrets, kernel) =
            conn.into_traffic().map_err(|err| Failure::permanent(Error::tls(&self.endpoint, err)))?;
        // rustls took every whole record it was given. One still here would hold part of a
        // handshake message rustls kept (a server that split one across the end of its
        // handshake): it cannot be taken over.
        match record::record_len(&self.incoming[self.unopened.clone()]) {
            Ok(None) => {}
            Ok(Some(len)) if len > self.unopened.len() => {}
            _ => {
                return Err(path_fault(
                    &self.endpoint,
                    "the server split a message across the end of its handshake, before this client had finished",
                ));
            }
        }
        self.state = State::Established(Box::new(Traffic::new(secrets, kernel, self.key_limit)));
        Ok(Progress::Done)
    }

    // -- data ------------------------------------------------------------------------------

    /// Seals what `iov` holds from byte `skip` on, record by record, into the outgoing buffer;
    /// returns how many bytes were sealed (they are the connection's now: the caller's memory
    /// is no longer read). Stops once 256 KiB wait for the socket.
    pub fn seal<const N: usize>(&mut self, iov: &IoVecs<'_, N>, skip: usize) -> io::Result<usize> {
        let State::Established(traffic) = &mut self.state else { return Err(not_established()) };
        let total = iov.total_len() - skip;
        let mut slices = iov.slices().filter(|s| !s.is_empty());
        let mut current: &[u8] = &[];
        let mut to_skip = skip;
        while to_skip > 0 {
            let Some(slice) = slices.next() else { break };
            let n = slice.len().min(to_skip);
            (current, to_skip) = (&slice[n..], to_skip - n);
        }
        let mut consumed = 0;
        while consumed < total && self.outgoing.len() - self.flushed < OUTGOING_LIMIT {
            let mut want = record::MAX_PLAINTEXT.min(total - consumed);
            consumed += want;
            let parts = std::iter::from_fn(|| {
                if want == 0 {
                    return None;
                }
                if current.is_empty() {
                    current = slices.next()?;
                }
                let (part, rest) = current.split_at(current.len().min(want));
                (current, want) = (rest, want - part.len());
                Some(part)
            });
            if let Err(fatal) = traffic.seal_data(parts, &mut self.outgoing) {
                return Err(self.fail(fatal));
            }
        }
        Ok(consumed)
    }

    /// TLS 1.2: the send key reached its limit (see [`KeyLimit`]); the connection must send no
    /// new request and be replaced once the replies are in.
    pub fn must_drain(&self) -> bool {
        matches!(&self.state, State::Established(traffic) if traffic.must_drain())
    }

    /// Hands up to `max` bytes of plaintext to `sink` (once), opening the records received.
    pub fn read(&mut self, max: usize, mut sink: impl FnMut(&[u8])) -> io::Result<Input> {
        loop {
            if !self.plaintext.is_empty() {
                let n = self.plaintext.len().min(max);
                let start = self.plaintext.start;
                sink(&self.incoming[start..start + n]);
                self.plaintext.start += n;
                return Ok(Input::Data(n));
            }
            if self.close_notify {
                // Anything after it is ignored (RFC 8446 6.1).
                return Ok(Input::Closed { clean: true });
            }
            if !self.open_next()? {
                return Ok(match self.eof {
                    true => Input::Closed { clean: false },
                    false => Input::NeedBytes,
                });
            }
        }
    }

    /// Whether records already received could be delivered without receiving more (poll would
    /// not report them).
    pub fn has_buffered_input(&self) -> bool {
        let State::Established(traffic) = &self.state else { return false };
        let unopened = &self.incoming[self.unopened.clone()];
        !self.plaintext.is_empty()
            || match record::established_record_len(unopened, traffic.protocol()) {
                Ok(Some(len)) => len <= unopened.len(),
                Ok(None) => false,
                Err(_) => true,
            }
    }

    /// Opens the next whole record, if one is there.
    fn open_next(&mut self) -> io::Result<bool> {
        let State::Established(traffic) = &mut self.state else { return Err(not_established()) };
        let at = self.unopened.start;
        let len = match record::established_record_len(&self.incoming[self.unopened.clone()], traffic.protocol()) {
            Ok(Some(len)) if len <= self.unopened.len() => len,
            Ok(_) => return Ok(false),
            Err(err) => return Err(self.fail(err.into())),
        };
        let opened = traffic.open(&mut self.incoming[at..at + len], &mut self.outgoing);
        self.unopened.start += len;
        match opened {
            Ok(Opened::Data(plaintext)) => self.plaintext = at + plaintext.start..at + plaintext.end,
            Ok(Opened::Nothing) => {}
            Ok(Opened::CloseNotify) => self.close_notify = true,
            Err(fatal) => return Err(self.fail(fatal)),
        }
        Ok(true)
    }

    /// The connection cannot go on: the alert that says why is queued (if this client is the
    /// one to send it), and the session takes nothing more.
    fn fail(&mut self, fatal: Fatal) -> io::Error {
        if let (Some(alert), State::Established(traffic)) = (fatal.alert, &mut self.state) {
            traffic.seal_fatal_alert(alert, &mut self.outgoing);
        }
        if let Some(why) = fatal.refused_certificate {
            self.refusal = Some(Error::tls(&self.endpoint, format!("the server {why}")));
        }
        self.state = State::Failed;
        io::Error::new(io::ErrorKind::InvalidData, fatal.why)
    }

    /// A certificate refusal the server sent after the handshake, if that is why the
    /// connection broke.
    pub fn refusal(&self) -> Option<Error> {
        self.refusal.clone()
    }

    /// Queues close_notify (RFC 8446 6.1: each side sends one before it closes, unless it sent
    /// an error alert); the session seals nothing after it.
    pub fn close(&mut self) {
        if let State::Established(traffic) = &mut self.state {
            traffic.seal_close_notify(&mut self.outgoing);
            self.state = State::Closed;
        }
    }

    /// What the established connection took in and sent after the handshake, for tests.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> super::traffic::Counts {
        match &self.state {
            State::Established(traffic) => traffic.counts(),
            _ => super::traffic::Counts::default(),
        }
    }

    /// Bytes the outgoing buffer holds (sent or not), for tests.
    #[cfg(test)]
    pub(crate) fn outgoing_len(&self) -> usize {
        self.outgoing.len()
    }

    /// Sets the send keys' limit, for tests (before the handshake completes).
    #[cfg(test)]
    pub(crate) fn set_key_limit(&mut self, limit: KeyLimit) {
        self.key_limit = limit;
    }
}

/// Appends the handshake bytes rustls has ready to `out`.
fn not_established() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "TLS is not established")
}
