//! One I/O worker thread: takes descriptors from its submission ring, spreads them over its
//! connections, drives the sockets, and posts completions to its completion ring.
//!
//! The loop's steps are methods that take the time and touch no socket of their own (taking
//! submissions while a connection has room, sealing, settling ranged reads, posting and counting
//! off completions); how the worker waits and how its connections move bytes is the I/O loop's
//! (`io_loop.rs`: the poll loop or the io_uring loop, chosen once when the worker starts), and
//! only `Conn`'s drivers do I/O. What becomes of a request a cluster node hands back is decided
//! in `reroute.rs`. `tests.rs` drives the
//! steps in memory, with real rings and connections that are never driven: no server.

mod io_loop;
mod reroute;
#[cfg(test)]
mod tests;

use super::buffers::Access;
use super::nodes::Nodes;
use super::records::{Descriptor, FLAG_EXACT_LENGTH, Region, Tag, encode_completion};
use super::route::Route;
use super::shared::Shared;
use crate::clock;
use crate::cluster::{RedirectKind, read_pick};
use crate::conn::{Completion, Conn, Handoff, Outcome, PipelineLimits, Request};
use crate::error::{Error, ErrorKind};
use crate::memory::RawBuf;
use crate::net::EventFd;
use crate::op::Op;
use crate::ranged::{self, RangedReads};
use crate::ring::{Consumer, Producer, PushError};
pub use io_loop::Backend;
use io_loop::IoLoop;
use reroute::{Parked, RETRY_MAX, Reroute, Unparked};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Error messages cross the completion ring; longer ones are cut.
const MAX_MESSAGE: usize = 2048;
/// While the completion ring is full, look again this often.
const FULL_RING_RETRY: Duration = Duration::from_millis(1);

pub struct Worker {
    shared: Arc<Shared>,
    submissions: Consumer,
    completions: Producer,
    doorbell: Arc<EventFd>,
    route: Arc<Route>,
    nodes: Nodes,
    /// Which loop this worker runs; made on its own thread when it starts.
    backend: Backend,
    /// Cluster: requests waiting to be sent again (their node failed, or the cluster is
    /// re-forming).
    parked: Parked,
    /// Requests were handed to connections after they were driven: drive them again before
    /// sleeping, or they would wait for readiness that never comes.
    rerouted: bool,
    /// Completions not yet in the completion ring (it was full).
    finished: Vec<Completion>,
    /// GETs of large values, read in pieces over this worker's connections.
    ranged: RangedReads,
    record: Vec<u8>,
    /// This worker's counters (crate::metrics).
    metrics: crate::metrics::WorkerMetrics,
}

/// Runs a worker; whatever stops it other than a normal shutdown (an error or a panic) fails
/// the engine, so that callers get an error at once instead of waiting for their deadlines.
pub fn run_guarded(index: usize, worker: Worker) {
    let shared = worker.shared.clone();
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let io = IoLoop::on_this_thread(worker.backend, index);
        worker.run(io, index)
    }));
    let failure = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(err)) => err,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".into());
            Error::new(ErrorKind::EngineFailed, format!("I/O worker {index} died: {what}"))
        }
    };
    log::error!(target: "lmcache_resp::engine", "the I/O engine failed: {failure}");
    shared.fail(failure);
}

impl Worker {
    pub fn new(
        shared: Arc<Shared>,
        submissions: Consumer,
        completions: Producer,
        doorbell: Arc<EventFd>,
        route: Arc<Route>,
        nodes: Nodes,
        ranged: RangedReads,
    ) -> Worker {
        Worker {
            shared: shared.clone(),
            submissions,
            completions,
            doorbell,
            route,
            nodes,
            backend: Backend::Poll,
            parked: Parked::default(),
            rerouted: false,
            finished: Vec::new(),
            metrics: crate::metrics::WorkerMetrics::new(shared.metrics.clone()),
            ranged,
            record: Vec::new(),
        }
    }

    /// Runs the loop `backend` names (the poll loop by default).
    pub fn with_backend(mut self, backend: Backend) -> Worker {
        self.backend = backend;
        self
    }

