//! Why a TLS connection failed, in words, and whether trying again could help.
//!
//! Permanent is only what the server's certificate or configuration decides: the same server
//! gives the same answer to every connection (an unknown issuer, a wrong name, an expired or
//! not-yet-valid certificate, versions or suites in common with none of ours, a plaintext
//! port, a refused client certificate). Everything the network path can cause is transient:
//! a record that does not decrypt, a garbled or undecodable message, an unexpected one, an
//! alert no certificate explains (a plaintext alert can be forged by anyone on the path), a
//! reset. A transient failure costs a failed attempt, retried with the connection's backoff; a
//! permanent one fails every request at once until the connection checks again (see
//! `ReconnectPolicy::recheck_permanent_after`).

use crate::error::{Error, ErrorKind};
use crate::net::Endpoint;
use rustls::{AlertDescription, CertificateError};

use super::certificate::VersionOneCertificate;
use super::record::{self, RecordError};

/// A TLS failure, and whether trying again could help.
#[derive(Debug)]
pub struct Failure {
    /// What happened, naming the endpoint.
    pub error: Error,
    /// The server's certificate or configuration decided it: reconnecting gives the same
    /// answer.
    pub permanent: bool,
    /// The server's first bytes were not TLS (shown, escaped). A plaintext port, or bytes
    /// injected on the path: the driver tells them apart with a plaintext probe on a second
    /// connection before it reports this failure (see `conn::plaintext_check`).
    pub plaintext_reply: Option<String>,
}

impl Failure {
    /// A permanent failure.
    pub fn permanent(error: Error) -> Failure {
        Failure { error, permanent: true, plaintext_reply: None }
    }

    /// A transient failure.
    pub fn transient(error: Error) -> Failure {
        Failure { error, permanent: false, plaintext_reply: None }
    }
}

/// A fault of the network path during the handshake: a [`ErrorKind::Connection`] error.
pub fn path_fault(endpoint: &Endpoint, why: impl std::fmt::Display) -> Failure {
    Failure::transient(Error::new(
        ErrorKind::Connection,
        format!(
            "the TLS handshake with {endpoint} broke: {why} (a fault on the network path, not the server's \
             configuration: the next connection tries again)"
        ),
    ))
}

/// The first bytes, shown (to the end of their first line), when they are not the start of a
/// TLS record.
pub fn plaintext_reply(first: &[u8]) -> Option<String> {
    match record::record_len(first) {
        Err(RecordError::NotTls) => {
            let line = first.windows(2).position(|w| w == b"\r\n").map_or(first.len(), |at| at + 2);
            Some(first[..line].escape_ascii().to_string())
        }
        _ => None,
    }
}

/// What first bytes that are not a TLS record were, by how [`plaintext_reply`] shows them:
/// text, or bytes of no kind (shown escaped, `\x80`): "plaintext" would send a reader after a
/// plaintext server that is not there.
fn what(shown: &str) -> &'static str {
    if shown.contains("\\x") { "not TLS" } else { "plaintext" }
}

/// [`what`], as how the server answered.
fn in_what(shown: &str) -> &'static str {
    if shown.contains("\\x") { "with bytes that are not TLS" } else { "in plaintext" }
}

/// The server's first bytes on the TLS connection were plaintext, and the port answers a
/// plaintext probe in plaintext too.
pub fn answered_in_plaintext(endpoint: &Endpoint, shown: &str) -> Failure {
    Failure {
        error: Error::tls(
            endpoint,
            format!(
                "the server answered the TLS hello {} (\"{shown}\"): this port does not speak TLS; use redis:// \
                 for it, or the server's tls-port for rediss://",
                in_what(shown)
            ),
        ),
        permanent: true,
        plaintext_reply: Some(shown.to_owned()),
    }
}

/// The server left the TLS hello unanswered, and answered a plaintext `PING` on a second
/// connection with `shown`.
pub fn silent_plaintext_server(endpoint: &Endpoint, shown: &str) -> Failure {
    Failure::permanent(Error::tls(
        endpoint,
        format!(
            "this port does not speak TLS: the server left the TLS hello unanswered and answered a plaintext PING \
             on a second connection with \"{shown}\"; use redis:// for it, or the server's tls-port for rediss://"
        ),
    ))
}

/// The server's first bytes on the TLS connection were plaintext, yet the port answers a
/// second connection in TLS: something on the path put them there.
pub fn plaintext_injected(endpoint: &Endpoint, shown: &str) -> Failure {
    path_fault(
        endpoint,
        format!(
            "its first bytes were {} (\"{shown}\"), yet a second connection to the port got TLS back: they were \
             injected on the way",
            what(shown)
        ),
    )
}

