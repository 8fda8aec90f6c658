//! The engine past one server: a real Redis Cluster (routing, MOVED/ASK during a live reshard,
//! a primary killed and its replica promoted) and independent servers (static sharding), with
//! every byte verified; and the clear errors for bad cluster input.

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::engine::Resolver;
use lmcache_resp_core::engine::{Batch, BatchResult, Engine, EngineConfig, Item, Memory};
use lmcache_resp_core::internals::cluster::{Rendezvous, SLOT_COUNT, key_slot};
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::settings::GetPieces;
use lmcache_resp_core::settings::Settings;
use lmcache_resp_core::{ErrorKind, RawBuf};
use redis_harness::with_io_backend_from_env;
use redis_harness::{ClusterNode, RedisCluster, RedisServer, dead_port, pattern};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tcp(port: u16) -> Endpoint {
    Endpoint::Tcp { host: "127.0.0.1".into(), port }
}

fn cluster_settings(cluster: &RedisCluster) -> Settings {
    let mut settings = with_io_backend_from_env(Settings::new(tcp(cluster.nodes()[0].port)));
    settings.endpoints = cluster.nodes().iter().map(|n| tcp(n.port)).collect();
    settings.cluster = true;
    settings.num_workers = 3;
    settings.timeout = Duration::from_secs(15);
    settings
}

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{prefix}:{i}").into_bytes()).collect()
}

fn run(engine: &Engine, op: Op, keys: &[Vec<u8>], buffers: &mut [Vec<u8>]) -> BatchResult {
    let items: Vec<Item<'_>> = if buffers.is_empty() {
        keys.iter().map(|k| Item::key_only(k)).collect()
    } else {
        keys.iter()
            .zip(buffers.iter_mut())
            .map(|(key, buf)| {
                // SAFETY: the buffers outlive the batch, which completes before they are read.
                Item { key, memory: Memory::Buffer(unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }) }
            })
            .collect()
    };
    engine.run(Batch::new(op, &items)).unwrap()
}

fn round_trip(engine: &Engine, keys: &[Vec<u8>], seed: u64, size: usize) {
    let mut values: Vec<Vec<u8>> = (0..keys.len()).map(|i| pattern(size, seed + i as u64)).collect();
    let stored = run(engine, Op::Set, keys, &mut values);
    assert!(stored.all_succeeded(), "{:?}", stored.outcomes.iter().find(|o| !o.is_success()));
    let mut got: Vec<Vec<u8>> = (0..keys.len()).map(|_| vec![0u8; size]).collect();
    let read = run(engine, Op::Get, keys, &mut got);
    assert!(
        read.outcomes.iter().all(|o| *o == Outcome::Hit(size)),
        "{:?}",
        read.outcomes.iter().find(|o| **o != Outcome::Hit(size))
    );
    assert!(got == values, "bytes read back differ");
}

fn dbsize(cluster: &RedisCluster, node: &ClusterNode) -> usize {
    let reply = cluster.raw_command(node, &[b"DBSIZE"]);
    String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().unwrap()
}

#[test]
fn a_cluster_routes_every_key_to_its_slots_primary() {
    let cluster = RedisCluster::start(3, 0);
    let engine = Engine::start(EngineConfig::new(cluster_settings(&cluster))).unwrap();
    let keys = keys("cl", 600);
    round_trip(&engine, &keys, 1, 10_000);
    let exists = run(&engine, Op::Exists, &keys, &mut []);
    assert!(exists.outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    // Each key is on the primary that serves its slot, and only there.
    let sizes: Vec<usize> = cluster.nodes().iter().map(|n| dbsize(&cluster, n)).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 600, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n > 100), "every primary holds its share: {sizes:?}");
    for key in keys.iter().step_by(37) {
        let slot = key_slot(key);
        let owner = cluster.nodes().iter().filter(|n| cluster.raw_command(n, &[b"EXISTS", key]) == b":1\r\n").count();
        assert_eq!(owner, 1, "key in slot {slot} is on exactly one node");
    }
    let deleted = run(&engine, Op::Del, &keys, &mut []);
    assert!(deleted.outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    assert_eq!(cluster.nodes().iter().map(|n| dbsize(&cluster, n)).sum::<usize>(), 0);
}

#[test]
fn a_live_reshard_loses_no_key_and_reads_no_wrong_byte() {
    live_reshard(0);
}

/// The same with every value read in pieces: MOVED and ASK in the middle of a value start its
/// read over where the key lives, behind ASKING while its slot is being imported.
#[test]
fn a_live_reshard_in_the_middle_of_values_read_in_pieces_reads_no_wrong_byte() {
    live_reshard(4096);
}

