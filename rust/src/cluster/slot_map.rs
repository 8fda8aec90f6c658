//! Which primary (and which replicas) serve each of the 16384 slots.
//!
//! Built from a node's answer to `CLUSTER SHARDS` (Redis 7+), or to `CLUSTER SLOTS` where that
//! command is missing (see `SlotMap::shards_unsupported`), and patched by `MOVED` replies
//! until the next refresh.
//!
//! Addresses follow the `CLUSTER SLOTS` documentation:
//! - an empty or NULL endpoint means "the host you asked" (nodes behind a load balancer, or a
//!   node that does not know its own IP yet): the seed's host with the node's port;
//! - `?` means the server prefers hostnames but has none for that node. That is not the node we
//!   asked; the node's IP (a field of `CLUSTER SHARDS`, metadata in `CLUSTER SLOTS`) is used
//!   instead, and a node with neither cannot be reached.
//!
//! Node health: a shard whose primary failed is still listed with its slots until a replica
//! takes over, so [`SlotMap::primary`] returns owners whatever their health; callers that care
//! look at [`Shard::primary`]'s [`Health`]. A failed primary that lost its slots (its replica was
//! promoted) serves nothing and is left out. Replicas keep their reported health, for replica
//! reads to pick from `Shard::online_replicas`.

use super::node::NodeAddr;
use super::slot::SLOT_COUNT;
use crate::resp::Reply;
use std::collections::HashMap;
use std::ops::RangeInclusive;

/// A node's health as the answering node sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Serving.
    Online,
    /// A replica that has not replicated anything yet, or a node loading its dataset.
    Loading,
    /// Marked failed by the cluster.
    Failed,
    /// A value this code does not know, or not reported at all (`CLUSTER SLOTS`, `MOVED`).
    Unknown,
}

impl Health {
    fn parse(text: &str) -> Health {
        match text {
            "online" => Health::Online,
            "loading" => Health::Loading,
            // Redis 7.0 sends "fail"; its documentation says "failed".
            "fail" | "failed" => Health::Failed,
            _ => Health::Unknown,
        }
    }
}

/// One node of a shard, as the map knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Where a client reaches the node.
    pub addr: NodeAddr,
    /// The 40-hex-digit node id; `None` where the source did not say (`MOVED`, old servers).
    pub id: Option<String>,
    /// The node's health as reported ([`Health::Unknown`] where not reported).
    pub health: Health,
}

/// A primary and its replicas, serving a set of slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The node that owns the slots and takes writes.
    pub primary: Node,
    /// The primary's replicas, whatever their health.
    pub replicas: Vec<Node>,
}

impl Shard {
    /// The replicas reported online.
    #[cfg(test)]
    pub fn online_replicas(&self) -> impl Iterator<Item = &Node> {
        self.replicas.iter().filter(|node| node.health == Health::Online)
    }
}

const NO_OWNER: u16 = u16::MAX;

/// The owner of every slot (see the module documentation).
#[derive(Clone, Debug)]
pub struct SlotMap {
    shards: Vec<Shard>,
    /// Slots each shard serves, by shard index: shards at zero are skipped when listing.
    slot_counts: Vec<u16>,
    /// Shard index by slot, `NO_OWNER` for uncovered slots.
    owners: Box<[u16]>,
    version: u64,
}

impl SlotMap {
    /// A map from a `CLUSTER SHARDS` reply, sent by the node at `seed`, for a client speaking
    /// plaintext.
    #[cfg(any(test, feature = "internals"))]
    pub fn from_shards(reply: &Reply, seed: &NodeAddr) -> Result<SlotMap, String> {
        SlotMap::from_shards_over(reply, seed, false)
    }

    /// A map from a `CLUSTER SHARDS` reply, sent by the node at `seed`; with `tls`, nodes are
    /// reached at their `tls-port` (`CLUSTER SLOTS` and redirects name the port that fits the
    /// connection they were asked over, SHARDS names both).
    pub fn from_shards_over(reply: &Reply, seed: &NodeAddr, tls: bool) -> Result<SlotMap, String> {
        let context = |err: String| format!("cannot read CLUSTER SHARDS from {seed}: {err}");
        let mut builder = Builder::default();
        for shard in array(reply, "the reply").map_err(context)? {
            let (slots, nodes) = read_shard(shard, seed, tls).map_err(context)?;
            if slots.is_empty() {
                continue;
            }
            // Valkey 8 keeps a failed primary in its shard, still as a primary, after a replica
            // took over (Redis 7.0 moves it to a slotless shard of its own): the slots belong to
            // the best of the primaries listed (see `primary_rank`); the others serve nothing.
            let Some(chosen) = (0..nodes.len())
                .filter(|&i| nodes[i].is_primary)
                .max_by_key(|&i| (primary_rank(&nodes[i]), std::cmp::Reverse(i)))
            else {
                return Err(context(format!("a shard serving slots {slots:?} has no primary")));
            };
            let Some(primary) = nodes[chosen].node.clone() else {
                return Err(context(format!("the primary of slots {slots:?} has no address a client can use")));
            };
            let replicas = nodes.into_iter().filter(|entry| !entry.is_primary).filter_map(|entry| entry.node);
            let index = builder.add_shard(Shard { primary, replicas: replicas.collect() });
            for range in slots {
                builder.assign(range, index).map_err(context)?;
            }
        }
        Ok(builder.finish())
    }

