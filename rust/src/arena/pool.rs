//! LMCache's paged pool over an arena: `allocate()` pops a free page from a deque (None when
//! exhausted), `free(page)` pushes it back, and no page is ever handed out twice.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Arena;

/// One allocation: which pool, which page, and which allocation of that page.
///
/// `generation` is bumped each time the page is allocated, so a handle kept after `free`
/// is recognized as stale even once the page belongs to someone else. (It wraps after 2^32
/// allocations of one page; a handle that old would go undetected.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageHandle {
    /// The [`PagePool::id`] of the pool that handed the page out.
    pub pool_id: u64,
    /// The page's index in its arena's page area.
    pub index: u32,
    /// Which allocation of the page this is (see above).
    pub generation: u32,
}

/// Why a pool operation failed. Messages are meant for Python users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// Not enough free pages (nothing was allocated).
    Exhausted {
        /// Pages asked for.
        requested: usize,
        /// Pages free at the time.
        available: usize,
    },
    /// The page was freed and has not been allocated since.
    DoubleFree {
        /// The page's index.
        index: u32,
    },
    /// The handle is from an earlier allocation of the page: the page was freed (and may have
    /// been handed out again).
    Stale {
        /// The page's index.
        index: u32,
    },
    /// The handle does not come from this pool.
    ForeignPage,
    /// The pool was closed.
    Closed,
    /// Another pool already manages this arena's pages.
    ArenaInUse,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Exhausted { requested, available } => write!(
                f,
                "out of pages: {requested} page(s) requested but only {available} free (free some pages or use a larger pool)"
            ),
            PoolError::DoubleFree { index } => write!(f, "page {index} was already freed (double free)"),
            PoolError::Stale { index } => write!(
                f,
                "page {index} was freed, so this handle is no longer valid (use after free: the page may now hold someone else's data)"
            ),
            PoolError::ForeignPage => f.write_str("page belongs to a different store"),
            PoolError::Closed => f.write_str("the page pool is closed"),
            PoolError::ArenaInUse => f.write_str("the arena's pages are already managed by another page pool"),
        }
    }
}

impl std::error::Error for PoolError {}

#[derive(Clone, Copy, Default)]
struct Slot {
    generation: u32,
    live: bool,
}

struct PoolState {
    closed: bool,
    free: VecDeque<u32>,
    slots: Vec<Slot>,
}

impl PoolState {
    /// Pops one free page, bumping its generation.
    fn pop(&mut self, pool_id: u64) -> Option<PageHandle> {
        let index = self.free.pop_front()?;
        let slot = &mut self.slots[index as usize];
        debug_assert!(!slot.live, "page {index} on the free list while allocated");
        slot.generation = slot.generation.wrapping_add(1);
        slot.live = true;
        Some(PageHandle { pool_id, index, generation: slot.generation })
    }

    /// Whether `handle` is a live allocation; `freeing` picks the error for a freed page.
    fn check(&self, pool_id: u64, handle: &PageHandle, freeing: bool) -> Result<(), PoolError> {
        if self.closed {
            return Err(PoolError::Closed);
        }
        if handle.pool_id != pool_id {
            return Err(PoolError::ForeignPage);
        }
        let index = handle.index;
        let slot = self.slots.get(index as usize).ok_or(PoolError::ForeignPage)?;
        if slot.generation != handle.generation {
            return Err(PoolError::Stale { index });
        }
        if !slot.live {
            return Err(if freeing { PoolError::DoubleFree { index } } else { PoolError::Stale { index } });
        }
        Ok(())
    }

    fn release(&mut self, index: u32) {
        self.slots[index as usize].live = false;
        self.free.push_back(index);
    }
}

/// The pages of one arena, handed out one allocation at a time. Thread-safe; the lock is held
/// only to pop or push indices.
pub struct PagePool {
    arena: Arc<Arena>,
    id: u64,
    state: Mutex<PoolState>,
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

impl PagePool {
    /// A pool of all of `arena`'s pages, all free. One pool per arena (in this process): a
    /// second one would hand out the same pages again, so it is refused with
    /// [`PoolError::ArenaInUse`] until the first is dropped.
    pub fn new(arena: Arc<Arena>) -> Result<PagePool, PoolError> {
        if arena.pooled.swap(true, Ordering::AcqRel) {
            return Err(PoolError::ArenaInUse);
        }
        let capacity = arena.num_pages();
        let state =
            PoolState { closed: false, free: (0..capacity as u32).collect(), slots: vec![Slot::default(); capacity] };
        Ok(PagePool { arena, id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed), state: Mutex::new(state) })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Nothing panics while the lock is held; a poisoned lock's state is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This pool's id, unique in the process (the `pool_id` of its handles).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The arena whose pages this pool hands out.
    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    /// Total pages.
    pub fn capacity(&self) -> usize {
        self.arena.num_pages()
    }

