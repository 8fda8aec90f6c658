//! The submission side of the front-end: checking a batch, opening its slot, filing its
//! buffers, and pushing its descriptors into the workers' rings, tile by tile.

use super::batches::{self, Delivery};
use super::buffers::Access;
use super::counter;
use super::records::{Descriptor, FLAG_EXACT_LENGTH, Region, Tag};
use super::tiling::{self, tile};
use super::{Batch, Engine, Lane, Memory};
use crate::clock;
use crate::conn::Outcome;
use crate::error::{Error, ErrorKind, Result};
use crate::op::{BatchShape, MemoryKind, Op};
use crate::ring::PushError;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A batch submitted to be waited for: [`Engine::wait`] takes it.
#[derive(Debug)]
pub struct Ticket {
    /// The batch's id, unique for the engine's lifetime.
    pub id: u64,
    pub(super) slot: u32,
}

impl Engine {
    /// Submits a batch whose result is collected by [`Engine::drain`]; returns its id (unique
    /// for the engine's lifetime). Blocks only while the rings are full (backpressure).
    pub fn submit(&self, batch: Batch<'_>) -> Result<u64> {
        Ok(self.submit_with(batch, Delivery::Drain)?.0)
    }

    /// Submits a batch to be waited for with [`Engine::wait`].
    pub(crate) fn submit_waiting(&self, batch: Batch<'_>) -> Result<Ticket> {
        let (id, slot) = self.submit_with(batch, Delivery::Wait)?;
        Ok(Ticket { id, slot })
    }

    /// Submits a batch nobody collects (background work, such as eviction's DELs).
    pub fn submit_detached(&self, batch: Batch<'_>) -> Result<()> {
        self.submit_with(batch, Delivery::Discard).map(drop)
    }

    /// Submits a batch and waits for its result.
    pub fn run(&self, batch: Batch<'_>) -> Result<batches::BatchResult> {
        let ticket = self.submit_waiting(batch)?;
        self.wait(ticket)
    }