    fn run(mut self, mut io: IoLoop, index: usize) -> Result<(), Error> {
        loop {
            if let Some(err) = self.shared.failure().cloned() {
                self.abort(&err);
                return Ok(());
            }
            let now = Instant::now();
            let sealed = self.shared.sealed.load(Ordering::Acquire);
            if sealed {
                self.seal();
            }
            if self.finished.is_empty() {
                self.take_submissions(now, sealed)?;
            }
            self.unpark(now);
            self.nodes.poll_lookups(now, &mut self.finished);
            self.rerouted = false;
            // What failed before the connections are driven (lookups, unrouted submissions)
            // goes to its ranged read first; then each connection's own completions.
            self.settle_ranged(now, 0);
            let mut c = 0;
            while c < self.nodes.conns.len() {
                let settled = self.finished.len();
                let conn = &mut self.nodes.conns[c];
                io.drive(c, conn, now, &mut self.finished);
                conn.expire(now, &mut self.finished);
                self.metrics.after_drive(c, conn.endpoint());
                let handoffs = conn.take_handoffs();
                self.rerouted |= !handoffs.is_empty();
                for (request, why) in &handoffs {
                    self.metrics.on_handoff(request.tag, conn.endpoint(), why);
                }
                for (request, why) in handoffs {
                    self.reroute(now, request, why);
                }
                self.settle_ranged(now, settled);
                c += 1;
            }
            self.trim_nodes();
            self.post_completions()?;
            if sealed && self.is_idle() {
                return Ok(());
            }
            let wake = self.wake_at();
            io.wait(&self.doorbell, &self.nodes.conns, wake);
            io.fall_back_if_ring_died(index, &mut self.nodes.conns, &mut self.finished, &self.shared.ring_failure);
        }
    }

    /// The engine is closing: what no connection has sent yet, and what waits to be routed
    /// again, fails as closed (what is on the wire completes, or fails at its deadline).
    fn seal(&mut self) {
        let err = Error::closed("the store");
        for conn in &mut self.nodes.conns {
            conn.fail_unsent(&err, &mut self.finished);
        }
        self.parked.fail_all(&err, &mut self.finished);
    }

    /// Nothing left to do: every completion posted, nothing parked, read in pieces, on a
    /// connection or in the submission ring. A sealed worker exits then.
    fn is_idle(&mut self) -> bool {
        self.finished.is_empty()
            && self.parked.is_empty()
            && self.ranged.is_empty()
            && self.nodes.conns.iter().all(Conn::is_empty)
            && self.submissions.is_empty()
    }

    /// Cluster: forgets nodes nothing needs once the table has grown past its bound (see
    /// [`Nodes::trim`]); a node of the map keys are routed to (a primary; with replica reads, a
    /// replica too), or a node a ranged read is bound to, stays.
    fn trim_nodes(&mut self) {
        if !self.nodes.wants_trim() {
            return;
        }
        let Route::Cluster(view) = &*self.route else { return };
        // With replica reads, a map's replicas are routed to like its primaries: kept.
        let routed = read_pick::routed_nodes(&view.map(), self.nodes.reads_replicas());
        let ranged = &self.ranged;
        self.nodes.trim(&routed, |node| ranged.uses_node(node));
    }

    /// Sends `request` to server `node`, behind an `ASKING` if it follows an `-ASK`.
    fn send(&mut self, node: usize, mut request: Request, asking: bool) {
        let conn = if request.op() == Some(Op::Ping) {
            self.nodes.conn_to_check(node)
        } else {
            self.nodes.conn_for(node, request.pipeline_cost())
        };
        self.metrics.on_send(node, self.nodes.conns[conn].endpoint(), &mut request);
        let conn = &mut self.nodes.conns[conn];
        if asking { conn.push_asking(request, &mut self.finished) } else { conn.push(request, &mut self.finished) }
    }

    /// Hands the completions of ranged reads' own requests among `finished[from..]` to their
    /// reads, which may queue more requests (then the connections need driving again before
    /// the worker sleeps). Only what was added since `from` is looked at: this runs after
    /// every connection is driven, and a worker may hold thousands of connections (a large
    /// cluster map) while thousands of completions wait to be posted.
    fn settle_ranged(&mut self, now: Instant, from: usize) {
        let mut fresh = self.finished.split_off(from.min(self.finished.len()));
        loop {
            let mut conns = WorkerConns { nodes: &mut self.nodes, route: &self.route, failed: Vec::new() };
            self.rerouted |= self.ranged.route_completions(&mut fresh, &mut conns, now);
            let failed = conns.failed;
            if failed.is_empty() {
                break;
            }
            fresh.extend(failed);
        }
        self.finished.append(&mut fresh);
    }

