//! LMCache's connector with the engine in this process: the engine reads and writes the
//! caller's memory (LMCache's pinned pool) in place.

use super::BufferConnector;
use crate::capacity::TrackedEngine;
use crate::engine::{Batch, Item, Memory};
use crate::error::Result;
use crate::memory::RawBuf;
use crate::op::{BatchShape, MemoryKind, Op};

impl BufferConnector for TrackedEngine {
    fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64> {
        let memory = MemoryKind::Buffers;
        BatchShape { op, keys, memory, memories: buffers.len(), lengths: None, exact_length: true }.check()?;
        let items: Vec<Item<'_>> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| match buffers.get(i) {
                Some(buffer) => Item { key, memory: Memory::Buffer(*buffer) },
                None => Item::key_only(key),
            })
            .collect();
        TrackedEngine::submit(self, Batch::new(op, &items).with_exact_length(true))
    }
}
