//! Which node of a shard serves a read when reads may go to replicas
//! (`read_from="prefer_replica"`): pure code, no I/O.
//!
//! The candidates are the shard's primary and its replicas the cluster does not report failed
//! (`online`, or `loading`: Redis 7.0 calls a replica `loading` until it has replicated
//! anything, as the map saw it when read, which a fresh cluster's replicas stay until the next
//! refresh; one truly loading answers `-LOADING`, and the read goes to the primary), less those
//! the caller knows to be down. Each key goes to the candidate of highest rendezvous
//! weight (`xxh64(key)` seeded by the node's address, as [`super::shard`] weighs servers):
//!
//! - the choice is stable: an `EXISTS` and the `GET` that follows it go to the same node, so a
//!   replica that lags answers both alike (a miss, then no load) instead of a hit, then a miss
//!   elsewhere;
//! - every worker, and every process, picks alike without sharing a counter;
//! - a node that goes down moves only its own keys, spread over the others; the rest stay
//!   where they were read before.
//!
//! Round-robin would spread one hot key over every node, but LMCache reads each chunk once per
//! request, and many keys per batch: keys, not requests, are what needs spreading.

use super::node::NodeAddr;
use super::shard::xxh64;
use super::slot_map::{Health, Node, Shard, SlotMap};
use std::collections::HashSet;

/// The nodes keys are routed to: the map's primaries, and with `replica_reads` the replicas
/// that may serve reads. A worker keeps its connections to these, however many (see
/// `engine::route::Nodes::trim`): only other nodes (redirect targets) are forgotten when idle.
pub fn routed_nodes(map: &SlotMap, replica_reads: bool) -> HashSet<NodeAddr> {
    let mut nodes: HashSet<NodeAddr> = map.primaries().cloned().collect();
    if replica_reads {
        nodes.extend(map.shards().flat_map(|shard| shard.replicas.iter().filter(serves_reads)).map(|n| n.addr.clone()));
    }
    nodes
}

/// A replica reported online, or `loading` (see the module documentation).
fn serves_reads(node: &&Node) -> bool {
    matches!(node.health, Health::Online | Health::Loading)
}

/// The node that serves a read of `key` from `shard`; `usable` says which nodes are not known
/// to be down. When no node is usable, the primary (whose own failure then decides the read's
/// fate, as without replica reads).
pub fn reader<'a>(shard: &'a Shard, key: &[u8], usable: impl Fn(&NodeAddr) -> bool) -> &'a NodeAddr {
    let primary = &shard.primary.addr;
    let replicas = shard.replicas.iter().filter(serves_reads).map(|node| &node.addr);
    std::iter::once(primary)
        .chain(replicas)
        .filter(|addr| usable(addr))
        .max_by_key(|addr| (weight(addr, key), std::cmp::Reverse(*addr)))
        .unwrap_or(primary)
}

