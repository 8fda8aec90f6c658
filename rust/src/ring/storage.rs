//! The ring's data bytes.
//!
//! Normally a plain byte range right after the header, accessed through raw pointers. Under
//! `cfg(loom)` the same region instead holds one `loom::cell::UnsafeCell<u64>` per 8-byte
//! word, so loom checks every data access for a happens-before edge: a missing Release or
//! Acquire on a position makes loom report a causality violation on the payload bytes, not just
//! on the positions. Records are 8-aligned and padded to 8 bytes, so a word never holds bytes
//! of two records and per-word tracking reports no false races.
//!
//! Both variants have the same interface: `data_len`, `init`, `init_zeroed`, `Storage::new`, `write`, `read`,
//! with indices in data bytes (`0..capacity`), never wrapping (the caller splits wrapped copies).

#[cfg(not(loom))]
mod imp {
    use std::ptr::NonNull;

    /// Bytes of memory that `capacity` data bytes occupy.
    pub(in crate::ring) const fn data_len(capacity: usize) -> usize {
        capacity
    }

    /// Fills the data region with zeroes, so every byte is initialized.
    ///
    /// # Safety
    /// `data..data + data_len(capacity)` must be valid for writes and not accessed by anyone
    /// else meanwhile.
    pub(in crate::ring) unsafe fn init(data: *mut u8, capacity: usize) {
        // SAFETY: the caller guarantees the range is valid for writes and unshared.
        unsafe { std::ptr::write_bytes(data, 0, capacity) }
    }

    /// Prepares a data region whose bytes are initialized already (they read as zeros): there
    /// is nothing to write, so none of its pages is touched.
    ///
    /// # Safety
    /// As [`init`], with every byte of the range initialized.
    pub(in crate::ring) unsafe fn init_zeroed(_data: *mut u8, _capacity: usize) {}

    pub(in crate::ring) struct Storage {
        data: NonNull<u8>,
        capacity: usize,
    }

    impl Storage {
        /// # Safety
        /// `data..data + capacity` must stay valid for reads and writes while this lives, and
        /// have been initialized by [`init`].
        pub(in crate::ring) unsafe fn new(data: NonNull<u8>, capacity: usize) -> Self {
            Storage { data, capacity }
        }

        /// Copies `src` to data bytes `idx..idx + src.len()`.
        ///
        /// # Safety
        /// The range must belong to the caller under the ring protocol (the producer's free
        /// space), so that nobody reads or writes it concurrently.
        pub(in crate::ring) unsafe fn write(&self, idx: usize, src: &[u8]) {
            assert!(idx <= self.capacity && src.len() <= self.capacity - idx, "ring write out of bounds");
            // SAFETY: the range is inside the data region (asserted), which `new`'s contract
            // keeps valid; the caller owns it exclusively under the ring protocol; `src` is a
            // Rust slice, so it cannot alias a range that someone writes through a raw pointer.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.as_ptr().add(idx), src.len()) }
        }

        /// Copies data bytes `idx..idx + dst.len()` into `dst`.
        ///
        /// # Safety
        /// The range must belong to the caller under the ring protocol (published and not yet
        /// released, for the consumer), so that nobody writes it concurrently.
        pub(in crate::ring) unsafe fn read(&self, idx: usize, dst: &mut [u8]) {
            assert!(idx <= self.capacity && dst.len() <= self.capacity - idx, "ring read out of bounds");
            // SAFETY: the range is inside the data region (asserted), valid per `new`'s contract
            // and not written concurrently per the ring protocol; `dst` is exclusively ours.
            unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr().add(idx), dst.as_mut_ptr(), dst.len()) }
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::cell::UnsafeCell;
    use std::ptr::NonNull;

    type Word = UnsafeCell<u64>;

    const _: () = assert!(align_of::<Word>() <= 64, "ring data cells need at most 64-byte alignment");

    pub(in crate::ring) const fn data_len(capacity: usize) -> usize {
        capacity / 8 * size_of::<Word>()
    }

    /// Constructs one loom cell per 8-byte word (inside a `loom::model` run).
    ///
    /// # Safety
    /// As the non-loom `init`; `data` must also be aligned for `UnsafeCell<u64>`.
    pub(in crate::ring) unsafe fn init(data: *mut u8, capacity: usize) {
        for word in 0..capacity / 8 {
            // SAFETY: the caller guarantees data..data + data_len(capacity) is valid, aligned
            // and unshared; `word` < capacity / 8 keeps the write inside it.
            unsafe { data.cast::<Word>().add(word).write(UnsafeCell::new(0)) }
        }
    }

    /// Loom's cells are objects, not bytes: they are constructed whatever the memory held.
    ///
    /// # Safety
    /// As [`init`].
    pub(in crate::ring) unsafe fn init_zeroed(data: *mut u8, capacity: usize) {
        // SAFETY: the caller's guarantees are `init`'s.
        unsafe { init(data, capacity) }
    }

    pub(in crate::ring) struct Storage {
        words: NonNull<Word>,
        capacity: usize,
    }

    impl Storage {
        /// # Safety
        /// As the non-loom `new`, with the cells constructed by [`init`].
        pub(in crate::ring) unsafe fn new(data: NonNull<u8>, capacity: usize) -> Self {
            Storage { words: data.cast(), capacity }
        }

        fn word(&self, index: usize) -> &Word {
            assert!(index < self.capacity / 8);
            // SAFETY: `index` is inside the cell array that `init` constructed and `new`'s
            // contract keeps alive while `self` lives.
            unsafe { &*self.words.as_ptr().add(index) }
        }

        /// # Safety
        /// As the non-loom `write`.
        pub(in crate::ring) unsafe fn write(&self, idx: usize, src: &[u8]) {
            assert!(idx <= self.capacity && src.len() <= self.capacity - idx, "ring write out of bounds");
            let mut done = 0;
            while done < src.len() {
                let at = idx + done;
                let n = (8 - at % 8).min(src.len() - done);
                self.word(at / 8).with_mut(|word| {
                    // SAFETY: loom grants exclusive access to the 8-byte word; `at % 8 + n <= 8`.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(done), word.cast::<u8>().add(at % 8), n) }
                });
                done += n;
            }
        }

        /// # Safety
        /// As the non-loom `read`.
        pub(in crate::ring) unsafe fn read(&self, idx: usize, dst: &mut [u8]) {
            assert!(idx <= self.capacity && dst.len() <= self.capacity - idx, "ring read out of bounds");
            let mut done = 0;
            while done < dst.len() {
                let at = idx + done;
                let n = (8 - at % 8).min(dst.len() - done);
                self.word(at / 8).with(|word| {
                    // SAFETY: loom grants shared access to the 8-byte word; `at % 8 + n <= 8`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(word.cast::<u8>().add(at % 8), dst.as_mut_ptr().add(done), n)
                    }
                });
                done += n;
            }
        }
    }
}

pub(super) use imp::{Storage, data_len, init, init_zeroed};
