//! The shared-memory arena that KV-cache pages live in, and the paged pool over it.
//!
//! An engine's arena holds only pages: its rings and batch counters live in private memory
//! (`crate::engine`), so nothing another process writes reaches its workers but page bytes. A
//! bridge client's region is an arena that also holds that client's ring pair; the layout
//! keeps a table of batch counters that the arenas in use leave empty (`batch_slots: 0`).
//!
//! Files: `layout.rs` (where everything lives, [`ArenaLayout`], and the header), `mapping.rs`
//! (the sealed memfd, mapped `MAP_SHARED`: [`Arena`]), `pool.rs` ([`PagePool`]) and
//! `ledger.rs` ([`PageLedger`]: the pages operations in flight use, so none is freed while a
//! GET may write into it).
//!
//! Python allocates a pool of fixed-size pages (LMCache's memory objects) inside an [`Arena`];
//! Rust I/O threads address pages by offset and receive into / send from them directly. The
//! arena is one memfd, sealed against resizing and mapped `MAP_SHARED`, whose
//! [`ArenaHeader`] at offset 0 records where everything is, so a second mapping or another
//! process (given the fd) finds the pages and rings again ([`Arena::attach`]).
//!
//! Layout (all offsets from the arena base, see [`ArenaLayout`]):
//!
//! ```text
//! [0, 4096)            header: magic "LMCARENA", version, sizes, offsets, ring table
//! rings_offset (4096)  per worker: submission region, completion region, each starting on
//!                      its own 4096-byte boundary (sizes are the caller's, ring header incl.)
//! batch_table_offset   batch_slots AtomicU32 counters, 64 bytes apart (4096-aligned start)
//! pages_offset         page i at pages_offset + i * page_stride, page_stride = page_size
//!                      rounded up to 4096: every page is 4096-aligned
//! ```
//!
//! [`PagePool`] mirrors LMCache's allocator: `pool_size // page_size` pages
//! ([`ArenaSpec::pages_for_pool_size`]), `allocate()` pops a free page from a deque or returns
//! None, `free(page)` pushes it back; handles carry a pool id and a per-page generation, so
//! double frees, stale handles and pages of other pools are reported instead of corrupting
//! the pool.

mod layout;
mod ledger;
mod mapping;
mod pool;

use std::fmt;

pub use layout::{
    ARENA_MAGIC, ARENA_VERSION, ArenaHeader, ArenaLayout, ArenaSpec, BATCH_SLOT_STRIDE, FLAG_HUGE_PAGES,
    HEADER_NAME_LEN, HEADER_SIZE, MAX_ARENA_SIZE, MAX_PAGES, MAX_RINGS, OS_PAGE_SIZE, RingHeaderEntry, RingRegion,
    RingRegionSpec,
};
pub use ledger::{Claim, PageLedger};
pub use mapping::{Arena, HugePages};
pub use pool::{PageHandle, PagePool, PoolError};

/// Why an arena could not be laid out, created or attached.
#[derive(Debug)]
pub enum ArenaError {
    /// `page_size` was 0.
    ZeroPageSize,
    /// A pool was given both or neither of a page count and a size in bytes.
    PoolSize,
    /// A ring region of 0 bytes.
    EmptyRingRegion {
        /// The worker whose submission or completion region was empty.
        worker: usize,
    },
    /// More ring pairs than one header can describe ([`MAX_RINGS`]).
    TooManyRings {
        /// Ring pairs asked for.
        requested: usize,
        /// The most supported.
        max: usize,
    },
    /// More pages than a [`PageHandle`] can address ([`MAX_PAGES`]).
    TooManyPages {
        /// Pages asked for.
        requested: usize,
        /// The most supported.
        max: usize,
    },
    /// A size overflowed or exceeded [`MAX_ARENA_SIZE`].
    TooLarge {
        /// Which part of the arena grew too large (e.g. "page area").
        what: &'static str,
        /// The limit exceeded, in bytes.
        limit: usize,
    },
    /// A system call failed.
    Os {
        /// The call that failed (e.g. "mmap").
        op: &'static str,
        /// The OS error it returned.
        source: std::io::Error,
    },
    /// An attached file is not a valid arena.
    InvalidHeader {
        /// What in the header is wrong.
        reason: String,
    },
    /// An attached file is not sealed against shrinking: mapping it could crash the process.
    NotSealed,
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::ZeroPageSize => f.write_str("invalid arena: page size must be at least 1 byte"),
            ArenaError::PoolSize => f.write_str("give exactly one of num_pages and pool_size"),
            ArenaError::EmptyRingRegion { worker } => {
                write!(f, "invalid arena: the ring regions of I/O worker {worker} must not be empty")
            }
            ArenaError::TooManyRings { requested, max } => {
                write!(f, "invalid arena: {requested} ring pairs requested, at most {max} are supported")
            }
            ArenaError::TooManyPages { requested, max } => {
                write!(f, "invalid arena: {requested} pages requested, at most {max} are supported")
            }
            ArenaError::TooLarge { what, limit } => {
                write!(f, "invalid arena: the {what} would make the arena larger than {limit} bytes")
            }
            ArenaError::Os { op, source } => write!(f, "cannot set up the shared-memory arena: {op} failed: {source}"),
            ArenaError::InvalidHeader { reason } => write!(f, "not a valid lmcache-resp arena: {reason}"),
            ArenaError::NotSealed => {
                f.write_str("not a valid lmcache-resp arena: the file is not sealed against shrinking")
            }
        }
    }
}

impl std::error::Error for ArenaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArenaError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}
