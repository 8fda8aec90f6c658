//! The raw socket calls of the data path. Values go out and payloads come in through raw
//! pointers into caller memory (see [`RawBuf`]), so these are the only places where the
//! kernel touches that memory.

use crate::memory::RawBuf;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One entry of a gather list: either ordinary Rust bytes or a range of a [`RawBuf`].
pub type IoVec = libc::iovec;

fn iovec_of_slice(bytes: &[u8]) -> IoVec {
    IoVec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() }
}

fn iovec_of_raw(buf: RawBuf, offset: usize) -> IoVec {
    assert!(offset <= buf.len());
    // wrapping_add: computing the address is not a dereference; `offset` is in bounds anyway.
    IoVec { iov_base: buf.as_ptr().wrapping_add(offset) as *mut libc::c_void, iov_len: buf.len() - offset }
}

/// A gather list on the stack. The lifetime ties it to the Rust slices it points into; raw
/// buffer ranges are valid by [`RawBuf`]'s contract.
pub struct IoVecs<'a, const N: usize> {
    entries: [IoVec; N],
    len: usize,
    total: usize,
    _slices: std::marker::PhantomData<&'a [u8]>,
}

impl<'a, const N: usize> IoVecs<'a, N> {
    /// An empty list with room for `N` entries.
    pub fn new() -> Self {
        IoVecs {
            entries: [IoVec { iov_base: std::ptr::null_mut(), iov_len: 0 }; N],
            len: 0,
            total: 0,
            _slices: std::marker::PhantomData,
        }
    }

    /// Entries that can still be pushed.
    pub fn room(&self) -> usize {
        N - self.len
    }

    /// Whether no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in all entries.
    pub fn total_len(&self) -> usize {
        self.total
    }

    /// Appends `bytes`. Panics when the list is full.
    pub fn push_slice(&mut self, bytes: &'a [u8]) {
        self.push(iovec_of_slice(bytes));
    }

    /// Appends `buf` from `offset` to its end. Panics when the list is full or `offset` is
    /// past the end.
    pub fn push_raw(&mut self, buf: RawBuf, offset: usize) {
        self.push(iovec_of_raw(buf, offset));
    }

    fn push(&mut self, entry: IoVec) {
        assert!(self.len < N, "gather list full");
        self.total += entry.iov_len;
        self.entries[self.len] = entry;
        self.len += 1;
    }

    /// The entries pushed, for `send_vectored`.
    pub fn as_slice(&self) -> &[IoVec] {
        &self.entries[..self.len]
    }

    /// The entries' bytes, for a TLS record to be sealed from.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.as_slice().iter().map(|entry| {
            // SAFETY: every entry was pushed from a Rust slice borrowed for 'a (which outlives
            // this borrow of the list) or from a RawBuf range, valid for reads by its contract
            // for as long as the operation it belongs to runs; the bytes are only read.
            unsafe { std::slice::from_raw_parts(entry.iov_base as *const u8, entry.iov_len) }
        })
    }
}

impl<const N: usize> Default for IoVecs<'_, N> {
    fn default() -> Self {
        Self::new()
    }
}

/// `sendmsg` without blocking and without SIGPIPE: a vanished server is an `EPIPE` error, not
/// the death of the process.
///
/// The caller guarantees every entry of `iov` points to memory that is valid for reads:
/// Rust slices that outlive the call (see `iovec_of_slice`) or [`RawBuf`] ranges, valid by
/// their own contract.
pub fn send_vectored(fd: BorrowedFd<'_>, iov: &[IoVec]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; zeroed is a valid "no name, no control data" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut IoVec;
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points at `iov`, which lives for the whole call, and every iovec
        // points at readable memory (the caller's guarantee above). The kernel only reads it.
        let sent = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `recv` without blocking into `buf[offset..offset+len]`. Returns 0 at end of stream.
pub fn recv_into(fd: BorrowedFd<'_>, buf: RawBuf, offset: usize, len: usize) -> io::Result<usize> {
    let end = offset.checked_add(len).expect("offset overflow");
    assert!(end <= buf.len(), "receive of {end} bytes past a {}-byte buffer", buf.len());
    loop {
        // SAFETY: the range is inside `buf` (checked above), which its contract keeps valid
        // and reserved for this operation; the kernel writes at most `len` bytes there.
        let received = unsafe {
            libc::recv(fd.as_raw_fd(), buf.as_ptr().add(offset) as *mut libc::c_void, len, libc::MSG_DONTWAIT)
        };
        if received >= 0 {
            return Ok(received as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `recv` without blocking into ordinary Rust memory.
pub fn recv_slice(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: a &mut [u8] is valid, exclusive memory for the duration of the call.
    let raw = unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) };
    recv_into(fd, raw, 0, buf.len())
}

/// Sets `SO_RCVLOWAT`: poll reports the socket readable once this many bytes are queued (or at
/// end of stream, an error, or when the kernel's receive memory runs short).
pub fn set_recv_low_water(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value: libc::c_int = bytes.clamp(1, libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: `value` is a live c_int for the whole call and its size is passed with it; the
    // kernel only reads it.
    let done = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// BBR's model of a TCP socket (`TCP_CC_INFO`), for tests: its bandwidth estimate in bytes
/// per second and its pacing gain (256 = 1.0). `None` when the socket does not run BBR.
#[cfg(test)]
pub fn bbr_model(fd: BorrowedFd<'_>) -> io::Result<Option<(u64, u32)>> {
    // struct tcp_bbr_info (linux/inet_diag.h): bw_lo, bw_hi, min_rtt, pacing_gain, cwnd_gain.
    let mut info = [0u32; 5];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is live, writable memory of `len` bytes for the whole call, and `len` is
    // a live socklen_t the kernel writes the length it filled into.
    let done = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CC_INFO,
            info.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < std::mem::size_of_val(&info) {
        return Ok(None);
    }
    Ok(Some((u64::from(info[0]) | (u64::from(info[1]) << 32), info[3])))
}
