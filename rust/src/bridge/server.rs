//! The bridge process's side: one engine and one page pool, shared by the clients that attach
//! over a Unix socket.
//!
//! Threads: an acceptor (handshakes), one control thread per client (allocate, free, and the
//! end of the client when its socket closes), and the relay, which moves batches from the
//! clients' submission rings into the engine and results back into their completion rings.
//! The relay trusts nothing a client wrote: a record that does not decode, or a ring whose
//! positions are impossible, ends that client alone; a batch naming a page the client does not
//! hold fails, key by key, without reaching the engine.

use super::channel;
use super::wire::{self, Control, KeyEntry, NO_PAGE, PROTOCOL_VERSION, Submission, Welcome};
use crate::arena::{Arena, ArenaSpec, Claim, PageHandle, PageLedger, PagePool, RingRegionSpec};
use crate::capacity::TrackedEngine;
use crate::conn::Outcome;
use crate::engine::{Batch, BatchResult, EngineConfig, Item, Memory};
use crate::error::{Error, ErrorKind, Result};
use crate::net::EventFd;
use crate::op::{BatchShape, MAX_KEY_LEN, MemoryKind, Op};
use crate::ring::{self, Consumer, Producer, PushError};
use rustix::event::{PollFd, PollFlags, poll};
use std::collections::{HashMap, VecDeque};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Each client's rings: room for a batch of a few thousand keys either way.
const SUBMISSION_RING: usize = 4 << 20;
const COMPLETION_RING: usize = 1 << 20;

/// A running bridge: its engine, its page pool, and the threads serving its clients.
pub struct BridgeServer {
    shared: Arc<BridgeState>,
    socket: PathBuf,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What the bridge's threads share.
struct BridgeState {
    engine: TrackedEngine,
    pool: PagePool,
    clients: Mutex<HashMap<u32, Arc<Client>>>,
    /// Engine batch id -> whose batch it is.
    batches: Mutex<HashMap<u64, ClientBatch>>,
    /// Operations in flight per page, for every client: such a page is not freed.
    ledger: PageLedger,
    next_client: AtomicU32,
    stop: AtomicBool,
    /// Wakes the relay: a client came or went. The relay resets it.
    wake: EventFd,
    /// Set once, when the bridge stops; never reset, so every thread polling it sees it.
    stopped: EventFd,
}

/// Where an engine batch's results go, and the pages it holds busy until then.
struct ClientBatch {
    client: u32,
    client_batch: u64,
    claim: Claim,
}

struct Client {
    id: u32,
    pid: u32,
    control: UnixStream,
    /// Pages this client holds, by index.
    pages: Mutex<HashMap<u32, PageHandle>>,
    data: Mutex<ClientData>,
    doorbell: EventFd,
    notifier: EventFd,
    /// Its socket closed (the process ended, or the bridge dropped it).
    gone: AtomicBool,
    _rings: Arc<Arena>,
}

struct ClientData {
    submissions: Consumer,
    completions: Producer,
    /// Completion records not yet in the ring (it was full).
    outbox: VecDeque<Vec<u8>>,
    in_flight: usize,
    record: Vec<u8>,
}

impl BridgeServer {
    /// Starts the engine and the pool, and listens on `socket` (replacing a stale socket
    /// file, refusing a path where a bridge answers).
    pub fn start(config: EngineConfig, socket: &Path) -> Result<BridgeServer> {
        if config.page_size == 0 || config.num_pages == 0 {
            return Err(Error::invalid("the bridge needs page_size >= 1 and num_pages >= 1"));
        }
        let listener = bind(socket)?;
        let num_pages = config.num_pages;
        let engine = TrackedEngine::start(config)?;
        let arena = engine.pages().expect("an engine with pages").clone();
        let pool = PagePool::new(arena).map_err(|e| Error::invalid(e.to_string()))?;
        let (wake, stopped) = (new_eventfd()?, new_eventfd()?);
        let shared = Arc::new(BridgeState {
            engine,
            pool,
            clients: Mutex::new(HashMap::new()),
            batches: Mutex::new(HashMap::new()),
            ledger: PageLedger::new(num_pages),
            next_client: AtomicU32::new(1),
            stop: AtomicBool::new(false),
            wake,
            stopped,
        });
        let threads = vec![
            spawn("lmcache-resp-bridge-accept", {
                let shared = shared.clone();
                move || accept_loop(&shared, listener)
            })?,
            spawn("lmcache-resp-bridge-relay", {
                let shared = shared.clone();
                move || relay_loop(&shared)
            })?,
        ];
        Ok(BridgeServer { shared, socket: socket.to_path_buf(), threads: Mutex::new(threads) })
    }

