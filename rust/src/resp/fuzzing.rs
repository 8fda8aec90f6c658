//! Fuzz bodies, shared by the cargo-fuzz targets (rust/fuzz) and the corpus replay test that
//! CI runs on every build.

use super::decoder::Decoder;
use super::parser::{Limits, ReplyParser};
use super::reply::Reply;

/// What decoding a byte stream produced: the replies, and whether it stopped on an error.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The replies decoded before the end of the stream or the first error.
    pub replies: Vec<Reply>,
    /// Whether decoding stopped on a protocol error.
    pub failed: bool,
}

/// Decodes `stream` delivered in chunks of the given sizes, as a socket would deliver it.
pub fn decode_chunked(stream: &[u8], chunk_sizes: impl FnMut() -> usize) -> Decoded {
    decode_chunked_with(Limits::default(), stream, chunk_sizes)
}

/// [`decode_chunked`] by a parser enforcing `limits`.
pub fn decode_chunked_with(limits: Limits, stream: &[u8], mut chunk_sizes: impl FnMut() -> usize) -> Decoded {
    let mut decoder = Decoder::new(ReplyParser::new(limits));
    let mut pending = Vec::new();
    let mut replies = Vec::new();
    let mut offset = 0;
    while offset < stream.len() {
        let end = stream.len().min(offset.saturating_add(chunk_sizes().max(1)));
        pending.extend_from_slice(&stream[offset..end]);
        offset = end;
        loop {
            match decoder.decode(&pending) {
                Ok((used, reply)) => {
                    pending.drain(..used);
                    match reply {
                        Some(reply) => replies.push(reply),
                        None => break,
                    }
                }
                Err(_) => return Decoded { replies, failed: true },
            }
        }
    }
    Decoded { replies, failed: false }
}

/// The fuzz property: however the input is split, decoding gives the same replies and the
/// same verdict, never panics, and every decoded reply survives re-encoding.
pub fn decode_in_chunks(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = decode_chunked(stream, || usize::MAX);
    let mut state = u32::from(seed) | 0x9e37_0000;
    let split = decode_chunked(stream, || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        // Mostly tiny chunks (splits inside lines and CRLFs), sometimes large ones.
        if state % 8 == 0 { (state % 4096) as usize } else { (state % 7) as usize + 1 }
    });
    assert_eq!(whole, split, "decoding depends on how the input was split");
    for reply in &whole.replies {
        let bytes = reply.to_bytes();
        let again = decode_chunked(&bytes, || usize::MAX);
        assert_eq!(again, Decoded { replies: vec![reply.clone()], failed: false });
    }
}
