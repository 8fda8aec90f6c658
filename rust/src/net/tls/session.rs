//! One connection's TLS over its non-blocking socket: rustls runs the handshake, then the
//! record layer of [`super::record`] carries the data with the keys rustls hands over.
//!
//! A value goes out in one pass: each record is built by copying up to 16 KiB of the page into
//! the outgoing buffer and sealing it there. A value comes in the same way: the kernel copies
//! records into a buffer of this session, each is opened in place, and its plaintext is copied
//! once into the destination page. Everything between the kernel's copy and the page stays
//! within a cache-sized buffer.

use super::config::TlsConfig;
use super::record::{self, Opener, Protocol, RecordError, Sealer, content};
use crate::error::Error;
use crate::memory::RawBuf;
use crate::net::{Endpoint, IoVecs, Stream};
use rustls::{AlertDescription, CertificateError, ClientConnection, ProtocolVersion};
use std::io::{self, Read, Write};
use std::ops::Range;
use std::sync::Arc;

/// Received records wait here to be opened: several per `recv`, small enough to stay in cache.
const INCOMING_CAPACITY: usize = 128 << 10;
/// Sealed records wait here for the socket; sealing stops once this much is waiting.
const OUTGOING_LIMIT: usize = 256 << 10;
/// What [`TlsSession::nudge`] sends: more than the longest inline command Redis and Valkey
/// read (64 KiB, `PROTO_INLINE_MAX_SIZE`) before they answer "too big inline request".
const NUDGE_LEN: usize = (64 << 10) + 1024;

/// Where the handshake stands after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Established: data may flow.
    Done,
    /// Waiting for the socket (see [`TlsSession::wants_write`]).
    Pending,
}

/// A TLS failure, and whether trying again could help.
#[derive(Debug)]
pub struct Failure {
    /// What happened, naming the endpoint.
    pub error: Error,
    /// A certificate, a protocol mismatch or a refusal: reconnecting gives the same answer.
    pub permanent: bool,
}

enum State {
    Handshaking(Box<ClientConnection>),
    Established(Box<Keys>),
    Failed,
}

/// The traffic keys, each direction's with its sequence number.
struct Keys {
    sealer: Sealer,
    opener: Opener,
}

/// TLS on one connection.
pub struct TlsSession {
    endpoint: Endpoint,
    state: State,
    /// The first bytes the server sent, to tell a plaintext reply from a TLS one.
    first_bytes: Vec<u8>,
    incoming: Vec<u8>,
    /// Unopened bytes of `incoming`.
    unopened: Range<usize>,
    /// Plaintext of the last opened record not yet delivered (before `unopened`).
    plaintext: Range<usize>,
    outgoing: Vec<u8>,
    /// Bytes of `outgoing` the socket took.
    flushed: usize,
    peer_closed: bool,
    /// The server was sent a bare end of line during the handshake (see [`TlsSession::nudge`]).
    nudged: bool,
    /// A fatal alert the server sent after the handshake (TLS 1.3 servers refuse a client's
    /// certificate only then), as a failure to report.
    refusal: Option<Error>,
}

/// `io::Read`/`io::Write` over the non-blocking socket, for rustls's handshake; it keeps the
/// first bytes read.
struct SocketIo<'a> {
    stream: &'a Stream,
    first_bytes: &'a mut Vec<u8>,
}

impl Read for SocketIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.recv(buf)?;
        let keep = (48 - self.first_bytes.len().min(48)).min(n);
        self.first_bytes.extend_from_slice(&buf[..keep]);
        Ok(n)
    }
}

