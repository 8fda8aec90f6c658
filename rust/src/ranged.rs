//! Large values read in pieces, past the servers' big-reply cliff.
//!
//! Redis and Valkey serve a GET of tens of MiB at a fraction of the rate they serve the same
//! bytes in 1-4 MiB replies (bench/RESULTS.md, section 10; the sweeps in
//! bench/archive/journal-2026-11-30-to-12-02.md). A GET whose value may be larger than the piece
//! size is therefore read as a *ranged read*, a small protocol of its own over the worker's
//! connections to the key's server:
//!
//! 1. **Probe**, on a *home* connection: `WATCH key` and `STRLEN key`. Nothing is written into
//!    the destination before the length is known, so a miss, or a value of another length
//!    than an exact-length GET expects, leaves it untouched.
//! 2. **Pieces**: `GETRANGE key start end`, one per piece, spread over the connections to the
//!    server, each received straight into its place in the destination. They are sent only
//!    once the probe has answered, so the server runs them after the `WATCH`.
//! 3. **Verify**, on the home connection, once every piece has arrived: `MULTI` and `EXEC`,
//!    bound to leave the connection together ([`Request::leaves_with_next`]). An empty `EXEC`
//!    reply says no one wrote the key since the `WATCH`: every piece is of the same version,
//!    and the GET is a hit. A nil reply says it was replaced or deleted: the read starts
//!    again, at most [`MAX_ATTEMPTS`] times, and then fails with [`ErrorKind::PartialRead`]
//!    (never a hit made of two versions).
//!
//! A value no larger than a piece (the length is known after the probe) is read with one
//! plain `GET` instead, which is atomic by itself. A `WATCH` belongs to its connection: a home
//! connection holds one ranged read between its `WATCH` and its `EXEC` (or `UNWATCH`), other
//! reads wait for it, and if the connection drops, the commands bound to it fail and the read
//! starts again. In Redis Cluster a redirect of any part restarts the read where the key lives
//! now (`MOVED`), or on the node importing it, behind `ASKING` (`ASK`); any other start over
//! goes where the map says the key lives, its primary, so a read begun on a replica
//! (`read_from="prefer_replica"`) that failed it is not sent there again. Every attempt reads
//! all its pieces from the one node that answered its `WATCH`.
//!
//! No state outlives a read on its connections: its commands carry the caller's deadline, and
//! one that expires unsent while the server holds the read's `WATCH` (or `MULTI`) drops the
//! connection ([`Scope`]). A hit leaves the destination past its length as it was; a value that
//! became shorter than what an aborted attempt wrote there fails with
//! [`ErrorKind::PartialRead`].
//!
//! The requests of a ranged read carry tags with [`INTERNAL_TAG`] set: their completions come
//! back here ([`RangedReads::route_completions`]), never to the batch the GET belongs to.

pub mod shape;

pub use shape::ReadShape;

use crate::conn::{Completion, Handoff, Outcome, Request, Scope};
use crate::error::{Error, ErrorKind};
use crate::resp::{Command, Reply};
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Tags with this bit are ranged reads' own requests (batch tags never set it: their slot
/// number stays below 2^31).
pub const INTERNAL_TAG: u64 = 1 << 63;

/// How many times a ranged read starts over (the value changed under it, or its home
/// connection dropped) before it fails.
pub const MAX_ATTEMPTS: u8 = 3;

/// How many cluster redirects a ranged read follows before it fails (as many as any request).
pub const MAX_REDIRECTS: u8 = 16;

/// The connections a ranged read may use: a worker's, or the blocking client's one.
pub trait Conns {
    /// The connections to server `node`.
    fn conns_of(&self, node: usize) -> &[usize];
    /// Pipeline cost outstanding on connection `conn` (the least loaded takes the next piece).
    fn load(&self, conn: usize) -> usize;
    /// Queues `request` on connection `conn`, behind an `ASKING` if `asking`.
    fn push(&mut self, conn: usize, request: Request, asking: bool);
    /// The server that holds `key` now (in a cluster, by the current slot map).
    fn route(&mut self, key: &[u8]) -> Result<usize, Error>;
    /// How server `node`'s large values are read (what it said it is, under the setting).
    fn read_shape(&self, node: usize) -> ReadShape;
}

