//! The engine's control memory: each worker's submission and completion ring, and the batch
//! counters. Private anonymous memory, never shared: another process cannot map it, and a
//! forked child gets its own copy-on-write copy. So nothing here can be forged from outside,
//! and nothing from shared memory ever reaches the workers but page bytes.

use crate::error::{Error, Result};
use crate::ring::{self, Consumer, Producer, RING_ALIGN};
use memmap2::{MmapOptions, MmapRaw};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

/// One cache line per batch counter: batches completing on different workers do not
/// false-share.
const COUNTER_STRIDE: usize = 64;

/// The ends of one worker's ring pair.
pub struct RingPair {
    pub submit: Producer,
    pub take: Consumer,
    pub post: Producer,
    pub collect: Consumer,
}

pub struct ControlBlock {
    map: MmapRaw,
    counters_offset: usize,
    slots: usize,
}

impl ControlBlock {
    /// Lays out and initializes `workers` ring pairs and `slots` counters (all zero).
    pub fn create(
        workers: usize,
        submission_capacity: usize,
        completion_capacity: usize,
        slots: usize,
    ) -> Result<(Arc<ControlBlock>, Vec<RingPair>)> {
        let align = |n: usize| n.next_multiple_of(RING_ALIGN);
        let pair = align(ring::ring_size(submission_capacity)) + align(ring::ring_size(completion_capacity));
        let counters_offset = workers.checked_mul(pair).ok_or_else(|| Error::invalid("too many I/O workers"))?;
        let total = slots
            .checked_mul(COUNTER_STRIDE)
            .and_then(|n| n.checked_add(counters_offset))
            .ok_or_else(|| Error::invalid("too many batch slots"))?;
        let map = MmapOptions::new()
            .len(total.max(1))
            .map_anon()
            .map_err(|e| Error::os("cannot map the I/O rings (anonymous memory)", e))?;
        let block = Arc::new(ControlBlock { map: MmapRaw::from(map), counters_offset, slots });
        let owner: Arc<dyn std::any::Any + Send + Sync> = block.clone();
        let mut pairs = Vec::with_capacity(workers);
        for worker in 0..workers {
            let submission = block.base().wrapping_add(worker * pair);
            let completion = submission.wrapping_add(align(ring::ring_size(submission_capacity)));
            let ring_err = |e: ring::RingError| Error::invalid(format!("ring setup: {e}"));
            // SAFETY: both regions lie inside the fresh mapping (the offsets above sum to at
            // most `counters_offset`), are page-aligned plus multiples of RING_ALIGN, and are
            // `ring_size(capacity)` long; nothing else uses them yet. The handles keep the
            // mapping alive through `owner`, and each ring gets exactly one producer and one
            // consumer.
            let pair = unsafe {
                ring::init_ring(submission, submission_capacity);
                ring::init_ring(completion, completion_capacity);
                RingPair {
                    submit: Producer::attach(submission, ring::ring_size(submission_capacity), owner.clone())
                        .map_err(ring_err)?,
                    take: Consumer::attach(submission, ring::ring_size(submission_capacity), owner.clone())
                        .map_err(ring_err)?,
                    post: Producer::attach(completion, ring::ring_size(completion_capacity), owner.clone())
                        .map_err(ring_err)?,
                    collect: Consumer::attach(completion, ring::ring_size(completion_capacity), owner.clone())
                        .map_err(ring_err)?,
                }
            };
            pairs.push(pair);
        }
        Ok((block, pairs))
    }

    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Batch counter `slot`: the keys of the batch still open, and the waiter flag.
    ///
    /// # Panics
    /// If `slot >= slots`.
    pub fn counter(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < self.slots, "batch slot {slot} of {}", self.slots);
        let ptr = self.base().wrapping_add(self.counters_offset + slot * COUNTER_STRIDE);
        // SAFETY: the counter lies inside the mapping, which lives as long as `&self`; it is
        // 64-byte aligned (page-aligned base, offsets in multiples of 64); the memory is only
        // ever accessed through these atomics.
        unsafe { AtomicU32::from_ptr(ptr.cast()) }
    }
}

// SAFETY: the mapping is plain memory owned by the block; all access to it goes through the
// rings (which synchronize with atomics) and the atomic counters.
unsafe impl Send for ControlBlock {}
// SAFETY: as above.
unsafe impl Sync for ControlBlock {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn rings_and_counters_are_usable_and_separate() {
        let (block, mut pairs) = ControlBlock::create(3, 4096, 1024, 10).unwrap();
        for (i, pair) in pairs.iter_mut().enumerate() {
            pair.submit.try_push(&[&[i as u8; 100]]).unwrap();
            pair.submit.publish();
            pair.post.try_push(&[&[0xee; 10]]).unwrap();
            pair.post.publish();
        }
        for (i, pair) in pairs.iter_mut().enumerate() {
            let mut record = Vec::new();
            assert!(pair.take.try_pop_into(&mut record).unwrap());
            assert_eq!(record, vec![i as u8; 100]);
            assert!(pair.collect.try_pop_into(&mut record).unwrap());
            assert_eq!(record, vec![0xee; 10]);
        }
        for slot in 0..10 {
            block.counter(slot).store(slot as u32 + 1, Ordering::Relaxed);
        }
        assert!((0..10).all(|slot| block.counter(slot).load(Ordering::Relaxed) == slot as u32 + 1));
    }
}