fn live_reshard(piece_bytes: usize) {
    let cluster = RedisCluster::start(3, 0);
    let mut settings = cluster_settings(&cluster);
    settings.get_piece_bytes = GetPieces::Bytes(piece_bytes);
    let engine = Arc::new(Engine::start(EngineConfig::new(settings)).unwrap());
    let keys = keys("reshard", 400);
    let size = 20_000;
    round_trip(&engine, &keys, 100, size);
    let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| pattern(size, 100 + i as u64)).collect();
    // Move 3000 slots from the first primary to the second while batches run.
    let (rounds, out) = cluster.reshard_while(0, 1, 3000, {
        let (engine, keys, values) = (engine.clone(), keys.clone(), values.clone());
        move |round| {
            let mut got: Vec<Vec<u8>> = (0..keys.len()).map(|_| vec![0u8; size]).collect();
            let read = run(&engine, Op::Get, &keys, &mut got);
            for (i, outcome) in read.outcomes.iter().enumerate() {
                assert_eq!(*outcome, Outcome::Hit(size), "key {i} during the reshard (round {round})");
                assert!(got[i] == values[i], "key {i}: wrong bytes during the reshard");
            }
        }
    });
    assert!(rounds >= 3, "{rounds} rounds");
    assert!(out.contains("Moving slot"), "{out}");
    // Writes go to the new owners too.
    round_trip(&engine, &keys, 100, size);
    assert!(engine.cluster().unwrap().refreshes() > 0, "MOVED made the engine re-read the map");
}

/// `MOVED` and `ASK` answered to a read in pieces count in `stats()` as a whole GET's do
/// (issue #26: a reshard's 808 `ASK`s reached the server, none the counters).
#[test]
fn redirects_of_reads_in_pieces_count_in_stats() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes().to_vec();
    let mut settings = cluster_settings(&cluster);
    settings.num_workers = 1;
    settings.get_piece_bytes = GetPieces::Bytes(4096);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let owner = |slot: u16| engine.cluster().unwrap().map().primary(slot).unwrap().clone();
    let slot = (1..SLOT_COUNT).find(|&s| owner(s) == nodes[0].addr()).unwrap();
    let key = key_in(slot, "pieces");
    let mut value = vec![pattern(5 * 4096 + 7, 21)];
    assert!(run(&engine, Op::Set, std::slice::from_ref(&key), &mut value).all_succeeded());
    let redirects = || {
        let stats = engine.stats();
        (stats.endpoints.iter().map(|e| e.moved).sum::<u64>(), stats.endpoints.iter().map(|e| e.ask).sum::<u64>())
    };
    let read = || {
        let mut got = vec![vec![0u8; value[0].len()]];
        assert_eq!(
            run(&engine, Op::Get, std::slice::from_ref(&key), &mut got).outcomes,
            [Outcome::Hit(value[0].len())]
        );
        assert!(got == value, "the bytes read after the redirect");
    };
    assert_eq!(redirects(), (0, 0));
    // The key's slot is being migrated to the second node and the key has gone there: the
    // first node answers ASK.
    start_moving_slot(&cluster, slot, &[&key], &nodes[0], &nodes[1]);
    read();
    let (moved, ask) = redirects();
    assert!(ask >= 1 && moved == 0, "moved {moved}, ask {ask}");
    // The slot belongs to the second node now; the engine's map still names the first: MOVED.
    finish_moving_slot(&cluster, slot, &nodes[0], &nodes[1]);
    read();
    let (moved, ask_after) = redirects();
    assert!(moved >= 1 && ask_after == ask, "moved {moved}, ask {ask_after}");
}

