//! The connection's state machine driven without a socket: every byte it sends is captured,
//! every byte it receives is handed to it in pieces of chosen sizes, and time moves only when a
//! test moves it. Each test names the [`ConnState`] transitions it walks through.

use super::core::{
    ConnCore, ConnState, Handoff, MAX_PENDING_PUSHES, PipelineLimits, RECHECK_PERMANENT_AFTER, ReconnectPolicy,
};
use super::reader::RecvTarget;
use super::request::{Completion, Outcome, Request, Scope};
use crate::cluster::RedirectKind;
use crate::error::ErrorKind;
use crate::memory::RawBuf;
use crate::net::{ConnectOptions, Endpoint, IoVecs};
use crate::op::Op;
use crate::resp::{Command, Reply};
use crate::secret::Secret;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);

/// What every handshake ends with: HELLO (which server is this?) and PING.
const HANDSHAKE: &[u8] = b"*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n*1\r\n$4\r\nPING\r\n";
const HELLO: &[u8] = b"*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n";
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// How many of `commands` (in order) `sent` holds whole.
fn sent_commands(sent: &[u8], commands: &[&[u8]]) -> usize {
    let mut end = 0;
    commands
        .iter()
        .take_while(|command| {
            end += command.len();
            sent.len() >= end
        })
        .count()
}

/// Redis 7.0.15's reply to `HELLO 2`, as it sends it.
const REDIS_HELLO: &[u8] =
    b"*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:2\r\n\
    $2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";

/// The server's answers to [`HANDSHAKE`].
fn handshake_replies() -> Vec<u8> {
    [REDIS_HELLO, b"+PONG\r\n"].concat()
}

/// A connection core, its clock, and what it completed.
struct Rig {
    core: ConnCore,
    now: Instant,
    out: Vec<Completion>,
    next_tag: u64,
    /// Destinations of GETs, kept alive (and inspectable) for the whole test.
    pages: Vec<Box<[u8]>>,
}

impl Rig {
    fn new() -> Rig {
        Rig::with(options(None, 0), 1, PipelineLimits::default())
    }

    fn with(options: ConnectOptions, addresses: usize, limits: PipelineLimits) -> Rig {
        let core = ConnCore::new(Arc::new(options), addresses, ReconnectPolicy::default(), limits);
        Rig { core, now: Instant::now(), out: Vec::new(), next_tag: 1, pages: Vec::new() }
    }

    fn state(&self) -> ConnState {
        self.core.state()
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.core.handle_timeout(self.now, &mut self.out);
    }

    fn push(&mut self, request: Request) -> u64 {
        let tag = request.tag;
        self.core.push(request, &mut self.out);
        tag
    }

    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    fn keys_only(&mut self, op: Op, key: &[u8]) -> u64 {
        let tag = self.tag();
        self.push(Request::new(op, key, None, tag, self.now + TIMEOUT))
    }

    /// A GET into a fresh page of `len` bytes filled with 0x5a; returns its tag and the page's
    /// index in `pages`.
    fn get(&mut self, key: &[u8], len: usize, exact: bool) -> (u64, usize) {
        let mut page = vec![0x5au8; len].into_boxed_slice();
        // SAFETY: the page is boxed and kept in `self.pages` for the rig's whole life; only
        // the connection writes into it until its request completes.
        let dest = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
        self.pages.push(page);
        let tag = self.tag();
        let request = Request::new(Op::Get, key, Some(dest), tag, self.now + TIMEOUT).with_exact_length(exact);
        (self.push(request), self.pages.len() - 1)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> u64 {
        let mut page = value.to_vec().into_boxed_slice();
        // SAFETY: as in `get`; the connection only reads it.
        let data = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
        self.pages.push(page);
        let tag = self.tag();
        self.push(Request::new(Op::Set, key, Some(data), tag, self.now + TIMEOUT))
    }

    /// Connects to the address the core asks for.
    fn connect(&mut self) -> usize {
        let address = self.core.poll_connect(self.now).expect("a connect is wanted");
        assert!(matches!(self.state(), ConnState::Connecting { .. }));
        self.core.on_connected(self.now);
        assert_eq!(self.state(), ConnState::Handshaking);
        address
    }

    /// Connects and answers the handshake (HELLO and PING, without credentials).
    fn ready(&mut self) {
        self.connect();
        self.answer_handshake();
    }

    /// Connects over TLS (the TLS handshake succeeds at once) and answers the handshake.
    fn ready_over_tls(&mut self) {
        self.core.poll_connect(self.now).expect("a connect is wanted");
        self.core.on_connected(self.now);
        self.core.on_tls_established(self.now);
        self.answer_handshake();
    }

    /// Answers HELLO and PING, each once it is sent (a pipeline limit of one request lets them
    /// out one by one).
    fn answer_handshake(&mut self) {
        let commands: [&[u8]; 2] = [HELLO, PING];
        let replies: [&[u8]; 2] = [REDIS_HELLO, b"+PONG\r\n"];
        let (mut sent, mut answered) = (Vec::new(), 0);
        while self.state() == ConnState::Handshaking {
            let more = self.take_sent(usize::MAX);
            assert!(!more.is_empty() || answered < sent_commands(&sent, &commands), "the handshake stalled");
            sent.extend(more);
            while answered < sent_commands(&sent, &commands) {
                self.deliver(replies[answered], usize::MAX);
                answered += 1;
            }
        }
        assert_eq!(sent, HANDSHAKE);
        assert_eq!(self.state(), ConnState::Ready);
    }

    /// What the core sends now, up to `budget` bytes, as if the socket took that much.
    fn take_sent(&mut self, mut budget: usize) -> Vec<u8> {
        let mut wire = Vec::new();
        while budget > 0 && self.core.has_sendable() {
            let mut iov = IoVecs::<128>::new();
            self.core.transmit(&mut iov);
            if iov.is_empty() {
                break;
            }
            let offered = iov.total_len();
            let mut taken = 0;
            for entry in iov.as_slice() {
                let n = entry.iov_len.min(budget - taken);
                // SAFETY: every entry points at a request's header, value or trailer, which
                // live in the core's queue (or the rig's pages) for the duration of this call.
                let bytes = unsafe { std::slice::from_raw_parts(entry.iov_base as *const u8, n) };
                wire.extend_from_slice(bytes);
                taken += n;
                if taken == budget {
                    break;
                }
            }
            self.core.on_sent(taken, offered);
            budget -= taken;
        }
        wire
    }

    /// Hands `bytes` to the core in reads of at most `step` bytes.
    fn deliver(&mut self, mut bytes: &[u8], step: usize) {
        while !bytes.is_empty() {
            let n = match self.core.recv_target(self.now, &mut self.out) {
                None => panic!("the core takes no bytes in state {:?}", self.core.state()),
                Some(RecvTarget::Scratch(buf)) => {
                    let n = buf.len().min(step).min(bytes.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    n
                }
                Some(RecvTarget::Payload { dest, offset, len }) => {
                    let n = len.min(step).min(bytes.len());
                    dest.write_at(offset, &bytes[..n]);
                    n
                }
            };
            self.core.on_received(self.now, n, &mut self.out);
            bytes = &bytes[n..];
        }
    }

    fn outcome(&mut self, tag: u64) -> Outcome {
        let at = self.out.iter().position(|c| c.tag == tag).unwrap_or_else(|| panic!("no completion for {tag}"));
        self.out.remove(at).outcome
    }

    fn failure(&mut self, tag: u64) -> crate::error::Error {
        match self.outcome(tag) {
            Outcome::Failed(err) => err,
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

fn options(password: Option<&str>, db: u32) -> ConnectOptions {
    let mut options = ConnectOptions::new(Endpoint::Tcp { host: "10.0.0.5".into(), port: 6379 });
    options.password = password.map(Secret::new);
    options.db = db;
    options.connect_timeout = Duration::from_secs(1);
    options
}

fn bulk(value: &[u8]) -> Vec<u8> {
    let mut wire = format!("${}\r\n", value.len()).into_bytes();
    wire.extend_from_slice(value);
    wire.extend_from_slice(b"\r\n");
    wire
}

fn refused() -> io::Error {
    io::Error::from(io::ErrorKind::ConnectionRefused)
}

#[test]
fn disconnected_to_connecting_only_when_work_arrives() {
    let mut rig = Rig::new();
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert_eq!(rig.core.poll_connect(rig.now), None, "no work, no connection");
    let (interest, wake) = rig.core.interest(rig.now);
    assert_eq!((interest.read, interest.write, wake), (false, false, None));
    rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.core.interest(rig.now).1, Some(rig.now), "work wakes a disconnected connection at once");
    assert_eq!(rig.core.poll_connect(rig.now), Some(0));
    assert_eq!(rig.state(), ConnState::Connecting { address: 0, since: rig.now });
    let (interest, wake) = rig.core.interest(rig.now);
    assert!(interest.write && !interest.read, "a connect in progress waits for writability");
    assert_eq!(wake, Some(rig.now + Duration::from_secs(1)), "bounded by the connect timeout");
    assert!(rig.take_sent(usize::MAX).is_empty(), "nothing is sent before the connect finishes");
}

#[test]
fn connecting_to_handshaking_to_ready_with_user_requests_held_back() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.connect();
    assert_eq!(rig.take_sent(usize::MAX), HANDSHAKE, "only the handshake goes out first");
    rig.deliver(&handshake_replies(), 1);
    assert_eq!(rig.state(), ConnState::Ready);
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n");
    rig.deliver(b":1\r\n", 2);
    assert_eq!(rig.outcome(exists), Outcome::Bool(true));
    assert!(rig.core.is_empty());
}

#[test]
fn auth_and_select_precede_ping_and_never_show_the_password_in_errors() {
    let mut rig = Rig::with(options(Some("hunter2"), 3), 1, PipelineLimits::default());
    rig.keys_only(Op::Exists, b"k");
    rig.connect();
    let sent = rig.take_sent(usize::MAX);
    assert_eq!(
        sent,
        [b"*2\r\n$4\r\nAUTH\r\n$7\r\nhunter2\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n".as_slice(), HANDSHAKE].concat()
    );
    rig.deliver(b"+OK\r\n+OK\r\n", 3);
    assert_eq!(rig.state(), ConnState::Handshaking, "still waiting for PONG");
    rig.deliver(&handshake_replies(), 3);
    assert_eq!(rig.state(), ConnState::Ready);
}

#[test]
fn handshaking_to_failed_on_wrong_credentials_is_permanent() {
    let mut rig = Rig::with(options(Some("hunter2"), 0), 1, PipelineLimits::default());
    let first = rig.keys_only(Op::Exists, b"a");
    let second = rig.keys_only(Op::Del, b"b");
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-WRONGPASS invalid username-password pair\r\n", 5);
    assert_eq!(rig.state(), ConnState::Failed { recheck_at: Some(rig.now + RECHECK_PERMANENT_AFTER) });
    for tag in [first, second] {
        let err = rig.failure(tag);
        assert_eq!(err.kind(), ErrorKind::Authentication);
        assert!(err.message().contains("authentication failed at 10.0.0.5:6379"), "{err}");
        assert!(!err.message().contains("hunter2"), "{err}");
    }
    let later = rig.keys_only(Op::Exists, b"c");
    assert_eq!(rig.failure(later).kind(), ErrorKind::Authentication, "later requests fail at once");
    rig.advance(RECHECK_PERMANENT_AFTER - Duration::from_millis(1));
    let later = rig.keys_only(Op::Exists, b"c");
    assert_eq!(rig.failure(later).kind(), ErrorKind::Authentication, "not retried before its recheck");
    assert_eq!(rig.core.poll_connect(rig.now), None, "not retried before its recheck");
}

/// Failed -> Disconnected -> Connecting: a permanent failure stands for
/// `recheck_permanent_after`, then the next request tries a new connection (the password or
/// the certificate may have been fixed); failing again, it stands again.
#[test]
fn a_permanent_failure_is_checked_again_after_a_while_so_a_store_is_never_dead_for_good() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    let err = crate::error::Error::new(ErrorKind::Tls, "TLS with h:1 failed: the server's certificate has expired");
    rig.core.on_tls_failed(rig.now, err.clone(), true, &mut rig.out);
    rig.out.clear();
    assert_eq!(RECHECK_PERMANENT_AFTER, Duration::from_secs(30), "as docs/reliability.md says");
    // A moment before: requests still fail at once, and nothing connects.
    rig.advance(RECHECK_PERMANENT_AFTER - Duration::from_millis(1));
    let early = rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.failure(early).kind(), ErrorKind::Tls, "not checked again before its time");
    assert_eq!(rig.core.poll_connect(rig.now), None);
    rig.advance(Duration::from_millis(1));
    assert_eq!(rig.state(), ConnState::Disconnected, "checked again");
    let tag = rig.keys_only(Op::Exists, b"k");
    assert!(rig.out.is_empty(), "the request waits for a new connection");
    rig.core.poll_connect(rig.now).expect("a new connection");
    rig.core.on_connected(rig.now);
    rig.core.on_tls_failed(rig.now, err, true, &mut rig.out);
    assert_eq!(rig.failure(tag).kind(), ErrorKind::Tls, "still bad: failed again, at once");
    assert_eq!(rig.state(), ConnState::Failed { recheck_at: Some(rig.now + RECHECK_PERMANENT_AFTER) });
    // Fixed: the next check finds the server.
    rig.advance(RECHECK_PERMANENT_AFTER);
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.ready_over_tls();
    rig.take_sent(usize::MAX);
    rig.deliver(b":1\r\n", usize::MAX);
    assert_eq!(rig.outcome(tag), Outcome::Bool(true));
}

/// Failed, for good: a connection that can never work (its host name cannot be looked up)
/// is not checked again.
#[test]
fn a_connection_failed_for_good_is_never_checked_again() {
    let mut rig = Rig::new();
    let err = crate::error::Error::new(ErrorKind::Connection, "no such host");
    rig.core.fail_for_good(rig.now, err, &mut rig.out);
    assert_eq!(rig.state(), ConnState::Failed { recheck_at: None });
    rig.advance(10 * RECHECK_PERMANENT_AFTER);
    let tag = rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.failure(tag).message(), "no such host");
}