    /// The engine that carries every client's batches.
    pub fn engine(&self) -> &TrackedEngine {
        &self.shared.engine
    }

    /// The pool of the shared page arena whose pages the clients are handed.
    pub fn pool(&self) -> &PagePool {
        &self.shared.pool
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
        self.shared.ring_wake();
        let threads: Vec<_> = self.threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
        self.shared.engine.close();
        relay_results(&self.shared);
        for client in self.shared.lock_clients().values() {
            flush(client);
            let _ = client.control.shutdown(std::net::Shutdown::Both);
        }
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

/// A listening socket at `path`. A file left by a bridge that died is replaced; a live
/// bridge (or anything else that accepts connections there) is not.
fn bind(path: &Path) -> Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(Error::invalid(format!(
                "{} is in use: another bridge (or server) listens there",
                path.display()
            )));
        }
        std::fs::remove_file(path).map_err(|e| Error::os(format!("cannot replace {}", path.display()), e))?;
    }
    UnixListener::bind(path).map_err(|e| Error::os(format!("cannot listen on {}", path.display()), e))
}

impl BridgeState {
    fn lock_clients(&self) -> MutexGuard<'_, HashMap<u32, Arc<Client>>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ring_wake(&self) {
        self.wake.signal();
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

fn accept_loop(shared: &Arc<BridgeState>, listener: UnixListener) {
    let _ = listener.set_nonblocking(true);
    while !shared.stopping() {
        let mut fds =
            [PollFd::new(&listener, PollFlags::IN), PollFd::from_borrowed_fd(shared.stopped.as_fd(), PollFlags::IN)];
        let _ = poll(&mut fds, None);
        let Ok((stream, _)) = listener.accept() else { continue };
        let _ = stream.set_nonblocking(false);
        if let Err(err) = handshake(shared, stream) {
            log::warn(&format!("bridge: a client's handshake failed: {err}"));
        }
    }
}

fn handshake(shared: &Arc<BridgeState>, stream: UnixStream) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| Error::os("socket timeout", e))?;
    let pid = match channel::receive(&stream)? {
        Some((Control::Hello { version, pid }, _)) if version == PROTOCOL_VERSION => pid,
        Some((Control::Hello { version, .. }, _)) => {
            let reason = format!(
                "protocol version {version} is not this bridge's ({PROTOCOL_VERSION}): use the same lmcache-resp \
                 version for the bridge and its clients"
            );
            channel::send(&stream, &Control::Refused { reason: reason.clone() }, &[])?;
            return Err(Error::invalid(reason));
        }
        _ => return Err(Error::new(ErrorKind::Protocol, "the peer did not say hello")),
    };
    let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
    let capacity = |bytes: usize| bytes.next_power_of_two();
    let spec = ArenaSpec {
        page_size: 1,
        num_pages: 0,
        rings: vec![RingRegionSpec {
            submission_bytes: ring::ring_size(capacity(SUBMISSION_RING)),
            completion_bytes: ring::ring_size(capacity(COMPLETION_RING)),
        }],
        batch_slots: 0,
        name_hint: format!("client-{id}"),
    };
    let rings = Arc::new(Arena::create(&spec).map_err(|e| Error::invalid(e.to_string()))?);
    let (sub_base, sub_len, comp_base, comp_len) = rings.ring_region(0);
    let owner: Arc<dyn std::any::Any + Send + Sync> = rings.clone();
    let ring_err = |e: ring::RingError| Error::invalid(format!("ring setup: {e}"));
    // SAFETY: both regions lie inside the fresh arena, 4096-aligned and `ring_size` long as
    // specified; the client maps them only after the welcome below. The bridge attaches the
    // consumer of the submission ring and the producer of the completion ring: the client,
    // the other end of each.
    let (submissions, completions) = unsafe {
        ring::init_ring(sub_base, capacity(SUBMISSION_RING));
        ring::init_ring(comp_base, capacity(COMPLETION_RING));
        (
            Consumer::attach(sub_base, sub_len, owner.clone()).map_err(ring_err)?,
            Producer::attach(comp_base, comp_len, owner).map_err(ring_err)?,
        )
    };
    let (doorbell, notifier) = (new_eventfd()?, new_eventfd()?);
    let timeout = shared.engine.timeout();
    let welcome = Welcome {
        version: PROTOCOL_VERSION,
        client_id: id,
        page_size: shared.pool.page_size() as u64,
        num_pages: shared.pool.capacity() as u64,
        num_workers: shared.engine.num_workers() as u32,
        timeout_ms: timeout.as_millis() as u64,
        endpoint: shared.engine.endpoint().to_owned(),
    };
    let fds = [shared.pool.arena().fd(), rings.fd(), doorbell.as_fd(), notifier.as_fd()];
    channel::send(&stream, &Control::Welcome(welcome), &fds)?;
    stream.set_read_timeout(None).map_err(|e| Error::os("socket timeout", e))?;
    let client = Arc::new(Client {
        id,
        pid,
        control: stream,
        pages: Mutex::new(HashMap::new()),
        data: Mutex::new(ClientData {
            submissions,
            completions,
            outbox: VecDeque::new(),
            in_flight: 0,
            record: Vec::new(),
        }),
        doorbell,
        notifier,
        gone: AtomicBool::new(false),
        _rings: rings,
    });
    shared.lock_clients().insert(id, client.clone());
    let for_thread = shared.clone();
    spawn("lmcache-resp-bridge-client", move || control_loop(&for_thread, &client))?;
    shared.ring_wake();
    log::info(&format!("bridge: client {id} (pid {pid}) attached"));
    Ok(())
}

