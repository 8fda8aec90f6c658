//! One operation on one connection, and its result.

use crate::error::Error;
use crate::memory::RawBuf;
use crate::net::handshake::Step;
use crate::op::Op;
use crate::resp::Command;
use std::borrow::Cow;
use std::time::Instant;

/// Who a request is for, and so how its reply is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A data operation of a caller's batch.
    User(Op),
    /// Any other command, its reply handed back whole (cluster discovery).
    Command,
    /// One step of the connection's handshake (AUTH, SELECT, PING), sent before any other
    /// request on a new connection.
    Handshake(Step),
    /// `ASKING`, sent right before a request redirected by `-ASK` (Redis Cluster); its `+OK`
    /// is consumed and forgotten.
    Asking,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// SET stored, PING answered.
    Done,
    /// GET: this many bytes were received into the destination.
    Hit(usize),
    /// GET: no such key; the destination is untouched.
    Miss,
    /// EXISTS: the key exists; DEL: the key was deleted.
    Bool(bool),
    /// A `Kind::Command`'s reply.
    Reply(crate::resp::Reply),
    /// The operation failed: the error says why (the destination of a GET may hold part of
    /// a value).
    Failed(Error),
}

impl Outcome {
    /// Anything but [`Outcome::Failed`] (a miss is a success).
    pub fn is_success(&self) -> bool {
        !matches!(self, Outcome::Failed(_))
    }
}

/// A finished operation, named by the tag its submitter gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The [`Request::tag`] of the request that finished.
    pub tag: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// The most attempts an idempotent request gets when connections break under it.
pub const MAX_ATTEMPTS: u8 = 2;

/// One operation queued on a connection: its encoded command, its memory, and what its
/// retries and redirects have done so far.
pub struct Request {
    /// Who the request is for.
    pub kind: Kind,
    /// The submitter's name for the request, handed back in its [`Completion`].
    pub tag: u64,
    /// The encoded command up to and including the value's length line.
    pub header: Vec<u8>,
    /// SET: the value sent after the header. GET: where the payload is received.
    pub data: Option<RawBuf>,
    /// SET: what follows the value (its CRLF, and `PX ms` for an expiry).
    pub trailer: Cow<'static, [u8]>,
    /// The request fails with a timeout if it is not answered by then.
    pub deadline: Instant,
    /// How many times sending has started.
    pub attempts: u8,
    /// GET: only a value of exactly the destination's length is received; any other length
    /// is a miss and leaves the destination untouched.
    pub exact_length: bool,
    /// GET: bytes an earlier attempt wrote into the destination before its connection broke
    /// (0: none). The request may then end only in an error or a hit at least that long: never
    /// a miss, nor a shorter hit that leaves bytes of the earlier value past its end.
    pub partially_written: usize,
    /// Times the request was sent on to another node (cluster redirects, failover).
    pub reroutes: u8,
    /// Redis Cluster: the key's hash slot, to route the request again after a failure.
    pub slot: u16,
    /// Its place in a `WATCH` ... `EXEC` scope, which holds only on the connection it was
    /// opened on (see [`Scope`]).
    pub scope: Scope,
    /// Goes out only together with the request queued right behind it (`MULTI` with its
    /// `EXEC`; that one is queued with `push`, never behind an `ASKING`): the pipeline limits
    /// never send it alone, and once it has left, the other goes next whatever they say (should
    /// the socket not take it before its deadline, the connection is dropped). A server must
    /// never be left inside a `MULTI`.
    pub leaves_with_next: bool,
}

/// A request's part in a `WATCH` scope (a ranged read's check that no one wrote its key).
/// Such requests mean something only on the connection the scope was opened on: when it
/// drops they fail, sent or not, and are never retried or moved elsewhere; and until a new
/// scope opens, requests meant to run inside the lost one fail at once. No scope outlives
/// its commands: one of them that times out before it is sent while the server holds the
/// scope drops the connection, and a down server's health never refuses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// An ordinary request.
    None,
    /// Opens the scope (`WATCH`).
    Opens,
    /// Runs inside it (`STRLEN`, `MULTI`).
    Within,
    /// Closes it (`EXEC`, `UNWATCH`).
    Closes,
}

impl Request {
    /// A data operation. `data` is the value for SET and the destination for GET.
    pub fn new(op: Op, key: &[u8], data: Option<RawBuf>, tag: u64, deadline: Instant) -> Request {
        Request::expiring(op, key, data, None, tag, deadline)
    }