#[test]
fn handshaking_to_backoff_on_a_loading_server_then_backoff_to_connecting() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-LOADING Redis is loading the dataset in memory\r\n", 7);
    // The first failed attempt retries at once (no delay), the request still waiting.
    assert_eq!(rig.state(), ConnState::Backoff { retry_at: rig.now });
    assert!(rig.out.is_empty());
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-LOADING again\r\n", 100);
    let ConnState::Backoff { retry_at } = rig.state() else { panic!("{:?}", rig.state()) };
    assert_eq!(retry_at, rig.now + Duration::from_millis(10), "the second failure waits the base delay");
    assert_eq!(rig.core.poll_connect(rig.now), None, "not before the backoff ends");
    assert_eq!(rig.core.interest(rig.now).1, Some(retry_at));
    rig.advance(Duration::from_millis(10));
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.deliver(&handshake_replies(), 100);
    rig.take_sent(usize::MAX);
    rig.deliver(b":0\r\n", 100);
    assert_eq!(rig.outcome(exists), Outcome::Bool(false));
}

#[test]
fn connecting_walks_the_addresses_then_backs_off_and_gives_up_after_three_attempts() {
    let mut rig = Rig::with(options(None, 0), 2, PipelineLimits::default());
    let exists = rig.keys_only(Op::Exists, b"k");
    for attempt in 1..=3u32 {
        assert_eq!(rig.core.poll_connect(rig.now), Some(0));
        rig.core.on_connect_failed(rig.now, &refused(), &mut rig.out);
        assert_eq!(rig.state(), ConnState::Disconnected, "the next address is tried at once");
        assert_eq!(rig.core.poll_connect(rig.now), Some(1));
        rig.core.on_connect_failed(rig.now, &refused(), &mut rig.out);
        let ConnState::Backoff { retry_at } = rig.state() else { panic!("{:?}", rig.state()) };
        if attempt < 3 {
            assert!(rig.out.is_empty(), "attempt {attempt}: the request waits");
            rig.now = retry_at;
        }
    }
    let err = rig.failure(exists);
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert_eq!(err.message(), "cannot connect to 10.0.0.5:6379: connection refused");
    // New work starts new attempts.
    rig.keys_only(Op::Exists, b"k");
    rig.advance(Duration::from_secs(1));
    assert_eq!(rig.core.poll_connect(rig.now), Some(0));
}

#[test]
fn a_connect_that_never_finishes_times_out_into_backoff() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.core.poll_connect(rig.now), Some(0));
    rig.advance(Duration::from_millis(999));
    assert!(matches!(rig.state(), ConnState::Connecting { .. }));
    rig.advance(Duration::from_millis(1));
    assert!(matches!(rig.state(), ConnState::Backoff { .. }), "{:?}", rig.state());
    // Time runs out for the request while the connection backs off: it names why.
    rig.advance(Duration::from_secs(1));
    let err = rig.failure(exists);
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(
        err.message(),
        "timed out before EXISTS could be sent to 10.0.0.5:6379 (last connection error: cannot connect to \
         10.0.0.5:6379: connect timed out)"
    );
}

#[test]
fn a_handshake_that_never_answers_times_out_into_backoff() {
    let mut rig = Rig::new();
    rig.keys_only(Op::Exists, b"k");
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.advance(Duration::from_secs(1));
    assert!(matches!(rig.state(), ConnState::Backoff { .. }), "{:?}", rig.state());
    assert!(rig.out.is_empty(), "the request waits for the next attempt");
}

#[test]
fn ready_to_disconnected_when_the_server_closes_an_idle_connection_without_a_failure() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b":1\r\n", 10);
    rig.outcome(exists);
    rig.core.on_peer_closed(rig.now, &mut rig.out);
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert!(rig.out.is_empty());
    rig.keys_only(Op::Exists, b"k");
    rig.ready();
}

/// Issue #29: a SET with a TTL is one command whose `PX ms` follows the value; written a few
/// bytes at a time and cut mid-trailer, it is sent again whole, expiry included.
#[test]
fn a_set_with_an_expiry_goes_out_whole_in_pieces_and_again_after_a_break() {
    let mut rig = Rig::new();
    let mut page = b"hello".to_vec().into_boxed_slice();
    // SAFETY: as in `Rig::set`; the page lives to the end of the test.
    let data = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
    let tag = rig.tag();
    let set = rig.push(Request::expiring(Op::Set, b"t@k", Some(data), Some(30_000), tag, rig.now + TIMEOUT));
    rig.ready();
    let frame: &[u8] = b"*5\r\n$3\r\nSET\r\n$3\r\nt@k\r\n$5\r\nhello\r\n$2\r\nPX\r\n$5\r\n30000\r\n";
    let mut wire = Vec::new();
    for _ in 0..frame.len() {
        if wire.len() >= frame.len() - 4 {
            break;
        }
        wire.extend(rig.take_sent(3));
        rig.core.on_writable();
    }
    assert_eq!(
        wire.len(),
        frame.len() - 4,
        "sent 3 bytes at a time up to the trailer's end: {:?}",
        String::from_utf8_lossy(&wire)
    );
    rig.core.on_peer_closed(rig.now, &mut rig.out);
    assert!(rig.out.is_empty(), "a SET is retried");
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), frame, "the same SET again, its PX included");
    assert_eq!(&wire[..], &frame[..wire.len()]);
    rig.deliver(b"+OK\r\n", 64);
    assert_eq!(rig.outcome(set), Outcome::Done);
    drop(page);
}

