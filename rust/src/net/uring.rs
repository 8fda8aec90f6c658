//! One io_uring per I/O worker (`io_backend = uring`): the operations its connections hand the
//! kernel (sends, receives, polls) and the one wait per round of the worker's loop.
//!
//! The only other place, with `sys.rs`, where the kernel touches caller memory. A send or a
//! receive submitted here goes on using its memory after the call that queued it returns, until
//! its completion (CQE) is seen. Who guarantees that memory for how long:
//!
//! - **What the ring owns**: a send's gather list (the `iovec` array and its `msghdr`) lives in
//!   the operation's slot until its completion, so the kernel may read it at any time before.
//! - **What the caller of [`Ring::send`] and [`Ring::recv`] lends**: the bytes the gather list
//!   points to, and the receive buffer. Those functions are `unsafe`: the caller keeps the
//!   memory valid, and does not touch a receive buffer, until it has taken the operation's
//!   result with [`Ring::take`] or [`Ring::cancel_and_reap`]. `conn::ring_io` does it with one
//!   rule: a connection never lets go of its socket, its reader's scratch or a request whose
//!   memory an operation uses without first cancelling that operation and waiting for its CQE
//!   (`Conn::sync_socket`, and `RingIo`'s drop, which runs before the rest of the connection's
//!   drop); and the completions that release caller pages are only posted by the worker after
//!   the connection's driver returned, so after that wait.
//! - **A send is done when its completion says so**: a send completes with what the socket took
//!   (no `MSG_WAITALL`), and only then are those bytes sent for the connection. The kernel has
//!   copied every byte a completion counts and reads none of them after it; a reply can only
//!   answer bytes a completion counted (see "When the kernel runs" below), so a reply to a
//!   request not yet counted is one that overtook it, which the connection refuses.
//! - **Engine shutdown, a panic, a failed engine**: every connection is dropped or aborted
//!   first (each reaps its own operations), and the ring's own drop cancels and reaps whatever
//!   is left (the doorbell's poll) before the ring's file is closed: closing an io_uring with
//!   operations in flight would cancel them in the background, after the memory is gone.
//!
//! **When the kernel runs.** The ring is made with `SINGLE_ISSUER` and `DEFER_TASKRUN` (Linux
//! 6.1), and its operations are socket sends, receives and polls, which the kernel drives by
//! readiness. So the kernel reads or writes an operation's memory inside this thread's
//! `io_uring_enter`: when it issues the operation, or when it runs the operation's deferred work
//! in the wait. Two things follow. A send's completion is posted in the same step that copied
//! its last byte, before the work that completes a receive of the server's answer can run:
//! completions come in causal order. And a cancel queued for an operation is issued in the next
//! enter's submission, before that enter runs any deferred work, so nothing of a cancelled
//! operation runs after it. The one exception: an operation the kernel cannot drive by readiness
//! (nothing here asks for that, but the kernel may do it, short of memory for its poll) runs on
//! one of the kernel's own threads (io-wq), blocking, whenever it likes. A cancel interrupts it
//! there too; one that has not ended [`CANCEL_GRACE`] after its cancel has its socket shut down
//! both ways, which ends any operation on a socket, and is waited for until it ends.
//!
//! **A ring the kernel stops serving.** Every system call here can be refused (a seccomp filter
//! installed after the ring was made, a kernel out of memory). [`probe`] enters a ring and reaps
//! a real operation before any worker uses one, so a process that may not enter one never gets
//! one. A ring that refuses an enter later, for any reason but an interruption, a full queue or
//! a timeout, is **dead** ([`Ring::failure`]): it is never entered again, so none of its
//! operations ever runs again (previous paragraph), and each is reported cancelled
//! (`-ECANCELED`) with its socket shut down both ways, which also ends one blocked on a kernel
//! thread, and means a send stopped half-way can never be finished later as a whole (and
//! wrong) value. Its memory then goes back to its owners, the
//! worker moves its connections to the poll loop, and the ring's file is never closed (closing it
//! would start the kernel's teardown of those operations on a kernel thread). Nothing here ends
//! the process.
//!
//! Cancellation is `IORING_OP_ASYNC_CANCEL` followed by waiting for the cancelled operation's
//! own CQE (it may still complete with data first: the caller is told how much). Every method
//! is called from the worker's thread; the mutex only makes the shared handle `Sync` (it is
//! never contended).

