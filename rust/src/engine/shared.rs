//! What the workers share with the front-end: the control block, the arena, the doorbells,
//! the buffer and region tables, the counters, and whether (and why) the engine failed. Its own module,
//! below both `Engine` (mod.rs) and the workers, which each use it.

use super::buffers::BufferTable;
use super::control::ControlBlock;
use super::regions::RegionTable;
use super::{counter, futex};
use crate::arena::Arena;
use crate::error::{Error, ErrorKind};
use crate::net::EventFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What the workers share with the front-end.
pub(crate) struct Shared {
    pub control: Arc<ControlBlock>,
    /// The page arena (None when all memory is caller buffers).
    pub pages: Option<Arc<Arena>>,
    pub pipeline: crate::conn::PipelineLimits,
    /// Every SET makes its key expire after this many milliseconds (`ttl_seconds`); None:
    /// never.
    pub set_expiry_ms: Option<u64>,
    pub completion_event: EventFd,
    pub doorbells: Vec<Arc<EventFd>>,
    pub buffers: BufferTable,
    /// Caller memory registered once and named by offset.
    pub regions: RegionTable,
    /// No more records will be pushed: workers fail what is left and exit.
    pub sealed: AtomicBool,
    /// Set once, by whoever finds the engine broken first ([`Shared::fail`]).
    pub(super) failure: OnceLock<Error>,
    /// The always-on counters (crate::metrics).
    pub metrics: Arc<crate::metrics::EngineMetrics>,
    /// Why the first worker whose io_uring the kernel stopped serving moved to the poll loop
    /// (`net::uring`, "A ring the kernel stops serving"), if one did.
    pub ring_failure: Mutex<Option<String>>,
}

impl Shared {
    pub fn failure(&self) -> Option<&Error> {
        self.failure.get()
    }

    /// The engine is broken: remember why (the first reason wins), stop taking work, make the
    /// workers drop their connections at once, and wake everyone who waits.
    pub fn fail(&self, err: Error) {
        let err = Error::new(ErrorKind::EngineFailed, err.message().to_owned());
        if self.failure.set(err).is_err() {
            return;
        }
        self.sealed.store(true, Ordering::Release);
        for doorbell in &self.doorbells {
            doorbell.signal();
        }
        self.completion_event.signal();
        for slot in 0..self.control.slots() {
            futex::futex_wake_all(self.control.counter(slot));
        }
    }

    pub fn counter(&self, slot: u32) -> &AtomicU32 {
        self.control.counter(slot as usize)
    }

    /// Counts `keys` completions (already published) off the batch in `slot`; wakes the
    /// waiting thread if they were its last. Returns whether drainers must be signalled (the
    /// caller signals the eventfd once for a burst).
    pub fn count_off(&self, slot: u32, keys: u32) -> bool {
        let counter = self.counter(slot);
        match counter::wake_for(counter.fetch_sub(keys, Ordering::AcqRel), keys) {
            counter::Wake::Nobody => false,
            counter::Wake::Waiter => {
                futex::futex_wake_all(counter);
                false
            }
            counter::Wake::Drainers => true,
        }
    }
}
