//! The bridge process's side: one engine shared by the clients that attach over a Unix socket,
//! each client confined to a region of its own.
//!
//! Two threads serve every client, however many attach:
//! - the control thread ([`super::control`]) accepts connections, runs their handshakes side
//!   by side under one deadline each, and answers page requests; nothing a slow or silent
//!   peer does holds up another;
//! - the relay ([`super::relay`]) moves batches from the clients' rings into the engine,
//!   round-robin, each client within its share of what is in flight, and the results back.
//!
//! Each client gets its own region: a memfd holding its ring pair and its pages, and nothing of
//! any other client. Its batches name pages of that region only; the engine reads and writes
//! them through the bridge's own mapping. The bridge trusts nothing a client writes: a record
//! that does not decode or a ring whose positions are impossible ends that client alone; a
//! batch naming a page the client does not hold fails, key by key, before it reaches the
//! engine.

use super::batch::QueuedBatch;
use super::signal::SignalEnd;
use super::{audit, control, relay};
use crate::arena::{Arena, Claim, PageHandle, PageLedger, PagePool};
use crate::capacity::TrackedEngine;
use crate::engine::EngineConfig;
use crate::error::{Error, Result};
use crate::net::EventFd;
use crate::ring::{Consumer, Producer};
use std::collections::{HashMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// What one client may use, and how many may attach: every resource a client costs the bridge
/// is bounded by one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeLimits {
    /// Clients attached at once; more are refused, saying so.
    pub max_clients: usize,
    /// Pages one client may hold at once (its region's size).
    pub client_pages: usize,
    /// Bytes of values one client may have in the engine at once; a larger batch goes in in
    /// slices, round-robin with the other clients' work.
    pub client_inflight_bytes: usize,
    /// Keys one client may have in the engine at once.
    pub client_inflight_keys: usize,
    /// Completion bytes waiting for a client that does not read its ring: past this, its
    /// batches are no longer taken in until it reads.
    pub client_outbox_bytes: usize,
    /// A client's submission ring, unless it asks for a size (kept between 64 KiB and 16 MiB).
    pub submission_ring_bytes: usize,
    /// A client's completion ring (completions larger than a quarter of it are split).
    pub completion_ring_bytes: usize,
    /// A connection that has not finished its handshake by then is closed.
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once; connections past that are refused at once.
    pub max_handshakes: usize,
    /// The uids that may attach (SO_PEERCRED); empty: only the bridge's own uid.
    pub allow_uids: Vec<u32>,
    /// The gids whose members may attach (the peer's primary or supplementary groups).
    pub allow_gids: Vec<u32>,
    /// The socket file's mode, set after it is created, whatever the umask.
    pub socket_mode: u32,
}

impl Default for BridgeLimits {
    fn default() -> Self {
        BridgeLimits {
            max_clients: 64,
            client_pages: 0,
            client_inflight_bytes: 32 << 20,
            client_inflight_keys: 4096,
            client_outbox_bytes: 4 << 20,
            submission_ring_bytes: 1 << 20,
            completion_ring_bytes: 256 << 10,
            handshake_timeout: Duration::from_secs(5),
            max_handshakes: 128,
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            socket_mode: 0o660,
        }
    }
}

/// A running bridge: its engine, its page budget, and the two threads serving its clients.
pub struct BridgeServer {
    shared: Arc<BridgeState>,
    socket: PathBuf,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

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

impl BridgeServer {
    /// Starts the engine and listens on `socket` (replacing a stale socket file, refusing
    /// anything else there). `config.num_pages` pages of `config.page_size` bytes are the
    /// budget all clients share; each holds at most `limits.client_pages` of them (0: the
    /// whole budget).
    pub fn start(mut config: EngineConfig, socket: &Path, mut limits: BridgeLimits) -> Result<BridgeServer> {
        if config.page_size == 0 || config.num_pages == 0 {
            return Err(Error::invalid("the bridge needs page_size >= 1 and num_pages >= 1"));
        }
        if limits.client_pages == 0 || limits.client_pages > config.num_pages {
            limits.client_pages = config.num_pages;
        }
        if limits.max_clients == 0 {
            return Err(Error::invalid("the bridge needs max_clients >= 1"));
        }
        let (page_size, num_pages) = (config.page_size, config.num_pages);
        crate::memory::check_fits(page_size as u64 * num_pages as u64, "the bridge's pages")?;
        let listener = control::bind(socket, limits.socket_mode)?;
        // The engine holds no pages of its own: every page lives in a client's region.
        config.page_size = 0;
        config.num_pages = 0;
        // Room in the engine's rings for every client's share in flight at once.
        config.submission_ring_bytes = config.submission_ring_bytes.max(4 << 20).next_power_of_two();
        let engine_ring_bytes = config.submission_ring_bytes * config.settings.num_workers;
        let engine = TrackedEngine::start(config)?;
        let new_eventfd = || EventFd::new().map_err(|e| Error::os("eventfd", e));
        let shared = Arc::new(BridgeState {
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
        });
        let threads = vec![
            spawn("lmcache-resp-bridge-control", {
                let shared = shared.clone();
                move || control::run(&shared, listener)
            })?,
            spawn("lmcache-resp-bridge-relay", {
                let shared = shared.clone();
                move || relay::run(&shared)
            })?,
        ];
        Ok(BridgeServer { shared, socket: socket.to_path_buf(), threads: Mutex::new(threads) })
    }

    /// The engine (for its facts: placement, workers, capacity).
    pub fn engine(&self) -> &TrackedEngine {
        &self.shared.engine
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// Pages all clients together may hold.
    pub fn num_pages(&self) -> usize {
        self.shared.num_pages
    }

    /// Pages no client holds now.
    pub fn free_pages(&self) -> usize {
        self.shared.num_pages - self.shared.pages_held.load(Ordering::Acquire)
    }

    /// The bounds each client works within.
    pub fn limits(&self) -> &BridgeLimits {
        &self.shared.limits
    }

    /// Clients attached now.
    pub fn clients(&self) -> usize {
        self.shared.lock_clients().len()
    }

    /// Stops taking clients and batches, completes or fails what is in flight (delivering
    /// the results), drops the clients, and removes the socket file. Idempotent.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.stopped.signal();
        let threads: Vec<_> = self.threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
        self.shared.engine.close();
        relay::finish(&self.shared);
        for socket in self.shared.parked.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        // The clients' signal ends close with them: a client that only waits on its event fd
        // wakes and learns the bridge is gone.
        self.shared.lock_clients().clear();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for BridgeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(body).map_err(|e| Error::os("cannot start a bridge thread", e))
}

impl BridgeState {
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
