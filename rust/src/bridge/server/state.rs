//! What the bridge's two threads share: the engine, the page budget, the attached clients with
//! their rings and pages, and the release of a client's pages. The control thread
//! (`control.rs`) and the relay (`relay.rs`) both work on it; neither imports the other.

use super::audit;
use super::batch::QueuedBatch;
use super::limits::BridgeLimits;
use crate::arena::{Arena, ArenaSpec, Claim, PageHandle, PageLedger, PagePool, RingRegionSpec};
use crate::bridge::signal::SignalEnd;
use crate::capacity::TrackedEngine;
use crate::error::{Error, ErrorKind, Result};
use crate::net::EventFd;
use crate::ring::{self, Consumer, Producer};
use std::collections::{HashMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bounds on what a client's submission ring may be.
const MIN_SUBMISSION_RING: usize = 64 << 10;
const MAX_SUBMISSION_RING: usize = 16 << 20;

/// What the bridge's threads share.
pub(super) struct BridgeState {
    pub(super) engine: TrackedEngine,
    pub(super) limits: BridgeLimits,
    pub(super) page_size: usize,
    /// Pages all clients together may hold.
    pub(super) num_pages: usize,
    /// Pages the clients hold now.
    pub(super) pages_held: AtomicUsize,
    /// Bytes of the engine's submission rings, all workers together.
    pub(super) engine_ring_bytes: usize,
    /// The unit shared memory is allocated in here (the regions' audit allows no less).
    pub(super) shmem_granule: u64,
    /// The attached clients' control sockets once the control thread has ended: closed by
    /// `stop` after their last results are out.
    pub(super) parked: Mutex<Vec<UnixStream>>,
    clients: Mutex<HashMap<u32, Arc<Client>>>,
    pub(super) next_client: AtomicU32,
    stop: AtomicBool,
    /// Wakes the relay: a client came or went.
    pub(super) relay_wake: EventFd,
    /// Wakes the control thread: the relay dropped a client.
    pub(super) control_wake: EventFd,
    /// Set once, when the bridge stops; never reset, so every thread polling it sees it.
    pub(super) stopped: EventFd,
}

/// One attached client, as both threads see it.
pub(super) struct Client {
    pub(super) id: u32,
    /// The peer's process and user, from the kernel (SO_PEERCRED), not from its Hello.
    pub(super) pid: i32,
    pub(super) uid: u32,
    /// Its region: its ring pair and its pages, mapped here for the engine.
    pub(super) region: Arc<Arena>,
    /// Its region's pages, free and allocated, with their generations.
    pub(super) pool: PagePool,
    /// The pages it holds, by index.
    pub(super) held: Mutex<HashMap<u32, PageHandle>>,
    /// Bumped (under `held`'s lock) each time `held` changes: its region is audited again.
    pub(super) held_changes: AtomicU64,
    /// Its pages' operations in flight.
    pub(super) ledger: PageLedger,
    /// The bridge's end of its signal socketpair.
    pub(super) signal: SignalEnd,
    pub(super) data: Mutex<ClientData>,
    /// One of its sockets closed, or the bridge dropped it: it is served no more, and it is
    /// retired once the control thread has let its socket go and its batches are out of the
    /// engine.
    pub(super) gone: AtomicBool,
    /// The control thread is done with it: no request of its will be answered again.
    pub(super) control_closed: AtomicBool,
    /// Why the relay let it go, for the control thread to tell it.
    pub(super) dropped: Mutex<Option<Dropped>>,
}

/// Why the relay let a client go.
pub(super) struct Dropped {
    pub(super) why: String,
    /// It broke a rule (logged as a warning), rather than left.
    pub(super) misbehaved: bool,
}

/// A client's rings and the relay's state of its work.
pub(super) struct ClientData {
    pub(super) submissions: Consumer,
    pub(super) completions: Producer,
    pub(super) record: Vec<u8>,
    /// Batches taken from its ring, in order: the first with keys unsent is fed to the
    /// engine in slices; and their records' bytes (at most its ring's size and one record).
    pub(super) queued: VecDeque<QueuedBatch>,
    pub(super) queued_bytes: usize,
    /// Completion records not yet in its ring (it was full).
    pub(super) outbox: VecDeque<Vec<u8>>,
    pub(super) outbox_bytes: usize,
    /// Its slices in the engine now: value bytes, keys, and the ring bytes their descriptors
    /// take in the engine's rings.
    pub(super) inflight_bytes: usize,
    pub(super) inflight_keys: usize,
    pub(super) inflight_slices: usize,
    /// Claims of finished batches, released when the relay next flushes.
    pub(super) release: Vec<Claim>,
    /// Its region's memory and `held_changes` when its audit last found nothing: audited
    /// again only once either moved.
    pub(super) audited: Option<(u64, u64)>,
}

impl BridgeState {
    /// The state of a bridge about to start its threads: no client yet, the whole budget free.
    pub(super) fn new(
        engine: TrackedEngine,
        limits: BridgeLimits,
        page_size: usize,
        num_pages: usize,
        engine_ring_bytes: usize,
    ) -> Result<BridgeState> {
        let new_eventfd = || EventFd::new().map_err(|e| Error::os("eventfd", e));
        Ok(BridgeState {
            engine,
            limits,
            page_size,
            num_pages,
            pages_held: AtomicUsize::new(0),
            engine_ring_bytes,
            shmem_granule: audit::shmem_granule(),
            parked: Mutex::new(Vec::new()),
            clients: Mutex::new(HashMap::new()),
            next_client: AtomicU32::new(1),
            stop: AtomicBool::new(false),
            relay_wake: new_eventfd()?,
            control_wake: new_eventfd()?,
            stopped: new_eventfd()?,
        })
    }

    /// Tells both threads to end (they see `stopped` in their next poll).
    pub(super) fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.stopped.signal();
    }

    pub(super) fn lock_clients(&self) -> MutexGuard<'_, HashMap<u32, Arc<Client>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The clients attached now.
    pub(super) fn clients(&self) -> Vec<Arc<Client>> {
        self.lock_clients().values().cloned().collect()
    }

    /// Takes `n` pages of the shared budget, or says how many are left.
    pub(super) fn take_budget(&self, n: usize) -> std::result::Result<(), usize> {
        let mut held = self.pages_held.load(Ordering::Acquire);
        loop {
            if held + n > self.num_pages {
                return Err(self.num_pages - held);
            }
            match self.pages_held.compare_exchange(held, held + n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => held = now,
            }
        }
    }

    /// Gives `n` pages back to the shared budget.
    pub(super) fn return_budget(&self, n: usize) {
        self.pages_held.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Client {
    /// A client's region (its rings and up to its quota of pages, nothing else: memory is taken
    /// only as pages are used) and its signal socketpair; returns the peer's end.
    pub(super) fn create(
        shared: &BridgeState,
        pid: i32,
        uid: u32,
        ring_bytes: usize,
    ) -> Result<(Arc<Client>, SignalEnd)> {
        let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
        let submission = match ring_bytes {
            0 => shared.limits.submission_ring_bytes,
            asked => asked.clamp(MIN_SUBMISSION_RING, MAX_SUBMISSION_RING),
        }
        .next_power_of_two();
        let completion = shared.limits.completion_ring_bytes.next_power_of_two();
        let spec = ArenaSpec {
            page_size: shared.page_size,
            num_pages: shared.limits.client_pages,
            rings: vec![RingRegionSpec {
                submission_bytes: ring::ring_size(submission),
                completion_bytes: ring::ring_size(completion),
            }],
            batch_slots: 0,
            name_hint: format!("client-{id}"),
        };
        let region = Arc::new(Arena::create(&spec).map_err(|e| Error::invalid(e.to_string()))?);
        let (sub_base, sub_len, comp_base, comp_len) = region.ring_region(0);
        let owner: Arc<dyn std::any::Any + Send + Sync> = region.clone();
        let ring_err = |e: ring::RingError| Error::invalid(format!("ring setup: {e}"));
        // SAFETY: both regions lie inside the fresh arena, 4096-aligned and `ring_size` long as
        // specified, mapped from a memfd just sized (so they read as zeros: only the headers are
        // written, the rings' pages are taken as they are used); the client maps them only after
        // the welcome. The bridge attaches the consumer of the submission ring and the producer
        // of the completion ring: the client, the other end of each.
        let (submissions, completions) = unsafe {
            ring::init_ring_on_zeroed(sub_base, submission);
            ring::init_ring_on_zeroed(comp_base, completion);
            (
                Consumer::attach(sub_base, sub_len, owner.clone()).map_err(ring_err)?,
                Producer::attach(comp_base, comp_len, owner).map_err(ring_err)?,
            )
        };
        let pool = PagePool::new(region.clone()).map_err(|e| Error::invalid(e.to_string()))?;
        let (ours, theirs) = SignalEnd::pair().map_err(|e| Error::os("socketpair", e))?;
        let client = Arc::new(Client {
            id,
            pid,
            uid,
            ledger: PageLedger::new(region.num_pages()),
            region,
            pool,
            held: Mutex::new(HashMap::new()),
            held_changes: AtomicU64::new(0),
            signal: ours,
            data: Mutex::new(ClientData {
                submissions,
                completions,
                record: Vec::new(),
                queued: VecDeque::new(),
                queued_bytes: 0,
                outbox: VecDeque::new(),
                outbox_bytes: 0,
                inflight_bytes: 0,
                inflight_keys: 0,
                inflight_slices: 0,
                release: Vec::new(),
                audited: None,
            }),
            gone: AtomicBool::new(false),
            control_closed: AtomicBool::new(false),
            dropped: Mutex::new(None),
        });
        Ok((client, theirs))
    }

    pub(super) fn lock_data(&self) -> MutexGuard<'_, ClientData> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the client to be dropped for breaking a rule, `why` (the control thread logs it,
    /// tells it and closes its socket); the first reason wins.
    pub(super) fn drop_for(&self, shared: &BridgeState, why: String) {
        self.let_go(shared, Dropped { why, misbehaved: true });
    }

    /// Its signal socket closed. A process that ends closes both of its sockets, one that
    /// breaks (or tries to stay half attached) only this one; either way it is detached whole.
    pub(super) fn signal_closed(&self, shared: &BridgeState) {
        self.let_go(shared, Dropped { why: "it closed its signal socket".into(), misbehaved: false });
    }

    fn let_go(&self, shared: &BridgeState, dropped: Dropped) {
        let mut first = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(dropped);
        }
        drop(first);
        self.gone.store(true, Ordering::Release);
        shared.control_wake.signal();
        shared.relay_wake.signal();
    }
}

/// Frees pages of a client: back in its region's pool, their memory given back to the system
/// (a hole punched in its memfd), their budget back to the bridge.
pub(super) fn release_pages(shared: &BridgeState, client: &Client, handles: &[PageHandle]) -> Result<()> {
    for handle in handles {
        client.pool.check(handle).map_err(|e| Error::new(ErrorKind::Page, e.to_string()))?;
    }
    // The holes first: once in the pool a page may be handed out again at once, and its new
    // bytes must not be punched away; while still held, its memory counts as the client's.
    // The whole stride: a partial 4 KiB block at a page's end would stay in memory.
    let stride = client.region.layout().page_stride as u64;
    for handle in handles {
        punch(&client.region, client.region.page_offset(handle.index as usize), stride);
    }
    client.pool.free_many(handles).map_err(|e| Error::new(ErrorKind::Page, e.to_string()))?;
    let mut held = client.held.lock().unwrap_or_else(|p| p.into_inner());
    for handle in handles {
        held.remove(&handle.index);
    }
    client.held_changes.fetch_add(1, Ordering::AcqRel);
    shared.return_budget(handles.len());
    Ok(())
}

/// Gives `len` bytes of the region at `offset` back to the system: they read as zeros after.
pub(super) fn punch(region: &Arena, offset: u64, len: u64) {
    let _ = rustix::fs::fallocate(
        region.fd(),
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        offset,
        len,
    );
}
