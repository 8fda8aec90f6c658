//! Memory that operations read from (SET) or receive into (GET) while the caller is not
//! looking: arena pages and caller-provided buffers.

use std::ptr::NonNull;

/// A byte range outside Rust's ownership, addressed by raw pointer.
///
/// Page memory is shared: Python holds views of it and, for an arena, other processes may map
/// it. Forming `&[u8]`/`&mut [u8]` over it would claim exclusivity that Rust cannot check, so
/// the data path passes raw pointers to the kernel and to `copy_nonoverlapping` only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a RawBuf is an address and a length. Whoever creates one promises (see `new`) that
// the range stays valid for the operation's lifetime and that nothing else writes it while an
// operation reads or writes it, whichever thread the operation runs on.
unsafe impl Send for RawBuf {}
// SAFETY: as above; shared references only hand out the address.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// # Safety
    /// `ptr..ptr+len` must stay allocated until every operation using this buffer has
    /// completed, and while an operation runs no one else may write it (for a GET, nor read
    /// it expecting stable contents).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        RawBuf { ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()), len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The first `len` bytes.
    pub fn prefix(&self, len: usize) -> RawBuf {
        assert!(len <= self.len, "prefix of {len} bytes from a {}-byte buffer", self.len);
        RawBuf { ptr: self.ptr, len }
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        let end = offset.checked_add(src.len()).expect("offset overflow");
        assert!(end <= self.len, "write of {end} bytes past a {}-byte buffer", self.len);
        // SAFETY: the range is inside the buffer (checked above), which `new`'s contract keeps
        // valid and unshared while the operation runs; `src` is ordinary Rust memory and
        // cannot overlap caller-owned page memory.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) }
    }
}
