//! Incremental RESP2 reply parser.
//!
//! The parser never owns the receive buffer. `parse` is given whatever bytes have arrived and
//! reports how many it consumed; an incomplete line is left unconsumed for the caller to keep
//! and present again with more bytes appended. Arrays and bulk strings inside arrays are
//! consumed incrementally, so a large nested reply is never re-scanned.
//!
//! A *top-level* bulk string is handed to the caller instead of being collected:
//! [`Event::BulkStart`] announces its length before any payload byte is consumed, the caller
//! moves the payload wherever it wants (a GET reply goes straight from the socket into a
//! KV-cache page) and reports it with [`ReplyParser::consume_payload`], and the parser then
//! checks the CRLF that ends it and reports [`Event::BulkEnd`].

use super::reply::Reply;
use std::fmt;

/// Bounds that keep a broken or hostile peer from making the parser allocate or scan without
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest header, simple-string or error line, CRLF excluded.
    pub max_line: usize,
    /// Largest bulk string accepted.
    pub max_bulk: u64,
    /// Deepest array nesting accepted.
    pub max_depth: usize,
    /// Most elements an array may announce.
    pub max_array_len: u64,
    /// Largest reply accepted, counted as its bytes are consumed: every header, line, nested
    /// bulk payload and CRLF, plus [`ELEMENT_COST`] for each element filed into an array (what
    /// it takes in memory once parsed, so a reply of many tiny elements is bounded as well).
    /// The payload of a top-level bulk string is not counted: the parser never holds it (the
    /// caller moves it into a destination whose size bounds it, or discards it).
    pub max_reply_bytes: u64,
}

/// What one element filed into an array counts towards [`Limits::max_reply_bytes`] beyond its
/// bytes on the wire: the memory its parsed [`Reply`] takes.
pub const ELEMENT_COST: u64 = std::mem::size_of::<Reply>() as u64;

/// The default [`Limits::max_reply_bytes`]: far above any reply this crate asks for (a
/// `CLUSTER SHARDS` of a thousand nodes is a few MiB), far below what would hurt the process.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 64 * 1024,
            max_bulk: 1 << 34,
            max_depth: 32,
            max_array_len: 1 << 32,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

/// `bytes` for a person: `64 MiB`, `16 KiB`, `100 bytes`.
pub fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The byte stream is not valid RESP2 (or breaks a [`Limits`] bound). The connection it came
/// from cannot be trusted to be in sync any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn protocol_error<T>(message: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(message.into()))
}

/// What one call to [`ReplyParser::parse`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A complete reply that is not a top-level bulk string.
    Reply(Reply),
    /// A top-level bulk string of this many bytes starts; its payload is the next bytes of the
    /// stream, to be moved by the caller and reported with [`ReplyParser::consume_payload`].
    BulkStart(usize),
    /// The CRLF after a top-level bulk payload: that reply is complete.
    BulkEnd,
}

/// What one [`ReplyParser::parse`] call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the input consumed; the rest must be presented again.
    pub consumed: usize,
    /// `None` when more input is needed.
    pub event: Option<Event>,
}

#[derive(Debug)]
enum State {
    /// Expecting a type byte and the rest of its line.
    Head,
    /// A top-level bulk payload the caller is moving.
    CallerPayload { remaining: usize },
    /// A bulk payload inside an array, collected here.
    NestedPayload { remaining: usize, data: Vec<u8> },
    /// Expecting the CRLF after a bulk payload.
    Trailer { nested: Option<Vec<u8>> },
}

#[derive(Debug)]
struct PartialArray {
    remaining: usize,
    items: Vec<Reply>,
}

/// Incremental RESP2 reply parser; see the module documentation.
#[derive(Debug)]
pub struct ReplyParser {
    limits: Limits,
    state: State,
    stack: Vec<PartialArray>,
    /// What the reply in progress has counted towards [`Limits::max_reply_bytes`] so far.
    reply_bytes: u64,
}

