//! Always-on counters: per endpoint (the single server, each shard, each cluster node), per
//! I/O worker, in cache-line padded cells that only their own worker writes (relaxed loads and
//! stores, no read-modify-write, no contention); everything is summed only when the stats are
//! read (`EngineMetrics::snapshot`).
//!
//! What is counted where:
//! - per batch, by the front-end of the engine: batches by operation and the batch latency
//!   (submission to its last key filed), `EngineMetrics::on_submit` / `on_batch_done`;
//! - per key, by the worker that ran it, under the endpoint it was sent to: keys by operation,
//!   payload bytes, hits, misses, errors by kind, in-flight keys, the key latency (submission
//!   of its batch to its completion posted), redirects and retries (`WorkerMetrics`);
//! - per connection, through `conn::hook` (the connection's core calls it on the worker's thread):
//!   resends after a broken connection and reconnects.
//!
//! A key's endpoint travels in its tag while it is on a worker (bits 48..63, see
//! `tag_node`): the worker routes it, and whatever connection completes it, the completion
//! names it. Batch slots stay below 2^16 for that (`MAX_BATCH_SLOTS`).
//!
//! With the `no-metrics` feature every hook is empty and stats read as zeros: the build to
//! measure the counters' cost against.

mod snapshot;

pub(crate) use snapshot::bucket_of;
pub use snapshot::{BUCKETS, EndpointSnapshot, Histogram, KINDS, OP_NAMES, OPS, Snapshot, bucket_bound_seconds};

use crate::conn::{Handoff, Outcome, hook};
use crate::net::Endpoint;
use crate::op::Op;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Whether this build counts (false with the `no-metrics` feature).
pub const ENABLED: bool = hook::ENABLED;

/// The most batch slots an engine may have: a key's tag carries its endpoint above bit 48.
pub(crate) const MAX_BATCH_SLOTS: usize = 1 << 16;
const NODE_SHIFT: u32 = 48;
const NODE_MASK: u64 = 0x7fff << NODE_SHIFT;

/// The tag without the endpoint the worker put in it.
#[inline]
pub(crate) fn strip_tag(tag: u64) -> u64 {
    tag & !NODE_MASK
}

/// The worker's node index + 1 carried in `tag` (0: never routed).
#[inline]
pub(crate) fn tag_node(tag: u64) -> usize {
    ((tag & NODE_MASK) >> NODE_SHIFT) as usize
}

fn op_index(op: Op) -> Option<usize> {
    match op {
        Op::Get => Some(0),
        Op::Set => Some(1),
        Op::Exists => Some(2),
        Op::Del => Some(3),
        Op::Ping => None,
    }
}

fn op_of_code(code: u64) -> Option<Op> {
    OPS.iter().copied().find(|op| *op as u64 == code)
}

/// Adds `n` to a counter only one thread writes: a relaxed load and store, no locked
/// instruction.
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// A latency histogram written by one thread.
#[derive(Default)]
pub(crate) struct HistogramCell {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl HistogramCell {
    #[inline]
    fn observe(&self, ns: u64) {
        bump(&self.counts[bucket_of(ns)], 1);
        bump(&self.sum_ns, ns);
    }

    /// For histograms several threads write (the batch latency).
    fn observe_shared(&self, ns: u64) {
        self.counts[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn add_to(&self, out: &mut Histogram) {
        for (total, count) in out.counts.iter_mut().zip(&self.counts) {
            *total += count.load(Ordering::Relaxed);
        }
        out.sum_ns += self.sum_ns.load(Ordering::Relaxed);
    }
}

/// One endpoint's counters on one worker (or one blocking client), on lines of its own.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct Cell {
    keys: [AtomicU64; 4],
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    errors: [AtomicU64; KINDS],
    retries: AtomicU64,
    reconnects: AtomicU64,
    moved: AtomicU64,
    ask: AtomicU64,
    /// Keys handed to this endpoint's connections, and keys that left them (completed, or
    /// sent on to another endpoint): the difference is in flight.
    started: AtomicU64,
    finished: AtomicU64,
    key_latency: HistogramCell,
}

impl Cell {
    fn add_to(&self, out: &mut EndpointSnapshot) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        for (total, count) in out.keys.iter_mut().zip(&self.keys) {
            *total += get(count);
        }
        for (total, count) in out.errors.iter_mut().zip(&self.errors) {
            *total += get(count);
        }
        out.bytes_sent += get(&self.bytes_sent);
        out.bytes_received += get(&self.bytes_received);
        out.hits += get(&self.hits);
        out.misses += get(&self.misses);
        out.retries += get(&self.retries);
        out.reconnects += get(&self.reconnects);
        out.moved += get(&self.moved);
        out.ask += get(&self.ask);
        // Read `finished` first: a key counted in it was counted in `started` before.
        let finished = get(&self.finished);
        out.in_flight += get(&self.started).saturating_sub(finished);
        self.key_latency.add_to(&mut out.key_latency);
    }

