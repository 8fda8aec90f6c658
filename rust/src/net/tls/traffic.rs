//! An established TLS connection: its traffic keys and what the server may send besides data.
//! No I/O: a record comes in as a byte slice and is opened in place; what this client must send
//! in answer (a KeyUpdate, an alert) is sealed into the caller's outgoing buffer.
//!
//! rustls ran the handshake and hands over, through its kernel-connection API, the traffic
//! secrets and the key schedule (`KernelConnection`): with it a KeyUpdate from the server is
//! answered and its new receive key taken, our own send key is renewed before its limit, and
//! session tickets are handed to rustls. After the handshake the server may send:
//! - application data, empty records included (a record with no data counts toward
//!   [`MAX_RECORDS_WITHOUT_DATA`], so a server cannot keep a worker busy with them);
//! - TLS 1.3 NewSessionTicket and KeyUpdate messages, several in one record or one split
//!   across records (RFC 8446 5.1: never interleaved with other records, and a KeyUpdate ends
//!   its record);
//! - TLS 1.2 HelloRequest (a renegotiation request), declined by ignoring it (RFC 5246
//!   7.4.1.1);
//! - alerts: close_notify ends the data; warnings are ignored; anything else ends the
//!   connection.
//!
//! Anything else, and any record that breaks the RFC's limits or fails authentication, ends
//! the connection with the alert the RFC names for it.

use super::record::{self, KeyLimit, Opener, Protocol, RecordError, Sealer, content};
use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::{AlertDescription, ExtractedSecrets, ProtocolVersion};
use std::ops::Range;

/// Handshake message types that may follow the handshake.
mod message {
    /// TLS 1.2: the server asks to renegotiate.
    pub const HELLO_REQUEST: u8 = 0;
    /// TLS 1.3: a ticket to resume the session with.
    pub const NEW_SESSION_TICKET: u8 = 4;
    /// TLS 1.3: the sender's keys change from its next record on.
    pub const KEY_UPDATE: u8 = 24;
}

/// A KeyUpdate message (type, 3-byte length, request_update = update_not_requested).
const KEY_UPDATE_NOT_REQUESTED: [u8; 5] = [message::KEY_UPDATE, 0, 0, 1, 0];
/// Alert levels.
const WARNING: u8 = 1;
const FATAL: u8 = 2;

/// The longest post-handshake message taken: a session ticket is a few hundred bytes, and
/// rustls caps any handshake message at 64 KiB.
const MAX_MESSAGE: usize = 64 << 10;
/// Records in a row without application data (empty ones, tickets, key updates, warnings,
/// renegotiation requests) after which the server is taken for hostile.
pub const MAX_RECORDS_WITHOUT_DATA: u32 = 64;

/// What a record meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Application data: this range of the record.
    Data(Range<usize>),
    /// Nothing for the caller (a ticket, a key update, an empty record, a warning).
    Nothing,
    /// The server's close_notify: the data has ended.
    CloseNotify,
}

/// Why the connection cannot go on.
#[derive(Debug)]
pub struct Fatal {
    /// The alert to send the server; none when the server sent one.
    pub alert: Option<AlertDescription>,
    /// What happened, in words.
    pub why: String,
    /// What the server's alert says about this client's certificate, if that is why.
    pub refused_certificate: Option<&'static str>,
}

fn fatal(alert: AlertDescription, why: impl Into<String>) -> Fatal {
    Fatal { alert: Some(alert), why: why.into(), refused_certificate: None }
}

impl From<RecordError> for Fatal {
    fn from(err: RecordError) -> Fatal {
        use AlertDescription as A;
        match err {
            RecordError::NotTls => fatal(A::DecodeError, "the server sent bytes that are not a TLS record"),
            RecordError::UnexpectedType => {
                fatal(A::UnexpectedMessage, "the server sent a TLS record of a type not allowed after the handshake")
            }
            RecordError::Overflow => fatal(A::RecordOverflow, "the server sent a TLS record longer than TLS allows"),
            RecordError::BadRecord => fatal(
                A::BadRecordMac,
                "a TLS record failed authentication (corrupted, replayed, reordered or tampered with in transit)",
            ),
            RecordError::NoContentType => fatal(A::UnexpectedMessage, "a TLS 1.3 record had no content type"),
            RecordError::KeyExhausted => fatal(
                A::InternalError,
                "this connection's TLS send key sealed all it may (a single request outgrew the drain's headroom): \
                 reconnecting",
            ),
        }
    }
}

