//! Each worker's table of servers (nodes) and its connections to each (`route.rs` says which
//! node a key goes to).
//!
//! Each worker has `connections_per_worker` connections to every server it talks to, plus
//! one **express** connection that carries only small requests (at most
//! [`SMALL_REQUEST_BYTES`] in flight: EXISTS, DEL, small values): a lookup never waits on a
//! connection behind megabytes of someone else's values, which the server would read first.
//! Small requests keep to it while it has room ([`Nodes::conn_for`]), so that a batch of
//! lookups costs one write, one wake-up and one receive.
//! For a cluster: to the first [`WARM_UP_NODES`] primaries of the slot map from the start (the
//! engine's warm-up opens those), and to any other node (a primary, a redirect's target) from
//! when a key is first routed to it, so that a map naming thousands of nodes costs only the
//! nodes keys go to. Connections open when they first have work.
//!
//! A cluster node named by its host name (in a `MOVED`, an `ASK` or the slot map) is looked up
//! off the worker ([`Resolver`]): until the lookup ends, its connections hold the requests for
//! it (up to their deadlines) while every other key flows; a failed lookup fails them, naming
//! the host. The table of nodes stays bounded: past [`MAX_EXTRA_NODES`] nodes beyond the slot
//! map's primaries, idle ones are forgotten ([`Nodes::trim`]), their slots reused, so that
//! redirects to ever new addresses do not grow the worker's memory.

use crate::cluster::NodeAddr;
use crate::conn::{Completion, Conn, PipelineLimits, ReconnectPolicy};
use crate::error::{Error, ErrorKind, Result};
use crate::health::{EndpointHealth, HealthBoard};
use crate::net::{Address, Endpoint, Lookup, Resolver, Waker};
use crate::ranged::ReadShape;
use crate::settings::Settings;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Nodes a worker keeps beyond the slot map's primaries (redirect targets, former primaries)
/// before it forgets idle ones.
pub const MAX_EXTRA_NODES: usize = 64;

/// Cluster primaries (the first the slot map lists) each worker connects to at start; the
/// others join when a key is first routed to them.
pub const WARM_UP_NODES: usize = 16;

/// A request keeping at most this many bytes in flight (sent and expected back) is small: it
/// may take a node's express connection, which no larger one does.
pub const SMALL_REQUEST_BYTES: usize = 64 << 10;

/// Connections a worker opens to each node: the express one and `connections_per_worker`.
pub fn conns_per_node(settings: &Settings) -> usize {
    settings.connections_per_worker + 1
}

/// What a worker needs to open connections to a server it has not talked to yet.
pub struct ConnFactory {
    pub settings: Arc<Settings>,
    pub reconnect: ReconnectPolicy,
    pub pipeline: PipelineLimits,
    /// Looks up host names off the worker (shared by the engine's workers).
    pub resolver: Arc<Resolver>,
    /// Wakes the worker when a lookup it waits for has ended.
    pub waker: Waker,
    /// Which servers are down (shared by the engine's workers).
    pub health: Arc<HealthBoard>,
}

/// What a node's slot in the table holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    /// Its connections know where the node is.
    Live,
    /// Its host name is being looked up; its connections hold their requests meanwhile.
    Resolving,
    /// Its lookup failed: its connections fail every request; freed once nothing uses it.
    Dead,
    /// Forgotten: the slot (and its connections' places) will serve the next new node.
    Free,
}

struct Slot {
    /// Cluster nodes and TCP servers; `None` for a Unix socket.
    addr: Option<NodeAddr>,
    /// The node's health, and what it said it is, shared with its connections.
    health: Arc<EndpointHealth>,
    state: SlotState,
    /// When the node was last routed to (a tick of [`Nodes`]), to forget the least recent first.
    last_used: u64,
}

/// A worker's servers and its connections to each.
///
/// Indices are stable: a node's index, and the indices of its connections in `conns`, keep
/// naming it for as long as it is in the table; a forgotten node's slot is reused, whole, by a
/// later one (what refers to indices, ranged reads and the worker's readiness, is either
/// refreshed each round or pins the node, see [`Nodes::trim`]).
pub struct Nodes {
    pub conns: Vec<Conn>,
    /// Indices into `conns`, per node slot: the express connection first, then the others.
    conns_of: Vec<Vec<usize>>,
    slots: Vec<Slot>,
    /// Cluster: the slot of each node in the table by address (not Dead or Free ones).
    by_addr: HashMap<NodeAddr, usize>,
    /// Free slots, reused before the table grows.
    free: Vec<usize>,
    /// Slots whose host name is being looked up.
    resolving: Vec<usize>,
    /// Slots whose lookup failed, to free.
    dead: usize,
    /// Trim when more slots than this are in use.
    trim_above: usize,
    tick: u64,
    factory: ConnFactory,
}

