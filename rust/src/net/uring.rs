//! One io_uring per I/O worker (`io_backend = uring`): the operations its connections hand the
//! kernel (sends, receives, polls) and the one wait per round of the worker's loop.
//!
//! The only other place, with `sys.rs`, where the kernel touches caller memory. A send or a
//! receive submitted here goes on using its memory after the call that queued it returns, until
//! its completion (CQE) is seen. Who guarantees that memory for how long:
//!
//! - **What the ring owns**: a send's gather list (the `iovec` array and its `msghdr`) lives in
//!   the operation's slot until its last completion, so the kernel may read it at any time
//!   before (a send the socket took only in part is resubmitted from the same list).
//! - **What the caller of [`Ring::send`] and [`Ring::recv`] lends**: the bytes the gather list
//!   points to, and the receive buffer. Those functions are `unsafe`: the caller keeps the
//!   memory valid, and does not touch a receive buffer, until it has taken the operation's
//!   result with [`Ring::take`] or [`Ring::cancel_and_reap`]. `conn::ring_io` does it with one
//!   rule: a connection never lets go of its socket, its reader's scratch or a request whose
//!   memory an operation uses without first cancelling that operation and waiting for its CQE
//!   (`Conn::sync_socket`, and `RingIo`'s drop, which runs before the rest of the connection's
//!   drop); and the completions that release caller pages are only posted by the worker after
//!   the connection's driver returned, so after that wait.
//! - **Engine shutdown, a panic, a failed engine**: every connection is dropped or aborted
//!   first (each reaps its own operations), and the ring's own drop cancels and reaps whatever
//!   is left (the doorbell's poll) before the ring's file is closed: closing an io_uring with
//!   operations in flight would cancel them in the background, after the memory is gone.
//!
//! Cancellation is `IORING_OP_ASYNC_CANCEL` followed by waiting for the cancelled operation's
//! own CQE (it may still complete with data first: the caller is told how much).
//!
//! The ring is made with `SINGLE_ISSUER` and `DEFER_TASKRUN` (Linux 6.1): completions are
//! processed only when the worker waits, on its own thread, never by interrupting it. Every
//! method is called from the worker's thread; the mutex only makes the shared handle `Sync`
//! (it is never contended).

use crate::memory::RawBuf;
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Submission queue entries; the completion queue has four times as many (and the kernel keeps
/// what overflows: `IORING_FEAT_NODROP`).
const ENTRIES: u32 = 256;
/// The `user_data` of cancel requests, whose own completions say nothing the caller needs.
const CANCEL_TAG: u64 = u64::MAX;

/// `IORING_RECVSEND_POLL_FIRST`: wait for readiness before the first try.
const RECVSEND_POLL_FIRST: u16 = 1;

/// When a receive completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvWait {
    /// With what is there, once anything is.
    Any,
    /// Once all of it came (`MSG_WAITALL`: the kernel gathers it, one completion). Only where the
    /// socket's receive low-water mark is 1: the kernel's retries wait on readiness, which a mark
    /// above the bytes still to come would never give.
    All,
    /// Once the socket's receive low-water mark is queued (`IORING_RECVSEND_POLL_FIRST`: no try
    /// before), with what is there then; the caller keeps the mark at most what is to come.
    Marked,
}

/// Names one operation of a [`Ring`] (its slot and the slot's generation, so that a slot reused
/// by a later operation is never mistaken for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpId {
    slot: u32,
    generation: u32,
}

impl OpId {
    fn user_data(self) -> u64 {
        u64::from(self.slot) | (u64::from(self.generation) << 32)
    }

    fn of(user_data: u64) -> OpId {
        OpId { slot: user_data as u32, generation: (user_data >> 32) as u32 }
    }
}

/// The ring of one worker, shared by its connections (all on the worker's thread).
pub struct Ring {
    inner: Mutex<Inner>,
}

struct Inner {
    uring: IoUring,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Operations whose last CQE has not been seen.
    in_flight: usize,
    /// Completions read from the queue, kept for its allocation.
    cqes: Vec<(u64, i32, u32)>,
}