    /// Every slot served by one primary, with `replicas`: a Sentinel-watched primary, routed
    /// like a one-shard cluster. The replicas are those the Sentinels list as up, so
    /// [`Health::Online`]; sorted, each once, and never the primary (a Sentinel may list a
    /// replica it has just promoted for a moment), so that two discoveries that found the same
    /// nodes give equal shards.
    pub fn single(primary: NodeAddr, mut replicas: Vec<NodeAddr>) -> SlotMap {
        replicas.sort();
        replicas.dedup();
        replicas.retain(|replica| *replica != primary);
        let node = |addr, health| Node { addr, id: None, health };
        let mut builder = Builder::default();
        let replicas = replicas.into_iter().map(|addr| node(addr, Health::Online)).collect();
        let index = builder.add_shard(Shard { primary: node(primary, Health::Unknown), replicas });
        builder.assign(0..=SLOT_COUNT - 1, index).expect("one range over an empty map");
        builder.finish()
    }

    /// A map from a `CLUSTER SLOTS` reply, sent by the node at `seed`: entries of
    /// `[start, end, primary, replica...]`, each node `[endpoint, port, id?, metadata?]`.
    /// `CLUSTER SLOTS` lists only replicas the node deems usable, without health: they are
    /// marked [`Health::Online`], primaries [`Health::Unknown`].
    pub fn from_slots(reply: &Reply, seed: &NodeAddr) -> Result<SlotMap, String> {
        let context = |err: String| format!("cannot read CLUSTER SLOTS from {seed}: {err}");
        let mut builder = Builder::default();
        for entry in array(reply, "the reply").map_err(context)? {
            let items = array(entry, "a slot range").map_err(context)?;
            let [start, end, primary, replicas @ ..] = items else {
                return Err(context(format!("a slot range has {} fields, expected at least 3", items.len())));
            };
            let range = slot_range(start, end).map_err(context)?;
            let Some(primary) = read_slots_node(primary, seed, Health::Unknown).map_err(context)? else {
                return Err(context(format!("the primary of slots {range:?} has no address a client can use")));
            };
            let index = match builder.shard_of(&primary.addr) {
                Some(index) => index,
                None => {
                    let mut replica_nodes = Vec::with_capacity(replicas.len());
                    for replica in replicas {
                        replica_nodes.extend(read_slots_node(replica, seed, Health::Online).map_err(context)?);
                    }
                    builder.add_shard(Shard { primary, replicas: replica_nodes })
                }
            };
            builder.assign(range, index).map_err(context)?;
        }
        Ok(builder.finish())
    }

    /// True when `reply` to `CLUSTER SHARDS` means the server predates it (Redis < 7): ask
    /// `CLUSTER SLOTS` instead.
    #[cfg(test)]
    pub fn shards_unsupported(reply: &Reply) -> bool {
        match reply {
            Reply::Error(text) => text.to_ascii_lowercase().starts_with(b"err unknown subcommand"),
            _ => false,
        }
    }

    /// The primary serving `slot`; `None` when no node serves it (the caller reports the slot
    /// as uncovered, or refreshes the map).
    pub fn primary(&self, slot: u16) -> Option<&NodeAddr> {
        self.shard(slot).map(|shard| &shard.primary.addr)
    }

    /// The shard serving `slot`.
    pub fn shard(&self, slot: u16) -> Option<&Shard> {
        let owner = *self.owners.get(usize::from(slot))?;
        self.shards.get(usize::from(owner))
    }

    /// Shards serving at least one slot, each once.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().zip(&self.slot_counts).filter(|(_, count)| **count > 0).map(|(shard, _)| shard)
    }

    /// Primaries serving at least one slot, each once.
    pub fn primaries(&self) -> impl Iterator<Item = &NodeAddr> {
        self.shards().map(|shard| &shard.primary.addr)
    }

    /// Maximal runs of consecutive slots with the same owner, in slot order.
    #[cfg(test)]
    pub fn ranges(&self) -> impl Iterator<Item = (RangeInclusive<u16>, &Shard)> {
        runs(&self.owners)
            .filter(|(_, owner)| *owner != NO_OWNER)
            .map(|(range, owner)| (range, &self.shards[usize::from(owner)]))
    }

    /// Runs of slots no node serves; empty for a healthy cluster.
    pub fn uncovered_slots(&self) -> Vec<RangeInclusive<u16>> {
        runs(&self.owners).filter(|(_, owner)| *owner == NO_OWNER).map(|(range, _)| range).collect()
    }

    /// Whether every slot has an owner.
    pub fn is_fully_covered(&self) -> bool {
        !self.owners.contains(&NO_OWNER)
    }

    /// Follows a `MOVED`: `slot` is now served by the primary at `node`. A primary the map does
    /// not know yet becomes a shard of its own, without replicas, until the next refresh; it
    /// takes the place of a shard left without slots if there is one, so that `MOVED`s to ever
    /// new addresses do not grow the map (it holds at most one shard per slot, plus one).
    /// Returns whether the map changed.
    pub fn apply_moved(&mut self, slot: u16, node: &NodeAddr) -> bool {
        let Some(current) = self.owners.get(usize::from(slot)).copied() else { return false };
        let index = match self.shards.iter().position(|shard| shard.primary.addr == *node) {
            Some(index) if index == usize::from(current) => return false,
            Some(index) => index,
            None => {
                let primary = Node { addr: node.clone(), id: None, health: Health::Unknown };
                let shard = Shard { primary, replicas: Vec::new() };
                let unused = (0..self.shards.len()).find(|&i| self.slot_counts[i] == 0 && i != usize::from(current));
                match unused {
                    Some(index) => {
                        self.shards[index] = shard;
                        index
                    }
                    None => {
                        self.shards.push(shard);
                        self.slot_counts.push(0);
                        self.shards.len() - 1
                    }
                }
            }
        };
        if current != NO_OWNER {
            self.slot_counts[usize::from(current)] -= 1;
        }
        self.slot_counts[index] += 1;
        self.owners[usize::from(slot)] = index as u16;
        self.version += 1;
        true
    }

    /// Replaces the routing with that of a freshly read map; the version keeps counting up.
    pub fn update_from(&mut self, fresh: SlotMap) {
        let version = self.version + 1;
        *self = fresh;
        self.version = version;
    }

    /// Counts the changes to this map (each [`SlotMap::apply_moved`] that changed it, each
    /// [`SlotMap::update_from`]), starting at 0: a route computed at version `v` is still valid
    /// while the version is `v`.
    #[cfg(test)]
    pub fn version(&self) -> u64 {
        self.version
    }
}

