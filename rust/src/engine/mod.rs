//! The I/O engine: worker threads fed through SPSC rings in a shared-memory arena.
//!
//! A batch of `(op, key, region + offset, length)` descriptors is tiled across the workers by
//! bytes. Each worker owns its connections, pipelines requests on them and posts one
//! completion record per key to its completion ring. A batch's counter in the arena counts
//! the keys still open; the worker that closes a batch wakes its submitter, through the
//! completion eventfd (drained by asyncio, LMCache or any poll loop) or the counter's futex
//! (a thread waiting for that batch). Every submitted key completes, with success or an
//! error, by its deadline.
//!
//! The engine knows nothing of Python: memory is named by region and offset, and callers keep
//! it valid until the batch's result is handed back.

mod batches;
pub mod clock;
mod notify;
pub mod records;
mod tiling;
mod worker;

pub use batches::{BatchResult, Delivery};
pub use records::Region;
pub use tiling::tile;

use crate::arena::{Arena, ArenaSpec, RingRegionSpec};
use crate::capacity::{CapacityConfig, CapacityStats, Tracker};
use crate::client::BlockingClient;
use crate::conn::{Conn, Op, Outcome, PipelineLimits, ReconnectPolicy};
use crate::error::{Error, ErrorKind, Result};
use crate::net::{Address, ConnectOptions};
use crate::placement::{self, PlanSource};
use crate::ring::{self, Consumer, Producer, PushError};
use batches::{Batches, Recorded};
use lmcache_resp_numa::{self as numa, CpuAffinity, Placement};
use notify::{EventFd, futex_wait, futex_wake_all};
use records::{Descriptor, Tag, decode_completion};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicI32;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest key accepted; it bounds what a submission record must hold.
pub const MAX_KEY_LEN: usize = 256 * 1024;

/// Batch counter bits: the keys still open, and whether a thread waits on the futex.
pub(crate) const BATCH_COUNT_MASK: u32 = 0x7fff_ffff;
pub(crate) const BATCH_WAITER_FLAG: u32 = 0x8000_0000;

/// How long a waiting thread gives the workers past a batch's deadline before it concludes
/// the engine is broken (it never should be: workers fail everything at its deadline).
const WAIT_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub connect: ConnectOptions,
    pub num_workers: usize,
    pub connections_per_worker: usize,
    /// Every key of a batch completes within this time from submission.
    pub timeout: Duration,
    pub pipeline: PipelineLimits,
    pub reconnect: ReconnectPolicy,
    pub submission_ring_bytes: usize,
    pub completion_ring_bytes: usize,
    pub batch_slots: usize,
    /// Pages in the arena (0 when all memory is the caller's own).
    pub page_size: usize,
    pub num_pages: usize,
    /// Where the I/O threads run and the arena's memory lives (see [`crate::placement`]).
    pub cpu_affinity: CpuAffinity,
    /// Client-side capacity tracking and eviction; `None` tracks nothing.
    pub capacity: Option<CapacityConfig>,
}

impl EngineConfig {
    pub fn new(connect: ConnectOptions) -> EngineConfig {
        EngineConfig {
            connect,
            num_workers: 8,
            connections_per_worker: 1,
            timeout: Duration::from_secs(10),
            pipeline: PipelineLimits::default(),
            reconnect: ReconnectPolicy::default(),
            submission_ring_bytes: 1 << 20,
            completion_ring_bytes: 256 << 10,
            batch_slots: 4096,
            page_size: 0,
            num_pages: 0,
            cpu_affinity: CpuAffinity::None,
            capacity: None,
        }
    }
}

/// One key of a batch.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    pub key: &'a [u8],
    pub region: Region,
    /// Arena offset or process address of the value (SET) or destination (GET).
    pub offset: u64,
    /// SET: value length; GET: destination capacity; EXISTS/DEL: 0.
    pub len: u64,
}

/// What the workers share with the front-end.
pub(crate) struct Shared {
    pub arena: Arc<Arena>,
    pub pipeline: PipelineLimits,
    pub completion_event: EventFd,
    /// No more records will be pushed: workers fail what is left and exit.
    pub sealed: AtomicBool,
}

struct Lane {
    producer: Producer,
    doorbell: Arc<EventFd>,
}

