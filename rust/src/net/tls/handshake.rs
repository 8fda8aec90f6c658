//! The seam to rustls's handshake: the one file that drives rustls's client state machine. Its
//! unbuffered API (0.23) runs the handshake on [`super::session`]'s own buffers, and at its end
//! [`Handshake::into_traffic`] takes the traffic secrets and key schedule over
//! (`dangerous_into_kernel_connection`), which [`super::traffic`] carries from then on.
//!
//! rustls removed the unbuffered API on its main branch (0.24.0-dev, rustls/rustls#2905) in
//! favour of the buffered `ClientConnection` sharing more of its code; moving to 0.24 rewrites
//! this file and no other (docs/architecture.md, "rustls 0.24").

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, InsufficientSizeError, UnbufferedStatus};
use rustls::{ClientConfig, ExtractedSecrets};
use std::sync::Arc;

/// rustls's client side of one connection's handshake.
pub(super) struct Handshake(Box<UnbufferedClientConnection>);

/// Where the handshake stands after a step.
pub(super) enum Step {
    /// rustls wants to be called again (it queued bytes to send, or took some).
    Again,
    /// It waits for more of the server's bytes.
    Blocked,
    /// Done: data may flow ([`Handshake::into_traffic`]).
    Done,
    /// The server sent something that has no place in a handshake (described).
    Unexpected(String),
}

impl Handshake {
    pub(super) fn new(config: Arc<ClientConfig>, name: ServerName<'static>) -> Result<Handshake, rustls::Error> {
        UnbufferedClientConnection::new(config, name).map(|conn| Handshake(Box::new(conn)))
    }

    /// One step over the server's bytes `incoming`: how many of them rustls took, and where it
    /// stands. What it must send is appended to `outgoing`.
    pub(super) fn step(&mut self, incoming: &mut [u8], outgoing: &mut Vec<u8>) -> (usize, Result<Step, rustls::Error>) {
        let UnbufferedStatus { discard, state } = self.0.process_tls_records(incoming);
        let step = match state {
            Err(err) => Err(err),
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                encode_into(&mut encode, outgoing);
                Ok(Step::Again)
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                transmit.done();
                Ok(Step::Again)
            }
            Ok(ConnectionState::BlockedHandshake) => Ok(Step::Blocked),
            Ok(ConnectionState::WriteTraffic(_)) => Ok(Step::Done),
            Ok(other) => Ok(Step::Unexpected(format!("{other:?}"))),
        };
        (discard, step)
    }

    /// After a failed step: the alert rustls queued to tell the server why, appended to
    /// `outgoing`. rustls hands a queued message out before it reads the buffer again (which
    /// must still be the one it was reading): one call, no more, or it would read the bad record
    /// a second time.
    pub(super) fn alert_after_failure(&mut self, incoming: &mut [u8], outgoing: &mut Vec<u8>) {
        if let Ok(ConnectionState::EncodeTlsData(mut encode)) = self.0.process_tls_records(incoming).state {
            encode_into(&mut encode, outgoing);
        }
    }

    /// The handshake is complete: the traffic secrets and the key schedule, for
    /// [`super::traffic::Traffic`].
    pub(super) fn into_traffic(
        self,
    ) -> Result<(ExtractedSecrets, KernelConnection<ClientConnectionData>), rustls::Error> {
        self.0.dangerous_into_kernel_connection()
    }
}

fn encode_into(encode: &mut EncodeTlsData<'_, ClientConnectionData>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut room = 4096;
    loop {
        out.resize(start + room, 0);
        match encode.encode(&mut out[start..]) {
            Ok(written) => return out.truncate(start + written),
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => room = required_size,
            Err(EncodeError::AlreadyEncoded) => return out.truncate(start),
        }
    }
}
