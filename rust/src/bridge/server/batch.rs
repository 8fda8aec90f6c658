//! A client's batch inside the bridge, from its ring to its last completion record, as plain
//! types: the check of the pages it names, and what the bridge keeps of it.
//!
//! What is kept is the submission record as the client wrote it (its copy, taken from the ring
//! and checked once), a cursor to the first key not yet sent, the claim on its pages, and the
//! outcomes of slices that came back ahead of an earlier one: about the record's own bytes per
//! key (20 bytes and the key), plus 4 per page it names. Outcomes go to the client as slices
//! complete, in key order, so nothing per key waits for the whole batch.
//!
//! A batch that fails its check is kept the same way and fails slice by slice, so its
//! completions wait behind the client's outbox bound like everyone else's.

use crate::arena::{Claim, PageHandle, PageLedger, PagePool};
use crate::bridge::wire::{self, KeyEntry, NO_PAGE, SUBMISSION_HEADER, Submission};
use crate::conn::Outcome;
use crate::error::{Error, ErrorKind, Result};
use crate::op::{BatchShape, MemoryKind, Op};
use std::collections::BTreeMap;

/// The batch contract as every front checks it, and every page the client's own in the
/// generation it names (claimed in its ledger, so that it is not freed while in flight), each
/// length within a page. The claim is the batch's until it completes.
pub(super) fn check_pages(
    submission: &Submission<'_>,
    page_size: u64,
    pool: &PagePool,
    ledger: &PageLedger,
) -> Result<Claim> {
    let op = submission.op;
    let keys: Vec<&[u8]> = submission.keys.iter().map(|entry| entry.key).collect();
    let paged: Vec<&KeyEntry<'_>> = submission.keys.iter().filter(|entry| entry.page != NO_PAGE).collect();
    let lengths: Vec<u64> = paged.iter().map(|entry| entry.len).collect();
    BatchShape {
        op,
        keys: &keys,
        memory: MemoryKind::Pages { page_size },
        memories: paged.len(),
        lengths: (op == Op::Set || submission.exact_length).then_some(&lengths[..]),
        exact_length: submission.exact_length,
    }
    .check()?;
    if let Some((i, entry)) = paged.iter().enumerate().find(|(_, e)| e.len > page_size) {
        return Err(Error::invalid(format!("key {i}: {} bytes do not fit a {page_size}-byte page", entry.len)));
    }
    let pages: Vec<u32> = paged.iter().map(|entry| entry.page).collect();
    ledger.claim(op, &pages, || {
        paged.iter().enumerate().try_for_each(|(i, entry)| {
            let handle = PageHandle { pool_id: pool.id(), index: entry.page, generation: entry.generation };
            pool.check(&handle).map_err(|_| {
                Error::new(
                    ErrorKind::Page,
                    format!("key {i}: page {} is not one this client allocated (or it was freed)", entry.page),
                )
            })
        })
    })
}

/// A batch taken from a client's ring.
pub(super) struct QueuedBatch {
    /// The client's id for it.
    pub(super) id: u64,
    /// The relay's id for it, to route slices' results (0 until its first slice).
    pub(super) seq: u64,
    pub(super) op: Op,
    pub(super) exact_length: bool,
    /// The submission record, checked.
    record: Box<[u8]>,
    total: usize,
    /// The first key not yet sent, and where its entry starts in `record`.
    next: usize,
    cursor: usize,
    /// Every key was sent (a batch of no keys: once its empty slice was).
    dispatched: bool,
    /// Why every key of it fails, when it failed its check.
    failure: Option<Error>,
    claim: Option<Claim>,
    /// Outcomes given to the client so far (keys `0..emitted`).
    emitted: usize,
    /// Slices' outcomes that came back ahead of an earlier slice, by their first key, and how
    /// many they are.
    early: BTreeMap<usize, Vec<Outcome>>,
    early_outcomes: usize,
}

/// The keys of one slice: `start..start + keys` of the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SliceKeys {
    pub(super) start: usize,
    pub(super) keys: usize,
    /// Where the entry after the slice starts in the record.
    end_cursor: usize,
}

