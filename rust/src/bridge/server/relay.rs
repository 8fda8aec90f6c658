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
//! names a page the client does not hold, fails key by key without reaching the engine, its
//! failures sent slice by slice within the same backlog bound as any results.
//!
//! Every buffer it keeps per client is bounded: the batches taken ahead (at most its ring's
//! size of records, and one more), its outbox (its bound, and one slice's completions), and
//! the outcomes of slices in flight (its share of keys). The decisions are plain types:
//! [`super::admission`], [`super::batch`], [`super::audit`].

use super::admission::{Admission, Load, Share};
use super::audit::{self, Geometry};
use super::batch::{self, QueuedBatch};
use super::state::{self, BridgeState, Client, ClientData};
use crate::arena::PageHandle;
use crate::bridge::signal::Drained;
use crate::bridge::wire::{self, KeyEntry, NO_PAGE, Submission};
use crate::conn::Outcome;
use crate::engine::{Batch, BatchResult, Item, Memory, records::SUBMISSION_HEADER_LEN};
use crate::memory::RawBuf;
use crate::op::MAX_KEY_LEN;
use crate::ring::PushError;
use rustix::event::{PollFd, PollFlags, poll};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Batches taken from one client's ring ahead of the one being fed to the engine (and at most
/// its ring's size of records, and one more record).
const MAX_QUEUED_BATCHES: usize = 8;
/// How often the clients' regions are checked for memory beyond their pages.
const AUDIT_INTERVAL: Duration = Duration::from_millis(100);

/// Where an engine batch's results go.
struct Slice {
    client: u32,
    seq: u64,
    start: usize,
    keys: usize,
    bytes: usize,
    ring_bytes: usize,
}

struct Relay {
    slices: HashMap<u64, Slice>,
    next_seq: u64,
    admission: Admission,
}

impl Relay {
    fn new(shared: &BridgeState, ring_budget: usize) -> Relay {
        let limits = &shared.limits;
        let share = Share {
            bytes: limits.client_inflight_bytes,
            keys: limits.client_inflight_keys,
            outbox_bytes: limits.client_outbox_bytes,
        };
        Relay { slices: HashMap::new(), next_seq: 1, admission: Admission::new(share, ring_budget) }
    }
}