/// What the connection took in and sent after the handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Session tickets handed to rustls.
    pub tickets: u32,
    /// KeyUpdates from the server (its new receive key taken).
    pub key_updates_received: u32,
    /// KeyUpdates this client sent (its send key renewed).
    pub key_updates_sent: u32,
}

/// The established connection's keys and post-handshake state.
pub struct Traffic {
    protocol: Protocol,
    sealer: Sealer,
    opener: Opener,
    kernel: KernelConnection<ClientConnectionData>,
    limit: KeyLimit,
    /// The first part of a handshake message split across records.
    partial: Vec<u8>,
    /// Records opened in a row without application data.
    without_data: u32,
    counts: Counts,
}

impl Traffic {
    /// The traffic of a completed handshake, its send keys renewed at `limit`.
    pub fn new(secrets: ExtractedSecrets, kernel: KernelConnection<ClientConnectionData>, limit: KeyLimit) -> Traffic {
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        let protocol = record::protocol(tls13, &secrets.tx.1);
        Traffic {
            protocol,
            sealer: Sealer::new(protocol, secrets.tx.0, &secrets.tx.1, limit),
            opener: Opener::new(protocol, secrets.rx.0, &secrets.rx.1),
            kernel,
            limit,
            partial: Vec::new(),
            without_data: 0,
            counts: Counts::default(),
        }
    }

    /// The record format negotiated.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// What the connection took in and sent after the handshake.
    #[cfg(test)]
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// TLS 1.2 only: the send key reached its limit and TLS 1.2 cannot renew it, so the
    /// connection must send nothing new and be replaced once its replies are in.
    pub fn must_drain(&self) -> bool {
        self.protocol != Protocol::Tls13 && self.sealer.due_for_new_key()
    }

