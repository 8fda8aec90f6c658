//! A reply decoder that collects top-level bulk payloads itself.
//!
//! For replies whose payload has no caller-provided destination (the tests and the
//! fuzzing targets). The data path uses [`ReplyParser`] directly and receives payloads into pages.

use super::parser::{Event, ProtocolError, ReplyParser};
use super::reply::Reply;

/// Turns a byte stream into whole replies, bulk payloads included (see the module
/// documentation).
#[derive(Debug, Default)]
pub struct Decoder {
    parser: ReplyParser,
    payload: Option<Vec<u8>>,
}

impl Decoder {
    /// A decoder over `parser` (which sets the limits).
    pub fn new(parser: ReplyParser) -> Self {
        Decoder { parser, payload: None }
    }

    /// Consumes bytes from `input` until one reply is complete or the input runs out.
    /// Returns the bytes consumed and the reply, if one completed; unconsumed bytes must be
    /// presented again with more input appended.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<Reply>), ProtocolError> {
        let mut pos = 0;
        loop {
            if let Some(remaining) = self.parser.payload_remaining() {
                let take = remaining.min(input.len() - pos);
                self.payload
                    .as_mut()
                    .expect("payload buffer exists while a payload is pending")
                    .extend_from_slice(&input[pos..pos + take]);
                self.parser.consume_payload(take);
                pos += take;
                if take < remaining {
                    return Ok((pos, None));
                }
            }
            let progress = self.parser.parse(&input[pos..])?;
            pos += progress.consumed;
            match progress.event {
                None => return Ok((pos, None)),
                Some(Event::Reply(reply)) => return Ok((pos, Some(reply))),
                Some(Event::BulkStart(len)) => {
                    self.payload = Some(Vec::with_capacity(len.min(1 << 20)));
                }
                Some(Event::BulkEnd) => {
                    let data = self.payload.take().expect("payload buffer exists at BulkEnd");
                    return Ok((pos, Some(Reply::Bulk(data))));
                }
            }
        }
    }
}
