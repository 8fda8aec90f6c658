//! Property tests: the parser gives the same replies however the byte stream is split.

use super::fuzzing::{Decoded, decode_chunked, decode_in_chunks};
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

proptest! {
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