    /// One key's outcome; `latency_ns` from its batch's submission.
    #[inline]
    fn complete(&self, op: Op, outcome: &Outcome, latency_ns: Option<u64>) {
        let Some(index) = op_index(op) else { return };
        bump(&self.keys[index], 1);
        match outcome {
            Outcome::Hit(n) => {
                bump(&self.hits, 1);
                bump(&self.bytes_received, *n as u64);
            }
            Outcome::Miss => bump(&self.misses, 1),
            Outcome::Failed(err) => bump(&self.errors[(err.kind() as usize).min(KINDS - 1)], 1),
            _ => {}
        }
        if let Some(ns) = latency_ns {
            self.key_latency.observe(ns);
        }
    }

    /// What the connection's hooks (`conn::hook`) gathered while it was driven.
    #[inline]
    fn add_hooks(&self, counts: hook::Counts) {
        bump(&self.retries, u64::from(counts.retries));
        bump(&self.reconnects, u64::from(counts.reconnects));
    }
}

/// Batch-level counters, written by whichever thread files a batch's last key.
#[derive(Default)]
#[repr(align(128))]
struct FrontCell {
    batches: [AtomicU64; 4],
    batch_latency: HistogramCell,
}

/// Every counter of one engine (or one blocking client): what `EngineMetrics::snapshot`
/// sums.
pub(crate) struct EngineMetrics {
    /// The front's own name for where it sends (a server, or `shards a,b` / `cluster a,b`).
    endpoint: String,
    front: FrontCell,
    /// Per batch slot: its submission time in clock nanoseconds << 3 | its op's code.
    slots: Box<[AtomicU64]>,
    /// Every cell by endpoint, in the order endpoints were first seen.
    endpoints: Mutex<Endpoints>,
}

/// Cells by endpoint, in the order endpoints were first seen, with an index by name: a
/// cluster map may name thousands of nodes.
#[derive(Default)]
struct Endpoints {
    cells: Vec<(String, Vec<Arc<Cell>>)>,
    by_name: HashMap<String, usize>,
}

impl Endpoints {
    fn cells_of(&mut self, endpoint: &str) -> &mut Vec<Arc<Cell>> {
        let index = match self.by_name.get(endpoint) {
            Some(&index) => index,
            None => {
                self.cells.push((endpoint.to_owned(), Vec::new()));
                self.by_name.insert(endpoint.to_owned(), self.cells.len() - 1);
                self.cells.len() - 1
            }
        };
        &mut self.cells[index].1
    }
}

/// The name keys that never reached an endpoint are counted under (a routing failure).
pub(crate) const UNROUTED: &str = "unrouted";

impl EngineMetrics {
    /// The counters of an engine with `batch_slots` slots sending to `endpoint` (its display
    /// string), whose endpoints are `servers` (listed at once, even before any key; others, such
    /// as cluster nodes met later, are listed from their first key).
    pub fn new(endpoint: &str, servers: &[Endpoint], batch_slots: usize) -> Arc<EngineMetrics> {
        let metrics = EngineMetrics {
            endpoint: endpoint.to_owned(),
            front: FrontCell::default(),
            slots: (0..if ENABLED { batch_slots } else { 0 }).map(|_| AtomicU64::new(0)).collect(),
            endpoints: Mutex::new(Endpoints::default()),
        };
        let mut endpoints = metrics.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        for server in servers {
            endpoints.cells_of(&server.to_string());
        }
        drop(endpoints);
        Arc::new(metrics)
    }

    /// A cell of this engine's for `endpoint` (registered for snapshots).
    pub fn cell(&self, endpoint: &str) -> Arc<Cell> {
        let cell = Arc::new(Cell::default());
        self.endpoints.lock().unwrap_or_else(|p| p.into_inner()).cells_of(endpoint).push(cell.clone());
        cell
    }

    /// A batch of `op` was opened in `slot` now.
    #[inline]
    pub fn on_submit(&self, slot: u32, op: Op, now_ns: u64) {
        if let Some(meta) = self.slots.get(slot as usize) {
            meta.store(now_ns << 3 | op as u64, Ordering::Relaxed);
        }
    }