/// One client's requests; returns when its socket closes (or cannot be read).
fn control_loop(shared: &BridgeState, client: &Client) {
    loop {
        let request = match channel::receive(&client.control) {
            Ok(Some((request, _))) => request,
            Ok(None) | Err(_) => break,
        };
        let reply = match request {
            Control::Allocate { count } => allocate(shared, client, count as usize),
            Control::AllocateOne => allocate_one(shared, client),
            Control::Free { index, generation } => free(shared, client, index, generation).map(|()| Control::Freed),
            Control::Stats => Ok(Control::StatsReply { free_pages: shared.pool.free_count() as u64 }),
            Control::Detach => Ok(Control::Detached { pages: return_idle_pages(shared, client) }),
            other => Err(Error::new(ErrorKind::Protocol, format!("unexpected control message {other:?}"))),
        };
        let reply = reply.unwrap_or_else(|err| Control::Failed { kind: err.kind() as u8, message: err.to_string() });
        if channel::send(&client.control, &reply, &[]).is_err() {
            break;
        }
    }
    client.gone.store(true, Ordering::Release);
    shared.ring_wake();
}

fn allocate(shared: &BridgeState, client: &Client, count: usize) -> Result<Control> {
    let handles = shared.pool.allocate_many(count).map_err(|e| Error::new(ErrorKind::Page, e.to_string()))?;
    Ok(hand_over(client, handles))
}

/// One page, or none when the pool is exhausted (which is not an error here).
fn allocate_one(shared: &BridgeState, client: &Client) -> Result<Control> {
    Ok(hand_over(client, shared.pool.allocate().into_iter().collect()))
}

/// `handles` are the client's now.
fn hand_over(client: &Client, handles: Vec<PageHandle>) -> Control {
    let mut pages = client.pages.lock().unwrap_or_else(|p| p.into_inner());
    let listed = handles.iter().map(|h| (h.index, h.generation)).collect();
    for handle in handles {
        pages.insert(handle.index, handle);
    }
    Control::Pages { pages: listed }
}

/// A leaving client's pages that no batch uses go back to the pool now; the others when
/// their batches finish (see `retire_gone`).
fn return_idle_pages(shared: &BridgeState, client: &Client) -> u32 {
    // Lock order: the ledger, then the client's pages (as a batch's claim takes them).
    let held: Vec<u32> = client.pages.lock().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
    shared.ledger.with_idle(held, |idle| {
        let mut pages = client.pages.lock().unwrap_or_else(|p| p.into_inner());
        let handles: Vec<PageHandle> = idle.iter().filter_map(|index| pages.remove(index)).collect();
        let _ = shared.pool.free_many(&handles);
        handles.len() as u32
    })
}

fn free(shared: &BridgeState, client: &Client, index: u32, generation: u32) -> Result<()> {
    let holds = |pages: &HashMap<u32, PageHandle>| pages.get(&index).is_some_and(|h| h.generation == generation);
    let not_held =
        || Error::new(ErrorKind::Page, format!("page {index} (generation {generation}) is not one of this client's"));
    if !holds(&client.pages.lock().unwrap_or_else(|p| p.into_inner())) {
        return Err(not_held());
    }
    // Lock order: the ledger, then the client's pages (as a batch's claim takes them).
    shared.ledger.free_if_idle(index, || {
        let mut pages = client.pages.lock().unwrap_or_else(|p| p.into_inner());
        if !holds(&pages) {
            return Err(not_held());
        }
        shared.pool.free(&pages[&index]).map_err(|e| Error::new(ErrorKind::Page, e.to_string()))?;
        pages.remove(&index);
        Ok(())
    })
}

