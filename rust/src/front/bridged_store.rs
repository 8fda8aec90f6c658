//! The paged store with its engine in a bridge process: this client's own region mapped here
//! (its ring pair and its pages, nothing of any other client), and the same operations as a
//! [`super::LocalPageStore`].
//!
//! No credentials pass through here: the bridge holds them. The bridge signals completions on
//! this client's end of a socketpair; a watcher thread turns them (and the bridge going away)
//! into this process's own event fd, which asyncio and waiting threads poll, and which no other
//! process holds. If the bridge goes away, every waiting and every later call fails at once
//! with a connection error; attaching again works once a bridge listens again.

use super::{EngineFacts, EngineFront, PageStore};
use crate::arena::{Arena, Claim, PageHandle, PageLedger};
use crate::bridge::channel::{self, lost};
use crate::bridge::signal::{Drained, SignalEnd};
use crate::bridge::wire::{self, Control, KeyEntry, NO_PAGE, PROTOCOL_VERSION, Submission, Welcome};
use crate::engine::BatchResult;
use crate::error::{Error, ErrorKind, Result};
use crate::net::EventFd;
use crate::op::{BatchShape, MemoryKind, Op};
use crate::ring::{Consumer, Producer, PushError};
use rustix::event::{PollFd, PollFlags, poll};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a waiter gives the bridge past a batch's deadline.
const GRACE: Duration = Duration::from_secs(5);

/// A page store attached to a bridge.
pub struct BridgedPageStore {
    path: PathBuf,
    control: Mutex<UnixStream>,
    /// A second handle on the socket, to poll it for the bridge's end without the lock.
    watch: UnixStream,
    welcome: Welcome,
    /// This client's region: its ring pair and its pages.
    pages: Arc<Arena>,
    submit: Mutex<Producer>,
    collect: Mutex<Collect>,
    /// This client's end of its signal socketpair: written to ring the bridge's doorbell.
    signal: SignalEnd,
    /// This process's own event fd: signalled by the watcher when the bridge completes
    /// something or goes away, and by this client for its other waiters.
    notifier: EventFd,
    /// Pages this client holds: index -> generation.
    owned: Mutex<HashMap<u32, u32>>,
    /// This client's operations in flight per page.
    ledger: PageLedger,
    next_batch: AtomicU64,
    failure: OnceLock<Error>,
    /// Set by the watcher thread when the bridge's end of the socket closes.
    hung_up: Arc<AtomicBool>,
    closed: AtomicBool,
    owner_pid: u32,
}

struct Collect {
    consumer: Consumer,
    record: Vec<u8>,
    /// Batches sent and not yet handed out, with the outcomes of their records so far.
    pending: HashMap<u64, Pending>,
    /// Finished batches for `drain`.
    ready: VecDeque<BatchResult>,
    /// Finished batches that a thread waits for.
    waited: HashMap<u64, BatchResult>,
}

/// How a batch is sent, and how its completion is expected.
#[derive(Clone, Copy)]
struct SendMode {
    /// GET: only a value of exactly the given length is read.
    exact_length: bool,
    /// A thread waits for it (it is kept from `drain`).
    waited: bool,
}

struct Pending {
    /// A thread waits for it (it is kept from `drain`).
    waited: bool,
    op: Op,
    keys: usize,
    claim: Claim,
    /// Outcomes received so far (a batch's outcomes may come in several records).
    outcomes: Vec<Option<crate::conn::Outcome>>,
    filled: usize,
}

