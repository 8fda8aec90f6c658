//! The bridge's relay: batches from the clients' rings into the engine, and results back.
//!
//! Fair by construction: the clients are served round-robin, one slice of one batch each per
//! turn, and each client has at most its share in the engine at once (value bytes and keys);
//! a batch larger than a share goes in as several slices, so one client's flood adds at most
//! one share of work ahead of another client's small batch. A client that does not read its
//! completions stops being served once its backlog passes its bound: it cannot grow the
//! bridge's memory, and its batches wait in its own ring.
//!
//! Nothing a client writes is trusted: a record that does not decode, or a ring whose
//! positions are impossible, drops that client; a batch that breaks the batch contract, or
//! names a page the client does not hold, fails key by key without reaching the engine.

use super::server::{BridgeState, Client, ClientData};
use super::signal::Drained;
use super::wire::{self, KeyEntry, NO_PAGE, Submission};
use crate::arena::{Claim, PageHandle};
use crate::conn::Outcome;
use crate::engine::{Batch, BatchResult, Item, Memory, records::SUBMISSION_HEADER_LEN};
use crate::error::{Error, ErrorKind, Result};
use crate::memory::RawBuf;
use crate::op::{BatchShape, MAX_KEY_LEN, MemoryKind, Op};
use crate::ring::PushError;
use rustix::event::{PollFd, PollFlags, poll};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Batches taken from one client's ring ahead of the one being fed to the engine.
const MAX_QUEUED_BATCHES: usize = 8;
/// Slices a client's share is cut into at least.
const SLICES: usize = 4;
/// How often the clients' regions are checked for memory beyond their pages.
const AUDIT_INTERVAL: Duration = Duration::from_millis(100);
const HUGE_PAGE: u64 = 2 << 20;

/// A client's batch, checked and taken from its ring.
pub(super) struct ClientBatch {
    /// The client's id for it.
    batch: u64,
    /// The relay's own id for it, to route slices' results.
    seq: u64,
    op: Op,
    exact_length: bool,
    keys: Vec<Box<[u8]>>,
    memory: Vec<Option<RawBuf>>,
    /// The first key not yet sent to the engine.
    next: usize,
    outcomes: Vec<Option<Outcome>>,
    filled: usize,
    claim: Option<Claim>,
}

/// Where an engine batch's results go.
struct Slice {
    client: u32,
    seq: u64,
    start: usize,
    bytes: usize,
    ring_bytes: usize,
}

struct Relay {
    slices: HashMap<u64, Slice>,
    next_seq: u64,
    /// Which client goes first in the next turn.
    turn: usize,
    /// Descriptor bytes in the engine's rings for every slice in flight, and the most there
    /// may be (half the rings: a slice's keys may all land in one worker's ring).
    ring_bytes: usize,
    ring_budget: usize,
}

/// The relay thread's body.
pub(super) fn run(shared: &BridgeState) {
    let ring_budget = shared.engine_ring_bytes / 2;
    let mut relay = Relay { slices: HashMap::new(), next_seq: 1, turn: 0, ring_bytes: 0, ring_budget };
    let mut last_audit = Instant::now();
    while !shared.stopping() {
        let clients = shared.clients();
        let backlog = clients.iter().any(|c| !c.lock_data().outbox.is_empty());
        {
            let mut fds = vec![
                PollFd::from_borrowed_fd(shared.stopped.as_fd(), PollFlags::IN),
                PollFd::from_borrowed_fd(shared.relay_wake.as_fd(), PollFlags::IN),
                PollFd::from_borrowed_fd(shared.engine.event_fd(), PollFlags::IN),
            ];
            fds.extend(clients.iter().map(|c| PollFd::from_borrowed_fd(c.signal.as_fd(), PollFlags::IN)));
            let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: if backlog { 1_000_000 } else { 200_000_000 } };
            let _ = poll(&mut fds, Some(&timeout));
        }
        shared.relay_wake.reset();
        for client in &clients {
            if client.signal.drain() == Drained::Closed {
                client.gone.store(true, Ordering::Release);
            }
            if !client.gone.load(Ordering::Acquire) {
                intake(shared, client);
            }
        }
        relay.admit(shared, &clients);
        relay.results(shared);
        for client in &clients {
            flush(client);
        }
        if last_audit.elapsed() >= AUDIT_INTERVAL {
            audit_regions(shared, &clients);
            last_audit = Instant::now();
        }
        retire_gone(shared, &clients);
    }
}

