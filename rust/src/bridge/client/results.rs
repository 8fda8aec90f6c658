//! What comes back: the batches sent and not yet handed out, the completion records the bridge
//! posts to this client's completion ring filed into them (a batch's outcomes may come in
//! several records, and a batch too large for one ring record was sent in pieces, each
//! completing on its own), and the finished batches, for `drain` or for the thread waiting
//! for one. A finished batch's pages are released in the client's ledger as it is filed.

use crate::arena::{Claim, PageLedger};
use crate::bridge::wire;
use crate::conn::Outcome;
use crate::engine::BatchResult;
use crate::error::{Error, ErrorKind, Result};
use crate::op::Op;
use crate::ring::Consumer;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// The completion ring and the batches it completes.
pub(super) struct Results {
    consumer: Consumer,
    record: Vec<u8>,
    /// Batches sent and not yet handed out, with the outcomes of their records so far.
    pending: HashMap<u64, Pending>,
    /// The pieces of batches too large for one ring record, each sent as a batch of its own:
    /// the piece's id -> its batch and where its keys start there.
    pieces: HashMap<u64, Piece>,
    /// Finished batches for `drain`.
    ready: VecDeque<BatchResult>,
    /// Finished batches that a thread waits for.
    waited: HashMap<u64, BatchResult>,
}

/// A piece of a batch, sent as a batch of its own.
struct Piece {
    batch: u64,
    start: usize,
    keys: usize,
}

struct Pending {
    /// A thread waits for it (it is kept from `drain`).
    waited: bool,
    op: Op,
    keys: usize,
    claim: Claim,
    /// The ids its pieces were sent as, if it was split.
    pieces: Vec<u64>,
    /// Outcomes received so far (a batch's outcomes may come in several records).
    outcomes: Vec<Option<Outcome>>,
    filled: usize,
}

impl Results {
    /// Nothing sent yet; completions come through `consumer`.
    pub(super) fn new(consumer: Consumer) -> Results {
        Results {
            consumer,
            record: Vec::new(),
            pending: HashMap::new(),
            pieces: HashMap::new(),
            ready: VecDeque::new(),
            waited: HashMap::new(),
        }
    }

    /// A batch is about to be sent: `keys` keys of `op`, its pages claimed by `claim`, as
    /// `pieces` (more than one: piece `i` is sent as batch `batch + i`). `waited`: a thread
    /// will wait for it (it is kept from `drain`).
    pub(super) fn expect(
        &mut self,
        batch: u64,
        op: Op,
        keys: usize,
        claim: Claim,
        pieces: &[Range<usize>],
        waited: bool,
    ) {
        let piece_ids: Vec<u64> =
            if pieces.len() > 1 { (batch..batch + pieces.len() as u64).collect() } else { vec![] };
        for (&id, range) in piece_ids.iter().zip(pieces) {
            self.pieces.insert(id, Piece { batch, start: range.start, keys: range.len() });
        }
        let pending = Pending { waited, op, keys, claim, pieces: piece_ids, outcomes: vec![None; keys], filled: 0 };
        self.pending.insert(batch, pending);
    }

    /// A batch none of which was sent: forgotten, its claim handed back to release.
    pub(super) fn unsend(&mut self, batch: u64) -> Option<Claim> {
        let pending = self.pending.remove(&batch)?;
        for id in &pending.pieces {
            self.pieces.remove(id);
        }
        Some(pending.claim)
    }

    /// Keys `from..` of a split batch, never sent: failed with `err`.
    pub(super) fn fail_unsent(&mut self, batch: u64, from: usize, err: &Error) {
        if let Some(pending) = self.pending.get_mut(&batch) {
            for slot in &mut pending.outcomes[from..] {
                if slot.replace(Outcome::Failed(err.clone())).is_none() {
                    pending.filled += 1;
                }
            }
        }
    }

    /// Files every completion the bridge posted; a finished batch's claim is released in
    /// `ledger`. A record that does not decode, or names keys its batch does not have, is a
    /// protocol error: the bridge is not to be trusted with this client any further.
    pub(super) fn collect(&mut self, ledger: &PageLedger) -> Result<()> {
        let mut filed = 0;
        loop {
            match self.consumer.try_pop_into(&mut self.record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => return Err(Error::new(ErrorKind::Protocol, format!("completion ring: {err}"))),
            }
            let record = wire::decode_completion_record(&self.record)
                .map_err(|why| Error::new(ErrorKind::Protocol, format!("bad completion: {why}")))?;
            filed += 1;
            let (id, offset, piece_keys) = match self.pieces.get(&record.batch) {
                Some(piece) => (piece.batch, piece.start, Some(piece.keys)),
                None => (record.batch, 0, None),
            };
            let Some(pending) = self.pending.get_mut(&id) else { continue };
            let keys = piece_keys.unwrap_or(pending.keys);
            let (start, total) = (record.start as usize, record.total as usize);
            if total != keys || record.op != pending.op || start + record.outcomes.len() > keys {
                let why = format!(
                    "a completion for batch {} names keys {start}..{} of {total} ({:?}), not of {keys} ({:?})",
                    record.batch,
                    start + record.outcomes.len(),
                    record.op,
                    pending.op
                );
                return Err(Error::new(ErrorKind::Protocol, why));
            }
            for (i, outcome) in record.outcomes.into_iter().enumerate() {
                if pending.outcomes[offset + start + i].replace(outcome).is_none() {
                    pending.filled += 1;
                }
            }
            if pending.filled < pending.keys {
                continue;
            }
            let pending = self.pending.remove(&id).expect("found above");
            for piece in &pending.pieces {
                self.pieces.remove(piece);
            }
            ledger.release(pending.claim);
            let outcomes = pending.outcomes.into_iter().map(|o| o.expect("every outcome filled")).collect();
            self.finish(pending.waited, BatchResult { id, op: pending.op, outcomes });
        }
        if filed > 0 {
            self.consumer.release();
        }
        Ok(())
    }