impl Default for ReplyParser {
    fn default() -> Self {
        ReplyParser::new(Limits::default())
    }
}

impl ReplyParser {
    /// A parser between replies, refusing what exceeds `limits`.
    pub fn new(limits: Limits) -> Self {
        ReplyParser { limits, state: State::Head, stack: Vec::new(), reply_bytes: 0 }
    }

    /// The bounds this parser enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether parsing stopped because the reply in progress outgrew
    /// [`Limits::max_reply_bytes`] (the error [`ReplyParser::parse`] returned says so too).
    pub fn reply_too_large(&self) -> bool {
        self.reply_bytes > self.limits.max_reply_bytes
    }

    /// True between replies: nothing partially parsed.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Head) && self.stack.is_empty()
    }

    /// Payload bytes of the announced top-level bulk string the caller still has to move.
    /// `None` when no caller payload is pending.
    pub fn payload_remaining(&self) -> Option<usize> {
        match self.state {
            State::CallerPayload { remaining } => Some(remaining),
            _ => None,
        }
    }

    /// Reports that the caller moved `n` payload bytes of the pending top-level bulk string.
    ///
    /// # Panics
    /// If no payload is pending or `n` exceeds what remains: that is a bug in the caller.
    pub fn consume_payload(&mut self, n: usize) {
        let State::CallerPayload { remaining } = &mut self.state else {
            panic!("consume_payload called with no bulk payload pending");
        };
        assert!(n <= *remaining, "consumed {n} payload bytes but only {remaining} remain");
        *remaining -= n;
        if *remaining == 0 {
            self.state = State::Trailer { nested: None };
        }
    }

    /// Consumes as much of `input` as forms complete syntax and reports the first event.
    ///
    /// Call again with the unconsumed rest (plus newly received bytes) to continue. Must not be
    /// called while a caller payload is pending ([`ReplyParser::payload_remaining`]).
    pub fn parse(&mut self, input: &[u8]) -> Result<Progress, ProtocolError> {
        let mut pos = 0;
        loop {
            self.check_reply_size(pos)?;
            let rest = &input[pos..];
            match &mut self.state {
                State::CallerPayload { remaining } => {
                    return protocol_error(format!(
                        "parser used while {remaining} payload bytes are still owed by the caller"
                    ));
                }
                State::NestedPayload { remaining, data } => {
                    let take = (*remaining).min(rest.len());
                    data.extend_from_slice(&rest[..take]);
                    *remaining -= take;
                    pos += take;
                    if *remaining > 0 {
                        return self.progress(pos, None);
                    }
                    let data = std::mem::take(data);
                    self.state = State::Trailer { nested: Some(data) };
                }
                State::Trailer { nested } => {
                    if rest.len() < 2 {
                        return self.progress(pos, None);
                    }
                    if &rest[..2] != b"\r\n" {
                        return protocol_error(format!(
                            "bulk string not followed by CRLF (found {:?})",
                            String::from_utf8_lossy(&rest[..2])
                        ));
                    }
                    pos += 2;
                    let nested = nested.take();
                    self.state = State::Head;
                    match nested {
                        None => return self.progress(pos, Some(Event::BulkEnd)),
                        Some(data) => {
                            if let Some(reply) = self.complete(Reply::Bulk(data)) {
                                return self.progress(pos, Some(Event::Reply(reply)));
                            }
                        }
                    }
                }
                State::Head => {
                    // Reject garbage at its first byte rather than waiting for a line end that
                    // may never come.
                    if let Some(&kind) = rest.first() {
                        if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
                            return protocol_error(format!(
                                "unknown reply type byte 0x{kind:02x} ({:?})",
                                char::from(kind)
                            ));
                        }
                    }
                    let Some((kind, line, used)) = split_line(rest, self.limits.max_line)? else {
                        return self.progress(pos, None);
                    };
                    pos += used;
                    if let Some(event) = self.head(kind, line)? {
                        return self.progress(pos, Some(event));
                    }
                }
            }
        }
    }

    /// Ends a call that consumed `pos` bytes with `event`: a finished reply starts the count
    /// of the next one afresh.
    fn progress(&mut self, pos: usize, event: Option<Event>) -> Result<Progress, ProtocolError> {
        self.check_reply_size(pos)?;
        match event {
            Some(Event::Reply(_) | Event::BulkEnd) => self.reply_bytes = 0,
            None | Some(Event::BulkStart(_)) => self.reply_bytes += pos as u64,
        }
        Ok(Progress { consumed: pos, event })
    }

    /// Fails once the reply in progress, with the `pos` bytes this call consumed so far, has
    /// counted more than [`Limits::max_reply_bytes`].
    fn check_reply_size(&mut self, pos: usize) -> Result<(), ProtocolError> {
        let counted = self.reply_bytes + pos as u64;
        if counted <= self.limits.max_reply_bytes {
            return Ok(());
        }
        self.reply_bytes = counted;
        protocol_error(format!(
            "the reply exceeds {}, the cap on the size of one reply",
            size_text(self.limits.max_reply_bytes)
        ))
    }

    fn head(&mut self, kind: u8, line: &[u8]) -> Result<Option<Event>, ProtocolError> {
        let finished = match kind {
            b'+' => self.complete(Reply::Simple(line.to_vec())),
            b'-' => self.complete(Reply::Error(line.to_vec())),
            b':' => self.complete(Reply::Integer(parse_integer(line)?)),
            b'$' => match parse_length(line, self.limits.max_bulk, "bulk string")? {
                None => self.complete(Reply::Nil),
                Some(len) if self.stack.is_empty() => {
                    self.state = if len == 0 {
                        State::Trailer { nested: None }
                    } else {
                        State::CallerPayload { remaining: len }
                    };
                    return Ok(Some(Event::BulkStart(len)));
                }
                Some(len) => {
                    // Capacity follows the bytes actually received, not the announced length.
                    let data = Vec::with_capacity(len.min(64 * 1024));
                    self.state = if len == 0 {
                        State::Trailer { nested: Some(data) }
                    } else {
                        State::NestedPayload { remaining: len, data }
                    };
                    None
                }
            },
            b'*' => match parse_length(line, self.limits.max_array_len, "array")? {
                None => self.complete(Reply::NilArray),
                Some(0) => self.complete(Reply::Array(Vec::new())),
                Some(len) => {
                    if self.stack.len() >= self.limits.max_depth {
                        return protocol_error(format!("arrays nested deeper than {}", self.limits.max_depth));
                    }
                    self.stack.push(PartialArray { remaining: len, items: Vec::with_capacity(len.min(1024)) });
                    None
                }
            },
            other => unreachable!("type byte 0x{other:02x} was checked in parse"),
        };
        Ok(finished.map(Event::Reply))
    }

    /// Files a finished value into the enclosing array, closing every array it completes.
    /// Returns the reply if it completed at top level.
    fn complete(&mut self, mut reply: Reply) -> Option<Reply> {
        loop {
            let Some(top) = self.stack.last_mut() else { return Some(reply) };
            top.items.push(reply);
            self.reply_bytes += ELEMENT_COST;
            top.remaining -= 1;
            if top.remaining > 0 {
                return None;
            }
            let finished = self.stack.pop().expect("stack is not empty");
            reply = Reply::Array(finished.items);
        }
    }
}

