//! The fronts: what callers (the Python bindings, a bridge) run batches through, whether the
//! engine runs in this process or in a bridge process. Twins sit side by side:
//!
//! | | engine in this process | engine in a bridge |
//! |---|---|---|
//! | pages of a pool ([`PageStore`]) | [`LocalPageStore`] | [`BridgedPageStore`] |
//! | caller buffers and registered regions ([`BufferConnector`]) | [`TrackedEngine`] itself | [`BridgedConnector`] (no regions) |
//!
//! Every front checks a batch against `crate::op::BatchShape` and counts the pages it uses
//! in a [`crate::arena::PageLedger`] before anything is sent.
//!
//! The bridge twins are adapters: the bridge's protocol, the client's side of it included,
//! lives in [`crate::bridge`] (`crate::bridge::client`), so these files only answer the
//! traits below.

mod bridged_connector;
mod bridged_store;
mod local_connector;
mod local_store;

pub use bridged_connector::BridgedConnector;
pub use bridged_store::BridgedPageStore;
pub use local_store::LocalPageStore;
// What the fronts' API names from the layers below.
pub use crate::capacity::{CapacityStats, TrackedEngine};

use crate::arena::{Arena, PageHandle};

use crate::engine::{BatchResult, IoLoopChoice};
use crate::error::Result;
use crate::memory::RawBuf;
use crate::op::Op;
use crate::settings::CapacityConfig;
use lmcache_resp_numa::Placement;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// What a front can tell about the engine behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineFacts {
    /// Where the I/O threads run and the arena's memory lives, and why. Behind a bridge, it
    /// says that the bridge process runs them.
    pub placement: Placement,
    /// Which loop the I/O workers run, and why (None behind a bridge: the bridge process's
    /// engine chose it, and its own placement names it).
    pub io_loop: Option<IoLoopChoice>,
    /// `(kernel thread id, planned CPU)` of each I/O worker in this process (none behind a
    /// bridge).
    pub worker_threads: Vec<(i32, Option<u32>)>,
    /// Client-side capacity tracking, when it is on for this front.
    pub capacity: Option<(CapacityConfig, CapacityStats)>,
}

impl EngineFacts {
    /// The facts of a front whose engine runs in the bridge process reached at `endpoint`.
    pub fn in_bridge(endpoint: &str) -> EngineFacts {
        EngineFacts {
            placement: Placement {
                worker_cpus: Vec::new(),
                cpuset: Vec::new(),
                memory_node: None,
                explanation: vec![format!("the I/O threads run in the bridge process ({endpoint})")],
            },
            io_loop: None,
            worker_threads: Vec::new(),
            capacity: None,
        }
    }
}

/// What every front answers.
pub trait EngineFront: Send + Sync {
    /// Finished batches submitted for draining; clears the event fd's readiness.
    fn drain(&self) -> Result<Vec<BatchResult>>;
    /// Readable while finished batches wait to be drained.
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// Completes or fails everything in flight, then refuses further calls.
    fn close(&self);
    /// Whether `close` was called.
    fn is_closed(&self) -> bool;
    /// I/O worker threads of the engine.
    fn num_workers(&self) -> usize;
    /// Where the batches go, for reprs and logs (never credentials).
    fn endpoint(&self) -> String;
    /// Placement, worker threads, capacity tracking.
    fn facts(&self) -> EngineFacts;
    /// The counters of the engine behind the front (see [`crate::metrics`]); behind a bridge,
    /// the bridge engine's, which every client of it shares.
    fn stats(&self) -> Result<crate::metrics::Snapshot>;
    /// Pushes a record that is not a descriptor into a worker's ring, as a bug or a stray
    /// write would (tests of what callers see when a worker stops).
    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, worker: usize) -> Result<()>;
}