impl BridgedPageStore {
    /// Connects to the bridge at `path`, says hello, and maps what it hands over.
    pub fn attach(path: &Path, timeout: Duration) -> Result<BridgedPageStore> {
        let not_a_bridge = |why: String| {
            Error::new(ErrorKind::Connection, format!("{} is not an lmcache-resp bridge: {why}", path.display()))
        };
        let stream = UnixStream::connect(path).map_err(|e| {
            Error::new(ErrorKind::Connection, format!("cannot attach to the bridge at {}: {e}", path.display()))
        })?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| Error::os("socket timeout", e))?;
        let hello = Control::Hello { version: PROTOCOL_VERSION, pid: std::process::id(), submission_ring_bytes: 0 };
        channel::send(&stream, &hello, &[])?;
        let (welcome, fds) = match channel::receive(&stream) {
            Ok(Some((Control::Welcome(welcome), fds))) if fds.len() == 2 => (welcome, fds),
            Ok(Some((Control::Refused { reason }, _))) => {
                return Err(Error::invalid(format!("the bridge at {} refused: {reason}", path.display())));
            }
            Ok(Some((other, _))) => return Err(not_a_bridge(format!("it answered {other:?}"))),
            Ok(None) => {
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "the bridge at {} closed the connection during the attach (it may be stopping, or not be a \
                         bridge)",
                        path.display()
                    ),
                ));
            }
            Err(err) if err.kind() == ErrorKind::Timeout => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the bridge at {} did not answer the attach within {:.1} s: it is stopped or overloaded",
                        path.display(),
                        timeout.as_secs_f64()
                    ),
                ));
            }
            Err(err) if err.kind() == ErrorKind::Protocol => return Err(not_a_bridge(err.message().to_owned())),
            Err(err) => return Err(err.context(format!("attaching to the bridge at {}", path.display()))),
        };
        // A bridge that stops answering (stopped, wedged) fails a control call after this
        // long, and the client with it, rather than hanging it.
        let answer_within = Some(Duration::from_millis(welcome.timeout_ms) + GRACE);
        stream.set_read_timeout(answer_within).map_err(|e| Error::os("socket timeout", e))?;
        stream.set_write_timeout(answer_within).map_err(|e| Error::os("socket timeout", e))?;
        let [region, signal]: [OwnedFd; 2] = fds.try_into().expect("two descriptors");
        let signal = SignalEnd::from_owned(signal);
        let notifier = EventFd::new().map_err(|e| Error::os("eventfd", e))?;
        let pages = Arena::attach(region)
            .map(Arc::new)
            .map_err(|e| not_a_bridge(format!("its region is not an arena: {e}")))?;
        if pages.page_size() as u64 != welcome.page_size || pages.num_pages() as u64 != welcome.num_pages {
            return Err(not_a_bridge("its region does not match its welcome".into()));
        }
        let (sub_base, sub_len, comp_base, comp_len) = pages.ring_region(0);
        let owner: Arc<dyn std::any::Any + Send + Sync> = pages.clone();
        let ring_err = |e: crate::ring::RingError| not_a_bridge(format!("its rings: {e}"));
        // SAFETY: the ring regions lie inside the mapped region (its header was validated by
        // `attach`), initialized by the bridge before it sent the welcome. This client is the
        // producer of the submission ring and the consumer of the completion ring, the
        // bridge the other end of each.
        let (submit, consumer) = unsafe {
            (
                Producer::attach(sub_base, sub_len, owner.clone()).map_err(ring_err)?,
                Consumer::attach(comp_base, comp_len, owner).map_err(ring_err)?,
            )
        };
        let watch = stream.try_clone().map_err(|e| Error::os("dup", e))?;
        let hung_up = Arc::new(AtomicBool::new(false));
        spawn_watcher(&stream, &signal, &notifier, hung_up.clone())?;
        let num_pages = pages.num_pages();
        Ok(BridgedPageStore {
            path: path.to_path_buf(),
            control: Mutex::new(stream),
            watch,
            welcome,
            pages,
            submit: Mutex::new(submit),
            collect: Mutex::new(Collect {
                consumer,
                record: Vec::new(),
                pending: HashMap::new(),
                ready: VecDeque::new(),
                waited: HashMap::new(),
            }),
            signal,
            notifier,
            owned: Mutex::new(HashMap::new()),
            ledger: PageLedger::new(num_pages),
            next_batch: AtomicU64::new(1),
            failure: OnceLock::new(),
            hung_up,
            closed: AtomicBool::new(false),
            owner_pid: std::process::id(),
        })
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.welcome.timeout_ms)
    }

    fn check_usable(&self) -> Result<()> {
        if std::process::id() != self.owner_pid {
            return Err(Error::new(
                ErrorKind::Forked,
                format!(
                    "this store was attached by process {} and cannot be used in process {}, which inherited it \
                     through fork(): attach again in this process",
                    self.owner_pid,
                    std::process::id()
                ),
            ));
        }
        if let Some(err) = self.failure.get() {
            return Err(err.clone());
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the store"));
        }
        Ok(())
    }

    /// The bridge is gone (or dropped this client): every call from now on fails with why.
    fn fail(&self, err: Error) -> Error {
        let why = format!(
            "{}; this store is done: attach again once a bridge answers at {}",
            err.message(),
            self.path.display()
        );
        let err = Error::new(ErrorKind::Connection, why);
        let _ = self.failure.set(err.clone());
        self.failure.get().cloned().unwrap_or(err)
    }

    fn call(&self, request: &Control) -> Result<Control> {
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        channel::call(&control, request).map_err(|e| match e.kind() {
            // The bridge went away, or stopped answering: this client is done either way.
            ErrorKind::Connection | ErrorKind::Timeout => self.fail(e),
            _ => e,
        })
    }

    /// Pages from the bridge's pool (`Allocate` or `AllocateOne`), now this client's.
    fn take_pages(&self, request: Control) -> Result<Vec<PageHandle>> {
        self.check_usable()?;
        match self.call(&request)? {
            Control::Pages { pages } => {
                let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
                Ok(pages
                    .into_iter()
                    .map(|(index, generation)| {
                        owned.insert(index, generation);
                        self.handle(index, generation)
                    })
                    .collect())
            }
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to an allocation"))),
        }
    }

    fn handle(&self, index: u32, generation: u32) -> PageHandle {
        PageHandle { pool_id: u64::from(self.welcome.client_id) | 1 << 63, index, generation }
    }

    fn lock_collect(&self) -> MutexGuard<'_, Collect> {
        self.collect.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a batch; `waited`: a thread will wait for it (it is kept from `drain`).
    fn send(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>, waited: bool) -> Result<u64> {
        self.send_batch(op, keys, pages, lengths, SendMode { exact_length: false, waited })
    }

    /// A GET that reads only values of exactly `lengths` bytes (any other length is a miss),
    /// for [`super::StagedConnector`].
    pub(super) fn submit_exact_get(&self, keys: &[&[u8]], pages: &[PageHandle], lengths: &[u64]) -> Result<u64> {
        self.send_batch(Op::Get, keys, pages, Some(lengths), SendMode { exact_length: true, waited: false })
    }

    fn send_batch(
        &self,
        op: Op,
        keys: &[&[u8]],
        pages: &[PageHandle],
        lengths: Option<&[u64]>,
        mode: SendMode,
    ) -> Result<u64> {
        let SendMode { exact_length, waited } = mode;
        self.check_usable()?;
        let memory = MemoryKind::Pages { page_size: self.welcome.page_size };
        BatchShape { op, keys, memory, memories: pages.len(), lengths, exact_length }.check()?;
        let entries = self.entries(keys, pages, lengths);
        let batch = self.next_batch.fetch_add(1, Ordering::Relaxed);
        let submission = Submission { batch, op, exact_length, keys: entries };
        let mut record = Vec::new();
        submission.encode(&mut record);
        let mut producer = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        if !producer.record_fits(record.len()) {
            return Err(Error::invalid(format!(
                "a batch of {} keys ({} bytes described) does not fit the bridge's ring: split it",
                keys.len(),
                record.len()
            )));
        }
        let indices: Vec<u32> = pages.iter().map(|page| page.index).collect();
        let claim = self.ledger.claim(op, &indices, || {
            pages
                .iter()
                .enumerate()
                .try_for_each(|(i, page)| self.check(page).map_err(|e| e.context(format!("key {i}"))))
        })?;
        let pending = Pending { waited, op, keys: keys.len(), claim, outcomes: vec![None; keys.len()], filled: 0 };
        self.lock_collect().pending.insert(batch, pending);
        let deadline = Instant::now() + self.timeout();
        loop {
            match producer.try_push(&[&record]) {
                Ok(()) => break,
                Err(PushError::Full) => {
                    producer.publish();
                    self.ring_doorbell();
                    if let Err(err) = self.bridge_alive().and_then(|()| {
                        if Instant::now() < deadline {
                            Ok(())
                        } else {
                            Err(Error::new(ErrorKind::Timeout, "the bridge does not take batches"))
                        }
                    }) {
                        self.unsend(batch);
                        return Err(err);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(err) => {
                    self.unsend(batch);
                    return Err(self.fail(Error::new(ErrorKind::Protocol, format!("submission ring: {err:?}"))));
                }
            }
        }
        producer.publish();
        drop(producer);
        self.ring_doorbell();
        Ok(batch)
    }

    fn unsend(&self, batch: u64) {
        let pending = self.lock_collect().pending.remove(&batch);
        if let Some(pending) = pending {
            self.ledger.release(pending.claim);
        }
    }

    fn ring_doorbell(&self) {
        self.signal.signal();
    }

    /// The batch's records: each key with its page and length (EXISTS and DEL: no page).
    fn entries<'k>(&self, keys: &[&'k [u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Vec<KeyEntry<'k>> {
        let page_size = self.welcome.page_size;
        keys.iter()
            .enumerate()
            .map(|(i, key)| match pages.get(i) {
                Some(page) => KeyEntry {
                    key,
                    page: page.index,
                    generation: page.generation,
                    len: lengths.map_or(page_size, |lengths| lengths[i]),
                },
                None => KeyEntry { key, page: NO_PAGE, generation: 0, len: 0 },
            })
            .collect()
    }

    /// Files every completion the bridge posted; wakes other waiters if some are theirs.
    fn collect(&self, collect: &mut Collect) -> Result<()> {
        let mut filed = 0;
        loop {
            let Collect { consumer, record, .. } = collect;
            match consumer.try_pop_into(record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => return Err(self.fail(Error::new(ErrorKind::Protocol, format!("completion ring: {err}")))),
            }
            let record = wire::decode_completion_record(&collect.record)
                .map_err(|why| self.fail(Error::new(ErrorKind::Protocol, format!("bad completion: {why}"))))?;
            filed += 1;
            let id = record.batch;
            let Some(pending) = collect.pending.get_mut(&id) else { continue };
            if record.total as usize != pending.keys || record.op != pending.op {
                let why = format!("a completion for batch {id} names {} keys of {:?}", record.total, record.op);
                return Err(self.fail(Error::new(ErrorKind::Protocol, why)));
            }
            for (i, outcome) in record.outcomes.into_iter().enumerate() {
                if pending.outcomes[record.start as usize + i].replace(outcome).is_none() {
                    pending.filled += 1;
                }
            }
            if pending.filled < pending.keys {
                continue;
            }
            let pending = collect.pending.remove(&id).expect("found above");
            self.ledger.release(pending.claim);
            let outcomes = pending.outcomes.into_iter().map(|o| o.expect("every outcome filled")).collect();
            let result = BatchResult { id, op: pending.op, outcomes };
            if pending.waited {
                collect.waited.insert(id, result);
            } else {
                collect.ready.push_back(result);
            }
        }
        if filed > 0 {
            collect.consumer.release();
        }
        Ok(())
    }

    /// Whether the bridge is still there: its socket has not closed, nor carried a notice.
    fn bridge_alive(&self) -> Result<()> {
        if let Some(err) = self.failure.get() {
            return Err(err.clone());
        }
        let mut probe = [0u8; 1];
        match rustix::net::recv(
            &self.watch,
            &mut probe,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        ) {
            Ok((0, _)) => Err(self.fail(lost("the bridge went away".into()))),
            Ok(_) => {
                // The bridge speaks out of turn only to say it dropped this client.
                let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
                let why = match channel::receive(&control) {
                    Ok(Some((Control::Failed { message, .. }, _))) => message,
                    _ => "the bridge closed the connection".into(),
                };
                Err(self.fail(lost(why)))
            }
            Err(rustix::io::Errno::AGAIN) => Ok(()),
            Err(err) => Err(self.fail(lost(err.to_string()))),
        }
    }

    /// Waits until the bridge posts something or goes away, at most `limit`.
    fn wait_for_bridge(&self, limit: Duration) -> Result<()> {
        let mut fds =
            [PollFd::from_borrowed_fd(self.notifier.as_fd(), PollFlags::IN), PollFd::new(&self.watch, PollFlags::IN)];
        let limit = limit.min(Duration::from_millis(50));
        let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: limit.as_nanos() as _ };
        let _ = poll(&mut fds, Some(&timeout));
        self.bridge_alive()
    }

    fn wait(&self, batch: u64) -> Result<BatchResult> {
        let give_up = Instant::now() + self.timeout() + GRACE;
        loop {
            {
                let mut collect = self.lock_collect();
                self.reset_notifier();
                let collected = self.collect(&mut collect);
                if let Some(result) = collect.waited.remove(&batch) {
                    self.resignal_if(&collect);
                    return Ok(result);
                }
                self.resignal_if(&collect);
                collected?;
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("batch {batch}: the bridge did not answer in time"),
                ));
            }
            if let Err(err) = self.wait_for_bridge(give_up - now) {
                self.abandon_all(&err);
                return Err(err);
            }
        }
    }

    /// Others wait (or drain): leave the notifier set while results are theirs to take.
    fn resignal_if(&self, collect: &Collect) {
        if !collect.waited.is_empty() || !collect.ready.is_empty() {
            self.notifier.signal();
        }
    }

    fn reset_notifier(&self) {
        self.notifier.reset();
    }

    /// The bridge is gone: every batch still pending completes with `err`, key by key.
    fn abandon_all(&self, err: &Error) {
        let mut collect = self.lock_collect();
        let pending: Vec<(u64, Pending)> = collect.pending.drain().collect();
        for (id, pending) in pending {
            self.ledger.release(pending.claim);
            let outcomes = vec![crate::conn::Outcome::Failed(err.clone()); pending.keys];
            let failed = BatchResult { id, op: pending.op, outcomes };
            if pending.waited {
                collect.waited.insert(id, failed);
            } else {
                collect.ready.push_back(failed);
            }
        }
        drop(collect);
        self.notifier.signal();
    }
}