use crate::memory::RawBuf;
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Submission queue entries; the completion queue has four times as many (and the kernel keeps
/// what overflows: `IORING_FEAT_NODROP`).
const ENTRIES: u32 = 256;
/// The `user_data` of cancel requests, whose own completions say nothing the caller needs.
const CANCEL_TAG: u64 = u64::MAX;
/// Transient refusals of an enter (out of memory) tried again before the ring is given up.
const ENTER_TRIES: u32 = 8;
/// How long a cancelled operation may take to end before its socket is shut down (see "When the
/// kernel runs" above); a cancel by readiness ends one at once.
const CANCEL_GRACE: Duration = Duration::from_millis(500);

/// `IORING_RECVSEND_POLL_FIRST`: wait for readiness before the first try.
const RECVSEND_POLL_FIRST: u16 = 1;

/// When a receive completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvWait {
    /// With what is there, once anything is.
    Any,
    /// Once all of it came (`MSG_WAITALL`: the kernel gathers it, one completion; cancelled, it
    /// reports what it had gathered). Only where the socket's receive low-water mark is 1: the
    /// kernel's retries wait on readiness, which a mark above the bytes still to come would
    /// never give.
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
    /// Closed by `Ring`'s drop only while the ring is alive (see the module docs).
    uring: ManuallyDrop<IoUring>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Operations whose last CQE has not been seen.
    in_flight: usize,
    /// Completions read from the queue, kept for its allocation.
    cqes: Vec<(u64, i32, u32)>,
    /// Why the kernel stopped serving this ring, once it did (see the module docs).
    dead: Option<String>,
}

// SAFETY: `Inner` holds raw pointers only inside the gather lists of sends in flight (`Gather`),
// which point to memory their submitter keeps valid until the send's completion (this module's
// docs); nothing reads them but the kernel and the thread that holds the mutex.
unsafe impl Send for Inner {}

#[derive(Default)]
struct Slot {
    generation: u32,
    state: State,
    /// A send's or a receive's socket (shut down if the ring dies with the operation in flight).
    fd: Option<RawFd>,
    /// A send's gather list, kept until its completion.
    gather: Option<Box<Gather>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Free,
    /// Submitted (or queued for submission). `detached`: nobody will take its result (a poll
    /// cancelled because its interest changed); the slot frees itself at its completion.
    InFlight { detached: bool },
    /// Its last completion came: `result` is the CQE's (bytes, poll events, or -errno).
    Done { result: i32 },
}

/// A send's `msghdr` and gather list.
struct Gather {
    msg: libc::msghdr,
    iov: Vec<libc::iovec>,
}

/// Why io_uring cannot be used here, if it cannot: tried by making a ring as the workers do,
/// and entering it as they do (a no-op submitted and reaped in a wait with a timeout): a process
/// whose filter lets it make a ring but not enter one must not get one.
pub fn probe() -> Result<(), String> {
    let ring = build(8).map_err(|err| explain("io_uring_setup", &err))?;
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
    enter_once(ring).map_err(|err| explain("io_uring_enter", &err))
}

/// Submits a no-op to `ring` and reaps it in a wait with a timeout, as a worker waits.
fn enter_once(mut ring: IoUring) -> io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(1);
    // SAFETY: a no-op points to no memory.
    unsafe { ring.submission().push(&nop) }.map_err(|_| io::Error::other("the probe's queue is full"))?;
    let timeout = types::Timespec::from(Duration::from_secs(1));
    ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&timeout))?;
    match ring.completion().next() {
        Some(cqe) if cqe.user_data() == 1 && cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(io::Error::from_raw_os_error(-cqe.result())),
        None => Err(io::Error::other("a no-op did not complete within 1 s")),
    }
}