/// A reply line: its type byte, its content and the bytes it took including CRLF.
type Line<'a> = (u8, &'a [u8], usize);

/// Splits off `<type byte><line>\r\n`. Returns `None` when the line is not complete yet.
fn split_line(input: &[u8], max_line: usize) -> Result<Option<Line<'_>>, ProtocolError> {
    let Some(&kind) = input.first() else { return Ok(None) };
    // Look no further than a line may reach, so payload bytes after a short header are never
    // scanned.
    let window = &input[..input.len().min(max_line + 3)];
    let Some(newline) = memchr::memchr(b'\n', &window[1..]).map(|i| i + 1) else {
        if window.len() == max_line + 3 {
            return protocol_error(format!("reply line longer than {max_line} bytes"));
        }
        return Ok(None);
    };
    if window[newline - 1] != b'\r' {
        return protocol_error("reply line ends in LF without CR");
    }
    if newline < 2 {
        return protocol_error("reply line ends in LF without CR");
    }
    Ok(Some((kind, &input[1..newline - 1], newline + 1)))
}

fn parse_integer(digits: &[u8]) -> Result<i64, ProtocolError> {
    let (negative, magnitude) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if magnitude.is_empty() || magnitude.len() > 19 {
        return protocol_error(format!("bad integer {:?}", String::from_utf8_lossy(digits)));
    }
    let mut value: i64 = 0;
    for &byte in magnitude {
        if !byte.is_ascii_digit() {
            return protocol_error(format!("bad integer {:?}", String::from_utf8_lossy(digits)));
        }
        let digit = i64::from(byte - b'0');
        value = value
            .checked_mul(10)
            .and_then(|v| if negative { v.checked_sub(digit) } else { v.checked_add(digit) })
            .ok_or_else(|| ProtocolError(format!("integer out of range {:?}", String::from_utf8_lossy(digits))))?;
    }
    Ok(value)
}

