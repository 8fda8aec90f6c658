//! The receive side of a connection, without I/O: a small scratch buffer for reply headers, and
//! payloads received straight into their destination.
//!
//! The driver asks [`Reader::recv_target`] where the next bytes from the socket go (a slice of
//! scratch, or a range of the destination page), receives into it, and reports the count with
//! [`Reader::received`]; [`Reader::next_event`] then turns buffered bytes into replies.

use crate::memory::RawBuf;
use crate::resp::{Event, Limits, ProtocolError, Reply, ReplyParser};

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
    /// Any reply but a top-level bulk string.
    Reply(Reply),
    /// A bulk string: its length, and whether it fitted the destination and was received into
    /// it (`false`: there was no destination, it was too small, or an exact-length GET got
    /// another length; the payload was discarded).
    Bulk {
        /// The bulk string's length.
        len: usize,
        /// Whether it was received into the destination.
        fitted: bool,
    },
}

/// Where the next bytes read from the socket go.
pub enum RecvTarget<'a> {
    /// Into the reader's scratch buffer (headers, short replies, discarded payloads).
    Scratch(&'a mut [u8]),
    /// Straight into `dest[offset..offset + len]`: the payload of the reply being received.
    Payload {
        /// The destination page or buffer.
        dest: RawBuf,
        /// Where in it the next byte goes.
        offset: usize,
        /// Bytes of the payload still to come.
        len: usize,
    },
}

enum Sink {
    None,
    Into { dest: RawBuf, written: usize },
    Discard,
}

