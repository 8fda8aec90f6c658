//! Heap memory for rings in tests, aligned like an arena slot.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::Arc;

use super::{Consumer, Producer, RING_ALIGN, init_ring, ring_size};

/// A zeroed, `RING_ALIGN`-aligned heap block, freed on drop: stands in for the arena mapping.
pub(super) struct AlignedMem {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the block is plain memory owned by this value; the rings synchronize access to it.
unsafe impl Send for AlignedMem {}
// SAFETY: as above; `&AlignedMem` only hands out the address.
unsafe impl Sync for AlignedMem {}

impl AlignedMem {
    pub(super) fn new(len: usize) -> Arc<AlignedMem> {
        let layout = Layout::from_size_align(len.max(1), RING_ALIGN).unwrap();
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {len} bytes failed");
        Arc::new(AlignedMem { ptr, layout })
    }

    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(super) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for AlignedMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A fresh ring of `capacity` data bytes with both ends attached.
pub(crate) fn new_ring(capacity: usize) -> (Producer, Consumer) {
    let mem = AlignedMem::new(ring_size(capacity));
    // SAFETY: the block is ring_size(capacity) bytes, aligned, and not shared yet; the handles
    // keep it alive through their owner Arc, and they are the only producer and consumer.
    unsafe {
        init_ring(mem.ptr(), capacity);
        let producer = Producer::attach(mem.ptr(), mem.len(), mem.clone()).unwrap();
        let consumer = Consumer::attach(mem.ptr(), mem.len(), mem).unwrap();
        (producer, consumer)
    }
}
