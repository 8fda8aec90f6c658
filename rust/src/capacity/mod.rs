//! Client-side capacity tracking as a layer over the engine: [`TrackedEngine`] is the engine
//! plus, when `max_capacity_gb` is set, a [`Tracker`] that learns what each batch stored,
//! used or removed, and eviction's DELs sent through the engine in the background.
//!
//! Every batch goes through this layer: the engine itself is not reachable from outside, so
//! nothing can bypass the tracker. What the layer passes through untouched (facts, the
//! event fd, closing) it names one by one.

mod tracker;

pub use tracker::{CapacityStats, Tracker};

use crate::conn::Outcome;
use crate::engine::{Batch, BatchResult, Engine, EngineConfig, Item};
use crate::error::Result;
use crate::op::Op;
use crate::settings::CapacityConfig;
use lmcache_resp_numa::Placement;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, MutexGuard};

/// The engine, with capacity tracking when the settings ask for it.
pub struct TrackedEngine {
    engine: Engine,
    tracking: Option<Mutex<Tracking>>,
    /// Failed keys, summarised per batch (rate-limited) as results come out.
    failures: crate::engine::FailureLog,
}

/// The tracker, and the keys of tracked batches until their results are known.
struct Tracking {
    tracker: Tracker,
    pending: HashMap<u64, (Op, TrackedKeys)>,
}

/// Each key of a tracked batch with its length.
type TrackedKeys = Vec<(Box<[u8]>, u64)>;

impl TrackedEngine {
    /// Starts the engine ([`Engine::start`]), tracking capacity when the settings set
    /// `max_capacity_gb`; an invalid capacity or eviction block is refused before anything
    /// starts.
    pub fn start(config: EngineConfig) -> Result<TrackedEngine> {
        let capacity = config.settings.capacity();
        if let Some(capacity) = &capacity {
            capacity.validate()?;
        }
        let engine = Engine::start(config)?;
        let tracking =
            capacity.map(|config| Mutex::new(Tracking { tracker: Tracker::new(config), pending: HashMap::new() }));
        Ok(TrackedEngine { engine, tracking, failures: crate::engine::FailureLog::default() })
    }

    /// Submits a batch for `drain`.
    pub fn submit(&self, batch: Batch<'_>) -> Result<u64> {
        let Some(mut tracking) = self.tracking_for(&batch) else { return self.engine.submit(batch) };
        // Filed under the lock held across the submit: a drain cannot observe the batch's
        // result before the tracker knows its keys.
        let reserved = self.reserve(&mut tracking, &batch);
        let submitted = self.engine.submit(batch);
        match &submitted {
            Ok(id) => tracking.file(*id, &batch),
            Err(_) => tracking.tracker.unreserve(reserved),
        }
        submitted
    }

    /// Runs a batch and waits for it.
    pub fn run(&self, batch: Batch<'_>) -> Result<BatchResult> {
        let result = self.run_tracked(batch);
        if let Some(result) = result.as_ref().ok().filter(|r| !r.all_succeeded()) {
            let keys: Vec<&[u8]> = batch.items.iter().map(|item| item.key).collect();
            self.failures.report(self.engine.endpoint(), result, Some(&keys));
        }
        result
    }

    fn run_tracked(&self, batch: Batch<'_>) -> Result<BatchResult> {
        let Some(mut tracking) = self.tracking_for(&batch) else { return self.engine.run(batch) };
        let reserved = self.reserve(&mut tracking, &batch);
        let ticket = match self.engine.submit_waiting(batch) {
            Ok(ticket) => ticket,
            Err(err) => {
                tracking.tracker.unreserve(reserved);
                return Err(err);
            }
        };
        let id = ticket.id;
        tracking.file(id, &batch);
        drop(tracking);
        match self.engine.wait(ticket) {
            Ok(result) => {
                self.observe(std::slice::from_ref(&result));
                Ok(result)
            }
            Err(err) => {
                self.forget(id);
                Err(err)
            }
        }
    }

    /// Finished `submit`ted batches.
    pub fn drain(&self) -> Result<Vec<BatchResult>> {
        let results = self.engine.drain()?;
        self.observe(&results);
        for result in &results {
            self.failures.report(self.engine.endpoint(), result, None);
        }
        Ok(results)
    }

    /// The engine's counters (see [`crate::metrics`]).
    pub fn stats(&self) -> crate::metrics::Snapshot {
        self.engine.stats()
    }

    /// Capacity settings and figures, when tracking is on.
    pub fn capacity(&self) -> Option<(CapacityConfig, CapacityStats)> {
        self.tracking.as_ref().map(|t| {
            let tracking = lock(t);
            (*tracking.tracker.config(), tracking.tracker.stats())
        })
    }

