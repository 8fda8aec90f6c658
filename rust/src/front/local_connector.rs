//! LMCache's connector with the engine in this process: the engine reads and writes the
//! caller's memory (LMCache's pinned pool, SGLang's host pool) in place.

use super::{BufferConnector, RangeBatch};
use crate::capacity::TrackedEngine;
use crate::engine::{Batch, BatchResult, Item, Memory};
use crate::error::{Error, Result};
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

    fn register_region(&self, memory: RawBuf) -> Result<u32> {
        TrackedEngine::register_region(self, memory)
    }

    fn unregister_region(&self, region: u32) -> Result<()> {
        TrackedEngine::unregister_region(self, region)
    }

    fn run_ranges(&self, batch: &RangeBatch<'_>) -> Result<BatchResult> {
        let keys = batch.segment_keys();
        let items = range_items(batch, &keys)?;
        TrackedEngine::run(self, Batch::new(batch.op, &items).with_exact_length(true))
    }

    fn submit_ranges(&self, batch: &RangeBatch<'_>) -> Result<u64> {
        let keys = batch.segment_keys();
        let items = range_items(batch, &keys)?;
        TrackedEngine::submit(self, Batch::new(batch.op, &items).with_exact_length(true))
    }
}

/// The engine's items for `batch`: one per segment key of `keys`, over its span (GET only
/// takes a value of exactly the span's length).
fn range_items<'a>(batch: &RangeBatch<'_>, keys: &'a [Vec<u8>]) -> Result<Vec<Item<'a>>> {
    let spans = batch.spans;
    if batch.op.moves_values() && spans.len() != keys.len() {
        return Err(Error::invalid(format!(
            "{} needs one (offset, length) per segment: {} pages of {} segment(s) but {} spans",
            batch.op.name(),
            batch.keys.len(),
            batch.segments(),
            spans.len()
        )));
    }
    if !batch.op.moves_values() && !spans.is_empty() {
        return Err(Error::invalid(format!("{} takes keys only: {} spans were given", batch.op.name(), spans.len())));
    }
    let region = batch.region;
    Ok(keys
        .iter()
        .enumerate()
        .map(|(i, key)| match spans.get(i) {
            Some(&(offset, len)) => Item { key, memory: Memory::Registered { region, offset, len } },
            None => Item::key_only(key),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Op;

    fn batch<'a>(op: Op, keys: &'a [&'a [u8]], suffixes: &'a [&'a [u8]], spans: &'a [(u64, u64)]) -> RangeBatch<'a> {
        RangeBatch { op, region: 4, prefix: b"ns:", keys, suffixes, spans }
    }

    #[test]
    fn a_range_batch_is_one_item_per_segment_page_by_page() {
        let spans = [(0, 10), (100, 20), (10, 10), (120, 20)];
        let b = batch(Op::Set, &[b"p0", b"p1"], &[b":k", b":v"], &spans);
        let keys = b.segment_keys();
        assert_eq!(keys, [&b"ns:p0:k"[..], b"ns:p0:v", b"ns:p1:k", b"ns:p1:v"]);
        let items = range_items(&b, &keys).unwrap();
        let memory: Vec<Memory> = items.iter().map(|item| item.memory).collect();
        assert_eq!(memory[3], Memory::Registered { region: 4, offset: 120, len: 20 });
        assert_eq!(memory[1], Memory::Registered { region: 4, offset: 100, len: 20 });
        // No suffixes: one segment per page, the page's own key.
        let b = batch(Op::Get, &[b"p0"], &[], &spans[..1]);
        assert_eq!((b.segments(), b.segment_keys()), (1, vec![b"ns:p0".to_vec()]));
    }

    #[test]
    fn spans_must_match_the_segments() {
        let b = batch(Op::Get, &[b"p0", b"p1"], &[b":k", b":v"], &[(0, 1); 3]);
        let err = range_items(&b, &b.segment_keys()).unwrap_err();
        assert!(err.message().contains("2 pages of 2 segment(s) but 3 spans"), "{err}");
        let b = batch(Op::Exists, &[b"p0"], &[], &[(0, 1)]);
        let err = range_items(&b, &b.segment_keys()).unwrap_err();
        assert!(err.message().contains("EXISTS takes keys only"), "{err}");
        let b = batch(Op::Exists, &[b"p0"], &[b":k", b":v"], &[]);
        let keys = b.segment_keys();
        let items = range_items(&b, &keys).unwrap();
        assert!(items.iter().all(|item| item.memory == Memory::None));
    }
}