    /// Data bytes per page.
    pub fn page_size(&self) -> usize {
        self.arena.page_size()
    }

    /// Pages free now (0 once closed).
    pub fn free_count(&self) -> usize {
        let state = self.lock();
        if state.closed { 0 } else { state.free.len() }
    }

    /// Whether [`PagePool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// One free page, or None when the pool is exhausted (or closed), like LMCache's
    /// `allocate()`. [`PagePool::try_allocate`] says which.
    pub fn allocate(&self) -> Option<PageHandle> {
        self.try_allocate().ok()
    }

    /// One free page, or [`PoolError::Exhausted`] / [`PoolError::Closed`].
    pub fn try_allocate(&self) -> Result<PageHandle, PoolError> {
        let mut state = self.lock();
        if state.closed {
            return Err(PoolError::Closed);
        }
        state.pop(self.id).ok_or(PoolError::Exhausted { requested: 1, available: 0 })
    }

    /// `n` pages, or none at all if fewer than `n` are free.
    pub fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>, PoolError> {
        let mut pages = Vec::with_capacity(n.min(self.capacity()));
        let mut state = self.lock();
        if state.closed {
            return Err(PoolError::Closed);
        }
        let available = state.free.len();
        if n > available {
            return Err(PoolError::Exhausted { requested: n, available });
        }
        pages.extend((0..n).map_while(|_| state.pop(self.id)));
        drop(state);
        debug_assert_eq!(pages.len(), n);
        Ok(pages)
    }

    /// Returns a page to the pool. Errors (and changes nothing) for a page already freed, a
    /// stale handle, a page of another pool, or a closed pool.
    pub fn free(&self, page: &PageHandle) -> Result<(), PoolError> {
        let mut state = self.lock();
        state.check(self.id, page, true)?;
        state.release(page.index);
        Ok(())
    }

    /// Frees all of `pages`, or none of them if any would fail (a page listed twice is a
    /// double free).
    pub fn free_many(&self, pages: &[PageHandle]) -> Result<(), PoolError> {
        let mut state = self.lock();
        for (i, page) in pages.iter().enumerate() {
            state.check(self.id, page, true)?;
            if pages[..i].contains(page) {
                return Err(PoolError::DoubleFree { index: page.index });
            }
        }
        for page in pages {
            state.release(page.index);
        }
        Ok(())
    }

    /// Whether `page` is a live allocation of this pool.
    pub fn check(&self, page: &PageHandle) -> Result<(), PoolError> {
        self.lock().check(self.id, page, false)
    }

    /// The page's memory (`page_size` bytes), if `page` is a live allocation of this pool.
    pub fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8, PoolError> {
        self.check(page)?;
        Ok(self.arena.page_ptr(page.index as usize))
    }

    /// The page's offset from the arena base, if `page` is a live allocation of this pool.
    pub fn page_offset(&self, page: &PageHandle) -> Result<u64, PoolError> {
        self.check(page)?;
        Ok(self.arena.page_offset(page.index as usize))
    }

    /// Closes the pool: every later call fails with [`PoolError::Closed`] (`allocate` returns
    /// None). Pages stay mapped, since views of them may still exist. Idempotent.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.free = VecDeque::new();
    }
}

impl Drop for PagePool {
    fn drop(&mut self) {
        self.arena.pooled.store(false, Ordering::Release);
    }
}

