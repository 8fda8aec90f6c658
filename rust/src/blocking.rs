//! A blocking client on one connection: each call sends one command and waits, at most the
//! client's timeout, for its reply. Values go out of and come into caller memory directly.

use crate::conn::{Completion, Conn, Outcome, PipelineLimits, ReconnectPolicy, Request};
use crate::error::{Error, ErrorKind, Result};
use crate::memory::RawBuf;
use crate::net::{ConnectOptions, Endpoint, Readiness, wait_for};
use crate::op::{Op, check_key_len};
use crate::resp::{Command, Reply};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One connection to one server, used one command at a time (see the module documentation).
pub struct BlockingClient {
    conn: Conn,
    endpoint: Endpoint,
    timeout: Duration,
    completions: Vec<Completion>,
}

impl BlockingClient {
    /// Connects, authenticates and pings, so that a wrong address or password fails here.
    pub fn connect(options: ConnectOptions, timeout: Duration) -> Result<BlockingClient> {
        let addresses = options.endpoint.resolve()?;
        let endpoint = options.endpoint.clone();
        // One attempt per call: a blocking caller wants the error, not a wait in backoff.
        let policy = ReconnectPolicy { fail_after_attempts: 1, ..ReconnectPolicy::default() };
        let conn = Conn::new(Arc::new(options), addresses.into(), policy, PipelineLimits::default());
        let mut client = BlockingClient { conn, endpoint, timeout, completions: Vec::new() };
        client.ping()?;
        Ok(client)
    }

    /// The server this client talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The longest each call waits for its reply.
    pub fn timeout(&self) -> Duration {
        self.timeout
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

    /// True while the connection has a socket (for tests of socket options).
    pub fn socket_nodelay(&self) -> Option<bool> {
        self.conn.stream().and_then(|s| s.nodelay().ok())
    }

    /// `CLUSTER <subcommand>` (`SHARDS`, `SLOTS`): the reply, whole.
    pub fn cluster(&mut self, subcommand: &[u8]) -> Result<Reply> {
        let frame = Command::Cluster { subcommand }.header();
        match self.send(Request::command(frame, 0, Instant::now() + self.timeout))? {
            Outcome::Reply(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    fn call(&mut self, op: Op, key: &[u8], data: Option<RawBuf>) -> Result<Outcome> {
        check_key_len(key.len())?;
        self.send(Request::new(op, key, data, 0, Instant::now() + self.timeout))
    }

    fn send(&mut self, request: Request) -> Result<Outcome> {
        self.completions.clear();
        self.conn.push(request, &mut self.completions);
        let mut ready = Readiness::OPTIMISTIC;
        loop {
            let now = Instant::now();
            self.conn.drive(now, ready, &mut self.completions);
            self.conn.expire(now, &mut self.completions);
            if let Some(done) = self.completions.pop() {
                return match done.outcome {
                    Outcome::Failed(err) => Err(err),
                    outcome => Ok(outcome),
                };
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

fn unexpected(outcome: Outcome) -> Error {
    match outcome {
        Outcome::Failed(err) => err,
        other => Error::new(ErrorKind::Protocol, format!("unexpected outcome {other:?}")),
    }
}