/// Which request of a ranged read a completion answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Part {
    Watch = 1,
    Strlen = 2,
    Piece = 3,
    Multi = 4,
    Exec = 5,
    Unwatch = 6,
    /// The plain GET of a value no larger than a piece.
    Whole = 7,
}

impl Part {
    fn from_code(code: u8) -> Option<Part> {
        [Part::Watch, Part::Strlen, Part::Piece, Part::Multi, Part::Exec, Part::Unwatch, Part::Whole]
            .into_iter()
            .find(|part| *part as u8 == code)
    }
}

fn internal_tag(session: u32, attempt: u8, part: Part) -> u64 {
    INTERNAL_TAG | u64::from(session) << 16 | u64::from(attempt) << 8 | part as u64
}

fn parse_tag(tag: u64) -> Option<(u32, u8, Part)> {
    if tag & INTERNAL_TAG == 0 {
        return None;
    }
    let part = Part::from_code(tag as u8)?;
    Some(((tag >> 16) as u32 & 0x7fff_ffff, (tag >> 8) as u8, part))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a home connection to the server.
    Waiting,
    /// WATCH and STRLEN in flight.
    Probing,
    /// The plain GET (and the UNWATCH behind it) in flight.
    Whole,
    /// The pieces in flight.
    Reading,
    /// MULTI and EXEC in flight.
    Verifying,
    /// The UNWATCH that ends an attempt in flight.
    Unwatching,
}

/// What went wrong in the current attempt.
#[derive(Debug)]
enum Problem {
    /// The value changed under the read (a piece of another length, or EXEC said so).
    Changed,
    /// A part failed; the read may start over.
    Failed(Error),
    /// The key lives elsewhere now: start over there.
    Moved,
    /// The key is being imported by this server: start over there, behind ASKING.
    Asked(usize),
}

struct Session {
    /// The caller's GET: its tag, destination, deadline and exact-length rule.
    user: Request,
    key: Box<[u8]>,
    node: usize,
    /// In a cluster, after an ASK: every command goes behind ASKING to this node.
    asking: bool,
    home: Option<usize>,
    /// Counts every start over; tags carry it.
    attempt: u8,
    /// Start overs because the value changed or a part failed.
    retries: u8,
    /// Start overs because the key lives elsewhere (cluster redirects).
    redirects: u8,
    phase: Phase,
    /// Requests of this attempt not yet completed.
    pending: usize,
    length: Option<usize>,
    problem: Option<Problem>,
    /// What the read ends with once the UNWATCH in flight is answered.
    ending: Option<Outcome>,
    /// Pieces were sent for this many bytes (the longest attempt's length): the destination
    /// may hold bytes of the value up to here.
    written: usize,
}

/// The ranged reads of one worker (or one blocking client).
#[derive(Default)]
pub struct RangedReads {
    sessions: Vec<Option<Session>>,
    free: Vec<u32>,
    /// Home connections, and the session whose WATCH holds each.
    holders: HashMap<usize, u32>,
    /// Sessions waiting for a home connection, per server.
    waiting: HashMap<usize, VecDeque<u32>>,
}

impl RangedReads {
    /// No reads yet. How large a value each server's reads take in one GET is the `Conns`'
    /// to say ([`Conns::read_shape`]).
    pub fn new() -> RangedReads {
        RangedReads { sessions: Vec::new(), free: Vec::new(), holders: HashMap::new(), waiting: HashMap::new() }
    }

    /// Whether `request` is a GET whose value may be larger than a piece of `shape` (its
    /// server's): its destination's size (the value's exact length, for an exact-length GET) is
    /// more than a piece.
    pub fn takes(request: &Request, shape: ReadShape) -> bool {
        request.op() == Some(crate::op::Op::Get)
            && request.destination().is_some_and(|dest| dest.len() > shape.piece_bytes())
    }

    /// Whether a read in progress is bound to server `node`: it reads from it, waits for a
    /// home connection to it, or will start over there (an `ASK` named it). Such a node must
    /// keep its index.
    pub fn uses_node(&self, node: usize) -> bool {
        self.sessions.iter().flatten().any(|session| {
            session.node == node || matches!(session.problem, Some(Problem::Asked(asked)) if asked == node)
        })
    }