    /// The batch in `slot` completed (its last key was filed).
    pub fn on_batch_done(&self, slot: u32) {
        let Some((submitted, op)) = self.slot(slot) else { return };
        let Some(index) = op_index(op) else { return };
        self.front.batches[index].fetch_add(1, Ordering::Relaxed);
        self.front.batch_latency.observe_shared(crate::clock::now_ns().saturating_sub(submitted));
    }

    /// When the batch in `slot` was submitted, and its op.
    #[inline]
    fn slot(&self, slot: u32) -> Option<(u64, Op)> {
        let meta = self.slots.get(slot as usize)?.load(Ordering::Relaxed);
        Some((meta >> 3, op_of_code(meta & 7).unwrap_or(Op::Ping)))
    }

    /// Every counter, summed over the workers.
    pub fn snapshot(&self) -> Snapshot {
        let mut out = Snapshot { endpoint: self.endpoint.clone(), ..Snapshot::default() };
        for (total, count) in out.batches.iter_mut().zip(&self.front.batches) {
            *total += count.load(Ordering::Relaxed);
        }
        self.front.batch_latency.add_to(&mut out.batch_latency);
        let endpoints = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        for (name, cells) in &endpoints.cells {
            let mut snapshot = EndpointSnapshot { endpoint: name.clone(), ..EndpointSnapshot::default() };
            cells.iter().for_each(|cell| cell.add_to(&mut snapshot));
            if name == UNROUTED && snapshot.is_empty() {
                continue;
            }
            out.endpoints.push(snapshot);
        }
        out
    }
}

/// One worker's view of the engine's counters: its cells, by the worker's node index.
pub(crate) struct WorkerMetrics {
    engine: Arc<EngineMetrics>,
    /// Per node index (as the worker's `Nodes`): the endpoint last seen there and its cell.
    by_node: Vec<Option<(Endpoint, Arc<Cell>)>>,
    /// This worker's cells by endpoint name (a node forgotten and met again keeps its cell).
    by_name: HashMap<String, Arc<Cell>>,
    unrouted: Option<Arc<Cell>>,
    /// Per connection index: whether it connected before (its next connect is a reconnect).
    connected: Vec<bool>,
}

impl WorkerMetrics {
    /// A worker's cells (made as endpoints are first used).
    pub fn new(engine: Arc<EngineMetrics>) -> WorkerMetrics {
        WorkerMetrics { engine, by_node: Vec::new(), by_name: HashMap::new(), unrouted: None, connected: Vec::new() }
    }

    fn cell_for(&mut self, node: usize, endpoint: &Endpoint) -> &Arc<Cell> {
        if self.by_node.len() <= node {
            self.by_node.resize_with(node + 1, || None);
        }
        let fresh = !matches!(&self.by_node[node], Some((seen, _)) if seen == endpoint);
        if fresh {
            let name = endpoint.to_string();
            let engine = &self.engine;
            let cell = self.by_name.entry(name).or_insert_with_key(|name| engine.cell(name)).clone();
            self.by_node[node] = Some((endpoint.clone(), cell));
        }
        &self.by_node[node].as_ref().expect("just set").1
    }

    fn cell_of_tag(&mut self, tag: u64) -> &Arc<Cell> {
        match tag_node(tag).checked_sub(1).and_then(|node| self.by_node.get(node)) {
            Some(Some((_, cell))) => cell,
            _ => {
                let engine = &self.engine;
                self.unrouted.get_or_insert_with(|| engine.cell(UNROUTED))
            }
        }
    }

    /// A key goes to node `node` (reached at `endpoint`): counts it there (and off the node it
    /// was on before, after a redirect) and writes the node into its tag.
    #[inline]
    pub fn on_send(&mut self, node: usize, endpoint: &Endpoint, request: &mut crate::conn::Request) {
        if !ENABLED || node >= 0x7fff {
            return;
        }
        let Some(op) = request.op().filter(|op| *op != Op::Ping) else { return };
        let before = tag_node(request.tag);
        if before == node + 1 {
            return;
        }
        if let Some(Some((_, old))) = before.checked_sub(1).and_then(|n| self.by_node.get(n)) {
            bump(&old.finished, 1);
        }
        let cell = self.cell_for(node, endpoint);
        bump(&cell.started, 1);
        if op == Op::Set {
            bump(&cell.bytes_sent, request.data.map_or(0, |d| d.len() as u64));
        }
        request.tag = strip_tag(request.tag) | ((node as u64 + 1) << NODE_SHIFT);
    }