/// Clients whose region holds more memory than their pages can: a client can write anywhere
/// in its region, pages it was never given included, and the bridge's memory is bounded only
/// if that is caught. Such a client is dropped (and its region emptied when it is retired).
fn audit_regions(shared: &BridgeState, clients: &[Arc<Client>]) {
    for client in clients.iter().filter(|c| !c.gone.load(Ordering::Acquire)) {
        let Ok(stat) = rustix::fs::fstat(client.region.fd()) else { continue };
        let used = stat.st_blocks as u64 * 512;
        let held = client.held.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        // Shared memory may come in huge pages (transparent huge pages for shmem): allow each
        // held page and the rings a whole one.
        let page = (client.region.page_size() as u64).next_multiple_of(HUGE_PAGE);
        let allowed = client.region.page_offset(0).next_multiple_of(HUGE_PAGE) + held * page;
        if used > allowed {
            client.drop_for(
                shared,
                format!(
                    "it wrote to {} KiB of its region, more than its rings and the {held} page(s) it holds allow \
                     ({} KiB): pages must be allocated before they are written",
                    used >> 10,
                    allowed >> 10
                ),
            );
        }
    }
}

/// After the engine closed: the last results, delivered.
pub(super) fn finish(shared: &BridgeState) {
    let mut relay = Relay { slices: HashMap::new(), next_seq: 1, turn: 0, ring_bytes: 0, ring_budget: 0 };
    relay.results(shared);
    for client in shared.clients() {
        flush(&client);
    }
}

/// Takes a client's new batches from its ring (a few ahead), checking each.
fn intake(shared: &BridgeState, client: &Arc<Client>) {
    let mut data = client.lock_data();
    let mut took = false;
    while data.queued.len() < MAX_QUEUED_BATCHES {
        let ClientData { submissions, record, .. } = &mut *data;
        match submissions.try_pop_into(record) {
            Ok(true) => took = true,
            Ok(false) => break,
            Err(err) => {
                drop(data);
                return client.drop_for(shared, format!("its submission ring is corrupt: {err}"));
            }
        }
        let record = std::mem::take(&mut data.record);
        let submission = match Submission::decode(&record, MAX_KEY_LEN) {
            Ok(submission) => submission,
            Err(why) => {
                drop(data);
                return client.drop_for(shared, format!("it sent a malformed batch: {why}"));
            }
        };
        match checked(client, &submission) {
            Ok(batch) => data.queued.push_back(batch),
            Err(err) => {
                let outcomes = vec![Outcome::Failed(err); submission.keys.len()];
                complete(&mut data, submission.batch, submission.op, &outcomes);
            }
        }
        data.record = record;
    }
    if took {
        data.submissions.release();
    }
}

/// A batch as the engine will run it: the batch contract as every front checks it, every page
/// the client's own (claimed in its ledger), every range inside a page of its region.
fn checked(client: &Client, submission: &Submission<'_>) -> Result<ClientBatch> {
    let op = submission.op;
    let keys: Vec<&[u8]> = submission.keys.iter().map(|entry| entry.key).collect();
    let paged: Vec<&KeyEntry<'_>> = submission.keys.iter().filter(|entry| entry.page != NO_PAGE).collect();
    let lengths: Vec<u64> = paged.iter().map(|entry| entry.len).collect();
    let page_size = client.region.page_size() as u64;
    BatchShape {
        op,
        keys: &keys,
        memory: MemoryKind::Pages { page_size },
        memories: paged.len(),
        lengths: (op == Op::Set || submission.exact_length).then_some(&lengths[..]),
        exact_length: submission.exact_length,
    }
    .check()?;
    if let Some((i, entry)) = paged.iter().enumerate().find(|(_, e)| e.len > page_size) {
        return Err(Error::invalid(format!("key {i}: {} bytes do not fit a {page_size}-byte page", entry.len)));
    }
    let pages: Vec<u32> = paged.iter().map(|entry| entry.page).collect();
    let claim = client.ledger.claim(op, &pages, || {
        paged.iter().enumerate().try_for_each(|(i, entry)| {
            let handle = PageHandle { pool_id: client.pool.id(), index: entry.page, generation: entry.generation };
            client.pool.check(&handle).map_err(|_| {
                Error::new(
                    ErrorKind::Page,
                    format!("key {i}: page {} is not one this client allocated (or it was freed)", entry.page),
                )
            })
        })
    })?;
    let memory = submission
        .keys
        .iter()
        .map(|entry| match entry.page {
            NO_PAGE => None,
            page => {
                let ptr = client.region.page_ptr(page as usize);
                // SAFETY: the page is one of this client's region's (the pool checked its index
                // and generation), `len` is at most a page (checked above), and the region
                // stays mapped while the client exists, which is until all its batches have
                // completed. The claim keeps the page from being freed meanwhile. What the
                // client itself writes into its own page while it is in flight changes only
                // that page's bytes.
                Some(unsafe { RawBuf::new(ptr, entry.len as usize) })
            }
        })
        .collect();
    Ok(ClientBatch {
        batch: submission.batch,
        seq: 0,
        op,
        exact_length: submission.exact_length,
        keys: submission.keys.iter().map(|entry| Box::from(entry.key)).collect(),
        memory,
        next: 0,
        outcomes: vec![None; submission.keys.len()],
        filled: 0,
        claim: Some(claim),
    })
}

