//! The paged store with its engine in this process: the engine plus a pool of pages in its
//! shared-memory arena. Pages are checked on every use and counted while operations use them
//! ([`PageLedger`]), so a page is never freed (and handed to someone else) while a GET may
//! still write into it.

use super::{EngineFacts, EngineFront, PageStore};
use crate::arena::{Arena, Claim, PageHandle, PageLedger, PagePool, PoolError};
use crate::capacity::TrackedEngine;
use crate::engine::{Batch, BatchResult, EngineConfig, Item, Memory};
use crate::error::{Error, ErrorKind, Result};
use crate::op::{BatchShape, MemoryKind, Op};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// A page pool and the engine that moves its pages, both in this process.
pub struct LocalPageStore {
    engine: TrackedEngine,
    pool: PagePool,
    ledger: PageLedger,
}

fn page_error(err: PoolError) -> Error {
    Error::new(ErrorKind::Page, err.to_string())
}

impl LocalPageStore {
    /// Starts the engine with `config.num_pages` pages of `config.page_size` bytes.
    pub fn start(config: EngineConfig) -> Result<LocalPageStore> {
        if config.page_size == 0 {
            return Err(Error::invalid("page_size must be at least 1 byte"));
        }
        let num_pages = config.num_pages;
        let engine = TrackedEngine::start(config)?;
        let arena = engine.pages().expect("an engine started with pages has an arena").clone();
        let pool = PagePool::new(arena).map_err(page_error)?;
        Ok(LocalPageStore { engine, pool, ledger: PageLedger::new(num_pages) })
    }

    /// The page pool.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// Checks the batch and every page, and counts the pages busy: the engine's items and the
    /// claim to release once the batch completes.
    fn claim<'k>(
        &self,
        op: Op,
        keys: &[&'k [u8]],
        pages: &[PageHandle],
        lengths: Option<&[u64]>,
    ) -> Result<(Vec<Item<'k>>, Claim)> {
        self.engine.check_usable()?;
        let page_size = self.pool.page_size() as u64;
        let memory = MemoryKind::Pages { page_size };
        BatchShape { op, keys, memory, memories: pages.len(), lengths, exact_length: false }.check()?;
        let indices: Vec<u32> = pages.iter().map(|page| page.index).collect();
        let claim = self.ledger.claim(op, &indices, || {
            pages
                .iter()
                .enumerate()
                .try_for_each(|(i, page)| self.pool.check(page).map_err(|e| page_error(e).context(format!("key {i}"))))
        })?;
        let items = keys
            .iter()
            .zip(pages)
            .enumerate()
            .map(|(i, (key, page))| {
                let offset = self.pool.page_offset(page).expect("checked by the claim");
                let len = lengths.map_or(page_size, |lengths| lengths[i]);
                Item { key, memory: Memory::Arena { offset, len } }
            })
            .chain(keys.iter().skip(pages.len()).map(|key| Item::key_only(key)))
            .collect();
        Ok((items, claim))
    }
}

impl PageStore for LocalPageStore {
    fn allocate(&self) -> Result<Option<PageHandle>> {
        self.engine.check_usable()?;
        Ok(self.pool.allocate())
    }

    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>> {
        self.engine.check_usable()?;
        self.pool.allocate_many(n).map_err(page_error)
    }

    fn free(&self, page: &PageHandle) -> Result<()> {
        self.engine.check_usable()?;
        // An invalid handle gets the pool's own verdict on freeing it (double free, stale,
        // foreign); only a live page can be busy.
        if self.pool.check(page).is_err() {
            return self.pool.free(page).map_err(page_error);
        }
        self.ledger.free_if_idle(page.index, || self.pool.free(page).map_err(page_error))
    }

    fn check(&self, page: &PageHandle) -> Result<()> {
        if self.engine.is_closed() {
            return Err(Error::closed("the page's store"));
        }
        self.pool.check(page).map_err(page_error)
    }

    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8> {
        self.pool.page_ptr(page).map_err(page_error)
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
        let (items, claim) = self.claim(op, keys, pages, lengths)?;
        let result = self.engine.run(Batch::new(op, &items));
        self.ledger.release(claim);
        result
    }

    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64> {
        let (items, claim) = self.claim(op, keys, pages, lengths)?;
        self.ledger.submit_filed(claim, || self.engine.submit(Batch::new(op, &items)))
    }
}

impl EngineFront for LocalPageStore {
    /// Finished `submit`ted batches; their pages are no longer busy.
    fn drain(&self) -> Result<Vec<BatchResult>> {
        let results = self.engine.drain()?;
        self.ledger.settle(results.iter().map(|result| result.id));
        Ok(results)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.engine.event_fd()
    }

    /// Completes or fails everything in flight, then closes the pool; `drain` still hands out
    /// the last results.
    fn close(&self) {
        self.engine.close();
        if self.engine.is_inherited() {
            return;
        }
        self.pool.close();
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

    fn facts(&self) -> EngineFacts {
        EngineFront::facts(&self.engine)
    }

    fn stats(&self) -> Result<crate::metrics::Snapshot> {
        Ok(self.engine.stats())
    }

    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, worker: usize) -> Result<()> {
        self.engine.corrupt_ring_for_test(worker)
    }
}