fn relay_loop(shared: &BridgeState) {
    while !shared.stopping() {
        let clients: Vec<Arc<Client>> = shared.lock_clients().values().cloned().collect();
        let waiting = clients.iter().any(|c| !lock_data(c).outbox.is_empty());
        {
            let mut fds = vec![
                PollFd::from_borrowed_fd(shared.stopped.as_fd(), PollFlags::IN),
                PollFd::from_borrowed_fd(shared.wake.as_fd(), PollFlags::IN),
                PollFd::from_borrowed_fd(shared.engine.event_fd(), PollFlags::IN),
            ];
            fds.extend(clients.iter().map(|c| PollFd::from_borrowed_fd(c.doorbell.as_fd(), PollFlags::IN)));
            let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: if waiting { 1_000_000 } else { 200_000_000 } };
            let _ = poll(&mut fds, Some(&timeout));
        }
        shared.wake.reset();
        for client in &clients {
            client.doorbell.reset();
            if !client.gone.load(Ordering::Acquire) {
                pump(shared, client);
            }
        }
        relay_results(shared);
        for client in &clients {
            flush(client);
        }
        retire_gone(shared, &clients);
    }
}

fn lock_data(client: &Client) -> MutexGuard<'_, ClientData> {
    client.data.lock().unwrap_or_else(|p| p.into_inner())
}

fn new_eventfd() -> Result<EventFd> {
    EventFd::new().map_err(|e| Error::os("eventfd", e))
}

/// Takes the client's submitted batches: checks each, sends the good ones to the engine,
/// answers the others at once.
fn pump(shared: &BridgeState, client: &Arc<Client>) {
    let mut data = lock_data(client);
    let mut took = false;
    loop {
        let ClientData { submissions, record, .. } = &mut *data;
        match submissions.try_pop_into(record) {
            Ok(true) => took = true,
            Ok(false) => break,
            Err(err) => {
                drop(data);
                return drop_client(shared, client, &format!("its submission ring is corrupt: {err}"));
            }
        }
        let record = std::mem::take(&mut data.record);
        let submission = match Submission::decode(&record, MAX_KEY_LEN) {
            Ok(submission) => submission,
            Err(why) => {
                drop(data);
                return drop_client(shared, client, &format!("it sent a malformed batch: {why}"));
            }
        };
        if let Some(reply) = submit(shared, client, &submission) {
            data.outbox.push_back(reply);
        } else {
            data.in_flight += 1;
        }
        data.record = record;
    }
    if took {
        data.submissions.release();
    }
}

/// Sends a checked batch to the engine (None), or the completion that fails it (Some).
fn submit(shared: &BridgeState, client: &Client, submission: &Submission<'_>) -> Option<Vec<u8>> {
    let fail = |err: Error| {
        let outcomes = vec![Outcome::Failed(err); submission.keys.len()];
        let mut record = Vec::new();
        wire::encode_batch_completion(submission.batch, submission.op, &outcomes, &mut record);
        Some(record)
    };
    let (items, claim) = match checked_items(shared, client, submission) {
        Ok(checked) => checked,
        Err(err) => return fail(err),
    };
    let batch = Batch::new(submission.op, &items).with_exact_length(submission.exact_length);
    let mut batches = shared.batches.lock().unwrap_or_else(|p| p.into_inner());
    match shared.engine.submit(batch) {
        Ok(id) => {
            batches.insert(id, ClientBatch { client: client.id, client_batch: submission.batch, claim });
            None
        }
        Err(err) => {
            drop(batches);
            shared.ledger.release(claim);
            fail(err)
        }
    }
}

