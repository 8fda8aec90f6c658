//! Memory that operations read from (SET) or receive into (GET) while the caller is not
//! looking: arena pages and caller-provided buffers.

use crate::error::{Error, Result};
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

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the range (a dangling pointer if the buffer was made from a null one).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The first `len` bytes.
    pub fn prefix(&self, len: usize) -> RawBuf {
        assert!(len <= self.len, "prefix of {len} bytes from a {}-byte buffer", self.len);
        RawBuf { ptr: self.ptr, len }
    }

    /// The `len` bytes from `offset` on.
    pub fn range(&self, offset: usize, len: usize) -> RawBuf {
        let end = offset.checked_add(len).expect("offset overflow");
        assert!(end <= self.len, "range to {end} of a {}-byte buffer", self.len);
        // wrapping_add: computing the address is not a dereference; it stays inside the buffer.
        RawBuf { ptr: NonNull::new(self.ptr.as_ptr().wrapping_add(offset)).unwrap_or(self.ptr), len }
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

    /// Copies all of `src` to the start of this buffer.
    pub fn copy_from(&self, src: &RawBuf) {
        assert!(src.len <= self.len, "copy of {} bytes into a {}-byte buffer", src.len, self.len);
        // SAFETY: both ranges are valid and not written by anyone else while this copy runs
        // (`new`'s contract, for each); `copy` allows them to overlap.
        unsafe { std::ptr::copy(src.ptr.as_ptr(), self.ptr.as_ptr(), src.len) }
    }
}

/// Memory this process may use at most: the host's RAM, or less where its cgroup says so.
pub fn memory_limit() -> Option<u64> {
    // SAFETY: sysinfo fills the struct it is given and nothing else.
    let ram = unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        (libc::sysinfo(&mut info) == 0).then(|| info.totalram as u64 * info.mem_unit as u64)
    };
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok());
    match (ram, cgroup) {
        (Some(ram), Some(limit)) => Some(ram.min(limit)),
        (ram, limit) => ram.or(limit),
    }
}

/// Refuses `bytes` of `what` when they exceed the memory this process may use: such an arena
/// would be killed by the OOM killer on first touch, not fail cleanly.
pub fn check_fits(bytes: u64, what: &str) -> Result<()> {
    check_fits_in(bytes, what, memory_limit())
}

fn check_fits_in(bytes: u64, what: &str, limit: Option<u64>) -> Result<()> {
    match limit {
        Some(limit) if bytes > limit => Err(Error::invalid(format!(
            "{what} would take {bytes} bytes ({:.1} GiB), more than the {limit} bytes ({:.1} GiB) of memory this \
             process may use: use fewer or smaller pages",
            bytes as f64 / (1u64 << 30) as f64,
            limit as f64 / (1u64 << 30) as f64
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_from_copies_the_whole_source_and_nothing_past_it() {
        let mut src = *b"staged";
        let mut dst = [0xAAu8; 8];
        // SAFETY: both arrays outlive the RawBufs and nothing else touches them meanwhile.
        let (from, to) = unsafe { (RawBuf::new(src.as_mut_ptr(), 6), RawBuf::new(dst.as_mut_ptr(), 8)) };
        to.copy_from(&from);
        assert_eq!(&dst, b"staged\xAA\xAA");
        let too_big = std::panic::catch_unwind(|| from.copy_from(&to));
        assert!(too_big.is_err(), "a source larger than the destination is refused");
    }

    #[test]
    fn the_memory_limit_is_known_and_checked() {
        let limit = memory_limit().expect("sysinfo works on Linux");
        assert!(limit > 1 << 20);
        assert!(check_fits(limit / 2, "x").is_ok());
        let err = check_fits(limit.saturating_mul(4), "the page arena").unwrap_err();
        assert!(err.message().starts_with("the page arena would take"), "{err}");
        assert!(check_fits_in(10, "x", None).is_ok(), "unknown limit: no check");
    }
}