    /// A key's completion was posted (`tag` as the worker kept it); returns the tag to post.
    #[inline]
    pub fn on_complete(&mut self, tag: u64, outcome: &Outcome, now_ns: u64) -> u64 {
        let stripped = strip_tag(tag);
        if !ENABLED {
            return stripped;
        }
        let Some((submitted, op)) = self.engine.slot((stripped >> 32) as u32) else { return stripped };
        if op == Op::Ping {
            return stripped;
        }
        let routed = tag_node(tag) != 0;
        let cell = self.cell_of_tag(tag);
        if routed {
            bump(&cell.finished, 1);
        }
        cell.complete(op, outcome, Some(now_ns.saturating_sub(submitted)));
        stripped
    }

    /// A cluster node, reached at `endpoint`, handed a request back: a redirect, or a failure
    /// worth another try. A key's request counts under the node its tag names; a ranged
    /// read's own requests (whose tags name no node) under `endpoint`.
    #[inline]
    pub fn on_handoff(&mut self, tag: u64, endpoint: &Endpoint, why: &Handoff) {
        if !ENABLED {
            return;
        }
        let cell = match tag_node(tag) {
            0 => self.cell_named(endpoint),
            _ => self.cell_of_tag(tag),
        };
        match why {
            Handoff::Redirect(r) if r.kind == crate::cluster::RedirectKind::Ask => bump(&cell.ask, 1),
            Handoff::Redirect(_) => bump(&cell.moved, 1),
            Handoff::Retry(_) => bump(&cell.retries, 1),
        }
    }

    /// After driving connection `conn` (to `endpoint`): files what its hooks counted.
    #[inline]
    pub fn after_drive(&mut self, conn: usize, endpoint: &Endpoint) {
        if !ENABLED {
            return;
        }
        let mut counts = hook::take();
        if counts.is_empty() {
            return;
        }
        if self.connected.len() <= conn {
            self.connected.resize(conn + 1, false);
        }
        if counts.connects > 0 {
            let first = !std::mem::replace(&mut self.connected[conn], true);
            counts.reconnects = counts.connects - u32::from(first);
        }
        self.cell_named(endpoint).add_hooks(counts);
    }

    fn cell_named(&mut self, endpoint: &Endpoint) -> &Arc<Cell> {
        let engine = &self.engine;
        self.by_name.entry(endpoint.to_string()).or_insert_with_key(|name| engine.cell(name))
    }
}

/// The counters of one blocking client (`RedisClient`): one endpoint, one connection.
pub(crate) struct ClientMetrics {
    engine: Arc<EngineMetrics>,
    cell: Arc<Cell>,
    connected: std::sync::atomic::AtomicBool,
}

impl ClientMetrics {
    /// Counters for a client of `endpoint`.
    pub fn new(endpoint: &Endpoint) -> ClientMetrics {
        let engine = EngineMetrics::new(&endpoint.to_string(), std::slice::from_ref(endpoint), 0);
        let cell = engine.cell(&endpoint.to_string());
        // The client connected once as it was made.
        hook::take();
        ClientMetrics { engine, cell, connected: std::sync::atomic::AtomicBool::new(true) }
    }

    /// Call before an operation: forgets what other connections on this thread counted.
    pub fn begin(&self) -> u64 {
        hook::take();
        crate::clock::now_ns()
    }

    /// One operation (a one-key batch) of `op` began at `began` (from [`ClientMetrics::begin`])
    /// and ended in `outcome`; `sent` payload bytes for SET.
    pub fn record(&self, op: Op, began: u64, sent: u64, outcome: &Outcome) {
        if !ENABLED {
            return;
        }
        let ns = crate::clock::now_ns().saturating_sub(began);
        let mut counts = hook::take();
        if counts.connects > 0 {
            let first = !self.connected.swap(true, Ordering::Relaxed);
            counts.reconnects = counts.connects - u32::from(first);
        }
        self.cell.add_hooks(counts);
        if outcome.is_success() {
            bump(&self.cell.bytes_sent, sent);
        }
        self.cell.complete(op, outcome, Some(ns));
        if let Some(index) = op_index(op) {
            self.engine.front.batches[index].fetch_add(1, Ordering::Relaxed);
            self.engine.front.batch_latency.observe_shared(ns);
        }
    }

    /// Every counter.
    pub fn snapshot(&self) -> Snapshot {
        self.engine.snapshot()
    }
}

#[cfg(test)]
mod tests;
