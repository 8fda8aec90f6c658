//! Reads from cluster replicas (`read_from="prefer_replica"`) of values read in pieces, against
//! a real cluster of three primaries with a replica each: the pieces of one read all come from
//! the node that answered its `WATCH` (counted by each server's own `INFO commandstats`); a
//! replica that holds another value of the same length than its primary and is cut off in the
//! middle of a piece, one that answers `-MASTERDOWN` (cut off from its primary, serving no
//! stale data) or `-LOADING` (loading a full resync), and a failover in both directions under
//! reads never yield bytes of two versions, and the reads a replica failed are read again from
//! the primary. The choice of node itself is unit-tested in `rust/src/cluster/read_pick.rs`;
//! the read protocol in `rust/src/ranged/tests.rs`.

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::{Batch, BatchResult, Engine, EngineConfig, Item, Memory, Outcome};
use lmcache_resp_core::internals::cluster::{NodeAddr, key_slot, read_pick};
use lmcache_resp_core::internals::resp::Reply;
use lmcache_resp_core::settings::{Endpoint, GetPieces, ReadFrom, Settings};
use lmcache_resp_core::{ErrorKind, RawBuf};
use redis_harness::proxy::CuttingProxy;
use redis_harness::{ClusterNode, RedisCluster, pattern};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PIECE: usize = 4096;
/// Every value is read in this many pieces.
const PIECES: usize = 8;
const SIZE: usize = PIECES * PIECE;

fn engine(cluster: &RedisCluster) -> Engine {
    let seed = &cluster.nodes()[0];
    let mut settings = Settings::new(Endpoint::Tcp { host: seed.host.clone(), port: seed.port });
    settings.cluster = true;
    settings.read_from = ReadFrom::PreferReplica;
    settings.num_workers = 2;
    settings.get_piece_bytes = GetPieces::Bytes(PIECE);
    settings.timeout = Duration::from_secs(10);
    Engine::start(EngineConfig::new(settings)).unwrap()
}

fn run(engine: &Engine, op: Op, keys: &[Vec<u8>], buffers: &mut [Vec<u8>]) -> BatchResult {
    let items: Vec<Item<'_>> = keys
        .iter()
        .zip(buffers.iter_mut())
        .map(|(key, buf)| {
            // SAFETY: the buffers outlive the batch, which completes before they are read.
            Item { key, memory: Memory::Buffer(unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }) }
        })
        .collect();
    engine.run(Batch::new(op, &items)).unwrap()
}

fn store(engine: &Engine, keys: &[Vec<u8>], values: &[Vec<u8>]) {
    let stored = run(engine, Op::Set, keys, &mut values.to_vec());
    assert!(stored.all_succeeded(), "{:?}", stored.outcomes);
}

/// Reads `keys` into fresh buffers of [`SIZE`]; the outcomes and the bytes.
fn read(engine: &Engine, keys: &[Vec<u8>]) -> (Vec<Outcome>, Vec<Vec<u8>>) {
    let mut got = vec![vec![0u8; SIZE]; keys.len()];
    let result = run(engine, Op::Get, keys, &mut got);
    (result.outcomes, got)
}

/// The two versions of key `i` of a test: of the same length, different in every piece.
fn version(i: usize, which: u64) -> Vec<u8> {
    pattern(SIZE, 1000 * which + i as u64)
}

/// Every outcome a whole hit of one of the key's versions; returns which version each was.
fn whole_versions(outcomes: &[Outcome], got: &[Vec<u8>], versions: &[&[Vec<u8>]]) -> Vec<usize> {
    outcomes
        .iter()
        .zip(got)
        .enumerate()
        .map(|(i, (outcome, bytes))| {
            assert_eq!(*outcome, Outcome::Hit(SIZE), "key {i}");
            versions
                .iter()
                .position(|values| values[i] == *bytes)
                .unwrap_or_else(|| panic!("key {i}: bytes of no version of it (pieces of two versions?)"))
        })
        .collect()
}

