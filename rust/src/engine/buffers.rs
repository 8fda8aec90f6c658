//! Caller buffers of the batches in flight, by batch slot and key index.
//!
//! Descriptors never carry an address: a key whose memory is a caller buffer names it by its
//! tag (batch slot, key index), and the worker looks it up here. The table is process memory
//! and holds only buffers of batches that are in flight, each with the access it was
//! registered for, so a descriptor can reach nothing else.

use crate::memory::RawBuf;
use std::sync::{Arc, Mutex};

/// How an operation may use a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Sent from (SET).
    Read,
    /// Received into (GET).
    Write,
}

type SlotBuffers = Arc<[Option<(RawBuf, Access)>]>;

pub struct BufferTable {
    slots: Vec<Mutex<Option<SlotBuffers>>>,
}

impl BufferTable {
    pub fn new(slots: usize) -> BufferTable {
        BufferTable { slots: (0..slots).map(|_| Mutex::new(None)).collect() }
    }

    /// Files the buffers of the batch in `slot`, one entry per key, before its descriptors go
    /// out (the ring's Release/Acquire orders the two).
    pub fn register(&self, slot: u32, buffers: SlotBuffers) {
        *self.lock(slot) = Some(buffers);
    }

    /// The batch in `slot` completed: no worker uses its buffers any more.
    pub fn release(&self, slot: u32) {
        *self.lock(slot) = None;
    }

    /// The buffer of key `index` in `slot`, if it is registered for `access` and holds at
    /// least `len` bytes: then only its first `len` bytes.
    pub fn get(&self, slot: u32, index: u32, access: Access, len: u64) -> Result<RawBuf, String> {
        let guard = self.slots.get(slot as usize).ok_or_else(|| format!("no batch slot {slot}"))?;
        let buffers = guard.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let entry = buffers.as_deref().and_then(|b| b.get(index as usize)).copied().flatten();
        match entry {
            None => Err(format!("key {index} of batch slot {slot} has no buffer registered")),
            Some((_, registered)) if registered != access => {
                Err(format!("key {index} of batch slot {slot}: buffer registered for {registered:?}, not {access:?}"))
            }
            Some((buf, _)) if len > buf.len() as u64 => {
                Err(format!("key {index} of batch slot {slot}: {len} bytes named, the buffer holds {}", buf.len()))
            }
            Some((buf, _)) => Ok(buf.prefix(len as usize)),
        }
    }

    fn lock(&self, slot: u32) -> std::sync::MutexGuard<'_, Option<SlotBuffers>> {
        self.slots[slot as usize].lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_registered_buffers_of_the_right_access_and_size_resolve() {
        let mut memory = vec![0u8; 64];
        // SAFETY: `memory` outlives the table's use below and nothing else touches it.
        let buf = unsafe { RawBuf::new(memory.as_mut_ptr(), memory.len()) };
        let table = BufferTable::new(4);
        assert!(table.get(1, 0, Access::Write, 8).is_err(), "nothing registered");
        table.register(1, Arc::from(vec![Some((buf, Access::Write)), None]));
        assert_eq!(table.get(1, 0, Access::Write, 8).unwrap(), buf.prefix(8));
        assert!(table.get(1, 0, Access::Read, 8).unwrap_err().contains("registered for Write"));
        assert!(table.get(1, 0, Access::Write, 65).unwrap_err().contains("65 bytes named"));
        assert!(table.get(1, 1, Access::Write, 8).is_err(), "a key without a buffer");
        assert!(table.get(1, 2, Access::Write, 8).is_err(), "past the batch");
        assert!(table.get(9, 0, Access::Write, 8).unwrap_err().contains("no batch slot 9"));
        table.release(1);
        assert!(table.get(1, 0, Access::Write, 8).is_err(), "released with its batch");
    }
}