    fn submit_with(&self, batch: Batch<'_>, delivery: Delivery) -> Result<(u64, u32)> {
        self.check_usable()?;
        self.validate(&batch)?;
        let items = batch.items;
        let deadline = Instant::now() + self.timeout;
        let deadline_ns = clock::now_ns() + self.timeout.as_nanos() as u64;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = self.open_batch(id, batch.op, items.len(), delivery, deadline)?;
        self.shared.metrics.on_submit(slot, batch.op, deadline_ns - self.timeout.as_nanos() as u64);
        if items.is_empty() {
            if delivery == Delivery::Drain {
                self.shared.completion_event.signal();
            }
            return Ok((id, slot));
        }
        let access = if batch.op == Op::Get { Access::Write } else { Access::Read };
        if items.iter().any(|item| matches!(item.memory, Memory::Buffer(_))) {
            let buffers: Arc<[_]> = items
                .iter()
                .map(|item| match item.memory {
                    Memory::Buffer(buf) => Some((buf, access)),
                    _ => None,
                })
                .collect();
            self.shared.buffers.register(slot, buffers);
        }
        // Discarded batches need no wake-up; the futex flag keeps them off the eventfd.
        let armed = counter::armed(items.len() as u32, delivery != Delivery::Drain);
        self.shared.counter(slot).store(armed, Ordering::Release);
        if let Some(region) = registered_region(items) {
            // Checked in `validate`; only an unregister racing this submit fails here: the batch
            // completes failed, and nobody waits for it.
            if let Err(err) = self.shared.regions.claim(slot, region) {
                self.lock_front().batches.abandon(slot);
                self.fail_locally(slot, 0..items.len(), err.clone());
                return Err(err);
            }
        }

        let tiles = if batch.op == Op::Ping {
            // PING batches open and check every connection: they must reach every worker.
            tiling::spread_evenly(items.len(), self.lanes.len())
        } else {
            let sizes: Vec<u64> = items.iter().map(|item| item.len()).collect();
            tile(&sizes, self.lanes.len())
        };
        let flags = if batch.exact_length && batch.op == Op::Get { FLAG_EXACT_LENGTH } else { 0 };
        let first = self.next_lane.fetch_add(1, Ordering::Relaxed);
        for (i, range) in tiles.into_iter().enumerate() {
            if range.is_empty() {
                continue;
            }
            let lane_index = (first + i) % self.lanes.len();
            let mut lane = self.lanes[lane_index].lock().unwrap_or_else(|p| p.into_inner());
            let mut index = range.start;
            while index < range.end {
                if self.shared.sealed.load(Ordering::Acquire) {
                    let err = self.shared.failure().cloned().unwrap_or_else(|| Error::closed("the store"));
                    self.fail_locally(slot, index..range.end, err);
                    break;
                }
                let item = &items[index];
                let (region, offset, region_id) = match item.memory {
                    Memory::None => (Region::None, 0, 0),
                    Memory::Arena { offset, .. } => (Region::Arena, offset, 0),
                    Memory::Buffer(_) => (Region::Buffer, 0, 0),
                    Memory::Registered { region, offset, .. } => (Region::Registered, offset, region),
                };
                let descriptor = Descriptor {
                    op: batch.op,
                    tag: Tag { slot, index: index as u32 },
                    region,
                    flags,
                    offset,
                    region_id,
                    len: item.len(),
                    deadline_ns,
                    key: item.key,
                };
                let header = descriptor.header_with_prefix(&self.key_prefix);
                match lane.producer.try_push(&[&header, &self.key_prefix, item.key]) {
                    Ok(()) => index += 1,
                    Err(PushError::Full) => {
                        lane.producer.publish();
                        lane.doorbell.signal();
                        if !self.wait_for_room(&mut lane, deadline) {
                            let err = self.shared.failure().cloned().unwrap_or_else(|| {
                                Error::new(
                                    ErrorKind::Timeout,
                                    format!(
                                        "timed out after {:.3} s queueing for the I/O workers of {}",
                                        self.timeout.as_secs_f64(),
                                        self.endpoint
                                    ),
                                )
                            });
                            self.fail_locally(slot, index..range.end, err);
                            break;
                        }
                    }
                    Err(PushError::TooLarge { .. }) => {
                        let err = Error::invalid(format!(
                            "key of {} bytes does not fit a ring record",
                            self.key_prefix.len() + item.key.len()
                        ));
                        self.fail_locally(slot, index..index + 1, err);
                        index += 1;
                    }
                    Err(PushError::Corrupt(what)) => {
                        self.shared
                            .fail(Error::new(ErrorKind::EngineFailed, format!("submission ring corrupt: {what}")));
                        self.fail_locally(slot, index..range.end, self.shared.failure().cloned().expect("just failed"));
                        break;
                    }
                }
            }
            lane.producer.publish();
            lane.doorbell.signal();
        }
        Ok((id, slot))
    }

    fn validate(&self, batch: &Batch<'_>) -> Result<()> {
        if batch.items.len() > counter::COUNT_MASK as usize {
            return Err(Error::invalid("a batch holds at most 2^31 - 1 keys"));
        }
        let keys: Vec<&[u8]> = batch.items.iter().map(|item| item.key).collect();
        let arena = batch.items.iter().any(|item| matches!(item.memory, Memory::Arena { .. }));
        let region = registered_region(batch.items);
        let memory = match (arena, region) {
            (true, _) => {
                MemoryKind::Pages { page_size: self.shared.pages.as_ref().map_or(0, |a| a.page_size() as u64) }
            }
            (false, Some(_)) => MemoryKind::Ranges,
            (false, None) => MemoryKind::Buffers,
        };
        let memories = batch.items.iter().filter(|item| item.memory != Memory::None).count();
        BatchShape { op: batch.op, keys: &keys, memory, memories, lengths: None, exact_length: batch.exact_length }
            .check()?;
        for (i, item) in batch.items.iter().enumerate() {
            if let Memory::Arena { offset, len } = item.memory {
                self.check_page_range(offset, len).map_err(|e| e.context(format!("key {i}")))?;
            }
        }
        if let Some(region) = region {
            self.check_one_region(batch.items, region)?;
        }
        Ok(())
    }

