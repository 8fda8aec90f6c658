//! The I/O engine: worker threads fed through SPSC rings.
//!
//! A batch of `(op, key, memory, length)` descriptors is tiled across the workers by bytes.
//! Each worker owns its connections, pipelines requests on them and posts one completion
//! record per key to its completion ring. A batch's counter counts the keys still open; the
//! worker that closes a batch wakes its submitter, through the completion eventfd (drained by
//! asyncio, LMCache or any poll loop) or the counter's futex (a thread waiting for that batch).
//! Every submitted key completes, with success or an error, by its deadline.
//!
//! Trust: the rings and counters live in the engine's private memory (`control`); the
//! shared-memory arena holds only pages, and descriptors name memory by arena offset (checked
//! to lie inside one page), by offset into a region the caller registered (`regions`, checked
//! to lie inside it), or by a key of the process-local buffer table (`buffers`), never by
//! address. A worker that dies, for any reason, fails the engine: every call then fails at
//! once with [`ErrorKind::EngineFailed`], and every batch in flight completes with it. An
//! engine inherited through fork() refuses every call with [`ErrorKind::Forked`] and leaves
//! the parent's threads and memory alone.
//!
//! The engine knows nothing of Python, or of capacity tracking (a layer above it).
//!
//! Files: the front-end's two halves, `submit.rs` (check, slot, tiles by bytes, records into
//! the rings) and `complete.rs` (file completions, wait, drain); `control.rs` (the rings and
//! counters), `records.rs` (the ring records), `tiling.rs`, `buffers.rs`, `regions.rs`
//! (caller memory registered once and named by offset), `batches.rs`
//! ([`BatchResult`]), `counter.rs` and `futex.rs` (waking one batch's waiter), `shared.rs`
//! (what the workers and the front-end share), `route.rs` (which server and connection),
//! `cluster.rs` (the engine's view of a cluster), `failures.rs` (the per-batch summary of
//! failed keys); and `worker/`, one I/O thread's loop, whose decisions `worker/tests.rs` drives
//! in memory.

mod batches;
mod buffers;
mod cluster;
mod complete;
mod control;
mod counter;
mod failures;
mod futex;
#[cfg(all(test, loom))]
mod loom_tests;
mod nodes;
pub(crate) mod records;
mod regions;
mod route;
mod sentinel;
mod shared;
mod submit;
mod tiling;
mod worker;

pub use batches::BatchResult;
pub(crate) use failures::FailureLog;
pub use nodes::WARM_UP_NODES;
pub use regions::MAX_REGIONS;
// What the engine's API names from the layers below.
pub use crate::conn::{Outcome, ReconnectPolicy};
pub use crate::health::ProbePolicy;
pub use crate::net::Resolver;
pub use crate::resp::Reply;

use crate::arena::{Arena, ArenaError, ArenaSpec};
use crate::blocking::BlockingClient;
use crate::error::{Error, ErrorKind, Result};
use crate::health::HealthBoard;
use crate::memory::RawBuf;
use crate::net::Address;
use crate::net::EventFd;
use crate::op::Op;
use crate::placement::{self, PlanSource};
use crate::ranged::ReadShape;
use crate::ring::{Consumer, Producer};
use crate::settings::{GetPieces, Settings};
use batches::Batches;
use buffers::BufferTable;
use cluster::ClusterView;
use control::ControlBlock;
use lmcache_resp_numa::{self as numa, Placement};
use nodes::{ConnFactory, Nodes};
use regions::RegionTable;
use route::Route;
use shared::Shared;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a waiting thread gives the workers past a batch's deadline before it concludes
/// the engine is broken (it never should be: workers fail everything at its deadline).
const WAIT_GRACE: Duration = Duration::from_secs(5);