/// The server's first bytes on the TLS connection were plaintext, and the connect timeout came
/// before a second connection said whether the port speaks TLS.
pub fn plaintext_unconfirmed(endpoint: &Endpoint, shown: &str) -> Failure {
    path_fault(
        endpoint,
        format!(
            "its first bytes were {} (\"{shown}\"), and a second connection to the port did not say within the \
             connect timeout whether it speaks TLS",
            what(shown)
        ),
    )
}

/// What an alert says about this client's certificate, if it is about that.
pub fn refused_client_certificate(description: AlertDescription) -> Option<&'static str> {
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

/// A rustls handshake error, in words, permanent or not (see the module's rules).
pub fn handshake_failure(endpoint: &Endpoint, err: &rustls::Error) -> Failure {
    use rustls::Error as E;
    let permanent = |why: String| Failure::permanent(Error::tls(endpoint, why));
    match err {
        E::InvalidCertificate(cert) => match certificate_problem(cert) {
            (why, true) => permanent(why),
            (why, false) => path_fault(endpoint, why),
        },
        E::AlertReceived(description) => match refused_client_certificate(*description) {
            Some(why) => permanent(format!("the server {why}")),
            None => path_fault(
                endpoint,
                format!(
                    "the server, or something on the path, sent the alert {description:?} (an alert during the \
                     handshake is not authenticated)"
                ),
            ),
        },
        E::PeerIncompatible(why) => permanent(format!("the server's TLS is incompatible with this client's: {why:?}")),
        E::NoCertificatesPresented => permanent("the server presented no certificate".into()),
        E::UnsupportedNameType | E::InvalidCertRevocationList(_) | E::NoApplicationProtocol => {
            permanent(format!("the TLS handshake failed: {err}"))
        }
        E::InconsistentKeys(_) | E::BadMaxFragmentSize | E::InvalidEncryptedClientHello(_) => {
            permanent(format!("the TLS configuration is unusable: {err}"))
        }
        E::DecryptError => path_fault(endpoint, "a handshake record did not decrypt (corrupted or tampered with)"),
        E::InvalidMessage(why) => path_fault(endpoint, format!("a handshake message did not decode ({why:?})")),
        E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            path_fault(endpoint, format!("an unexpected handshake message ({err})"))
        }
        E::PeerMisbehaved(why) => path_fault(endpoint, format!("the server's handshake broke the protocol ({why:?})")),
        other => path_fault(endpoint, other),
    }
}