/// The submitters' view of completions: the completion rings and the batches in flight.
struct FrontEnd {
    consumers: Vec<Consumer>,
    batches: Batches,
    record: Vec<u8>,
}

pub struct Engine {
    shared: Arc<Shared>,
    lanes: Vec<Mutex<Lane>>,
    front: Mutex<FrontEnd>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    closing: AtomicBool,
    next_id: AtomicU64,
    next_lane: AtomicUsize,
    timeout: Duration,
    endpoint: String,
    conns_per_worker: usize,
    placement: Placement,
    /// Each worker's kernel thread id (0 until the thread has started).
    worker_tids: Arc<[AtomicI32]>,
    tracking: Option<Mutex<Tracking>>,
}

/// Capacity tracking: the tracker, and the keys of tracked batches until their results are
/// handed out (that is when what they did becomes known).
struct Tracking {
    tracker: Tracker,
    pending: HashMap<u64, (Op, TrackedKeys)>,
}

/// Each key of a tracked batch with its length.
type TrackedKeys = Vec<(Box<[u8]>, u64)>;

impl Engine {
    /// Builds the arena and its rings, checks that the server is reachable and accepts the
    /// credentials (so a wrong address or password fails here, clearly), and starts the
    /// workers, which open their connections at once.
    pub fn start(config: EngineConfig) -> Result<Engine> {
        if config.num_workers == 0 || config.connections_per_worker == 0 {
            return Err(Error::invalid("num_workers and connections_per_worker must be at least 1"));
        }
        if let Some(capacity) = &config.capacity {
            capacity.validate()?;
        }
        let addresses: Arc<[Address]> = config.connect.endpoint.resolve()?.into();
        let mut placement = placement::plan(
            &config.connect.endpoint,
            &addresses,
            &config.cpu_affinity,
            config.num_workers,
            PlanSource::default(),
        )?;
        let probe_timeout = config.connect.connect_timeout.min(config.timeout);
        BlockingClient::connect(config.connect.clone(), probe_timeout)?;

        let submission_capacity = config.submission_ring_bytes.next_power_of_two();
        let completion_capacity = config.completion_ring_bytes.next_power_of_two();
        let spec = ArenaSpec {
            page_size: config.page_size.max(1),
            num_pages: config.num_pages,
            rings: (0..config.num_workers)
                .map(|_| RingRegionSpec {
                    submission_bytes: ring::ring_size(submission_capacity),
                    completion_bytes: ring::ring_size(completion_capacity),
                })
                .collect(),
            batch_slots: config.batch_slots,
            name_hint: "store".into(),
        };
        let arena =
            Arc::new(Arena::create(&spec).map_err(|e| Error::invalid(format!("cannot create the arena: {e}")))?);
        if let Some(node) = placement.memory_node {
            placement.explanation.push(bind_arena(&arena, node));
        }
        let worker_tids: Arc<[AtomicI32]> = (0..config.num_workers).map(|_| AtomicI32::new(0)).collect();
        let shared = Arc::new(Shared {
            arena: arena.clone(),
            pipeline: config.pipeline,
            completion_event: EventFd::new().map_err(|e| Error::invalid(format!("eventfd: {e}")))?,
            sealed: AtomicBool::new(false),
        });
        let options = Arc::new(config.connect.clone());
        let owner: Arc<dyn std::any::Any + Send + Sync> = arena.clone();
        let mut lanes = Vec::new();
        let mut consumers = Vec::new();
        let mut workers = Vec::new();
        for index in 0..config.num_workers {
            let (sub_base, sub_len, comp_base, comp_len) = arena.ring_region(index);
            // SAFETY: the regions are inside the arena, 4096-aligned, `ring_size(capacity)`
            // long as requested in the spec, and not yet used by anyone. The rings' handles
            // keep the arena mapped through `owner`. Each ring gets exactly one producer and
            // one consumer.
            let (producer, sub_consumer, comp_producer, consumer) = unsafe {
                ring::init_ring(sub_base, submission_capacity);
                ring::init_ring(comp_base, completion_capacity);
                (
                    Producer::attach(sub_base, sub_len, owner.clone()),
                    Consumer::attach(sub_base, sub_len, owner.clone()),
                    Producer::attach(comp_base, comp_len, owner.clone()),
                    Consumer::attach(comp_base, comp_len, owner.clone()),
                )
            };
            let ring_err = |e: ring::RingError| Error::invalid(format!("ring setup: {e}"));
            let doorbell = Arc::new(EventFd::new().map_err(|e| Error::invalid(format!("eventfd: {e}")))?);
            lanes.push(Mutex::new(Lane { producer: producer.map_err(ring_err)?, doorbell: doorbell.clone() }));
            consumers.push(consumer.map_err(ring_err)?);
            let conns = (0..config.connections_per_worker)
                .map(|_| Conn::new(options.clone(), addresses.clone(), config.reconnect, config.pipeline))
                .collect();
            let worker = worker::Worker {
                shared: shared.clone(),
                submissions: sub_consumer.map_err(ring_err)?,
                completions: comp_producer.map_err(ring_err)?,
                doorbell,
                conns,
                finished: Vec::new(),
                record: Vec::new(),
            };
            let cpu = placement.worker_cpus.get(index).copied().flatten();
            let tids = worker_tids.clone();
            let handle = std::thread::Builder::new()
                .name(format!("lmcache-resp-io-{index}"))
                .spawn(move || {
                    tids[index].store(numa::current_thread_id(), Ordering::Release);
                    if let Some(cpu) = cpu {
                        // Placement was validated when it was planned; a failure here leaves
                        // the thread unpinned, which is slower but correct.
                        let _ = numa::bind_current_thread(&[cpu]);
                    }
                    worker.run()
                })
                .map_err(|e| Error::invalid(format!("cannot start I/O thread: {e}")))?;
            workers.push(handle);
        }
        let engine = Engine {
            shared,
            lanes,
            front: Mutex::new(FrontEnd { consumers, batches: Batches::new(config.batch_slots), record: Vec::new() }),
            workers: Mutex::new(workers),
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            next_lane: AtomicUsize::new(0),
            timeout: config.timeout,
            endpoint: config.connect.endpoint.to_string(),
            conns_per_worker: config.connections_per_worker,
            placement,
            worker_tids,
            tracking: config
                .capacity
                .map(|capacity| Mutex::new(Tracking { tracker: Tracker::new(capacity), pending: HashMap::new() })),
        };
        engine.warm_up()?;
        Ok(engine)
    }