/// With `ttl_seconds`, a SET answered `ASK` (its slot being migrated, the key not on the old
/// node yet) and a SET answered `MOVED` (the slot moved since the engine read the map) are
/// stored where the redirect points with their `PX`: a redirected SET without it would store
/// the value there for good (`PTTL` -1).
#[test]
fn a_set_redirected_by_ask_or_moved_carries_its_expiry() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes().to_vec();
    let mut settings = cluster_settings(&cluster);
    settings.num_workers = 1;
    settings.ttl = Some(Duration::from_secs(600));
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let owner = |slot: u16| engine.cluster().unwrap().map().primary(slot).unwrap().clone();
    let mut slots = (1..SLOT_COUNT).filter(|&s| owner(s) == nodes[0].addr());
    let (asked, moved) = (slots.next().unwrap(), slots.next().unwrap());
    let redirects = || {
        let stats = engine.stats();
        (stats.endpoints.iter().map(|e| e.moved).sum::<u64>(), stats.endpoints.iter().map(|e| e.ask).sum::<u64>())
    };
    let pttl = |node: &ClusterNode, key: &[u8]| -> i64 {
        let reply = cluster.raw_command(node, &[b"PTTL", key]);
        String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().unwrap()
    };
    let set = |key: &[u8]| {
        let mut value = vec![pattern(5000, 3)];
        assert!(run(&engine, Op::Set, &[key.to_vec()], &mut value).all_succeeded());
    };

    start_moving_slot(&cluster, asked, &[], &nodes[0], &nodes[1]);
    let key = key_in(asked, "ask");
    set(&key);
    assert_eq!(redirects(), (0, 1), "(moved, ask)");
    finish_moving_slot(&cluster, asked, &nodes[0], &nodes[1]);
    let left = pttl(&nodes[1], &key);
    assert!(0 < left && left <= 600_000, "after ASK: PTTL {left}");

    move_empty_slot(&cluster, moved, &nodes[0], &nodes[1]);
    let key = key_in(moved, "moved");
    set(&key);
    assert_eq!(redirects(), (1, 1), "(moved, ask)");
    let left = pttl(&nodes[1], &key);
    assert!(0 < left && left <= 600_000, "after MOVED: PTTL {left}");
}

#[test]
fn a_killed_primary_ends_in_success_or_a_clear_error_never_a_hang() {
    let cluster = RedisCluster::start(3, 1);
    let mut settings = cluster_settings(&cluster);
    settings.timeout = Duration::from_secs(8);
    let engine = Arc::new(Engine::start(EngineConfig::new(settings)).unwrap());
    let keys = keys("failover", 300);
    round_trip(&engine, &keys, 7, 4096);
    // Wait until the replicas hold every key (replication is asynchronous).
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.replicas().iter().map(|n| dbsize(&cluster, n)).sum::<usize>() < 300 {
        assert!(Instant::now() < deadline, "replicas did not catch up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let victim = cluster.primaries()[0].clone();
    cluster.kill(&victim);
    let started = Instant::now();
    let mut saw_failure = false;
    loop {
        let mut got: Vec<Vec<u8>> = (0..keys.len()).map(|_| vec![0u8; 4096]).collect();
        let batch_started = Instant::now();
        let read = run(&engine, Op::Get, &keys, &mut got);
        assert!(batch_started.elapsed() < Duration::from_secs(8 + 6), "a batch outlived its timeout");
        let mut all_good = true;
        for (i, outcome) in read.outcomes.iter().enumerate() {
            match outcome {
                Outcome::Hit(4096) => assert_eq!(got[i], pattern(4096, 7 + i as u64), "key {i}: wrong bytes"),
                Outcome::Failed(err) => {
                    saw_failure = true;
                    all_good = false;
                    assert!(
                        matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout | ErrorKind::Server),
                        "{err}"
                    );
                }
                other => panic!("key {i}: {other:?} (lost in the failover?)"),
            }
        }
        if all_good {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the cluster never recovered");
    }
    eprintln!("every key readable {:.1?} after the kill (a key failed on the way: {saw_failure})", started.elapsed());
    round_trip(&engine, &keys, 900, 4096);
}

#[test]
fn independent_servers_share_the_keys_by_rendezvous_hashing() {
    let mut servers = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
    let mut settings = with_io_backend_from_env(Settings::new(servers[0].endpoint()));
    settings.endpoints = servers.iter().map(RedisServer::endpoint).collect();
    settings.num_workers = 2;
    settings.timeout = Duration::from_secs(3);
    let engine = Engine::start(EngineConfig::new(settings.clone())).unwrap();
    let keys = keys("shard", 900);
    round_trip(&engine, &keys, 5, 2000);
    let rendezvous = Rendezvous::new(settings.endpoints.iter().map(ToString::to_string)).unwrap();
    for (i, key) in keys.iter().enumerate() {
        let home = rendezvous.pick(key);
        for (s, server) in servers.iter().enumerate() {
            let expected: &[u8] = if s == home { b":1\r\n" } else { b":0\r\n" };
            assert_eq!(server.raw_command(&[b"EXISTS", key]), expected, "key {i} on server {s}");
        }
    }
    let counts: Vec<usize> = (0..3).map(|s| keys.iter().filter(|k| rendezvous.pick(k) == s).count()).collect();
    assert!(counts.iter().all(|&n| (250..=350).contains(&n)), "{counts:?}");
    // One shard down: its keys fail clearly and at once-ish, the others' still work.
    servers[1].kill();
    let mut got: Vec<Vec<u8>> = (0..keys.len()).map(|_| vec![0u8; 2000]).collect();
    let started = Instant::now();
    let read = run(&engine, Op::Get, &keys, &mut got);
    assert!(started.elapsed() < Duration::from_secs(5));
    for (i, outcome) in read.outcomes.iter().enumerate() {
        if rendezvous.pick(&keys[i]) == 1 {
            let Outcome::Failed(err) = outcome else { panic!("key {i} on the dead shard: {outcome:?}") };
            assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
        } else {
            assert_eq!(*outcome, Outcome::Hit(2000), "key {i}");
            assert_eq!(got[i], pattern(2000, 5 + i as u64));
        }
    }
}

#[test]
fn bad_cluster_input_gets_clear_errors() {
    let mut dead = with_io_backend_from_env(Settings::new(tcp(dead_port())));
    dead.cluster = true;
    let err = Engine::start(EngineConfig::new(dead)).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(err.message().starts_with("no seed node of the cluster answered: 127.0.0.1:"), "{err}");

    let plain = RedisServer::start();
    let mut settings = plain.settings();
    settings.cluster = true;
    let err = Engine::start(EngineConfig::new(settings)).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("is not a cluster node (its cluster support is disabled)"), "{err}");

    let cluster = RedisCluster::start(3, 0);
    for node in cluster.nodes() {
        cluster.raw_command(node, &[b"CLUSTER", b"DELSLOTSRANGE", b"0", b"99"]);
    }
    let err = Engine::start(EngineConfig::new(cluster_settings(&cluster))).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("leaves slots 0-99 without an owner"), "{err}");
}