#[test]
fn a_get_torn_by_a_broken_connection_is_retried_and_a_whole_value_is_a_hit() {
    let mut rig = Rig::new();
    let value: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    let (get, page) = rig.get(b"chunk", 64 * 1024, false);
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$3\r\nGET\r\n$5\r\nchunk\r\n");
    let wire = bulk(&value);
    rig.deliver(&wire[..20_000], 4096);
    rig.core.on_peer_closed(rig.now, &mut rig.out);
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert!(rig.out.is_empty(), "a GET is retried once");
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$3\r\nGET\r\n$5\r\nchunk\r\n", "the same GET again");
    rig.deliver(&wire, 7000);
    assert_eq!(rig.outcome(get), Outcome::Hit(value.len()));
    assert_eq!(&rig.pages[page][..value.len()], &value[..]);
    assert!(rig.pages[page][value.len()..].iter().all(|b| *b == 0x5a), "nothing written past the value");
}

#[test]
fn a_torn_get_whose_retry_finds_no_value_is_a_partial_read_never_a_miss() {
    for retry_reply in [b"$-1\r\n".to_vec(), bulk(&[1u8; 100])] {
        let mut rig = Rig::new();
        let (get, _) = rig.get(b"chunk", 32 * 1024, true);
        rig.ready();
        rig.take_sent(usize::MAX);
        let mut torn = b"$32768\r\n".to_vec();
        torn.extend(std::iter::repeat_n(7u8, 10_000));
        rig.deliver(&torn, 1 << 20);
        rig.core.on_io_error(rig.now, io::Error::from(io::ErrorKind::ConnectionReset), &mut rig.out);
        rig.ready();
        rig.take_sent(usize::MAX);
        rig.deliver(&retry_reply, 1 << 20);
        let err = rig.failure(get);
        assert_eq!(err.kind(), ErrorKind::PartialRead);
        assert!(err.message().contains("the destination holds part of the earlier value"), "{err}");
    }
}

#[test]
fn a_torn_get_whose_retry_finds_a_shorter_value_is_a_partial_read_never_a_short_hit() {
    let mut rig = Rig::new();
    let (get, page) = rig.get(b"chunk", 64 * 1024, false);
    rig.ready();
    rig.take_sent(usize::MAX);
    let wire = bulk(&[7u8; 50_000]);
    rig.deliver(&wire[..20_000], 4096);
    rig.core.on_peer_closed(rig.now, &mut rig.out);
    rig.ready();
    rig.take_sent(usize::MAX);
    // The retry finds 1000 bytes: a hit of them would leave 19,000 of the old value behind.
    rig.deliver(&bulk(&[9u8; 1000]), 4096);
    let err = rig.failure(get);
    assert_eq!(err.kind(), ErrorKind::PartialRead);
    assert!(err.message().contains("the retry found a shorter one (1000 bytes)"), "{err}");
    assert!(rig.pages[page][..1000].iter().all(|b| *b == 9), "the retry did write its value");
}

#[test]
fn a_get_torn_twice_fails_as_a_partial_read() {
    let mut rig = Rig::new();
    let (get, _) = rig.get(b"chunk", 32 * 1024, false);
    for _ in 0..2 {
        rig.ready();
        rig.take_sent(usize::MAX);
        let mut torn = b"$30000\r\n".to_vec();
        torn.extend(std::iter::repeat_n(7u8, 100));
        rig.deliver(&torn, 1 << 20);
        rig.core.on_peer_closed(rig.now, &mut rig.out);
    }
    let err = rig.failure(get);
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
    assert!(err.message().contains("connection to 10.0.0.5:6379 lost: the server closed the connection"), "{err}");
}

#[test]
fn a_del_is_never_sent_twice() {
    let mut rig = Rig::new();
    let del = rig.keys_only(Op::Del, b"k");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.core.on_io_error(rig.now, io::Error::from(io::ErrorKind::BrokenPipe), &mut rig.out);
    let err = rig.failure(del);
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(err.message().ends_with("(the DEL may or may not have been applied)"), "{err}");
}

#[test]
fn a_stalled_connection_is_dropped_at_the_oldest_deadline_and_the_rest_reconnect() {
    let mut rig = Rig::new();
    let first = rig.keys_only(Op::Exists, b"a");
    rig.now += Duration::from_millis(500);
    let second = rig.keys_only(Op::Exists, b"b");
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX).len(), 2 * b"*2\r\n$6\r\nEXISTS\r\n$1\r\na\r\n".len());
    rig.advance(Duration::from_millis(1500));
    let err = rig.failure(first);
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("EXISTS to 10.0.0.5:6379 timed out"), "{err}");
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert_eq!(rig.core.interest(rig.now).1, Some(rig.now), "the request left reconnects at once");
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$6\r\nEXISTS\r\n$1\r\nb\r\n");
    rig.deliver(b":1\r\n", 1);
    assert_eq!(rig.outcome(second), Outcome::Bool(true));
}

#[test]
fn pipelining_stops_at_the_request_and_byte_limits() {
    let limits = PipelineLimits { max_inflight_bytes: 1 << 20, max_inflight_requests: 2 };
    let mut rig = Rig::with(options(None, 0), 1, limits);
    let tags: Vec<u64> = (0..3).map(|_| rig.keys_only(Op::Exists, b"k")).collect();
    rig.ready();
    let frame = b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n".len();
    assert_eq!(rig.take_sent(usize::MAX).len(), 2 * frame, "two in flight at most");
    rig.deliver(b":1\r\n", 10);
    assert_eq!(rig.take_sent(usize::MAX).len(), frame, "an answer lets the third go");
    rig.deliver(b":0\r\n:1\r\n", 3);
    let outcomes: Vec<Outcome> = tags.iter().map(|t| rig.outcome(*t)).collect();
    assert_eq!(outcomes, [Outcome::Bool(true), Outcome::Bool(false), Outcome::Bool(true)]);

    // Bytes: one large value at a time per connection.
    let limits = PipelineLimits { max_inflight_bytes: 1000, max_inflight_requests: 256 };
    let mut rig = Rig::with(options(None, 0), 1, limits);
    rig.set(b"a", &[1u8; 900]);
    rig.set(b"b", &[2u8; 900]);
    rig.ready();
    let first = rig.take_sent(usize::MAX);
    assert!(first.ends_with(&[1u8; 900][..]) || first.ends_with(b"\r\n"), "the first SET whole");
    assert!(!first.contains(&2u8), "the second waits until the first is answered");
    rig.deliver(b"+OK\r\n", 10);
    assert!(rig.take_sent(usize::MAX).contains(&2u8));
}

#[test]
fn by_default_a_value_of_256_kib_goes_alone_on_its_connection_and_smaller_ones_pipeline() {
    // LMCache's default chunk: with three in flight at once (the old 1 MiB limit), its own
    // benchmark stored 32 x 256 KiB about 13% slower than one at a time.
    let mut rig = Rig::with(options(None, 0), 1, PipelineLimits::default());
    let chunk = vec![7u8; 256 << 10];
    let first = rig.set(b"a", &chunk);
    let second = rig.set(b"b", &chunk);
    rig.ready();
    let sent = rig.take_sent(usize::MAX);
    assert_eq!(sent.len(), b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$262144\r\n".len() + chunk.len() + 2, "one SET alone");
    rig.deliver(b"+OK\r\n", 10);
    assert_eq!(rig.outcome(first), Outcome::Done);
    assert!(rig.take_sent(usize::MAX).starts_with(b"*3\r\n$3\r\nSET\r\n$1\r\nb\r\n"), "the next after the answer");
    rig.deliver(b"+OK\r\n", 10);
    assert_eq!(rig.outcome(second), Outcome::Done);

    // 64 KiB values still go several at once.
    let mut rig = Rig::with(options(None, 0), 1, PipelineLimits::default());
    let small = vec![3u8; 64 << 10];
    for key in [b"c", b"d", b"e", b"f"] {
        rig.set(key, &small);
    }
    rig.ready();
    assert_eq!(
        rig.take_sent(usize::MAX).len(),
        4 * (b"*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$65536\r\n".len() + small.len() + 2)
    );
}

#[test]
fn partial_sends_resume_mid_frame_and_wait_for_writability() {
    let mut rig = Rig::new();
    let value: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let set = rig.set(b"key", &value);
    rig.ready();
    let mut expected = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1000\r\n".to_vec();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\n");
    let mut wire = Vec::new();
    for budget in [5, 30, 500, 467, 1, 1000] {
        wire.extend(rig.take_sent(budget));
        if wire.len() < expected.len() {
            assert!(rig.core.is_write_blocked(), "a short send waits for writability");
            assert!(rig.core.interest(rig.now).0.write);
            assert!(rig.take_sent(usize::MAX).is_empty());
            rig.core.on_writable();
        }
    }
    assert_eq!(wire, expected);
    rig.deliver(b"+OK\r\n", 1);
    assert_eq!(rig.outcome(set), Outcome::Done);
}

#[test]
fn a_value_larger_than_its_page_fails_alone_and_an_exact_get_of_another_length_misses() {
    let mut rig = Rig::new();
    let (too_large, small) = rig.get(b"a", 100, false);
    let (other_length, exact) = rig.get(b"b", 100, true);
    let (fits, page) = rig.get(b"c", 100, false);
    rig.ready();
    rig.take_sent(usize::MAX);
    let mut wire = bulk(&[1u8; 150]);
    wire.extend(bulk(&[2u8; 99]));
    wire.extend(bulk(&[3u8; 60]));
    rig.deliver(&wire, 37);
    let err = rig.failure(too_large);
    assert_eq!(err.kind(), ErrorKind::ValueTooLarge);
    assert!(rig.pages[small].iter().all(|b| *b == 0x5a), "a value too large is not received");
    assert_eq!(rig.outcome(other_length), Outcome::Miss);
    assert!(rig.pages[exact].iter().all(|b| *b == 0x5a), "an exact-length miss writes nothing");
    assert_eq!(rig.outcome(fits), Outcome::Hit(60));
    assert_eq!(&rig.pages[page][..60], &[3u8; 60]);
    assert_eq!(rig.state(), ConnState::Ready, "the connection stays usable");
}