/// A certificate error in words, and whether the server's certificate decides it (true) or
/// the bytes may have been damaged on the way (a TLS 1.2 certificate travels unencrypted, and
/// a bit flipped in it fails its encoding or its signature).
pub fn certificate_problem(cert: &CertificateError) -> (String, bool) {
    let why = match cert {
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
        CertificateError::BadEncoding => {
            return ("the server's certificate did not decode (damaged on the way, or malformed)".into(), false);
        }
        CertificateError::BadSignature => {
            return (
                "the server's certificate's signature did not verify (damaged on the way, or forged)".into(),
                false,
            );
        }
        CertificateError::Other(other) => match other.0.downcast_ref::<VersionOneCertificate>() {
            Some(v1) => v1.to_string(),
            None => format!("the server's certificate was refused: {other}"),
        },
        other => format!("the server's certificate was refused: {other:?}"),
    };
    (why, true)
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
    use rustls::{InvalidMessage, OtherError, PeerIncompatible, PeerMisbehaved};
    use std::sync::Arc;

    fn endpoint() -> Endpoint {
        Endpoint::Tcp { host: "cache.example".into(), port: 6380 }
    }

    #[test]
    fn a_wrong_host_names_the_host_and_the_listed_names_as_a_user_writes_them() {
        let ip = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("127.0.0.1").unwrap(),
            presented: vec!["DnsName(\"wrong.example\")".into(), "IpAddress(10.0.0.1)".into(), "DirectoryName".into()],
        };
        assert_eq!(
            certificate_problem(&ip).0,
            "the server's certificate is not valid for 127.0.0.1 (it lists wrong.example, 10.0.0.1, DirectoryName): \
             connect by a name it lists, or set ssl_server_name"
        );
        let dns = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("cache.example").unwrap(),
            presented: vec!["DnsName(\"*.other.example\")".into()],
        };
        assert!(
            certificate_problem(&dns)
                .0
                .starts_with("the server's certificate is not valid for cache.example (it lists *.other.example)")
        );
    }

    /// What the server's certificate or configuration decides is permanent, a TLS error.
    #[test]
    fn what_the_server_decides_is_permanent() {
        let decided = [
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
            rustls::Error::InvalidCertificate(CertificateError::Expired),
            rustls::Error::InvalidCertificate(CertificateError::NotValidYet),
            rustls::Error::InvalidCertificate(CertificateError::Revoked),
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(VersionOneCertificate {
                host: "cache.example".into(),
            })))),
            rustls::Error::PeerIncompatible(PeerIncompatible::ServerDoesNotSupportTls12Or13),
            rustls::Error::PeerIncompatible(PeerIncompatible::NoCipherSuitesInCommon),
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            rustls::Error::AlertReceived(AlertDescription::UnknownCA),
            rustls::Error::AlertReceived(AlertDescription::BadCertificate),
            rustls::Error::NoCertificatesPresented,
        ];
        for err in decided {
            let failure = handshake_failure(&endpoint(), &err);
            assert!(failure.permanent, "{err:?}");
            assert_eq!(failure.error.kind(), ErrorKind::Tls, "{err:?}");
            assert!(failure.error.message().starts_with("TLS with cache.example:6380 failed: "), "{err:?}");
        }
    }

    /// What the network path can cause is transient, a connection error that says so.
    #[test]
    fn what_the_path_can_cause_is_transient() {
        let path = [
            rustls::Error::DecryptError,
            rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType),
            rustls::Error::InvalidMessage(InvalidMessage::MessageTooShort),
            rustls::Error::InappropriateMessage { expect_types: vec![], got_type: rustls::ContentType::Alert },
            rustls::Error::PeerMisbehaved(PeerMisbehaved::SelectedUnofferedCipherSuite),
            rustls::Error::AlertReceived(AlertDescription::HandshakeFailure),
            rustls::Error::AlertReceived(AlertDescription::DecodeError),
            rustls::Error::AlertReceived(AlertDescription::BadRecordMac),
            rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
            rustls::Error::InvalidCertificate(CertificateError::BadSignature),
            rustls::Error::General("anything else".into()),
        ];
        for err in path {
            let failure = handshake_failure(&endpoint(), &err);
            assert!(!failure.permanent, "{err:?}");
            assert_eq!(failure.error.kind(), ErrorKind::Connection, "{err:?}");
            assert!(
                failure.error.message().starts_with("the TLS handshake with cache.example:6380 broke: "),
                "{}",
                failure.error
            );
            assert!(failure.error.message().ends_with("the next connection tries again)"), "{}", failure.error);
        }
        let alert = handshake_failure(&endpoint(), &rustls::Error::AlertReceived(AlertDescription::HandshakeFailure));
        assert!(alert.error.message().contains("sent the alert HandshakeFailure"), "{}", alert.error);
    }

    #[test]
    fn plaintext_first_bytes_are_shown_and_tls_ones_are_not() {
        assert_eq!(plaintext_reply(b"-ERR injected\r\n").as_deref(), Some("-ERR injected\\r\\n"));
        assert_eq!(plaintext_reply(b"+PONG\r\n").as_deref(), Some("+PONG\\r\\n"));
        assert_eq!(plaintext_reply(b"-ERR x\r\n\x16\x03\x03").as_deref(), Some("-ERR x\\r\\n"), "its first line");
        assert_eq!(plaintext_reply(b"-ERR cut sh").as_deref(), Some("-ERR cut sh"));
        assert_eq!(plaintext_reply(&[22, 3, 3, 0, 90]), None);
        assert_eq!(plaintext_reply(&[21]), None);
        assert_eq!(plaintext_reply(b""), None);
        let failure = answered_in_plaintext(&endpoint(), "-DENIED\\r\\n");
        assert!(failure.permanent);
        assert_eq!(failure.plaintext_reply.as_deref(), Some("-DENIED\\r\\n"));
        let injected = plaintext_injected(&endpoint(), "-ERR x\\r\\n");
        assert!(!injected.permanent && injected.error.kind() == ErrorKind::Connection);
        let unconfirmed = plaintext_unconfirmed(&endpoint(), "-ERR x\\r\\n");
        assert!(!unconfirmed.permanent && unconfirmed.error.kind() == ErrorKind::Connection);
        assert!(
            injected.error.message().contains("its first bytes were plaintext (\"-ERR x\\r\\n\")"),
            "{}",
            injected.error
        );
        // Bytes that are no text are not called plaintext.
        let garbage = plaintext_reply(&[0x80, 0xbb, 0xf7, 0x01]).unwrap();
        assert_eq!(garbage, "\\x80\\xbb\\xf7\\x01");
        for failure in [
            plaintext_injected(&endpoint(), &garbage),
            plaintext_unconfirmed(&endpoint(), &garbage),
            answered_in_plaintext(&endpoint(), &garbage),
        ] {
            let message = failure.error.message();
            assert!(
                message.contains("not TLS (\"\\x80\\xbb\\xf7\\x01\")") && !message.contains("plaintext ("),
                "{message}"
            );
        }
    }
}