impl Nodes {
    /// The table for `servers`, resolved here (this runs on the engine's start, not on a
    /// worker).
    pub fn new(factory: ConnFactory, servers: &[Endpoint]) -> Result<Nodes> {
        let mut nodes = Nodes {
            conns: Vec::new(),
            conns_of: Vec::new(),
            slots: Vec::new(),
            by_addr: HashMap::new(),
            free: Vec::new(),
            resolving: Vec::new(),
            dead: 0,
            trim_above: MAX_EXTRA_NODES,
            tick: 0,
            factory,
        };
        let timeout = nodes.factory.settings.connect_timeout;
        for server in servers {
            let addresses = nodes.factory.resolver.resolve_now(server, timeout)?;
            let addr = match server {
                Endpoint::Tcp { host, port } => Some(NodeAddr::new(host.clone(), *port)),
                Endpoint::Unix { .. } => None,
            };
            nodes.place(server, addr, Some(addresses));
        }
        nodes.trim_above = nodes.in_use() + MAX_EXTRA_NODES;
        Ok(nodes)
    }

    /// Node slots in use (live, being looked up, or failed and not yet freed).
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The node a PING numbered `index` goes to: PINGs open and check every connection, so
    /// they are spread over the nodes in use.
    pub fn ping_target(&self, index: usize) -> usize {
        let usable =
            || (0..self.slots.len()).filter(|&n| matches!(self.slots[n].state, SlotState::Live | SlotState::Resolving));
        match usable().count() {
            0 => 0,
            count => usable().nth(index % count).expect("counted"),
        }
    }