    /// A GET of a large value (of `key`, on server `node`) becomes a ranged read.
    fn start_ranged(&mut self, node: usize, mut request: Request, key: &[u8]) {
        self.metrics.on_send(node, self.nodes.conns[self.nodes.bulk_conns_of(node)[0]].endpoint(), &mut request);
        let mut conns = WorkerConns { nodes: &mut self.nodes, route: &self.route, failed: Vec::new() };
        self.ranged.start(request, key, node, &mut conns);
        self.finished.extend(conns.failed);
        self.rerouted = true;
    }

    /// A request a cluster node handed back: follow the redirect, or wait a moment for the
    /// cluster (a failover, a refresh of the map) and route it again. A ranged read's own
    /// requests go back to the read, which starts over where the key lives now.
    fn reroute(&mut self, now: Instant, request: Request, why: Handoff) {
        let Route::Cluster(view) = &*self.route else { unreachable!("only cluster connections hand requests back") };
        let view = view.clone();
        if request.tag & ranged::INTERNAL_TAG != 0 {
            let mut why = why;
            let asked = match &why {
                Handoff::Redirect(redirect) if redirect.kind == RedirectKind::Ask => {
                    match self.nodes.node_at(&redirect.node) {
                        Ok(node) => Some(node),
                        // The asked node's host name cannot be looked up: the part failed.
                        Err(err) => {
                            why = Handoff::Retry(err);
                            None
                        }
                    }
                }
                Handoff::Redirect(redirect) => {
                    view.moved(redirect.slot, &redirect.node);
                    None
                }
                Handoff::Retry(_) => {
                    view.request_refresh();
                    None
                }
            };
            let mut conns = WorkerConns { nodes: &mut self.nodes, route: &self.route, failed: Vec::new() };
            self.ranged.on_handoff(request, why, asked, &mut conns, now, &mut self.finished);
            self.finished.extend(conns.failed);
            return;
        }
        match reroute::reroute(&request, why, now) {
            Reroute::GiveUp(outcome) => self.finished.push(request.completion(outcome)),
            Reroute::Follow { node, asking, moved } => {
                if let Some(slot) = moved {
                    view.moved(slot, &node);
                }
                match self.nodes.node_at(&node) {
                    Ok(node) => self.send(node, request.rerouted(), asking),
                    Err(err) => self.finished.push(request.completion(Outcome::Failed(err))),
                }
            }
            Reroute::Park(err) => {
                view.request_refresh();
                self.parked.park(now, request, err);
            }
        }
    }

    /// Routes the parked requests whose wait is over again, by the map as it is now.
    fn unpark(&mut self, now: Instant) {
        let Route::Cluster(view) = &*self.route else { return };
        let view = view.clone();
        for due in self.parked.take_due(now) {
            match due {
                Unparked::Expired(completion) => self.finished.push(completion),
                Unparked::Route(request) => match self.nodes.route_slot(&view, request.slot) {
                    Ok(node) => self.send(node, request, false),
                    // Sentinel: no primary is known; waiting would not tell the caller why.
                    Err(route_err) if view.unavailable().is_some() => {
                        self.finished.push(request.completion(Outcome::Failed(route_err)));
                    }
                    Err(route_err) => self.parked.park_until(now + RETRY_MAX, request, route_err),
                },
            }
        }
    }

    /// The engine failed: drop every connection (nothing touches caller memory afterwards),
    /// fail what was taken or is still queued, and post what fits. The front-end fails
    /// whatever does not fit once this thread has exited.
    fn abort(&mut self, err: &Error) {
        for conn in &mut self.nodes.conns {
            conn.abort(err, &mut self.finished);
        }
        self.parked.fail_all(err, &mut self.finished);
        while let Ok(true) = self.submissions.try_pop_into(&mut self.record) {
            if let Ok(descriptor) = Descriptor::decode(&self.record) {
                let tag = descriptor.tag.pack();
                self.finished.push(Completion { tag, outcome: Outcome::Failed(err.clone()) });
            }
        }
        self.submissions.release();
        let _ = self.post_completions();
    }

