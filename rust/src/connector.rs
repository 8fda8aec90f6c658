//! Batches over the caller's own memory (LMCache's pinned pool): either the engine in this
//! process reads and writes that memory in place, or a bridge moves it through pages of its
//! shared arena ([`crate::bridge::StagedConnector`]).

use crate::capacity::TrackedEngine;
use crate::conn::Op;
use crate::engine::{Batch, Item, Memory};
use crate::error::{Error, Result};
use crate::handle::EngineHandle;
use crate::memory::RawBuf;

/// What LMCache's native connector needs, wherever the engine runs.
///
/// GET reads a value only when its length is exactly its buffer's (LMCache's chunks have fixed
/// sizes): any other length is a miss. SET stores each buffer whole. EXISTS and DELETE take
/// keys only. Every buffer stays valid until its batch is drained, as [`RawBuf::new`] promised.
pub trait BufferConnector: EngineHandle {
    fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64>;
}

/// Checks the buffers against the operation: one per key for GET and SET, none otherwise.
pub fn check_buffers(op: Op, keys: usize, buffers: usize) -> Result<()> {
    match op {
        Op::Get | Op::Set if buffers != keys => Err(Error::invalid(format!("{keys} keys but {buffers} buffers"))),
        Op::Get | Op::Set => Ok(()),
        _ if buffers > 0 => Err(Error::invalid("exists and delete take keys only, no buffers")),
        _ => Ok(()),
    }
}

impl BufferConnector for TrackedEngine {
    fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64> {
        check_buffers(op, keys.len(), buffers.len())?;
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
