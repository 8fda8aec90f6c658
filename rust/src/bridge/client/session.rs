//! [`BridgeClient`]: one attach to a bridge, with the same operations as a store whose engine
//! runs in this process: pages from the bridge's pool, batches over them, their results.
//!
//! It puts the parts of this directory together: the attach (`attach.rs`), the control socket
//! and the bridge's liveness (`link.rs`), the pages it holds (`pages.rs`), the submission ring
//! (`rings.rs`), the completion ring and the batches in flight (`results.rs`), and the watcher
//! thread with this process's event fd (`watcher.rs`). If the bridge goes away, every waiting
//! and every later call fails at once with a connection error; attaching again works once a
//! bridge listens again.

use super::attach::{self, GRACE};
use super::link::Link;
use super::pages::HeldPages;
use super::results::Results;
use super::rings;
use super::watcher::Wakeups;
use crate::arena::{Arena, PageHandle, PageLedger};
use crate::bridge::channel::lost;
use crate::bridge::signal::SignalEnd;
use crate::bridge::wire::{Control, Welcome};
use crate::engine::BatchResult;
use crate::error::{Error, ErrorKind, Result};
use crate::op::{BatchShape, MemoryKind, Op};
use crate::ring::Producer;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A client attached to a bridge: its own region mapped here (its ring pair and its pages,
/// nothing of any other client). No credentials pass through it: the bridge holds them.
pub struct BridgeClient {
    link: Link,
    welcome: Welcome,
    /// This client's region: its ring pair and its pages.
    pages: Arc<Arena>,
    submit: Mutex<Producer>,
    results: Mutex<Results>,
    /// This client's end of its signal socketpair: written to ring the bridge's doorbell.
    signal: SignalEnd,
    /// This process's own event fd, and the watcher thread that signals it.
    wakeups: Wakeups,
    held: HeldPages,
    /// This client's operations in flight per page.
    ledger: PageLedger,
    next_batch: AtomicU64,
    closed: AtomicBool,
    owner_pid: u32,
}

/// How a batch is sent, and how its completion is expected.
#[derive(Clone, Copy)]
struct SendMode {
    /// GET: only a value of exactly the given length is read.
    exact_length: bool,
    /// A thread waits for it (it is kept from `drain`).
    waited: bool,
}

impl BridgeClient {
    /// Connects to the bridge at `path`, says hello, and maps what it hands over.
    pub fn attach(path: &Path, timeout: Duration) -> Result<BridgeClient> {
        let attached = attach::attach(path, timeout)?;
        let link = Link::new(path, attached.stream)?;
        let wakeups = Wakeups::start(link.watch(), &attached.signal)?;
        let num_pages = attached.pages.num_pages();
        Ok(BridgeClient {
            link,
            held: HeldPages::new(attached.welcome.client_id),
            welcome: attached.welcome,
            pages: attached.pages,
            submit: Mutex::new(attached.submissions),
            results: Mutex::new(Results::new(attached.completions)),
            signal: attached.signal,
            wakeups,
            ledger: PageLedger::new(num_pages),
            next_batch: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            owner_pid: std::process::id(),
        })
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.welcome.timeout_ms)
    }

    /// Whether calls may be made: in the process that attached, the bridge still there, and
    /// not closed.
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
        if let Some(err) = self.link.failure() {
            return Err(err.clone());
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the store"));
        }
        Ok(())
    }

    /// Pages from the bridge's pool (`Allocate` or `AllocateOne`), now this client's.
    fn take_pages(&self, request: Control) -> Result<Vec<PageHandle>> {
        self.check_usable()?;
        match self.link.call(&request)? {
            Control::Pages { pages } => Ok(self.held.take(pages)),
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to an allocation"))),
        }
    }

    /// A free page of this client's region, or None when none is free for it.
    pub fn allocate(&self) -> Result<Option<PageHandle>> {
        Ok(self.take_pages(Control::AllocateOne)?.pop())
    }

    /// `n` pages, or an error (and none allocated) if fewer are free for this client.
    pub fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        let count = u32::try_from(n).map_err(|_| Error::invalid("too many pages"))?;
        self.take_pages(Control::Allocate { count })
    }

    /// Gives a page back to the bridge; refused while an operation in flight uses it.
    pub fn free(&self, page: &PageHandle) -> Result<()> {
        self.check_usable()?;
        self.check(page)?;
        self.ledger.ensure_idle(page.index)?;
        match self.link.call(&Control::Free { index: page.index, generation: page.generation })? {
            Control::Freed => {
                self.held.forget(page.index);
                Ok(())
            }
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to a free"))),
        }
    }

    /// Whether `page` is one this client holds.
    pub fn check(&self, page: &PageHandle) -> Result<()> {
        self.held.check(page)
    }

    /// The page's address in this process.
    pub fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        self.check(page)?;
        Ok(self.pages.page_ptr(page.index as usize))
    }

    /// The page's offset from the start of this client's region.
    pub fn page_offset(&self, page: &PageHandle) -> Result<u64> {
        self.check(page)?;
        Ok(self.pages.page_offset(page.index as usize))
    }

    /// This client's region.
    pub fn arena(&self) -> &Arc<Arena> {
        &self.pages
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.pages.page_size()
    }

    /// Pages in this client's region (at most its quota).
    pub fn num_pages(&self) -> usize {
        self.pages.num_pages()
    }

    /// Pages this client may still take: what its region has left and the bridge's shared
    /// budget allows.
    pub fn free_pages(&self) -> Result<usize> {
        self.check_usable()?;
        match self.link.call(&Control::Stats)? {
            Control::StatsReply { free_pages } => Ok(free_pages as usize),
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to stats"))),
        }
    }

    /// Runs a batch and waits for it (see [`crate::front::PageStore::run`]).
    pub fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult> {
        let batch = self.send_batch(op, keys, pages, lengths, SendMode { exact_length: false, waited: true })?;
        self.wait(batch)
    }

    /// Submits a batch for [`BridgeClient::drain`]; its pages stay busy until then.
    pub fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        self.send_batch(op, keys, pages, lengths, SendMode { exact_length: false, waited: false })
    }

    /// A GET that reads only values of exactly `lengths` bytes (any other length is a miss),
    /// for [`super::Staging`].
    pub(super) fn submit_exact_get(&self, keys: &[&[u8]], pages: &[PageHandle], lengths: &[u64]) -> Result<u64> {
        self.send_batch(Op::Get, keys, pages, Some(lengths), SendMode { exact_length: true, waited: false })
    }

    fn lock_results(&self) -> MutexGuard<'_, Results> {
        self.results.lock().unwrap_or_else(|p| p.into_inner())
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
        let entries = rings::entries(keys, pages, lengths, self.welcome.page_size);
        let mut producer = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        let pieces = rings::split_for_ring(&entries, producer.capacity() / 4);
        let first = self.next_batch.fetch_add(pieces.len() as u64, Ordering::Relaxed);
        let records = rings::records(op, exact_length, &entries, &pieces, first);
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
        self.lock_results().expect(batch, op, keys.len(), claim, &pieces, waited);
        let deadline = Instant::now() + self.timeout();
        for (sent, record) in records.iter().enumerate() {
            if let Err(err) = rings::push(&mut producer, record, deadline, &self.signal, &self.link) {
                if sent == 0 {
                    let claim = self.lock_results().unsend(batch);
                    if let Some(claim) = claim {
                        self.ledger.release(claim);
                    }
                    return Err(err);
                }
                // Pieces are in the bridge already: the batch completes when they do, the
                // keys of the pieces not sent failed with why.
                drop(producer);
                self.lock_results().fail_unsent(batch, pieces[sent].start, &err);
                self.signal.signal();
                return Ok(batch);
            }
        }
        producer.publish();
        drop(producer);
        self.signal.signal();
        Ok(batch)
    }

    /// Files every completion the bridge posted (see [`Results::collect`]); one that breaks
    /// the protocol ends this client.
    fn collect(&self, results: &mut Results) -> Result<()> {
        results.collect(&self.ledger).map_err(|err| self.link.fail(err))
    }

    /// Waits until the bridge posts something or goes away, at most `limit`.
    fn wait_for_bridge(&self, limit: Duration) -> Result<()> {
        self.wakeups.wait(self.link.watch(), limit);
        self.link.alive()
    }

    fn wait(&self, batch: u64) -> Result<BatchResult> {
        let give_up = Instant::now() + self.timeout() + GRACE;
        loop {
            {
                let mut results = self.lock_results();
                self.wakeups.reset();
                let collected = self.collect(&mut results);
                if let Some(result) = results.take_waited(batch) {
                    self.resignal_if(&results);
                    return Ok(result);
                }
                self.resignal_if(&results);
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
    fn resignal_if(&self, results: &Results) {
        if results.any_finished() {
            self.wakeups.signal();
        }
    }

    /// The bridge is gone: every batch still pending completes with `err`, key by key.
    fn abandon_all(&self, err: &Error) {
        self.lock_results().abandon_all(err, &self.ledger);
        self.wakeups.signal();
    }

    /// Finished `submit`ted batches; their pages are no longer busy. Once the bridge is gone,
    /// every batch still in flight is handed out failed, saying so.
    pub fn drain(&self) -> Result<Vec<BatchResult>> {
        if std::process::id() != self.owner_pid {
            return self.check_usable().map(|()| Vec::new());
        }
        if self.wakeups.hung_up() {
            let _ = self.link.alive();
        }
        let mut results = self.lock_results();
        self.wakeups.reset();
        let collected = self.collect(&mut results);
        if collected.is_err() || self.link.failure().is_some() {
            drop(results);
            let err = self.link.failure().cloned().unwrap_or_else(|| lost("the bridge went away".into()));
            self.abandon_all(&err);
            results = self.lock_results();
        }
        let finished = results.take_ready();
        if results.any_waited() {
            self.wakeups.signal();
        }
        Ok(finished)
    }

    /// Readable while finished batches wait to be drained, or the bridge went away.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.wakeups.fd()
    }

    /// Waits (up to the bridge's timeout) for every batch sent to complete, then detaches:
    /// the bridge takes this client's pages back. Later calls are refused.
    pub fn close(&self) {
        if std::process::id() != self.owner_pid || self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Every batch sent completes (the bridge answers each by its deadline) before the
        // socket closes and the bridge takes the pages back.
        let give_up = Instant::now() + self.timeout() + GRACE;
        while Instant::now() < give_up && self.lock_results().any_pending() {
            let mut results = self.lock_results();
            if self.collect(&mut results).is_err() {
                break;
            }
            let done = !results.any_pending();
            drop(results);
            if done || self.wait_for_bridge(give_up - Instant::now()).is_err() {
                break;
            }
        }
        if self.link.failure().is_none() {
            // The pages are back in the pool when this returns (those of batches that did
            // not finish in time follow when they do).
            let _ = self.link.call(&Control::Detach);
        }
        self.link.shut_down();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The bridge engine's I/O worker threads.
    pub fn num_workers(&self) -> usize {
        self.welcome.num_workers as usize
    }

    /// The bridge's socket and the server its engine talks to (never credentials).
    pub fn endpoint(&self) -> String {
        format!("bridge {} -> {}", self.link.path().display(), self.welcome.endpoint)
    }

    /// The counters of the bridge's engine, which every client of it shares.
    pub fn stats(&self) -> Result<crate::metrics::Snapshot> {
        self.check_usable()?;
        match self.link.call(&Control::Metrics)? {
            Control::MetricsReply { snapshot } => crate::metrics::Snapshot::decode(&snapshot)
                .ok_or_else(|| Error::new(ErrorKind::Protocol, "the bridge's counters do not decode")),
            other => Err(Error::new(ErrorKind::Protocol, format!("the bridge answered {other:?} to metrics"))),
        }
    }
}

impl Drop for BridgeClient {
    fn drop(&mut self) {
        self.close();
    }
}