impl fmt::Debug for PagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagePool")
            .field("id", &self.id)
            .field("arena", &self.arena.name())
            .field("capacity", &self.capacity())
            .field("free", &self.free_count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::ArenaSpec;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicU64;

    fn pool(num_pages: usize) -> PagePool {
        let spec = ArenaSpec { page_size: 4096, num_pages, name_hint: "pool-test".into(), ..Default::default() };
        PagePool::new(Arc::new(Arena::create(&spec).unwrap())).unwrap()
    }

    #[test]
    fn allocates_every_page_once_then_none() {
        let pool = pool(10);
        assert_eq!((pool.capacity(), pool.free_count(), pool.page_size()), (10, 10, 4096));
        let pages: Vec<_> = (0..10).map(|_| pool.allocate().unwrap()).collect();
        let indices: HashSet<u32> = pages.iter().map(|p| p.index).collect();
        assert_eq!(indices, (0..10).collect());
        assert!(pages.iter().all(|p| p.pool_id == pool.id()));
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.try_allocate(), Err(PoolError::Exhausted { requested: 1, available: 0 }));
        assert_eq!(pool.free_count(), 0);
        for page in &pages {
            pool.check(page).unwrap();
        }
        // Page pointers are distinct, page-aligned and inside the arena.
        let ptrs: HashSet<usize> = pages.iter().map(|p| pool.page_ptr(p).unwrap() as usize).collect();
        assert_eq!(ptrs.len(), 10);
        assert!(ptrs.iter().all(|&p| p % 4096 == 0 && pool.arena().contains(p as *const u8, 4096)));

        pool.free(&pages[3]).unwrap();
        assert_eq!(pool.free_count(), 1);
        let again = pool.allocate().unwrap();
        assert_eq!(again.index, 3);
        assert_ne!(again.generation, pages[3].generation);
        assert_eq!(pool.allocate(), None);
    }

    #[test]
    fn allocate_many_is_all_or_nothing() {
        let pool = pool(8);
        let five = pool.allocate_many(5).unwrap();
        assert_eq!(five.iter().map(|p| p.index).collect::<HashSet<_>>().len(), 5);
        let err = pool.allocate_many(4).unwrap_err();
        assert_eq!(err, PoolError::Exhausted { requested: 4, available: 3 });
        assert_eq!(
            err.to_string(),
            "out of pages: 4 page(s) requested but only 3 free (free some pages or use a larger pool)"
        );
        assert_eq!(pool.free_count(), 3, "a failed allocate_many takes nothing");
        assert_eq!(pool.allocate_many(0).unwrap(), vec![]);
        let three = pool.allocate_many(3).unwrap();
        assert_eq!(pool.free_count(), 0);
        let all: HashSet<u32> = five.iter().chain(&three).map(|p| p.index).collect();
        assert_eq!(all.len(), 8);
        assert_eq!(pool.allocate_many(1), Err(PoolError::Exhausted { requested: 1, available: 0 }));
        pool.free_many(&five).unwrap();
        assert_eq!(pool.free_count(), 5);
        // free_many frees nothing when one of its pages is bad.
        assert_eq!(pool.free_many(&[three[0], five[0]]), Err(PoolError::DoubleFree { index: five[0].index }));
        assert_eq!(pool.free_many(&[three[1], three[1]]), Err(PoolError::DoubleFree { index: three[1].index }));
        assert_eq!(pool.free_count(), 5);
        pool.check(&three[0]).unwrap();
    }

    #[test]
    fn double_free_is_reported() {
        let pool = pool(2);
        let page = pool.allocate().unwrap();
        pool.free(&page).unwrap();
        let err = pool.free(&page).unwrap_err();
        assert_eq!(err, PoolError::DoubleFree { index: page.index });
        assert_eq!(err.to_string(), format!("page {} was already freed (double free)", page.index));
        assert_eq!(pool.free_count(), 2, "a double free does not list the page twice");
        assert_eq!(pool.check(&page), Err(PoolError::Stale { index: page.index }));
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_ne!(a.index, b.index);
    }

    #[test]
    fn stale_handle_after_reallocation_is_reported() {
        let pool = pool(1);
        let old = pool.allocate().unwrap();
        pool.free(&old).unwrap();
        let new = pool.allocate().unwrap();
        assert_eq!(new.index, old.index);
        let err = pool.free(&old).unwrap_err();
        assert_eq!(err, PoolError::Stale { index: old.index });
        assert!(err.to_string().contains("page 0 was freed"), "{err}");
        assert_eq!(pool.check(&old), Err(PoolError::Stale { index: 0 }));
        assert_eq!(pool.page_ptr(&old), Err(PoolError::Stale { index: 0 }));
        // The stale free did not take the page from its new owner.
        pool.check(&new).unwrap();
        assert_eq!(pool.allocate(), None);
        pool.free(&new).unwrap();
        // A stale handle whose page is free again is still stale, not a double free.
        assert_eq!(pool.free(&old), Err(PoolError::Stale { index: 0 }));
    }

    #[test]
    fn foreign_pages_are_reported() {
        let (a, b) = (pool(4), pool(4));
        assert_ne!(a.id(), b.id());
        let page = a.allocate().unwrap();
        let err = b.free(&page).unwrap_err();
        assert_eq!(err, PoolError::ForeignPage);
        assert_eq!(err.to_string(), "page belongs to a different store");
        assert_eq!(b.check(&page), Err(PoolError::ForeignPage));
        assert_eq!(b.free_count(), 4);
        // A forged index beyond the pool.
        let forged = PageHandle { index: 4, ..page };
        assert_eq!(a.free(&forged), Err(PoolError::ForeignPage));
        a.free(&page).unwrap();
    }

    #[test]
    fn one_pool_per_arena() {
        let first = pool(2);
        let arena = first.arena().clone();
        assert!(matches!(PagePool::new(arena.clone()), Err(PoolError::ArenaInUse)));
        drop(first);
        let second = PagePool::new(arena).unwrap();
        assert_eq!(second.free_count(), 2);
    }

    #[test]
    fn every_call_after_close_fails() {
        let pool = pool(4);
        let page = pool.allocate().unwrap();
        let ptr = pool.page_ptr(&page).unwrap();
        pool.close();
        pool.close();
        assert!(pool.is_closed());
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.try_allocate(), Err(PoolError::Closed));
        assert_eq!(pool.allocate_many(1), Err(PoolError::Closed));
        assert_eq!(pool.allocate_many(0), Err(PoolError::Closed));
        assert_eq!(pool.free(&page), Err(PoolError::Closed));
        assert_eq!(pool.free_many(&[page]), Err(PoolError::Closed));
        assert_eq!(pool.check(&page), Err(PoolError::Closed));
        assert_eq!(pool.page_ptr(&page), Err(PoolError::Closed));
        assert_eq!(pool.page_offset(&page), Err(PoolError::Closed));
        assert_eq!(pool.free_count(), 0);
        assert_eq!(PoolError::Closed.to_string(), "the page pool is closed");
        // The page is still mapped: views taken before close stay usable.
        // SAFETY: `ptr` is page memory of an arena the pool still holds.
        unsafe {
            ptr.write_volatile(7);
            assert_eq!(ptr.read_volatile(), 7);
        }
    }

    #[test]
    fn pages_of_an_empty_arena() {
        let pool = pool(0);
        assert_eq!(pool.capacity(), 0);
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.allocate_many(1), Err(PoolError::Exhausted { requested: 1, available: 0 }));
    }

    #[test]
    fn threads_never_share_a_page() {
        const PAGES: usize = 16;
        const THREADS: usize = 4;
        const ROUNDS: usize = 10_000;
        let pool = Arc::new(pool(PAGES));
        let held = Arc::new(AtomicU64::new(0)); // bit i: page i is held by some thread
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, held) = (pool.clone(), held.clone());
                std::thread::spawn(move || {
                    let mut mine: Vec<PageHandle> = Vec::new();
                    let mut allocated = 0usize;
                    for round in 0..ROUNDS {
                        // Hold between 0 and 5 pages, taking one or two at a time.
                        if mine.len() < 5 && (round % 3 != 0 || mine.is_empty()) {
                            let got = if round % 7 == 0 {
                                pool.allocate_many(2).unwrap_or_default()
                            } else {
                                pool.allocate().into_iter().collect()
                            };
                            for page in got {
                                let bit = 1u64 << page.index;
                                let before = held.fetch_or(bit, Ordering::AcqRel);
                                assert_eq!(before & bit, 0, "page {} handed to two threads", page.index);
                                let ptr = pool.page_ptr(&page).unwrap();
                                // SAFETY: the page is this thread's until it frees it.
                                unsafe { ptr.write_volatile(t as u8) };
                                mine.push(page);
                                allocated += 1;
                            }
                        } else if let Some(page) = mine.pop() {
                            let ptr = pool.page_ptr(&page).unwrap();
                            // SAFETY: as above; no other thread holds the page.
                            assert_eq!(unsafe { ptr.read_volatile() }, t as u8, "page {} overwritten", page.index);
                            // Unmark before freeing: once freed, another thread may take it.
                            held.fetch_and(!(1u64 << page.index), Ordering::AcqRel);
                            pool.free(&page).unwrap();
                            // Freeing it again never succeeds: it is free (double free) or
                            // another thread holds it now (stale).
                            let again = pool.free(&page).unwrap_err();
                            assert!(
                                matches!(again, PoolError::DoubleFree { .. } | PoolError::Stale { .. }),
                                "{again:?}"
                            );
                        }
                    }
                    for page in &mine {
                        held.fetch_and(!(1u64 << page.index), Ordering::AcqRel);
                    }
                    pool.free_many(&mine).unwrap();
                    allocated
                })
            })
            .collect();
        let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(total > ROUNDS, "threads allocated only {total} pages");
        assert_eq!(held.load(Ordering::Acquire), 0);
        assert_eq!(pool.free_count(), PAGES);
        assert_eq!(pool.allocate_many(PAGES).unwrap().len(), PAGES);
    }
}