    /// Moves descriptors from the ring onto connections while they have room: the ring is
    /// the queue, and a full ring is the submitters' backpressure.
    fn take_submissions(&mut self, now: Instant, sealed: bool) -> Result<(), Error> {
        let now_ns = clock::now_ns();
        let limits = self.shared.pipeline;
        let mut took = false;
        while self.nodes.conns.iter().any(|c| has_room(c, limits)) {
            match self.submissions.try_pop_into(&mut self.record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => return Err(Error::new(ErrorKind::EngineFailed, format!("submission ring corrupt: {err}"))),
            }
            took = true;
            let descriptor = Descriptor::decode(&self.record)
                .map_err(|err| Error::new(ErrorKind::EngineFailed, format!("malformed submission record: {err}")))?;
            let tag = descriptor.tag.pack();
            if sealed {
                self.finished.push(Completion { tag, outcome: Outcome::Failed(Error::closed("the store")) });
                continue;
            }
            let routed = if descriptor.op == Op::Ping {
                // PINGs open and check every connection: spread over the servers.
                Ok((self.nodes.ping_target(descriptor.tag.index as usize), 0))
            } else if matches!(descriptor.op, Op::Get | Op::Exists) {
                // Reads may go to a replica (read_from); writes and deletes, to the primary.
                self.nodes.route_read(&self.route, descriptor.key)
            } else {
                self.nodes.route(&self.route, descriptor.key)
            };
            let resolved = routed.and_then(|(node, slot)| resolve(&self.shared, &descriptor).map(|d| (node, slot, d)));
            let (node, slot, data) = match resolved {
                Ok(resolved) => resolved,
                Err(err) => {
                    self.finished.push(Completion { tag, outcome: Outcome::Failed(err) });
                    continue;
                }
            };
            let deadline = clock::instant_at(descriptor.deadline_ns, now_ns, now);
            let expiry_ms = self.shared.set_expiry_ms;
            let mut request = Request::expiring(descriptor.op, descriptor.key, data, expiry_ms, tag, deadline)
                .with_exact_length(descriptor.flags & FLAG_EXACT_LENGTH != 0);
            request.slot = slot;
            if request.op() == Some(Op::Get) && RangedReads::takes(&request, self.nodes.read_shape(node)) {
                let key = descriptor.key.to_vec();
                self.start_ranged(node, request, &key);
            } else {
                self.send(node, request, false);
            }
        }
        if took {
            self.submissions.release();
        }
        Ok(())
    }

    /// Posts finished operations, then counts them off their batches. Only after a batch's
    /// last completion is in the ring is its submitter woken: once per burst on the eventfd,
    /// or on the batch counter's futex for a thread waiting for that batch.
    fn post_completions(&mut self) -> Result<(), Error> {
        if self.finished.is_empty() {
            return Ok(());
        }
        let mut posted = 0;
        for completion in &self.finished {
            let (header, message) = encode_completion(crate::metrics::strip_tag(completion.tag), &completion.outcome);
            let message = truncate(message.unwrap_or(""), MAX_MESSAGE);
            match self.completions.try_push(&[&header, message.as_bytes()]) {
                Ok(()) => posted += 1,
                Err(PushError::Full) => break,
                Err(PushError::TooLarge { .. }) => unreachable!("completion records are small"),
                Err(PushError::Corrupt(what)) => {
                    return Err(Error::new(ErrorKind::EngineFailed, format!("completion ring corrupt: {what}")));
                }
            }
        }
        if posted == 0 {
            return Ok(());
        }
        self.completions.publish();
        let mut per_slot: Vec<(u32, u32)> = Vec::new();
        let now_ns = clock::now_ns();
        for completion in self.finished.drain(..posted) {
            let slot = Tag::unpack(self.metrics.on_complete(completion.tag, &completion.outcome, now_ns)).slot;
            match per_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, count)) => *count += 1,
                None => per_slot.push((slot, 1)),
            }
        }
        let mut signal_drainers = false;
        for (slot, count) in per_slot {
            signal_drainers |= self.shared.count_off(slot, count);
        }
        if signal_drainers {
            self.shared.completion_event.signal();
        }
        Ok(())
    }

    fn has_room(&self) -> bool {
        self.nodes.conns.iter().any(|c| has_room(c, self.shared.pipeline))
    }

    /// When the worker must look again whatever its connections wait for: a parked request's
    /// turn, a full completion ring's retry, or descriptors it can take now.
    fn wake_at(&mut self) -> Option<Instant> {
        let mut wake: Option<Instant> = self.parked.next_wake();
        if !self.finished.is_empty() {
            wake = Some(Instant::now() + FULL_RING_RETRY);
        } else if self.rerouted || (self.has_room() && !self.submissions.is_empty()) {
            // Descriptors are waiting and can be taken now: only collect readiness.
            wake = Some(Instant::now());
        }
        wake
    }
}