/// How long the test's lookup of the host name `slow-b.test` takes.
const SLOW_LOOKUP: Duration = Duration::from_secs(2);

/// A resolver that knows two names: `slow-b.test` (127.0.0.1, after [`SLOW_LOOKUP`]) and
/// nothing else (every other name fails at once). No real DNS is asked.
fn scripted_resolver() -> Arc<Resolver> {
    Arc::new(Resolver::with_lookup(|host, port| match host {
        "slow-b.test" => {
            std::thread::sleep(SLOW_LOOKUP);
            Ok(vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))])
        }
        _ => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "not a name this test knows")),
    }))
}

fn node_id(cluster: &RedisCluster, node: &ClusterNode) -> String {
    String::from_utf8(cluster.raw_command(node, &[b"CLUSTER", b"MYID"])).unwrap()[5..45].to_string()
}

/// `node` announces `hostname`, and every node names the others by host name (in MOVED and in
/// the slot map); returns once `asked` says so.
fn announce_hostname(cluster: &RedisCluster, node: &ClusterNode, hostname: &str, asked: &ClusterNode) {
    assert_eq!(
        cluster.raw_command(node, &[b"CONFIG", b"SET", b"cluster-announce-hostname", hostname.as_bytes()]),
        b"+OK\r\n"
    );
    for each in cluster.nodes() {
        cluster.raw_command(each, &[b"CONFIG", b"SET", b"cluster-preferred-endpoint-type", b"hostname"]);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !String::from_utf8_lossy(&cluster.raw_command(asked, &[b"CLUSTER", b"SLOTS"])).contains(hostname) {
        assert!(Instant::now() < deadline, "{hostname} did not reach {} by gossip", asked.port);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Moves the empty `slot` from `from` to `to`, as `redis-cli --cluster reshard` does.
fn move_empty_slot(cluster: &RedisCluster, slot: u16, from: &ClusterNode, to: &ClusterNode) {
    start_moving_slot(cluster, slot, &[], from, to);
    finish_moving_slot(cluster, slot, from, to);
}

/// Starts moving `slot` from `from` to `to` and migrates `keys` (of that slot), as
/// `redis-cli --cluster reshard` does: `from` then answers `ASK` for them.
fn start_moving_slot(cluster: &RedisCluster, slot: u16, keys: &[&[u8]], from: &ClusterNode, to: &ClusterNode) {
    let slot = slot.to_string();
    let (from_id, to_id) = (node_id(cluster, from), node_id(cluster, to));
    let ok = |node: &ClusterNode, args: &[&[u8]]| assert_eq!(cluster.raw_command(node, args), b"+OK\r\n", "{args:?}");
    ok(to, &[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"IMPORTING", from_id.as_bytes()]);
    ok(from, &[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"MIGRATING", to_id.as_bytes()]);
    let port = to.port.to_string();
    for key in keys {
        ok(from, &[b"MIGRATE", to.host.as_bytes(), port.as_bytes(), key, b"0", b"5000"]);
    }
}

/// Ends a move [`start_moving_slot`] began: every node names `to` as the slot's owner.
fn finish_moving_slot(cluster: &RedisCluster, slot: u16, from: &ClusterNode, to: &ClusterNode) {
    let slot = slot.to_string();
    let to_id = node_id(cluster, to);
    let ok = |node: &ClusterNode, args: &[&[u8]]| assert_eq!(cluster.raw_command(node, args), b"+OK\r\n", "{args:?}");
    for node in [to, from] {
        ok(node, &[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"NODE", to_id.as_bytes()]);
    }
    for node in cluster.nodes().iter().filter(|n| *n != to && *n != from) {
        ok(node, &[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"NODE", to_id.as_bytes()]);
    }
}

/// A key of `slot`.
fn key_in(slot: u16, prefix: &str) -> Vec<u8> {
    (0..).map(|i| format!("{prefix}:{i}").into_bytes()).find(|k| key_slot(k) == slot).unwrap()
}

/// MOVED to a node named by a host name: its lookup runs off the I/O worker. While it runs,
/// only the keys bound for that node wait; every other key flows (one worker carries them
/// all). A host name that cannot be looked up fails only its keys, naming it (#18, finding 9).
#[test]
fn a_moved_to_a_host_name_holds_only_its_keys_while_the_name_is_looked_up() {
    let cluster = RedisCluster::start(3, 0);
    let nodes = cluster.nodes().to_vec();
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut settings = cluster_settings(&cluster);
    settings.num_workers = 1;
    settings.timeout = Duration::from_secs(10);
    let mut config = EngineConfig::new(settings);
    config.resolver = Some(scripted_resolver());
    let engine = Arc::new(Engine::start(config).unwrap());
    // Slots of A (the engine's map knows it as their owner) and of C, away from slot 0.
    let owner = |slot: u16| engine.cluster().unwrap().map().primary(slot).unwrap().clone();
    let mut a_slots = (1..SLOT_COUNT).filter(|&s| owner(s) == a.addr());
    let (moved, moved_later) = (a_slots.next().unwrap(), a_slots.next().unwrap());
    let others: Vec<Vec<u8>> = keys("elsewhere", 400)
        .into_iter()
        .filter(|k| ![moved, moved_later].contains(&key_slot(k)) && owner(key_slot(k)) != b.addr())
        .collect();
    assert!(others.len() > 200, "{} keys on A and C", others.len());
    round_trip(&engine, &others, 11, 1000);

    announce_hostname(&cluster, b, "slow-b.test", a);
    move_empty_slot(&cluster, moved, a, b);
    let key = key_in(moved, "moved");
    let value = pattern(5000, 77);
    let writer = {
        let (engine, key, mut value) = (engine.clone(), key.clone(), value.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let stored = run(&engine, Op::Set, &[key], std::slice::from_mut(&mut value));
            (stored, started.elapsed())
        })
    };
    // The SET met A's MOVED naming slow-b.test, and waits for the lookup; meanwhile:
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    round_trip(&engine, &others, 12, 1000);
    let took = started.elapsed();
    assert!(took < SLOW_LOOKUP / 2, "keys on healthy nodes waited {took:?} for a lookup that was not theirs");
    let (stored, waited) = writer.join().unwrap();
    assert!(stored.all_succeeded(), "{:?}", stored.outcomes);
    assert!(waited >= SLOW_LOOKUP, "the SET went out after {waited:?}, before the lookup ended");
    assert_eq!(cluster.raw_command(b, &[b"STRLEN", &key]), b":5000\r\n", "stored on B, found by its host name");
    let mut got = vec![vec![0u8; 5000]];
    assert_eq!(run(&engine, Op::Get, &[key], &mut got).outcomes, [Outcome::Hit(5000)]);
    assert!(got[0] == value);

    // A name that cannot be looked up: its keys fail, naming it; the others are untouched.
    announce_hostname(&cluster, b, "gone-b.test", a);
    move_empty_slot(&cluster, moved_later, a, b);
    let key = key_in(moved_later, "gone");
    let mut value = vec![pattern(100, 5)];
    let stored = run(&engine, Op::Set, std::slice::from_ref(&key), &mut value);
    let Outcome::Failed(err) = &stored.outcomes[0] else { panic!("{:?}", stored.outcomes) };
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert_eq!(
        err.message(),
        format!(
            "cannot connect to gone-b.test:{}: looking up the host name gone-b.test failed: not a name this test \
             knows",
            b.port
        )
    );
    round_trip(&engine, &others, 13, 1000);
}