fn info(cluster: &RedisCluster, node: &ClusterNode, section: &str) -> HashMap<String, String> {
    let Reply::Bulk(text) = cluster.command(node, &[b"INFO", section.as_bytes()]) else { panic!("INFO {section}") };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// How many times `node` ran `command` since its stats were last reset.
fn calls(cluster: &RedisCluster, node: &ClusterNode, command: &str) -> u64 {
    info(cluster, node, "commandstats")
        .get(&format!("cmdstat_{command}"))
        .map_or(0, |stat| stat.split(',').find_map(|part| part.strip_prefix("calls=")).unwrap().parse().unwrap())
}

fn ok(cluster: &RedisCluster, node: &ClusterNode, args: &[&[u8]]) {
    assert_eq!(cluster.command(node, args), Reply::Simple(b"OK".to_vec()), "{node:?}: {args:?}");
}

/// The primary `replica` replicates from.
fn primary_of(cluster: &RedisCluster, replica: &ClusterNode) -> ClusterNode {
    let port: u16 = info(cluster, replica, "replication")["master_port"].parse().unwrap();
    cluster.nodes().iter().find(|n| n.port == port).unwrap().clone()
}

/// Until every connected replica has applied all its primary sent.
fn wait_replicated(cluster: &RedisCluster) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for primary in cluster.primaries() {
        loop {
            let replication = info(cluster, &primary, "replication");
            let offset = &replication["master_repl_offset"];
            let caught_up = replication
                .iter()
                .filter(|(k, _)| k.starts_with("slave") && k[5..].bytes().all(|b| b.is_ascii_digit()))
                .all(|(_, v)| v.split(',').any(|part| part == format!("offset={offset}")));
            if caught_up {
                break;
            }
            assert!(Instant::now() < deadline, "the replicas of {} did not catch up", primary.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `replica` stops replicating, for good until [`reattach`]: its link is cut and cannot come
/// back (it authenticates with a password its primary does not have).
fn cut_off(cluster: &RedisCluster, replica: &ClusterNode) {
    ok(cluster, replica, &[b"CONFIG", b"SET", b"masterauth", b"not-the-password"]);
    cluster.command(replica, &[b"CLIENT", b"KILL", b"TYPE", b"master"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info(cluster, replica, "replication")["master_link_status"] != "down" {
        assert!(Instant::now() < deadline, "the replica's link did not go down");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn reattach(cluster: &RedisCluster, replica: &ClusterNode) {
    ok(cluster, replica, &[b"CONFIG", b"SET", b"masterauth", b""]);
}

/// Keys whose reads go to `node` (by the engine's map and `read_pick`, all nodes up).
fn keys_read_from(engine: &Engine, node: &NodeAddr, tag: &str, count: usize) -> Vec<Vec<u8>> {
    let cluster = engine.cluster().unwrap();
    let map = cluster.map();
    (0..)
        .map(|i| format!("{tag}:{i}").into_bytes())
        .filter(|key| read_pick::reader(map.shard(key_slot(key)).unwrap(), key, |_| true) == node)
        .take(count)
        .collect()
}

/// The keys of one shard: `count` its replica serves and `count` its primary serves, with the
/// first version of each stored and replicated.
struct Shard {
    primary: ClusterNode,
    replica: ClusterNode,
    /// Read from the replica (where the map names it: at a proxy's port, if one is in front).
    on_replica: Vec<Vec<u8>>,
    on_primary: Vec<Vec<u8>>,
}

fn shard(cluster: &RedisCluster, engine: &Engine, replica: &ClusterNode, announced: u16, count: usize) -> Shard {
    let primary = primary_of(cluster, replica);
    let on_replica = keys_read_from(engine, &NodeAddr::new(replica.host.clone(), announced), "r", count);
    let on_primary = keys_read_from(engine, &primary.addr(), "p", count);
    Shard { primary, replica: replica.clone(), on_replica, on_primary }
}

/// Each server runs every piece of a read on the node that answered its `WATCH`: per node, as
/// many `GETRANGE`s as [`PIECES`] times its `EXEC`s, and a `WATCH` and a `STRLEN` per `EXEC`.
/// A piece sent to another node would show as a node with `GETRANGE`s but fewer `EXEC`s.
#[test]
fn every_piece_of_a_read_comes_from_the_node_that_answered_its_watch() {
    let cluster = RedisCluster::start(3, 1);
    let engine = engine(&cluster);
    let keys: Vec<Vec<u8>> = (0..90).map(|i| format!("one-node:{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 0)).collect();
    store(&engine, &keys, &values);
    wait_replicated(&cluster);
    for node in cluster.nodes() {
        ok(&cluster, node, &[b"CONFIG", b"RESETSTAT"]);
    }
    let (outcomes, got) = read(&engine, &keys);
    whole_versions(&outcomes, &got, &[&values]);
    let mut reads = 0;
    for node in cluster.nodes() {
        let exec = calls(&cluster, node, "exec");
        assert_eq!(calls(&cluster, node, "getrange"), PIECES as u64 * exec, "node {}", node.port);
        assert_eq!(calls(&cluster, node, "watch"), exec, "node {}", node.port);
        assert_eq!(calls(&cluster, node, "strlen"), exec, "node {}", node.port);
        assert_eq!(calls(&cluster, node, "get"), 0, "node {}", node.port);
        reads += exec;
    }
    assert_eq!(reads, keys.len() as u64, "each key read once");
    for replica in cluster.replicas() {
        assert!(calls(&cluster, &replica, "exec") > 0, "replica {} served no read", replica.port);
    }
}

/// A replica cut off from its primary holds the old value of each key; the primary holds a new
/// one of the same length (so no length check can tell them apart). A proxy in front of the
/// replica (which the cluster announces at the proxy's port) cuts a connection in the middle of
/// a piece. Every read is one whole version, never pieces of both; and the reads the cut
/// failed are read again from the primary (the new version).
#[test]
fn a_replica_holding_another_value_of_the_same_length_cut_mid_piece_yields_one_whole_version() {
    let cluster = RedisCluster::start(3, 1);
    let replica = cluster.replicas()[0].clone();
    let proxy = CuttingProxy::start(replica.port);
    let announced = proxy.port().to_string();
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"cluster-announce-port", announced.as_bytes()]);
    let listed = format!("{}:{}@", replica.host, proxy.port());
    let deadline = Instant::now() + Duration::from_secs(15);
    for node in cluster.nodes() {
        while !String::from_utf8_lossy(&cluster.raw_command(node, &[b"CLUSTER", b"NODES"])).contains(&listed) {
            assert!(Instant::now() < deadline, "node {} did not learn the replica's new port", node.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let engine = engine(&cluster);
    let shard = shard(&cluster, &engine, &replica, proxy.port(), 12);
    let keys = shard.on_replica.clone();
    let old: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 1)).collect();
    let new: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 2)).collect();
    store(&engine, &keys, &old);
    wait_replicated(&cluster);
    cut_off(&cluster, &shard.replica);
    store(&engine, &keys, &new);

    // Through the replica: the old value of every key.
    let (outcomes, got) = read(&engine, &keys);
    assert!(whole_versions(&outcomes, &got, &[&old, &new]).iter().all(|&v| v == 0), "the replica is not stale");
    // Past the probes and a few pieces, into the middle of one.
    proxy.cut_replies_after(3 * PIECE as u64 + PIECE as u64 / 2, || {});
    let (outcomes, got) = read(&engine, &keys);
    assert_eq!(proxy.cuts(), 1, "the proxy cut a connection");
    let which = whole_versions(&outcomes, &got, &[&old, &new]);
    assert!(which.contains(&1), "no read cut on the replica was read again from the primary: {which:?}");
    reattach(&cluster, &shard.replica);
}

/// A replica cut off from its primary with `replica-serve-stale-data no` answers `-MASTERDOWN`,
/// here to the `PING` of each connection's handshake (the engine opens them at the first read);
/// every read sent to it is read from the primary instead.
#[test]
fn reads_a_replica_answers_masterdown_are_read_from_the_primary() {
    let cluster = RedisCluster::start(3, 1);
    let engine = engine(&cluster);
    let replica = cluster.replicas()[0].clone();
    let shard = shard(&cluster, &engine, &replica, replica.port, 8);
    let keys = shard.on_replica.clone();
    let old: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 1)).collect();
    let new: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 2)).collect();
    store(&engine, &keys, &old);
    wait_replicated(&cluster);
    cut_off(&cluster, &replica);
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"replica-serve-stale-data", b"no"]);
    store(&engine, &keys, &new);
    ok(&cluster, &replica, &[b"CONFIG", b"RESETSTAT"]);
    let (outcomes, got) = read(&engine, &keys);
    let which = whole_versions(&outcomes, &got, &[&old, &new]);
    assert!(which.iter().all(|&v| v == 1), "every key read from the primary: {which:?}");
    let refused = info(&cluster, &replica, "errorstats").get("errorstat_MASTERDOWN").cloned();
    assert!(refused.is_some(), "the replica refused nothing: the test did not reach it");
    reattach(&cluster, &replica);
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"replica-serve-stale-data", b"yes"]);
}