/// What the engine is started with: the user's settings, and its internal sizes.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The user's settings: servers, credentials, timeout, workers, pipeline limits, placement.
    pub settings: Settings,
    /// What every connection does after a transient failure.
    pub reconnect: ReconnectPolicy,
    /// Capacity of each worker's submission ring, in bytes (rounded up to a power of two).
    pub submission_ring_bytes: usize,
    /// Capacity of each worker's completion ring, in bytes (rounded up to a power of two).
    pub completion_ring_bytes: usize,
    /// The most batches in flight at once; a submission past it waits for a free slot (up to
    /// the timeout).
    pub batch_slots: usize,
    /// Pages in the shared-memory arena: `page_size` 0 means no arena (all memory is the
    /// caller's own buffers).
    pub page_size: usize,
    /// Number of pages in the arena (with `page_size` > 0).
    pub num_pages: usize,
    /// Looks up host names (cluster nodes named by name), off the I/O workers; `None`: the
    /// system's lookup. Tests give one with a lookup function of their own.
    pub resolver: Option<Arc<Resolver>>,
    /// When servers found down are probed (see `crate::health`).
    pub probe: ProbePolicy,
}

impl EngineConfig {
    /// `settings` with the internal sizes' defaults, the default reconnect policy and no page
    /// arena.
    pub fn new(settings: Settings) -> EngineConfig {
        EngineConfig {
            settings,
            reconnect: ReconnectPolicy::default(),
            submission_ring_bytes: 1 << 20,
            completion_ring_bytes: 256 << 10,
            batch_slots: 4096,
            page_size: 0,
            num_pages: 0,
            resolver: None,
            probe: ProbePolicy::default(),
        }
    }
}

/// The memory one key's operation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// EXISTS, DEL, PING.
    None,
    /// `len` bytes at `offset` of the engine's page arena, inside one page.
    Arena {
        /// Bytes from the arena base.
        offset: u64,
        /// SET: bytes sent. GET: room for the value.
        len: u64,
    },
    /// A caller buffer: sent from (SET) or received into (GET). The caller keeps it valid and
    /// untouched until the batch's result is handed back.
    Buffer(RawBuf),
    /// `len` bytes at `offset` of a region registered with [`Engine::register_region`]. Every
    /// such item of a batch names the same region.
    Registered {
        /// The region's id.
        region: u32,
        /// Bytes from the region's start.
        offset: u64,
        /// SET: bytes sent. GET: room for the value.
        len: u64,
    },
}

/// One key of a batch.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    /// The key, as sent to the server.
    pub key: &'a [u8],
    /// The memory the value moves through.
    pub memory: Memory,
}

impl<'a> Item<'a> {
    /// A key with no memory (EXISTS, DEL, PING).
    pub fn key_only(key: &'a [u8]) -> Item<'a> {
        Item { key, memory: Memory::None }
    }

    /// SET: bytes sent. GET: room for the value. Otherwise 0.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        match self.memory {
            Memory::None => 0,
            Memory::Arena { len, .. } | Memory::Registered { len, .. } => len,
            Memory::Buffer(buf) => buf.len() as u64,
        }
    }
}

/// A batch to submit: one operation over keys.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// The operation of every key.
    pub op: Op,
    /// The keys with their memory; the result has one outcome per item, in this order.
    pub items: &'a [Item<'a>],
    /// GET only: a value of any length other than its destination's is a miss, and the
    /// destination stays untouched (LMCache's fixed-size chunks).
    pub exact_length: bool,
}

impl<'a> Batch<'a> {
    /// `op` over `items`, any value length accepted.
    pub fn new(op: Op, items: &'a [Item<'a>]) -> Batch<'a> {
        Batch { op, items, exact_length: false }
    }

    /// The same batch with [`Batch::exact_length`] set to `exact_length`.
    pub fn with_exact_length(self, exact_length: bool) -> Batch<'a> {
        Batch { exact_length, ..self }
    }
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

