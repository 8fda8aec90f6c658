//! Batches in flight: their slots, per-key results as completions arrive, and the finished
//! batches waiting to be handed out. Process-local; guarded by the engine's front-end lock.

use crate::conn::Outcome;
use crate::op::Op;
use std::collections::VecDeque;

/// How the submitter learns that its batch finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Through `drain`, announced on the completion eventfd.
    Drain,
    /// A thread waits for this one batch (futex on its counter).
    Wait,
    /// Nobody collects it (the engine's own eviction DELs): forgotten when it completes.
    Discard,
}

/// A finished batch: one outcome per key, in the order the keys were submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchResult {
    /// The id the submission returned.
    pub id: u64,
    /// The batch's operation.
    pub op: Op,
    /// One outcome per key.
    pub outcomes: Vec<Outcome>,
}

impl BatchResult {
    /// Whether no key failed (a miss is not a failure).
    pub fn all_succeeded(&self) -> bool {
        self.outcomes.iter().all(Outcome::is_success)
    }
}

struct Batch {
    id: u64,
    op: Op,
    outcomes: Vec<Option<Outcome>>,
    arrived: usize,
    delivery: Delivery,
    /// Its waiter gave up; free the slot when the batch completes.
    abandoned: bool,
}

impl Batch {
    fn is_complete(&self) -> bool {
        self.arrived == self.outcomes.len()
    }

    fn into_result(self) -> BatchResult {
        let outcomes = self.outcomes.into_iter().map(|o| o.expect("complete batch has every outcome")).collect();
        BatchResult { id: self.id, op: self.op, outcomes }
    }
}

pub struct Batches {
    slots: Vec<Option<Batch>>,
    free: Vec<u32>,
    ready: VecDeque<BatchResult>,
}

/// What recording an outcome did.
#[derive(Debug, PartialEq, Eq)]
pub enum Recorded {
    Pending,
    /// The batch completed (and, for `Drain` delivery, is now ready).
    Completed,
}

impl Batches {
    pub fn new(slots: usize) -> Batches {
        Batches {
            slots: (0..slots).map(|_| None).collect(),
            free: (0..slots as u32).rev().collect(),
            ready: VecDeque::new(),
        }
    }

    /// Takes a slot for a new batch of `keys` keys; `None` when every slot is in use.
    ///
    /// A batch is complete once its last completion is filed, but the worker that posted it
    /// counts it off the slot's counter only afterwards: a slot is reused only once
    /// `counted_off(slot)` says its counter is back at zero, or the late count-off would land
    /// on the next batch's counter and lose this batch's wake-up.
    pub fn open(
        &mut self,
        id: u64,
        op: Op,
        keys: usize,
        delivery: Delivery,
        counted_off: impl Fn(u32) -> bool,
    ) -> Option<u32> {
        let at = self.free.iter().rposition(|&slot| counted_off(slot))?;
        let slot = self.free.swap_remove(at);
        self.slots[slot as usize] =
            Some(Batch { id, op, outcomes: vec![None; keys], arrived: 0, delivery, abandoned: false });
        if keys == 0 {
            self.complete(slot);
        }
        Some(slot)
    }