#[test]
fn a_reply_nobody_asked_for_or_garbage_breaks_the_connection() {
    let mut rig = Rig::new();
    rig.keys_only(Op::Exists, b"k");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b":1\r\n", 10);
    rig.out.clear();
    rig.deliver(b"+surprise\r\n", 10);
    assert_eq!(rig.state(), ConnState::Disconnected);

    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b"?what\r\n", 10);
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert!(rig.out.is_empty(), "EXISTS is idempotent: retried");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b":1\r\n", 10);
    assert_eq!(rig.outcome(exists), Outcome::Bool(true));
}

/// A rig whose connection is a cluster node's: it hands redirects and retries back.
fn cluster_rig() -> Rig {
    let mut rig = Rig::new();
    rig.core = ConnCore::new(Arc::new(options(None, 0)), 1, ReconnectPolicy::default(), PipelineLimits::default())
        .handing_off();
    rig
}

#[test]
fn in_a_cluster_redirects_and_retries_are_handed_back() {
    let mut rig = cluster_rig();
    let moved = rig.keys_only(Op::Exists, b"a");
    let ask = rig.keys_only(Op::Exists, b"b");
    let again = rig.keys_only(Op::Exists, b"c");
    let plain = rig.keys_only(Op::Exists, b"d");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-MOVED 3999 10.0.0.6:7001\r\n-ASK 42 :7002\r\n-TRYAGAIN later\r\n-ERR wrong type\r\n", 9);
    let handoffs = rig.core.take_handoffs();
    assert_eq!(handoffs.len(), 3);
    match &handoffs[0] {
        (request, Handoff::Redirect(r)) => {
            assert_eq!((request.tag, r.kind, r.slot), (moved, RedirectKind::Moved, 3999));
            assert_eq!(r.node.to_string(), "10.0.0.6:7001");
        }
        (_, other) => panic!("{other:?}"),
    }
    match &handoffs[1] {
        (request, Handoff::Redirect(r)) => {
            assert_eq!((request.tag, r.kind), (ask, RedirectKind::Ask));
            assert_eq!(r.node.to_string(), "10.0.0.5:7002", "a missing host is the node asked");
        }
        (_, other) => panic!("{other:?}"),
    }
    assert!(matches!(&handoffs[2], (request, Handoff::Retry(_)) if request.tag == again));
    assert_eq!(rig.failure(plain).kind(), ErrorKind::Server, "other errors are the request's own");
    assert!(rig.core.is_empty(), "handed-back requests no longer count here");
}

#[test]
fn in_a_cluster_a_loading_or_cut_off_replica_hands_reads_back_for_another_node() {
    // A replica doing a full resync answers -LOADING; one cut off from its primary with
    // replica-serve-stale-data no, -MASTERDOWN. Either way the read goes back to the worker,
    // which sends it again to the primary (read_from="prefer_replica").
    let mut rig = cluster_rig();
    let loading = rig.keys_only(Op::Exists, b"a");
    let masterdown = rig.keys_only(Op::Exists, b"b");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-LOADING Redis is loading the dataset in memory\r\n-MASTERDOWN Link with MASTER is down\r\n", 9);
    let handoffs = rig.core.take_handoffs();
    let tags: Vec<u64> = handoffs
        .iter()
        .map(|(request, why)| match why {
            Handoff::Retry(err) => {
                assert_eq!(err.kind(), ErrorKind::Server, "{err}");
                request.tag
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(tags, [loading, masterdown]);
    assert!(rig.out.is_empty(), "{:?}", rig.out);
}

#[test]
fn an_ask_redirect_goes_out_behind_asking() {
    let mut rig = Rig::new();
    let tag = rig.tag();
    let request = Request::new(Op::Exists, b"k", None, tag, rig.now + TIMEOUT);
    rig.core.push_asking(request, &mut rig.out);
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), b"*1\r\n$6\r\nASKING\r\n*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n");
    rig.deliver(b"+OK\r\n:1\r\n", 4);
    assert_eq!(rig.outcome(tag), Outcome::Bool(true));
    assert!(rig.out.is_empty(), "ASKING's own reply completes nothing");
}

#[test]
fn abort_fails_everything_and_closing_fails_only_what_is_not_on_the_wire() {
    let mut rig = Rig::new();
    let on_wire = rig.keys_only(Op::Exists, b"a");
    rig.ready();
    rig.take_sent(usize::MAX);
    let queued = rig.keys_only(Op::Exists, b"b");
    let closed = crate::error::Error::closed("the store");
    rig.core.fail_unsent(&closed, &mut rig.out);
    assert_eq!(rig.failure(queued).kind(), ErrorKind::Closed);
    assert!(rig.out.is_empty(), "the request on the wire finishes normally");
    rig.deliver(b":1\r\n", 1);
    assert_eq!(rig.outcome(on_wire), Outcome::Bool(true));

    let (get, _) = rig.get(b"c", 100, false);
    rig.take_sent(usize::MAX);
    rig.deliver(b"$100\r\n0123456789", 100);
    let failed = crate::error::Error::new(ErrorKind::EngineFailed, "the engine stopped");
    rig.core.abort(&failed, &mut rig.out);
    assert_eq!(rig.state(), ConnState::Disconnected);
    let err = rig.failure(get);
    assert_eq!(err.kind(), ErrorKind::PartialRead, "part of the value was written: {err}");
}

#[test]
fn handshaking_to_backoff_when_the_connection_breaks_before_the_handshake_ends() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.core.on_peer_closed(rig.now, &mut rig.out);
    assert!(matches!(rig.state(), ConnState::Backoff { .. }), "a broken handshake is a failed attempt");
    assert!(rig.out.is_empty());
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b":1\r\n", 1);
    assert_eq!(rig.outcome(exists), Outcome::Bool(true));
}

#[test]
fn ready_to_disconnected_when_a_reply_outgrows_the_cap_naming_command_and_server() {
    let mut rig = Rig::new();
    let tag = rig.tag();
    let frame = crate::resp::Command::Cluster { subcommand: b"SHARDS" }.header();
    rig.push(Request::command(frame, tag, rig.now + TIMEOUT));
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n");
    // An endless array of bulk strings, as a hostile or broken peer would send it.
    let mut chunk = b"*4294967295\r\n".to_vec();
    let element = bulk(&[b'x'; 100]);
    let mut delivered = 0usize;
    while rig.state() == ConnState::Ready {
        while chunk.len() < 64 * 1024 {
            chunk.extend_from_slice(&element);
        }
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let Some(RecvTarget::Scratch(buf)) = rig.core.recv_target(rig.now, &mut rig.out) else { break };
            let n = buf.len().min(rest.len());
            buf[..n].copy_from_slice(&rest[..n]);
            rig.core.on_received(rig.now, n, &mut rig.out);
            rest = &rest[n..];
            delivered += n;
        }
        chunk.clear();
        assert!(delivered < 128 << 20, "{delivered} bytes of one reply taken");
    }
    assert_eq!(rig.state(), ConnState::Disconnected);
    let err = rig.failure(tag);
    assert_eq!(err.kind(), ErrorKind::Protocol);
    assert_eq!(
        err.message(),
        "the reply to CLUSTER SHARDS from 10.0.0.5:6379 exceeds 64 MiB, the cap on the size of one reply (the \
         connection was dropped)"
    );
    assert!(delivered >= 40 << 20, "refused after only {delivered} bytes");
}

fn named_options() -> ConnectOptions {
    let mut options = options(None, 0);
    options.endpoint = Endpoint::Tcp { host: "redis-0.example".into(), port: 7001 };
    options
}

#[test]
fn awaiting_addresses_requests_wait_without_a_connect_or_a_spin_until_they_arrive() {
    let mut rig = Rig::with(named_options(), 0, PipelineLimits::default());
    assert!(rig.core.awaits_addresses());
    let exists = rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.core.poll_connect(rig.now), None, "nowhere to connect to yet");
    let (interest, wake) = rig.core.interest(rig.now);
    assert_eq!((interest.read, interest.write), (false, false));
    assert_eq!(wake, Some(rig.now + TIMEOUT), "woken only by the deadline, not at once over and over");
    rig.advance(TIMEOUT / 2);
    assert!(rig.out.is_empty(), "still waiting");
    rig.core.set_address_count(2);
    assert!(!rig.core.awaits_addresses());
    assert_eq!(rig.core.interest(rig.now).1, Some(rig.now), "work waiting and addresses known: connect now");
    assert_eq!(rig.connect(), 0);
    rig.take_sent(usize::MAX);
    rig.deliver(&handshake_replies(), usize::MAX);
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n");
    rig.deliver(b":0\r\n", usize::MAX);
    assert_eq!(rig.outcome(exists), Outcome::Bool(false));
}

#[test]
fn a_request_awaiting_addresses_past_its_deadline_fails_naming_the_host_and_the_lookup() {
    let mut rig = Rig::with(named_options(), 0, PipelineLimits::default());
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.advance(TIMEOUT);
    let err = rig.failure(exists);
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(
        err.message(),
        "timed out before EXISTS could be sent to redis-0.example:7001: the lookup of its host name redis-0.example \
         has not finished"
    );
}

#[test]
fn failed_for_good_fails_what_waits_and_everything_later_at_once() {
    let mut rig = Rig::with(named_options(), 0, PipelineLimits::default());
    let first = rig.keys_only(Op::Exists, b"a");
    let lookup = crate::error::Error::new(ErrorKind::Connection, "cannot connect to redis-0.example:7001: no name");
    rig.core.fail_for_good(rig.now, lookup.clone(), &mut rig.out);
    assert_eq!(rig.failure(first), lookup);
    let later = rig.keys_only(Op::Del, b"b");
    assert_eq!(rig.failure(later), lookup, "later requests fail at once");
    assert!(rig.core.is_empty());
}