    /// A data operation whose SET makes the key expire after `expiry_ms` (`PX`, in the same
    /// command); the other operations ignore it.
    pub fn expiring(
        op: Op,
        key: &[u8],
        data: Option<RawBuf>,
        expiry_ms: Option<u64>,
        tag: u64,
        deadline: Instant,
    ) -> Request {
        let command = match op {
            Op::Get => Command::Get { key },
            Op::Set => Command::Set { key, value_len: data.map_or(0, |d| d.len()), expiry_ms },
            Op::Exists => Command::Exists { key },
            Op::Del => Command::Del { key },
            Op::Ping => Command::Ping,
        };
        let data = match op {
            Op::Get | Op::Set => Some(data.expect("GET and SET need a buffer")),
            _ => None,
        };
        Request { tag, data, trailer: command.trailer(), ..Request::unsent(Kind::User(op), command.header(), deadline) }
    }

    /// Any command (encoded whole in `frame`); its reply comes back as [`Outcome::Reply`].
    pub fn command(frame: Vec<u8>, tag: u64, deadline: Instant) -> Request {
        Request { tag, ..Request::unsent(Kind::Command, frame, deadline) }
    }

    /// A ranged read's piece: `GETRANGE` of `dest.len()` bytes of `key` from `start`,
    /// received into `dest`, which it must fill exactly (a shorter reply means the value
    /// changed and is a miss, leaving `dest` untouched).
    pub fn range(key: &[u8], start: usize, dest: RawBuf, tag: u64, deadline: Instant) -> Request {
        let end = start + dest.len().max(1) - 1;
        let header = Command::GetRange { key, start, end }.header();
        Request { tag, data: Some(dest), exact_length: true, ..Request::unsent(Kind::User(Op::Get), header, deadline) }
    }

    /// The same request, in `scope` (see [`Scope`]).
    pub fn in_scope(mut self, scope: Scope) -> Request {
        self.scope = scope;
        self
    }

    /// The same request, bound to leave with the one queued right behind it (see
    /// [`Request::leaves_with_next`]).
    pub fn leaving_with_next(mut self) -> Request {
        self.leaves_with_next = true;
        self
    }

    /// The `ASKING` that must precede a request redirected by `-ASK`.
    pub fn asking(deadline: Instant) -> Request {
        Request::unsent(Kind::Asking, crate::resp::Command::Asking.header(), deadline)
    }

    /// A request of `kind` with no tag or data, never sent yet.
    fn unsent(kind: Kind, header: Vec<u8>, deadline: Instant) -> Request {
        Request {
            kind,
            tag: 0,
            header,
            data: None,
            trailer: Cow::Borrowed(&[]),
            deadline,
            attempts: 0,
            exact_length: false,
            partially_written: 0,
            reroutes: 0,
            slot: 0,
            scope: Scope::None,
            leaves_with_next: false,
        }
    }

    /// The request on another connection: its sends there start from zero.
    pub fn rerouted(mut self) -> Request {
        self.attempts = 0;
        self.reroutes = self.reroutes.saturating_add(1);
        self
    }

    /// A GET that accepts only a value of exactly the destination's length.
    pub fn with_exact_length(mut self, exact: bool) -> Request {
        self.exact_length = exact;
        self
    }

    /// One handshake step (`header` is its whole encoded command).
    pub fn handshake(step: Step, header: Vec<u8>, deadline: Instant) -> Request {
        Request::unsent(Kind::Handshake(step), header, deadline)
    }

    /// Requests that a caller waits for (user data operations and commands), as opposed to
    /// the connection's own (handshake, ASKING).
    pub fn is_callers(&self) -> bool {
        matches!(self.kind, Kind::User(_) | Kind::Command)
    }

    /// The data operation, for a caller's data request.
    pub fn op(&self) -> Option<Op> {
        match self.kind {
            Kind::User(op) => Some(op),
            _ => None,
        }
    }

