//! The paged store: the engine plus a pool of pages in its shared-memory arena. Pages are
//! checked on every use and counted while operations use them, so a page is never freed (and
//! handed to someone else) while a GET may still write into it.

use crate::arena::{Arena, PageHandle, PagePool, PoolError};
use crate::capacity::TrackedEngine;
use crate::conn::Op;
use crate::engine::{Batch, BatchResult, EngineConfig, Item, Memory};
use crate::error::{Error, ErrorKind, Result};
use crate::handle::EngineHandle;
use std::collections::{HashMap, HashSet};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the Python store offers, whether its engine runs in this process ([`PagedStore`]) or
/// in a bridge process ([`crate::bridge::BridgeClient`]).
pub trait PageStore: EngineHandle {
    /// A free page, or None when the pool is exhausted.
    fn allocate(&self) -> Result<Option<PageHandle>>;
    /// `n` pages, or an error (and none allocated) if fewer are free.
    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>>;
    fn free(&self, page: &PageHandle) -> Result<()>;
    /// Whether `page` is live here and may be used.
    fn check(&self, page: &PageHandle) -> Result<()>;
    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8>;
    fn page_offset(&self, page: &PageHandle) -> Result<u64>;
    /// The shared-memory arena the pages live in.
    fn arena(&self) -> &Arc<Arena>;
    fn page_size(&self) -> usize;
    fn num_pages(&self) -> usize;
    /// Pages free in the (possibly shared) pool.
    fn free_pages(&self) -> Result<usize>;
    fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult>;
    fn run_keys(&self, op: Op, keys: &[&[u8]]) -> Result<BatchResult>;
    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64>;
    fn submit_keys(&self, op: Op, keys: &[&[u8]]) -> Result<u64>;
}

pub struct PagedStore {
    engine: TrackedEngine,
    pool: PagePool,
    /// Operations in flight per page.
    busy: Vec<AtomicU32>,
    /// Pages of batches submitted for `drain`, released when drained.
    pending: Mutex<HashMap<u64, Vec<u32>>>,
    /// Serializes "check the page, then count it busy" against "check idle, then free".
    pages_lock: Mutex<()>,
}

/// SET takes a length per key (at most a page); so does a GET that reads only values of
/// exactly that length. A plain GET receives up to a whole page.
pub(crate) fn check_lengths(op: Op, keys: usize, lengths: Option<&[u64]>, exact_length: bool) -> Result<()> {
    let Some(lengths) = lengths else { return Ok(()) };
    if op != Op::Set && !(op == Op::Get && exact_length) {
        return Err(Error::invalid("lengths apply to SET only: GET receives up to a whole page"));
    }
    if lengths.len() != keys {
        return Err(Error::invalid(format!("{keys} keys but {} lengths", lengths.len())));
    }
    Ok(())
}

fn page_error(err: PoolError) -> Error {
    Error::new(ErrorKind::Page, err.to_string())
}

impl PagedStore {
    pub fn start(config: EngineConfig) -> Result<PagedStore> {
        if config.page_size == 0 {
            return Err(Error::invalid("page_size must be at least 1 byte"));
        }
        let num_pages = config.num_pages;
        let engine = TrackedEngine::start(config)?;
        let arena = engine.pages().expect("an engine started with pages has an arena").clone();
        let pool = PagePool::new(arena).map_err(page_error)?;
        Ok(PagedStore {
            engine,
            pool,
            busy: (0..num_pages).map(|_| AtomicU32::new(0)).collect(),
            pending: Mutex::new(HashMap::new()),
            pages_lock: Mutex::new(()),
        })
    }

    pub fn engine(&self) -> &TrackedEngine {
        &self.engine
    }

    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    pub fn allocate(&self) -> Result<Option<PageHandle>> {
        self.engine.check_usable()?;
        Ok(self.pool.allocate())
    }