#[derive(Default)]
struct Builder {
    shards: Vec<Shard>,
    owners: Vec<u16>,
    /// Shards by primary: a reply may list thousands.
    by_primary: HashMap<NodeAddr, u16>,
}

impl Builder {
    fn add_shard(&mut self, shard: Shard) -> u16 {
        // At most one shard per slot range, and the owners table holds 16384 slots.
        let index = u16::try_from(self.shards.len()).expect("fewer shards than slots");
        self.by_primary.entry(shard.primary.addr.clone()).or_insert(index);
        self.shards.push(shard);
        index
    }

    fn shard_of(&self, primary: &NodeAddr) -> Option<u16> {
        self.by_primary.get(primary).copied()
    }

    fn assign(&mut self, range: RangeInclusive<u16>, shard: u16) -> Result<(), String> {
        if self.owners.is_empty() {
            self.owners = vec![NO_OWNER; usize::from(SLOT_COUNT)];
        }
        for slot in range {
            let owner = &mut self.owners[usize::from(slot)];
            if *owner != NO_OWNER && *owner != shard {
                let first = &self.shards[usize::from(*owner)].primary.addr;
                let second = &self.shards[usize::from(shard)].primary.addr;
                return Err(format!("slot {slot} is claimed by both {first} and {second}"));
            }
            *owner = shard;
        }
        Ok(())
    }

    fn finish(mut self) -> SlotMap {
        if self.owners.is_empty() {
            self.owners = vec![NO_OWNER; usize::from(SLOT_COUNT)];
        }
        let mut slot_counts = vec![0u16; self.shards.len()];
        for &owner in self.owners.iter().filter(|&&owner| owner != NO_OWNER) {
            slot_counts[usize::from(owner)] += 1;
        }
        SlotMap { shards: self.shards, slot_counts, owners: self.owners.into_boxed_slice(), version: 0 }
    }
}

fn runs(owners: &[u16]) -> impl Iterator<Item = (RangeInclusive<u16>, u16)> + '_ {
    let mut start = 0usize;
    std::iter::from_fn(move || {
        let owner = *owners.get(start)?;
        let len = owners[start..].iter().take_while(|&&o| o == owner).count();
        let range = start as u16..=(start + len - 1) as u16;
        start += len;
        Some((range, owner))
    })
}

/// One node of a `CLUSTER SHARDS` entry.
struct ShardNode {
    /// `None` for a node without a usable address.
    node: Option<Node>,
    is_primary: bool,
    health: Health,
    /// `replication-offset`; 0 where not reported.
    offset: i64,
}

/// Which of several primaries in one shard owns its slots, best first: one reported online,
/// then one not known to have failed, then the one that has replicated the most (a promoted
/// replica is ahead of the primary it replaced, whose offset a failed node reports as 0); a
/// primary with a usable address over one without. Full ties go to the first listed. A wrong
/// pick costs a `MOVED`, which patches the map.
fn primary_rank(entry: &ShardNode) -> (bool, bool, i64, bool) {
    (entry.health == Health::Online, entry.health != Health::Failed, entry.offset, entry.node.is_some())
}

/// One `CLUSTER SHARDS` entry: its slot ranges and its nodes.
type ShardEntry = (Vec<RangeInclusive<u16>>, Vec<ShardNode>);

fn read_shard(shard: &Reply, seed: &NodeAddr, tls: bool) -> Result<ShardEntry, String> {
    let (mut slots, mut nodes) = (None, None);
    for (key, value) in pairs(shard, "a shard")? {
        match key {
            "slots" => {
                let bounds = array(value, "a shard's slots")?;
                if bounds.len() % 2 != 0 {
                    return Err(format!("a shard's slots list has odd length {}", bounds.len()));
                }
                slots = Some(bounds.chunks(2).map(|pair| slot_range(&pair[0], &pair[1])).collect::<Result<_, _>>()?);
            }
            "nodes" => {
                nodes = Some(
                    array(value, "a shard's nodes")?
                        .iter()
                        .map(|node| read_shard_node(node, seed, tls))
                        .collect::<Result<_, _>>()?,
                );
            }
            _ => {}
        }
    }
    match (slots, nodes) {
        (Some(slots), Some(nodes)) => Ok((slots, nodes)),
        _ => Err("a shard lacks `slots` or `nodes`".into()),
    }
}