    /// Seals one record of application data (the concatenation of `parts`) into `out`; a TLS
    /// 1.3 send key at its limit is renewed first, with a KeyUpdate sealed ahead of the record.
    pub fn seal_data<'p>(&mut self, parts: impl IntoIterator<Item = &'p [u8]>, out: &mut Vec<u8>) -> Result<(), Fatal> {
        if self.protocol == Protocol::Tls13 && self.sealer.due_for_new_key() {
            self.renew_send_key(out)?;
        }
        Ok(self.sealer.seal(content::APPLICATION_DATA, parts, out)?)
    }

    /// Seals close_notify into `out` (best effort: a key past its limit sends nothing).
    pub fn seal_close_notify(&mut self, out: &mut Vec<u8>) {
        let _ = self.sealer.seal(content::ALERT, [&[WARNING, u8::from(AlertDescription::CloseNotify)][..]], out);
    }

    /// Seals a fatal alert into `out` (best effort).
    pub fn seal_fatal_alert(&mut self, alert: AlertDescription, out: &mut Vec<u8>) {
        let _ = self.sealer.seal(content::ALERT, [&[FATAL, u8::from(alert)][..]], out);
    }

    /// Opens the whole record `record` (as long as [`record::established_record_len`] said) in
    /// place and takes in what it says; what this client must answer goes into `out`.
    pub fn open(&mut self, record: &mut [u8], out: &mut Vec<u8>) -> Result<Opened, Fatal> {
        let opened = self.opener.open(record)?;
        let bytes = &record[opened.plaintext.clone()];
        if !self.partial.is_empty() && opened.typ != content::HANDSHAKE {
            return Err(fatal(
                AlertDescription::UnexpectedMessage,
                "a handshake message split across TLS records was interleaved with another record",
            ));
        }
        match opened.typ {
            content::APPLICATION_DATA if !bytes.is_empty() => {
                self.without_data = 0;
                return Ok(Opened::Data(opened.plaintext));
            }
            content::APPLICATION_DATA => {}
            content::ALERT => {
                if self.on_alert(bytes)? {
                    return Ok(Opened::CloseNotify);
                }
            }
            content::HANDSHAKE => self.on_handshake(bytes, out)?,
            typ => {
                return Err(fatal(AlertDescription::UnexpectedMessage, format!("a TLS record of content type {typ}")));
            }
        }
        self.without_data += 1;
        if self.without_data > MAX_RECORDS_WITHOUT_DATA {
            return Err(fatal(
                AlertDescription::UnexpectedMessage,
                format!("the server sent more than {MAX_RECORDS_WITHOUT_DATA} TLS records in a row without data"),
            ));
        }
        Ok(Opened::Nothing)
    }

    /// An alert; true for close_notify.
    fn on_alert(&mut self, bytes: &[u8]) -> Result<bool, Fatal> {
        let &[level, description] = bytes else {
            return Err(fatal(AlertDescription::DecodeError, format!("a TLS alert of {} bytes", bytes.len())));
        };
        let description = AlertDescription::from(description);
        match description {
            AlertDescription::CloseNotify => Ok(true),
            // TLS 1.3: user_canceled is followed by close_notify (RFC 8446 6.1); TLS 1.2: any
            // warning may be ignored.
            AlertDescription::UserCanceled => Ok(false),
            _ if self.protocol != Protocol::Tls13 && level == WARNING => Ok(false),
            _ => Err(Fatal {
                alert: None,
                why: format!("the server sent the TLS alert {description:?}"),
                refused_certificate: super::failure::refused_client_certificate(description),
            }),
        }
    }

    /// Handshake bytes: whole messages are taken in, a split one waits for the rest.
    fn on_handshake(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Fatal> {
        if bytes.is_empty() {
            return Err(fatal(AlertDescription::UnexpectedMessage, "an empty TLS handshake record"));
        }
        let joined;
        let mut rest = match self.partial.is_empty() {
            true => bytes,
            false => {
                self.partial.extend_from_slice(bytes);
                joined = std::mem::take(&mut self.partial);
                &joined[..]
            }
        };
        while let Some(header) = rest.get(..4) {
            let len = u32::from_be_bytes([0, header[1], header[2], header[3]]) as usize;
            if len > MAX_MESSAGE {
                return Err(fatal(
                    AlertDescription::DecodeError,
                    format!("a post-handshake message of {len} bytes (at most {MAX_MESSAGE} are taken)"),
                ));
            }
            let Some(body) = rest.get(4..4 + len) else { break };
            let typ = header[0];
            rest = &rest[4 + len..];
            self.on_message(typ, body, rest.is_empty(), out)?;
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// One whole post-handshake message; `ends_record`: nothing follows it in its record.
    fn on_message(&mut self, typ: u8, body: &[u8], ends_record: bool, out: &mut Vec<u8>) -> Result<(), Fatal> {
        match (self.protocol, typ) {
            (Protocol::Tls13, message::NEW_SESSION_TICKET) => {
                self.kernel.handle_new_session_ticket(body).map_err(|err| {
                    fatal(AlertDescription::DecodeError, format!("a TLS session ticket did not decode: {err}"))
                })?;
                self.counts.tickets += 1;
            }
            (Protocol::Tls13, message::KEY_UPDATE) => {
                let requested = match body {
                    [0] => false,
                    [1] => true,
                    [_] => return Err(fatal(AlertDescription::IllegalParameter, "a KeyUpdate asking for neither")),
                    _ => return Err(fatal(AlertDescription::DecodeError, "a KeyUpdate of the wrong length")),
                };
                // The server's keys change with its next record: nothing may follow in this one.
                if !ends_record {
                    return Err(fatal(AlertDescription::UnexpectedMessage, "a KeyUpdate not at the end of its record"));
                }
                let (seq, secrets) = self.kernel.update_rx_secret().map_err(|err| {
                    fatal(AlertDescription::InternalError, format!("the server's new traffic key: {err}"))
                })?;
                self.opener = Opener::new(self.protocol, seq, &secrets);
                self.counts.key_updates_received += 1;
                if requested {
                    self.renew_send_key(out)?;
                }
            }
            // Renegotiation is declined by ignoring the request (RFC 5246 7.4.1.1).
            (Protocol::Tls12Gcm | Protocol::Tls12Chacha, message::HELLO_REQUEST) if body.is_empty() => {}
            _ => {
                return Err(fatal(
                    AlertDescription::UnexpectedMessage,
                    format!("an unexpected TLS handshake message (type {typ}) after the handshake"),
                ));
            }
        }
        Ok(())
    }

    /// Sends a KeyUpdate with the current send key, then takes the next one (TLS 1.3).
    fn renew_send_key(&mut self, out: &mut Vec<u8>) -> Result<(), Fatal> {
        self.sealer.seal(content::HANDSHAKE, [&KEY_UPDATE_NOT_REQUESTED[..]], out)?;
        let (seq, secrets) = self
            .kernel
            .update_tx_secret()
            .map_err(|err| fatal(AlertDescription::InternalError, format!("this client's new traffic key: {err}")))?;
        self.sealer = Sealer::new(self.protocol, seq, &secrets, self.limit);
        self.counts.key_updates_sent += 1;
        Ok(())
    }
}