/// Two connections to one server sharing its health, on a board whose prober waits a minute
/// (so only what the test does changes the server's state).
fn two_sharing_health() -> (Rig, Rig, crate::health::HealthBoard, Arc<crate::health::EndpointHealth>) {
    use crate::health::{HealthBoard, ProbePolicy, ProbeVerdict};
    let board = HealthBoard::new(ProbePolicy { first: Duration::from_secs(60), max: Duration::from_secs(60) });
    let health = board.endpoint("10.0.0.5:6379", || {
        Box::new(|| ProbeVerdict::Unreachable(crate::error::Error::new(ErrorKind::Connection, "still refused")))
    });
    let make = || {
        let mut rig = Rig::new();
        let core = std::mem::replace(
            &mut rig.core,
            ConnCore::new(Arc::new(options(None, 0)), 1, ReconnectPolicy::default(), PipelineLimits::default()),
        );
        rig.core = core.with_health(health.clone());
        rig
    };
    (make(), make(), board, health)
}

#[test]
fn a_failed_connect_marks_the_server_down_and_new_work_on_every_connection_fails_at_once() {
    let (mut first, mut second, _board, health) = two_sharing_health();
    let queued = first.keys_only(Op::Exists, b"k");
    assert_eq!(first.core.poll_connect(first.now), Some(0));
    first.core.on_connect_failed(first.now, &refused(), &mut first.out);
    assert!(health.is_down(), "one failed attempt marks the server down");
    assert!(first.out.is_empty(), "a request queued before keeps its retries");
    // Work newly queued on any connection to the server fails at once, without a connect.
    let refused_here = first.keys_only(Op::Del, b"d");
    let refused_there = second.keys_only(Op::Exists, b"e");
    for (rig, tag) in [(&mut first, refused_here), (&mut second, refused_there)] {
        let err = rig.failure(tag);
        assert_eq!(err.kind(), ErrorKind::Connection);
        let text = err.message();
        assert!(text.starts_with("10.0.0.5:6379 is down since "), "{text}");
        assert!(text.contains("last error: cannot connect to 10.0.0.5:6379: connection refused"), "{text}");
    }
    assert_eq!(second.core.poll_connect(second.now), None, "a refused request opens nothing");
    assert!(second.core.is_empty());
    // The request queued before the detection ends by today's rules: after three attempts.
    for _ in 0..2 {
        let ConnState::Backoff { retry_at } = first.state() else { panic!("{:?}", first.state()) };
        first.now = retry_at;
        assert_eq!(first.core.poll_connect(first.now), Some(0));
        first.core.on_connect_failed(first.now, &refused(), &mut first.out);
    }
    assert_eq!(first.failure(queued).message(), "cannot connect to 10.0.0.5:6379: connection refused");
}

#[test]
fn a_server_reply_during_the_handshake_never_marks_it_down() {
    let (mut rig, _, _board, health) = two_sharing_health();
    rig.keys_only(Op::Exists, b"k");
    rig.connect();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-LOADING Redis is loading the dataset in memory\r\n", 7);
    assert!(matches!(rig.state(), ConnState::Backoff { .. }));
    assert!(!health.is_down(), "a loading server is there: its requests wait and retry");
}

#[test]
fn a_completed_handshake_marks_the_server_up_and_a_recovery_ends_every_backoff_at_once() {
    let (mut first, mut second, _board, health) = two_sharing_health();
    // The first connection has work queued before the server goes down.
    let exists = first.keys_only(Op::Exists, b"k");
    // The second connection backs off far into the future after several failed attempts.
    second.keys_only(Op::Exists, b"waiting");
    for _ in 0..2 {
        assert_eq!(second.core.poll_connect(second.now), Some(0));
        second.core.on_connect_failed(second.now, &refused(), &mut second.out);
        let ConnState::Backoff { retry_at } = second.state() else { panic!() };
        second.now = retry_at;
    }
    assert_eq!(second.core.poll_connect(second.now), Some(0));
    second.core.on_connect_failed(second.now, &refused(), &mut second.out);
    assert!(health.is_down());
    second.out.clear();
    // The server is back: the first connection's retry of its queued request finds it.
    first.ready();
    assert!(!health.is_down(), "a completed handshake marks the server up");
    assert_eq!(health.recoveries(), 1);
    first.take_sent(usize::MAX);
    first.deliver(b":1\r\n", 100);
    assert_eq!(first.outcome(exists), Outcome::Bool(true));
    // The second connection was backing off; new work there connects now, not at its retry time.
    let ConnState::Backoff { retry_at } = second.state() else { panic!("{:?}", second.state()) };
    assert!(retry_at > second.now);
    second.keys_only(Op::Exists, b"k2");
    assert_eq!(second.core.poll_connect(second.now), Some(0), "the recovery ended the backoff");
}

#[test]
fn in_a_cluster_a_request_for_a_down_node_goes_back_once_for_a_fresh_map_then_fails() {
    let (mut rig, _, _board, health) = two_sharing_health();
    rig.core = std::mem::replace(
        &mut rig.core,
        ConnCore::new(Arc::new(options(None, 0)), 1, ReconnectPolicy::default(), PipelineLimits::default()),
    )
    .handing_off();
    health.mark_down(rig.now, &crate::error::Error::new(ErrorKind::Connection, "refused"));
    rig.keys_only(Op::Exists, b"k");
    let handoffs = rig.core.take_handoffs();
    assert_eq!(handoffs.len(), 1, "handed back for another route");
    assert!(matches!(&handoffs[0].1, Handoff::Retry(err) if err.message().contains("is down since")));
    let (request, _) = handoffs.into_iter().next().unwrap();
    let tag = request.tag;
    rig.core.push(request.rerouted(), &mut rig.out);
    assert!(rig.core.take_handoffs().is_empty());
    assert!(rig.failure(tag).message().contains("10.0.0.5:6379 is down since"));
}

// -- WATCH scopes: no WATCH and no MULTI outlives its commands -------------------------------

/// What a ranged read queues on its home connection: a command of its `WATCH` scope, due
/// `due` from now.
fn scoped(rig: &mut Rig, command: Command<'_>, scope: Scope, due: Duration) -> u64 {
    let tag = rig.tag();
    rig.push(Request::command(command.header(), tag, rig.now + due).in_scope(scope))
}

/// The check at the end of a ranged read: `MULTI`, bound to leave with its `EXEC`.
fn multi_exec(rig: &mut Rig, due: Duration) -> (u64, u64) {
    let multi = rig.tag();
    let request = Request::command(Command::Multi.header(), multi, rig.now + due).in_scope(Scope::Within);
    rig.push(request.leaving_with_next());
    (multi, scoped(rig, Command::Exec, Scope::Closes, due))
}

/// A `WATCH` sent and answered: the server holds the scope.
fn watching(rig: &mut Rig, due: Duration) {
    let watch = scoped(rig, Command::Watch { key: b"big" }, Scope::Opens, due);
    if rig.state() != ConnState::Ready {
        rig.ready();
    }
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$5\r\nWATCH\r\n$3\r\nbig\r\n");
    rig.deliver(b"+OK\r\n", 100);
    assert_eq!(rig.outcome(watch), Outcome::Reply(Reply::Simple(b"OK".to_vec())));
}

/// A GET that holds its connection's front past the ranged read's deadline.
fn later_get(rig: &mut Rig, len: usize, due: Duration) -> u64 {
    let mut page = vec![0u8; len].into_boxed_slice();
    // SAFETY: as in `Rig::get`: the page lives in the rig for the whole test.
    let dest = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
    rig.pages.push(page);
    let tag = rig.tag();
    rig.push(Request::new(Op::Get, b"other", Some(dest), tag, rig.now + due))
}

/// A ranged read's deadline, before the GET's behind which its commands wait.
const READ_DUE: Duration = Duration::from_secs(1);

/// What [`later_get`] sends.
const OTHER_GET: &[u8] = b"*2\r\n$3\r\nGET\r\n$5\r\nother\r\n";

const MULTI_EXEC: &[u8] = b"*1\r\n$5\r\nMULTI\r\n*1\r\n$4\r\nEXEC\r\n";

#[test]
fn a_multi_never_leaves_without_its_exec_at_the_pipeline_limits() {
    let far = Instant::now() + Duration::from_secs(60);
    let mut page = [0u8; 100];
    // SAFETY: the request is only measured, never sent; `page` outlives it.
    let dest = unsafe { RawBuf::new(page.as_mut_ptr(), page.len()) };
    let get_cost = Request::new(Op::Get, b"other", Some(dest), 0, far).pipeline_cost();
    let multi_cost = Request::command(Command::Multi.header(), 0, far).pipeline_cost();
    // Room for the GET and a MULTI, not for its EXEC too; then room for two requests only.
    for limits in [
        PipelineLimits { max_inflight_bytes: get_cost + multi_cost + 10, max_inflight_requests: 256 },
        PipelineLimits { max_inflight_bytes: 1 << 20, max_inflight_requests: 2 },
    ] {
        let mut rig = Rig::with(options(None, 0), 1, limits);
        watching(&mut rig, TIMEOUT);
        let get = later_get(&mut rig, 100, TIMEOUT);
        assert_eq!(rig.take_sent(usize::MAX), OTHER_GET);
        let (multi, exec) = multi_exec(&mut rig, TIMEOUT);
        assert!(rig.take_sent(usize::MAX).is_empty(), "{limits:?}: the MULTI waits for room for its EXEC too");
        rig.deliver(&bulk(&[7u8; 100]), 100);
        assert_eq!(rig.outcome(get), Outcome::Hit(100));
        assert_eq!(rig.take_sent(usize::MAX), MULTI_EXEC, "{limits:?}: together");
        rig.deliver(b"+OK\r\n*0\r\n", 100);
        assert_eq!(rig.outcome(multi), Outcome::Reply(Reply::Simple(b"OK".to_vec())));
        assert_eq!(rig.outcome(exec), Outcome::Reply(Reply::Array(Vec::new())));
    }
}