    /// Puts a node in the table: in a free slot if there is one, else in a new one. `None`
    /// addresses: its host name is being looked up.
    fn place(&mut self, server: &Endpoint, addr: Option<NodeAddr>, addresses: Option<Arc<[Address]>>) -> usize {
        let settings = &self.factory.settings;
        let options = Arc::new(settings.connect_options(server));
        let (reconnect, pipeline) = (self.factory.reconnect, self.factory.pipeline);
        let probe_timeout = settings.connect_timeout.min(settings.timeout);
        let health = self
            .factory
            .health
            .endpoint(&server.to_string(), || crate::blocking::probe_of(options.clone(), probe_timeout));
        let make = || {
            let conn = match &addresses {
                Some(addresses) => Conn::new(options.clone(), addresses.clone(), reconnect, pipeline),
                None => Conn::awaiting_addresses(options.clone(), reconnect, pipeline),
            };
            let conn = conn.with_health(health.clone());
            if settings.cluster || settings.sentinel.is_some() { conn.handing_off() } else { conn }
        };
        let state = if addresses.is_some() { SlotState::Live } else { SlotState::Resolving };
        self.tick += 1;
        let slot = Slot { addr: addr.clone(), health: health.clone(), state, last_used: self.tick };
        let index = match self.free.pop() {
            Some(index) => {
                for &conn in &self.conns_of[index] {
                    self.conns[conn] = make();
                }
                self.slots[index] = slot;
                index
            }
            None => {
                let first = self.conns.len();
                for _ in 0..conns_per_node(settings) {
                    self.conns.push(make());
                }
                self.conns_of.push((first..self.conns.len()).collect());
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        if let Some(addr) = addr {
            self.by_addr.insert(addr, index);
        }
        if state == SlotState::Resolving {
            self.resolving.push(index);
        }
        index
    }

    /// How node `node`'s large values are read: what it said it is in a handshake (of any
    /// worker's connection to it), under the `get_piece_bytes` setting.
    pub fn read_shape(&self, node: usize) -> ReadShape {
        ReadShape::choose(self.factory.settings.get_piece_bytes, self.slots[node].health.identity().as_ref())
    }

    /// The index of a cluster node, putting it in the table if it is new. Never blocks: a host
    /// name not looked up yet is looked up off the worker while the node's connections hold
    /// what is sent to it. Fails at once when a recent lookup of the name failed.
    pub fn node_at(&mut self, addr: &NodeAddr) -> Result<usize> {
        if let Some(index) = self.known_node(addr) {
            return Ok(index);
        }
        let addresses = match self.factory.resolver.lookup(&addr.host, addr.port, &self.factory.waker) {
            Lookup::Ready(addresses) => Some(addresses),
            Lookup::Pending { .. } => None,
            Lookup::Failed(err) => return Err(err),
        };
        Ok(self.place(&addr.endpoint(), Some(addr.clone()), addresses))
    }

    /// The node at `addr` if the table has it, marked as just used.
    pub(super) fn known_node(&mut self, addr: &NodeAddr) -> Option<usize> {
        let index = *self.by_addr.get(addr)?;
        self.tick += 1;
        self.slots[index].last_used = self.tick;
        Some(index)
    }

    /// Reads go to replicas too (`read_from="prefer_replica"` with a cluster or Sentinel).
    pub fn reads_replicas(&self) -> bool {
        self.factory.settings.reads_replicas()
    }

    /// Hands the nodes whose lookups ended their addresses, or their failure: the requests
    /// waiting on a node whose name cannot be looked up fail with the lookup's error.
    pub fn poll_lookups(&mut self, now: Instant, out: &mut Vec<Completion>) {
        if self.resolving.is_empty() {
            return;
        }
        for index in std::mem::take(&mut self.resolving) {
            if self.slots[index].state != SlotState::Resolving {
                continue;
            }
            let addr = self.slots[index].addr.clone().expect("only cluster nodes are looked up");
            match self.factory.resolver.lookup(&addr.host, addr.port, &self.factory.waker) {
                Lookup::Pending { .. } => self.resolving.push(index),
                Lookup::Ready(addresses) => {
                    for &conn in &self.conns_of[index] {
                        self.conns[conn].set_addresses(addresses.clone());
                    }
                    self.slots[index].state = SlotState::Live;
                }
                Lookup::Failed(err) => {
                    for &conn in &self.conns_of[index] {
                        self.conns[conn].fail_for_good(now, err.clone(), out);
                    }
                    self.slots[index].state = SlotState::Dead;
                    self.by_addr.remove(&addr);
                    self.dead += 1;
                }
            }
        }
    }

    /// Whether [`Nodes::trim`] has something to do: failed nodes to free, or more nodes than
    /// the bound allowed after the last trim.
    pub fn wants_trim(&self) -> bool {
        self.dead > 0 || self.in_use() > self.trim_above
    }

    /// Forgets nodes nothing needs: the failed ones, and, while more than
    /// [`MAX_EXTRA_NODES`] nodes that are not `routed` are in the table, the least recently
    /// used of those that are idle (no request on any of their connections). A node of the
    /// slot map keys are routed to (its primaries; with replica reads, their replicas:
    /// `read_pick::routed_nodes`), or a node `pinned` says is in use elsewhere (a ranged
    /// read's), stays. Their slots are reused by the next new nodes. Returns how many were
    /// forgotten.
    pub fn trim(&mut self, routed: &HashSet<NodeAddr>, pinned: impl Fn(usize) -> bool) -> usize {
        let mut extra = 0;
        let mut candidates = Vec::new();
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.state == SlotState::Free {
                continue;
            }
            let kept = slot.state != SlotState::Dead && slot.addr.as_ref().is_some_and(|a| routed.contains(a));
            if kept || slot.addr.is_none() {
                continue;
            }
            extra += 1;
            let idle = self.conns_of[index].iter().all(|&conn| self.conns[conn].is_empty());
            if idle && !pinned(index) {
                candidates.push((slot.state != SlotState::Dead, slot.last_used, index));
            }
        }
        // Failed nodes first, then the least recently used.
        candidates.sort_unstable();
        let mut forgotten = 0;
        for (live, _, index) in candidates {
            if live && extra <= MAX_EXTRA_NODES {
                break;
            }
            self.forget(index);
            extra -= 1;
            forgotten += 1;
        }
        self.trim_above = self.in_use().max(self.in_use() - extra + MAX_EXTRA_NODES);
        // The health of nodes whose connections are gone (their slots reused) goes too.
        self.factory.health.forget_unused();
        forgotten
    }

    /// Drops a node: its connections close, its slot goes to the free list.
    fn forget(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if slot.state == SlotState::Dead {
            self.dead -= 1;
        }
        if let Some(addr) = &slot.addr {
            if self.by_addr.get(addr) == Some(&index) {
                self.by_addr.remove(addr);
            }
        }
        slot.state = SlotState::Free;
        slot.addr = None;
        let gone = Error::new(ErrorKind::Connection, "the node was forgotten");
        let mut nothing = Vec::new();
        for &conn in &self.conns_of[index] {
            // Idle: this only closes the socket.
            self.conns[conn].abort(&gone, &mut nothing);
        }
        debug_assert!(nothing.is_empty(), "only idle nodes are forgotten");
        self.resolving.retain(|&n| n != index);
        self.free.push(index);
    }

    /// Whether the node at `addr` is in the table and known to be unreachable.
    pub(super) fn known_down(&self, addr: &NodeAddr) -> bool {
        self.by_addr.get(addr).is_some_and(|&index| self.slots[index].health.is_down())
    }

    /// The connections to server `node` that carry requests of any size (not its express one).
    pub fn bulk_conns_of(&self, node: usize) -> &[usize] {
        &self.conns_of[node][1..]
    }

    /// The connection to server `node` for a request keeping `cost` bytes in flight.
    ///
    /// A small request goes to the express connection while that still fits it in one
    /// pipeline window of small requests ([`SMALL_REQUEST_BYTES`], `max_inflight_requests`)
    /// and is not out of service: a batch of lookups then leaves in one write and comes back
    /// in one burst, one wake-up and one receive, where spreading it over every connection
    /// cost a send, a wake-up and a receive each. Past that window, the least loaded of all;
    /// with the express connection out of service, and for a larger request, the least loaded
    /// of the others.
    pub fn conn_for(&self, node: usize, cost: usize) -> usize {
        let express = &self.conns[self.conns_of[node][0]];
        if cost > SMALL_REQUEST_BYTES || express.is_out_of_service() {
            return self.least_loaded(self.bulk_conns_of(node));
        }
        let fits = express.outstanding_cost() + cost <= SMALL_REQUEST_BYTES
            && express.outstanding_requests() < self.factory.pipeline.max_inflight_requests;
        if fits { self.conns_of[node][0] } else { self.least_loaded(&self.conns_of[node]) }
    }

    /// The connection to server `node` a PING goes to: the least loaded of all, so that the
    /// PINGs of a warm-up, one per connection, open and check every one of them (by the rule
    /// of [`Nodes::conn_for`] they would all take the express connection).
    pub fn conn_to_check(&self, node: usize) -> usize {
        self.least_loaded(&self.conns_of[node])
    }

    fn least_loaded(&self, conns: &[usize]) -> usize {
        *conns.iter().min_by_key(|&&i| self.conns[i].outstanding_cost()).expect("a server has connections")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::{Outcome, Request};
    use crate::op::Op;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    const SLOW: Duration = Duration::from_millis(1500);

    /// Nodes of a cluster worker (two connections per node and the express one) whose resolver takes `SLOW` to look
    /// up names starting with "slow", fails for names starting with "bad" and answers 127.0.0.1
    /// otherwise; and how often the worker was woken.
    fn cluster_nodes() -> (Nodes, Arc<AtomicUsize>) {
        let mut settings = Settings::new(Endpoint::Tcp { host: "127.0.0.1".into(), port: 7000 });
        settings.cluster = true;
        settings.connections_per_worker = 2;
        let resolver = Resolver::with_lookup(|host, port| {
            if host.starts_with("slow") {
                std::thread::sleep(SLOW);
            }
            if host.starts_with("bad") {
                return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such name (scripted)"));
            }
            Ok(vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))])
        });
        let woken = Arc::new(AtomicUsize::new(0));
        let count = woken.clone();
        let factory = ConnFactory {
            settings: Arc::new(settings),
            reconnect: ReconnectPolicy::default(),
            pipeline: PipelineLimits::default(),
            resolver: Arc::new(resolver),
            waker: Arc::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
            }),
            health: Arc::new(HealthBoard::new(Default::default())),
        };
        (Nodes::new(factory, &[]).unwrap(), woken)
    }

    impl Nodes {
        /// Every connection to server `node`, the express one first.
        fn conns_of(&self, node: usize) -> &[usize] {
            &self.conns_of[node]
        }

        fn push_to(&mut self, node: usize, request: Request, out: &mut Vec<Completion>) {
            let conn = self.conn_for(node, 0);
            self.conns[conn].push(request, out);
        }

        fn outstanding(&self, node: usize) -> usize {
            self.conns_of(node).iter().map(|&conn| self.conns[conn].outstanding_requests()).sum()
        }
    }

    fn exists(tag: u64) -> Request {
        Request::new(Op::Exists, b"k", None, tag, Instant::now() + Duration::from_secs(30))
    }

    fn wait_for_wake(woken: &AtomicUsize, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while woken.load(Ordering::SeqCst) < times {
            assert!(Instant::now() < deadline, "the lookup never woke the worker");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_host_name_in_a_redirect_is_looked_up_off_the_worker_holding_only_its_own_requests() {
        let (mut nodes, woken) = cluster_nodes();
        let mut out = Vec::new();
        let started = Instant::now();
        let slow = nodes.node_at(&NodeAddr::new("slow.example", 7001)).unwrap();
        let healthy = nodes.node_at(&NodeAddr::new("10.0.0.2", 7002)).unwrap();
        assert!(started.elapsed() < SLOW / 4, "the worker waited {:?} for a lookup", started.elapsed());
        assert_eq!(nodes.node_at(&NodeAddr::new("slow.example", 7001)).unwrap(), slow, "one node per address");
        // The slow node's connections hold what is sent to them; the IP literal needed no lookup.
        nodes.push_to(slow, exists(1), &mut out);
        nodes.push_to(healthy, exists(2), &mut out);
        assert!(nodes.conns_of(slow).iter().all(|&c| nodes.conns[c].awaits_addresses()));
        assert!(nodes.conns_of(healthy).iter().all(|&c| !nodes.conns[c].awaits_addresses()));
        nodes.poll_lookups(Instant::now(), &mut out);
        assert!(nodes.conns[nodes.conn_for(slow, 0)].awaits_addresses(), "still being looked up");
        assert!(out.is_empty(), "{out:?}");
        // Once the lookup ends the worker is woken, and the connections learn where to go.
        wait_for_wake(&woken, 1);
        assert!(started.elapsed() >= SLOW);
        nodes.poll_lookups(Instant::now(), &mut out);
        assert!(nodes.conns_of(slow).iter().all(|&c| !nodes.conns[c].awaits_addresses()));
        assert!(out.is_empty(), "the held request waits to be sent, it did not fail: {out:?}");
        assert_eq!(nodes.conns.iter().map(Conn::outstanding_requests).sum::<usize>(), 2);
    }

    #[test]
    fn a_failed_lookup_fails_only_the_requests_bound_for_that_host_naming_it() {
        let (mut nodes, woken) = cluster_nodes();
        let mut out = Vec::new();
        let bad_addr = NodeAddr::new("bad.example", 7003);
        let bad = nodes.node_at(&bad_addr).unwrap();
        let healthy = nodes.node_at(&NodeAddr::new("10.0.0.2", 7002)).unwrap();
        nodes.push_to(bad, exists(1), &mut out);
        nodes.push_to(healthy, exists(2), &mut out);
        wait_for_wake(&woken, 1);
        nodes.poll_lookups(Instant::now(), &mut out);
        let expected = "cannot connect to bad.example:7003: looking up the host name bad.example failed: no such \
                        name (scripted)";
        match out.as_slice() {
            [done] if done.tag == 1 => match &done.outcome {
                Outcome::Failed(err) => assert_eq!(err.message(), expected),
                other => panic!("{other:?}"),
            },
            other => panic!("exactly the request for bad.example fails: {other:?}"),
        }
        assert_eq!(nodes.outstanding(healthy), 1, "the other node's request waits");
        // A redirect there again soon fails at once, naming the host; the failed node is freed.
        let err = nodes.node_at(&bad_addr).unwrap_err();
        assert_eq!(err.message(), expected);
        assert!(nodes.wants_trim());
        assert_eq!(nodes.trim(&HashSet::new(), |_| false), 1);
        assert_eq!(nodes.in_use(), 1);
    }

    #[test]
    fn thousands_of_redirects_to_fresh_addresses_leave_the_table_bounded() {
        let (mut nodes, _) = cluster_nodes();
        let mut out = Vec::new();
        let primaries: Vec<NodeAddr> = (0..3).map(|i| NodeAddr::new(format!("10.0.0.{i}"), 7000)).collect();
        let primary_index: Vec<usize> = primaries.iter().map(|p| nodes.node_at(p).unwrap()).collect();
        let primaries_set: HashSet<NodeAddr> = primaries.iter().cloned().collect();
        // A redirect target still waiting for its reply, and one a ranged read is bound to.
        let busy = nodes.node_at(&NodeAddr::new("10.1.0.1", 7000)).unwrap();
        nodes.push_to(busy, exists(1), &mut out);
        let pinned = nodes.node_at(&NodeAddr::new("10.1.0.2", 7000)).unwrap();
        let bound = primaries.len() + MAX_EXTRA_NODES + 1;
        for i in 0..5000u32 {
            let fresh = NodeAddr::new(format!("10.2.{}.{}", i / 250, i % 250), 7000 + (i % 7) as u16);
            let index = nodes.node_at(&fresh).unwrap();
            assert_eq!(nodes.node_at(&fresh).unwrap(), index);
            // As the worker does once per round.
            if nodes.wants_trim() {
                nodes.trim(&primaries_set, |node| node == pinned);
            }
            assert!(nodes.in_use() <= bound, "{} nodes after {i} redirects", nodes.in_use());
        }
        assert!(nodes.slots.len() <= bound, "{} slots", nodes.slots.len());
        let per_node = conns_per_node(&nodes.factory.settings);
        assert!(nodes.conns.len() <= per_node * bound, "{} connections", nodes.conns.len());
        assert!(nodes.by_addr.len() <= bound, "{} addresses", nodes.by_addr.len());
        // Each slot's connections hold the health of the node last placed there (a freed slot's
        // until it is reused); no other node's health is kept.
        let tracked = nodes.factory.health.tracked();
        assert!(tracked <= nodes.slots.len(), "{tracked} servers' health kept for {} slots", nodes.slots.len());
        // What must stay stayed, at its index.
        for (addr, &index) in primaries.iter().zip(&primary_index) {
            assert_eq!(nodes.node_at(addr).unwrap(), index, "primary {addr}");
        }
        assert_eq!(nodes.node_at(&NodeAddr::new("10.1.0.1", 7000)).unwrap(), busy);
        assert_eq!(nodes.outstanding(busy), 1);
        assert_eq!(nodes.node_at(&NodeAddr::new("10.1.0.2", 7000)).unwrap(), pinned);
        // A forgotten address comes back as a new node.
        let again = nodes.node_at(&NodeAddr::new("10.2.0.0", 7000)).unwrap();
        assert_eq!(nodes.slots[again].addr, Some(NodeAddr::new("10.2.0.0", 7000)));
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn pings_go_to_the_nodes_in_use_only() {
        let (mut nodes, _) = cluster_nodes();
        let a = nodes.node_at(&NodeAddr::new("10.0.0.1", 7000)).unwrap();
        let b = nodes.node_at(&NodeAddr::new("10.0.0.2", 7000)).unwrap();
        let c = nodes.node_at(&NodeAddr::new("10.0.0.3", 7000)).unwrap();
        nodes.forget(b);
        let targets: Vec<usize> = (0..4).map(|i| nodes.ping_target(i)).collect();
        assert_eq!(targets, [a, c, a, c]);
    }

    #[test]
    fn small_requests_take_the_express_connection_and_large_ones_never_do() {
        let (mut nodes, _) = cluster_nodes();
        let node = nodes.node_at(&NodeAddr::new("127.0.0.1", 7000)).unwrap();
        let conns = nodes.conns_of(node).to_vec();
        assert_eq!(conns.len(), 3, "the express connection and two others");
        let express = conns[0];
        assert_eq!(nodes.bulk_conns_of(node), &conns[1..]);
        let mut out = Vec::new();
        // Large requests fill the two bulk connections, never the express one.
        for _ in 0..6 {
            let conn = nodes.conn_for(node, 4 << 20);
            assert_ne!(conn, express);
            nodes.conns[conn].push(exists(1), &mut out);
        }
        assert!(nodes.conns[express].is_empty());
        assert_eq!(nodes.conn_for(node, 100), express);
        assert_eq!(nodes.conn_for(node, SMALL_REQUEST_BYTES), express);
        assert_ne!(nodes.conn_for(node, SMALL_REQUEST_BYTES + 1), express);
    }

    #[test]
    fn a_batch_of_small_requests_stays_on_the_express_connection_until_it_is_full() {
        let (mut nodes, _) = cluster_nodes();
        let node = nodes.node_at(&NodeAddr::new("127.0.0.1", 7000)).unwrap();
        let conns = nodes.conns_of(node).to_vec();
        let express = conns[0];
        let mut out = Vec::new();
        // 32 lookups: one connection, so one write and one burst of replies.
        for _ in 0..32 {
            let request = exists(1);
            let conn = nodes.conn_for(node, request.pipeline_cost());
            assert_eq!(conn, express, "a lookup left the express connection with room on it");
            nodes.conns[conn].push(request, &mut out);
        }
        assert!(conns[1..].iter().all(|&c| nodes.conns[c].is_empty()));
        // Filled to its byte budget (lookups of 16 KiB keys here), small requests spill to the
        // least loaded connection.
        let long_lookup =
            || Request::new(Op::Exists, &[b'k'; 16 << 10], None, 2, Instant::now() + Duration::from_secs(30));
        let cost = long_lookup().pipeline_cost();
        assert!(cost <= SMALL_REQUEST_BYTES);
        while nodes.conns[express].outstanding_cost() + cost <= SMALL_REQUEST_BYTES {
            assert_eq!(nodes.conn_for(node, cost), express);
            nodes.conns[express].push(long_lookup(), &mut out);
        }
        let spilled = nodes.conn_for(node, cost);
        assert_ne!(spilled, express, "the express connection is full");
        assert!(nodes.conns[spilled].is_empty(), "to the least loaded one");
        assert!(out.is_empty(), "nothing failed: {out:?}");
    }

    #[test]
    fn the_express_connection_takes_no_more_small_requests_than_one_pipeline_window() {
        let (mut nodes, _) = cluster_nodes();
        let node = nodes.node_at(&NodeAddr::new("127.0.0.1", 7000)).unwrap();
        let express = nodes.conns_of(node)[0];
        let window = nodes.factory.pipeline.max_inflight_requests;
        let mut out = Vec::new();
        for _ in 0..window {
            assert_eq!(nodes.conn_for(node, 1), express);
            nodes.conns[express].push(exists(1), &mut out);
        }
        assert!(nodes.conns[express].outstanding_cost() < SMALL_REQUEST_BYTES, "bytes are not what stops it");
        assert_ne!(nodes.conn_for(node, 1), express, "a full window spills");
    }

    #[test]
    fn pings_one_per_connection_reach_every_connection() {
        let (mut nodes, _) = cluster_nodes();
        let node = nodes.node_at(&NodeAddr::new("127.0.0.1", 7000)).unwrap();
        let mut conns = nodes.conns_of(node).to_vec();
        let mut out = Vec::new();
        let mut pinged = Vec::new();
        for _ in 0..conns.len() {
            let conn = nodes.conn_to_check(node);
            nodes.conns[conn]
                .push(Request::new(Op::Ping, b"", None, 3, Instant::now() + Duration::from_secs(30)), &mut out);
            pinged.push(conn);
        }
        pinged.sort_unstable();
        conns.sort_unstable();
        assert_eq!(pinged, conns, "a warm-up opens the express connection and the bulk ones");
    }

    #[test]
    fn small_requests_avoid_an_express_connection_out_of_service() {
        let (mut nodes, _) = cluster_nodes();
        let node = nodes.node_at(&NodeAddr::new("127.0.0.1", 7000)).unwrap();
        let express = nodes.conns_of(node)[0];
        let mut out = Vec::new();
        let err = Error::new(ErrorKind::Authentication, "WRONGPASS invalid username-password pair");
        nodes.conns[express].fail_for_good(Instant::now(), err, &mut out);
        assert!(nodes.conns[express].is_out_of_service());
        assert!(nodes.conns[express].is_empty());
        let conn = nodes.conn_for(node, 1);
        assert_ne!(conn, express, "an empty express connection that would fail the lookup at once");
        assert!(nodes.bulk_conns_of(node).contains(&conn));
    }
}