impl Write for SocketIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut iov = IoVecs::<1>::new();
        iov.push_slice(buf);
        self.stream.send(iov.as_slice())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsSession {
    /// A session about to say hello to `endpoint`. Fails (permanently) only if the name to
    /// verify is not a valid server name.
    pub fn new(config: &Arc<TlsConfig>, endpoint: &Endpoint) -> Result<TlsSession, Failure> {
        let permanent = |error: Error| Failure { error, permanent: true };
        let host = match endpoint {
            Endpoint::Tcp { host, .. } => host.as_str(),
            // TLS over a Unix socket (a local TLS proxy) verifies ssl_server_name, else localhost.
            Endpoint::Unix { .. } => "localhost",
        };
        let name = config.server_name(host).map_err(|err| permanent(err.context(endpoint)))?;
        let conn =
            ClientConnection::new(config.client_config(), name).map_err(|err| permanent(Error::tls(endpoint, err)))?;
        Ok(TlsSession {
            endpoint: endpoint.clone(),
            state: State::Handshaking(Box::new(conn)),
            first_bytes: Vec::new(),
            incoming: vec![0; INCOMING_CAPACITY],
            unopened: 0..0,
            plaintext: 0..0,
            outgoing: Vec::with_capacity(OUTGOING_LIMIT + 2 * (record::MAX_PLAINTEXT + 64)),
            flushed: 0,
            peer_closed: false,
            nudged: false,
            refusal: None,
        })
    }

    /// Whether sealed bytes (or handshake messages) wait for the socket to take them.
    pub fn wants_write(&self) -> bool {
        let waiting = self.flushed < self.outgoing.len();
        match &self.state {
            State::Handshaking(conn) => conn.wants_write() || waiting,
            _ => waiting,
        }
    }

    /// Whether records already received could be delivered without reading the socket (poll
    /// would not report them).
    pub fn has_buffered_input(&self) -> bool {
        let unopened = &self.incoming[self.unopened.clone()];
        !self.plaintext.is_empty() || matches!(record::record_len(unopened), Ok(Some(len)) if len <= unopened.len())
    }

    /// A certificate refusal the server sent after the handshake, if that is why the
    /// connection broke.
    pub fn refusal(&self) -> Option<Error> {
        self.refusal.clone()
    }

    /// Sends filler outside TLS to a server that has not answered the hello (see
    /// `ConnCore::take_tls_nudge`). A plaintext Redis or Valkey takes the hello for the start
    /// of an inline command whose end of line it cannot see (its search stops at the hello's
    /// first NUL byte), so it waits; past 64 KiB of it, it answers "-ERR Protocol error: too
    /// big inline request" at once, which the handshake reports as a plaintext reply. After
    /// the nudge any other failure of this handshake is transient: a slow TLS server rejects
    /// the stray bytes through no fault of its own.
    pub fn nudge(&mut self, stream: &Stream) {
        if matches!(self.state, State::Handshaking(_)) && self.first_bytes.is_empty() && !self.nudged {
            self.nudged = true;
            self.outgoing.resize(self.outgoing.len() + NUDGE_LEN, b' ');
            // What the socket does not take now goes with the next handshake step.
            let _ = self.flush(stream);
        }
    }

    /// Moves the handshake on as far as the socket allows.
    pub fn handshake(&mut self, stream: &Stream) -> Result<Progress, Failure> {
        if !matches!(self.state, State::Handshaking(_)) {
            return Ok(Progress::Done);
        }
        match self.flush(stream) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Pending),
            Err(err) => return Err(transient(Error::connection_lost(&self.endpoint, err))),
        }
        let State::Handshaking(conn) = &mut self.state else { unreachable!("checked above") };
        let endpoint = &self.endpoint;
        let mut io = SocketIo { stream, first_bytes: &mut self.first_bytes };
        loop {
            while conn.wants_write() {
                match conn.write_tls(&mut io) {
                    Ok(_) => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Pending),
                    Err(err) => return Err(transient(Error::connection_lost(endpoint, err))),
                }
            }
            if !conn.is_handshaking() {
                return self.establish();
            }
            match conn.read_tls(&mut io) {
                Ok(0) => {
                    return Err(match plaintext_reply(io.first_bytes) {
                        Some(shown) => answered_in_plaintext(endpoint, &shown),
                        None => transient(Error::connection_lost(
                            endpoint,
                            "the server closed the connection during the TLS handshake",
                        )),
                    });
                }
                Ok(_) => {
                    if let Err(err) = conn.process_new_packets() {
                        // Tell the server why (rustls queued an alert), if the socket takes it.
                        let _ = conn.write_tls(&mut io);
                        let mut failure = handshake_failure(endpoint, &err, io.first_bytes);
                        if self.nudged && plaintext_reply(io.first_bytes).is_none() {
                            failure.permanent = false;
                        }
                        return Err(failure);
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Pending),
                Err(err) => return Err(transient(Error::connection_lost(endpoint, err))),
            }
        }
    }

    /// The handshake is complete: take the traffic keys over from rustls.
    fn establish(&mut self) -> Result<Progress, Failure> {
        let State::Handshaking(conn) = std::mem::replace(&mut self.state, State::Failed) else {
            unreachable!("establish runs once, at the end of the handshake")
        };
        let tls13 = conn.protocol_version() == Some(ProtocolVersion::TLSv1_3);
        let secrets = conn
            .dangerous_extract_secrets()
            .map_err(|err| Failure { error: Error::tls(&self.endpoint, err), permanent: true })?;
        let protocol: Protocol = record::protocol(tls13, &secrets.tx.1);
        self.state = State::Established(Box::new(Keys {
            sealer: Sealer::new(protocol, secrets.tx.0, &secrets.tx.1),
            opener: Opener::new(protocol, secrets.rx.0, &secrets.rx.1),
        }));
        Ok(Progress::Done)
    }

    /// Sends sealed bytes still waiting; `WouldBlock` if some still wait afterwards.
    pub fn flush(&mut self, stream: &Stream) -> io::Result<()> {
        while self.flushed < self.outgoing.len() {
            let mut iov = IoVecs::<1>::new();
            iov.push_slice(&self.outgoing[self.flushed..]);
            self.flushed += stream.send(iov.as_slice())?;
        }
        self.outgoing.clear();
        self.flushed = 0;
        Ok(())
    }

    /// Seals what `iov` holds, record by record, and sends it; returns how many of its bytes
    /// were sealed (they are the connection's now: the caller's memory is no longer read).
    /// Stops when the socket would block with enough sealed bytes waiting.
    pub fn send<const N: usize>(&mut self, stream: &Stream, iov: &IoVecs<'_, N>) -> io::Result<usize> {
        if !matches!(self.state, State::Established(_)) {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "TLS is not established"));
        }
        let total = iov.total_len();
        let mut slices = iov.slices().filter(|s| !s.is_empty());
        let mut current: &[u8] = &[];
        let mut consumed = 0;
        loop {
            while consumed < total && self.outgoing.len() - self.flushed < OUTGOING_LIMIT {
                let State::Established(keys) = &mut self.state else { unreachable!("checked above") };
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
                keys.sealer.seal(content::APPLICATION_DATA, parts, &mut self.outgoing).map_err(record_io_error)?;
            }
            match self.flush(stream) {
                Ok(()) if consumed == total => return Ok(consumed),
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock && consumed > 0 => return Ok(consumed),
                Err(err) => return Err(err),
            }
        }
    }

    /// Receives plaintext into `buf`; 0 once the server closed the connection.
    pub fn recv(&mut self, stream: &Stream, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len();
        self.deliver(stream, len, |plaintext| buf[..plaintext.len()].copy_from_slice(plaintext))
    }

    /// Receives plaintext into `dest[offset..offset + len]`; 0 once the server closed the
    /// connection.
    pub fn recv_into(&mut self, stream: &Stream, dest: RawBuf, offset: usize, len: usize) -> io::Result<usize> {
        let mut at = offset;
        self.deliver(stream, len, |plaintext| {
            dest.write_at(at, plaintext);
            at += plaintext.len();
        })
    }

    /// Hands up to `max` bytes of plaintext to `sink` (once), reading and opening records as
    /// needed.
    fn deliver(&mut self, stream: &Stream, max: usize, mut sink: impl FnMut(&[u8])) -> io::Result<usize> {
        loop {
            if !self.plaintext.is_empty() {
                let n = self.plaintext.len().min(max);
                let start = self.plaintext.start;
                sink(&self.incoming[start..start + n]);
                self.plaintext.start += n;
                return Ok(n);
            }
            if self.peer_closed {
                return Ok(0);
            }
            if self.open_next()? {
                continue;
            }
            self.make_room();
            let end = self.unopened.end;
            let n = stream.recv(&mut self.incoming[end..])?;
            if n == 0 {
                // Closed without close_notify: what arrived is all there is.
                return Ok(0);
            }
            self.unopened.end += n;
        }
    }

    /// Opens the next whole record, if one is there. Control records are handled here.
    fn open_next(&mut self) -> io::Result<bool> {
        let State::Established(keys) = &mut self.state else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "TLS is not established"));
        };
        let unopened = self.unopened.clone();
        let Some(len) = record::record_len(&self.incoming[unopened.clone()]).map_err(record_io_error)? else {
            return Ok(false);
        };
        if len > unopened.len() {
            return Ok(false);
        }
        let at = unopened.start;
        let opened = keys.opener.open(&mut self.incoming[at..at + len]).map_err(record_io_error)?;
        self.unopened.start += len;
        let plaintext = at + opened.plaintext.start..at + opened.plaintext.end;
        match opened.typ {
            content::APPLICATION_DATA => self.plaintext = plaintext,
            content::ALERT => {
                let description = self.incoming[plaintext].get(1).copied().unwrap_or(0);
                self.on_alert(AlertDescription::from(description))?;
            }
            // After the handshake: session tickets (unused: resumption is off) and TLS 1.2
            // renegotiation requests (declined by ignoring them, which RFC 5246 allows).
            content::HANDSHAKE => {
                const KEY_UPDATE: u8 = 24;
                if self.incoming[plaintext].first() == Some(&KEY_UPDATE) {
                    // Answering needs the traffic secrets, which rustls keeps: reconnect.
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the server asked for a TLS key update, which this client answers by reconnecting",
                    ));
                }
            }
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "an unexpected TLS record type")),
        }
        Ok(true)
    }

    fn on_alert(&mut self, description: AlertDescription) -> io::Result<()> {
        if description == AlertDescription::CloseNotify {
            self.peer_closed = true;
            return Ok(());
        }
        if let Some(why) = refused_client_certificate(description) {
            self.refusal = Some(Error::tls(&self.endpoint, format!("the server {why}")));
        }
        Err(io::Error::new(io::ErrorKind::ConnectionAborted, format!("the server sent the TLS alert {description:?}")))
    }

    /// Room at the end of `incoming` for at least one more whole record.
    fn make_room(&mut self) {
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
}