    fn finish(&mut self, waited: bool, result: BatchResult) {
        if waited {
            self.waited.insert(result.id, result);
        } else {
            self.ready.push_back(result);
        }
    }

    /// The bridge is gone: every batch still pending completes with `err`, key by key, its
    /// claim released in `ledger`.
    pub(super) fn abandon_all(&mut self, err: &Error, ledger: &PageLedger) {
        self.pieces.clear();
        let pending: Vec<(u64, Pending)> = self.pending.drain().collect();
        for (id, pending) in pending {
            ledger.release(pending.claim);
            let outcomes = vec![Outcome::Failed(err.clone()); pending.keys];
            self.finish(pending.waited, BatchResult { id, op: pending.op, outcomes });
        }
    }

    /// Batch `batch`, if it finished (a thread waits for it).
    pub(super) fn take_waited(&mut self, batch: u64) -> Option<BatchResult> {
        self.waited.remove(&batch)
    }

    /// The finished batches for `drain`.
    pub(super) fn take_ready(&mut self) -> Vec<BatchResult> {
        self.ready.drain(..).collect()
    }

    /// Whether finished batches wait for a thread (other than the one asking).
    pub(super) fn any_waited(&self) -> bool {
        !self.waited.is_empty()
    }

    /// Whether finished batches wait to be taken, by `drain` or by a waiting thread.
    pub(super) fn any_finished(&self) -> bool {
        !self.waited.is_empty() || !self.ready.is_empty()
    }

    /// Whether batches sent wait for completions.
    pub(super) fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
// A batch sent whole is one piece: one-element lists of key ranges are meant.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::ring::Producer;
    use crate::ring::test_mem::new_ring;

    /// Results over a fresh completion ring, the bridge's end of it, and a ledger of 8 pages.
    fn results() -> (Results, Producer, PageLedger) {
        let (producer, consumer) = new_ring(1 << 16);
        (Results::new(consumer), producer, PageLedger::new(8))
    }

    /// The bridge posts outcomes `start..` of batch `batch` (of `total` keys).
    fn post(ring: &mut Producer, batch: u64, op: Op, start: usize, total: usize, outcomes: &[Outcome]) {
        for record in wire::encode_completion_run(batch, op, start, total, outcomes, 1 << 12) {
            ring.try_push(&[&record]).unwrap();
        }
        ring.publish();
    }

    fn claim(ledger: &PageLedger, pages: &[u32]) -> Claim {
        ledger.claim(Op::Get, pages, || Ok(())).unwrap()
    }