    pub fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        self.engine.check_usable()?;
        self.pool.allocate_many(n).map_err(page_error)
    }

    pub fn free(&self, page: &PageHandle) -> Result<()> {
        self.engine.check_usable()?;
        let _guard = self.lock_pages();
        // An invalid handle gets the pool's own verdict (double free, stale, foreign) below.
        if self.pool.check(page).is_ok() && self.busy[page.index as usize].load(Ordering::Acquire) > 0 {
            return Err(Error::new(
                ErrorKind::Page,
                format!(
                    "page {} is in use by an operation in flight: free it once the operation completes",
                    page.index
                ),
            ));
        }
        self.pool.free(page).map_err(page_error)
    }

    /// Checks that `page` is live here and may be used (and its byte range).
    pub fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        self.pool.page_ptr(page).map_err(page_error)
    }

    fn lock_pages(&self) -> MutexGuard<'_, ()> {
        self.pages_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds the batch's items, checking every page and marking it busy.
    fn claim<'k>(
        &self,
        op: Op,
        keys: &[&'k [u8]],
        pages: &[PageHandle],
        lengths: Option<&[u64]>,
    ) -> Result<Vec<Item<'k>>> {
        self.engine.check_usable()?;
        if keys.len() != pages.len() {
            return Err(Error::invalid(format!("{} keys but {} pages", keys.len(), pages.len())));
        }
        check_lengths(op, keys.len(), lengths, false)?;
        let page_size = self.pool.page_size() as u64;
        let _guard = self.lock_pages();
        let mut items = Vec::with_capacity(keys.len());
        for (i, (key, page)) in keys.iter().zip(pages).enumerate() {
            self.pool.check(page).map_err(|e| page_error(e).context(format!("key {i}")))?;
            let len = match lengths {
                Some(lengths) if lengths[i] > page_size => {
                    return Err(Error::invalid(format!(
                        "key {i}: length {} is larger than the page size {page_size}",
                        lengths[i]
                    )));
                }
                Some(lengths) => lengths[i],
                None => page_size,
            };
            let offset = self.pool.page_offset(page).map_err(page_error)?;
            items.push(Item { key, memory: Memory::Arena { offset, len } });
        }
        if op == Op::Get {
            let mut seen = HashSet::with_capacity(pages.len());
            if let Some(twice) = pages.iter().find(|p| !seen.insert(p.index)) {
                return Err(Error::invalid(format!("page {} appears twice in one GET batch", twice.index)));
            }
        }
        for page in pages {
            self.busy[page.index as usize].fetch_add(1, Ordering::AcqRel);
        }
        Ok(items)
    }

    fn release(&self, pages: impl IntoIterator<Item = u32>) {
        for index in pages {
            self.busy[index as usize].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Runs a batch and waits for it. `lengths` (SET only) sends only the first bytes of each
    /// page; by default whole pages move.
    pub fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult> {
        let items = self.claim(op, keys, pages, lengths)?;
        let result = self.engine.run(Batch::new(op, &items));
        self.release(pages.iter().map(|p| p.index));
        result
    }

    /// Runs a batch of page-less operations (EXISTS, DEL).
    pub fn run_keys(&self, op: Op, keys: &[&[u8]]) -> Result<BatchResult> {
        self.engine.run(Batch::new(op, &key_items(keys)))
    }

    /// Submits a batch for `drain`; its pages stay busy until then.
    pub fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        let items = self.claim(op, keys, pages, lengths)?;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        match self.engine.submit(Batch::new(op, &items)) {
            Ok(id) => {
                pending.insert(id, pages.iter().map(|p| p.index).collect());
                Ok(id)
            }
            Err(err) => {
                drop(pending);
                self.release(pages.iter().map(|p| p.index));
                Err(err)
            }
        }
    }

    pub fn submit_keys(&self, op: Op, keys: &[&[u8]]) -> Result<u64> {
        self.engine.submit(Batch::new(op, &key_items(keys)))
    }

    /// Finished `submit`ted batches; their pages are no longer busy.
    pub fn drain(&self) -> Result<Vec<BatchResult>> {
        let results = self.engine.drain()?;
        if !results.is_empty() {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            for result in &results {
                if let Some(pages) = pending.remove(&result.id) {
                    self.release(pages);
                }
            }
        }
        Ok(results)
    }

    /// Completes or fails everything in flight, then closes the pool; `drain` still hands out
    /// the last results.
    pub fn close(&self) {
        self.engine.close();
        if self.engine.is_inherited() {
            return;
        }
        self.pool.close();
    }
}

fn key_items<'k>(keys: &[&'k [u8]]) -> Vec<Item<'k>> {
    keys.iter().map(|key| Item::key_only(key)).collect()
}

impl PageStore for PagedStore {
    fn allocate(&self) -> Result<Option<PageHandle>> {
        PagedStore::allocate(self)
    }

    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        PagedStore::allocate_many(self, n)
    }

    fn free(&self, page: &PageHandle) -> Result<()> {
        PagedStore::free(self, page)
    }

    fn check(&self, page: &PageHandle) -> Result<()> {
        if self.engine.is_closed() {
            return Err(Error::closed("the page's store"));
        }
        self.pool.check(page).map_err(page_error)
    }

    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        PagedStore::page_ptr(self, page)
    }

    fn page_offset(&self, page: &PageHandle) -> Result<u64> {
        self.pool.page_offset(page).map_err(page_error)
    }

    fn arena(&self) -> &Arc<Arena> {
        self.pool.arena()
    }

    fn page_size(&self) -> usize {
        self.pool.page_size()
    }

    fn num_pages(&self) -> usize {
        self.pool.capacity()
    }

    fn free_pages(&self) -> Result<usize> {
        Ok(self.pool.free_count())
    }

    fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult> {
        PagedStore::run(self, op, keys, pages, lengths)
    }

    fn run_keys(&self, op: Op, keys: &[&[u8]]) -> Result<BatchResult> {
        PagedStore::run_keys(self, op, keys)
    }

    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        PagedStore::submit(self, op, keys, pages, lengths)
    }

    fn submit_keys(&self, op: Op, keys: &[&[u8]]) -> Result<u64> {
        PagedStore::submit_keys(self, op, keys)
    }
}

impl EngineHandle for PagedStore {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        PagedStore::drain(self)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.engine.event_fd()
    }

    fn close(&self) {
        PagedStore::close(self)
    }

    fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    fn num_workers(&self) -> usize {
        self.engine.num_workers()
    }

    fn endpoint(&self) -> String {
        self.engine.endpoint().to_owned()
    }

    fn local_engine(&self) -> Option<&TrackedEngine> {
        Some(&self.engine)
    }
}