#[test]
fn an_exec_whose_multi_left_goes_out_next_whatever_the_limits() {
    // One request in flight at most, and the socket took the MULTI and not a byte of its EXEC.
    let limits = PipelineLimits { max_inflight_bytes: 1 << 20, max_inflight_requests: 1 };
    let mut rig = Rig::with(options(None, 0), 1, limits);
    let (multi, exec) = multi_exec(&mut rig, TIMEOUT);
    rig.ready();
    let multi_len = b"*1\r\n$5\r\nMULTI\r\n".len();
    assert_eq!(rig.take_sent(multi_len), b"*1\r\n$5\r\nMULTI\r\n");
    let get = later_get(&mut rig, 100, TIMEOUT);
    // The limit lets the EXEC go all the same, and holds the GET queued behind it.
    rig.core.on_writable();
    assert_eq!(rig.take_sent(usize::MAX), b"*1\r\n$4\r\nEXEC\r\n");
    rig.deliver(b"+OK\r\n*0\r\n", 100);
    assert_eq!(rig.outcome(exec), Outcome::Reply(Reply::Array(Vec::new())));
    rig.outcome(multi);
    assert_eq!(rig.take_sent(usize::MAX), OTHER_GET);
    rig.deliver(b"$-1\r\n", 100);
    assert_eq!(rig.outcome(get), Outcome::Miss);
}

/// Ready -> Disconnected: the connection is dropped, and `get` (on the wire, idempotent) goes
/// out again on a fresh one.
fn dropped_and_get_retried(rig: &mut Rig, get: u64) {
    assert_eq!(rig.state(), ConnState::Disconnected, "the connection is dropped");
    assert!(rig.out.iter().all(|c| c.tag != get), "the GET on the wire is retried");
    rig.ready();
    assert_eq!(rig.take_sent(usize::MAX), OTHER_GET, "nothing of the old scope");
    rig.deliver(&bulk(&[1u8; 10]), 100);
    assert_eq!(rig.outcome(get), Outcome::Hit(10));
}

#[test]
fn an_exec_that_expires_unsent_while_its_watch_holds_drops_the_connection() {
    // The original failure: the pipeline limit keeps the EXEC back behind a GET that answers
    // late, and the ranged read's deadline comes first.
    let limits = PipelineLimits { max_inflight_bytes: 1 << 20, max_inflight_requests: 2 };
    let mut rig = Rig::with(options(None, 0), 1, limits);
    watching(&mut rig, READ_DUE);
    let get = later_get(&mut rig, 100, TIMEOUT);
    rig.take_sent(usize::MAX);
    let (multi, exec) = multi_exec(&mut rig, READ_DUE);
    rig.take_sent(usize::MAX);
    rig.advance(Duration::from_secs(1));
    for tag in [multi, exec] {
        let err = rig.failure(tag);
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
        assert!(err.message().starts_with("timed out before "), "{err}");
    }
    dropped_and_get_retried(&mut rig, get);
}

#[test]
fn an_exec_that_expires_unsent_after_its_multi_left_drops_the_connection() {
    let mut rig = Rig::new();
    let get = later_get(&mut rig, 100, TIMEOUT);
    let (multi, exec) = multi_exec(&mut rig, READ_DUE);
    rig.ready();
    let get_len = OTHER_GET.len();
    rig.take_sent(get_len + b"*1\r\n$5\r\nMULTI\r\n".len());
    rig.advance(Duration::from_secs(1));
    assert_eq!(rig.failure(exec).kind(), ErrorKind::Timeout);
    let err = rig.failure(multi);
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().contains("dropped because a command of a WATCH or MULTI it held timed out"), "{err}");
    dropped_and_get_retried(&mut rig, get);
}

#[test]
fn an_unwatch_that_expires_unsent_drops_the_connection() {
    let mut rig = Rig::new();
    watching(&mut rig, READ_DUE);
    let get = later_get(&mut rig, 100, TIMEOUT);
    let unwatch = scoped(&mut rig, Command::Unwatch, Scope::Closes, READ_DUE);
    // The socket takes the GET, then blocks.
    rig.take_sent(OTHER_GET.len());
    assert!(rig.core.is_write_blocked());
    rig.advance(Duration::from_secs(1));
    assert_eq!(rig.failure(unwatch).kind(), ErrorKind::Timeout);
    dropped_and_get_retried(&mut rig, get);
}

#[test]
fn a_watch_that_expires_unsent_takes_its_scope_with_it_and_keeps_the_connection() {
    let mut rig = Rig::new();
    let get = later_get(&mut rig, 100, TIMEOUT);
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.core.on_send_blocked();
    let watch = scoped(&mut rig, Command::Watch { key: b"big" }, Scope::Opens, READ_DUE);
    // A command of the scope due later than its WATCH: without the WATCH it must not run.
    let strlen = scoped(&mut rig, Command::Strlen { key: b"big" }, Scope::Within, TIMEOUT);
    rig.advance(Duration::from_secs(1));
    assert_eq!(rig.failure(watch).kind(), ErrorKind::Timeout);
    let err = rig.failure(strlen);
    assert!(err.message().contains("the WATCH it belongs with timed out before it was sent"), "{err}");
    assert_eq!(rig.state(), ConnState::Ready, "the server holds no scope: the connection stays");
    // Commands of the lost scope queued later fail at once; a new WATCH opens a new one.
    let unwatch = scoped(&mut rig, Command::Unwatch, Scope::Closes, TIMEOUT);
    assert!(rig.failure(unwatch).message().contains("the WATCH this command belongs with was lost"));
    scoped(&mut rig, Command::Watch { key: b"big" }, Scope::Opens, TIMEOUT);
    rig.core.on_writable();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$5\r\nWATCH\r\n$3\r\nbig\r\n");
    rig.deliver(&bulk(&[1u8; 10]), 100);
    assert_eq!(rig.outcome(get), Outcome::Hit(10));
}

#[test]
fn a_down_server_never_refuses_the_command_that_ends_a_watch() {
    let (mut rig, _, _board, health) = two_sharing_health();
    watching(&mut rig, TIMEOUT);
    health.mark_down(rig.now, &crate::error::Error::new(ErrorKind::Connection, "refused"));
    let (multi, exec) = multi_exec(&mut rig, TIMEOUT);
    assert!(rig.out.is_empty(), "queued, not refused: the WATCH they end is on this connection");
    assert_eq!(rig.take_sent(usize::MAX), MULTI_EXEC);
    rig.deliver(b"+OK\r\n*0\r\n", 100);
    rig.outcome(multi);
    assert_eq!(rig.outcome(exec), Outcome::Reply(Reply::Array(Vec::new())));
    // A new WATCH is refused, and the rest of its scope with it.
    let watch = scoped(&mut rig, Command::Watch { key: b"big" }, Scope::Opens, TIMEOUT);
    assert!(rig.failure(watch).message().contains("is down since"));
    let strlen = scoped(&mut rig, Command::Strlen { key: b"big" }, Scope::Within, TIMEOUT);
    assert!(rig.failure(strlen).message().contains("the WATCH this command belongs with was lost"));
    let unwatch = scoped(&mut rig, Command::Unwatch, Scope::Closes, TIMEOUT);
    rig.failure(unwatch);
    assert!(rig.take_sent(usize::MAX).is_empty());
}

// -- TLS: the handshake is a state of its own ------------------------------------------------

fn tls_options() -> ConnectOptions {
    let mut tls = crate::net::TlsOptions::new();
    // No files needed: these tests never see a certificate.
    tls.verify_certificate = false;
    let mut options = options(None, 0);
    options.tls = Some(Arc::new(crate::net::TlsConfig::new(tls).unwrap()));
    options
}

/// Connecting -> TlsHandshaking -> Handshaking -> Ready: nothing is sent or read until TLS is up.
#[test]
fn tls_handshake_comes_between_connect_and_ping() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    assert_eq!(rig.state(), ConnState::TlsHandshaking { since: rig.now });
    assert!(!rig.core.has_sendable() || rig.take_sent(usize::MAX).is_empty());
    assert!(rig.core.recv_target(rig.now, &mut rig.out).is_none());
    let (interest, wake) = rig.core.interest(rig.now);
    assert!(interest.read, "the driver reads the server's hello");
    assert_eq!(wake, Some(rig.now + Duration::from_millis(500)), "by half the connect_timeout (the plaintext check)");
    rig.core.on_tls_established(rig.now);
    assert_eq!(rig.state(), ConnState::Handshaking);
    assert_eq!(rig.take_sent(usize::MAX), HANDSHAKE);
    rig.deliver(&handshake_replies(), 3);
    assert_eq!(rig.state(), ConnState::Ready);
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n");
    rig.deliver(b":1\r\n", usize::MAX);
    assert_eq!(rig.outcome(tag), Outcome::Bool(true));
}

/// TlsHandshaking -> Backoff: a handshake that does not finish within connect_timeout is a
/// failed attempt, and says what to check.
#[test]
fn a_silent_tls_handshake_times_out_as_a_failed_attempt() {
    let mut options = tls_options();
    options.connect_timeout = Duration::from_millis(500);
    let mut rig = Rig::with(options, 1, PipelineLimits::default());
    let policy = ReconnectPolicy { fail_after_attempts: 1, ..ReconnectPolicy::default() };
    rig.core = ConnCore::new(rig.core.options(), 1, policy, PipelineLimits::default());
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    assert!(rig.core.take_plaintext_check(rig.now + Duration::from_millis(250)));
    let (_, wake) = rig.core.interest(rig.now);
    assert_eq!(wake, Some(rig.now + Duration::from_millis(500)));
    rig.advance(Duration::from_millis(499));
    assert!(matches!(rig.state(), ConnState::TlsHandshaking { .. }));
    rig.advance(Duration::from_millis(1));
    assert!(matches!(rig.state(), ConnState::Backoff { .. }), "{:?}", rig.state());
    // It says what was seen, and blames no certificate.
    let err = rig.failure(tag);
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("did not finish the handshake"), "{err}");
    assert!(err.message().contains("not a plaintext Redis on this port"), "{err}");
    assert!(!err.message().contains("certificate"), "{err}");
}