/// Parses a bulk or array length: `Ok(None)` for the nil marker `-1`.
fn parse_length(digits: &[u8], max: u64, what: &str) -> Result<Option<usize>, ProtocolError> {
    let value = parse_integer(digits)?;
    if value == -1 {
        return Ok(None);
    }
    let Ok(len) = u64::try_from(value) else {
        return protocol_error(format!("negative {what} length {value}"));
    };
    if len > max {
        return protocol_error(format!("{what} length {len} exceeds the limit of {max}"));
    }
    usize::try_from(len).map(Some).or_else(|_| protocol_error(format!("{what} length {len} does not fit in memory")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Vec<Event> {
        let mut parser = ReplyParser::default();
        let mut pos = 0;
        let mut events = Vec::new();
        loop {
            if let Some(remaining) = parser.payload_remaining() {
                parser.consume_payload(remaining);
                pos += remaining;
                continue;
            }
            let progress = parser.parse(&input[pos..]).expect("valid input");
            pos += progress.consumed;
            match progress.event {
                Some(event) => events.push(event),
                None => break,
            }
        }
        assert_eq!(pos, input.len(), "everything consumed");
        events
    }

    #[test]
    fn top_level_bulk_is_announced_before_its_payload() {
        let mut parser = ReplyParser::default();
        let input = b"$5\r\nhello\r\n";
        let progress = parser.parse(input).unwrap();
        assert_eq!(progress, Progress { consumed: 4, event: Some(Event::BulkStart(5)) });
        assert_eq!(parser.payload_remaining(), Some(5));
        parser.consume_payload(2);
        assert_eq!(parser.payload_remaining(), Some(3));
        parser.consume_payload(3);
        assert_eq!(parser.payload_remaining(), None);
        let progress = parser.parse(b"\r").unwrap();
        assert_eq!(progress, Progress { consumed: 0, event: None });
        let progress = parser.parse(b"\r\n+OK\r\n").unwrap();
        assert_eq!(progress, Progress { consumed: 2, event: Some(Event::BulkEnd) });
        assert!(parser.is_idle());
    }

    #[test]
    fn scalar_replies() {
        assert_eq!(
            parse_all(b"+OK\r\n-ERR no\r\n:-42\r\n$-1\r\n*-1\r\n*0\r\n$0\r\n\r\n"),
            vec![
                Event::Reply(Reply::Simple(b"OK".to_vec())),
                Event::Reply(Reply::Error(b"ERR no".to_vec())),
                Event::Reply(Reply::Integer(-42)),
                Event::Reply(Reply::Nil),
                Event::Reply(Reply::NilArray),
                Event::Reply(Reply::Array(vec![])),
                Event::BulkStart(0),
                Event::BulkEnd,
            ]
        );
    }

    #[test]
    fn nested_bulks_are_collected() {
        let events = parse_all(b"*3\r\n$3\r\nabc\r\n*1\r\n$-1\r\n:7\r\n");
        assert_eq!(
            events,
            vec![Event::Reply(Reply::Array(vec![
                Reply::Bulk(b"abc".to_vec()),
                Reply::Array(vec![Reply::Nil]),
                Reply::Integer(7),
            ]))]
        );
    }

    #[test]
    fn integers_at_the_edges_of_i64() {
        assert_eq!(parse_integer(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_integer(b"-9223372036854775808"), Ok(i64::MIN));
        assert!(parse_integer(b"9223372036854775808").is_err());
        assert!(parse_integer(b"-9223372036854775809").is_err());
        assert!(parse_integer(b"").is_err());
        assert!(parse_integer(b"-").is_err());
        assert!(parse_integer(b"+1").is_err());
        assert!(parse_integer(b"1 ").is_err());
    }

    #[test]
    fn malformed_input_is_rejected_with_a_reason() {
        let cases: &[(&[u8], &str)] = &[
            (b"?x\r\n", "unknown reply type byte 0x3f"),
            (b"+OK\n", "LF without CR"),
            (b"\n", "unknown reply type byte 0x0a"),
            (b"+\n", "LF without CR"),
            (b":12a\r\n", "bad integer"),
            (b"$-2\r\n", "negative bulk string length"),
            (b"*-5\r\n", "negative array length"),
            (b"$99999999999999999\r\n", "exceeds the limit"),
            (b"*1\r\n$1\r\nab\r\n", "not followed by CRLF"),
        ];
        for (input, reason) in cases {
            let mut parser = ReplyParser::default();
            let mut pos = 0;
            let err = loop {
                if let Some(n) = parser.payload_remaining() {
                    parser.consume_payload(n);
                    pos += n;
                }
                match parser.parse(&input[pos..]) {
                    Ok(progress) if progress.event.is_some() => pos += progress.consumed,
                    Ok(_) => panic!("{:?} parsed without error", String::from_utf8_lossy(input)),
                    Err(err) => break err,
                }
            };
            assert!(err.0.contains(reason), "{:?}: {err}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn top_level_payload_trailer_must_be_crlf() {
        let mut parser = ReplyParser::default();
        assert_eq!(parser.parse(b"$1\r\n").unwrap().event, Some(Event::BulkStart(1)));
        parser.consume_payload(1);
        assert!(parser.parse(b"xx").unwrap_err().0.contains("not followed by CRLF"));
    }

    #[test]
    fn limits_bound_lines_and_depth() {
        let limits = Limits { max_line: 8, max_depth: 2, ..Limits::default() };
        let mut parser = ReplyParser::new(limits);
        assert!(parser.parse(b"+0123456789AB").unwrap_err().0.contains("longer than 8"));
        let mut parser = ReplyParser::new(limits);
        // A short incomplete line is simply incomplete.
        assert_eq!(parser.parse(b"+0123").unwrap(), Progress { consumed: 0, event: None });
        let mut parser = ReplyParser::new(limits);
        assert!(parser.parse(b"*1\r\n*1\r\n*1\r\n").unwrap_err().0.contains("nested deeper"));
    }

    #[test]
    fn header_scan_never_runs_into_the_payload() {
        // A 1 MiB payload without a newline after a complete header: parsing the header must
        // not fail with "line too long" because of the payload bytes after it.
        let mut input = b"$1048576\r\n".to_vec();
        input.resize(input.len() + (1 << 20), b'x');
        let mut parser = ReplyParser::new(Limits { max_line: 16, ..Limits::default() });
        assert_eq!(parser.parse(&input).unwrap().event, Some(Event::BulkStart(1 << 20)));
    }

    /// Feeds an endless array of bulk strings, 64 KiB at a time, as a hostile peer would send
    /// it; returns the error and how many bytes the parser took before it.
    fn feed_endless_array(parser: &mut ReplyParser, element: &[u8]) -> (ProtocolError, u64) {
        let mut chunk = b"*4294967295\r\n".to_vec();
        let mut fed = 0u64;
        loop {
            while chunk.len() < 64 * 1024 {
                chunk.extend_from_slice(element);
            }
            let mut pos = 0;
            loop {
                match parser.parse(&chunk[pos..]) {
                    Ok(progress) => {
                        assert_eq!(progress.event, None, "an endless array never completes");
                        pos += progress.consumed;
                        if progress.consumed == 0 {
                            break;
                        }
                    }
                    Err(err) => return (err, fed + pos as u64),
                }
            }
            fed += pos as u64;
            chunk.drain(..pos);
            assert!(fed < 1 << 30, "the parser took 1 GiB of one reply without refusing it");
        }
    }

    #[test]
    fn an_endless_array_is_refused_at_the_reply_cap() {
        // Bulk strings, and tiny elements (whose parsed form takes more memory than their
        // bytes on the wire): both stop at the default 64 MiB.
        for element in [&b"$40\r\n0123456789012345678901234567890123456789\r\n"[..], b":1\r\n", b"$0\r\n\r\n"] {
            let mut parser = ReplyParser::default();
            let (err, fed) = feed_endless_array(&mut parser, element);
            assert!(err.0.contains("exceeds 64 MiB, the cap on the size of one reply"), "{err}");
            assert!(parser.reply_too_large());
            assert!(fed <= DEFAULT_MAX_REPLY_BYTES + 64 * 1024, "{fed} bytes taken");
            // The call that failed took up to one more chunk: counted with its elements' memory,
            // what was taken reaches the cap.
            let per_element = element.len() as u64 + ELEMENT_COST;
            let counted = (fed + 64 * 1024) / element.len() as u64 * per_element;
            assert!(counted >= DEFAULT_MAX_REPLY_BYTES - per_element, "refused early: {fed} bytes");
        }
    }

    #[test]
    fn the_cap_counts_one_reply_and_not_a_top_level_payload() {
        let limits = Limits { max_reply_bytes: 128, ..Limits::default() };
        let mut parser = ReplyParser::new(limits);
        // A bulk payload far larger than the cap goes to the caller (a GET into its page).
        assert_eq!(parser.parse(b"$1000000\r\n").unwrap().event, Some(Event::BulkStart(1_000_000)));
        parser.consume_payload(1_000_000);
        assert_eq!(parser.parse(b"\r\n").unwrap().event, Some(Event::BulkEnd));
        // Replies under the cap, one after the other: each is counted on its own (this one: 25
        // bytes and two elements).
        let small = b"*2\r\n$10\r\n0123456789\r\n:1\r\n";
        for _ in 0..100 {
            assert!(matches!(parser.parse(small).unwrap().event, Some(Event::Reply(_))));
        }
        assert!(!parser.reply_too_large());
        let mut large = b"*2\r\n$80\r\n".to_vec();
        large.extend_from_slice(&[b'x'; 80]);
        large.extend_from_slice(b"\r\n:1\r\n");
        let err = parser.parse(&large).unwrap_err();
        assert!(err.0.contains("exceeds 128 bytes"), "{err}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size_text(64 << 20), "64 MiB");
        assert_eq!(size_text(16 << 10), "16 KiB");
        assert_eq!(size_text(100), "100 bytes");
        assert_eq!(size_text((1 << 20) + 1), "1048577 bytes");
    }

    #[test]
    #[should_panic(expected = "only 2 remain")]
    fn consuming_more_payload_than_announced_is_a_caller_bug() {
        let mut parser = ReplyParser::default();
        parser.parse(b"$2\r\n").unwrap();
        parser.consume_payload(3);
    }

    #[test]
    fn parse_while_payload_is_owed_is_refused() {
        let mut parser = ReplyParser::default();
        parser.parse(b"$2\r\n").unwrap();
        assert!(parser.parse(b"ab\r\n").unwrap_err().0.contains("still owed"));
    }
}