fn build(entries: u32) -> io::Result<IoUring> {
    IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_cqsize(entries * 4).build(entries)
}

/// What a failed io_uring system call (`call`) means for a user.
fn explain(call: &str, err: &io::Error) -> String {
    let why = match (call, err.raw_os_error()) {
        (_, Some(libc::EPERM) | Some(libc::EACCES)) => format!(
            "forbidden here: kernel.io_uring_disabled is set, or a seccomp filter (Docker's default profile) \
             refuses {call}"
        ),
        (_, Some(libc::ENOSYS)) => format!("{call} is not in this kernel, or a seccomp filter refuses it"),
        ("io_uring_setup", Some(libc::EINVAL)) => "this kernel lacks SINGLE_ISSUER or DEFER_TASKRUN (Linux 6.1)".into(),
        (_, Some(libc::ENOMEM)) => "the kernel could not allocate the ring (locked-memory limit?)".into(),
        _ => format!("{call} failed"),
    };
    format!("io_uring is unavailable ({why}: {err})")
}

impl Ring {
    /// A ring for the calling thread (the worker): only that thread may submit to it.
    pub fn new() -> io::Result<Ring> {
        let uring = ManuallyDrop::new(build(ENTRIES)?);
        Ok(Ring {
            inner: Mutex::new(Inner {
                uring,
                slots: Vec::new(),
                free: Vec::new(),
                in_flight: 0,
                cqes: Vec::new(),
                dead: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held leaves the slots as they were: the drops that run on
        // the way out still need them to reap what is in flight.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Why the kernel stopped serving this ring, once it did (then every operation that was in
    /// flight reports `-ECANCELED`, nothing new can be queued, and the worker moves to the poll
    /// loop; see the module docs).
    pub fn failure(&self) -> Option<String> {
        self.lock().dead.clone()
    }

    /// Sends the gather list `iov` on `fd` (`MSG_NOSIGNAL`); completes with what the socket
    /// took, which may be less than all of it (the caller sends the rest in a new send).
    /// `poll_first`: the socket was just found full; wait until it is writable before the
    /// first try.
    ///
    /// # Safety
    ///
    /// Every entry of `iov` stays valid for reads until the operation's result is taken
    /// ([`Ring::take`], [`Ring::cancel_and_reap`]); `fd` stays open as long.
    pub unsafe fn send(&self, fd: RawFd, iov: &[libc::iovec], poll_first: bool) -> io::Result<OpId> {
        // SAFETY: msghdr is plain data; zeroed is "no name, no control data".
        let msg: libc::msghdr = unsafe { std::mem::zeroed() };
        let mut gather = Box::new(Gather { msg, iov: iov.to_vec() });
        gather.msg.msg_iov = gather.iov.as_mut_ptr();
        gather.msg.msg_iovlen = gather.iov.len() as _;
        let mut inner = self.lock();
        let id = inner.open_slot(Some(fd))?;
        let slot = &mut inner.slots[id.slot as usize];
        // The msghdr and the list it points to stay where they are: the Box is moved into the
        // slot, not its contents.
        let msg: *const libc::msghdr = &gather.msg;
        slot.gather = Some(gather);
        let ioprio = if poll_first { RECVSEND_POLL_FIRST } else { 0 };
        let entry = opcode::SendMsg::new(types::Fd(fd), msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .ioprio(ioprio)
            .build()
            .user_data(id.user_data());
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
        let id = inner.open_slot(Some(fd))?;
        let entry =
            opcode::Recv::new(types::Fd(fd), target, len).flags(flags).ioprio(ioprio).build().user_data(id.user_data());
        inner.queue(id, entry)
    }

    /// Waits until `fd` has any of the `poll(2)` `events` (an fd closed meanwhile is the
    /// kernel's to report: the poll holds the file, and cancelling it lets go); with `multishot`, reports every
    /// wake-up until cancelled (a multishot poll's result is only taken once it ended).
    pub fn poll(&self, fd: RawFd, events: u32, multishot: bool) -> io::Result<OpId> {
        let mut inner = self.lock();
        // A poll borrows no memory: its socket is not shut down if the ring dies.
        let id = inner.open_slot(None)?;
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
    /// After this the kernel touches none of their memory (a ring that dies meanwhile reports
    /// what it had not completed as `-ECANCELED`: see the module docs).
    pub fn cancel_and_reap(&self, ids: &[OpId]) -> Vec<i32> {
        let mut inner = self.lock();
        for id in ids {
            if inner.is_in_flight(*id) {
                let cancel = opcode::AsyncCancel::new(id.user_data()).build().user_data(CANCEL_TAG);
                // A cancel that cannot be queued killed the ring: its operations are over.
                let _ = inner.push(cancel);
            }
        }
        let started = std::time::Instant::now();
        let mut shut = false;
        while ids.iter().any(|id| inner.is_in_flight(*id)) {
            if !shut && started.elapsed() >= CANCEL_GRACE {
                shut = true;
                inner.shut_down_sockets_of(ids);
            }
            if inner.wait(1, Some(CANCEL_GRACE / 5)).is_err() {
                break;
            }
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
    /// passes (`None`: no limit): the worker's one system call per round. An error: the ring
    /// died (see [`Ring::failure`]).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        let mut inner = self.lock();
        inner.wait(1, timeout)
    }

    /// Gives the ring up as the kernel would if it refused an enter (for tests of what follows).
    #[cfg(test)]
    pub fn kill_for_test(&self, why: &str) {
        self.lock().die(why.to_owned());
    }

    /// Operations whose last completion has not come, for tests.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }
}

impl Inner {
    fn open_slot(&mut self, fd: Option<RawFd>) -> io::Result<OpId> {
        if let Some(why) = &self.dead {
            return Err(io::Error::other(why.clone()));
        }
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
        entry.fd = fd;
        self.in_flight += 1;
        Ok(OpId { slot, generation: entry.generation })
    }

    fn is_in_flight(&self, id: OpId) -> bool {
        self.slots.get(id.slot as usize).is_some_and(|s| s.generation == id.generation && s.is_in_flight())
    }

    fn release(&mut self, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        entry.state = State::Free;
        entry.gather = None;
        entry.fd = None;
        self.free.push(slot);
    }

    /// Queues the first entry of operation `id`; one that cannot be queued is not in flight.
    fn queue(&mut self, id: OpId, entry: squeue::Entry) -> io::Result<OpId> {
        match self.push(entry) {
            Ok(()) => Ok(id),
            Err(err) => {
                if self.is_in_flight(id) {
                    self.in_flight -= 1;
                }
                self.release(id.slot);
                Err(err)
            }
        }
    }

    /// Queues `entry`, submitting what is queued first when the queue is full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            if let Some(why) = &self.dead {
                return Err(io::Error::other(why.clone()));
            }
            // SAFETY: every entry built here points only to memory that outlives the operation:
            // a gather list this ring owns until the completion, or memory the caller of
            // `send`/`recv` vouched for (their safety contracts).
            if unsafe { self.uring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            self.enter(0, None)?;
        }
    }

    /// Submits, waits for `want` completions (or the timeout), and files what came.
    fn wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        self.enter(want, timeout)
    }

    /// One `io_uring_enter` (submit, and wait for `want` completions or `timeout`), then files
    /// what came. Interruptions, timeouts and a busy queue are no error; a refusal that lasts
    /// kills the ring (see the module docs) and is returned.
    fn enter(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        if let Some(why) = &self.dead {
            return Err(io::Error::other(why.clone()));
        }
        let ts = timeout.map(types::Timespec::from);
        let args = match &ts {
            Some(ts) => types::SubmitArgs::new().timespec(ts),
            None => types::SubmitArgs::new(),
        };
        let mut tries = 0;
        loop {
            let entered = self.uring.submitter().submit_with_args(want, &args);
            self.harvest();
            let err = match entered {
                Ok(_) => return Ok(()),
                Err(err) => err,
            };
            match err.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) => return Ok(()),
                // The completion queue is full (what came was just filed, which makes room).
                Some(libc::EBUSY) | Some(libc::EAGAIN) => return Ok(()),
                Some(libc::ENOMEM) if tries < ENTER_TRIES => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1 << tries));
                }
                _ => {
                    let why = format!("the kernel refused io_uring_enter ({err})");
                    self.die(why.clone());
                    return Err(io::Error::new(err.kind(), why));
                }
            }
        }
    }