/// Pages of a pool in a shared-memory arena, and batches over them.
pub trait PageStore: EngineFront {
    /// A free page, or None when the pool is exhausted.
    fn allocate(&self) -> Result<Option<PageHandle>>;
    /// `n` pages, or an error (and none allocated) if fewer are free.
    fn allocate_many(&self, n: usize) -> Result<Vec<PageHandle>>;
    /// Returns a page to the pool; refused while an operation in flight uses it.
    fn free(&self, page: &PageHandle) -> Result<()>;
    /// Whether `page` is live here and may be used.
    fn check(&self, page: &PageHandle) -> Result<()>;
    /// The page's address in this process.
    fn page_ptr(&self, page: &PageHandle) -> Result<*mut u8>;
    /// The page's offset from the start of the arena.
    fn page_offset(&self, page: &PageHandle) -> Result<u64>;
    /// The shared-memory arena the pages live in.
    fn arena(&self) -> &Arc<Arena>;
    /// Bytes per page.
    fn page_size(&self) -> usize;
    /// Pages in the pool.
    fn num_pages(&self) -> usize;
    /// Pages free in the (possibly shared) pool.
    fn free_pages(&self) -> Result<usize>;
    /// Runs a batch and waits for it. GET and SET take one page per key (SET sends the first
    /// `lengths[i]` bytes of each, whole pages by default); EXISTS and DEL take none.
    fn run(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<BatchResult>;
    /// Submits a batch for [`EngineFront::drain`]; its pages stay busy until then.
    fn submit(&self, op: Op, keys: &[&[u8]], pages: &[PageHandle], lengths: Option<&[u64]>) -> Result<u64>;
}

/// Batches over the caller's own memory (LMCache's pinned pool, SGLang's host KV pool).
///
/// GET reads a value only when its length is exactly its buffer's or range's (the engines'
/// chunks and pages have fixed sizes): any other length is a miss. SET stores each buffer or
/// range whole. EXISTS and DELETE take keys only. Every buffer stays valid until its batch is
/// drained, as [`RawBuf::new`] promised; a registered region until it is unregistered.
pub trait BufferConnector: EngineFront {
    /// Submits a batch for [`EngineFront::drain`].
    fn submit(&self, op: Op, keys: &[&[u8]], buffers: &[RawBuf]) -> Result<u64>;
    /// Registers memory the caller moves many values through (a host KV pool) once; batches
    /// then name ranges of it by offset ([`RangeBatch`]). Returns the region's id.
    fn register_region(&self, memory: RawBuf) -> Result<u32>;
    /// Forgets a region; refused while a batch in flight names it.
    fn unregister_region(&self, region: u32) -> Result<()>;
    /// Runs a batch over ranges of a registered region and waits for it.
    fn run_ranges(&self, batch: &RangeBatch<'_>) -> Result<BatchResult>;
    /// Submits a batch over ranges of a registered region for [`EngineFront::drain`].
    fn submit_ranges(&self, batch: &RangeBatch<'_>) -> Result<u64>;
}

/// A batch over ranges of a registered region, as SGLang's pages sit in its host pool: each
/// of `keys` names a page of `suffixes.len()` segments (one when `suffixes` is empty), and
/// segment `j` of page `p` is the key `prefix ++ keys[p] ++ suffixes[j]`, whose value is the
/// range `spans[p * segments + j]` (`(offset, len)`) of the region. The result has one outcome
/// per segment, in that order. (Joining the keys here spares the caller a loop over pages.)
#[derive(Clone, Copy, Debug)]
pub struct RangeBatch<'a> {
    /// GET, SET, EXISTS or DEL.
    pub op: Op,
    /// The registered region.
    pub region: u32,
    /// What every key starts with (a namespace), or empty.
    pub prefix: &'a [u8],
    /// One key per page.
    pub keys: &'a [&'a [u8]],
    /// What each segment's key ends with; empty: one segment per page, the page's key.
    pub suffixes: &'a [&'a [u8]],
    /// `(offset, len)` per segment; empty for EXISTS and DEL.
    pub spans: &'a [(u64, u64)],
}

impl RangeBatch<'_> {
    /// Segments per page.
    pub fn segments(&self) -> usize {
        self.suffixes.len().max(1)
    }

    /// Every segment's key, page by page.
    pub fn segment_keys(&self) -> Vec<Vec<u8>> {
        let suffixes: &[&[u8]] = if self.suffixes.is_empty() { &[b""] } else { self.suffixes };
        let prefix = self.prefix;
        self.keys.iter().flat_map(|key| suffixes.iter().map(move |suffix| [prefix, *key, *suffix].concat())).collect()
    }
}

impl EngineFront for TrackedEngine {
    fn drain(&self) -> Result<Vec<BatchResult>> {
        TrackedEngine::drain(self)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        TrackedEngine::event_fd(self)
    }

    fn close(&self) {
        TrackedEngine::close(self);
    }

    fn is_closed(&self) -> bool {
        TrackedEngine::is_closed(self)
    }

    fn num_workers(&self) -> usize {
        TrackedEngine::num_workers(self)
    }

    fn endpoint(&self) -> String {
        TrackedEngine::endpoint(self).to_owned()
    }

    fn facts(&self) -> EngineFacts {
        EngineFacts {
            placement: self.placement().clone(),
            io_loop: Some(self.io_loop()),
            worker_threads: self.worker_threads(),
            capacity: self.capacity(),
        }
    }

    fn stats(&self) -> Result<crate::metrics::Snapshot> {
        Ok(TrackedEngine::stats(self))
    }

    #[cfg(feature = "test-hooks")]
    fn corrupt_ring_for_test(&self, worker: usize) -> Result<()> {
        TrackedEngine::corrupt_ring_for_test(self, worker)
    }
}