    /// Readable while batches submitted for `drain` have completed and not been drained.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.engine.event_fd()
    }

    /// Completes or fails everything in flight, then stops the workers (see [`Engine::close`]).
    pub fn close(&self) {
        self.engine.close();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// Whether this process may use the engine (see [`Engine::check_usable`]).
    pub fn check_usable(&self) -> Result<()> {
        self.engine.check_usable()
    }

    /// True in a process that inherited the engine through fork().
    pub fn is_inherited(&self) -> bool {
        self.engine.is_inherited()
    }

    /// The shared-memory page arena, if the engine was started with pages.
    pub fn pages(&self) -> Option<&std::sync::Arc<crate::arena::Arena>> {
        self.engine.pages()
    }

    /// See [`Engine::register_region`].
    pub fn register_region(&self, memory: crate::memory::RawBuf) -> Result<u32> {
        self.engine.register_region(memory)
    }

    /// See [`Engine::unregister_region`].
    pub fn unregister_region(&self, region: u32) -> Result<()> {
        self.engine.unregister_region(region)
    }

    /// I/O worker threads.
    pub fn num_workers(&self) -> usize {
        self.engine.num_workers()
    }

    /// Every key of a batch completes within this time of its submission.
    pub fn timeout(&self) -> std::time::Duration {
        self.engine.timeout()
    }

    /// The servers, for reprs and logs.
    pub fn endpoint(&self) -> &str {
        self.engine.endpoint()
    }

    /// Where the workers run and the page arena's memory lives, and why.
    pub fn placement(&self) -> &Placement {
        self.engine.placement()
    }

    /// Which loop the workers run, and why.
    pub fn io_loop(&self) -> crate::engine::IoLoopChoice {
        self.engine.io_loop()
    }

    /// `(kernel thread id, planned CPU)` of each worker.
    pub fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.engine.worker_threads()
    }

    /// See [`Engine::corrupt_ring_for_test`].
    #[cfg(feature = "test-hooks")]
    pub fn corrupt_ring_for_test(&self, worker: usize) -> Result<()> {
        self.engine.corrupt_ring_for_test(worker)
    }

    /// The tracking lock, for a batch worth tracking.
    fn tracking_for(&self, batch: &Batch<'_>) -> Option<MutexGuard<'_, Tracking>> {
        let tracking = self.tracking.as_ref()?;
        (!batch.items.is_empty() && batch.op != Op::Ping).then(|| lock(tracking))
    }

    /// For a SET, reserves its bytes, evicting first if they would not fit; returns them.
    fn reserve(&self, tracking: &mut Tracking, batch: &Batch<'_>) -> u64 {
        if batch.op != Op::Set {
            return 0;
        }
        let bytes = batch.items.iter().map(Item::len).sum();
        let victims = tracking.tracker.reserve(bytes);
        self.evict(victims);
        bytes
    }

    /// Feeds finished batches to the tracker, then evicts if it asks to.
    fn observe(&self, results: &[BatchResult]) {
        let Some(tracking) = &self.tracking else { return };
        let victims = {
            let mut tracking = lock(tracking);
            for result in results {
                let Some((op, keys)) = tracking.pending.remove(&result.id) else { continue };
                let tracker = &mut tracking.tracker;
                for ((key, len), outcome) in keys.iter().zip(&result.outcomes) {
                    match (op, outcome) {
                        (Op::Set, Outcome::Done) => tracker.stored(key, *len),
                        (Op::Get, Outcome::Hit(_)) | (Op::Exists, Outcome::Bool(true)) => tracker.touched(key),
                        (Op::Get, Outcome::Miss) | (Op::Exists | Op::Del, Outcome::Bool(_)) => tracker.removed(key),
                        _ => {}
                    }
                }
                if op == Op::Set {
                    tracker.unreserve(keys.iter().map(|(_, len)| len).sum());
                }
            }
            tracking.tracker.victims()
        };
        self.evict(victims);
    }

    /// Deletes keys the tracker gave up, in the background: the DELs go through the workers
    /// like any batch, and nobody waits for them.
    fn evict(&self, victims: Vec<Box<[u8]>>) {
        if victims.is_empty() {
            return;
        }
        let items: Vec<Item<'_>> = victims.iter().map(|key| Item::key_only(key)).collect();
        // Fails only once the engine is closing or failed, when nothing can be deleted anyway.
        let _ = self.engine.submit_detached(Batch::new(Op::Del, &items));
    }

    /// A tracked batch whose result will never be seen: forget it.
    fn forget(&self, id: u64) {
        let Some(tracking) = &self.tracking else { return };
        let mut tracking = lock(tracking);
        if let Some((Op::Set, keys)) = tracking.pending.remove(&id) {
            tracking.tracker.unreserve(keys.iter().map(|(_, len)| len).sum());
        }
    }
}

impl Tracking {
    fn file(&mut self, id: u64, batch: &Batch<'_>) {
        let keys = batch.items.iter().map(|item| (Box::from(item.key), item.len())).collect();
        self.pending.insert(id, (batch.op, keys));
    }
}

fn lock(tracking: &Mutex<Tracking>) -> MutexGuard<'_, Tracking> {
    tracking.lock().unwrap_or_else(|p| p.into_inner())
}