    /// No ranged read in progress.
    pub fn is_empty(&self) -> bool {
        self.sessions.len() == self.free.len()
    }

    /// Starts reading `user`, a GET of `key` that [`RangedReads::takes`], from server `node`.
    pub fn start(&mut self, user: Request, key: &[u8], node: usize, conns: &mut impl Conns) {
        let session = Session {
            user,
            key: key.into(),
            node,
            asking: false,
            home: None,
            attempt: 0,
            retries: 0,
            redirects: 0,
            phase: Phase::Waiting,
            pending: 0,
            length: None,
            problem: None,
            ending: None,
            written: 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.sessions[id as usize] = Some(session);
                id
            }
            None => {
                self.sessions.push(Some(session));
                (self.sessions.len() - 1) as u32
            }
        };
        self.begin(id, conns);
    }

    /// Moves the completions of ranged reads' own requests out of `out` to their reads, and
    /// appends the callers' completions of the reads that finished. True when requests were
    /// queued on connections (they need driving again).
    pub fn route_completions(&mut self, out: &mut Vec<Completion>, conns: &mut impl Conns, now: Instant) -> bool {
        if !out.iter().any(|c| c.tag & INTERNAL_TAG != 0) {
            return false;
        }
        let (internal, callers): (Vec<Completion>, Vec<Completion>) =
            std::mem::take(out).into_iter().partition(|c| c.tag & INTERNAL_TAG != 0);
        *out = callers;
        for completion in internal {
            self.complete(completion.tag, Answer::Outcome(completion.outcome), conns, now, out);
        }
        true
    }

    /// A part a cluster node handed back (a redirect, or a node failure): the read starts over
    /// where the key lives now, once its other parts are done. `MOVED` must already be in the
    /// slot map; `asked_node` is the node an `ASK` names.
    pub fn on_handoff(
        &mut self,
        request: Request,
        why: Handoff,
        asked_node: Option<usize>,
        conns: &mut impl Conns,
        now: Instant,
        out: &mut Vec<Completion>,
    ) {
        let answer = match (why, asked_node) {
            (Handoff::Redirect(_), Some(node)) => Answer::Asked(node),
            (Handoff::Redirect(_), None) => Answer::Moved,
            (Handoff::Retry(err), _) => Answer::Outcome(Outcome::Failed(err)),
        };
        self.complete(request.tag, answer, conns, now, out);
    }

    // -- inside ----------------------------------------------------------------------------

    fn session(&mut self, id: u32) -> &mut Session {
        self.sessions[id as usize].as_mut().expect("a live session")
    }

    /// A new attempt: a home connection, then the probe.
    fn begin(&mut self, id: u32, conns: &mut impl Conns) {
        let node = self.session(id).node;
        let free_home = conns
            .conns_of(node)
            .iter()
            .copied()
            .filter(|conn| !self.holders.contains_key(conn))
            .min_by_key(|&conn| conns.load(conn));
        match free_home {
            Some(home) => self.probe(id, home, conns),
            None => {
                self.session(id).phase = Phase::Waiting;
                self.waiting.entry(node).or_default().push_back(id);
            }
        }
    }

    fn probe(&mut self, id: u32, home: usize, conns: &mut impl Conns) {
        self.holders.insert(home, id);
        let session = self.session(id);
        session.home = Some(home);
        session.phase = Phase::Probing;
        session.length = None;
        session.pending = 2;
        let watch = session.command(id, Part::Watch, Command::Watch { key: &session.key }.header());
        let strlen = session.command(id, Part::Strlen, Command::Strlen { key: &session.key }.header());
        let asking = session.asking;
        conns.push(home, watch, asking);
        conns.push(home, strlen, asking);
    }

    /// The home connection is free for the next read waiting for that server.
    fn release_home(&mut self, id: u32, conns: &mut impl Conns) {
        let Some(home) = self.session(id).home.take() else { return };
        self.holders.remove(&home);
        let node = self.session(id).node;
        if let Some(next) = self.waiting.get_mut(&node).and_then(VecDeque::pop_front) {
            self.probe(next, home, conns);
        }
    }

    fn complete(&mut self, tag: u64, answer: Answer, conns: &mut impl Conns, now: Instant, out: &mut Vec<Completion>) {
        let Some((id, attempt, part)) = parse_tag(tag) else { return };
        let Some(Some(session)) = self.sessions.get_mut(id as usize) else { return };
        if session.attempt != attempt {
            return;
        }
        session.pending -= 1;
        session.note(part, answer);
        if session.pending == 0 {
            self.advance(id, conns, now, out);
        }
    }

    /// Every request of the phase has answered: the next phase, or the end.
    fn advance(&mut self, id: u32, conns: &mut impl Conns, now: Instant, out: &mut Vec<Completion>) {
        let session = self.session(id);
        let failed = session.problem.is_some();
        match (session.phase, failed) {
            (Phase::Waiting, _) => unreachable!("a waiting read has nothing in flight"),
            (Phase::Probing | Phase::Reading, true) => self.unwatch_then_retry(id, conns),
            (Phase::Probing, false) => self.after_probe(id, conns),
            (Phase::Reading, false) => {
                let home = session.home.expect("a read in progress holds its home");
                // MULTI leaves only with its EXEC: a connection is never left inside MULTI.
                let multi = session.command(id, Part::Multi, Command::Multi.header()).leaving_with_next();
                let exec = session.command(id, Part::Exec, Command::Exec.header());
                session.phase = Phase::Verifying;
                session.pending = 2;
                conns.push(home, multi, false);
                conns.push(home, exec, false);
                self.release_home(id, conns);
            }
            (Phase::Verifying, true) => self.retry(id, conns, now, out),
            (Phase::Verifying, false) => {
                let length = session.length.expect("verified after the probe");
                self.end(id, Outcome::Hit(length), out);
            }
            (Phase::Whole | Phase::Unwatching, _) => match session.ending.take() {
                Some(outcome) => self.end(id, outcome, out),
                None => self.retry(id, conns, now, out),
            },
        }
    }

    /// The length is known: a miss or a refusal with the destination untouched, one plain GET,
    /// or the pieces.
    fn after_probe(&mut self, id: u32, conns: &mut impl Conns) {
        let node = self.session(id).node;
        // Asked now, not when the read started: a redirect may have moved it to a server of
        // another version.
        let piece_bytes = conns.read_shape(node).piece_bytes();
        let session = self.session(id);
        let length = session.length.expect("the probe answered its length");
        let dest = session.user.destination().expect("a GET has a destination");
        let (home, asking) = (session.home.expect("a probing read holds its home"), session.asking);
        if session.user.exact_length && length != dest.len() {
            // A chunk of another size is not this chunk: a miss, the page untouched.
            return self.unwatch_then_end(id, Outcome::Miss, conns);
        }
        if length > dest.len() {
            let err = Error::value_too_large(length as u64, dest.len() as u64);
            return self.unwatch_then_end(id, Outcome::Failed(err), conns);
        }
        if length < session.written {
            // An earlier attempt wrote past this value's end: no hit can leave the rest of the
            // page as it was.
            let err = session.shorter_than_written(length);
            return self.unwatch_then_end(id, Outcome::Failed(err), conns);
        }
        if length <= piece_bytes {
            // One reply holds it: a plain GET, atomic by itself (an empty string and a missing
            // key both have length 0; GET tells them apart).
            let whole = session.whole(internal_tag(id, session.attempt, Part::Whole));
            let unwatch = session.command(id, Part::Unwatch, Command::Unwatch.header());
            session.phase = Phase::Whole;
            session.pending = 2;
            conns.push(home, whole, asking);
            conns.push(home, unwatch, false);
            return self.release_home(id, conns);
        }
        let pieces: Vec<Request> = (0..length.div_ceil(piece_bytes))
            .map(|i| {
                let start = i * piece_bytes;
                let len = piece_bytes.min(length - start);
                session.piece(internal_tag(id, session.attempt, Part::Piece), start, dest.range(start, len))
            })
            .collect();
        session.phase = Phase::Reading;
        session.pending = pieces.len();
        session.written = session.written.max(length);
        for piece in pieces {
            let conn = conns
                .conns_of(node)
                .iter()
                .copied()
                .min_by_key(|&conn| conns.load(conn))
                .expect("a server has connections");
            conns.push(conn, piece, asking);
        }
    }

    /// Ends the attempt's WATCH, then ends the read with `outcome`.
    fn unwatch_then_end(&mut self, id: u32, outcome: Outcome, conns: &mut impl Conns) {
        self.session(id).ending = Some(outcome);
        self.unwatch(id, conns);
    }

    /// Ends the attempt's WATCH, then starts over (or gives up).
    fn unwatch_then_retry(&mut self, id: u32, conns: &mut impl Conns) {
        self.session(id).ending = None;
        self.unwatch(id, conns);
    }

    fn unwatch(&mut self, id: u32, conns: &mut impl Conns) {
        let session = self.session(id);
        let home = session.home.expect("an attempt holds its home until it ends its WATCH");
        let unwatch = session.command(id, Part::Unwatch, Command::Unwatch.header());
        session.phase = Phase::Unwatching;
        session.pending = 1;
        conns.push(home, unwatch, false);
        self.release_home(id, conns);
    }

    /// Starts the read over, where the key lives now, while time and attempts allow; else
    /// ends it with the last problem.
    fn retry(&mut self, id: u32, conns: &mut impl Conns, now: Instant, out: &mut Vec<Completion>) {
        let session = self.session(id);
        let problem = session.problem.take().unwrap_or(Problem::Changed);
        let redirected = matches!(problem, Problem::Moved | Problem::Asked(_));
        let permanent = matches!(&problem, Problem::Failed(err) if err.kind().is_permanent());
        let allowed = match redirected {
            true => session.redirects < MAX_REDIRECTS,
            false => session.retries + 1 < MAX_ATTEMPTS && !permanent,
        };
        if now < session.user.deadline && allowed {
            session.attempt = session.attempt.wrapping_add(1);
            if redirected {
                session.redirects += 1;
            } else {
                session.retries += 1;
            }
            match problem {
                Problem::Asked(node) => {
                    session.node = node;
                    session.asking = true;
                }
                // Where the key lives now by the map: after a MOVED, its new primary; after a
                // failed part or a changed value, its primary too, never again the node that
                // failed it, which may be a replica loading a resync, cut off from its primary
                // (-MASTERDOWN) or gone. A plain read sent again goes to the primary as well.
                Problem::Moved | Problem::Changed | Problem::Failed(_) => {
                    session.asking = false;
                    match conns.route(&session.key) {
                        Ok(node) => session.node = node,
                        Err(err) => return self.end(id, Outcome::Failed(err), out),
                    }
                }
            }
            return self.begin(id, conns);
        }
        let key = session.key_text();
        let err = match problem {
            Problem::Changed => Error::new(
                ErrorKind::PartialRead,
                format!(
                    "GET {key:?}: the value was replaced or deleted while it was read in pieces, {} times in a row",
                    session.retries + 1
                ),
            ),
            Problem::Failed(err) if now >= session.user.deadline && err.kind() != ErrorKind::Timeout => Error::new(
                ErrorKind::Timeout,
                format!("GET {key:?} timed out while it was read in pieces ({})", err.message()),
            ),
            Problem::Failed(err) => err,
            Problem::Moved | Problem::Asked(_) => Error::new(
                ErrorKind::Server,
                format!("GET {key:?}: the key kept moving between cluster nodes while it was read in pieces"),
            ),
        };
        self.end(id, Outcome::Failed(err), out);
    }

    /// The read is over: the caller's completion, and the session's slot free again.
    fn end(&mut self, id: u32, outcome: Outcome, out: &mut Vec<Completion>) {
        let session = self.sessions[id as usize].take().expect("a live session");
        debug_assert!(session.home.is_none(), "a read ends only after it let go of its home");
        self.free.push(id);
        let outcome = match outcome {
            // Pieces may have written part of a value into the destination: only a whole,
            // verified value may be read from it now, and only one that covers every byte an
            // aborted attempt may have written (past a hit's length, the page is as it was).
            Outcome::Hit(length) if length < session.written => Outcome::Failed(session.shorter_than_written(length)),
            Outcome::Miss if session.written > 0 => Outcome::Failed(Error::new(
                ErrorKind::PartialRead,
                "GET: the value was deleted or changed length while it was read in pieces; the destination holds \
                 part of it: do not read it",
            )),
            Outcome::Failed(err) if session.written > 0 && err.kind() != ErrorKind::PartialRead => {
                Outcome::Failed(Error::new(
                    ErrorKind::PartialRead,
                    format!(
                        "{err}; pieces of the value had already been received into the destination: do not read it"
                    ),
                ))
            }
            outcome => outcome,
        };
        out.push(session.user.completion(outcome));
    }
}