/// A replica loading a full resync (slowed by `key-load-delay`) answers `-LOADING`, here on
/// connections open before; every read sent to it meanwhile is read from its primary, whole.
#[test]
fn reads_a_replica_answers_loading_are_read_from_the_primary() {
    let cluster = RedisCluster::start(3, 1);
    let engine = engine(&cluster);
    let replica = cluster.replicas()[0].clone();
    let shard = shard(&cluster, &engine, &replica, replica.port, 8);
    let keys = shard.on_replica.clone();
    let old: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 1)).collect();
    let new: Vec<Vec<u8>> = (0..keys.len()).map(|i| version(i, 2)).collect();
    store(&engine, &keys, &old);
    wait_replicated(&cluster);
    // Read once: the connections to the replica are open (a replica loading refuses new ones
    // in their handshake's PING), and it serves.
    let (outcomes, got) = read(&engine, &keys);
    whole_versions(&outcomes, &got, &[&old]);
    cut_off(&cluster, &replica);
    // More written meanwhile than the primary's backlog holds: the replica's return is a full
    // resync, and loading it takes 10 s (a quarter of a second per key the shard holds).
    ok(&cluster, &shard.primary, &[b"CONFIG", b"SET", b"repl-backlog-size", b"16384"]);
    store(&engine, &keys, &new);
    let filler = keys_read_from(&engine, &shard.primary.addr(), "filler", 32);
    store(&engine, &filler, &vec![vec![0u8; SIZE]; filler.len()]);
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"key-load-delay", b"250000"]);
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"loading-process-events-interval-bytes", b"1024"]);
    reattach(&cluster, &replica);
    let deadline = Instant::now() + Duration::from_secs(15);
    while info(&cluster, &replica, "persistence")["loading"] != "1" {
        assert!(Instant::now() < deadline, "the replica did not start loading a full resync");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (outcomes, got) = read(&engine, &keys);
    let still_loading = info(&cluster, &replica, "persistence")["loading"] == "1";
    ok(&cluster, &replica, &[b"CONFIG", b"SET", b"key-load-delay", b"0"]);
    let which = whole_versions(&outcomes, &got, &[&old, &new]);
    assert!(which.iter().all(|&v| v == 1), "every key read from the primary: {which:?}");
    assert!(still_loading, "the reads ended only once the replica had loaded: they waited for it, not the primary");
    let refused = info(&cluster, &replica, "errorstats").get("errorstat_LOADING").cloned();
    assert!(refused.is_some(), "the replica refused nothing: the test did not reach it");
}

