//! A batch into this client's submission ring: each key described by its page and length, the
//! batch split into records that fit a quarter of the ring, and each record pushed while the
//! bridge takes them, ringing its doorbell.

use super::link::Link;
use crate::arena::PageHandle;
use crate::bridge::signal::SignalEnd;
use crate::bridge::wire::{self, KeyEntry, NO_PAGE, Submission};
use crate::error::{Error, ErrorKind, Result};
use crate::op::Op;
use crate::ring::{Producer, PushError};
use std::ops::Range;
use std::time::{Duration, Instant};

/// The batch's records: each key with its page and length (EXISTS and DEL: no page). A page's
/// length is `lengths[i]`, the whole page by default.
pub(super) fn entries<'k>(
    keys: &[&'k [u8]],
    pages: &[PageHandle],
    lengths: Option<&[u64]>,
    page_size: u64,
) -> Vec<KeyEntry<'k>> {
    keys.iter()
        .enumerate()
        .map(|(i, key)| match pages.get(i) {
            Some(page) => KeyEntry {
                key,
                page: page.index,
                generation: page.generation,
                len: lengths.map_or(page_size, |lengths| lengths[i]),
            },
            None => KeyEntry { key, page: NO_PAGE, generation: 0, len: 0 },
        })
        .collect()
}

/// The key ranges a batch is sent in: one, unless its description passes `budget` bytes (a
/// quarter of the ring, so that a piece never waits for the whole ring to drain); then pieces
/// of at most that, each at least one key.
pub(super) fn split_for_ring(entries: &[KeyEntry<'_>], budget: usize) -> Vec<Range<usize>> {
    let mut pieces = Vec::new();
    let (mut start, mut bytes) = (0, wire::SUBMISSION_HEADER);
    for (i, entry) in entries.iter().enumerate() {
        let cost = wire::ENTRY_HEADER + entry.key.len();
        if i > start && bytes + cost > budget {
            pieces.push(start..i);
            (start, bytes) = (i, wire::SUBMISSION_HEADER);
        }
        bytes += cost;
    }
    pieces.push(start..entries.len());
    pieces
}

/// The submission records of a batch sent as `pieces`, the first numbered `first` and each
/// next piece one more.
pub(super) fn records(
    op: Op,
    exact_length: bool,
    entries: &[KeyEntry<'_>],
    pieces: &[Range<usize>],
    first: u64,
) -> Vec<Vec<u8>> {
    pieces
        .iter()
        .zip(first..)
        .map(|(range, batch)| {
            let mut record = Vec::new();
            Submission { batch, op, exact_length, keys: entries[range.clone()].to_vec() }.encode(&mut record);
            record
        })
        .collect()
}

/// Pushes one record, waiting for room until `deadline` (the bridge must be alive meanwhile):
/// a full ring is published and the doorbell rung, so that the bridge makes room.
pub(super) fn push(
    producer: &mut Producer,
    record: &[u8],
    deadline: Instant,
    doorbell: &SignalEnd,
    link: &Link,
) -> Result<()> {
    loop {
        match producer.try_push(&[record]) {
            Ok(()) => return Ok(()),
            Err(PushError::Full) => {
                producer.publish();
                doorbell.signal();
                link.alive()?;
                if Instant::now() >= deadline {
                    return Err(Error::new(ErrorKind::Timeout, "the bridge does not take batches"));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(err) => {
                return Err(link.fail(Error::new(ErrorKind::Protocol, format!("submission ring: {err:?}"))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[u8]) -> KeyEntry<'_> {
        KeyEntry { key, page: NO_PAGE, generation: 0, len: 0 }
    }

    #[test]
    fn a_batch_is_split_only_past_the_budget_and_every_piece_fits_it() {
        let keys: Vec<Vec<u8>> = (0..1000).map(|i| format!("key-{i:04}").into_bytes()).collect();
        let entries: Vec<KeyEntry<'_>> = keys.iter().map(|k| entry(k)).collect();
        let cost = wire::ENTRY_HEADER + 8;
        assert_eq!(split_for_ring(&entries, 1 << 20), vec![0..1000]);
        assert_eq!(split_for_ring(&[], 64), vec![0..0], "an empty batch is one empty piece");
        let budget = wire::SUBMISSION_HEADER + 100 * cost;
        let pieces = split_for_ring(&entries, budget);
        assert_eq!(pieces.len(), 10);
        assert!(pieces.windows(2).all(|w| w[0].end == w[1].start) && pieces[9].end == 1000);
        for record in records(Op::Exists, false, &entries, &pieces, 1) {
            assert!(record.len() <= budget, "{} bytes", record.len());
        }
        let big = vec![b'k'; 500];
        assert_eq!(
            split_for_ring(&[entry(&big), entry(b"a")], 64),
            vec![0..1, 1..2],
            "a key larger than the budget goes alone"
        );
    }

    #[test]
    fn each_piece_is_numbered_from_the_first_and_carries_its_keys_pages_and_lengths() {
        let keys: [&[u8]; 3] = [b"a", b"bb", b"ccc"];
        let pages =
            [PageHandle { pool_id: 1, index: 4, generation: 9 }, PageHandle { pool_id: 1, index: 6, generation: 2 }];
        let whole = entries(&keys, &pages, None, 4096);
        assert_eq!(
            whole.iter().map(|e| (e.page, e.generation, e.len)).collect::<Vec<_>>(),
            [(4, 9, 4096), (6, 2, 4096), (NO_PAGE, 0, 0)],
            "a key past the pages has none"
        );
        let sized = entries(&keys[..2], &pages, Some(&[10, 20]), 4096);
        assert_eq!(sized.iter().map(|e| e.len).collect::<Vec<_>>(), [10, 20]);
        let sent = records(Op::Get, true, &whole, &[0..2, 2..3], 41);
        let decoded: Vec<Submission<'_>> =
            sent.iter().map(|record| Submission::decode(record, crate::op::MAX_KEY_LEN).unwrap()).collect();
        assert_eq!(decoded.iter().map(|s| s.batch).collect::<Vec<_>>(), [41, 42]);
        assert!(decoded.iter().all(|s| s.op == Op::Get && s.exact_length));
        assert_eq!(decoded[0].keys, whole[0..2]);
        assert_eq!(decoded[1].keys, whole[2..3]);
    }
}