    /// Shuts down, both ways, the sockets of those of `ids` still in flight: a cancelled
    /// operation that has not ended is blocked on a kernel thread (see the module docs), and
    /// this ends it. Their connections are being dropped or fail on the next call.
    fn shut_down_sockets_of(&mut self, ids: &[OpId]) {
        let fds: Vec<RawFd> =
            ids.iter().filter(|id| self.is_in_flight(**id)).filter_map(|id| self.slots[id.slot as usize].fd).collect();
        log::warn!(
            target: "lmcache_resp::engine",
            "{} cancelled io_uring operation(s) still running after {CANCEL_GRACE:?}: their socket(s) are shut down to \
             end them",
            fds.len()
        );
        for fd in fds {
            // SAFETY: a socket the operation's submitter keeps open until the result is taken.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }

    /// The ring is never entered again: every operation in flight is over (cancelled, its
    /// socket shut down both ways). See the module docs for why that is safe.
    fn die(&mut self, why: String) {
        if self.dead.is_some() {
            return;
        }
        log::warn!(
            target: "lmcache_resp::engine",
            "{why}: this worker's io_uring is given up; {} operation(s) in flight are cancelled, their connections \
             reopened on the poll loop",
            self.in_flight
        );
        for slot in 0..self.slots.len() {
            let entry = &mut self.slots[slot];
            let State::InFlight { detached } = entry.state else { continue };
            if let Some(fd) = entry.fd {
                // The operation never runs again (this ring is never entered again); the
                // shutdown makes sure no later teardown could finish a half-sent value either.
                // SAFETY: a socket the operation's submitter keeps open until the result is taken.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
            entry.state = State::Done { result: -libc::ECANCELED };
            if detached {
                self.release(slot as u32);
            }
        }
        self.in_flight = 0;
        self.dead = Some(why);
    }

    /// Files every completion in the queue into its slot.
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
            slot.state = State::Done { result };
            self.in_flight -= 1;
            if detached {
                self.release(id.slot);
            }
        }
        cqes.clear();
        self.cqes = cqes;
    }
}

impl Slot {
    fn is_in_flight(&self) -> bool {
        matches!(self.state, State::InFlight { .. })
    }
}

impl Drop for Ring {
    /// Cancels and reaps whatever is still in flight (the doorbell's poll; a connection reaps
    /// its own before it lets go) before the ring's file closes. A dead ring's file is never
    /// closed (see the module docs).
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let pending: Vec<u64> = inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_in_flight())
            .map(|(i, s)| OpId { slot: i as u32, generation: s.generation }.user_data())
            .collect();
        for user_data in pending {
            let cancel = opcode::AsyncCancel::new(user_data).build().user_data(CANCEL_TAG);
            if inner.push(cancel).is_err() {
                break;
            }
        }
        while inner.in_flight > 0 && inner.dead.is_none() {
            let _ = inner.wait(1, None);
        }
        if inner.dead.is_none() {
            // SAFETY: dropped once, here, and never used again (the ring is being dropped).
            unsafe { ManuallyDrop::drop(&mut inner.uring) };
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
        let said = explain("io_uring_enter", &err);
        assert!(said.starts_with("io_uring is unavailable (forbidden here: kernel.io_uring_disabled"), "{said}");
        assert!(said.contains("refuses io_uring_enter"), "{said}");
    }