/// Descriptor bytes one key takes in an engine ring (its record, header and padding).
fn ring_cost(key: &[u8]) -> usize {
    (8 + SUBMISSION_HEADER_LEN + key.len()).next_multiple_of(8)
}

impl Relay {
    /// Round-robin: each client in turn sends one slice of its first unsent batch, within its
    /// share, until no one can send more.
    fn admit(&mut self, shared: &BridgeState, clients: &[Arc<Client>]) {
        if clients.is_empty() {
            return;
        }
        self.turn = (self.turn + 1) % clients.len();
        loop {
            let mut sent = false;
            for i in 0..clients.len() {
                let client = &clients[(self.turn + i) % clients.len()];
                if !client.gone.load(Ordering::Acquire) {
                    sent |= self.send_slice(shared, client);
                }
            }
            if !sent {
                return;
            }
        }
    }

    /// Sends the next slice of the client's first batch with keys left; false when it has
    /// none, or no room (its share, its backlog, the engine's rings).
    fn send_slice(&mut self, shared: &BridgeState, client: &Client) -> bool {
        let limits = &shared.limits;
        let mut data = client.lock_data();
        if data.outbox_bytes > limits.client_outbox_bytes
            || data.inflight_bytes >= limits.client_inflight_bytes
            || data.inflight_keys >= limits.client_inflight_keys
            || self.ring_bytes >= self.ring_budget
        {
            return false;
        }
        // A slice is at most a quarter of the share: the share stays full while slices
        // complete one by one, so a client alone keeps the server busy (a slice of the whole
        // share would leave the pipe empty each time it completed).
        let room_bytes =
            (limits.client_inflight_bytes - data.inflight_bytes).min(limits.client_inflight_bytes / SLICES);
        let room_keys = (limits.client_inflight_keys - data.inflight_keys).min(limits.client_inflight_keys / SLICES);
        let room_ring = self.ring_budget - self.ring_bytes;
        let Some(batch) = data.queued.iter_mut().find(|b| b.next < b.keys.len()) else { return false };
        if batch.seq == 0 {
            batch.seq = self.next_seq;
            self.next_seq += 1;
        }
        let start = batch.next;
        let (mut bytes, mut ring) = (0, 0);
        let mut end = start;
        while end < batch.keys.len() {
            let len = batch.memory[end].map_or(0, |m| m.len());
            let cost = ring_cost(&batch.keys[end]);
            let fits = bytes + len <= room_bytes && end - start < room_keys && ring + cost <= room_ring;
            if end > start && !fits {
                break;
            }
            bytes += len;
            ring += cost;
            end += 1;
        }
        batch.next = end;
        let items: Vec<Item<'_>> = (start..end)
            .map(|i| match batch.memory[i] {
                Some(buf) => Item { key: &batch.keys[i], memory: Memory::Buffer(buf) },
                None => Item::key_only(&batch.keys[i]),
            })
            .collect();
        let engine_batch = Batch::new(batch.op, &items).with_exact_length(batch.exact_length);
        let seq = batch.seq;
        match shared.engine.submit(engine_batch) {
            Ok(id) => {
                self.slices.insert(id, Slice { client: client.id, seq, start, bytes, ring_bytes: ring });
                self.ring_bytes += ring;
                data.inflight_bytes += bytes;
                data.inflight_keys += end - start;
                data.inflight_slices += 1;
            }
            Err(err) => {
                let outcomes = vec![Outcome::Failed(err); end - start];
                file(&mut data, seq, start, outcomes);
            }
        }
        true
    }