/// What a part of a ranged read came back with.
enum Answer {
    Outcome(Outcome),
    /// Redis Cluster: the key's slot lives elsewhere (the map is updated).
    Moved,
    /// Redis Cluster: the key is being imported by this node.
    Asked(usize),
}

impl Session {
    /// A command of the read's `WATCH` scope on its home connection: it fails if that
    /// connection drops.
    fn command(&self, id: u32, part: Part, frame: Vec<u8>) -> Request {
        let scope = match part {
            Part::Watch => Scope::Opens,
            Part::Strlen | Part::Multi => Scope::Within,
            Part::Exec | Part::Unwatch => Scope::Closes,
            Part::Piece | Part::Whole => Scope::None,
        };
        Request::command(frame, internal_tag(id, self.attempt, part), self.user.deadline).in_scope(scope)
    }

    /// `GETRANGE` of `dest.len()` bytes from `start`, received into `dest`.
    fn piece(&self, tag: u64, start: usize, dest: crate::memory::RawBuf) -> Request {
        let mut piece = Request::range(&self.key, start, dest, tag, self.user.deadline);
        piece.slot = self.user.slot;
        piece
    }

    /// The caller's GET itself, as one plain request of the read.
    fn whole(&self, tag: u64) -> Request {
        let mut whole = Request::new(crate::op::Op::Get, &self.key, self.user.destination(), tag, self.user.deadline)
            .with_exact_length(self.user.exact_length);
        whole.slot = self.user.slot;
        whole
    }