fn read_shard_node(node: &Reply, seed: &NodeAddr, tls: bool) -> Result<ShardNode, String> {
    let (mut id, mut port, mut ip, mut endpoint, mut role, mut health) = (None, None, None, None, None, None);
    let mut tls_port = None;
    let mut offset = 0;
    for (key, value) in pairs(node, "a node")? {
        match key {
            "id" => id = Some(text(value, "a node id")?.to_owned()),
            "port" => port = Some(port_number(value)?),
            "tls-port" => tls_port = Some(port_number(value)?),
            "ip" => ip = Some(text(value, "a node ip")?),
            "endpoint" => endpoint = Some(text(value, "a node endpoint")?),
            "role" => role = Some(text(value, "a node role")?),
            "health" => health = Some(Health::parse(text(value, "a node health")?)),
            "replication-offset" => {
                offset = match value {
                    Reply::Integer(offset) => *offset,
                    other => return Err(format!("node {id:?} has replication-offset {other:?}, expected an integer")),
                }
            }
            _ => {}
        }
    }
    let is_primary = match role {
        Some("master") => true,
        Some("replica") => false,
        other => return Err(format!("node {id:?} has role {other:?}, expected master or replica")),
    };
    let health = health.unwrap_or(Health::Unknown);
    // A TLS-only node has no `port`, a plaintext-only one no `tls-port`: such a node cannot be
    // used by a client speaking the other.
    let port = if tls { tls_port } else { port };
    let node = port.and_then(|port| address(endpoint, ip, port, seed)).map(|addr| Node { addr, id, health });
    Ok(ShardNode { node, is_primary, health, offset })
}

fn read_slots_node(node: &Reply, seed: &NodeAddr, health: Health) -> Result<Option<Node>, String> {
    let fields = array(node, "a node")?;
    let [endpoint, port, rest @ ..] = fields else {
        return Err(format!("a node has {} fields, expected at least 2", fields.len()));
    };
    let endpoint = match endpoint {
        Reply::Nil => None,
        other => Some(text(other, "a node endpoint")?),
    };
    let port = port_number(port)?;
    let id = rest.first().map(|id| text(id, "a node id").map(str::to_owned)).transpose()?;
    let mut ip = None;
    if let Some(metadata) = rest.get(1) {
        for (key, value) in pairs(metadata, "a node's metadata")? {
            if key == "ip" {
                ip = Some(text(value, "a node ip")?);
            }
        }
    }
    Ok(address(endpoint.or(Some("")), ip, port, seed).map(|addr| Node { addr, id, health }))
}

/// Where to reach a node, by the rules in the module documentation.
fn address(endpoint: Option<&str>, ip: Option<&str>, port: u16, seed: &NodeAddr) -> Option<NodeAddr> {
    match endpoint.unwrap_or("") {
        "" => Some(NodeAddr::new(seed.host.clone(), port)),
        "?" => ip.filter(|ip| !ip.is_empty()).map(|ip| NodeAddr::new(ip, port)),
        host => Some(NodeAddr::new(host, port)),
    }
}

fn array<'a>(reply: &'a Reply, what: &str) -> Result<&'a [Reply], String> {
    match reply {
        Reply::Array(items) => Ok(items),
        Reply::Error(text) => Err(format!("the server answered {:?}", String::from_utf8_lossy(text))),
        other => Err(format!("{what} is {other:?}, expected an array")),
    }
}

fn text<'a>(reply: &'a Reply, what: &str) -> Result<&'a str, String> {
    match reply {
        Reply::Bulk(bytes) | Reply::Simple(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8: {reply:?}"))
        }
        other => Err(format!("{what} is {other:?}, expected a string")),
    }
}

/// A flat `[key, value, key, value, ...]` array, as RESP2 sends maps.
fn pairs<'a>(reply: &'a Reply, what: &str) -> Result<impl Iterator<Item = (&'a str, &'a Reply)>, String> {
    let items = array(reply, what)?;
    if items.len() % 2 != 0 {
        return Err(format!("{what} has {} fields, expected key/value pairs", items.len()));
    }
    let pairs = items.chunks(2).map(|pair| Ok((text(&pair[0], "a field name")?, &pair[1])));
    pairs.collect::<Result<Vec<_>, String>>().map(Vec::into_iter)
}

fn port_number(reply: &Reply) -> Result<u16, String> {
    match reply {
        Reply::Integer(port) => u16::try_from(*port).ok().filter(|&port| port != 0),
        _ => None,
    }
    .ok_or_else(|| format!("a node port is {reply:?}, expected 1..65535"))
}