/// TlsHandshaking -> Failed: a certificate problem is never retried; every request, queued
/// then or later, fails with it at once.
#[test]
fn a_permanent_tls_failure_fails_everything_at_once() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    let first = rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    let err = crate::error::Error::new(ErrorKind::Tls, "TLS to h:1: unknown issuer");
    rig.core.on_tls_failed(rig.now, err, true, &mut rig.out);
    assert!(matches!(rig.state(), ConnState::Failed { recheck_at: Some(_) }));
    assert_eq!(rig.failure(first).kind(), ErrorKind::Tls);
    let later = rig.keys_only(Op::Exists, b"k");
    assert_eq!(rig.failure(later).message(), "TLS to h:1: unknown issuer");
    assert!(!rig.core.wants_connect(rig.now + Duration::from_secs(20)));
}

/// TlsHandshaking -> Backoff -> Connecting: a connection that broke mid-handshake is retried
/// like any failed attempt.
#[test]
fn a_tls_handshake_broken_by_the_network_is_retried() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    let err = crate::error::Error::new(ErrorKind::Connection, "connection reset");
    rig.core.on_tls_failed(rig.now, err, false, &mut rig.out);
    assert!(rig.out.is_empty(), "the request waits for the next attempt");
    assert!(matches!(rig.state(), ConnState::Disconnected | ConnState::Backoff { .. }), "{:?}", rig.state());
    assert!(rig.core.wants_connect(rig.now), "the first reconnect is immediate");
    rig.ready_over_tls();
    rig.take_sent(usize::MAX);
    rig.deliver(b":0\r\n", usize::MAX);
    assert_eq!(rig.outcome(tag), Outcome::Bool(false));
}

/// Ready -> Failed: a TLS 1.3 server refuses a client certificate only after the handshake;
/// the refusal is as permanent as one during it.
#[test]
fn a_client_certificate_refused_after_the_handshake_is_permanent() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    rig.core.on_tls_established(rig.now);
    assert_eq!(rig.take_sent(usize::MAX), HANDSHAKE);
    let err = crate::error::Error::new(ErrorKind::Tls, "h:1 requires a client certificate");
    rig.core.on_tls_failed(rig.now, err, true, &mut rig.out);
    assert!(matches!(rig.state(), ConnState::Failed { .. }));
    assert_eq!(rig.failure(tag).message(), "h:1 requires a client certificate");
}

/// Handshaking -> Backoff: a TLS port resets a plaintext hello before any reply; the error says
/// what that may mean (a reset after a reply does not get the hint).
#[test]
fn a_reset_before_any_reply_suggests_tls() {
    let mut rig = Rig::new();
    let tag = rig.keys_only(Op::Exists, b"k");
    for _ in 0..3 {
        while rig.core.poll_connect(rig.now).is_none() {
            rig.advance(Duration::from_millis(10));
        }
        rig.core.on_connected(rig.now);
        assert_eq!(rig.take_sent(usize::MAX), HANDSHAKE);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        rig.core.on_io_error(rig.now, reset, &mut rig.out);
    }
    let err = rig.failure(tag);
    assert!(err.message().ends_with("(before any reply: if this port speaks TLS, use rediss:// or ssl=True)"), "{err}");

    let mut rig = Rig::new();
    let tag = rig.keys_only(Op::Exists, b"k");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.core.on_io_error(rig.now, io::Error::from(io::ErrorKind::ConnectionReset), &mut rig.out);
    rig.advance(TIMEOUT);
    assert!(!rig.failure(tag).message().contains("TLS"));
}

/// TlsHandshaking: half of connect_timeout into the handshake, the driver is asked, once, to
/// check on a second connection whether the port is a plaintext server (nothing but TLS is
/// written to this one); the deadline stays where it was.
#[test]
fn a_silent_tls_handshake_gets_one_plaintext_check_halfway_to_its_deadline() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    rig.keys_only(Op::Exists, b"k");
    rig.core.poll_connect(rig.now).unwrap();
    rig.core.on_connected(rig.now);
    let (_, wake) = rig.core.interest(rig.now);
    assert_eq!(wake, Some(rig.now + Duration::from_millis(500)), "woken for the check");
    assert!(!rig.core.take_plaintext_check(rig.now + Duration::from_millis(499)));
    assert!(rig.core.take_plaintext_check(rig.now + Duration::from_millis(500)));
    assert!(!rig.core.take_plaintext_check(rig.now + Duration::from_millis(600)), "once");
    let (_, wake) = rig.core.interest(rig.now + Duration::from_millis(600));
    assert_eq!(wake, Some(rig.now + Duration::from_secs(1)), "then the deadline");
    rig.core.on_tls_established(rig.now);
    assert!(!rig.core.take_plaintext_check(rig.now + Duration::from_secs(2)), "never outside the TLS handshake");
}

/// Ready -> (draining) -> Disconnected -> Connecting -> Ready: a TLS 1.2 connection whose send
/// key reached its limit finishes the request being written, sends nothing new, and once
/// every reply is in it is replaced; the requests held back go on the next connection, and
/// none fails.
#[test]
fn a_tls12_connection_at_its_key_limit_drains_and_reconnects_failing_nothing() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    let first = rig.keys_only(Op::Exists, b"a");
    rig.ready_over_tls();
    let second = rig.set(b"b", b"value");
    let third = rig.keys_only(Op::Del, b"c");
    // The EXISTS whole and part of the SET went out when the key reached its limit.
    let exists = b"*2\r\n$6\r\nEXISTS\r\n$1\r\na\r\n";
    assert_eq!(rig.take_sent(exists.len() + 10), [&exists[..], b"*3\r\n$3\r\nSE"].concat());
    rig.core.drain_for_new_keys();
    rig.core.on_writable();
    assert_eq!(rig.take_sent(usize::MAX), b"T\r\n$1\r\nb\r\n$5\r\nvalue\r\n", "the SET is finished, the DEL held back");
    rig.deliver(b":1\r\n", usize::MAX);
    assert_eq!(rig.state(), ConnState::Ready, "a reply still owed");
    rig.deliver(b"+OK\r\n", usize::MAX);
    assert_eq!(rig.state(), ConnState::Disconnected, "drained: replaced");
    assert!(rig.core.wants_connect(rig.now), "at once, not after a backoff");
    rig.ready_over_tls();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$3\r\nDEL\r\n$1\r\nc\r\n");
    rig.deliver(b":1\r\n", usize::MAX);
    assert_eq!(rig.outcome(first), Outcome::Bool(true));
    assert_eq!(rig.outcome(second), Outcome::Done);
    assert_eq!(rig.outcome(third), Outcome::Bool(true));
    assert!(rig.out.is_empty());
}

/// While draining, the commands of a WATCH scope already open go out (the scope closes on
/// this connection); a new scope waits for the next one.
#[test]
fn a_draining_connection_lets_an_open_watch_scope_finish() {
    let mut rig = Rig::with(tls_options(), 1, PipelineLimits::default());
    rig.core.poll_connect(rig.now);
    let frame = |text: &str| text.as_bytes().to_vec();
    let watch = rig.tag();
    rig.push(
        Request::command(frame("*2\r\n$5\r\nWATCH\r\n$1\r\nk\r\n"), watch, rig.now + TIMEOUT).in_scope(Scope::Opens),
    );
    rig.ready_over_tls();
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$5\r\nWATCH\r\n$1\r\nk\r\n");
    let unwatch = rig.tag();
    rig.push(Request::command(frame("*1\r\n$7\r\nUNWATCH\r\n"), unwatch, rig.now + TIMEOUT).in_scope(Scope::Closes));
    let next = rig.tag();
    rig.push(
        Request::command(frame("*2\r\n$5\r\nWATCH\r\n$1\r\nj\r\n"), next, rig.now + TIMEOUT).in_scope(Scope::Opens),
    );
    rig.core.drain_for_new_keys();
    assert_eq!(rig.take_sent(usize::MAX), b"*1\r\n$7\r\nUNWATCH\r\n", "the open scope closes; the next waits");
    rig.deliver(b"+OK\r\n+OK\r\n", usize::MAX);
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert!(matches!(rig.outcome(watch), Outcome::Reply(_)));
    assert!(matches!(rig.outcome(unwatch), Outcome::Reply(_)));
    assert!(rig.out.is_empty(), "the next scope waits for the next connection");
}

#[test]
fn the_handshake_learns_which_server_this_is_and_tells_every_connection_to_it() {
    use crate::net::{Product, ServerIdentity, Version};
    let (mut one, mut other, _board, health) = two_sharing_health();
    assert_eq!(health.identity(), None, "nothing is known before a handshake");
    one.keys_only(Op::Exists, b"k");
    other.keys_only(Op::Exists, b"k");
    one.ready();
    let redis = ServerIdentity { product: Product::Redis, version: Version(7, 0, 15) };
    assert_eq!(one.core.server_identity(), Some(&redis));
    assert_eq!(health.identity(), Some(redis), "the other connections to it know too");
    // A server upgraded in place (or a failover to another version) says so on reconnect.
    other.connect();
    assert_eq!(other.take_sent(usize::MAX), HANDSHAKE);
    let valkey9 = b"*14\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n9.1.2\r\n$5\r\nproto\r\n:2\r\n\
        $2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    other.deliver(valkey9, 5);
    other.deliver(b"+PONG\r\n", 5);
    assert_eq!(other.state(), ConnState::Ready);
    assert_eq!(health.identity(), Some(ServerIdentity { product: Product::Valkey, version: Version(9, 1, 2) }));
}

#[test]
fn a_server_that_refuses_hello_is_served_without_knowing_what_it_is() {
    let mut rig = Rig::new();
    let exists = rig.keys_only(Op::Exists, b"k");
    rig.connect();
    assert_eq!(rig.take_sent(usize::MAX), HANDSHAKE);
    // Redis 5 (no HELLO), or an ACL that denies it.
    rig.deliver(b"-ERR unknown command `HELLO`, with args beginning with: `2`, \r\n+PONG\r\n", 7);
    assert_eq!(rig.state(), ConnState::Ready);
    assert_eq!(rig.core.server_identity(), None);
    assert_eq!(rig.take_sent(usize::MAX), b"*2\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n");
    rig.deliver(b":1\r\n", 2);
    assert_eq!(rig.outcome(exists), Outcome::Bool(true));
}