    /// Opens every worker's connections now, so the first batch does not pay for them.
    fn warm_up(&self) -> Result<()> {
        let keys = vec![
            Item { key: b"", region: Region::Process, offset: 0, len: 0 };
            self.lanes.len() * self.conns_per_worker
        ];
        let result = self.run(Op::Ping, &keys)?;
        for outcome in result.outcomes {
            if let Outcome::Failed(err) = outcome {
                return Err(err);
            }
        }
        Ok(())
    }

    /// Where the workers run and the arena's memory lives, and why.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// `(kernel thread id, planned CPU)` of each worker.
    pub fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.worker_tids
            .iter()
            .zip(self.placement.worker_cpus.iter().copied().chain(std::iter::repeat(None)))
            .map(|(tid, cpu)| (tid.load(Ordering::Acquire), cpu))
            .collect()
    }

    /// Capacity tracking settings and figures, when tracking is on.
    pub fn capacity(&self) -> Option<(CapacityConfig, CapacityStats)> {
        self.tracking.as_ref().map(|t| {
            let tracking = t.lock().unwrap_or_else(|p| p.into_inner());
            (*tracking.tracker.config(), tracking.tracker.stats())
        })
    }

    pub fn arena(&self) -> &Arc<Arena> {
        &self.shared.arena
    }

    pub fn num_workers(&self) -> usize {
        self.lanes.len()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Readable while batches submitted with [`Engine::submit`] have completed and not been
    /// drained.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.completion_event.as_fd()
    }

    pub fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Submits a batch whose result is collected by [`Engine::drain`]; returns its id (unique
    /// for the engine's lifetime). Blocks only while the rings are full (backpressure).
    pub fn submit(&self, op: Op, items: &[Item<'_>]) -> Result<u64> {
        Ok(self.submit_with(op, items, batches::Delivery::Drain)?.0)
    }

    /// Submits a batch and waits for its result.
    pub fn run(&self, op: Op, items: &[Item<'_>]) -> Result<BatchResult> {
        let (id, slot) = self.submit_with(op, items, batches::Delivery::Wait)?;
        let result = self.wait(id, slot).inspect_err(|_| self.untrack(id))?;
        self.observe(std::slice::from_ref(&result));
        Ok(result)
    }

    /// Results of every `submit`ted batch that completed since the last call, and clears the
    /// eventfd's readiness.
    pub fn drain(&self) -> Vec<BatchResult> {
        let results = {
            let mut front = self.lock_front();
            // Reset before looking: a completion posted after this point signals again.
            self.shared.completion_event.reset();
            Self::collect(&mut front);
            front.batches.take_ready()
        };
        self.observe(&results);
        results
    }

    /// Feeds finished batches to the capacity tracker, then evicts if it asks to.
    fn observe(&self, results: &[BatchResult]) {
        let Some(tracking) = &self.tracking else { return };
        let victims = {
            let mut tracking = tracking.lock().unwrap_or_else(|p| p.into_inner());
            for result in results {
                let Some((op, keys)) = tracking.pending.remove(&result.id) else { continue };
                for ((key, len), outcome) in keys.iter().zip(&result.outcomes) {
                    let tracker = &mut tracking.tracker;
                    match (op, outcome) {
                        (Op::Set, Outcome::Done) => tracker.stored(key, *len),
                        (Op::Get, Outcome::Hit(_)) | (Op::Exists, Outcome::Bool(true)) => tracker.touched(key),
                        (Op::Get, Outcome::Miss) | (Op::Exists | Op::Del, Outcome::Bool(_)) => tracker.removed(key),
                        _ => {}
                    }
                }
                if op == Op::Set {
                    tracking.tracker.unreserve(keys.iter().map(|(_, len)| len).sum());
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
        let items: Vec<Item<'_>> =
            victims.iter().map(|key| Item { key, region: Region::Process, offset: 0, len: 0 }).collect();
        // Fails only once the engine is closing, when nothing more can be deleted anyway.
        let _ = self.submit_with(Op::Del, &items, batches::Delivery::Discard);
    }

    /// Files a tracked batch's keys; for SETs, reserves their bytes, evicting first if they
    /// would not fit.
    fn track(&self, id: u64, op: Op, items: &[Item<'_>]) {
        let Some(tracking) = &self.tracking else { return };
        if items.is_empty() || op == Op::Ping {
            return;
        }
        let victims = {
            let mut tracking = tracking.lock().unwrap_or_else(|p| p.into_inner());
            let keys = items.iter().map(|item| (Box::from(item.key), item.len)).collect();
            tracking.pending.insert(id, (op, keys));
            if op == Op::Set { tracking.tracker.reserve(items.iter().map(|item| item.len).sum()) } else { Vec::new() }
        };
        self.evict(victims);
    }

    /// A tracked batch that never started: forget it.
    fn untrack(&self, id: u64) {
        let Some(tracking) = &self.tracking else { return };
        let mut tracking = tracking.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((Op::Set, keys)) = tracking.pending.remove(&id) {
            tracking.tracker.unreserve(keys.iter().map(|(_, len)| len).sum());
        }
    }

    fn lock_front(&self) -> MutexGuard<'_, FrontEnd> {
        self.front.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Files every posted completion with its batch.
    fn collect(front: &mut FrontEnd) {
        let FrontEnd { consumers, batches, record } = front;
        for consumer in consumers.iter_mut() {
            let mut took = false;
            loop {
                match consumer.try_pop_into(record) {
                    Ok(true) => took = true,
                    Ok(false) => break,
                    Err(err) => panic!("completion ring corrupt: {err}"),
                }
                let (tag, outcome) = decode_completion(record).unwrap_or_else(|e| panic!("bad completion: {e}"));
                let tag = Tag::unpack(tag);
                if let Err(err) = batches.record(tag.slot, tag.index, outcome) {
                    panic!("{err}");
                }
            }
            if took {
                consumer.release();
            }
        }
    }

    fn submit_with(&self, op: Op, items: &[Item<'_>], delivery: batches::Delivery) -> Result<(u64, u32)> {
        if self.is_closed() {
            return Err(Error::closed("the store"));
        }
        self.validate(items)?;
        let deadline = Instant::now() + self.timeout;
        let deadline_ns = clock::now_ns() + self.timeout.as_nanos() as u64;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if delivery != batches::Delivery::Discard {
            self.track(id, op, items);
        }
        let slot = match self.open_batch(id, op, items.len(), delivery, deadline) {
            Ok(slot) => slot,
            Err(err) => {
                self.untrack(id);
                return Err(err);
            }
        };
        if items.is_empty() {
            if delivery == batches::Delivery::Drain {
                self.shared.completion_event.signal();
            }
            return Ok((id, slot));
        }
        // Discarded batches need no wake-up; the futex flag keeps them off the eventfd.
        let flag = if delivery == batches::Delivery::Drain { 0 } else { BATCH_WAITER_FLAG };
        self.counter(slot).store(items.len() as u32 | flag, Ordering::Release);

        let tiles = if op == Op::Ping {
            // PING batches open and check every connection: they must reach every worker.
            tiling::spread_evenly(items.len(), self.lanes.len())
        } else {
            let sizes: Vec<u64> = items.iter().map(|item| item.len).collect();
            tile(&sizes, self.lanes.len())
        };
        let first = self.next_lane.fetch_add(1, Ordering::Relaxed);
        for (i, range) in tiles.into_iter().enumerate() {
            if range.is_empty() {
                continue;
            }
            let lane_index = (first + i) % self.lanes.len();
            let mut lane = self.lanes[lane_index].lock().unwrap_or_else(|p| p.into_inner());
            let mut index = range.start;
            while index < range.end {
                if self.shared.sealed.load(Ordering::Acquire) {
                    self.fail_locally(slot, index..range.end, Error::closed("the store"));
                    break;
                }
                let item = &items[index];
                let descriptor = Descriptor {
                    op,
                    tag: Tag { slot, index: index as u32 },
                    region: item.region,
                    offset: item.offset,
                    len: item.len,
                    deadline_ns,
                    key: item.key,
                };
                match lane.producer.try_push(&[&descriptor.header(), item.key]) {
                    Ok(()) => index += 1,
                    Err(PushError::Full) => {
                        lane.producer.publish();
                        lane.doorbell.signal();
                        if !self.wait_for_room(&mut lane, deadline) {
                            let err = Error::new(
                                ErrorKind::Timeout,
                                format!(
                                    "timed out after {:.3} s queueing for the I/O workers of {}",
                                    self.timeout.as_secs_f64(),
                                    self.endpoint
                                ),
                            );
                            self.fail_locally(slot, index..range.end, err);
                            break;
                        }
                    }
                    Err(PushError::Corrupt(what)) => panic!("submission ring corrupt: {what}"),
                    Err(PushError::TooLarge { .. }) => {
                        let err = Error::invalid(format!("key of {} bytes does not fit a ring record", item.key.len()));
                        self.fail_locally(slot, index..index + 1, err);
                        index += 1;
                    }
                }
            }
            lane.producer.publish();
            lane.doorbell.signal();
        }
        Ok((id, slot))
    }

    fn validate(&self, items: &[Item<'_>]) -> Result<()> {
        let arena_size = self.shared.arena.size() as u64;
        for (i, item) in items.iter().enumerate() {
            if item.key.len() > MAX_KEY_LEN {
                return Err(Error::invalid(format!(
                    "key {i} is {} bytes, longer than the limit of {MAX_KEY_LEN} bytes",
                    item.key.len()
                )));
            }
            if item.region == Region::Arena && item.offset.checked_add(item.len).is_none_or(|end| end > arena_size) {
                return Err(Error::invalid(format!("key {i}: memory range is outside the arena")));
            }
        }
        if items.len() > BATCH_COUNT_MASK as usize {
            return Err(Error::invalid("a batch holds at most 2^31 - 1 keys"));
        }
        Ok(())
    }

    fn counter(&self, slot: u32) -> &AtomicU32 {
        self.shared.arena.batch_counter(slot as usize)
    }

    fn open_batch(&self, id: u64, op: Op, keys: usize, delivery: batches::Delivery, deadline: Instant) -> Result<u32> {
        let mut pause = Duration::from_micros(50);
        loop {
            {
                let mut front = self.lock_front();
                if let Some(slot) = front.batches.open(id, op, keys, delivery) {
                    return Ok(slot);
                }
                Self::collect(&mut front);
            }
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "timed out waiting for a free batch slot: too many batches in flight",
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Waits until the lane's ring has room again. While it waits it files completions, so a
    /// submitter that is also the only drainer cannot deadlock against full completion rings.
    fn wait_for_room(&self, lane: &mut Lane, deadline: Instant) -> bool {
        let mut pause = Duration::from_micros(20);
        loop {
            if let Ok(mut front) = self.front.try_lock() {
                Self::collect(&mut front);
                if front.batches.has_ready() {
                    self.shared.completion_event.signal();
                }
            }
            if lane.producer.free_bytes() >= lane.producer.capacity() / 4 {
                return true;
            }
            if Instant::now() >= deadline || self.shared.sealed.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Completes keys that never reached a worker.
    fn fail_locally(&self, slot: u32, keys: std::ops::Range<usize>, err: Error) {
        let count = keys.len() as u32;
        if count == 0 {
            return;
        }
        let mut front = self.lock_front();
        for index in keys {
            match front.batches.record(slot, index as u32, Outcome::Failed(err.clone())) {
                Ok(Recorded::Pending | Recorded::Completed) => {}
                Err(bug) => panic!("{bug}"),
            }
        }
        let before = self.counter(slot).fetch_sub(count, Ordering::AcqRel);
        if before & BATCH_COUNT_MASK == count {
            if before & BATCH_WAITER_FLAG != 0 {
                futex_wake_all(self.counter(slot));
            } else {
                self.shared.completion_event.signal();
            }
        }
    }

    fn wait(&self, id: u64, slot: u32) -> Result<BatchResult> {
        let give_up = Instant::now() + self.timeout + WAIT_GRACE;
        let counter = self.counter(slot);
        loop {
            {
                let mut front = self.lock_front();
                Self::collect(&mut front);
                if let Some(result) = front.batches.take_completed(slot) {
                    debug_assert_eq!(result.id, id);
                    return Ok(result);
                }
                if Instant::now() >= give_up {
                    front.batches.abandon(slot);
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!("batch {id} did not complete within its timeout (the I/O workers are stuck)"),
                    ));
                }
            }
            let value = counter.load(Ordering::Acquire);
            if value & BATCH_COUNT_MASK == 0 {
                continue;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            futex_wait(counter, value, left.min(Duration::from_millis(100)));
        }
    }

    /// Stops taking batches, fails what has not reached the wire, lets what is on the wire
    /// finish (each by its deadline), and stops the workers. Every submitted batch completes:
    /// `drain` still returns the last results after `close`. Idempotent.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        {
            // Holding every lane means no submitter is half-way through pushing a batch.
            let lanes: Vec<_> = self.lanes.iter().map(|l| l.lock().unwrap_or_else(|p| p.into_inner())).collect();
            self.shared.sealed.store(true, Ordering::Release);
            for lane in &lanes {
                lane.doorbell.signal();
            }
        }
        let handles: Vec<_> = self.workers.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for handle in handles {
            let _ = handle.join();
        }
        let mut front = self.lock_front();
        Self::collect(&mut front);
        if front.batches.has_ready() {
            self.shared.completion_event.signal();
        }
    }
}

/// Binds the arena to `node` and faults every page in there, so pages never land elsewhere
/// on first touch. Returns the line that explains what happened; a failure costs speed, not
/// correctness, so it is reported rather than fatal.
fn bind_arena(arena: &Arena, node: u32) -> String {
    // SAFETY: the mapping is `arena.size()` bytes, alive while `arena` is, and no other thread
    // touches it yet (the workers have not started). Prefaulting writes back each page's
    // current (zero) contents.
    let outcome = unsafe {
        numa::bind_memory(arena.base(), arena.size(), node).and_then(|()| numa::prefault(arena.base(), arena.size()))
    };
    match outcome {
        Ok(()) => format!("the arena ({} bytes) is bound to NUMA node {node} and pre-faulted", arena.size()),
        Err(err) => format!("the arena could not be bound to NUMA node {node} ({err}); the kernel places it"),
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.close();
    }
}