/// The relay thread's body.
pub(super) fn run(shared: &BridgeState) {
    // Half the engine's rings: a slice's keys may all land in one worker's ring.
    let mut relay = Relay::new(shared, shared.engine_ring_bytes / 2);
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
                // A client is one unit: without its signal socket it is detached whole, its
                // control socket closed, its pages back, its slot free.
                client.signal_closed(shared);
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

/// Drops clients whose region holds memory in a page they do not hold ([`audit`]); their
/// region is emptied when they are retired. A region is walked again only once its memory or
/// its held pages changed since its last clean audit.
fn audit_regions(shared: &BridgeState, clients: &[Arc<Client>]) {
    for client in clients.iter().filter(|c| !c.gone.load(Ordering::Acquire)) {
        let Ok(stat) = rustix::fs::fstat(client.region.fd()) else { continue };
        let used = stat.st_blocks as u64 * 512;
        let changes = client.held_changes.load(Ordering::Acquire);
        if client.lock_data().audited == Some((used, changes)) {
            continue;
        }
        let region = &client.region;
        let geometry = Geometry {
            pages_offset: region.page_offset(0),
            page_stride: region.layout().page_stride as u64,
            num_pages: region.num_pages() as u64,
            granule: shared.shmem_granule,
        };
        let found = {
            // Under the lock: a page freed meanwhile is punched before it leaves `held`, and a
            // page is in `held` before the client learns it has it.
            let held = client.held.lock().unwrap_or_else(|p| p.into_inner());
            audit::first_unheld_page(&geometry, |at| audit::next_data(region.fd(), at), |p| held.contains_key(&p))
        };
        match found {
            None => client.lock_data().audited = Some((used, changes)),
            Some((page, offset)) => client.drop_for(
                shared,
                format!(
                    "its region has memory in page {page} (at offset {offset}), a page it does not hold: pages must \
                     be allocated before they are written or read"
                ),
            ),
        }
    }
}

/// After the engine closed: the last results, delivered.
pub(super) fn finish(shared: &BridgeState) {
    let mut relay = Relay::new(shared, 0);
    relay.results(shared);
    for client in shared.clients() {
        flush(&client);
    }
}

/// Takes a client's new batches from its ring, checking each: a few ahead, at most its ring's
/// size of records (and one more record), whether they pass their check or not.
fn intake(shared: &BridgeState, client: &Arc<Client>) {
    let mut data = client.lock_data();
    let ring = data.submissions.capacity();
    let page_size = client.region.page_size() as u64;
    let mut took = false;
    while data.queued.len() < MAX_QUEUED_BATCHES && data.queued_bytes < ring {
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
        let check =
            |submission: &Submission<'_>| batch::check_pages(submission, page_size, &client.pool, &client.ledger);
        match QueuedBatch::take(record, MAX_KEY_LEN, check) {
            Ok(batch) => {
                data.queued_bytes += batch.footprint();
                data.queued.push_back(batch);
            }
            Err(why) => {
                drop(data);
                return client.drop_for(shared, format!("it sent a malformed batch: {why}"));
            }
        }
    }
    if took {
        data.submissions.release();
    }
}

/// Descriptor bytes one key takes in an engine ring (its record, header and padding).
fn ring_cost(key: &[u8]) -> usize {
    (8 + SUBMISSION_HEADER_LEN + key.len()).next_multiple_of(8)
}

/// Value bytes one key moves (a page's length, or none).
fn value_len(entry: &KeyEntry<'_>) -> usize {
    if entry.page == NO_PAGE { 0 } else { entry.len as usize }
}

impl Relay {
    /// Round-robin: each client in turn sends one slice of its first unsent batch, within its
    /// share, until no one can send more.
    fn admit(&mut self, shared: &BridgeState, clients: &[Arc<Client>]) {
        let order: Vec<usize> = self.admission.next_turn(clients.len()).collect();
        loop {
            let mut sent = false;
            for &i in &order {
                let client = &clients[i];
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
    /// none, or no room (its share, its backlog, the engine's rings). A batch that failed its
    /// check fails slice by slice here, within the same bounds, without reaching the engine.
    fn send_slice(&mut self, shared: &BridgeState, client: &Client) -> bool {
        let mut guard = client.lock_data();
        let data = &mut *guard;
        let held_back: usize = data.queued.iter().map(QueuedBatch::early_outcomes).sum();
        let load = Load {
            inflight_bytes: data.inflight_bytes,
            inflight_keys: data.inflight_keys + held_back,
            outbox_bytes: data.outbox_bytes,
        };
        let Some(room) = self.admission.room(&load) else { return false };
        let Some(batch) = data.queued.iter_mut().find(|b| b.has_unsent()) else { return false };
        if batch.seq == 0 {
            batch.seq = self.next_seq;
            self.next_seq += 1;
        }
        let seq = batch.seq;
        if let Some(err) = batch.failure().cloned() {
            let slice = batch.slice(room.fit(batch.unsent().map(|_| (0, 0))).keys);
            batch.sent(&slice);
            file(data, seq, slice.start, vec![Outcome::Failed(err); slice.keys]);
            return true;
        }
        let fit = room.fit(batch.unsent().map(|entry| (value_len(&entry), ring_cost(entry.key))));
        let slice = batch.slice(fit.keys);
        if slice.keys == 0 {
            // A batch of no keys: its (empty) completion, and nothing for the engine.
            batch.sent(&slice);
            file(data, seq, slice.start, Vec::new());
            return true;
        }
        let submitted = {
            let items: Vec<Item<'_>> = batch
                .entries(&slice)
                .map(|entry| match entry.page {
                    NO_PAGE => Item::key_only(entry.key),
                    page => {
                        let ptr = client.region.page_ptr(page as usize);
                        // SAFETY: the page is one of this client's region's (its check named
                        // the index and generation the pool handed out), `len` is at most a
                        // page (checked too), and the region stays mapped while the client
                        // exists, which is until all its batches have completed. The batch's
                        // claim keeps the page from being freed meanwhile. What the client
                        // itself writes into its own page while it is in flight changes only
                        // that page's bytes.
                        let memory = unsafe { RawBuf::new(ptr, entry.len as usize) };
                        Item { key: entry.key, memory: Memory::Buffer(memory) }
                    }
                })
                .collect();
            shared.engine.submit(Batch::new(batch.op, &items).with_exact_length(batch.exact_length))
        };
        batch.sent(&slice);
        match submitted {
            Ok(id) => {
                let (start, keys, bytes, ring_bytes) = (slice.start, slice.keys, fit.bytes, fit.ring);
                self.slices.insert(id, Slice { client: client.id, seq, start, keys, bytes, ring_bytes });
                self.admission.sent(ring_bytes);
                data.inflight_bytes += bytes;
                data.inflight_keys += keys;
                data.inflight_slices += 1;
            }
            Err(err) => file(data, seq, slice.start, vec![Outcome::Failed(err); slice.keys]),
        }
        true
    }

    /// Finished slices, back into their batches, and on to their clients.
    fn results(&mut self, shared: &BridgeState) {
        let Ok(results) = shared.engine.drain() else { return };
        for BatchResult { id, outcomes, .. } in results {
            let Some(slice) = self.slices.remove(&id) else { continue };
            self.admission.finished(slice.ring_bytes);
            let Some(client) = shared.lock_clients().get(&slice.client).cloned() else { continue };
            let mut data = client.lock_data();
            data.inflight_bytes -= slice.bytes;
            data.inflight_keys -= slice.keys;
            data.inflight_slices -= 1;
            file(&mut data, slice.seq, slice.start, outcomes);
        }
    }
}

/// Files a slice's outcomes into its batch: what is due (in key order) goes into the client's
/// outbox as completion records; a batch with every outcome out is done, its claim released at
/// the next flush.
fn file(data: &mut ClientData, seq: u64, start: usize, outcomes: Vec<Outcome>) {
    let Some(at) = data.queued.iter().position(|b| b.seq == seq) else { return };
    let max_record = data.completions.capacity() / 4;
    let batch = &mut data.queued[at];
    let (from, due) = batch.file(start, outcomes);
    if !due.is_empty() || batch.total() == 0 {
        for record in wire::encode_completion_run(batch.id, batch.op, from, batch.total(), &due, max_record) {
            data.outbox_bytes += record.len();
            data.outbox.push_back(record);
        }
    }
    let batch = &mut data.queued[at];
    if batch.is_complete() {
        if let Some(claim) = batch.take_claim() {
            data.release.push(claim);
        }
        let batch = data.queued.remove(at).expect("found above");
        data.queued_bytes -= batch.footprint();
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

/// Clients that are gone: once the control thread has let their socket go (no request of
/// theirs can take a page any more) and nothing of theirs is in the engine, their pages go
/// back to the budget, their slot is free, and they are forgotten.
fn retire_gone(shared: &BridgeState, clients: &[Arc<Client>]) {
    let retirable = |c: &&Arc<Client>| c.gone.load(Ordering::Acquire) && c.control_closed.load(Ordering::Acquire);
    for client in clients.iter().filter(retirable) {
        {
            let mut data = client.lock_data();
            if data.inflight_slices > 0 {
                continue;
            }
            for mut batch in data.queued.drain(..) {
                if let Some(claim) = batch.take_claim() {
                    client.ledger.release(claim);
                }
            }
            data.queued_bytes = 0;
            data.outbox.clear();
            data.outbox_bytes = 0;
            for claim in data.release.drain(..) {
                client.ledger.release(claim);
            }
        }
        let handles: Vec<PageHandle> =
            client.held.lock().unwrap_or_else(|p| p.into_inner()).values().copied().collect();
        let returned = handles.len();
        let _ = state::release_pages(shared, client, &handles);
        // All of it, pages it wrote without holding them included: the memory is freed even
        // if the process keeps its mapping.
        state::punch(&client.region, 0, client.region.size() as u64);
        shared.lock_clients().remove(&client.id);
        log::info!(target: "lmcache_resp::bridge",
            "bridge: client {} (pid {}, uid {}) detached; {returned} pages back",
            client.id, client.pid, client.uid
        );
    }
}