fn transient(error: Error) -> Failure {
    Failure { error, permanent: false }
}

fn record_io_error(err: RecordError) -> io::Error {
    let why = match err {
        RecordError::NotTls => "the server sent bytes that are not a TLS record",
        RecordError::BadRecord => "a TLS record failed authentication (corrupted or tampered with in transit)",
        RecordError::KeyExhausted => "this connection sealed as many TLS records as one key may: reconnecting",
    };
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// The first bytes, shown, when they are not the start of a TLS record.
fn plaintext_reply(first: &[u8]) -> Option<String> {
    match record::record_len(first) {
        Err(RecordError::NotTls) => Some(first.escape_ascii().to_string()),
        _ => None,
    }
}

fn answered_in_plaintext(endpoint: &Endpoint, shown: &str) -> Failure {
    Failure {
        error: Error::tls(
            endpoint,
            format!(
                "the server answered the TLS hello in plaintext (\"{shown}\"): this port does not speak TLS; \
                 use redis:// for it, or the server's tls-port for rediss://"
            ),
        ),
        permanent: true,
    }
}

/// What an alert says about this client's certificate, if it is about that.
fn refused_client_certificate(description: AlertDescription) -> Option<&'static str> {
    Some(match description {
        AlertDescription::CertificateRequired => {
            "requires a client certificate (tls-auth-clients yes): set ssl_certfile and ssl_keyfile"
        }
        AlertDescription::BadCertificate
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::CertificateUnknown
        | AlertDescription::UnknownCA => {
            "rejected this client's certificate (ssl_certfile): is it signed by a CA the server trusts?"
        }
        AlertDescription::CertificateExpired => "rejected this client's certificate: it has expired",
        AlertDescription::CertificateRevoked => "rejected this client's certificate: it was revoked",
        _ => return None,
    })
}