fn slot_range(start: &Reply, end: &Reply) -> Result<RangeInclusive<u16>, String> {
    let slot = |reply: &Reply| match reply {
        Reply::Integer(slot) => u16::try_from(*slot).ok().filter(|&slot| slot < SLOT_COUNT),
        _ => None,
    };
    match (slot(start), slot(end)) {
        (Some(start), Some(end)) if start <= end => Ok(start..=end),
        _ => Err(format!("slot range {start:?}..{end:?} is not within 0..16383")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::slot::key_slot;
    use crate::resp::Decoder;

    fn decode(bytes: &[u8]) -> Reply {
        let (used, reply) = Decoder::default().decode(bytes).unwrap();
        assert_eq!(used, bytes.len(), "one reply, nothing after it");
        reply.expect("a complete reply")
    }

    fn seed() -> NodeAddr {
        NodeAddr::new("127.0.0.1", 21000)
    }

    /// One line of `CLUSTER NODES`, the server's own account, against which the maps parsed
    /// from the other two commands are checked.
    struct NodeLine {
        id: String,
        addr: NodeAddr,
        flags: Vec<String>,
        primary_id: Option<String>,
        slots: Vec<RangeInclusive<u16>>,
    }

    fn cluster_nodes(text: &str) -> Vec<NodeLine> {
        text.lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let addr = NodeAddr::parse(fields[1].split('@').next().unwrap()).unwrap();
                let slots = fields[8..]
                    .iter()
                    .map(|range| match range.split_once('-') {
                        Some((lo, hi)) => lo.parse().unwrap()..=hi.parse().unwrap(),
                        None => range.parse().unwrap()..=range.parse().unwrap(),
                    })
                    .collect();
                NodeLine {
                    id: fields[0].into(),
                    addr,
                    flags: fields[2].split(',').map(str::to_owned).collect(),
                    primary_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                    slots,
                }
            })
            .collect()
    }

    /// Checks `map` against CLUSTER NODES: every range has the owner the server named, with
    /// that primary's id, and the replicas the server lists for it (failed ones aside).
    fn assert_matches_nodes(map: &SlotMap, nodes_text: &str, with_replicas: bool) {
        let nodes = cluster_nodes(nodes_text);
        let mut expected: Vec<(RangeInclusive<u16>, &NodeLine)> =
            nodes.iter().flat_map(|node| node.slots.iter().map(move |range| (range.clone(), node))).collect();
        expected.sort_by_key(|(range, _)| *range.start());
        let ranges: Vec<_> = map.ranges().collect();
        assert_eq!(ranges.len(), expected.len(), "{ranges:?}");
        for ((range, shard), (want_range, owner)) in ranges.iter().zip(&expected) {
            assert_eq!(range, want_range);
            assert_eq!(shard.primary.addr, owner.addr);
            assert_eq!(shard.primary.id.as_deref(), Some(owner.id.as_str()));
            let mut want_replicas: Vec<&NodeAddr> = nodes
                .iter()
                .filter(|n| n.primary_id.as_ref() == Some(&owner.id) && !n.flags.iter().any(|f| f == "fail"))
                .map(|n| &n.addr)
                .collect();
            let mut replicas: Vec<&NodeAddr> = shard.replicas.iter().map(|r| &r.addr).collect();
            want_replicas.sort();
            replicas.sort();
            if with_replicas {
                assert_eq!(replicas, want_replicas, "replicas of {}", owner.addr);
            } else {
                assert!(replicas.is_empty());
            }
        }
    }

    #[test]
    fn shards_and_slots_of_a_healthy_cluster_agree_with_cluster_nodes() {
        let nodes = include_str!("testdata/cluster_nodes.txt");
        let shards = SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards.resp")), &seed()).unwrap();
        let slots = SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots.resp")), &seed()).unwrap();
        for map in [&shards, &slots] {
            assert_matches_nodes(map, nodes, true);
            assert!(map.is_fully_covered());
            assert!(map.uncovered_slots().is_empty());
            assert_eq!(map.primaries().count(), 3);
            assert_eq!(map.version(), 0);
            for shard in map.shards() {
                assert_eq!(shard.replicas.len(), 1);
                assert_eq!(shard.online_replicas().count(), 1);
            }
        }
        assert!(shards.shards().all(|shard| shard.primary.health == Health::Online));
        let same = |a: &Node, b: &Node| a.addr == b.addr && a.id == b.id;
        for slot in 0..SLOT_COUNT {
            let (a, b) = (shards.shard(slot).unwrap(), slots.shard(slot).unwrap());
            assert!(same(&a.primary, &b.primary), "slot {slot}: {a:?} vs {b:?}");
            assert!(a.replicas.iter().zip(&b.replicas).all(|(a, b)| same(a, b)), "slot {slot}: {a:?} vs {b:?}");
        }
        // The fixtures' own MOVED replies name the owners these maps predict.
        assert_eq!(shards.primary(key_slot(b"foo")), Some(&NodeAddr::new("127.0.0.1", 21002)));
        assert_eq!(shards.primary(key_slot(b"bar")), Some(&NodeAddr::new("127.0.0.1", 21000)));
    }

    #[test]
    fn fresh_replicas_are_loading_in_shards_and_absent_from_slots() {
        let shards =
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_fresh.resp")), &seed()).unwrap();
        let slots = SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots_fresh.resp")), &seed()).unwrap();
        assert!(shards.is_fully_covered() && slots.is_fully_covered());
        for shard in shards.shards() {
            assert_eq!(shard.replicas.len(), 1);
            assert_eq!(shard.replicas[0].health, Health::Loading);
            assert_eq!(shard.online_replicas().count(), 0);
        }
        assert!(slots.shards().all(|shard| shard.replicas.is_empty()));
        let sorted = |map: &SlotMap| {
            let mut primaries: Vec<NodeAddr> = map.primaries().cloned().collect();
            primaries.sort();
            primaries
        };
        assert_eq!(sorted(&shards), sorted(&slots));
        assert_eq!(sorted(&shards).len(), 3);
    }

    /// The failed primary and the replica that took over its slots (5461-10922), as `CLUSTER
    /// NODES` of a failover fixture names them.
    fn dead_and_promoted(nodes_text: &str) -> (NodeAddr, NodeAddr) {
        let nodes = cluster_nodes(nodes_text);
        let dead = nodes.iter().find(|n| n.flags.iter().any(|f| f == "fail")).unwrap();
        let promoted = nodes.iter().find(|n| n.primary_id.is_none() && n.slots.contains(&(5461..=10922))).unwrap();
        (dead.addr.clone(), promoted.addr.clone())
    }

    /// Each map (from SHARDS and from SLOTS of one failover) routes the failed primary's slots to
    /// its heir and names the failed node nowhere.
    fn assert_the_heir_serves_and_the_dead_primary_is_gone(maps: [&SlotMap; 2], nodes_text: &str) {
        let (dead, promoted) = dead_and_promoted(nodes_text);
        for map in maps {
            assert_matches_nodes(map, nodes_text, true);
            assert!(map.is_fully_covered());
            assert!(map.primaries().all(|p| *p != dead));
            assert!(map.shards().all(|s| s.replicas.iter().all(|r| r.addr != dead)));
            assert_eq!(map.primary(5461), Some(&promoted));
            assert_eq!(map.primary(10922), Some(&promoted));
            assert!(map.shard(7000).unwrap().replicas.is_empty(), "the promoted node's old primary is dead");
        }
    }

    #[test]
    fn after_a_failover_the_promoted_replica_serves_and_the_dead_primary_is_gone() {
        let nodes_text = include_str!("testdata/cluster_nodes_failover.txt");
        let shards =
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_failover.resp")), &seed()).unwrap();
        let slots =
            SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots_failover.resp")), &seed()).unwrap();
        assert_the_heir_serves_and_the_dead_primary_is_gone([&shards, &slots], nodes_text);
    }

    /// Valkey 8 differs from Redis 7.0 here: the failed primary stays in its shard, still a
    /// primary, beside the replica that took its slots (Redis moves it to a slotless shard).
    #[test]
    fn valkey_after_a_failover_the_dead_primary_in_the_heirs_shard_serves_nothing() {
        let nodes_text = include_str!("testdata/valkey_cluster_nodes_failover.txt");
        let (dead, promoted) = dead_and_promoted(nodes_text);
        let reply = decode(include_bytes!("testdata/valkey_cluster_shards_failover.resp"));
        // The fixture shows what this test is about: one shard, two primaries, one failed.
        let shared = array(&reply, "")
            .unwrap()
            .iter()
            .map(|shard| read_shard(shard, &seed(), false).unwrap())
            .find(|(slots, _)| slots.contains(&(5461..=10922)))
            .unwrap();
        let primaries: Vec<(NodeAddr, Health)> =
            shared.1.iter().filter(|n| n.is_primary).map(|n| (n.node.clone().unwrap().addr, n.health)).collect();
        assert_eq!(primaries.len(), 2, "{primaries:?}");
        assert!(primaries.contains(&(dead.clone(), Health::Failed)), "{primaries:?}");
        assert!(primaries.contains(&(promoted.clone(), Health::Online)), "{primaries:?}");

        let shards = SlotMap::from_shards(&reply, &seed()).unwrap();
        let slots =
            SlotMap::from_slots(&decode(include_bytes!("testdata/valkey_cluster_slots_failover.resp")), &seed())
                .unwrap();
        assert_the_heir_serves_and_the_dead_primary_is_gone([&shards, &slots], nodes_text);
        assert_eq!(shards.shard(7000).unwrap().primary.health, Health::Online);
    }

    /// One `CLUSTER SHARDS` entry for slots 0-16383 with these `(port, role, health, offset)` nodes.
    #[test]
    fn tls_clients_reach_nodes_at_their_tls_port() {
        let bulk = |text: &str| Reply::Bulk(text.as_bytes().to_vec());
        let node = |fields: &[(&str, Reply)]| {
            let mut all = vec![bulk("id"), bulk(&"a".repeat(40)), bulk("ip"), bulk("10.0.0.1")];
            all.extend(fields.iter().flat_map(|(k, v)| [bulk(k), v.clone()]));
            all.extend([bulk("role"), bulk("master"), bulk("health"), bulk("online")]);
            Reply::Array(all)
        };
        let shard = |node: Reply| {
            let slots = Reply::Array(vec![Reply::Integer(0), Reply::Integer(16383)]);
            Reply::Array(vec![Reply::Array(vec![bulk("slots"), slots, bulk("nodes"), Reply::Array(vec![node])])])
        };
        let seed = NodeAddr::new("10.0.0.1", 7000);
        let both = shard(node(&[("port", Reply::Integer(7000)), ("tls-port", Reply::Integer(17000))]));
        let port_of = |map: &SlotMap| map.shard(0).unwrap().primary.addr.port;
        assert_eq!(port_of(&SlotMap::from_shards(&both, &seed).unwrap()), 7000);
        assert_eq!(port_of(&SlotMap::from_shards_over(&both, &seed, true).unwrap()), 17000);
        // tls-cluster yes with `port 0`: the node announces only its TLS port.
        let tls_only = shard(node(&[("tls-port", Reply::Integer(17000))]));
        assert_eq!(port_of(&SlotMap::from_shards_over(&tls_only, &seed, true).unwrap()), 17000);
        assert!(SlotMap::from_shards(&tls_only, &seed).is_err(), "no node a plaintext client can reach");
    }

    fn one_shard(nodes: &[(i64, &str, &str, i64)]) -> Reply {
        let bulk = |text: &str| Reply::Bulk(text.as_bytes().to_vec());
        let nodes = nodes
            .iter()
            .map(|&(port, role, health, offset)| {
                Reply::Array(vec![
                    bulk("id"),
                    bulk(&format!("{port:040}")),
                    bulk("port"),
                    Reply::Integer(port),
                    bulk("ip"),
                    bulk("10.0.0.1"),
                    bulk("endpoint"),
                    bulk("10.0.0.1"),
                    bulk("role"),
                    bulk(role),
                    bulk("replication-offset"),
                    Reply::Integer(offset),
                    bulk("health"),
                    bulk(health),
                ])
            })
            .collect();
        let slots = Reply::Array(vec![Reply::Integer(0), Reply::Integer(16383)]);
        Reply::Array(vec![Reply::Array(vec![bulk("slots"), slots, bulk("nodes"), Reply::Array(nodes)])])
    }

    #[test]
    fn of_two_primaries_in_a_shard_the_online_then_the_most_replicated_owns_the_slots() {
        let seed = seed();
        let owner = |nodes: &[(i64, &str, &str, i64)]| {
            let map = SlotMap::from_shards(&one_shard(nodes), &seed).unwrap();
            assert!(map.is_fully_covered());
            assert_eq!(map.shards().count(), 1);
            let shard = map.shard(0).unwrap();
            (shard.primary.addr.port, shard.replicas.iter().map(|r| r.addr.port).collect::<Vec<_>>())
        };
        // The failed one loses whatever its offset, in either order; it is no replica either.
        assert_eq!(owner(&[(7000, "master", "fail", 900), (7001, "master", "online", 5)]), (7001, vec![]));
        assert_eq!(owner(&[(7001, "master", "online", 5), (7000, "master", "fail", 900)]), (7001, vec![]));
        // Neither reported online: the one not known to have failed.
        assert_eq!(owner(&[(7000, "master", "fail", 9), (7001, "master", "loading", 0)]), (7001, vec![]));
        // Both online (a failover in progress): the one ahead in replication; ties go to the first.
        let both = [(7000, "master", "online", 40), (7001, "master", "online", 41), (7002, "replica", "online", 41)];
        assert_eq!(owner(&both), (7001, vec![7002]));
        assert_eq!(owner(&[(7000, "master", "online", 41), (7001, "master", "online", 41)]), (7000, vec![]));
        // A lone failed primary still owns its slots until a replica takes over (Redis and Valkey).
        assert_eq!(owner(&[(7000, "master", "fail", 0), (7001, "replica", "online", 12)]), (7000, vec![7001]));
        assert!(SlotMap::from_shards(&one_shard(&[(7001, "replica", "online", 1)]), &seed).is_err());
    }

    #[test]
    fn slots_a_node_dropped_are_uncovered() {
        let seed = seed();
        for map in [
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_uncovered.resp")), &seed).unwrap(),
            SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots_uncovered.resp")), &seed).unwrap(),
        ] {
            assert_matches_nodes(&map, include_str!("testdata/cluster_nodes_uncovered.txt"), true);
            assert_eq!(map.uncovered_slots(), vec![0..=99]);
            assert!(!map.is_fully_covered());
            assert_eq!(map.primary(0), None);
            assert_eq!(map.primary(99), None);
            assert!(map.shard(50).is_none());
            assert_eq!(map.primary(100), Some(&seed));
        }
    }

    #[test]
    fn an_unknown_endpoint_means_the_host_we_asked() {
        let asked = NodeAddr::new("lb.example", 21000);
        let shards =
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_unknown-endpoint.resp")), &asked)
                .unwrap();
        let slots =
            SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots_unknown-endpoint.resp")), &asked)
                .unwrap();
        for map in [&shards, &slots] {
            assert!(map.is_fully_covered());
            let mut ports: Vec<u16> = map.primaries().map(|p| p.port).collect();
            ports.sort();
            assert_eq!(ports, [21000, 21001, 21002]);
            for shard in map.shards() {
                assert_eq!(shard.primary.addr.host, "lb.example");
                assert!(shard.replicas.iter().all(|r| r.addr.host == "lb.example"));
                assert_eq!(shard.replicas.len(), 1);
            }
        }
        assert_eq!(slots.primary(key_slot(b"foo")), Some(&NodeAddr::new("lb.example", 21002)));
    }

    #[test]
    fn a_missing_hostname_falls_back_to_the_nodes_ip_not_to_the_seed() {
        let asked = NodeAddr::new("lb.example", 21000);
        let shards =
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_hostname.resp")), &asked).unwrap();
        let slots =
            SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots_hostname.resp")), &asked).unwrap();
        for map in [&shards, &slots] {
            assert!(map.is_fully_covered());
            for shard in map.shards() {
                assert_eq!(shard.primary.addr.host, "127.0.0.1");
                assert!(shard.replicas.iter().all(|r| r.addr.host == "127.0.0.1"));
            }
        }
        // Without the ip metadata (as an older server would send it), `?` is unreachable.
        let bare = Reply::Array(vec![Reply::Array(vec![
            Reply::Integer(0),
            Reply::Integer(16383),
            Reply::Array(vec![Reply::Bulk(b"?".to_vec()), Reply::Integer(7000)]),
        ])]);
        let err = SlotMap::from_slots(&bare, &asked).unwrap_err();
        assert!(err.contains("no address a client can use") && err.contains("lb.example:21000"), "{err}");
    }

    #[test]
    fn moved_patches_one_slot_and_counts_versions() {
        let mut map = SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards.resp")), &seed()).unwrap();
        let foo = key_slot(b"foo");
        let old = map.primary(foo).unwrap().clone();
        let other = map.primaries().find(|p| **p != old).unwrap().clone();
        assert!(!map.apply_moved(foo, &old), "already there: no change");
        assert_eq!(map.version(), 0);
        assert!(map.apply_moved(foo, &other));
        assert_eq!(map.version(), 1);
        assert_eq!(map.primary(foo), Some(&other));
        assert_eq!(map.primary(foo - 1), Some(&old), "neighbours stay");
        assert_eq!(map.primary(foo + 1), Some(&old), "neighbours stay");
        assert_eq!(map.ranges().count(), 5, "the owner's range split around the moved slot");

        let newcomer = NodeAddr::new("::1", 7009);
        assert!(map.apply_moved(0, &newcomer));
        assert_eq!(map.primary(0), Some(&newcomer));
        assert_eq!(map.shard(0).unwrap().primary.health, Health::Unknown);
        assert_eq!(map.primaries().count(), 4);
        assert_eq!(map.version(), 2);

        // Moving the newcomer's only slot back retires it from the primaries.
        assert!(map.apply_moved(0, &seed()));
        assert_eq!(map.primaries().count(), 3);
        assert!(!map.apply_moved(SLOT_COUNT, &newcomer), "out-of-range slots are ignored");

        let fresh = SlotMap::from_slots(&decode(include_bytes!("testdata/cluster_slots.resp")), &seed()).unwrap();
        map.update_from(fresh);
        assert_eq!(map.version(), 4);
        assert_eq!(map.primary(foo), Some(&old));
    }

    #[test]
    fn moved_to_ever_new_addresses_keeps_the_map_bounded() {
        let mut map = SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards.resp")), &seed()).unwrap();
        let before = map.shards.len();
        for i in 0..20_000u32 {
            let node = NodeAddr::new(format!("10.9.{}.{}", i / 250, i % 250), 7000);
            assert!(map.apply_moved((i % 3) as u16, &node));
            assert_eq!(map.primary((i % 3) as u16), Some(&node));
        }
        assert!(map.shards.len() <= before + 3 + 1, "{} shards after 20000 MOVEDs", map.shards.len());
        assert_eq!(map.primaries().count(), 3 + 3, "the three moved slots and the original primaries");
        assert!(map.is_fully_covered());
    }

    #[test]
    fn moved_fills_an_uncovered_slot() {
        let mut map =
            SlotMap::from_shards(&decode(include_bytes!("testdata/cluster_shards_uncovered.resp")), &seed()).unwrap();
        assert!(map.apply_moved(5, &seed()));
        assert_eq!(map.uncovered_slots(), vec![0..=4, 6..=99]);
    }

    #[test]
    fn older_servers_ask_for_cluster_slots() {
        assert!(SlotMap::shards_unsupported(&Reply::Error(
            b"ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.".to_vec()
        )));
        assert!(SlotMap::shards_unsupported(&Reply::Error(
            b"ERR Unknown subcommand or wrong number of arguments for 'SHARDS'. Try CLUSTER HELP.".to_vec()
        )));
        assert!(!SlotMap::shards_unsupported(&Reply::Error(
            b"ERR This instance has cluster support disabled".to_vec()
        )));
        assert!(!SlotMap::shards_unsupported(&Reply::Array(vec![])));
    }

    #[test]
    fn refuses_replies_that_do_not_describe_a_cluster() {
        let seed = seed();
        let disabled = Reply::Error(b"ERR This instance has cluster support disabled".to_vec());
        let err = SlotMap::from_shards(&disabled, &seed).unwrap_err();
        assert!(err.contains("cluster support disabled") && err.contains("127.0.0.1:21000"), "{err}");
        assert!(SlotMap::from_slots(&disabled, &seed).unwrap_err().contains("cluster support disabled"));

        let node = |port: i64| Reply::Array(vec![Reply::Bulk(b"10.0.0.1".to_vec()), Reply::Integer(port)]);
        let range =
            |lo: i64, hi: i64, port: i64| Reply::Array(vec![Reply::Integer(lo), Reply::Integer(hi), node(port)]);
        let overlapping = Reply::Array(vec![range(0, 10, 7000), range(10, 20, 7001)]);
        let err = SlotMap::from_slots(&overlapping, &seed).unwrap_err();
        assert!(err.contains("slot 10 is claimed by both 10.0.0.1:7000 and 10.0.0.1:7001"), "{err}");
        for bad in [range(0, 16384, 7000), range(5, 4, 7000), range(-1, 4, 7000), range(0, 1, 0), range(0, 1, 65536)] {
            assert!(SlotMap::from_slots(&Reply::Array(vec![bad.clone()]), &seed).is_err(), "{bad:?}");
        }
        // The same primary over several ranges is one shard.
        let split = SlotMap::from_slots(&Reply::Array(vec![range(0, 10, 7000), range(20, 30, 7000)]), &seed).unwrap();
        assert_eq!(split.primaries().count(), 1);
        assert_eq!(split.uncovered_slots(), vec![11..=19, 31..=16383]);

        // A shard entry with an odd-length slots list, or without a primary.
        let shard = |slots: Vec<i64>, role: &str| {
            let node = Reply::Array(
                [
                    ("id", Reply::Bulk(b"abc".to_vec())),
                    ("port", Reply::Integer(7000)),
                    ("ip", Reply::Bulk(b"10.0.0.1".to_vec())),
                    ("endpoint", Reply::Bulk(b"10.0.0.1".to_vec())),
                    ("role", Reply::Bulk(role.as_bytes().to_vec())),
                    ("health", Reply::Bulk(b"online".to_vec())),
                ]
                .into_iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.as_bytes().to_vec()), v])
                .collect(),
            );
            Reply::Array(vec![Reply::Array(vec![
                Reply::Bulk(b"slots".to_vec()),
                Reply::Array(slots.into_iter().map(Reply::Integer).collect()),
                Reply::Bulk(b"nodes".to_vec()),
                Reply::Array(vec![node]),
            ])])
        };
        let ok = SlotMap::from_shards(&shard(vec![0, 16383], "master"), &seed).unwrap();
        assert_eq!(ok.primary(16383), Some(&NodeAddr::new("10.0.0.1", 7000)));
        assert!(SlotMap::from_shards(&shard(vec![0], "master"), &seed).unwrap_err().contains("odd length"));
        assert!(SlotMap::from_shards(&shard(vec![0, 5], "replica"), &seed).unwrap_err().contains("has no primary"));
        assert!(SlotMap::from_shards(&shard(vec![0, 5], "leader"), &seed).unwrap_err().contains("role"));
        // A shard without slots (a failed primary after its replica took over) is no error.
        let idle = SlotMap::from_shards(&shard(vec![], "master"), &seed).unwrap();
        assert_eq!(idle.primaries().count(), 0);
        assert_eq!(idle.uncovered_slots(), vec![0..=16383]);
    }
}
