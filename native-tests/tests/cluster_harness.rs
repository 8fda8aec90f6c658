//! The cluster harness and the cluster routing code against a real local Redis Cluster: the slot
//! map read from the servers, and the slots computed here, must agree with where the servers
//! really put keys.

use lmcache_resp_core::internals::cluster::{NodeAddr, SlotMap, key_slot};
use lmcache_resp_core::internals::resp::Reply;
use redis_harness::{ClusterNode, RedisCluster};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn slot_map(cluster: &RedisCluster, node: &ClusterNode) -> SlotMap {
    SlotMap::from_shards(&cluster.command(node, &[b"CLUSTER", b"SHARDS"]), &node.addr()).expect("CLUSTER SHARDS")
}

fn addrs(nodes: &[ClusterNode]) -> BTreeSet<NodeAddr> {
    nodes.iter().map(ClusterNode::addr).collect()
}

/// Keys with and without hash tags, some sharing a tag.
fn keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..24).map(|i| format!("lmcache@model@0@{i:04x}")).collect();
    keys.extend(
        ["foo", "bar", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap"].map(String::from),
    );
    keys
}

#[test]
fn every_slot_is_served_and_keys_land_where_key_slot_and_the_map_say() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 0);
    let seed = &cluster.nodes()[0];

    let slots =
        SlotMap::from_slots(&cluster.command(seed, &[b"CLUSTER", b"SLOTS"]), &seed.addr()).expect("CLUSTER SLOTS");
    assert!(slots.is_fully_covered(), "uncovered: {:?}", slots.uncovered_slots());
    assert_eq!(slots.primaries().cloned().collect::<BTreeSet<_>>(), addrs(cluster.nodes()));
    assert_eq!(addrs(&cluster.primaries()), addrs(cluster.nodes()));
    assert!(cluster.replicas().is_empty());
    let shards = slot_map(&cluster, seed);
    for slot in 0..16384 {
        assert_eq!(shards.primary(slot), slots.primary(slot), "slot {slot}");
    }

    for (i, key) in keys().iter().enumerate() {
        let value = format!("value-{i}");
        // redis-cli -c follows MOVED like any cluster client: the server decides where it lands.
        assert_eq!(cluster.cli(&["SET", key, &value]).trim(), "OK");
        let slot = key_slot(key.as_bytes());
        assert_eq!(cluster.command(seed, &[b"CLUSTER", b"KEYSLOT", key.as_bytes()]), Reply::Integer(i64::from(slot)));
        let owner = slots.primary(slot).expect("covered");
        for node in cluster.nodes() {
            let reply = cluster.command(node, &[b"GET", key.as_bytes()]);
            if node.addr() == *owner {
                assert_eq!(reply, Reply::Bulk(value.clone().into_bytes()), "{key} on its predicted owner {owner}");
            } else {
                assert_eq!(reply, Reply::Error(format!("MOVED {slot} {owner}").into_bytes()), "{key} on {}", node.port);
            }
        }
    }
    eprintln!("3-primary cluster test took {:.1?}", started.elapsed());
}

#[test]
fn a_replica_takes_over_when_its_primary_is_killed() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    let seed = &cluster.nodes()[0];
    assert_eq!(addrs(&cluster.primaries()), addrs(&cluster.nodes()[..3]));
    assert_eq!(addrs(&cluster.replicas()), addrs(&cluster.nodes()[3..]));

    let map = slot_map(&cluster, seed);
    assert!(map.is_fully_covered());
    let victim = cluster.nodes()[1].clone();
    let slot = (0..16384).find(|&slot| map.primary(slot) == Some(&victim.addr())).expect("the victim serves slots");
    let shard = map.shard(slot).unwrap();
    assert_eq!(shard.replicas.len(), 1);
    let heir = shard.replicas[0].addr.clone();
    let key = (0..).map(|i| format!("survivor-{i}")).find(|key| key_slot(key.as_bytes()) == slot).unwrap();
    assert_eq!(cluster.cli(&["SET", &key, "kept"]).trim(), "OK");
    // Acknowledged by the replica before the primary dies: the value must survive the failover.
    assert_eq!(cluster.command(&victim, &[b"WAIT", b"1", b"5000"]), Reply::Integer(1));

    cluster.kill(&victim);
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(15);
    loop {
        let map = slot_map(&cluster, seed);
        let ok = matches!(cluster.command(seed, &[b"CLUSTER", b"INFO"]), Reply::Bulk(info) if String::from_utf8_lossy(&info).contains("cluster_state:ok"));
        if ok && map.primary(slot) == Some(&heir) {
            assert!(map.is_fully_covered());
            assert!(map.primaries().all(|primary| *primary != victim.addr()));
            break;
        }
        assert!(Instant::now() < deadline, "no failover within 15 s; slot {slot} is on {:?}", map.primary(slot));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("failover took {:.1?} after the kill", killed.elapsed());

    assert!(addrs(&cluster.primaries()).contains(&heir));
    assert!(!addrs(&cluster.primaries()).contains(&victim.addr()));
    assert_eq!(cluster.cli(&["GET", &key]).trim(), "kept");

    cluster.stop();
    for node in cluster.nodes() {
        assert!(std::net::TcpStream::connect((node.host.as_str(), node.port)).is_err(), "{} still listens", node.port);
    }
    eprintln!("3+3 cluster test took {:.1?}", started.elapsed());
}

#[test]
fn a_password_stays_off_command_lines_and_locks_every_node() {
    let password = "cluster-s3cret-pw";
    let cluster = RedisCluster::start_with(3, 1, Some(password));
    assert_eq!(cluster.cli(&["SET", "locked", "yes"]).trim(), "OK");
    assert_eq!(cluster.cli(&["GET", "locked"]).trim(), "yes");
    // No process at all shows it: not the servers, not the cluster script's watcher.
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(!String::from_utf8_lossy(&cmdline).contains(password), "{:?}", String::from_utf8_lossy(&cmdline));
        }
    }
    for node in cluster.nodes() {
        let mut stream = std::net::TcpStream::connect((node.host.as_str(), node.port)).unwrap();
        std::io::Write::write_all(&mut stream, b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut reply = [0u8; 64];
        let n = std::io::Read::read(&mut stream, &mut reply).unwrap();
        assert!(reply[..n].starts_with(b"-NOAUTH"), "{:?}", String::from_utf8_lossy(&reply[..n]));
    }
    // The replicas authenticated to their primaries (masterauth, from the config file).
    let replicas = cluster.replicas();
    assert_eq!(replicas.len(), 3);
    for replica in &replicas {
        let Reply::Bulk(info) = cluster.command(replica, &[b"INFO", b"replication"]) else { panic!("INFO") };
        assert!(String::from_utf8_lossy(&info).contains("master_link_status:up"), "replica {}", replica.port);
    }
    assert!(cluster.seed_url().starts_with(&format!("redis://:{password}@127.0.0.1:")));
}