/// A handshake error in words: every one is permanent (the same server answers the same way).
fn handshake_failure(endpoint: &Endpoint, err: &rustls::Error, first_bytes: &[u8]) -> Failure {
    if let Some(shown) = plaintext_reply(first_bytes) {
        return answered_in_plaintext(endpoint, &shown);
    }
    let why = match err {
        rustls::Error::InvalidCertificate(cert) => certificate_problem(cert),
        rustls::Error::AlertReceived(description) => match refused_client_certificate(*description) {
            Some(why) => {
                return Failure { error: Error::tls(endpoint, format!("the server {why}")), permanent: true };
            }
            None => format!("the server refused the TLS handshake (alert {description:?})"),
        },
        rustls::Error::PeerIncompatible(why) => format!("the server's TLS is incompatible with this client's: {why:?}"),
        other => format!("the TLS handshake failed: {other}"),
    };
    Failure { error: Error::tls(endpoint, why), permanent: true }
}

fn certificate_problem(cert: &CertificateError) -> String {
    match cert {
        CertificateError::UnknownIssuer => "the server's certificate is not signed by a trusted CA (unknown issuer): \
                                            set ssl_ca_certs to the CA bundle that signed it"
            .into(),
        CertificateError::NotValidForName => "the server's certificate is not valid for this host name: connect by a \
                                              name it lists, or set ssl_server_name"
            .into(),
        CertificateError::NotValidForNameContext { expected, presented } => format!(
            "the server's certificate is not valid for {} (it lists {}): connect by a name it lists, or \
             set ssl_server_name",
            expected.to_str(),
            presented.iter().map(|name| presented_name(name)).collect::<Vec<_>>().join(", ")
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "the server's certificate has expired".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the server's certificate is not valid yet (check the clocks)".into()
        }
        other => format!("the server's certificate was refused: {other:?}"),
    }
}