#[test]
fn a_subscribers_connection_keeps_messages_nobody_asked_for_where_another_breaks() {
    let subscribe = b"*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n".to_vec();
    let confirmation = b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
    let message = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$9\r\nm a 1 b 2\r\n";
    let mut rig = Rig::new();
    rig.core.keep_pushes();
    let tag = rig.tag();
    rig.push(Request::command(subscribe.clone(), tag, rig.now + TIMEOUT));
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(confirmation, 7);
    assert!(matches!(rig.outcome(tag), Outcome::Reply(Reply::Array(_))));
    rig.deliver(message, 5);
    rig.deliver(message, usize::MAX);
    assert_eq!(rig.state(), ConnState::Ready);
    let pushes = rig.core.take_pushes();
    assert_eq!(pushes.len(), 2);
    assert!(matches!(&pushes[0], Reply::Array(parts) if parts[2] == Reply::Bulk(b"m a 1 b 2".to_vec())));
    assert!(rig.core.take_pushes().is_empty());

    // Without keeping pushes, the same message is a reply to nothing: the stream is broken.
    let mut rig = Rig::new();
    let tag = rig.tag();
    rig.push(Request::command(subscribe, tag, rig.now + TIMEOUT));
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(confirmation, usize::MAX);
    rig.outcome(tag);
    rig.deliver(message, usize::MAX);
    assert_ne!(rig.state(), ConnState::Ready);
}

#[test]
fn a_flooded_subscriber_reads_no_more_until_its_messages_are_taken() {
    let message = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$9\r\nm a 1 b 2\r\n";
    let mut rig = Rig::new();
    rig.core.keep_pushes();
    let tag = rig.tag();
    rig.push(Request::command(b"*2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n".to_vec(), tag, rig.now + TIMEOUT));
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n", usize::MAX);
    rig.outcome(tag);
    // Whole receives of messages until the core takes no more.
    let flood = message.repeat(64);
    let mut receives = 0;
    while rig.core.recv_target(rig.now, &mut rig.out).is_some() {
        rig.deliver(&flood, usize::MAX);
        receives += 1;
        assert!(receives < 1000, "the core never stopped reading");
    }
    let held = rig.core.take_pushes().len();
    assert!((MAX_PENDING_PUSHES..MAX_PENDING_PUSHES + 64).contains(&held), "{held} messages held");
    // Taken: it reads again.
    assert!(rig.core.recv_target(rig.now, &mut rig.out).is_some());
    assert_eq!(rig.state(), ConnState::Ready);
}

#[test]
fn a_capped_connection_refuses_a_reply_past_its_cap() {
    let mut rig = Rig::new();
    rig.core.cap_replies(1024);
    let tag = rig.tag();
    let frame = crate::resp::encode::encode_args(&[b"SENTINEL", b"get-master-addr-by-name", b"mymaster"]);
    rig.push(Request::command(frame, tag, rig.now + TIMEOUT));
    rig.ready();
    rig.take_sent(usize::MAX);
    let element = b"$9\r\n127.0.0.1\r\n";
    let mut reply = b"*1000\r\n".to_vec();
    reply.extend(element.repeat(1000));
    let mut fed = 0;
    while rig.out.is_empty() && fed < reply.len() {
        let end = (fed + 64).min(reply.len());
        rig.deliver(&reply[fed..end], usize::MAX);
        fed = end;
    }
    assert!(fed <= 1024 + 64, "{fed} bytes taken");
    let err = rig.failure(tag);
    assert_eq!(err.kind(), ErrorKind::Protocol);
    assert!(err.message().starts_with("the reply to SENTINEL from"), "{err}");
    assert!(err.message().contains("exceeds 1 KiB, the cap on the size of one reply"), "{err}");
}

#[test]
fn a_write_refused_by_a_demoted_primary_is_handed_back_to_find_the_new_one() {
    let mut rig = Rig::new();
    rig.core = ConnCore::new(Arc::new(options(None, 0)), 1, ReconnectPolicy::default(), PipelineLimits::default())
        .handing_off();
    let set = rig.set(b"k", b"v");
    rig.ready();
    rig.take_sent(usize::MAX);
    rig.deliver(b"-READONLY You can't write against a read only replica.\r\n", 7);
    let handoffs = rig.core.take_handoffs();
    assert!(
        matches!(&handoffs[..], [(request, Handoff::Retry(err))] if request.tag == set && err.message().contains("READONLY"))
    );
    assert!(rig.out.is_empty() && rig.core.is_empty());
}

/// What the core offers to send now, handed to a send that completes later (the io_uring
/// loop): the bytes, and how many were offered.
fn lend(rig: &mut Rig) -> (Vec<u8>, usize) {
    let mut iov = IoVecs::<128>::new();
    rig.core.transmit(&mut iov);
    let offered = iov.total_len();
    let mut wire = Vec::new();
    for entry in iov.as_slice() {
        // SAFETY: every entry points at a request's header, value or trailer, which live in the
        // core's queue (or the rig's pages) while the send is lent.
        wire.extend_from_slice(unsafe { std::slice::from_raw_parts(entry.iov_base as *const u8, entry.iov_len) });
    }
    rig.core.on_send_started(offered);
    (wire, offered)
}

#[test]
fn a_reply_that_overtakes_a_partly_written_set_fails_it_as_a_protocol_error_not_a_success() {
    // The poll loop: the socket took the SET's header and part of its value, and the server
    // answered +OK already. The SET must not succeed (the server never read the rest), and it
    // is not sent again (it would meet the same answer).
    let mut rig = Rig::new();
    let value = vec![7u8; 100_000];
    let set = rig.set(b"early", &value);
    rig.ready();
    let sent = rig.take_sent(40_000);
    assert_eq!(sent.len(), 40_000);
    rig.deliver(b"+OK\r\n", usize::MAX);
    let err = rig.failure(set);
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(
        err.message()
            .starts_with("10.0.0.5:6379 answered SET (Simple(\"OK\")) after 40000 of its 100035 bytes were sent"),
        "{err}"
    );
    assert!(err.message().contains("so the SET failed and the connection was dropped"), "{err}");
    assert_eq!(rig.state(), ConnState::Disconnected);
    assert!(rig.out.is_empty(), "nothing else completed");
}

#[test]
fn a_reply_to_a_set_still_lent_to_the_kernel_fails_it_whatever_it_says() {
    // The io_uring loop: the whole SET was handed to a send whose completion has not come, so
    // the kernel may still read the page. A reply now overtook it: the SET fails (and its
    // page is handed back only after the driver reaped the send), exactly as on the poll loop.
    let mut rig = Rig::new();
    let first = rig.set(b"answered", &[1u8; 10]);
    rig.ready();
    let (_, offered) = lend(&mut rig);
    rig.core.on_sent(offered, offered);
    let value = vec![7u8; 100_000];
    let set = rig.set(b"early", &value);
    let (wire, offered) = lend(&mut rig);
    assert_eq!(wire.len(), offered);
    assert!(!rig.core.has_sendable(), "nothing more goes out behind a lent send");
    // The reply to the first SET is fine: its send completed.
    rig.deliver(b"+OK\r\n", usize::MAX);
    assert_eq!(rig.outcome(first), Outcome::Done);
    // The second's reply came before its send's completion.
    rig.deliver(b"+OK\r\n", usize::MAX);
    let err = rig.failure(set);
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.message().contains("answered SET (Simple(\"OK\")) after 0 of its 100035 bytes were sent"), "{err}");
    assert_eq!(rig.state(), ConnState::Disconnected);
}

#[test]
fn a_lent_request_is_on_its_way_never_expired_or_failed_as_unsent() {
    // While the kernel may read a lent request's memory, a closing store (fail_unsent) and a
    // passing deadline (expire_unsent) must leave it in the queue: only the driver's reap, or a
    // dropped connection the driver reaps first, lets it go.
    let mut rig = Rig::new();
    let lent = rig.set(b"lent", &vec![3u8; 300_000]);
    rig.ready();
    lend(&mut rig);
    let unsent = rig.set(b"unsent", &[4u8; 10]);
    rig.core.fail_unsent(&crate::error::Error::closed("the store"), &mut rig.out);
    assert!(matches!(rig.outcome(unsent), Outcome::Failed(_)), "the request behind it was never lent: it fails");
    assert!(rig.out.is_empty(), "the lent one stays on its way");
    assert_eq!(rig.core.outstanding_requests(), 1);
    // Its deadline passes: the connection is dropped (the driver reaps the send before the
    // completion goes anywhere), and the SET fails as timed out, never as unsent.
    rig.advance(TIMEOUT + Duration::from_millis(1));
    let err = rig.failure(lent);
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(!err.message().contains("before SET could be sent"), "{err}");
}

#[test]
fn a_set_the_server_refuses_as_too_long_says_which_setting_and_what_to_do() {
    // Redis and Valkey answer a bulk string longer than proto-max-bulk-len with this error,
    // often after reading only its length: the SET fails with the server's words and the
    // remedy, whether the answer came before or after the value was all sent.
    let reply = b"-ERR Protocol error: invalid bulk length\r\n";
    for sent_whole in [false, true] {
        let mut rig = Rig::new();
        let set = rig.set(b"big", &vec![9u8; 200_000]);
        rig.ready();
        rig.take_sent(if sent_whole { usize::MAX } else { 1000 });
        rig.deliver(reply, usize::MAX);
        let err = rig.failure(set);
        assert_eq!(err.kind(), ErrorKind::Server, "{err}");
        assert_eq!(
            err.message(),
            "ERR Protocol error: invalid bulk length (the SET carried a 200000-byte value, longer than the server's \
             proto-max-bulk-len: raise it on the server, CONFIG SET proto-max-bulk-len, or store smaller values)",
            "sent whole: {sent_whole}"
        );
    }
}
