//! A blocking client on one connection: each call sends one command and waits, at most the
//! client's timeout, for its reply. Values go out of and come into caller memory directly.

use crate::conn::{Completion, Conn, Outcome, PipelineLimits, ReconnectPolicy, Request};
use crate::error::{Error, ErrorKind, Result};
use crate::health::{HealthBoard, Probe, ProbePolicy, ProbeVerdict};
use crate::memory::RawBuf;
use crate::net::{Address, ConnectOptions, Endpoint, Readiness, wait_for};
use crate::op::{Op, check_key_len};
use crate::ranged::{self, RangedReads, ReadShape};
use crate::resp::{Command, Reply};
use crate::settings::GetPieces;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One connection to one server, used one command at a time (see the module documentation).
pub struct BlockingClient {
    conn: Conn,
    endpoint: Endpoint,
    timeout: Duration,
    completions: Vec<Completion>,
    /// GETs of large values, read in pieces (on this one connection).
    ranged: RangedReads,
    /// How large values are read (`get_piece_bytes`).
    get_pieces: GetPieces,
    /// With [`BlockingClient::failing_fast`]: the server's health and its prober.
    health: Option<HealthBoard>,
    /// `<key_prefix>@` before every key (empty: none), as the engine sends it.
    key_prefix: Box<[u8]>,
    /// Every SET makes its key expire after this many milliseconds; None: never.
    set_expiry_ms: Option<u64>,
    /// Subscription messages received and not yet handed out.
    messages: std::collections::VecDeque<Reply>,
}

impl BlockingClient {
    /// Connects, authenticates and pings, so that a wrong address or password fails here.
    pub fn connect(options: ConnectOptions, timeout: Duration) -> Result<BlockingClient> {
        let addresses = options.endpoint.resolve()?;
        BlockingClient::connect_to(options, addresses.into(), timeout)
    }

    /// As [`BlockingClient::connect`], to the endpoint's `addresses` as already looked up (by a
    /// [`crate::net::Resolver`]).
    pub fn connect_to(options: ConnectOptions, addresses: Arc<[Address]>, timeout: Duration) -> Result<BlockingClient> {
        BlockingClient::connect_capped(options, addresses, timeout, crate::resp::parser::DEFAULT_MAX_REPLY_BYTES)
    }

    /// As [`BlockingClient::connect_to`], refusing a reply of more than `max_reply_bytes`
    /// (`Conn::cap_replies`): for servers asked only for small replies, such as Sentinels.
    pub fn connect_capped(
        options: ConnectOptions,
        addresses: Arc<[Address]>,
        timeout: Duration,
        max_reply_bytes: u64,
    ) -> Result<BlockingClient> {
        let endpoint = options.endpoint.clone();
        // One attempt per call: a blocking caller wants the error, not a wait in backoff.
        let policy = ReconnectPolicy { fail_after_attempts: 1, ..ReconnectPolicy::default() };
        let mut conn = Conn::new(Arc::new(options), addresses, policy, PipelineLimits::default());
        conn.cap_replies(max_reply_bytes);
        let mut client = BlockingClient {
            conn,
            endpoint,
            timeout,
            completions: Vec::new(),
            ranged: RangedReads::new(),
            get_pieces: GetPieces::Bytes(0),
            health: None,
            key_prefix: Box::default(),
            set_expiry_ms: None,
            messages: Default::default(),
        };
        client.ping()?;
        Ok(client)
    }

    /// A client of the one server `settings` name, with their credentials, timeout and GET
    /// pieces.
    pub fn for_settings(settings: &crate::settings::Settings) -> Result<BlockingClient> {
        if settings.sentinel.is_some() {
            return Err(Error::invalid(
                "a blocking client talks to one fixed server and does not follow Sentinel failovers: use a store \
                 or connector with Sentinel, or give the primary's host and port",
            ));
        }
        if settings.endpoints.len() > 1 {
            return Err(Error::invalid("a blocking client talks to one server: give one host, not a list"));
        }
        let options = settings.connect_options(settings.endpoint());
        let probe_timeout = settings.connect_timeout.min(settings.timeout);
        let mut client = BlockingClient::connect(options, settings.timeout)?;
        client.key_prefix = settings.wire_prefix();
        client.set_expiry_ms = crate::settings::expiry_ms(settings.ttl);
        Ok(client.with_get_pieces(settings.get_piece_bytes).failing_fast(ProbePolicy::default(), probe_timeout))
    }

