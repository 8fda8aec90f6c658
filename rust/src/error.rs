//! The one error type of the core. Cheap to clone: a failure of one connection is reported to
//! every operation it affects, and it crosses the completion rings as a kind plus a message.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong, as a caller would branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorKind {
    /// The server could not be reached, or the connection broke. Transient: retried.
    Connection = 1,
    /// The server refused the credentials. Permanent: never retried.
    Authentication = 2,
    /// The operation did not complete before its deadline.
    Timeout = 3,
    /// The server answered with an error reply (`-ERR ...`, `-WRONGTYPE ...`).
    Server = 4,
    /// The stored value is larger than the buffer or page it was to be read into.
    ValueTooLarge = 5,
    /// The server sent bytes that are not valid RESP.
    Protocol = 6,
    /// The client or store was closed before or while the operation ran.
    Closed = 7,
    /// The caller passed something unusable (key too long, read-only buffer, ...).
    InvalidInput = 8,
    /// A page was misused: double free, a page of another store, a freed page, a page still
    /// in use by an operation.
    Page = 9,
    /// A system call failed (memory, file descriptors, threads); the error keeps its source.
    Os = 10,
    /// A GET had started receiving into its destination when its connection broke, and the
    /// retry did not deliver a value covering what was written: the destination holds part
    /// of a value and must not be read.
    PartialRead = 11,
    /// The object was created by another process: it was inherited through fork().
    Forked = 12,
    /// The I/O engine stopped working (a worker thread died, or its shared memory held
    /// impossible values); every later call fails at once.
    EngineFailed = 13,
    /// TLS failed for a reason the server's certificate or configuration decides: the
    /// certificate is not trusted (unknown CA, wrong host name, expired, X.509 version 1), the
    /// server speaks plaintext behind a `rediss://` URL, or it refused this client's
    /// certificate. Permanent: not retried (until the connection checks again, see
    /// `ReconnectPolicy::recheck_permanent_after`), and never a fallback to plaintext. What the
    /// network path does to a handshake is a [`ErrorKind::Connection`] error.
    Tls = 14,
}

impl ErrorKind {
    /// The kind with this code (`kind as u8`), as completion records and bridge frames carry
    /// it; None for an unknown code.
    pub fn from_code(code: u8) -> Option<ErrorKind> {
        use ErrorKind::*;
        [
            Connection,
            Authentication,
            Timeout,
            Server,
            ValueTooLarge,
            Protocol,
            Closed,
            InvalidInput,
            Page,
            Os,
            PartialRead,
            Forked,
            EngineFailed,
            Tls,
        ]
        .into_iter()
        .find(|kind| *kind as u8 == code)
    }

    /// Permanent errors are not retried: repeating the operation cannot help.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            ErrorKind::Authentication
                | ErrorKind::InvalidInput
                | ErrorKind::Closed
                | ErrorKind::Page
                | ErrorKind::Forked
                | ErrorKind::EngineFailed
                | ErrorKind::Tls
        )
    }
}

/// An error of the core: its kind, to branch on, and a message for the user.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The OS error behind an [`ErrorKind::Os`] error (shared: errors are cloned to every
    /// operation they affect). It does not cross the completion rings, which carry text.
    source: Option<Arc<std::io::Error>>,
}

/// Errors are equal when they say the same; the source is detail.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