impl QueuedBatch {
    /// The batch a record holds, checked with `check` (its claim, or why every key fails).
    /// Err: the record does not decode, a broken or hostile client.
    pub(super) fn take(
        record: Vec<u8>,
        max_key_len: usize,
        check: impl FnOnce(&Submission<'_>) -> Result<Claim>,
    ) -> std::result::Result<QueuedBatch, String> {
        let submission = Submission::decode(&record, max_key_len)?;
        let (id, op, exact_length, total) =
            (submission.batch, submission.op, submission.exact_length, submission.keys.len());
        let (claim, failure) = match check(&submission) {
            Ok(claim) => (Some(claim), None),
            Err(err) => (None, Some(err)),
        };
        Ok(QueuedBatch {
            id,
            seq: 0,
            op,
            exact_length,
            record: record.into_boxed_slice(),
            total,
            next: 0,
            cursor: SUBMISSION_HEADER,
            dispatched: false,
            failure,
            claim,
            emitted: 0,
            early: BTreeMap::new(),
            early_outcomes: 0,
        })
    }

    /// Bytes the bridge holds for it (its record; outcomes held early come on top, bounded by
    /// the client's share of keys in flight).
    pub(super) fn footprint(&self) -> usize {
        self.record.len()
    }

    /// Whether keys (or, for a batch of none, its empty completion) are left to send.
    pub(super) fn has_unsent(&self) -> bool {
        !self.dispatched
    }

    /// Why every key fails, if it failed its check.
    pub(super) fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    /// The keys not yet sent, in order.
    pub(super) fn unsent(&self) -> impl Iterator<Item = KeyEntry<'_>> {
        wire::entries_from(&self.record, self.cursor).map(|(entry, _)| entry)
    }

    /// The next `keys` unsent keys as a slice (fewer if fewer are left).
    pub(super) fn slice(&self, keys: usize) -> SliceKeys {
        let mut slice = SliceKeys { start: self.next, keys: 0, end_cursor: self.cursor };
        for (_, end) in wire::entries_from(&self.record, self.cursor).take(keys) {
            slice.keys += 1;
            slice.end_cursor = end;
        }
        slice
    }