/// The watcher thread: turns the bridge's signals on this client's socketpair end into this
/// process's event fd, and the bridge going away (its end closed, or the control socket hung
/// up) into a last signal, so that a client that only waits for its event fd (asyncio) learns
/// of it at once, in its next `drain`. It ends when the bridge's side closes.
fn spawn_watcher(stream: &UnixStream, signal: &SignalEnd, notifier: &EventFd, hung_up: Arc<AtomicBool>) -> Result<()> {
    let socket = stream.try_clone().map_err(|e| Error::os("dup", e))?;
    let signal = signal.try_clone().map_err(|e| Error::os("dup", e))?;
    let notifier = notifier.try_clone().map_err(|e| Error::os("dup", e))?;
    let watch = move || {
        loop {
            let mut fds = [PollFd::new(&signal, PollFlags::IN), PollFd::new(&socket, PollFlags::RDHUP)];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
            let socket_gone = !fds[1].revents().is_empty();
            let signalled = !fds[0].revents().is_empty();
            if signalled && signal.drain() == Drained::Closed || socket_gone {
                break;
            }
            notifier.signal();
        }
        hung_up.store(true, Ordering::Release);
        notifier.signal();
    };
    std::thread::Builder::new()
        .name("lmcache-resp-bridge-watch".into())
        .spawn(watch)
        .map(drop)
        .map_err(|e| Error::os("spawning the bridge watcher", e))
}