// SAFETY: `Inner` holds raw pointers only inside the gather lists of sends in flight (`Gather`),
// which point to memory their submitter keeps valid until the send's completion (this module's
// docs); nothing reads them but the kernel and the thread that holds the mutex.
unsafe impl Send for Inner {}

#[derive(Default)]
struct Slot {
    generation: u32,
    state: State,
    /// A send's gather list, kept until its last completion.
    gather: Option<Box<Gather>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Free,
    /// Submitted (or queued for submission). `detached`: nobody will take its result (a poll
    /// cancelled because its interest changed); the slot frees itself at its completion.
    InFlight { detached: bool },
    /// Its last completion came: `result` is the CQE's (bytes, poll events, or -errno); a send
    /// reports all it sent, over every resubmission.
    Done { result: i32 },
}

/// A send's `msghdr` and gather list, and how far the kernel got.
struct Gather {
    msg: libc::msghdr,
    iov: Vec<libc::iovec>,
    fd: RawFd,
    flags: u32,
    /// Bytes sent so far, over every submission.
    sent: usize,
    total: usize,
}

/// Why io_uring cannot be used here, if it cannot: tried by making a ring as the workers do.
pub fn probe() -> Result<(), String> {
    let ring = build(8).map_err(|err| explain(&err))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|err| format!("io_uring's probe failed: {err}"))?;
    let needed = [
        ("SENDMSG", opcode::SendMsg::CODE),
        ("RECV", opcode::Recv::CODE),
        ("POLL_ADD", opcode::PollAdd::CODE),
        ("ASYNC_CANCEL", opcode::AsyncCancel::CODE),
    ];
    let missing: Vec<&str> = needed.iter().filter(|(_, code)| !probe.is_supported(*code)).map(|(n, _)| *n).collect();
    if !missing.is_empty() {
        return Err(format!("this kernel's io_uring lacks {}", missing.join(", ")));
    }
    if !ring.params().is_feature_ext_arg() {
        return Err("this kernel's io_uring cannot wait with a timeout (IORING_FEAT_EXT_ARG, Linux 5.11)".into());
    }
    Ok(())
}

fn build(entries: u32) -> io::Result<IoUring> {
    IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_cqsize(entries * 4).build(entries)
}

/// What an `io_uring_setup` failure means for a user.
fn explain(err: &io::Error) -> String {
    let why = match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "forbidden here: kernel.io_uring_disabled is set, or a seccomp filter (Docker's default profile) \
             refuses io_uring_setup"
        }
        Some(libc::ENOSYS) => "not in this kernel, or refused by a seccomp filter",
        Some(libc::EINVAL) => "this kernel lacks SINGLE_ISSUER or DEFER_TASKRUN (Linux 6.1)",
        Some(libc::ENOMEM) => "the kernel could not allocate the ring (locked-memory limit?)",
        _ => "io_uring_setup failed",
    };
    format!("io_uring is unavailable ({why}: {err})")
}