    /// Finished slices, back into their batches; finished batches, to their clients.
    fn results(&mut self, shared: &BridgeState) {
        let Ok(results) = shared.engine.drain() else { return };
        for BatchResult { id, outcomes, .. } in results {
            let Some(slice) = self.slices.remove(&id) else { continue };
            self.ring_bytes -= slice.ring_bytes;
            let Some(client) = shared.lock_clients().get(&slice.client).cloned() else { continue };
            let mut data = client.lock_data();
            data.inflight_bytes -= slice.bytes;
            data.inflight_keys -= outcomes.len();
            data.inflight_slices -= 1;
            file(&mut data, slice.seq, slice.start, outcomes);
        }
    }
}

/// Files a slice's outcomes into its batch; a batch with every outcome goes to its client.
fn file(data: &mut ClientData, seq: u64, start: usize, outcomes: Vec<Outcome>) {
    let Some(at) = data.queued.iter().position(|b| b.seq == seq) else { return };
    let batch = &mut data.queued[at];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        if batch.outcomes[start + i].replace(outcome).is_none() {
            batch.filled += 1;
        }
    }
    if batch.filled < batch.outcomes.len() {
        return;
    }
    let mut batch = data.queued.remove(at).expect("found above");
    let outcomes: Vec<Outcome> = batch.outcomes.drain(..).map(|o| o.expect("every outcome filled")).collect();
    if let Some(claim) = batch.claim.take() {
        data.release.push(claim);
    }
    complete(data, batch.batch, batch.op, &outcomes);
}

/// Queues a batch's completion records for its client.
fn complete(data: &mut ClientData, batch: u64, op: Op, outcomes: &[Outcome]) {
    let max_record = data.completions.capacity() / 4;
    for record in wire::encode_completion_records(batch, op, outcomes, max_record) {
        data.outbox_bytes += record.len();
        data.outbox.push_back(record);
    }
}

/// Moves a client's completion records into its ring, and wakes it; releases the claims of
/// its finished batches.
fn flush(client: &Client) {
    let mut guard = client.lock_data();
    let data = &mut *guard;
    for claim in data.release.drain(..) {
        client.ledger.release(claim);
    }
    let mut posted = false;
    while let Some(record) = data.outbox.front() {
        match data.completions.try_push(&[record]) {
            Ok(()) => {
                data.outbox_bytes -= record.len();
                data.outbox.pop_front();
                posted = true;
            }
            Err(PushError::Full) => break,
            Err(PushError::TooLarge { .. }) => {
                unreachable!("completion records are split to fit a quarter of the ring")
            }
            Err(PushError::Corrupt(_)) => {
                data.outbox.clear();
                data.outbox_bytes = 0;
                break;
            }
        }
    }
    if posted {
        data.completions.publish();
        client.signal.signal();
    }
}

/// Clients whose socket closed: once nothing of theirs is in the engine, their pages go back
/// to the budget and they are forgotten.
fn retire_gone(shared: &BridgeState, clients: &[Arc<Client>]) {
    for client in clients.iter().filter(|c| c.gone.load(Ordering::Acquire)) {
        {
            let mut data = client.lock_data();
            if data.inflight_slices > 0 {
                continue;
            }
            for batch in data.queued.drain(..) {
                if let Some(claim) = batch.claim {
                    client.ledger.release(claim);
                }
            }
            for claim in data.release.drain(..) {
                client.ledger.release(claim);
            }
        }
        let handles: Vec<PageHandle> =
            client.held.lock().unwrap_or_else(|p| p.into_inner()).values().copied().collect();
        let returned = handles.len();
        let _ = super::control::release_pages(shared, client, &handles);
        // All of it, pages it wrote without holding them included: the memory is freed even
        // if the process keeps its mapping.
        super::control::punch(&client.region, 0, client.region.size() as u64);
        shared.lock_clients().remove(&client.id);
        log::info!(target: "lmcache_resp::bridge",
            "bridge: client {} (pid {}, uid {}) detached; {returned} pages back",
            client.id, client.pid, client.uid
        );
    }
}