    /// Once the server is found unreachable, calls fail at once until a background probe
    /// (every `policy` delay, each within `probe_timeout`) reaches it again (see
    /// `crate::health`).
    pub fn failing_fast(mut self, policy: ProbePolicy, probe_timeout: Duration) -> BlockingClient {
        let board = HealthBoard::new(policy);
        let options = self.conn.options();
        let health = board.endpoint(&self.endpoint.to_string(), || probe_of(options, probe_timeout));
        self.conn = self.conn.with_health(health);
        self.health = Some(board);
        self
    }

    /// How GETs of large values are read: as the setting says (`Auto`: by what the server said
    /// it is in the handshake); without this call, every value with one GET.
    pub fn with_get_pieces(mut self, get_pieces: GetPieces) -> BlockingClient {
        self.get_pieces = get_pieces;
        self
    }

    /// How this client reads large values from its server now.
    pub fn read_shape(&self) -> ReadShape {
        ReadShape::choose(self.get_pieces, self.conn.server_identity())
    }

    /// The server this client talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends PING and waits for PONG.
    pub fn ping(&mut self) -> Result<()> {
        match self.call(Op::Ping, b"", None)? {
            Outcome::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Stores `value` under `key`.
    pub fn set(&mut self, key: &[u8], value: RawBuf) -> Result<()> {
        match self.call(Op::Set, key, Some(value))? {
            Outcome::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Receives the value of `key` into `dest`: `Some(bytes received)`, or `None` when the key
    /// does not exist (then `dest` is untouched). A value larger than `dest` fails with
    /// [`ErrorKind::ValueTooLarge`], leaves `dest` untouched and the connection usable.
    pub fn get(&mut self, key: &[u8], dest: RawBuf) -> Result<Option<usize>> {
        match self.call(Op::Get, key, Some(dest))? {
            Outcome::Hit(len) => Ok(Some(len)),
            Outcome::Miss => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    /// Whether `key` exists.
    pub fn exists(&mut self, key: &[u8]) -> Result<bool> {
        match self.call(Op::Exists, key, None)? {
            Outcome::Bool(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes `key`; true if it existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        match self.call(Op::Del, key, None)? {
            Outcome::Bool(deleted) => Ok(deleted),
            other => Err(unexpected(other)),
        }
    }

    /// Subscription messages received and not handed out yet (for tests of the bound).
    #[cfg(feature = "internals")]
    pub fn buffered_messages(&self) -> usize {
        self.messages.len()
    }

    /// True while the connection has a socket (for tests of socket options).
    pub fn socket_nodelay(&self) -> Option<bool> {
        self.conn.stream().and_then(|s| s.nodelay().ok())
    }

    /// The socket's congestion control, and whether it was started afresh before a first large
    /// send (see `net::congestion`); None without a socket (for tests of socket options).
    #[cfg(feature = "internals")]
    pub fn socket_congestion(&self) -> Option<(String, bool)> {
        let stream = self.conn.stream()?;
        Some((stream.congestion_control().ok()?, stream.congestion_restarted()))
    }

    /// `CLUSTER <subcommand>` (`SHARDS`, `SLOTS`): the reply, whole.
    pub fn cluster(&mut self, subcommand: &[u8]) -> Result<Reply> {
        let frame = Command::Cluster { subcommand }.header();
        match self.send(Request::command(frame, 0, Instant::now() + self.timeout))? {
            Outcome::Reply(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    /// Any command, given as its arguments (`[b"ROLE"]`, `[b"SENTINEL", b"replicas", name]`):
    /// the reply, whole (an error reply is an error).
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let frame = crate::resp::encode::encode_args(args);
        match self.send(Request::command(frame, 0, Instant::now() + self.timeout))? {
            Outcome::Reply(Reply::Error(text)) => Err(Error::server(&text).context(&self.endpoint)),
            Outcome::Reply(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    /// `SUBSCRIBE channel`: from now on the connection only receives its messages
    /// ([`BlockingClient::next_message`]).
    pub fn subscribe(&mut self, channel: &[u8]) -> Result<()> {
        self.conn.keep_pushes();
        self.command(&[b"SUBSCRIBE", channel]).map(drop)
    }

    /// The next message of a subscription, or None if none came by `deadline`; an error when
    /// the connection broke (a subscription is never silently re-made). Messages already
    /// received are handed out before the connection is read again: a publisher faster than
    /// the caller is held back by TCP, not buffered here.
    pub fn next_message(&mut self, deadline: Instant) -> Result<Option<Reply>> {
        if let Some(message) = self.messages.pop_front() {
            return Ok(Some(message));
        }
        let mut ready = Readiness::OPTIMISTIC;
        loop {
            let now = Instant::now();
            self.completions.clear();
            self.conn.drive(now, ready, &mut self.completions);
            self.messages.extend(self.conn.take_pushes());
            if let Some(message) = self.messages.pop_front() {
                return Ok(Some(message));
            }
            if self.conn.stream().is_none() {
                return Err(Error::connection_lost(&self.endpoint, "the subscription's connection closed"));
            }
            if now >= deadline {
                return Ok(None);
            }
            let (fd, interest, _) = self.conn.interest();
            ready = match fd {
                Some(fd) => {
                    wait_for(fd, interest, Some(deadline)).map_err(|err| Error::connection_lost(&self.endpoint, err))?
                }
                None => return Err(Error::connection_lost(&self.endpoint, "the subscription's connection closed")),
            };
        }
    }

    fn call(&mut self, op: Op, key: &[u8], data: Option<RawBuf>) -> Result<Outcome> {
        let key: Cow<'_, [u8]> = match self.key_prefix.is_empty() {
            true => Cow::Borrowed(key),
            false => Cow::Owned([&self.key_prefix[..], key].concat()),
        };
        let key = &key[..];
        check_key_len(key.len())?;
        let request = Request::expiring(op, key, data, self.set_expiry_ms, 0, Instant::now() + self.timeout);
        let shape = self.read_shape();
        if RangedReads::takes(&request, shape) {
            self.completions.clear();
            let mut conns = OneConn { conn: &mut self.conn, shape, failed: Vec::new() };
            self.ranged.start(request, key, 0, &mut conns);
            self.completions.extend(conns.failed);
            return self.wait();
        }
        self.send(request)
    }

    fn send(&mut self, request: Request) -> Result<Outcome> {
        self.completions.clear();
        self.conn.push(request, &mut self.completions);
        self.wait()
    }

    /// Drives the connection until the caller's request (tag 0) completes; a ranged read's
    /// own requests go to the read.
    fn wait(&mut self) -> Result<Outcome> {
        let mut ready = Readiness::OPTIMISTIC;
        loop {
            let now = Instant::now();
            self.conn.drive(now, ready, &mut self.completions);
            self.conn.expire(now, &mut self.completions);
            let mut queued_more = false;
            loop {
                let shape = ReadShape::choose(self.get_pieces, self.conn.server_identity());
                let mut conns = OneConn { conn: &mut self.conn, shape, failed: Vec::new() };
                queued_more |= self.ranged.route_completions(&mut self.completions, &mut conns, now);
                if conns.failed.is_empty() {
                    break;
                }
                self.completions.extend(conns.failed);
            }
            if let Some(done) = self.completions.pop() {
                return match done.outcome {
                    Outcome::Failed(err) => Err(err),
                    outcome => Ok(outcome),
                };
            }
            if queued_more {
                ready = Readiness::OPTIMISTIC;
                continue;
            }
            let (fd, interest, wake) = self.conn.interest();
            ready = match fd {
                Some(fd) => wait_for(fd, interest, wake).map_err(|err| Error::connection_lost(&self.endpoint, err))?,
                None => {
                    if let Some(wake) = wake {
                        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    }
                    Readiness::default()
                }
            };
        }
    }
}

/// A probe of a down server: connect, authenticate and PING within the connect timeout. A
/// server that refuses the credentials answered: it is up (its connections then fail with the
/// credentials' error, which is not retried).
pub fn probe_of(options: Arc<ConnectOptions>, timeout: std::time::Duration) -> Probe {
    Box::new(move || match BlockingClient::connect((*options).clone(), timeout) {
        Ok(_) => ProbeVerdict::Reachable,
        // A TLS refusal (a certificate, a plaintext port) is an answer too.
        Err(err) if matches!(err.kind(), ErrorKind::Authentication | ErrorKind::Tls) => ProbeVerdict::Reachable,
        Err(err) => ProbeVerdict::Unreachable(err),
    })
}

/// The client's one connection as a ranged read sees it.
struct OneConn<'a> {
    conn: &'a mut Conn,
    shape: ReadShape,
    /// Requests that failed as they were queued.
    failed: Vec<Completion>,
}

impl ranged::Conns for OneConn<'_> {
    fn conns_of(&self, _node: usize) -> &[usize] {
        &[0]
    }

    fn load(&self, _conn: usize) -> usize {
        self.conn.outstanding_cost()
    }

    fn push(&mut self, _conn: usize, request: Request, asking: bool) {
        if asking {
            self.conn.push_asking(request, &mut self.failed);
        } else {
            self.conn.push(request, &mut self.failed);
        }
    }

    fn route(&mut self, _key: &[u8]) -> Result<usize> {
        Ok(0)
    }

    fn read_shape(&self, _node: usize) -> ReadShape {
        self.shape
    }
}

fn unexpected(outcome: Outcome) -> Error {
    match outcome {
        Outcome::Failed(err) => err,
        other => Error::new(ErrorKind::Protocol, format!("unexpected outcome {other:?}")),
    }
}