impl PageStore for BridgedPageStore {
    fn allocate(&self) -> Result<Option<PageHandle>> {
        Ok(self.take_pages(Control::AllocateOne)?.pop())
    }

    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        let count = u32::try_from(n).map_err(|_| Error::invalid("too many pages"))?;
        self.take_pages(Control::Allocate { count })
    }

    fn free(&self, page: &PageHandle) -> Result<()> {
        self.check_usable()?;
        self.check(page)?;
        self.ledger.ensure_idle(page.index)?;
        match self.call(&Control::Free { index: page.index, generation: page.generation })? {
            Control::Freed => {
                self.owned.lock().unwrap_or_else(|p| p.into_inner()).remove(&page.index);
                Ok(())
            }
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to a free"))),
        }
    }

    fn check(&self, page: &PageHandle) -> Result<()> {
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        match owned.get(&page.index) {
            Some(&generation) if generation == page.generation && page.pool_id == self.handle(0, 0).pool_id => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Page,
                format!("page {} is not one this client holds (freed, or of another store)", page.index),
            )),
        }
    }

    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        self.check(page)?;
        Ok(self.pages.page_ptr(page.index as usize))
    }

    fn page_offset(&self, page: &PageHandle) -> Result<u64> {
        self.check(page)?;
        Ok(self.pages.page_offset(page.index as usize))
    }

    fn arena(&self) -> &Arc<Arena> {
        &self.pages
    }

    fn page_size(&self) -> usize {
        self.pages.page_size()
    }

    fn num_pages(&self) -> usize {
        self.pages.num_pages()
    }

    fn free_pages(&self) -> Result<usize> {
        self.check_usable()?;
        match self.call(&Control::Stats)? {
            Control::StatsReply { free_pages } => Ok(free_pages as usize),
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to stats"))),
        }
    }

    fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult> {
        let batch = self.send(op, keys, pages, lengths, true)?;
        self.wait(batch)
    }

    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        self.send(op, keys, pages, lengths, false)
    }
}