/// `CLUSTER FAILOVER` on the replica (promoted; its primary demoted), then back, while a thread
/// reads both nodes' keys in pieces and another overwrites half of them with new versions of
/// the same length. A key never overwritten is always its own bytes; an overwritten one is one
/// whole version (an older one from a replica behind is allowed), or the documented
/// `PartialReadError` of a value replaced under three reads in a row; never pieces of two
/// versions, and nothing else fails.
#[test]
fn a_replica_promoted_and_its_primary_demoted_mid_read_never_mix_versions() {
    const VERSIONS: usize = 40;
    let cluster = RedisCluster::start(3, 1);
    let engine = Arc::new(engine(&cluster));
    let replica = cluster.replicas()[0].clone();
    let shard = shard(&cluster, &engine, &replica, replica.port, 6);
    // Even positions are overwritten; odd ones never are.
    let keys: Vec<Vec<u8>> =
        shard.on_replica.iter().zip(&shard.on_primary).flat_map(|(r, p)| [r, p]).cloned().collect();
    let versions: Arc<Vec<Vec<Vec<u8>>>> = Arc::new(
        (0..VERSIONS)
            .map(|v| (0..keys.len()).map(|i| version(i, if i % 2 == 0 { v as u64 } else { 0 })).collect())
            .collect(),
    );
    store(&engine, &keys, &versions[0]);
    wait_replicated(&cluster);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (engine, stop, versions) = (engine.clone(), stop.clone(), versions.clone());
        let mutable: Vec<Vec<u8>> = keys.iter().step_by(2).cloned().collect();
        std::thread::spawn(move || {
            for v in (1..VERSIONS).cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                // A failover may fail a write (the primary pauses writes, then answers MOVED);
                // only reads are under test.
                let mut values: Vec<Vec<u8>> = versions[v].iter().step_by(2).cloned().collect();
                let _ = run(&engine, Op::Set, &mutable, &mut values);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let reader = {
        let (engine, keys, versions, stop) = (engine.clone(), keys.clone(), versions.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                let (outcomes, got) = read(&engine, &keys);
                for (i, (outcome, bytes)) in outcomes.iter().zip(&got).enumerate() {
                    match outcome {
                        Outcome::Hit(SIZE) => {
                            assert!(versions.iter().any(|values| values[i] == *bytes), "key {i}: bytes of no version");
                        }
                        Outcome::Failed(err) if i % 2 == 0 && err.kind() == ErrorKind::PartialRead => {
                            assert!(err.message().contains("replaced or deleted while it was read in pieces"), "{err}");
                        }
                        other => panic!("key {i}: {other:?}"),
                    }
                }
                rounds += 1;
            }
            rounds
        })
    };
    let swap = |to_promote: &ClusterNode, to_demote: &ClusterNode| {
        std::thread::sleep(Duration::from_millis(300));
        let swapped = || cluster.replicas().contains(to_demote) && cluster.primaries().contains(to_promote);
        let deadline = Instant::now() + Duration::from_secs(45);
        // A manual failover gives up after 5 s when the replica cannot catch up or win its
        // election in time (a loaded machine): then it is asked again.
        while !swapped() {
            assert!(Instant::now() < deadline, "the failover to {} did not complete", to_promote.port);
            let reply = cluster.command(to_promote, &[b"CLUSTER", b"FAILOVER"]);
            let asked_at = Instant::now();
            while !swapped() && asked_at.elapsed() < Duration::from_secs(8) {
                assert_eq!(reply, Reply::Simple(b"OK".to_vec()), "CLUSTER FAILOVER");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    swap(&shard.replica, &shard.primary);
    swap(&shard.primary, &shard.replica);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let rounds = reader.join().expect("a read yielded bytes of no version, or failed");
    assert!(rounds >= 6, "{rounds} rounds of reads");
}