    #[test]
    fn a_split_batch_finishes_once_every_piece_is_filed_its_outcomes_in_key_order() {
        let (mut results, mut ring, ledger) = results();
        let pieces = [0..2, 2..3];
        results.expect(10, Op::Get, 3, claim(&ledger, &[1, 2, 3]), &pieces, false);
        // The second piece (sent as batch 11) completes first, then half of the first.
        post(&mut ring, 11, Op::Get, 0, 1, &[Outcome::Miss]);
        post(&mut ring, 10, Op::Get, 1, 2, &[Outcome::Hit(5)]);
        results.collect(&ledger).unwrap();
        assert!(results.take_ready().is_empty() && results.any_pending(), "key 0 is still out");
        assert!(!ledger.is_idle(1), "its pages stay busy meanwhile");
        post(&mut ring, 10, Op::Get, 0, 2, &[Outcome::Hit(7)]);
        results.collect(&ledger).unwrap();
        let done = results.take_ready();
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].id, done[0].op), (10, Op::Get));
        assert_eq!(done[0].outcomes, [Outcome::Hit(7), Outcome::Hit(5), Outcome::Miss]);
        assert!([1, 2, 3].iter().all(|&page| ledger.is_idle(page)), "released as it finished");
        assert!(!results.any_pending() && !results.any_finished());
        // A late record for a piece of a finished batch names nothing any more.
        post(&mut ring, 11, Op::Get, 0, 1, &[Outcome::Miss]);
        results.collect(&ledger).unwrap();
        assert!(results.take_ready().is_empty());
    }

    #[test]
    fn a_waited_batch_is_kept_from_drain_for_its_waiter() {
        let (mut results, mut ring, ledger) = results();
        results.expect(1, Op::Exists, 1, claim(&ledger, &[]), &[0..1], true);
        results.expect(2, Op::Exists, 1, claim(&ledger, &[]), &[0..1], false);
        post(&mut ring, 1, Op::Exists, 0, 1, &[Outcome::Bool(true)]);
        post(&mut ring, 2, Op::Exists, 0, 1, &[Outcome::Bool(false)]);
        results.collect(&ledger).unwrap();
        assert!(results.any_waited() && results.any_finished());
        assert_eq!(results.take_ready().iter().map(|r| r.id).collect::<Vec<_>>(), [2]);
        assert!(results.take_waited(2).is_none());
        assert_eq!(results.take_waited(1).unwrap().outcomes, [Outcome::Bool(true)]);
        assert!(!results.any_finished());
    }

    #[test]
    fn a_completion_naming_keys_its_batch_does_not_have_is_a_protocol_error() {
        // (the batch's pieces, the record's batch, its op and total): a batch of 2 keys.
        let cases: [(&[std::ops::Range<usize>], u64, Op, usize); 3] = [
            (&[0..2], 5, Op::Get, 3),       // of a batch of 3 keys
            (&[0..2], 5, Op::Set, 2),       // of another operation
            (&[0..1, 1..2], 6, Op::Get, 2), // of the whole batch, for its one-key second piece
        ];
        for (pieces, batch, op, total) in cases {
            let (mut results, mut ring, ledger) = results();
            results.expect(5, Op::Get, 2, claim(&ledger, &[0, 1]), pieces, false);
            post(&mut ring, batch, op, 0, total, &[Outcome::Miss]);
            let err = results.collect(&ledger).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Protocol);
            assert!(err.message().starts_with(&format!("a completion for batch {batch} names keys")), "{err}");
            assert!(!ledger.is_idle(0), "nothing is released on the word of a bridge that breaks the protocol");
        }
        let (mut results, mut ring, ledger) = results();
        ring.try_push(&[b"not a completion"]).unwrap();
        ring.publish();
        let err = results.collect(&ledger).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert!(err.message().starts_with("bad completion: "), "{err}");
    }

    #[test]
    fn keys_never_sent_fail_and_the_batch_finishes_with_the_pieces_that_were() {
        let (mut results, mut ring, ledger) = results();
        results.expect(20, Op::Set, 3, claim(&ledger, &[4, 5, 6]), &[0..1, 1..3], false);
        let err = Error::new(ErrorKind::Timeout, "the bridge does not take batches");
        results.fail_unsent(20, 1, &err);
        assert!(results.take_ready().is_empty(), "piece 20 is still in the bridge");
        post(&mut ring, 20, Op::Set, 0, 1, &[Outcome::Done]);
        results.collect(&ledger).unwrap();
        let done = results.take_ready();
        assert_eq!(done[0].outcomes, [Outcome::Done, Outcome::Failed(err.clone()), Outcome::Failed(err)]);
        assert!([4, 5, 6].iter().all(|&page| ledger.is_idle(page)));
    }

    #[test]
    fn a_batch_not_sent_is_forgotten_and_its_claim_handed_back() {
        let (mut results, mut ring, ledger) = results();
        results.expect(30, Op::Get, 2, claim(&ledger, &[7, 0]), &[0..1, 1..2], false);
        let claim = results.unsend(30).expect("it was expected");
        assert_eq!(claim.pages(), [7, 0]);
        ledger.release(claim);
        assert!(results.unsend(30).is_none() && !results.any_pending());
        post(&mut ring, 31, Op::Get, 0, 1, &[Outcome::Miss]);
        results.collect(&ledger).unwrap();
        assert!(!results.any_finished(), "its pieces are forgotten too");
    }

    #[test]
    fn when_the_bridge_is_gone_every_pending_batch_fails_key_by_key() {
        let (mut results, mut ring, ledger) = results();
        results.expect(1, Op::Get, 2, claim(&ledger, &[1, 2]), &[0..1, 1..2], true);
        results.expect(3, Op::Del, 1, claim(&ledger, &[]), &[0..1], false);
        post(&mut ring, 1, Op::Get, 0, 1, &[Outcome::Hit(1)]);
        results.collect(&ledger).unwrap();
        let gone = Error::new(ErrorKind::Connection, "the bridge connection is lost: it went away");
        results.abandon_all(&gone, &ledger);
        assert!(!results.any_pending());
        assert_eq!(results.take_waited(1).unwrap().outcomes, vec![Outcome::Failed(gone.clone()); 2]);
        assert_eq!(results.take_ready()[0].outcomes, [Outcome::Failed(gone)]);
        assert!(ledger.is_idle(1) && ledger.is_idle(2));
    }
}