/// The engine's items for a batch, checked as any front checks a batch, every page checked as
/// the client's own and counted busy.
fn checked_items<'a>(
    shared: &BridgeState,
    client: &Client,
    submission: &Submission<'a>,
) -> Result<(Vec<Item<'a>>, Claim)> {
    let op = submission.op;
    let keys: Vec<&[u8]> = submission.keys.iter().map(|entry| entry.key).collect();
    let paged: Vec<&KeyEntry<'_>> = submission.keys.iter().filter(|entry| entry.page != NO_PAGE).collect();
    let lengths: Vec<u64> = paged.iter().map(|entry| entry.len).collect();
    let arena = shared.pool.arena();
    let shape = BatchShape {
        op,
        keys: &keys,
        memory: MemoryKind::Pages { page_size: arena.page_size() as u64 },
        memories: paged.len(),
        // A plain GET's length is the room it receives into: the engine checks it stays
        // inside the page.
        lengths: (op == Op::Set || submission.exact_length).then_some(&lengths[..]),
        exact_length: submission.exact_length,
    };
    shape.check()?;
    let pages: Vec<u32> = paged.iter().map(|entry| entry.page).collect();
    // Checked and counted under the ledger's lock: a free or detach on the client's control
    // thread takes that lock too, and then sees these pages busy.
    let claim = shared.ledger.claim(op, &pages, || {
        let held = client.pages.lock().unwrap_or_else(|p| p.into_inner());
        paged.iter().enumerate().try_for_each(|(i, entry)| {
            match held.get(&entry.page).is_some_and(|h| h.generation == entry.generation) {
                true => Ok(()),
                false => Err(Error::new(
                    ErrorKind::Page,
                    format!("key {i}: page {} is not one this client allocated (or it was freed)", entry.page),
                )),
            }
        })
    })?;
    let items = submission
        .keys
        .iter()
        .map(|KeyEntry { key, page, len, .. }| match *page {
            NO_PAGE => Item::key_only(key),
            page => Item { key, memory: Memory::Arena { offset: arena.page_offset(page as usize), len: *len } },
        })
        .collect();
    Ok((items, claim))
}

/// Finished batches, back to the clients that sent them.
fn relay_results(shared: &BridgeState) {
    let Ok(results) = shared.engine.drain() else { return };
    for BatchResult { id, op, outcomes } in results {
        let Some(ClientBatch { client: client_id, client_batch: batch, claim }) =
            shared.batches.lock().unwrap_or_else(|p| p.into_inner()).remove(&id)
        else {
            continue;
        };
        shared.ledger.release(claim);
        let Some(client) = shared.lock_clients().get(&client_id).cloned() else { continue };
        let mut record = Vec::new();
        wire::encode_batch_completion(batch, op, &outcomes, &mut record);
        let mut data = lock_data(&client);
        data.in_flight -= 1;
        data.outbox.push_back(record);
    }
}

/// Moves a client's finished batches into its completion ring, and rings its notifier.
fn flush(client: &Client) {
    let mut guard = lock_data(client);
    let data = &mut *guard;
    let mut posted = false;
    while let Some(record) = data.outbox.front() {
        match data.completions.try_push(&[record]) {
            Ok(()) => {
                data.outbox.pop_front();
                posted = true;
            }
            Err(PushError::Full) => break,
            Err(PushError::TooLarge { .. }) => {
                // A batch too large for the ring is refused at submission by the client.
                data.outbox.pop_front();
            }
            Err(PushError::Corrupt(_)) => {
                data.outbox.clear();
                break;
            }
        }
    }
    if posted {
        data.completions.publish();
        client.notifier.signal();
    }
}

/// Ends a client that broke the protocol: it alone is told why and disconnected.
fn drop_client(shared: &BridgeState, client: &Client, why: &str) {
    log::warn(&format!("bridge: dropping client {} (pid {}): {why}", client.id, client.pid));
    let notice =
        Control::Failed { kind: ErrorKind::Protocol as u8, message: format!("the bridge dropped this client: {why}") };
    let _ = channel::send(&client.control, &notice, &[]);
    let _ = client.control.shutdown(std::net::Shutdown::Both);
    client.gone.store(true, Ordering::Release);
    shared.ring_wake();
}

/// Clients whose socket closed: once nothing of theirs is in flight, their pages go back to
/// the pool and they are forgotten.
fn retire_gone(shared: &BridgeState, clients: &[Arc<Client>]) {
    for client in clients.iter().filter(|c| c.gone.load(Ordering::Acquire)) {
        if lock_data(client).in_flight > 0 {
            continue;
        }
        let pages: Vec<PageHandle> =
            client.pages.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, h)| h).collect();
        let returned = pages.len();
        let _ = shared.pool.free_many(&pages);
        shared.lock_clients().remove(&client.id);
        log::info(&format!(
            "bridge: client {} (pid {}) detached; {returned} pages back in the pool",
            client.id, client.pid
        ));
    }
}

/// The bridge's log lines: stderr, one line each (the Python front end logs its own).
mod log {
    pub fn info(line: &str) {
        eprintln!("{line}");
    }

    pub fn warn(line: &str) {
        eprintln!("{line}");
    }
}