    /// The entries of `slice`.
    pub(super) fn entries(&self, slice: &SliceKeys) -> impl Iterator<Item = KeyEntry<'_>> {
        wire::entries_from(&self.record, self.cursor).take(slice.keys).map(|(entry, _)| entry)
    }

    /// `slice` was sent (or failed without being sent): its keys are no longer unsent.
    pub(super) fn sent(&mut self, slice: &SliceKeys) {
        debug_assert_eq!(slice.start, self.next);
        self.next += slice.keys;
        self.cursor = slice.end_cursor;
        self.dispatched = self.next >= self.total;
    }

    /// A slice's outcomes came back: returns the outcomes now due to the client, in key order,
    /// with the first one's index (none while an earlier slice is still out).
    pub(super) fn file(&mut self, start: usize, outcomes: Vec<Outcome>) -> (usize, Vec<Outcome>) {
        let from = self.emitted;
        if start != self.emitted {
            self.early_outcomes += outcomes.len();
            self.early.insert(start, outcomes);
            return (from, Vec::new());
        }
        let mut due = outcomes;
        self.emitted += due.len();
        while let Some(more) = self.early.remove(&self.emitted) {
            self.early_outcomes -= more.len();
            self.emitted += more.len();
            due.extend(more);
        }
        (from, due)
    }

    /// Outcomes held back until an earlier slice's come: they count toward the client's
    /// share of keys, so that a slow slice cannot make them pile up.
    pub(super) fn early_outcomes(&self) -> usize {
        self.early_outcomes
    }

    /// Every key was sent and its outcome given to the client.
    pub(super) fn is_complete(&self) -> bool {
        self.dispatched && self.emitted >= self.total
    }

    /// Keys in the batch.
    pub(super) fn total(&self) -> usize {
        self.total
    }

    /// The claim on its pages, to release once it completes (or its client is retired).
    pub(super) fn take_claim(&mut self) -> Option<Claim> {
        self.claim.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{Arena, ArenaSpec};
    use crate::op::MAX_KEY_LEN;
    use std::sync::Arc;

    fn pool(pages: usize) -> (PagePool, PageLedger) {
        let spec =
            ArenaSpec { page_size: 4096, num_pages: pages, rings: vec![], batch_slots: 0, name_hint: "t".into() };
        let arena = Arc::new(Arena::create(&spec).unwrap());
        (PagePool::new(arena).unwrap(), PageLedger::new(pages))
    }

    fn record(submission: &Submission<'_>) -> Vec<u8> {
        let mut record = Vec::new();
        submission.encode(&mut record);
        record
    }

    fn entry(key: &[u8], page: u32, generation: u32, len: u64) -> KeyEntry<'_> {
        KeyEntry { key, page, generation, len }
    }

    #[test]
    fn a_batch_may_name_only_pages_its_client_holds_in_their_generation() {
        let (pool, ledger) = pool(4);
        let held = pool.allocate_many(2).unwrap();
        let freed = pool.allocate().unwrap();
        pool.free(&freed).unwrap();
        let get =
            |pages: Vec<KeyEntry<'static>>| Submission { batch: 1, op: Op::Get, exact_length: false, keys: pages };
        let keys: [&'static [u8]; 2] = [b"a", b"b"];

        let claim = check_pages(
            &get(vec![
                entry(keys[0], held[0].index, held[0].generation, 4096),
                entry(keys[1], held[1].index, held[1].generation, 4096),
            ]),
            4096,
            &pool,
            &ledger,
        )
        .unwrap();
        assert_eq!(claim.pages(), &[held[0].index, held[1].index]);
        assert!(!ledger.is_idle(held[0].index), "claimed while in flight");

        let cases = [
            (entry(keys[0], freed.index, freed.generation, 16), "not one this client allocated"),
            (entry(keys[0], held[0].index, held[0].generation + 1, 16), "not one this client allocated"),
            (entry(keys[0], 99, 1, 16), "not one this client allocated"),
            (entry(keys[0], held[0].index, held[0].generation, 4097), "do not fit a 4096-byte page"),
        ];
        for (named, why) in cases {
            let err = check_pages(&get(vec![named.clone()]), 4096, &pool, &ledger).unwrap_err();
            assert!(err.message().contains(why), "{named:?}: {err}");
        }
        ledger.release(claim);
        assert!(ledger.is_idle(held[0].index));
        let twice = get(vec![
            entry(keys[0], held[0].index, held[0].generation, 8),
            entry(keys[1], held[0].index, held[0].generation, 8),
        ]);
        let err = check_pages(&twice, 4096, &pool, &ledger).unwrap_err();
        assert!(err.message().contains("appears twice"), "{err}");
        assert!(ledger.is_idle(held[0].index), "a refused batch claims nothing");
    }

    #[test]
    fn a_batch_is_sent_in_slices_walked_from_its_record_and_its_outcomes_go_out_in_key_order() {
        let keys: Vec<Vec<u8>> = (0..10).map(|i| format!("key-{i}").into_bytes()).collect();
        let entries = keys.iter().map(|k| entry(k, NO_PAGE, 0, 0)).collect();
        let submission = Submission { batch: 7, op: Op::Exists, exact_length: false, keys: entries };
        let bytes = record(&submission);
        let footprint = bytes.len();
        let mut batch = QueuedBatch::take(bytes, MAX_KEY_LEN, |_| Ok(Claim::default())).unwrap();
        assert_eq!((batch.id, batch.total(), batch.footprint()), (7, 10, footprint));
        assert_eq!(footprint, wire::SUBMISSION_HEADER + 10 * (wire::ENTRY_HEADER + 5), "the record's bytes, no more");

        let mut slices = Vec::new();
        while batch.has_unsent() {
            let slice = batch.slice(4);
            let names: Vec<&[u8]> = batch.entries(&slice).map(|e| e.key).collect();
            assert_eq!(
                names,
                keys[slice.start..slice.start + slice.keys].iter().map(Vec::as_slice).collect::<Vec<_>>()
            );
            batch.sent(&slice);
            slices.push(slice);
        }
        assert_eq!(slices.iter().map(|s| (s.start, s.keys)).collect::<Vec<_>>(), vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(batch.unsent().count(), 0);

        // The last two slices come back first: nothing is due until the first does.
        let outcomes = |s: &SliceKeys| (s.start..s.start + s.keys).map(|i| Outcome::Bool(i % 2 == 0)).collect();
        assert_eq!(batch.file(8, outcomes(&slices[2])), (0, vec![]));
        assert_eq!(batch.file(4, outcomes(&slices[1])), (0, vec![]));
        assert!(!batch.is_complete());
        assert_eq!(batch.early_outcomes(), 6, "held back, counted");
        let (from, due) = batch.file(0, outcomes(&slices[0]));
        assert_eq!(batch.early_outcomes(), 0);
        assert_eq!(from, 0);
        assert_eq!(due, (0..10).map(|i| Outcome::Bool(i % 2 == 0)).collect::<Vec<_>>());
        assert!(batch.is_complete());
    }

    #[test]
    fn a_batch_that_fails_its_check_keeps_its_reason_and_a_batch_of_no_keys_still_completes() {
        let submission =
            Submission { batch: 3, op: Op::Del, exact_length: false, keys: vec![entry(b"x", NO_PAGE, 0, 0)] };
        let mut batch = QueuedBatch::take(record(&submission), MAX_KEY_LEN, |_| Err(Error::invalid("no"))).unwrap();
        assert_eq!(batch.failure().unwrap().message(), "no");
        assert!(batch.take_claim().is_none());

        let empty = Submission { batch: 4, op: Op::Exists, exact_length: false, keys: vec![] };
        let mut batch = QueuedBatch::take(record(&empty), MAX_KEY_LEN, |_| Ok(Claim::default())).unwrap();
        assert!(batch.has_unsent(), "its (empty) completion is still to send");
        let slice = batch.slice(1024);
        assert_eq!(slice.keys, 0);
        batch.sent(&slice);
        assert_eq!(batch.file(0, vec![]), (0, vec![]));
        assert!(batch.is_complete());

        assert!(QueuedBatch::take(vec![1, 2, 3], MAX_KEY_LEN, |_| Ok(Claim::default())).is_err(), "garbage");
    }
}
