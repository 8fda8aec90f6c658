//! Caller memory registered once and named by offset: SGLang's host KV pool, or any other
//! long-lived region a caller moves many values through (the way the arena's pages are named).
//!
//! A region is registered before its first batch and stays until it is unregistered.
//! Descriptors name `(region id, offset)`, never an address; the worker turns them back into
//! memory here, checked to lie inside the region. Each batch that names a region claims it at
//! submit and lets go when its last key completes, whatever ends it (a reply, a failure, the
//! deadline, the engine failing); unregistering is refused while any batch holds a claim, so
//! the memory cannot be given back while a worker may still read or write it.

use crate::error::{Error, Result};
use crate::memory::RawBuf;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many regions an engine holds at once: a host pool is a handful (K and V, indexer
/// buffers); the bound keeps a leak of registrations from growing the table forever.
pub const MAX_REGIONS: usize = 1024;

/// No region claimed by a batch slot.
const UNCLAIMED: u32 = u32::MAX;

struct Entry {
    memory: RawBuf,
    /// Batches in flight that name this region.
    claims: u32,
}

pub struct RegionTable {
    entries: RwLock<Vec<Option<Entry>>>,
    /// Per batch slot: the region its batch claimed, or [`UNCLAIMED`].
    claimed: Box<[AtomicU32]>,
}

impl RegionTable {
    pub fn new(slots: usize) -> RegionTable {
        RegionTable {
            entries: RwLock::new(Vec::new()),
            claimed: (0..slots).map(|_| AtomicU32::new(UNCLAIMED)).collect(),
        }
    }

    /// Files `memory` as a region; its id names it in batches from now on. The caller keeps
    /// the memory valid until [`RegionTable::unregister`] succeeds (as [`RawBuf::new`] promised).
    pub fn register(&self, memory: RawBuf) -> Result<u32> {
        if memory.is_empty() {
            return Err(Error::invalid("a registered region needs at least one byte"));
        }
        let mut entries = self.write();
        let entry = Some(Entry { memory, claims: 0 });
        if let Some(free) = entries.iter().position(Option::is_none) {
            entries[free] = entry;
            return Ok(free as u32);
        }
        if entries.len() >= MAX_REGIONS {
            return Err(Error::invalid(format!(
                "{MAX_REGIONS} regions are registered already: unregister those no longer used"
            )));
        }
        entries.push(entry);
        Ok(entries.len() as u32 - 1)
    }

    /// Forgets region `id`: refused while a batch in flight names it (wait for those batches,
    /// then unregister), so its memory may be given back once this returns.
    pub fn unregister(&self, id: u32) -> Result<()> {
        let mut entries = self.write();
        match entries.get(id as usize).and_then(Option::as_ref) {
            None => Err(unknown(id)),
            Some(entry) if entry.claims > 0 => Err(Error::invalid(format!(
                "region {id} is in use by {} batch(es) in flight: wait for them before unregistering it",
                entry.claims
            ))),
            Some(_) => {
                entries[id as usize] = None;
                Ok(())
            }
        }
    }

    /// Whether every `(offset, len)` of `ranges` lies inside region `id`: the error names the
    /// first that does not (as key `i` of the batch).
    pub fn check(&self, id: u32, ranges: impl Iterator<Item = (u64, u64)>) -> Result<()> {
        let size = self.size(id).ok_or_else(|| unknown(id))?;
        for (i, (offset, len)) in ranges.enumerate() {
            if offset.checked_add(len).is_none_or(|end| end > size) {
                return Err(Error::invalid(format!(
                    "key {i}: range {offset}+{len} is not inside region {id} ({size} bytes)"
                )));
            }
        }
        Ok(())
    }

    /// The batch in `slot` names region `id`: claims it until [`RegionTable::release`].
    pub fn claim(&self, slot: u32, id: u32) -> Result<()> {
        let mut entries = self.write();
        let entry = entries.get_mut(id as usize).and_then(Option::as_mut).ok_or_else(|| unknown(id))?;
        entry.claims += 1;
        self.claimed[slot as usize].store(id, Ordering::Release);
        Ok(())
    }

    /// The batch in `slot` completed: its claim, if it had one, ends.
    pub fn release(&self, slot: u32) {
        let id = self.claimed[slot as usize].swap(UNCLAIMED, Ordering::AcqRel);
        if id == UNCLAIMED {
            return;
        }
        if let Some(entry) = self.write().get_mut(id as usize).and_then(Option::as_mut) {
            entry.claims -= 1;
        }
    }

    /// The `len` bytes at `offset` of region `id`, if they lie inside it.
    pub fn resolve(&self, id: u32, offset: u64, len: u64) -> std::result::Result<RawBuf, String> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let memory = entries
            .get(id as usize)
            .and_then(Option::as_ref)
            .map(|e| e.memory)
            .ok_or_else(|| format!("region {id} is not registered"))?;
        let inside = offset.checked_add(len).is_some_and(|end| end <= memory.len() as u64);
        if !inside {
            return Err(format!("range {offset}+{len} is not inside region {id} ({} bytes)", memory.len()));
        }
        Ok(memory.range(offset as usize, len as usize))
    }

    /// Bytes of region `id`, if it is registered.
    pub fn size(&self, id: u32) -> Option<u64> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(id as usize).and_then(Option::as_ref).map(|e| e.memory.len() as u64)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Option<Entry>>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn unknown(id: u32) -> Error {
    Error::invalid(format!("region {id} is not registered (or was unregistered)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(memory: &mut [u8]) -> RawBuf {
        // SAFETY: each test's memory outlives the table's use of it and nothing else writes it.
        unsafe { RawBuf::new(memory.as_mut_ptr(), memory.len()) }
    }

    #[test]
    fn ranges_resolve_only_inside_a_registered_region() {
        let mut memory = vec![0u8; 4096];
        let buf = region(&mut memory);
        let table = RegionTable::new(4);
        let id = table.register(buf).unwrap();
        assert_eq!(table.size(id), Some(4096));
        assert_eq!(table.resolve(id, 1024, 512).unwrap(), buf.range(1024, 512));
        assert_eq!(table.resolve(id, 0, 4096).unwrap(), buf);
        assert!(table.resolve(id, 4000, 97).unwrap_err().contains("not inside region"));
        assert!(table.resolve(id, u64::MAX, 2).unwrap_err().contains("not inside region"), "no overflow");
        assert!(table.resolve(id + 1, 0, 1).unwrap_err().contains("not registered"));
        let empty = region(&mut []);
        assert!(table.register(empty).unwrap_err().message().contains("at least one byte"));
    }

    #[test]
    fn a_claimed_region_cannot_be_unregistered_until_its_batch_completes() {
        let mut memory = vec![0u8; 256];
        let table = RegionTable::new(4);
        let id = table.register(region(&mut memory)).unwrap();
        let outside = table.check(id, [(0, 128), (200, 57)].into_iter()).unwrap_err();
        assert!(outside.message().contains("key 1: range 200+57"), "{outside}");
        table.check(id, [(0, 128), (128, 128)].into_iter()).unwrap();
        table.claim(2, id).unwrap();
        table.claim(3, id).unwrap();
        let refused = table.unregister(id).unwrap_err();
        assert!(refused.message().contains("in use by 2 batch(es)"), "{refused}");
        table.release(2);
        table.release(2); // a slot is released once per batch; a second release is a no-op
        assert!(table.unregister(id).unwrap_err().message().contains("in use by 1"));
        table.release(3);
        table.unregister(id).unwrap();
        assert!(table.resolve(id, 0, 1).is_err(), "gone once unregistered");
        assert!(table.unregister(id).unwrap_err().message().contains("not registered"));
        assert!(table.claim(1, id).is_err(), "an unregistered region cannot be claimed");
    }

    #[test]
    fn ids_are_reused_and_bounded() {
        let mut memory = vec![0u8; 8];
        let buf = region(&mut memory);
        let table = RegionTable::new(1);
        let ids: Vec<u32> = (0..MAX_REGIONS).map(|_| table.register(buf).unwrap()).collect();
        assert_eq!(ids, (0..MAX_REGIONS as u32).collect::<Vec<_>>());
        assert!(table.register(buf).unwrap_err().message().contains("regions are registered already"));
        table.unregister(7).unwrap();
        assert_eq!(table.register(buf).unwrap(), 7, "the freed id is taken again");
    }
}
