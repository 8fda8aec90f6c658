//! The socket side of a connection's TLS: moves bytes between the non-blocking socket and the
//! I/O-free [`TlsSession`], which decides everything else.

use crate::error::Error;
use crate::net::tls::{Failure, Input, Progress, TlsSession};
use crate::net::{Endpoint, IoVecs, Stream};
use std::io;

/// Sends what the session has sealed; `WouldBlock` if some still waits.
pub(super) fn flush(tls: &mut TlsSession, stream: &Stream) -> io::Result<()> {
    while tls.wants_write() {
        let mut iov = IoVecs::<1>::new();
        iov.push_slice(tls.pending_output());
        let sent = stream.send(iov.as_slice())?;
        tls.output_taken(sent);
    }
    Ok(())
}

/// Moves the handshake on as far as the socket allows. What the socket does not take now goes
/// once it is writable (the connection's interest includes [`TlsSession::wants_write`]).
pub(super) fn handshake(tls: &mut TlsSession, stream: &Stream, endpoint: &Endpoint) -> Result<Progress, Failure> {
    let lost = |err: io::Error| Failure::transient(Error::connection_lost(endpoint, err));
    loop {
        let progress = tls.handshake();
        let flushed = flush(tls, stream);
        // A failed handshake's alert went out with that flush, if the socket took it.
        let progress = progress?;
        match flushed {
            Err(err) if err.kind() != io::ErrorKind::WouldBlock => return Err(lost(err)),
            _ => {}
        }
        if progress == Progress::Done {
            return Ok(Progress::Done);
        }
        match stream.recv(tls.receive_buffer()) {
            Ok(n) => tls.received(n),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Pending),
            Err(err) => return Err(lost(err)),
        }
    }
}

/// Seals all of `iov` that the session takes and sends it; returns how many of its bytes were
/// sealed (`WouldBlock` if none). Stops when the socket would block with enough waiting.
pub(super) fn send<const N: usize>(tls: &mut TlsSession, stream: &Stream, iov: &IoVecs<'_, N>) -> io::Result<usize> {
    let total = iov.total_len();
    let mut consumed = 0;
    loop {
        consumed += tls.seal(iov, consumed)?;
        match flush(tls, stream) {
            Ok(()) if consumed == total => return Ok(consumed),
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock && consumed > 0 => return Ok(consumed),
            Err(err) => return Err(err),
        }
    }
}

/// Hands up to `max` bytes of plaintext to `sink`, receiving records as needed; 0 once the
/// server's data has ended. Each turn either delivers or receives new bytes, so it ends.
pub(super) fn recv(
    tls: &mut TlsSession,
    stream: &Stream,
    max: usize,
    mut sink: impl FnMut(&[u8]),
) -> io::Result<usize> {
    loop {
        match tls.read(max, &mut sink)? {
            Input::Data(n) => return Ok(n),
            Input::Closed { .. } => return Ok(0),
            Input::NeedBytes => {
                let n = stream.recv(tls.receive_buffer())?;
                tls.received(n);
            }
        }
    }
}
