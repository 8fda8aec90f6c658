//! Property tests: the parser gives the same replies however the byte stream is split.

use super::fuzzing::{Decoded, decode_chunked, decode_chunked_with, decode_in_chunks};
use super::parser::{ELEMENT_COST, Limits};
use super::reply::Reply;
use proptest::prelude::*;

fn line_text() -> impl Strategy<Value = Vec<u8>> {
    // Simple strings and errors cannot contain CR or LF.
    proptest::collection::vec(any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'), 0..40)
}

fn reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        line_text().prop_map(Reply::Simple),
        line_text().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Reply::Bulk),
        Just(Reply::Nil),
        Just(Reply::NilArray),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| proptest::collection::vec(inner, 0..6).prop_map(Reply::Array))
}

fn encode_all(replies: &[Reply]) -> Vec<u8> {
    let mut out = Vec::new();
    for reply in replies {
        reply.encode(&mut out);
    }
    out
}

fn sample_stream() -> (Vec<Reply>, Vec<u8>) {
    let replies = vec![
        Reply::Simple(b"OK".to_vec()),
        Reply::Bulk(b"a\r\nb".to_vec()),
        Reply::Nil,
        Reply::Integer(-1234567890123),
        Reply::Error(b"WRONGTYPE Operation against a key holding the wrong kind of value".to_vec()),
        Reply::Array(vec![
            Reply::Bulk(Vec::new()),
            Reply::Array(vec![Reply::Nil, Reply::Integer(0)]),
            Reply::NilArray,
            Reply::Bulk(vec![0u8; 70]),
        ]),
        Reply::Bulk(Vec::new()),
        Reply::Array(Vec::new()),
    ];
    let bytes = encode_all(&replies);
    (replies, bytes)
}

#[test]
fn every_single_split_point_gives_the_same_replies() {
    let (replies, bytes) = sample_stream();
    for split in 0..=bytes.len() {
        let mut sizes = [split, usize::MAX].into_iter();
        let decoded = decode_chunked(&bytes, || sizes.next().unwrap_or(usize::MAX));
        assert_eq!(decoded, Decoded { replies: replies.clone(), failed: false }, "split at {split}");
    }
}

#[test]
fn one_byte_at_a_time_gives_the_same_replies() {
    let (replies, bytes) = sample_stream();
    assert_eq!(decode_chunked(&bytes, || 1), Decoded { replies, failed: false });
}

#[test]
fn corrupting_a_stream_never_panics() {
    let (_, bytes) = sample_stream();
    for at in 0..bytes.len() {
        for garbage in [b'\r', b'\n', b'x', b'-', b'9', b'*', 0] {
            let mut data = vec![at as u8];
            data.extend_from_slice(&bytes);
            data[1 + at] = garbage;
            decode_in_chunks(&data);
        }
    }
}

/// What `reply` counts towards `Limits::max_reply_bytes`: its bytes on the wire, less the
/// payload of a top-level bulk string, plus `ELEMENT_COST` per element of every array.
fn counted(reply: &Reply) -> u64 {
    fn elements(reply: &Reply) -> u64 {
        match reply {
            Reply::Array(items) => items.iter().map(|item| 1 + elements(item)).sum(),
            _ => 0,
        }
    }
    let wire = reply.to_bytes().len() as u64;
    let payload = match reply {
        Reply::Bulk(data) => data.len() as u64,
        _ => 0,
    };
    wire - payload + ELEMENT_COST * elements(reply)
}

/// The reply cap holds at every split point: a reply counting exactly the cap is decoded, one
/// byte more is refused, wherever the stream was cut.
#[test]
fn the_reply_cap_holds_at_every_split_point() {
    let reply = Reply::Array(vec![
        Reply::Bulk(b"shard".to_vec()),
        Reply::Array(vec![Reply::Integer(7), Reply::Nil, Reply::Bulk(vec![b'x'; 90])]),
        Reply::Simple(b"OK".to_vec()),
    ]);
    let bytes = reply.to_bytes();
    let size = counted(&reply);
    for (cap, fits) in [(size, true), (size - 1, false)] {
        let limits = Limits { max_reply_bytes: cap, ..Limits::default() };
        for split in 0..=bytes.len() {
            let mut sizes = [split, usize::MAX].into_iter();
            let decoded = decode_chunked_with(limits, &bytes, || sizes.next().unwrap_or(usize::MAX));
            let expected = match fits {
                true => Decoded { replies: vec![reply.clone()], failed: false },
                false => Decoded { replies: vec![], failed: true },
            };
            assert_eq!(decoded, expected, "cap {cap}, split at {split}");
        }
        let one_by_one = decode_chunked_with(limits, &bytes, || 1);
        assert_eq!(one_by_one.failed, !fits, "cap {cap}, one byte at a time");
    }
}

proptest! {
    #[test]
    fn the_reply_cap_is_exact_whatever_the_split(
        replies in proptest::collection::vec(reply(), 1..4),
        slack in 0u64..3,
        chunk_sizes in proptest::collection::vec(1usize..64, 1..50),
    ) {
        // The cap sits at, just below or just above the largest reply: every reply counting
        // no more than the cap is decoded, and decoding stops at the first that counts more.
        let largest = replies.iter().map(counted).max().unwrap();
        let cap = (largest + slack).saturating_sub(1);
        let limits = Limits { max_reply_bytes: cap, ..Limits::default() };
        let fitting: Vec<Reply> = replies.iter().take_while(|r| counted(r) <= cap).cloned().collect();
        let expected = Decoded { failed: fitting.len() < replies.len(), replies: fitting };
        let bytes = encode_all(&replies);
        let mut sizes = chunk_sizes.into_iter().cycle();
        prop_assert_eq!(&decode_chunked_with(limits, &bytes, || sizes.next().unwrap()), &expected);
        prop_assert_eq!(&decode_chunked_with(limits, &bytes, || usize::MAX), &expected);
    }

    #[test]
    fn arbitrary_replies_survive_arbitrary_splits(
        replies in proptest::collection::vec(reply(), 1..6),
        chunk_sizes in proptest::collection::vec(1usize..64, 1..50),
    ) {
        let bytes = encode_all(&replies);
        let mut sizes = chunk_sizes.into_iter().cycle();
        let decoded = decode_chunked(&bytes, || sizes.next().unwrap());
        prop_assert_eq!(decoded, Decoded { replies, failed: false });
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_whatever_the_split(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        decode_in_chunks(&data);
    }
}

#[test]
fn fuzz_corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_replies");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        decode_in_chunks(&std::fs::read(&path).unwrap());
        replayed += 1;
    }
    assert!(replayed >= 10, "expected the seed corpus in {}, found {replayed} files", dir.display());
}