    #[test]
    fn a_send_completes_with_what_the_socket_took_and_the_rest_follows_in_order() {
        let ring = Ring::new().unwrap();
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let parts: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; (1 << 20) + 7 * i as usize]).collect();
        let mut iov: Vec<libc::iovec> =
            parts.iter().map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() }).collect();
        let total: usize = parts.iter().map(Vec::len).sum();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        let (mut sent, mut sends, mut poll_first) = (0, 0, false);
        while sent < total {
            // SAFETY: `parts` outlives the send, which is reaped below.
            let id = unsafe { ring.send(ours.as_raw_fd(), &iov, poll_first) }.unwrap();
            let n = wait_for(&ring, id);
            assert!(n > 0, "send failed: {n}");
            sent += n as usize;
            sends += 1;
            poll_first = sent < total;
            // What the completion counted is gone from the list; the rest goes next.
            let mut skip = n as usize;
            while skip > 0 {
                if skip >= iov[0].iov_len {
                    skip -= iov.remove(0).iov_len;
                } else {
                    iov[0].iov_base = (iov[0].iov_base as *mut u8).wrapping_add(skip).cast();
                    iov[0].iov_len -= skip;
                    skip = 0;
                }
            }
        }
        assert!(sends > 1, "5 MiB through a Unix socket's buffer is more than one send's worth");
        drop(ours);
        assert_eq!(reader.join().unwrap(), parts.concat());
    }

    #[test]
    fn a_cancelled_receive_of_all_reports_what_it_had_received() {
        let ring = Ring::new().unwrap();
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let mut page = vec![0u8; 100];
        // SAFETY: the buffer outlives the receive, which is reaped below.
        let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut page), 0, 100, RecvWait::All) }.unwrap();
        peer.write_all(&[5; 30]).unwrap();
        ring.wait(Some(Duration::from_millis(20))).unwrap();
        assert_eq!(ring.take(id), None, "30 of 100 is not all of it");
        assert_eq!(ring.cancel_and_reap(&[id]), vec![30], "the 30 bytes in the page are reported");
        assert_eq!(page[..30], [5; 30]);
        assert_eq!(page[30..], [0; 70]);
    }

    #[test]
    fn a_dead_ring_cancels_what_was_in_flight_shuts_its_sockets_and_takes_nothing_new() {
        let ring = Ring::new().unwrap();
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let mut page = vec![0u8; 64];
        // SAFETY: the buffer outlives the receive, which is reaped below.
        let id = unsafe { ring.recv(ours.as_raw_fd(), raw(&mut page), 0, 64, RecvWait::All) }.unwrap();
        ring.wait(Some(Duration::ZERO)).unwrap();
        ring.kill_for_test("refused for the test");
        assert_eq!(ring.failure().as_deref(), Some("refused for the test"));
        assert_eq!(ring.cancel_and_reap(&[id]), vec![-libc::ECANCELED]);
        assert_eq!(ring.in_flight(), 0);
        let err = ring.poll(ours.as_raw_fd(), libc::POLLIN as u32, false).unwrap_err();
        assert!(err.to_string().contains("refused for the test"), "{err}");
        assert!(ring.wait(Some(Duration::ZERO)).is_err(), "a dead ring is never entered again");
        // The socket was shut down both ways: the peer sees its end, and a write to it fails.
        let mut got = [0u8; 1];
        assert_eq!(peer.read(&mut got).unwrap(), 0);
        assert!(peer.write_all(&[1; 8]).is_err() || (&ours).read(&mut got).unwrap() == 0);
        drop(ring);
        assert_eq!(page, [0; 64], "nothing was received into the page");
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