/// The receive state of one connection.
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
            // Allocated on the first read (see `recv_target`): a connection that never
            // connects, such as one to a dead node of a large cluster map, costs nothing here.
            scratch: Box::default(),
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
    /// A reader that refuses a reply of more than `max_reply_bytes` (see
    /// [`Limits::max_reply_bytes`]).
    pub fn capped(max_reply_bytes: u64) -> Reader {
        let limits = Limits { max_reply_bytes, ..*Reader::default().parser.limits() };
        Reader { parser: ReplyParser::new(limits), ..Reader::default() }
    }

    /// Forgets everything: the connection this reader served is gone.
    pub fn reset(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        let limits = *self.parser.limits();
        *self = Reader { scratch, parser: ReplyParser::new(limits), ..Reader::default() };
    }

    /// Nothing buffered and no reply half-parsed.
    pub fn is_idle(&self) -> bool {
        self.start == self.end && self.parser.is_idle()
    }

    /// The cap on one reply's size, once a reply outgrew it (the error that
    /// [`Reader::next_event`] returned was that).
    pub fn reply_cap_exceeded(&self) -> Option<u64> {
        self.parser.reply_too_large().then(|| self.parser.limits().max_reply_bytes)
    }

    /// Bytes of a payload written so far into the oldest request's destination, the rest not
    /// arrived yet (0: none): if the connection breaks now, the destination holds that much of
    /// a partial value.
    pub fn partially_written(&self) -> usize {
        match self.sink {
            Sink::Into { written, .. } => written,
            _ => 0,
        }
    }

    /// Turns buffered bytes into the next reply, without I/O. `dest` is where a bulk reply to
    /// the oldest outstanding request belongs (its GET destination); with `exact`, only a
    /// payload of exactly its length is received there. `Ok(None)`: more bytes are needed.
    pub fn next_event(&mut self, dest: Option<RawBuf>, exact: bool) -> Result<Option<ReadEvent>, ProtocolError> {
        loop {
            if let Some(remaining) = self.parser.payload_remaining() {
                let buffered = (self.end - self.start).min(remaining);
                if buffered == 0 {
                    return Ok(None);
                }
                if let Sink::Into { dest, written } = &mut self.sink {
                    dest.write_at(*written, &self.scratch[self.start..self.start + buffered]);
                    *written += buffered;
                }
                self.start += buffered;
                self.parser.consume_payload(buffered);
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
                None => return Ok(None),
            }
        }
    }

    /// Where the next bytes from the socket go, once [`Reader::next_event`] has used up what is
    /// buffered. `dest_len`: the size of the oldest request's destination, if any (a large one
    /// gets only a peek into scratch before its header, so its payload lands in place).
    pub fn recv_target(&mut self, dest_len: Option<usize>) -> Result<RecvTarget<'_>, ProtocolError> {
        if let (Some(remaining), Sink::Into { dest, written }) = (self.parser.payload_remaining(), &self.sink) {
            debug_assert_eq!(self.start, self.end, "buffered payload is moved before reading more");
            return Ok(RecvTarget::Payload { dest: *dest, offset: *written, len: remaining });
        }
        if self.scratch.is_empty() {
            self.scratch = vec![0; SCRATCH].into_boxed_slice();
        }
        let limit = match (self.parser.payload_remaining(), dest_len) {
            (None, Some(len)) if len >= DIRECT_MIN => PEEK,
            _ => SCRATCH,
        };
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
            return Err(ProtocolError("reply header does not fit the receive buffer".into()));
        }
        Ok(RecvTarget::Scratch(&mut self.scratch[self.end..self.end + room]))
    }

    /// The bytes of the value being received in place that have not arrived yet (None while
    /// a header, a small value or anything buffered is being read).
    pub fn payload_in_place(&self) -> Option<usize> {
        match (self.parser.payload_remaining(), &self.sink) {
            (Some(remaining), Sink::Into { .. }) if self.start == self.end => Some(remaining),
            _ => None,
        }
    }

    /// `n` bytes arrived where the last [`Reader::recv_target`] said.
    pub fn received(&mut self, n: usize) {
        match (self.parser.payload_remaining(), &mut self.sink) {
            (Some(_), Sink::Into { written, .. }) if self.start == self.end => {
                *written += n;
                self.parser.consume_payload(n);
            }
            _ => self.end += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of at most `step` bytes, as a socket would deliver it.
    fn feed(reader: &mut Reader, mut input: &[u8], step: usize, dest: Option<RawBuf>, exact: bool) -> Vec<ReadEvent> {
        let mut events = Vec::new();
        loop {
            while let Some(event) = reader.next_event(dest, exact).unwrap() {
                events.push(event);
            }
            if input.is_empty() {
                return events;
            }
            let n = match reader.recv_target(dest.map(|d| d.len())).unwrap() {
                RecvTarget::Scratch(buf) => {
                    let n = buf.len().min(step).min(input.len());
                    buf[..n].copy_from_slice(&input[..n]);
                    n
                }
                RecvTarget::Payload { dest, offset, len } => {
                    let n = len.min(step).min(input.len());
                    dest.write_at(offset, &input[..n]);
                    n
                }
            };
            reader.received(n);
            input = &input[n..];
        }
    }

    fn raw(buf: &mut [u8]) -> RawBuf {
        // SAFETY: the test keeps `buf` alive and untouched while the reader writes into it.
        unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }
    }

    #[test]
    fn a_payload_lands_in_its_destination_whatever_the_read_sizes() {
        let value: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        let mut wire = format!("${}\r\n", value.len()).into_bytes();
        wire.extend_from_slice(&value);
        wire.extend_from_slice(b"\r\n+OK\r\n");
        for step in [1, 3, 64, 1000, 1 << 20] {
            let mut page = vec![0u8; 50_000];
            let dest = raw(&mut page);
            let mut reader = Reader::default();
            let events = feed(&mut reader, &wire, step, Some(dest), false);
            assert_eq!(events[0], ReadEvent::Bulk { len: value.len(), fitted: true }, "step {step}");
            assert_eq!(&page[..value.len()], &value[..], "step {step}");
            assert!(page[value.len()..].iter().all(|b| *b == 0));
            assert_eq!(events[1], ReadEvent::Reply(Reply::Simple(b"OK".to_vec())));
            assert!(reader.is_idle());
        }
    }

    #[test]
    fn an_exact_length_get_of_another_length_leaves_the_destination_untouched() {
        let mut page = vec![0x5au8; 32_768];
        let dest = raw(&mut page);
        let mut reader = Reader::default();
        let mut wire = b"$20000\r\n".to_vec();
        wire.extend(std::iter::repeat_n(1u8, 20_000));
        wire.extend_from_slice(b"\r\n");
        let events = feed(&mut reader, &wire, 4096, Some(dest), true);
        assert_eq!(events, [ReadEvent::Bulk { len: 20_000, fitted: false }]);
        assert!(page.iter().all(|b| *b == 0x5a));
    }

    #[test]
    fn a_half_received_payload_is_reported_as_partial() {
        let mut page = vec![0u8; 32_768];
        let dest = raw(&mut page);
        let mut reader = Reader::default();
        let mut wire = b"$32768\r\n".to_vec();
        wire.extend(std::iter::repeat_n(9u8, 1000));
        assert!(feed(&mut reader, &wire, 512, Some(dest), false).is_empty());
        assert_eq!(reader.partially_written(), 1000);
        reader.reset();
        assert!(reader.partially_written() == 0 && reader.is_idle());
    }
}