    /// The error of a read whose value became shorter than what an aborted attempt wrote into
    /// the destination: past the new value's end it holds bytes of the earlier one.
    fn shorter_than_written(&self, length: usize) -> Error {
        let key = self.key_text();
        Error::new(
            ErrorKind::PartialRead,
            format!(
                "GET {key:?}: the value was replaced by a shorter one ({length} bytes) while it was read in pieces; \
                 the destination holds bytes of the earlier {}-byte value past the new one's end: do not read it",
                self.written
            ),
        )
    }

    /// The key as messages show it: lossy text, at most 80 characters.
    fn key_text(&self) -> String {
        String::from_utf8_lossy(&self.key).chars().take(80).collect()
    }

    /// Files what one part of the current attempt came back with.
    fn note(&mut self, part: Part, answer: Answer) {
        let outcome = match answer {
            Answer::Moved => return self.problem(Problem::Moved),
            Answer::Asked(node) => return self.problem(Problem::Asked(node)),
            Answer::Outcome(outcome) => outcome,
        };
        match (part, outcome) {
            (Part::Unwatch, _) => {}
            (Part::Whole, outcome) => self.ending = Some(outcome),
            (_, Outcome::Failed(err)) => self.problem(Problem::Failed(err)),
            (Part::Watch | Part::Multi, Outcome::Reply(Reply::Simple(ok))) if ok == b"OK" => {}
            (Part::Strlen, Outcome::Reply(Reply::Integer(n))) if n >= 0 => self.length = Some(n as usize),
            (Part::Piece, Outcome::Hit(_)) => {}
            // A piece of another length: the value changed under the read.
            (Part::Piece, Outcome::Miss) => self.problem(Problem::Changed),
            (Part::Exec, Outcome::Reply(Reply::Array(replies))) if replies.is_empty() => {}
            // EXEC aborted: the key was written (replaced, deleted) since the WATCH.
            (Part::Exec, Outcome::Reply(Reply::NilArray)) => self.problem(Problem::Changed),
            (part, other) => self.problem(Problem::Failed(Error::new(
                ErrorKind::Protocol,
                format!("unexpected reply to a ranged read's {part:?}: {other:?}"),
            ))),
        }
    }

    /// The first problem of an attempt is the one it ends with.
    fn problem(&mut self, problem: Problem) {
        if self.problem.is_none() {
            self.problem = Some(problem);
        }
    }
}

#[cfg(test)]
mod tests;