/// The core's `Result`, with [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), source: None }
    }

    /// A failed system call: `what` says what was being done.
    pub fn os(what: impl fmt::Display, source: std::io::Error) -> Self {
        Error { kind: ErrorKind::Os, message: format!("{what}: {source}"), source: Some(Arc::new(source)) }
    }

    /// The OS error number, for [`ErrorKind::Os`] errors that have one.
    pub fn os_code(&self) -> Option<i32> {
        self.source.as_ref().and_then(|s| s.raw_os_error())
    }

    /// What went wrong, to branch on.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, context included (what `Display` shows).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A [`ErrorKind::Connection`] error: connecting to `endpoint` failed with `cause`.
    pub fn connect_failed(endpoint: &impl fmt::Display, cause: &std::io::Error) -> Self {
        Error::new(ErrorKind::Connection, format!("cannot connect to {endpoint}: {cause}"))
    }

    /// A [`ErrorKind::Connection`] error: the connection to `endpoint` broke.
    pub fn connection_lost(endpoint: &impl fmt::Display, cause: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Connection, format!("connection to {endpoint} lost: {cause}"))
    }

    /// A [`ErrorKind::Timeout`] error: `endpoint` did not send `waiting_for` within `after`.
    pub fn timeout(endpoint: &impl fmt::Display, after: Duration, waiting_for: &str) -> Self {
        Error::new(
            ErrorKind::Timeout,
            format!("timed out after {:.3} s waiting for {waiting_for} from {endpoint}", after.as_secs_f64()),
        )
    }

    /// An error reply. The message is the server's own text, which never contains secrets:
    /// Redis does not echo AUTH arguments.
    pub fn server(reply: &[u8]) -> Self {
        Error::new(ErrorKind::Server, String::from_utf8_lossy(reply).into_owned())
    }

    /// A [`ErrorKind::ValueTooLarge`] error: a value of `stored` bytes and a destination of
    /// `capacity` bytes.
    pub fn value_too_large(stored: u64, capacity: u64) -> Self {
        Error::new(
            ErrorKind::ValueTooLarge,
            format!("stored value of {stored} bytes does not fit the {capacity}-byte buffer"),
        )
    }

    /// A [`ErrorKind::Closed`] error: `what` (e.g. "the store") is closed.
    pub fn closed(what: &str) -> Self {
        Error::new(ErrorKind::Closed, format!("{what} is closed"))
    }

    /// A [`ErrorKind::Tls`] error: TLS with `endpoint` failed, `reason` says how (never
    /// with key material: it names certificates and files, not their contents).
    pub fn tls(endpoint: &impl fmt::Display, reason: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Tls, format!("TLS with {endpoint} failed: {reason}"))
    }

    /// A [`ErrorKind::InvalidInput`] error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// The same error with context in front of its message.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<crate::resp::ProtocolError> for Error {
    fn from(err: crate::resp::ProtocolError) -> Self {
        Error::new(ErrorKind::Protocol, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_codes() {
        for code in 0..=u8::MAX {
            if let Some(kind) = ErrorKind::from_code(code) {
                assert_eq!(kind as u8, code);
            }
        }
        assert_eq!(ErrorKind::from_code(ErrorKind::ValueTooLarge as u8), Some(ErrorKind::ValueTooLarge));
        assert_eq!(ErrorKind::from_code(0), None);
        assert_eq!(ErrorKind::from_code(ErrorKind::EngineFailed as u8), Some(ErrorKind::EngineFailed));
        assert_eq!(ErrorKind::from_code(14), Some(ErrorKind::Tls));
        assert_eq!(ErrorKind::from_code(15), None);
    }

    #[test]
    fn tls_failures_name_the_endpoint_and_are_never_retried() {
        let err = Error::tls(&"cache.example:6380", "invalid peer certificate: UnknownIssuer");
        assert_eq!(err.kind(), ErrorKind::Tls);
        assert_eq!(err.message(), "TLS with cache.example:6380 failed: invalid peer certificate: UnknownIssuer");
        assert!(ErrorKind::Tls.is_permanent());
    }

    #[test]
    fn os_errors_keep_their_source() {
        use std::error::Error as _;
        let err = Error::os("eventfd", std::io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(err.kind(), ErrorKind::Os);
        assert_eq!(err.os_code(), Some(libc::EMFILE));
        assert!(err.message().starts_with("eventfd: "), "{err}");
        let source = err.source().expect("a source");
        assert_eq!(source.to_string(), std::io::Error::from_raw_os_error(libc::EMFILE).to_string());
        assert_eq!(err.clone(), err);
    }
}