/// The I/O engine: its workers, their rings, and the batches in flight (see the module
/// documentation). Shared by reference between submitting threads; closed on drop.
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
    /// Which loop the workers run, and why.
    io_loop: IoLoopChoice,
    /// Each worker's kernel thread id (0 until the thread has started).
    worker_tids: Arc<[AtomicI32]>,
    /// The process that started the engine: its threads exist only there.
    owner_pid: i32,
    /// Redis Cluster: the slot map and the thread that refreshes it.
    refresher: Mutex<Option<(Arc<ClusterView>, JoinHandle<()>)>>,
    /// Which servers are down; shared with the workers' connections.
    health: Arc<HealthBoard>,
    /// How large values are read (`get_piece_bytes`), for [`Engine::stats`].
    get_pieces: GetPieces,
    /// `<key_prefix>@` (empty without a namespace): sent before every key, so that every
    /// front, the bridge included, reads and writes inside the namespace, and cluster slots
    /// are those of the whole key, as LMCache's valkey adapter has them.
    key_prefix: Box<[u8]>,
}

impl Engine {
    /// Checks that the server is reachable and accepts the credentials (so a wrong address or
    /// password fails here, clearly), creates the page arena, and starts the workers, which
    /// open their connections at once.
    pub fn start(config: EngineConfig) -> Result<Engine> {
        let settings = &config.settings;
        let resolver = config.resolver.clone().unwrap_or_else(|| Arc::new(Resolver::system()));
        // A Sentinel-watched primary is routed as a one-shard cluster (see `sentinel`).
        let view = match settings.cluster || settings.sentinel.is_some() {
            true => Some(Arc::new(ClusterView::discover(settings, resolver.clone())?)),
            false => None,
        };
        let (route, servers) = Route::new(settings, view)?;
        let route = Arc::new(route);
        let first = &servers[0];
        let addresses: Vec<Address> = resolver.resolve_now(first, settings.connect_timeout)?.to_vec();
        let mut placement =
            placement::plan(first, &addresses, &settings.cpu_affinity, settings.num_workers, PlanSource::default())?;
        // Whether a server was found unreachable and the start goes on without it (said once).
        let mut without_a_server = false;
        if route.cluster().is_none() {
            // A wrong address or password fails here, naming the server; one that is down fails
            // here only where the settings require it.
            for server in &servers {
                let connected = BlockingClient::connect(
                    settings.connect_options(server),
                    settings.connect_timeout.min(settings.timeout),
                );
                if let Err(err) = connected {
                    tolerate_unreachable(settings, err, &mut without_a_server)?;
                }
            }
        }

        let pages = match config.page_size {
            0 => None,
            page_size => {
                let spec = ArenaSpec {
                    page_size,
                    num_pages: config.num_pages,
                    rings: Vec::new(),
                    batch_slots: 0,
                    name_hint: "pages".into(),
                };
                crate::memory::check_fits(page_size as u64 * config.num_pages as u64, "the page arena")?;
                let arena = Arc::new(Arena::create(&spec).map_err(arena_error)?);
                placement.explanation.push(placement::place_arena(&arena, placement.memory_node, settings.prefault));
                Some(arena)
            }
        };
        let workers = settings.num_workers;
        let (backend, io_loop) = io_backend(settings.io_backend)?;
        let endpoint = match settings.endpoints.as_slice() {
            _ if settings.sentinel.is_some() => {
                format!(
                    "sentinel {:?} {}",
                    settings.sentinel.as_ref().expect("checked").service,
                    list(&settings.endpoints)
                )
            }
            [one] => one.to_string(),
            many => format!("{}{}", if settings.cluster { "cluster " } else { "shards " }, list(many)),
        };
        if config.batch_slots > crate::metrics::MAX_BATCH_SLOTS {
            return Err(Error::invalid(format!("batch_slots must be at most {}", crate::metrics::MAX_BATCH_SLOTS)));
        }
        let metrics = crate::metrics::EngineMetrics::new(&endpoint, &servers, config.batch_slots);
        let (control, pairs) = ControlBlock::create(
            workers,
            config.submission_ring_bytes.next_power_of_two(),
            config.completion_ring_bytes.next_power_of_two(),
            config.batch_slots,
        )?;
        let doorbells: Vec<Arc<EventFd>> = (0..workers)
            .map(|_| EventFd::new().map(Arc::new))
            .collect::<std::io::Result<_>>()
            .map_err(eventfd_error)?;
        let shared = Arc::new(Shared {
            control,
            pages,
            pipeline: settings.pipeline,
            set_expiry_ms: crate::settings::expiry_ms(settings.ttl),
            completion_event: EventFd::new().map_err(eventfd_error)?,
            doorbells: doorbells.clone(),
            buffers: BufferTable::new(config.batch_slots),
            regions: RegionTable::new(config.batch_slots),
            sealed: AtomicBool::new(false),
            failure: OnceLock::new(),
            metrics,
            ring_failure: Mutex::new(None),
        });
        let worker_tids: Arc<[AtomicI32]> = (0..workers).map(|_| AtomicI32::new(0)).collect();
        let health = Arc::new(HealthBoard::new(config.probe));
        let mut lanes = Vec::with_capacity(workers);
        let mut consumers = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for (index, (pair, doorbell)) in pairs.into_iter().zip(doorbells).enumerate() {
            lanes.push(Mutex::new(Lane { producer: pair.submit, doorbell: doorbell.clone() }));
            consumers.push(pair.collect);
            let wake = doorbell.clone();
            let factory = ConnFactory {
                settings: Arc::new(settings.clone()),
                reconnect: config.reconnect,
                pipeline: settings.pipeline,
                resolver: resolver.clone(),
                waker: Arc::new(move || wake.signal()),
                health: health.clone(),
            };
            let nodes = Nodes::new(factory, &servers)?;
            let ranged = crate::ranged::RangedReads::new();
            let worker =
                worker::Worker::new(shared.clone(), pair.take, pair.post, doorbell, route.clone(), nodes, ranged)
                    .with_backend(backend);
            let cpu = placement.worker_cpus.get(index).copied().flatten();
            let tids = worker_tids.clone();
            let spawned = std::thread::Builder::new().name(format!("lmcache-resp-io-{index}")).spawn(move || {
                tids[index].store(numa::current_thread_id(), Ordering::Release);
                if let Some(cpu) = cpu {
                    // Placement was validated when it was planned; a failure here leaves the
                    // thread unpinned, which is slower but correct.
                    let _ = numa::bind_current_thread(&[cpu]);
                }
                worker::run_guarded(index, worker)
            });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    let error = Error::os("cannot start an I/O thread", err);
                    shared.fail(error.clone());
                    handles.into_iter().for_each(|h: JoinHandle<()>| drop(h.join()));
                    return Err(error);
                }
            }
        }
        let engine = Engine {
            shared,
            lanes,
            front: Mutex::new(FrontEnd { consumers, batches: Batches::new(config.batch_slots), record: Vec::new() }),
            workers: Mutex::new(handles),
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            next_lane: AtomicUsize::new(0),
            timeout: settings.timeout,
            endpoint,
            conns_per_worker: nodes::conns_per_node(settings) * servers.len(),
            placement,
            io_loop,
            worker_tids,
            owner_pid: current_pid(),
            refresher: Mutex::new(None),
            health,
            get_pieces: settings.get_piece_bytes,
            key_prefix: settings.wire_prefix(),
        };
        engine.warm_up(settings, &mut without_a_server)?;
        engine.log_read_shapes();
        if let Some(view) = route.cluster() {
            *engine.refresher.lock().unwrap_or_else(|p| p.into_inner()) = Some((view.clone(), view.spawn_refresher()?));
        }
        Ok(engine)
    }

    /// Opens every worker's connections to the servers it starts with now (for a cluster, the
    /// first [`WARM_UP_NODES`] primaries: the warm-up is bounded whatever the map's size), so
    /// that the first batch does not pay for them and a server that cannot be reached fails the
    /// start, within the timeout.
    fn warm_up(&self, settings: &Settings, without_a_server: &mut bool) -> Result<()> {
        let keys = vec![Item::key_only(b""); self.lanes.len() * self.conns_per_worker];
        let result = self.run(Batch::new(Op::Ping, &keys))?;
        match result.outcomes.into_iter().find(|o| !o.is_success()) {
            Some(Outcome::Failed(err)) => tolerate_unreachable(settings, err, without_a_server),
            _ => Ok(()),
        }
    }

    /// Says, once the warm-up heard every server, how each one's large values are read: one
    /// line per shape and server version, naming up to four servers.
    fn log_read_shapes(&self) {
        let mut groups: Vec<((String, String), Vec<String>)> = Vec::new();
        let mut identities: Vec<_> = self.health.identities().into_iter().collect();
        identities.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, identity) in identities {
            let shape = ReadShape::choose(self.get_pieces, identity.as_ref()).to_string();
            let server = identity.map_or_else(|| "a server that did not say what it is".into(), |i| i.to_string());
            match groups.iter_mut().find(|(key, _)| key.0 == shape && key.1 == server) {
                Some((_, names)) => names.push(name),
                None => groups.push(((shape, server), vec![name])),
            }
        }
        for ((shape, server), names) in groups {
            let shown = names.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more = if names.len() > 4 { format!(" and {} more", names.len() - 4) } else { String::new() };
            log::info!(
                target: "lmcache_resp::engine",
                "large values are read as {shape} from {shown}{more} ({server}; get_piece_bytes={})",
                self.get_pieces
            );
        }
    }

    /// The servers known to be down now (see `crate::health`).
    pub fn down_endpoints(&self) -> Vec<String> {
        self.health.down()
    }

    /// Where the workers run and the page arena's memory lives, and why.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Which loop the workers run, and why: as chosen at start, unless a worker's ring failed
    /// since (then the workers whose ring failed run the poll loop, and this says why).
    pub fn io_loop(&self) -> IoLoopChoice {
        let failure = self.shared.ring_failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        match failure {
            Some(why) => IoLoopChoice {
                name: "poll",
                setting: self.io_loop.setting,
                why: format!("{}, but {why}: the workers whose ring failed moved to the poll loop", self.io_loop.why),
            },
            None => self.io_loop.clone(),
        }
    }

    /// `(kernel thread id, planned CPU)` of each worker.
    pub fn worker_threads(&self) -> Vec<(i32, Option<u32>)> {
        self.worker_tids
            .iter()
            .zip(self.placement.worker_cpus.iter().copied().chain(std::iter::repeat(None)))
            .map(|(tid, cpu)| (tid.load(Ordering::Acquire), cpu))
            .collect()
    }

    /// The shared-memory page arena, if the engine was started with pages.
    pub fn pages(&self) -> Option<&Arc<Arena>> {
        self.shared.pages.as_ref()
    }

    /// Registers `memory` (a host KV pool, say) so that batches can name ranges of it by
    /// offset ([`Memory::Registered`]); returns its id. The caller keeps the memory valid until
    /// [`Engine::unregister_region`] succeeds, as [`RawBuf::new`] promised, and writes it
    /// only outside the ranges of batches in flight.
    pub fn register_region(&self, memory: RawBuf) -> Result<u32> {
        self.check_usable()?;
        self.shared.regions.register(memory)
    }

    /// Forgets region `id`; refused while a batch in flight names it. Once it returns, no
    /// worker touches the region's memory again.
    pub fn unregister_region(&self, id: u32) -> Result<()> {
        self.shared.regions.unregister(id)
    }

    /// I/O worker threads (one ring pair each).
    pub fn num_workers(&self) -> usize {
        self.lanes.len()
    }

    /// Every key of a batch completes, with success or an error, within this time of its
    /// submission.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Where the I/O goes, for reprs and messages: the one server (`host:port`,
    /// `unix:/path`), or `cluster `/`shards ` and the list of servers.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The counters, summed over the workers (see [`crate::metrics`]).
    pub fn stats(&self) -> crate::metrics::Snapshot {
        let mut snapshot = self.shared.metrics.snapshot();
        let down = self.health.down();
        let identities = self.health.identities();
        for endpoint in &mut snapshot.endpoints {
            endpoint.down = u64::from(down.contains(&endpoint.endpoint));
            let identity = identities.get(&endpoint.endpoint).cloned().flatten();
            endpoint.server = identity.as_ref().map(ToString::to_string).unwrap_or_default();
            endpoint.reads = ReadShape::choose(self.get_pieces, identity.as_ref()).to_string();
        }
        snapshot
    }

    /// Readable while batches submitted for `drain` have completed and not been drained.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.completion_event.as_fd()
    }

    /// Whether [`Engine::close`] was called (it takes no new batches then).
    pub fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Why the engine stopped working, if it did.
    pub fn failure(&self) -> Option<&Error> {
        self.shared.failure()
    }

    /// Pushes a record that is not a descriptor into a worker's ring, as a bug or a stray
    /// write would (tests of what callers see when a worker stops). Only in builds with the
    /// `test-hooks` feature: the development build of the Python module and the tests.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn corrupt_ring_for_test(&self, worker: usize) -> Result<()> {
        let mut lane = self.lanes[worker % self.lanes.len()].lock().unwrap_or_else(|p| p.into_inner());
        lane.producer.try_push(&[b"not a descriptor"]).map_err(|e| Error::invalid(format!("{e:?}")))?;
        lane.producer.publish();
        lane.doorbell.signal();
        Ok(())
    }

    /// Whether this process may use the engine: it must be the one that started it (a forked
    /// child has none of its threads), and the engine must work.
    pub fn check_usable(&self) -> Result<()> {
        self.check_process()?;
        if let Some(err) = self.shared.failure() {
            return Err(err
                .clone()
                .context("the store failed earlier and cannot be used: close it and create a new one"));
        }
        if self.is_closed() {
            return Err(Error::closed("the store"));
        }
        Ok(())
    }

    /// True in a process that inherited the engine through fork(): nothing of it works here.
    pub fn is_inherited(&self) -> bool {
        current_pid() != self.owner_pid
    }

    fn check_process(&self) -> Result<()> {
        let pid = current_pid();
        if pid != self.owner_pid {
            return Err(Error::new(
                ErrorKind::Forked,
                format!(
                    "this store was created by process {} and cannot be used in process {pid}, which inherited it \
                     through fork(): create a new store in this process",
                    self.owner_pid
                ),
            ));
        }
        Ok(())
    }

    fn lock_front(&self) -> MutexGuard<'_, FrontEnd> {
        self.front.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stops taking batches, fails what has not reached the wire, lets what is on the wire
    /// finish (each by its deadline), and stops the workers. Every submitted batch completes:
    /// `drain` still returns the last results after `close`. Idempotent. In a forked child it
    /// does nothing: the threads and rings are the parent's.
    pub fn close(&self) {
        if self.check_process().is_err() {
            return;
        }
        self.closing.store(true, Ordering::Release);
        {
            // Holding every lane means no submitter is half-way through pushing a batch.
            let lanes: Vec<_> = self.lanes.iter().map(|l| l.lock().unwrap_or_else(|p| p.into_inner())).collect();
            self.shared.sealed.store(true, Ordering::Release);
            for lane in &lanes {
                lane.doorbell.signal();
            }
        }
        self.join_workers();
        let mut front = self.lock_front();
        self.collect(&mut front);
        self.settle_if_failed(&mut front);
        if front.batches.has_ready() {
            self.shared.completion_event.signal();
        }
    }

    fn join_workers(&self) {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        for handle in workers.drain(..) {
            // A worker's panic was caught and turned into the engine's failure already.
            let _ = handle.join();
        }
        if let Some((view, refresher)) = self.refresher.lock().unwrap_or_else(|p| p.into_inner()).take() {
            view.stop();
            let _ = refresher.join();
        }
    }

    /// Redis Cluster: the slot map the workers route by (the native tests watch it).
    #[cfg(feature = "internals")]
    pub fn cluster(&self) -> Option<Arc<ClusterView>> {
        self.refresher.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(view, _)| view.clone())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.check_process().is_err() {
            // A forked child: the worker threads do not exist here, and their handles must not
            // be joined or detached (they name threads of the parent).
            let handles = std::mem::take(self.workers.get_mut().unwrap_or_else(|p| p.into_inner()));
            std::mem::forget(handles);
            return;
        }
        self.close();
    }
}

