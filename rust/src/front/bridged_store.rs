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
    /// The pieces of batches too large for one ring record, each sent as a batch of its own:
    /// the piece's id -> its batch and where its keys start there.
    pieces: HashMap<u64, Piece>,
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

/// A piece of a batch, sent as a batch of its own.
struct Piece {
    batch: u64,
    start: usize,
    keys: usize,
}

struct Pending {
    /// A thread waits for it (it is kept from `drain`).
    waited: bool,
    op: Op,
    keys: usize,
    claim: Claim,
    /// The ids its pieces were sent as, if it was split.
    pieces: Vec<u64>,
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
        let stream = UnixStream::connect(path).map_err(|e| connect_error(path, &e))?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| Error::os("socket timeout", e))?;
        let hello = Control::Hello { version: PROTOCOL_VERSION, pid: std::process::id(), submission_ring_bytes: 0 };
        // A bridge that refuses at once may close before the hello is written: its refusal
        // is still there to read, and says more than the broken pipe. So does an answer that is
        // no bridge's (a peer that wrote garbage and closed).
        let sent = channel::send(&stream, &hello, &[]);
        let answer = channel::receive(&stream);
        if let Err(err) = &sent {
            let answer_says_more = match &answer {
                Ok(reply) => reply.is_some(),
                Err(answer) => answer.kind() == ErrorKind::Protocol,
            };
            if !answer_says_more {
                return Err(err.clone().context(format!("attaching to the bridge at {}", path.display())));
            }
        }
        let (welcome, fds) = match answer {
            Ok(Some((Control::Welcome(welcome), fds))) if fds.len() == 2 => (welcome, fds),
            Ok(Some((Control::Refused { reason, kind }, _))) => {
                let kind = kind.and_then(ErrorKind::from_code).unwrap_or(ErrorKind::InvalidInput);
                return Err(Error::new(kind, format!("the bridge at {} refused: {reason}", path.display())));
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
                pieces: HashMap::new(),
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
        let mut producer = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        let pieces = split_for_ring(&entries, producer.capacity() / 4);
        let first = self.next_batch.fetch_add(pieces.len() as u64, Ordering::Relaxed);
        let records: Vec<Vec<u8>> = pieces
            .iter()
            .zip(first..)
            .map(|(range, batch)| {
                let mut record = Vec::new();
                Submission { batch, op, exact_length, keys: entries[range.clone()].to_vec() }.encode(&mut record);
                record
            })
            .collect();
        if let Some(record) = records.iter().find(|record| !producer.record_fits(record.len())) {
            return Err(Error::invalid(format!(
                "a key's description ({} bytes) does not fit the bridge's {}-byte submission ring",
                record.len(),
                producer.capacity()
            )));
        }
        let batch = first;
        let indices: Vec<u32> = pages.iter().map(|page| page.index).collect();
        let claim = self.ledger.claim(op, &indices, || {
            pages
                .iter()
                .enumerate()
                .try_for_each(|(i, page)| self.check(page).map_err(|e| e.context(format!("key {i}"))))
        })?;
        let piece_ids: Vec<u64> =
            if pieces.len() > 1 { (first..first + pieces.len() as u64).collect() } else { vec![] };
        let pending = Pending {
            waited,
            op,
            keys: keys.len(),
            claim,
            pieces: piece_ids.clone(),
            outcomes: vec![None; keys.len()],
            filled: 0,
        };
        {
            let mut collect = self.lock_collect();
            for (&id, range) in piece_ids.iter().zip(&pieces) {
                collect.pieces.insert(id, Piece { batch, start: range.start, keys: range.len() });
            }
            collect.pending.insert(batch, pending);
        }
        let deadline = Instant::now() + self.timeout();
        for (sent, record) in records.iter().enumerate() {
            if let Err(err) = self.push(&mut producer, record, deadline) {
                if sent == 0 {
                    self.unsend(batch);
                    return Err(err);
                }
                // Pieces are in the bridge already: the batch completes when they do, the
                // keys of the pieces not sent failed with why.
                drop(producer);
                self.fail_unsent(batch, pieces[sent].start, &err);
                self.ring_doorbell();
                return Ok(batch);
            }
        }
        producer.publish();
        drop(producer);
        self.ring_doorbell();
        Ok(batch)
    }

    /// Pushes one record, waiting for room until `deadline` (the bridge must be alive).
    fn push(&self, producer: &mut Producer, record: &[u8], deadline: Instant) -> Result<()> {
        loop {
            match producer.try_push(&[record]) {
                Ok(()) => return Ok(()),
                Err(PushError::Full) => {
                    producer.publish();
                    self.ring_doorbell();
                    self.bridge_alive()?;
                    if Instant::now() >= deadline {
                        return Err(Error::new(ErrorKind::Timeout, "the bridge does not take batches"));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(err) => {
                    return Err(self.fail(Error::new(ErrorKind::Protocol, format!("submission ring: {err:?}"))));
                }
            }
        }
    }

    /// Keys `from..` of a split batch, never sent: failed with `err`.
    fn fail_unsent(&self, batch: u64, from: usize, err: &Error) {
        let mut collect = self.lock_collect();
        if let Some(pending) = collect.pending.get_mut(&batch) {
            for slot in &mut pending.outcomes[from..] {
                if slot.replace(crate::conn::Outcome::Failed(err.clone())).is_none() {
                    pending.filled += 1;
                }
            }
        }
    }

    fn unsend(&self, batch: u64) {
        let mut collect = self.lock_collect();
        if let Some(pending) = collect.pending.remove(&batch) {
            for id in &pending.pieces {
                collect.pieces.remove(id);
            }
            drop(collect);
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
            let (id, offset, piece_keys) = match collect.pieces.get(&record.batch) {
                Some(piece) => (piece.batch, piece.start, Some(piece.keys)),
                None => (record.batch, 0, None),
            };
            let Some(pending) = collect.pending.get_mut(&id) else { continue };
            let keys = piece_keys.unwrap_or(pending.keys);
            let (start, total) = (record.start as usize, record.total as usize);
            if total != keys || record.op != pending.op || start + record.outcomes.len() > keys {
                let why = format!(
                    "a completion for batch {} names keys {start}..{} of {total} ({:?}), not of {keys} ({:?})",
                    record.batch,
                    start + record.outcomes.len(),
                    record.op,
                    pending.op
                );
                return Err(self.fail(Error::new(ErrorKind::Protocol, why)));
            }
            for (i, outcome) in record.outcomes.into_iter().enumerate() {
                if pending.outcomes[offset + start + i].replace(outcome).is_none() {
                    pending.filled += 1;
                }
            }
            if pending.filled < pending.keys {
                continue;
            }
            let pending = collect.pending.remove(&id).expect("found above");
            for piece in &pending.pieces {
                collect.pieces.remove(piece);
            }
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
        collect.pieces.clear();
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

    fn stats(&self) -> Result<crate::metrics::Snapshot> {
        self.check_usable()?;
        match self.call(&Control::Metrics)? {
            Control::MetricsReply { snapshot } => crate::metrics::Snapshot::decode(&snapshot)
                .ok_or_else(|| Error::new(ErrorKind::Protocol, "the bridge's counters do not decode")),
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to metrics"))),
        }
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

/// Why the bridge's socket could not be connected to. Not being allowed to open it is
/// permanent (an `Authentication` error, never worth retrying) and says what decides it.
fn connect_error(path: &Path, err: &std::io::Error) -> Error {
    let at = format!("cannot attach to the bridge at {}: {err}", path.display());
    if err.kind() != std::io::ErrorKind::PermissionDenied {
        return Error::new(ErrorKind::Connection, at);
    }
    use std::os::unix::fs::MetadataExt;
    let socket = match std::fs::metadata(path) {
        Ok(meta) => {
            format!("the socket is mode {:04o}, owner uid {} gid {}", meta.mode() & 0o7777, meta.uid(), meta.gid())
        }
        Err(_) => "its directory may not be searched".into(),
    };
    Error::new(
        ErrorKind::Authentication,
        format!(
            "{at}: this user (uid {}) may not open it: {socket} (the bridge's --socket-mode and group, and the \
             directory's mode, decide who may)",
            rustix::process::geteuid().as_raw()
        ),
    )
}

/// The key ranges a batch is sent in: one, unless its description passes `budget` bytes (a
/// quarter of the ring, so that a piece never waits for the whole ring to drain); then pieces
/// of at most that, each at least one key.
fn split_for_ring(entries: &[KeyEntry<'_>], budget: usize) -> Vec<std::ops::Range<usize>> {
    let mut pieces = Vec::new();
    let (mut start, mut bytes) = (0, wire::SUBMISSION_HEADER);
    for (i, entry) in entries.iter().enumerate() {
        let cost = wire::ENTRY_HEADER + entry.key.len();
        if i > start && bytes + cost > budget {
            pieces.push(start..i);
            (start, bytes) = (i, wire::SUBMISSION_HEADER);
        }
        bytes += cost;
    }
    pieces.push(start..entries.len());
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[u8]) -> KeyEntry<'_> {
        KeyEntry { key, page: NO_PAGE, generation: 0, len: 0 }
    }

    #[test]
    fn a_batch_is_split_only_past_the_budget_and_every_piece_fits_it() {
        let keys: Vec<Vec<u8>> = (0..1000).map(|i| format!("key-{i:04}").into_bytes()).collect();
        let entries: Vec<KeyEntry<'_>> = keys.iter().map(|k| entry(k)).collect();
        let cost = wire::ENTRY_HEADER + 8;
        assert_eq!(split_for_ring(&entries, 1 << 20), vec![0..1000]);
        assert_eq!(split_for_ring(&[], 64), vec![0..0], "an empty batch is one empty piece");
        let budget = wire::SUBMISSION_HEADER + 100 * cost;
        let pieces = split_for_ring(&entries, budget);
        assert_eq!(pieces.len(), 10);
        assert!(pieces.windows(2).all(|w| w[0].end == w[1].start) && pieces[9].end == 1000);
        for piece in &pieces {
            let mut record = Vec::new();
            Submission { batch: 1, op: Op::Exists, exact_length: false, keys: entries[piece.clone()].to_vec() }
                .encode(&mut record);
            assert!(record.len() <= budget, "{piece:?}: {} bytes", record.len());
        }
        let big = vec![b'k'; 500];
        assert_eq!(
            split_for_ring(&[entry(&big), entry(b"a")], 64),
            vec![0..1, 1..2],
            "a key larger than the budget goes alone"
        );
    }
}