    /// What the request is, for messages: `GET`, `CLUSTER SHARDS`, `WATCH`, `the handshake's
    /// Auth`. Never shows a key, a value or a credential.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::User(op) => op.name().to_owned(),
            Kind::Handshake(step) => format!("the handshake's {step:?}"),
            Kind::Asking => "ASKING".to_owned(),
            Kind::Command => {
                // `*N\r\n$len\r\nNAME\r\n$len\r\nARG\r\n...`: the name, and for CLUSTER its
                // subcommand.
                let words: Vec<String> = self
                    .header
                    .split(|&b| b == b'\n')
                    .skip(2)
                    .step_by(2)
                    .take(2)
                    .map(|word| String::from_utf8_lossy(word.strip_suffix(b"\r").unwrap_or(word)).to_ascii_uppercase())
                    .collect();
                match words.as_slice() {
                    [name, sub] if name == "CLUSTER" => format!("{name} {sub}"),
                    [name, ..] => name.clone(),
                    [] => "a command".to_owned(),
                }
            }
        }
    }

    /// Bytes the request puts on the wire.
    pub fn frame_len(&self) -> usize {
        self.header.len() + self.value().map_or(0, |value| value.len() + self.trailer.len())
    }

    /// The value that follows the header (SET only).
    pub fn value(&self) -> Option<RawBuf> {
        match self.kind {
            Kind::User(Op::Set) => self.data,
            _ => None,
        }
    }

    /// Where a bulk reply's payload goes (GET only).
    pub fn destination(&self) -> Option<RawBuf> {
        match self.kind {
            Kind::User(Op::Get) => self.data,
            _ => None,
        }
    }

    /// Bytes this request keeps in flight: what it sends plus what its reply may bring.
    pub fn pipeline_cost(&self) -> usize {
        self.frame_len() + self.destination().map_or(16, |d| d.len() + 32)
    }

    /// Whether the request may be sent again after its connection broke: an idempotent data
    /// operation, with attempts left ([`MAX_ATTEMPTS`]) and its deadline not yet passed.
    pub fn may_retry(&self, now: Instant) -> bool {
        matches!(self.kind, Kind::User(op) if op.is_idempotent()) && self.attempts < MAX_ATTEMPTS && now < self.deadline
    }

    /// The completion that reports `outcome` for this request.
    pub fn completion(&self, outcome: Outcome) -> Completion {
        Completion { tag: self.tag, outcome }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_frame_counts_value_and_trailer() {
        let mut value = vec![0u8; 10];
        // SAFETY: `value` outlives the request, which is never sent.
        let buf = unsafe { RawBuf::new(value.as_mut_ptr(), value.len()) };
        let set = Request::new(Op::Set, b"k", Some(buf), 7, Instant::now());
        assert_eq!(set.frame_len(), set.header.len() + 10 + 2);
        assert_eq!(set.value(), Some(buf));
        assert_eq!(set.destination(), None);
        let get = Request::new(Op::Get, b"k", Some(buf), 7, Instant::now());
        assert_eq!(get.frame_len(), get.header.len());
        let expiring = Request::expiring(Op::Set, b"k", Some(buf), Some(1500), 7, Instant::now());
        assert_eq!(&*expiring.trailer, b"\r\n$2\r\nPX\r\n$4\r\n1500\r\n");
        assert_eq!(expiring.frame_len(), expiring.header.len() + 10 + expiring.trailer.len());
        let get_ignoring = Request::expiring(Op::Get, b"k", Some(buf), Some(1500), 7, Instant::now());
        assert_eq!((&get_ignoring.header, get_ignoring.trailer.len()), (&Command::Get { key: b"k" }.header(), 0));
        assert_eq!(get.destination(), Some(buf));
    }

    #[test]
    fn requests_describe_themselves_without_keys() {
        let far = Instant::now() + std::time::Duration::from_secs(60);
        let cluster = Request::command(Command::Cluster { subcommand: b"SHARDS" }.header(), 0, far);
        assert_eq!(cluster.describe(), "CLUSTER SHARDS");
        let watch = Request::command(Command::Watch { key: b"secret-key" }.header(), 0, far);
        assert_eq!(watch.describe(), "WATCH");
        assert_eq!(Request::new(Op::Exists, b"secret-key", None, 0, far).describe(), "EXISTS");
        assert_eq!(Request::asking(far).describe(), "ASKING");
    }

    #[test]
    fn only_idempotent_ops_are_retried_and_only_twice() {
        let far = Instant::now() + std::time::Duration::from_secs(60);
        let mut del = Request::new(Op::Del, b"k", None, 0, far);
        assert!(!del.may_retry(Instant::now()));
        del.kind = Kind::User(Op::Exists);
        assert!(del.may_retry(Instant::now()));
        del.attempts = MAX_ATTEMPTS;
        assert!(!del.may_retry(Instant::now()));
        let expired = Request::new(Op::Exists, b"k", None, 0, Instant::now());
        assert!(!expired.may_retry(Instant::now() + std::time::Duration::from_millis(1)));
    }
}
