//! The receive side of a connection: a small scratch buffer for reply headers, and payloads
//! received straight into their destination.

use crate::memory::RawBuf;
use crate::net::Stream;
use crate::resp::{Event, Limits, ProtocolError, Reply, ReplyParser};
use std::io;

/// Scratch for reply headers, short replies and payload bytes that arrive together with them.
const SCRATCH: usize = 64 * 1024;
/// Destinations at least this large get their payload received in place: before their header
/// arrives, only [`PEEK`] bytes are read into scratch, so at most that many payload bytes are
/// copied; the rest goes from the socket straight into the page.
const DIRECT_MIN: usize = 16 * 1024;
/// Enough for a CRLF, a `$<20 digits>\r\n` header and a little more.
const PEEK: usize = 64;

/// One reply, as the connection needs to see it.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadEvent {
    Reply(Reply),
    /// A bulk string: its length, and whether it fitted the destination and was received into
    /// it (`false`: there was no destination, it was too small, or an exact-length GET got
    /// another length; the payload was discarded).
    Bulk {
        len: usize,
        fitted: bool,
    },
}

#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The server closed the connection.
    Eof,
    Protocol(ProtocolError),
}

impl From<io::Error> for ReadError {
    fn from(err: io::Error) -> Self {
        ReadError::Io(err)
    }
}

impl From<ProtocolError> for ReadError {
    fn from(err: ProtocolError) -> Self {
        ReadError::Protocol(err)
    }
}

enum Sink {
    None,
    Into { dest: RawBuf, written: usize },
    Discard,
}

pub struct Reader {
    scratch: Box<[u8]>,
    start: usize,
    end: usize,
    parser: ReplyParser,
    sink: Sink,
    bulk_len: usize,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            scratch: vec![0; SCRATCH].into_boxed_slice(),
            start: 0,
            end: 0,
            // A line must fit the scratch buffer with room to spare.
            parser: ReplyParser::new(Limits { max_line: SCRATCH / 4, ..Limits::default() }),
            sink: Sink::None,
            bulk_len: 0,
        }
    }
}

impl Reader {
    /// Forgets everything: the connection this reader served is gone.
    pub fn reset(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        *self = Reader { scratch, ..Reader::default() };
    }

    /// Nothing buffered and no reply half-parsed.
    pub fn is_idle(&self) -> bool {
        self.start == self.end && self.parser.is_idle()
    }

    /// Part of a payload has been written into the oldest request's destination and the rest
    /// has not arrived: if the connection breaks now, the destination holds a partial value.
    pub fn wrote_partially(&self) -> bool {
        matches!(self.sink, Sink::Into { written, .. } if written > 0)
    }

    /// Reads until one reply is complete. `dest` is where a bulk reply to the oldest
    /// outstanding request belongs (its GET destination); with `exact`, only a payload of
    /// exactly its length is received there. Returns `Ok(None)` when the socket has nothing
    /// more now or `budget` bytes have been read in this turn.
    pub fn next(
        &mut self,
        stream: &Stream,
        dest: Option<RawBuf>,
        exact: bool,
        budget: &mut usize,
    ) -> Result<Option<ReadEvent>, ReadError> {
        loop {
            if let Some(remaining) = self.parser.payload_remaining() {
                if !self.move_payload(stream, remaining, budget)? {
                    return Ok(None);
                }
                continue;
            }
            let progress = self.parser.parse(&self.scratch[self.start..self.end])?;
            self.start += progress.consumed;
            match progress.event {
                Some(Event::Reply(reply)) => return Ok(Some(ReadEvent::Reply(reply))),
                Some(Event::BulkStart(len)) => {
                    self.bulk_len = len;
                    self.sink = match dest {
                        Some(dest) if len == dest.len() || (len < dest.len() && !exact) => {
                            Sink::Into { dest, written: 0 }
                        }
                        _ => Sink::Discard,
                    };
                }
                Some(Event::BulkEnd) => {
                    let fitted = matches!(self.sink, Sink::Into { .. });
                    self.sink = Sink::None;
                    return Ok(Some(ReadEvent::Bulk { len: self.bulk_len, fitted }));
                }
                None => {
                    let big_payload_next = dest.is_some_and(|d| d.len() >= DIRECT_MIN);
                    if !self.fill(stream, if big_payload_next { PEEK } else { SCRATCH }, budget)? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Moves pending payload bytes: first those already in scratch, then straight from the
    /// socket into the destination. Returns false when the socket would block or the budget is
    /// spent.
    fn move_payload(&mut self, stream: &Stream, remaining: usize, budget: &mut usize) -> Result<bool, ReadError> {
        let buffered = (self.end - self.start).min(remaining);
        if buffered > 0 {
            if let Sink::Into { dest, written } = &mut self.sink {
                dest.write_at(*written, &self.scratch[self.start..self.start + buffered]);
                *written += buffered;
            }
            self.start += buffered;
            self.parser.consume_payload(buffered);
            return Ok(true);
        }
        match &mut self.sink {
            Sink::Into { dest, written } => {
                if *budget == 0 {
                    return Ok(false);
                }
                let received = match stream.recv_into(*dest, *written, remaining) {
                    Ok(0) => return Err(ReadError::Eof),
                    Ok(n) => n,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(err) => return Err(err.into()),
                };
                *written += received;
                *budget = budget.saturating_sub(received);
                self.parser.consume_payload(received);
                Ok(true)
            }
            Sink::Discard => self.fill(stream, SCRATCH, budget),
            Sink::None => unreachable!("a payload is pending only after BulkStart chose a sink"),
        }
    }

    /// Reads up to `limit` more bytes into scratch. Returns false when the socket would block
    /// or the budget is spent.
    fn fill(&mut self, stream: &Stream, limit: usize, budget: &mut usize) -> Result<bool, ReadError> {
        if *budget == 0 {
            return Ok(false);
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.scratch.len() - self.end < PEEK.max(limit.min(SCRATCH / 2)) {
            self.scratch.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let room = (self.scratch.len() - self.end).min(limit);
        if room == 0 {
            // The parser's line limit is a quarter of scratch, so this cannot happen with a
            // compacted buffer; refuse rather than spin.
            return Err(ProtocolError("reply header does not fit the receive buffer".into()).into());
        }
        match stream.recv(&mut self.scratch[self.end..self.end + room]) {
            Ok(0) => Err(ReadError::Eof),
            Ok(n) => {
                self.end += n;
                *budget = budget.saturating_sub(n);
                Ok(true)
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}