fn list(servers: &[crate::net::Endpoint]) -> String {
    servers.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn current_pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

fn eventfd_error(err: std::io::Error) -> Error {
    Error::os("cannot create an eventfd", err)
}

fn arena_error(err: ArenaError) -> Error {
    match err {
        ArenaError::Os { op, source } => {
            Error::os(format!("cannot set up the shared-memory arena: {op} failed"), source)
        }
        other => Error::invalid(other.to_string()),
    }
}

/// A server that cannot be reached at start (refused, timed out, gone): an error where
/// `require_server_at_start` says so; otherwise the engine starts without it, saying so once,
/// and its keys fail fast (its health marks it down) until it answers. What no wait would mend
/// (a wrong password, a certificate, an address that is not Redis) fails the start either way.
fn tolerate_unreachable(settings: &Settings, err: Error, said: &mut bool) -> Result<()> {
    if settings.require_server_at_start || !matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
        return Err(err);
    }
    if std::mem::replace(said, true) {
        return Ok(());
    }
    log::warn!(
        target: "lmcache_resp::engine",
        "starting without the server (require_server_at_start=false): {err}; its keys fail at once until it \
         answers, which a probe checks every second or so"
    );
    Ok(())
}

/// The loop the workers run for the `io_backend` setting: `auto` takes io_uring where this
/// process may use it and otherwise says once, at INFO, why the workers poll; `uring` where it
/// may not is an error that says why.
fn io_backend(wanted: crate::settings::IoBackend) -> Result<(worker::Backend, IoLoopChoice)> {
    use crate::settings::IoBackend;
    let chose = |backend, why: String| (backend, IoLoopChoice::new(backend, wanted, why));
    match wanted {
        IoBackend::Poll => Ok(chose(worker::Backend::Poll, "io_backend=\"poll\" asks for it".into())),
        IoBackend::Uring => match crate::net::uring::probe() {
            Ok(()) => Ok(chose(worker::Backend::Uring, "io_backend=\"uring\" asks for it".into())),
            Err(why) => Err(Error::new(
                ErrorKind::Os,
                format!("io_backend=\"uring\" cannot run here: {why}; set io_backend=\"poll\" or \"auto\""),
            )),
        },
        IoBackend::Auto => match crate::net::uring::probe() {
            Ok(()) => Ok(chose(worker::Backend::Uring, "io_backend=\"auto\": this process may use io_uring".into())),
            Err(why) => {
                log::info!(target: "lmcache_resp::engine", "io_backend=auto: {why}; the I/O workers run the poll loop");
                Ok(chose(worker::Backend::Poll, format!("io_backend=\"auto\": {why}")))
            }
        },
    }
}

/// Which loop the I/O workers run, as the engine chose it at start, and why: what reports
/// (the bindings' `placement`, the benchmark's header) name beside each figure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoLoopChoice {
    /// `"poll"` or `"uring"`.
    pub name: &'static str,
    /// The `io_backend` setting it was chosen for.
    pub setting: crate::settings::IoBackend,
    /// Why: the setting asked for it, or what `auto`'s probe found.
    pub why: String,
}

impl IoLoopChoice {
    fn new(backend: worker::Backend, setting: crate::settings::IoBackend, why: String) -> IoLoopChoice {
        let name = match backend {
            worker::Backend::Poll => "poll",
            worker::Backend::Uring => "uring",
        };
        IoLoopChoice { name, setting, why }
    }
}