/// The worker's connections as a ranged read sees them.
struct WorkerConns<'a> {
    nodes: &'a mut Nodes,
    route: &'a Route,
    /// Requests that failed as they were queued (their connection failed for good).
    failed: Vec<Completion>,
}

impl ranged::Conns for WorkerConns<'_> {
    fn conns_of(&self, node: usize) -> &[usize] {
        // Pieces of large values: never on the express connection.
        self.nodes.bulk_conns_of(node)
    }

    fn load(&self, conn: usize) -> usize {
        self.nodes.conns[conn].outstanding_cost()
    }

    fn push(&mut self, conn: usize, request: Request, asking: bool) {
        let conn = &mut self.nodes.conns[conn];
        if asking { conn.push_asking(request, &mut self.failed) } else { conn.push(request, &mut self.failed) }
    }

    fn route(&mut self, key: &[u8]) -> Result<usize, Error> {
        self.nodes.route(self.route, key).map(|(node, _)| node)
    }

    fn read_shape(&self, node: usize) -> ranged::ReadShape {
        self.nodes.read_shape(node)
    }
}

/// A connection takes more descriptors while its queue holds less than two pipelines' worth:
/// enough to keep the wire busy, little enough that the ring stays the queue.
fn has_room(conn: &Conn, limits: PipelineLimits) -> bool {
    conn.outstanding_cost() < 2 * limits.max_inflight_bytes
        && conn.outstanding_requests() < 2 * limits.max_inflight_requests
}

/// The memory a descriptor names: a range inside one page of the arena, a range inside a
/// registered region, or a buffer the submitter registered for this key with the access the
/// operation needs.
fn resolve(shared: &Shared, descriptor: &Descriptor<'_>) -> Result<Option<RawBuf>, Error> {
    let access = match descriptor.op {
        Op::Get => Access::Write,
        Op::Set => Access::Read,
        _ if descriptor.region == Region::None => return Ok(None),
        op => return Err(Error::invalid(format!("{} takes no memory", op.name()))),
    };
    match descriptor.region {
        Region::None => Err(Error::invalid(format!("{} needs a page or a buffer", descriptor.op.name()))),
        Region::Arena => {
            let arena = shared.pages.as_ref().ok_or_else(|| Error::invalid("this engine has no page arena"))?;
            let (offset, len) = (descriptor.offset, descriptor.len);
            let page = arena.page_index_of_offset(offset).filter(|&page| {
                let page_end = arena.page_offset(page) + arena.page_size() as u64;
                offset.checked_add(len).is_some_and(|end| end <= page_end)
            });
            if page.is_none() {
                return Err(Error::invalid(format!("memory range {offset}+{len} is not inside one page of the arena")));
            }
            // SAFETY: the range lies inside one page of the arena (checked above), which the
            // engine keeps mapped while any worker runs (`Shared` holds it). The submitter
            // keeps the page reserved for this operation until its batch completes.
            Ok(Some(unsafe { RawBuf::new(arena.base().wrapping_add(offset as usize), len as usize) }))
        }
        Region::Buffer => {
            let tag = descriptor.tag;
            shared.buffers.get(tag.slot, tag.index, access, descriptor.len).map(Some).map_err(Error::invalid)
        }
        // The batch claimed the region at submit, so it stays registered (and its memory
        // valid) until this key and the rest of its batch complete.
        Region::Registered => shared
            .regions
            .resolve(descriptor.region_id, descriptor.offset, descriptor.len)
            .map(Some)
            .map_err(Error::invalid),
    }
}

fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}