impl EngineFront for BridgedPageStore {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        if std::process::id() != self.owner_pid {
            return self.check_usable().map(|()| Vec::new());
        }
        if self.hung_up.load(Ordering::Acquire) {
            let _ = self.bridge_alive();
        }
        let mut collect = self.lock_collect();
        self.reset_notifier();
        let collected = self.collect(&mut collect);
        if collected.is_err() || self.failure.get().is_some() {
            drop(collect);
            let err = self.failure.get().cloned().unwrap_or_else(|| lost("the bridge went away".into()));
            self.abandon_all(&err);
            collect = self.lock_collect();
        }
        let results = collect.ready.drain(..).collect();
        if !collect.waited.is_empty() {
            self.notifier.signal();
        }
        Ok(results)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.notifier.as_fd()
    }

    fn close(&self) {
        if std::process::id() != self.owner_pid || self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Every batch sent completes (the bridge answers each by its deadline) before the
        // socket closes and the bridge takes the pages back.
        let give_up = Instant::now() + self.timeout() + GRACE;
        while Instant::now() < give_up && !self.lock_collect().pending.is_empty() {
            let mut collect = self.lock_collect();
            if self.collect(&mut collect).is_err() {
                break;
            }
            let done = collect.pending.is_empty();
            drop(collect);
            if done || self.wait_for_bridge(give_up - Instant::now()).is_err() {
                break;
            }
        }
        if self.failure.get().is_none() {
            // The pages are back in the pool when this returns (those of batches that did
            // not finish in time follow when they do).
            let _ = self.call(&Control::Detach);
        }
        let _ = self.control.lock().unwrap_or_else(|p| p.into_inner()).shutdown(std::net::Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn num_workers(&self) -> usize {
        self.welcome.num_workers as usize
    }

    fn endpoint(&self) -> String {
        format!("bridge {} -> {}", self.path.display(), self.welcome.endpoint)
    }

    fn facts(&self) -> EngineFacts {
        EngineFacts::in_bridge(&self.endpoint())
    }

    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, _worker: usize) -> Result<()> {
        Err(Error::invalid("the engine runs in the bridge process"))
    }
}

impl Drop for BridgedPageStore {
    fn drop(&mut self) {
        self.close();
    }
}