    /// Files one key's outcome.
    pub fn record(&mut self, slot: u32, index: u32, outcome: Outcome) -> Result<Recorded, String> {
        let batch = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| format!("completion for unused batch slot {slot}"))?;
        let keys = batch.outcomes.len();
        let entry = batch
            .outcomes
            .get_mut(index as usize)
            .ok_or_else(|| format!("completion for key {index} of a {keys}-key batch"))?;
        if entry.is_some() {
            return Err(format!("second completion for key {index} of batch {}", batch.id));
        }
        *entry = Some(outcome);
        batch.arrived += 1;
        if batch.is_complete() {
            self.complete(slot);
            return Ok(Recorded::Completed);
        }
        Ok(Recorded::Pending)
    }

    fn complete(&mut self, slot: u32) {
        let batch = self.slots[slot as usize].as_ref().expect("completing a used slot");
        if batch.abandoned || batch.delivery != Delivery::Wait {
            let batch = self.slots[slot as usize].take().expect("used slot");
            self.free.push(slot);
            if !batch.abandoned && batch.delivery == Delivery::Drain {
                self.ready.push_back(batch.into_result());
            }
        }
    }

    /// The result of a `Wait` batch, once complete; frees its slot.
    pub fn take_completed(&mut self, slot: u32) -> Option<BatchResult> {
        let complete = self.slots[slot as usize].as_ref().is_some_and(Batch::is_complete);
        if !complete {
            return None;
        }
        self.free.push(slot);
        self.slots[slot as usize].take().map(Batch::into_result)
    }

    /// The waiter of `slot` gives up; the slot is freed when the batch completes.
    pub fn abandon(&mut self, slot: u32) {
        if let Some(batch) = self.slots[slot as usize].as_mut() {
            batch.abandoned = true;
        }
    }

    /// The engine stopped: every key still open fails with `err`, and its batch completes.
    /// Returns the slots that completed.
    pub fn fail_open(&mut self, err: &crate::error::Error) -> Vec<u32> {
        let open: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&slot| self.slots[slot as usize].as_ref().is_some_and(|b| !b.is_complete()))
            .collect();
        for &slot in &open {
            let batch = self.slots[slot as usize].as_mut().expect("open slot");
            for outcome in batch.outcomes.iter_mut().filter(|o| o.is_none()) {
                *outcome = Some(Outcome::Failed(err.clone()));
                batch.arrived += 1;
            }
            self.complete(slot);
        }
        open
    }

    pub fn take_ready(&mut self) -> Vec<BatchResult> {
        self.ready.drain(..).collect()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_not_reused_before_its_counter_is_counted_off() {
        let mut batches = Batches::new(2);
        let first = batches.open(1, Op::Get, 1, Delivery::Drain, |_| true).unwrap();
        assert_eq!(batches.record(first, 0, Outcome::Miss), Ok(Recorded::Completed));
        // The batch is complete and its slot free, but its worker has not counted it off yet.
        let second = batches.open(2, Op::Get, 1, Delivery::Drain, |slot| slot != first).unwrap();
        assert_ne!(second, first);
        assert_eq!(batches.open(3, Op::Get, 1, Delivery::Drain, |slot| slot != first), None);
        assert_eq!(batches.open(3, Op::Get, 1, Delivery::Drain, |_| true), Some(first));
    }

    #[test]
    fn a_drain_batch_is_ready_once_every_key_arrived_in_key_order() {
        let mut batches = Batches::new(2);
        let slot = batches.open(41, Op::Get, 3, Delivery::Drain, |_| true).unwrap();
        assert_eq!(batches.record(slot, 2, Outcome::Miss), Ok(Recorded::Pending));
        assert_eq!(batches.record(slot, 0, Outcome::Hit(5)), Ok(Recorded::Pending));
        assert!(!batches.has_ready());
        assert_eq!(batches.record(slot, 1, Outcome::Hit(7)), Ok(Recorded::Completed));
        let ready = batches.take_ready();
        assert_eq!(
            ready,
            vec![BatchResult { id: 41, op: Op::Get, outcomes: vec![Outcome::Hit(5), Outcome::Hit(7), Outcome::Miss] }]
        );
        assert_eq!(batches.free.len(), batches.slots.len());
    }

    #[test]
    fn a_wait_batch_stays_until_taken() {
        let mut batches = Batches::new(1);
        let slot = batches.open(1, Op::Set, 1, Delivery::Wait, |_| true).unwrap();
        assert_eq!(batches.open(2, Op::Set, 1, Delivery::Wait, |_| true), None, "only one slot");
        assert_eq!(batches.take_completed(slot), None);
        batches.record(slot, 0, Outcome::Done).unwrap();
        assert!(!batches.has_ready());
        assert_eq!(batches.take_completed(slot).unwrap().outcomes, vec![Outcome::Done]);
        assert!(batches.open(3, Op::Set, 0, Delivery::Wait, |_| true).is_some(), "slot reusable");
    }

    #[test]
    fn empty_batches_complete_at_once_and_abandoned_ones_free_their_slot() {
        let mut batches = Batches::new(1);
        batches.open(9, Op::Exists, 0, Delivery::Drain, |_| true).unwrap();
        assert_eq!(batches.take_ready()[0].outcomes, vec![]);
        let slot = batches.open(10, Op::Get, 1, Delivery::Wait, |_| true).unwrap();
        batches.abandon(slot);
        batches.record(slot, 0, Outcome::Miss).unwrap();
        assert_eq!(batches.free.len(), batches.slots.len());
        assert!(!batches.has_ready());
    }

    #[test]
    fn discarded_batches_free_their_slot_without_a_result() {
        let mut batches = Batches::new(1);
        let slot = batches.open(4, Op::Del, 2, Delivery::Discard, |_| true).unwrap();
        batches.record(slot, 0, Outcome::Bool(true)).unwrap();
        batches.record(slot, 1, Outcome::Bool(false)).unwrap();
        assert!(!batches.has_ready());
        assert_eq!(batches.take_completed(slot), None);
        assert!(batches.open(5, Op::Del, 1, Delivery::Drain, |_| true).is_some(), "the slot was freed");
    }

    #[test]
    fn failing_open_batches_completes_each_with_the_error_for_the_keys_left() {
        let mut batches = Batches::new(3);
        let waited = batches.open(1, Op::Get, 2, Delivery::Wait, |_| true).unwrap();
        let drained = batches.open(2, Op::Set, 1, Delivery::Drain, |_| true).unwrap();
        batches.record(waited, 0, Outcome::Hit(3)).unwrap();
        let err = crate::error::Error::new(crate::error::ErrorKind::EngineFailed, "worker died");
        let mut failed = batches.fail_open(&err);
        failed.sort();
        assert_eq!(failed, vec![waited.min(drained), waited.max(drained)]);
        let result = batches.take_completed(waited).unwrap();
        assert_eq!(result.outcomes, vec![Outcome::Hit(3), Outcome::Failed(err.clone())]);
        assert_eq!(batches.take_ready()[0].outcomes, vec![Outcome::Failed(err.clone())]);
        assert!(batches.fail_open(&err).is_empty(), "nothing left open");
    }

    #[test]
    fn bad_completions_are_reported_not_applied() {
        let mut batches = Batches::new(1);
        let slot = batches.open(1, Op::Get, 1, Delivery::Drain, |_| true).unwrap();
        assert!(batches.record(slot, 5, Outcome::Miss).unwrap_err().contains("key 5 of a 1-key batch"));
        assert!(batches.record(0, 0, Outcome::Miss).is_ok());
        assert!(batches.record(0, 0, Outcome::Miss).unwrap_err().contains("unused batch slot"));
    }
}