/// The rendezvous weight of node `addr` for `key`.
fn weight(addr: &NodeAddr, key: &[u8]) -> u64 {
    xxh64(key, xxh64(addr.host.as_bytes(), u64::from(addr.port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(port: u16, health: Health) -> Node {
        Node { addr: NodeAddr::new("127.0.0.1", port), id: None, health }
    }

    fn shard(replicas: &[(u16, Health)]) -> Shard {
        Shard {
            primary: node(7000, Health::Unknown),
            replicas: replicas.iter().map(|&(port, health)| node(port, health)).collect(),
        }
    }

    fn keys() -> impl Iterator<Item = Vec<u8>> {
        (0..3000).map(|i| format!("model@chunk-{i:05}").into_bytes())
    }

    fn counts(shard: &Shard, usable: impl Fn(&NodeAddr) -> bool) -> std::collections::BTreeMap<u16, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for key in keys() {
            *counts.entry(reader(shard, &key, &usable).port).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn keys_spread_over_the_primary_and_its_online_replicas_about_evenly() {
        let shard = shard(&[(7001, Health::Online), (7002, Health::Online)]);
        let counts = counts(&shard, |_| true);
        assert_eq!(counts.keys().copied().collect::<Vec<_>>(), [7000, 7001, 7002]);
        for (port, count) in counts {
            // 1000 expected each; xxh64 spreads within a few percent.
            assert!((850..1150).contains(&count), "{port} serves {count} of 3000 keys");
        }
    }

    #[test]
    fn the_same_key_always_goes_to_the_same_node() {
        let shard = shard(&[(7001, Health::Online), (7002, Health::Online)]);
        for key in keys().take(200) {
            let first = reader(&shard, &key, |_| true).clone();
            for _ in 0..3 {
                assert_eq!(reader(&shard, &key, |_| true), &first);
            }
        }
        // The replicas' order in the map does not matter.
        let swapped =
            Shard { primary: shard.primary.clone(), replicas: shard.replicas.iter().rev().cloned().collect() };
        for key in keys().take(200) {
            assert_eq!(reader(&shard, &key, |_| true), reader(&swapped, &key, |_| true));
        }
    }

    #[test]
    fn failed_replicas_and_those_of_unknown_health_are_skipped() {
        let shard = shard(&[(7001, Health::Failed), (7002, Health::Loading), (7003, Health::Unknown)]);
        assert_eq!(counts(&shard, |_| true).keys().copied().collect::<Vec<_>>(), [7000, 7002]);
    }

    #[test]
    fn a_node_known_down_moves_only_its_own_keys() {
        let shard = shard(&[(7001, Health::Online), (7002, Health::Online)]);
        let down = NodeAddr::new("127.0.0.1", 7001);
        for key in keys() {
            let before = reader(&shard, &key, |_| true);
            let after = reader(&shard, &key, |addr| *addr != down);
            assert_ne!(after, &down);
            if *before != down {
                assert_eq!(after, before, "a key of a live node moved");
            }
        }
        let without = counts(&shard, |addr| *addr != down);
        assert_eq!(without.keys().copied().collect::<Vec<_>>(), [7000, 7002]);
    }

    #[test]
    fn the_nodes_routed_to_are_the_primaries_and_with_replica_reads_their_replicas() {
        let bytes = include_bytes!("testdata/cluster_shards.resp");
        let (_, reply) = crate::resp::Decoder::default().decode(bytes).unwrap();
        let map = SlotMap::from_shards(&reply.unwrap(), &NodeAddr::new("127.0.0.1", 21000)).unwrap();
        let primaries: HashSet<NodeAddr> = map.primaries().cloned().collect();
        assert_eq!(primaries.len(), 3);
        assert_eq!(routed_nodes(&map, false), primaries);
        let with_replicas = routed_nodes(&map, true);
        assert_eq!(with_replicas.len(), 6);
        assert!(with_replicas.is_superset(&primaries));
        for shard in map.shards() {
            assert!(shard.replicas.iter().all(|replica| with_replicas.contains(&replica.addr)));
        }
    }

    #[test]
    fn a_sentinel_shard_spreads_reads_over_its_primary_and_the_listed_replicas() {
        let addr = |port| NodeAddr::new("127.0.0.1", port);
        // As `SENTINEL replicas` may list them: any order, once more, and just after a
        // failover the promoted primary itself.
        let map = SlotMap::single(addr(7000), vec![addr(7002), addr(7001), addr(7000), addr(7002)]);
        let shard = map.shard(0).unwrap();
        assert_eq!(shard.replicas.iter().map(|n| n.addr.clone()).collect::<Vec<_>>(), [addr(7001), addr(7002)]);
        assert_eq!(routed_nodes(&map, true), [7000, 7001, 7002].map(addr).into_iter().collect());
        assert_eq!(routed_nodes(&map, false), [addr(7000)].into_iter().collect());
        assert_eq!(counts(shard, |_| true).keys().copied().collect::<Vec<_>>(), [7000, 7001, 7002]);
        // Two discoveries that found the same nodes give the same shard (no needless update).
        assert_eq!(SlotMap::single(addr(7000), vec![addr(7001), addr(7002)]).shard(0), Some(shard));
        assert!(SlotMap::single(addr(7000), Vec::new()).shard(0).unwrap().replicas.is_empty());
    }

    #[test]
    fn with_every_node_down_the_primary_is_chosen() {
        let shard = shard(&[(7001, Health::Online)]);
        assert_eq!(counts(&shard, |_| false).keys().copied().collect::<Vec<_>>(), [7000]);
        // A primary known down is skipped while a replica can serve the read.
        let primary = shard.primary.addr.clone();
        assert_eq!(counts(&shard, |addr| *addr != primary).keys().copied().collect::<Vec<_>>(), [7001]);
    }
}