impl Ring {
    /// A ring for the calling thread (the worker): only that thread may submit to it.
    pub fn new() -> io::Result<Ring> {
        let uring = build(ENTRIES)?;
        Ok(Ring {
            inner: Mutex::new(Inner { uring, slots: Vec::new(), free: Vec::new(), in_flight: 0, cqes: Vec::new() }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held leaves the slots as they were: the drops that run on
        // the way out still need them to reap what is in flight.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends the whole gather list `iov` on `fd` (`MSG_NOSIGNAL`, and `MSG_WAITALL`: the kernel
    /// waits for room in the socket itself; a part taken short is sent on by this ring).
    ///
    /// # Safety
    ///
    /// Every entry of `iov` stays valid for reads until the operation's result is taken
    /// ([`Ring::take`], [`Ring::cancel_and_reap`]); `fd` stays open as long.
    pub unsafe fn send(&self, fd: RawFd, iov: &[libc::iovec]) -> io::Result<OpId> {
        let total = iov.iter().map(|entry| entry.iov_len).sum();
        // SAFETY: msghdr is plain data; zeroed is "no name, no control data".
        let msg: libc::msghdr = unsafe { std::mem::zeroed() };
        let gather = Box::new(Gather {
            msg,
            iov: iov.to_vec(),
            fd,
            flags: (libc::MSG_NOSIGNAL | libc::MSG_WAITALL) as u32,
            sent: 0,
            total,
        });
        let mut inner = self.lock();
        let id = inner.open_slot();
        let slot = &mut inner.slots[id.slot as usize];
        slot.gather = Some(gather);
        let entry = slot.gather.as_mut().expect("just set").entry(id);
        inner.queue(id, entry)
    }

    /// Receives into `buf[offset..offset + len]` from `fd`, as `wait` says.
    ///
    /// # Safety
    ///
    /// The range stays valid for writes, and untouched by anything else, until the operation's
    /// result is taken; `fd` stays open as long.
    pub unsafe fn recv(&self, fd: RawFd, buf: RawBuf, offset: usize, len: usize, wait: RecvWait) -> io::Result<OpId> {
        let end = offset.checked_add(len).expect("offset overflow");
        assert!(end <= buf.len(), "receive of {end} bytes past a {}-byte buffer", buf.len());
        let len = len.min(u32::MAX as usize) as u32;
        let (flags, ioprio) = match wait {
            RecvWait::Any => (0, 0),
            RecvWait::All => (libc::MSG_WAITALL, 0),
            RecvWait::Marked => (0, RECVSEND_POLL_FIRST),
        };
        // wrapping_add: computing the address is not a dereference; the range is in bounds.
        let target = buf.as_ptr().wrapping_add(offset);
        let mut inner = self.lock();
        let id = inner.open_slot();
        let entry =
            opcode::Recv::new(types::Fd(fd), target, len).flags(flags).ioprio(ioprio).build().user_data(id.user_data());
        inner.queue(id, entry)
    }

    /// Waits until `fd` has any of the `poll(2)` `events` (an fd closed meanwhile is the
    /// kernel's to report: the poll holds the file, and cancelling it lets go); with `multishot`, reports every
    /// wake-up until cancelled (a multishot poll's result is only taken once it ended).
    pub fn poll(&self, fd: RawFd, events: u32, multishot: bool) -> io::Result<OpId> {
        let mut inner = self.lock();
        let id = inner.open_slot();
        let entry = opcode::PollAdd::new(types::Fd(fd), events).multi(multishot).build().user_data(id.user_data());
        inner.queue(id, entry)
    }

    /// The result of `id` if it completed (its slot is then free): bytes moved, poll events, or
    /// `-errno`. `None` while it is in flight.
    pub fn take(&self, id: OpId) -> Option<i32> {
        let mut inner = self.lock();
        let slot = inner.slots.get(id.slot as usize)?;
        match slot.state {
            State::Done { result } if slot.generation == id.generation => {
                inner.release(id.slot);
                Some(result)
            }
            _ => None,
        }
    }

    /// Cancels `id`, a poll (it borrows no memory), without waiting: its completion frees its
    /// slot when it comes.
    pub fn detach_poll(&self, id: OpId) {
        let mut inner = self.lock();
        let Some(slot) = inner.slots.get_mut(id.slot as usize) else { return };
        if slot.generation != id.generation {
            return;
        }
        match slot.state {
            State::InFlight { .. } => {
                slot.state = State::InFlight { detached: true };
                let cancel = opcode::AsyncCancel::new(id.user_data()).build().user_data(CANCEL_TAG);
                // A cancel that cannot be queued leaves the poll to fire once; it frees itself.
                let _ = inner.push(cancel);
            }
            State::Done { .. } => inner.release(id.slot),
            State::Free => {}
        }
    }

    /// Cancels each of `ids` still in flight and waits for every one's last completion; returns
    /// their results in order (an operation may have completed, with data, before its cancel).
    /// After this the kernel touches none of their memory.
    pub fn cancel_and_reap(&self, ids: &[OpId]) -> Vec<i32> {
        let mut inner = self.lock();
        for id in ids {
            if inner.slots.get(id.slot as usize).is_some_and(|s| s.generation == id.generation && s.is_in_flight()) {
                let cancel = opcode::AsyncCancel::new(id.user_data()).build().user_data(CANCEL_TAG);
                inner.push_or_die(cancel);
            }
        }
        while ids.iter().any(|id| {
            inner.slots.get(id.slot as usize).is_some_and(|s| s.generation == id.generation && s.is_in_flight())
        }) {
            inner.wait_or_die(1, None);
        }
        ids.iter()
            .map(|id| match inner.slots.get(id.slot as usize).map(|s| (s.generation, s.state)) {
                Some((generation, State::Done { result })) if generation == id.generation => {
                    inner.release(id.slot);
                    result
                }
                _ => -libc::ECANCELED,
            })
            .collect()
    }

    /// Submits what was queued and waits until at least one operation completes or `timeout`
    /// passes (`None`: no limit): the worker's one system call per round.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        let mut inner = self.lock();
        inner.wait(1, timeout)
    }

    /// Operations whose last completion has not come, for tests.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }
}

impl Slot {
    fn is_in_flight(&self) -> bool {
        matches!(self.state, State::InFlight { .. })
    }
}

impl Gather {
    /// The SENDMSG entry for what is left of the list.
    fn entry(&mut self, id: OpId) -> squeue::Entry {
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.iov.len() as _;
        opcode::SendMsg::new(types::Fd(self.fd), &self.msg).flags(self.flags).build().user_data(id.user_data())
    }

    /// Drops the first `n` bytes from the list; whether any are left.
    fn advance(&mut self, n: usize) -> bool {
        self.sent += n;
        let mut n = n;
        while n > 0 && !self.iov.is_empty() {
            let first = &mut self.iov[0];
            if n >= first.iov_len {
                n -= first.iov_len;
                self.iov.remove(0);
            } else {
                // wrapping_add: an address inside the entry, not a dereference.
                first.iov_base = (first.iov_base as *mut u8).wrapping_add(n).cast();
                first.iov_len -= n;
                n = 0;
            }
        }
        self.sent < self.total
    }
}

impl Inner {
    fn open_slot(&mut self) -> OpId {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.state = State::InFlight { detached: false };
        self.in_flight += 1;
        OpId { slot, generation: entry.generation }
    }

    fn release(&mut self, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        entry.state = State::Free;
        entry.gather = None;
        self.free.push(slot);
    }

    /// Queues the first entry of operation `id`; one that cannot be queued is not in flight.
    fn queue(&mut self, id: OpId, entry: squeue::Entry) -> io::Result<OpId> {
        match self.push(entry) {
            Ok(()) => Ok(id),
            Err(err) => {
                self.in_flight -= 1;
                self.release(id.slot);
                Err(err)
            }
        }
    }

    /// Queues `entry`, submitting what is queued first when the queue is full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry built here points only to memory that outlives the operation:
            // a gather list this ring owns until the last completion, or memory the caller of
            // `send`/`recv` vouched for (their safety contracts).
            if unsafe { self.uring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            match self.uring.submit() {
                Ok(_) => {}
                Err(err)
                    if matches!(err.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)) =>
                {
                    self.harvest();
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn push_or_die(&mut self, entry: squeue::Entry) {
        if let Err(err) = self.push(entry) {
            fatal(&err);
        }
    }

    /// Submits, waits for `want` completions (or the timeout), and files what came.
    fn wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        let ts = timeout.map(types::Timespec::from);
        let args = match &ts {
            Some(ts) => types::SubmitArgs::new().timespec(ts),
            None => types::SubmitArgs::new(),
        };
        let entered = self.uring.submitter().submit_with_args(want, &args);
        self.harvest();
        match entered {
            Ok(_) => Ok(()),
            Err(err) if matches!(err.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    fn wait_or_die(&mut self, want: usize, timeout: Option<Duration>) {
        if let Err(err) = self.wait(want, timeout) {
            fatal(&err);
        }
    }

    /// Files every completion in the queue into its slot; resubmits sends the socket took only
    /// in part.
    fn harvest(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.uring.completion().map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())));
        for &(user_data, result, flags) in &cqes {
            if user_data == CANCEL_TAG || cqueue::more(flags) {
                // A cancel's own answer, or a multishot poll that fired and goes on.
                continue;
            }
            let id = OpId::of(user_data);
            let Some(slot) = self.slots.get_mut(id.slot as usize) else { continue };
            if slot.generation != id.generation || !slot.is_in_flight() {
                continue;
            }
            let detached = matches!(slot.state, State::InFlight { detached: true });
            let result = match slot.gather.as_mut() {
                Some(gather) => {
                    if result > 0 && gather.advance(result as usize) {
                        let entry = gather.entry(id);
                        if let Err(err) = self.push(entry) {
                            self.finish(id, self.sent_or(id, -err.raw_os_error().unwrap_or(libc::EIO)));
                        }
                        continue;
                    }
                    // What was sent, over every submission; a failure after some was sent shows
                    // as a short count (the connection fails on it).
                    self.sent_or(id, result)
                }
                None => result,
            };
            self.finish(id, result);
            if detached {
                self.release(id.slot);
            }
        }
        cqes.clear();
        self.cqes = cqes;
    }

    /// A send's result: the bytes it sent, or `error` if it sent none.
    fn sent_or(&self, id: OpId, error: i32) -> i32 {
        match self.slots[id.slot as usize].gather.as_ref().map_or(0, |g| g.sent) {
            0 if error < 0 => error,
            sent => sent.min(i32::MAX as usize) as i32,
        }
    }

    fn finish(&mut self, id: OpId, result: i32) {
        self.slots[id.slot as usize].state = State::Done { result };
        self.in_flight -= 1;
    }
}

/// The kernel refused to let the worker wait for its own operations, which go on using memory
/// that is about to be released: going on would corrupt memory. Never seen; a ring this process
/// made accepts its waits unless the kernel is out of memory.
fn fatal(err: &io::Error) -> ! {
    log::error!(target: "lmcache_resp::engine", "io_uring refused a wait for operations still in flight: {err}; aborting");
    eprintln!("lmcache-resp: io_uring refused a wait for operations still in flight ({err}); aborting the process");
    std::process::abort()
}

impl Drop for Ring {
    /// Cancels and reaps whatever is still in flight (the doorbell's poll; a connection reaps
    /// its own before it lets go) before the ring's file closes.
    fn drop(&mut self) {
        let mut inner = self.lock();
        let pending: Vec<u64> = inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_in_flight())
            .map(|(i, s)| OpId { slot: i as u32, generation: s.generation }.user_data())
            .collect();
        for user_data in pending {
            let cancel = opcode::AsyncCancel::new(user_data).build().user_data(CANCEL_TAG);
            inner.push_or_die(cancel);
        }
        while inner.in_flight > 0 {
            inner.wait_or_die(1, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn raw(buf: &mut [u8]) -> RawBuf {
        // SAFETY: the test keeps `buf` alive and untouched until the operation is reaped.
        unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }
    }

    fn wait_for(ring: &Ring, id: OpId) -> i32 {
        for _ in 0..1000 {
            if let Some(result) = ring.take(id) {
                return result;
            }
            ring.wait(Some(Duration::from_millis(10))).unwrap();
        }
        panic!("operation {id:?} did not complete");
    }

    #[test]
    fn the_probe_passes_here_and_says_why_where_it_would_not() {
        probe().unwrap();
        let err = io::Error::from_raw_os_error(libc::EPERM);
        assert!(explain(&err).starts_with("io_uring is unavailable (forbidden here: kernel.io_uring_disabled"));
    }

    #[test]
    fn a_gather_list_larger_than_the_socket_goes_out_whole_in_order() {
        let ring = Ring::new().unwrap();
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let parts: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; (1 << 20) + 7 * i as usize]).collect();
        let iov: Vec<libc::iovec> =
            parts.iter().map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() }).collect();
        let total: usize = parts.iter().map(Vec::len).sum();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        // SAFETY: `parts` outlives the send, which is reaped below.
        let id = unsafe { ring.send(ours.as_raw_fd(), &iov) }.unwrap();
        assert_eq!(wait_for(&ring, id), total as i32);
        drop(ours);
        assert_eq!(reader.join().unwrap(), parts.concat());
    }

    #[test]
    fn a_receive_of_all_waits_for_every_byte_and_a_cancelled_one_writes_nothing() {
        let ring = Ring::new().unwrap();
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let mut page = vec![0u8; 100];
        // SAFETY: the buffer outlives the receive, which is reaped before the test ends.
        let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut page), 10, 80, RecvWait::All) }.unwrap();
        peer.write_all(&[1; 50]).unwrap();
        ring.wait(Some(Duration::from_millis(20))).unwrap();
        assert_eq!(ring.take(id), None, "half of it is not all of it");
        peer.write_all(&[2; 40]).unwrap();
        assert_eq!(wait_for(&ring, id), 80);
        assert_eq!(page[..10], [0; 10]);
        assert_eq!(page[10..60], [1; 50]);
        assert_eq!(page[60..90], [2; 30]);
        assert_eq!(page[90..], [0; 10]);

        let mut left = [0u8; 10];
        (&ours).read_exact(&mut left).unwrap();
        assert_eq!(left, [2; 10]);
        let mut scratch = vec![0u8; 16];
        // SAFETY: the buffer outlives the receive, which is reaped before the test ends.
        let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut scratch), 0, 16, RecvWait::Any) }.unwrap();
        ring.wait(Some(Duration::ZERO)).unwrap();
        assert_eq!(ring.cancel_and_reap(&[id]), vec![-libc::ECANCELED]);
        assert_eq!(ring.in_flight(), 0);
        peer.write_all(&[3; 16]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        ring.wait(Some(Duration::ZERO)).unwrap();
        assert_eq!(scratch, [0; 16], "a reaped receive never writes");
        // The last write is still in the socket, for the next receive.
        // SAFETY: the buffer outlives the receive, which is reaped before the test ends.
        let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut scratch), 0, 16, RecvWait::Any) }.unwrap();
        assert_eq!(wait_for(&ring, id), 16);
        assert_eq!(scratch, [3; 16]);
    }

    #[test]
    fn dropping_the_ring_reaps_what_is_in_flight_first() {
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let mut buf = vec![0u8; 64];
        {
            let ring = Ring::new().unwrap();
            // SAFETY: the buffer outlives the receive, which is reaped before the test ends.
            let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut buf), 0, 64, RecvWait::All) }.unwrap();
            ring.wait(Some(Duration::ZERO)).unwrap();
            let poll = ring.poll(ours.as_raw_fd(), libc::POLLIN as u32, true).unwrap();
            assert_ne!(id, poll);
            assert_eq!(ring.in_flight(), 2);
        }
        peer.write_all(&[9; 64]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(buf, [0; 64], "the receive was cancelled and reaped before the ring closed");
        let mut got = [0u8; 64];
        (&ours).read_exact(&mut got).unwrap();
        assert_eq!(got, [9; 64]);
    }

    #[test]
    fn a_slot_reused_by_a_later_operation_is_not_mistaken_for_the_earlier() {
        let ring = Ring::new().unwrap();
        let (ours, _peer) = UnixStream::pair().unwrap();
        let first = ring.poll(ours.as_raw_fd(), libc::POLLOUT as u32, false).unwrap();
        assert!(wait_for(&ring, first) & libc::POLLOUT as i32 != 0);
        let second = ring.poll(ours.as_raw_fd(), libc::POLLIN as u32, false).unwrap();
        assert_eq!((first.slot, second.slot), (second.slot, first.slot), "the slot is reused");
        assert_eq!(ring.take(first), None, "the earlier operation's result was taken");
        ring.detach_poll(second);
        ring.wait(Some(Duration::from_millis(10))).unwrap();
        assert_eq!(ring.in_flight(), 0, "a detached poll frees itself when its cancel completes");
    }
}