/// A name the certificate lists, as webpki's Debug shows it (`DnsName("a.example")`,
/// `IpAddress(10.0.0.1)`), without the wrapper: what a user would type as a host.
fn presented_name(shown: &str) -> &str {
    for (open, close) in [("DnsName(\"", "\")"), ("IpAddress(", ")")] {
        if let Some(name) = shown.strip_prefix(open).and_then(|rest| rest.strip_suffix(close)) {
            return name;
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;

    #[test]
    fn a_wrong_host_names_the_host_and_the_listed_names_as_a_user_writes_them() {
        let ip = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("127.0.0.1").unwrap(),
            presented: vec!["DnsName(\"wrong.example\")".into(), "IpAddress(10.0.0.1)".into(), "DirectoryName".into()],
        };
        assert_eq!(
            certificate_problem(&ip),
            "the server's certificate is not valid for 127.0.0.1 (it lists wrong.example, 10.0.0.1, DirectoryName): \
             connect by a name it lists, or set ssl_server_name"
        );
        let dns = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("cache.example").unwrap(),
            presented: vec!["DnsName(\"*.other.example\")".into()],
        };
        assert!(certificate_problem(&dns).starts_with(
            "the server's certificate is not valid for cache.example (it lists \
                                                       *.other.example)"
        ));
    }
}