    /// A batch names at most one registered region (its claim is one per batch), every range
    /// inside it, and no other kind of memory beside it.
    fn check_one_region(&self, items: &[super::Item<'_>], region: u32) -> Result<()> {
        let mut ranges = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item.memory {
                Memory::Registered { region: other, offset, len } if other == region => ranges.push((offset, len)),
                Memory::Registered { region: other, .. } => {
                    return Err(Error::invalid(format!(
                        "key {i} names region {other} but key 0 names region {region}: a batch uses one region"
                    )));
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "key {i}: a batch over a registered region names ranges of it for every key"
                    )));
                }
            }
        }
        self.shared.regions.check(region, ranges.into_iter())
    }

    /// `offset..offset+len` must lie inside one page of the arena.
    pub(super) fn check_page_range(&self, offset: u64, len: u64) -> Result<()> {
        let Some(arena) = self.shared.pages.as_ref() else {
            return Err(Error::invalid("this engine has no page arena"));
        };
        let inside = arena.page_index_of_offset(offset).is_some_and(|page| {
            let page_end = arena.page_offset(page) + arena.page_size() as u64;
            offset.checked_add(len).is_some_and(|end| end <= page_end)
        });
        if inside {
            Ok(())
        } else {
            Err(Error::invalid(format!("memory range {offset}+{len} is not inside one page of the arena")))
        }
    }

    fn open_batch(&self, id: u64, op: Op, keys: usize, delivery: Delivery, deadline: Instant) -> Result<u32> {
        let mut pause = Duration::from_micros(50);
        loop {
            {
                let mut front = self.lock_front();
                let counted_off = |slot| !counter::is_open(self.shared.counter(slot).load(Ordering::Acquire));
                if let Some(slot) = front.batches.open(id, op, keys, delivery, counted_off) {
                    return Ok(slot);
                }
                self.collect(&mut front);
            }
            if let Some(err) = self.shared.failure() {
                return Err(err.clone());
            }
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "timed out waiting for a free batch slot: too many batches in flight",
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Waits until the lane's ring has room again. While it waits it files completions, so a
    /// submitter that is also the only drainer cannot deadlock against full completion rings.
    fn wait_for_room(&self, lane: &mut Lane, deadline: Instant) -> bool {
        let mut pause = Duration::from_micros(20);
        loop {
            if let Ok(mut front) = self.front.try_lock() {
                self.collect(&mut front);
                if front.batches.has_ready() {
                    self.shared.completion_event.signal();
                }
            }
            if lane.producer.free_bytes() >= lane.producer.capacity() / 4 {
                return true;
            }
            if Instant::now() >= deadline || self.shared.sealed.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Completes keys that never reached a worker.
    fn fail_locally(&self, slot: u32, keys: std::ops::Range<usize>, err: Error) {
        let count = keys.len() as u32;
        if count == 0 {
            return;
        }
        {
            let mut front = self.lock_front();
            for index in keys {
                self.file(&mut front, slot, index as u32, Outcome::Failed(err.clone()));
            }
        }
        if self.shared.count_off(slot, count) {
            self.shared.completion_event.signal();
        }
    }
}

/// The registered region the batch names, if any (its first item's: `validate` checks the
/// rest agree).
fn registered_region(items: &[super::Item<'_>]) -> Option<u32> {
    items.iter().find_map(|item| match item.memory {
        Memory::Registered { region, .. } => Some(region),
        _ => None,
    })
}
