//! The I/O engine (rings, workers, pipelined connections) against a real redis-server.

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::engine::{Batch, Engine, EngineConfig, Item, Memory};
use lmcache_resp_core::front::TrackedEngine;
use lmcache_resp_core::settings::Settings;
use lmcache_resp_core::{ErrorKind, RawBuf, Secret};
use redis_harness::{RedisServer, ServerConfig, dead_port, pattern};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(server: &RedisServer) -> EngineConfig {
    let mut config = EngineConfig::new(server.settings());
    config.settings.num_workers = 4;
    config.settings.timeout = Duration::from_secs(20);
    config
}

/// Items over caller-owned buffers (LMCache's own memory).
fn items<'a>(keys: &'a [Vec<u8>], buffers: &'a [Vec<u8>]) -> Vec<Item<'a>> {
    keys.iter()
        .zip(buffers)
        .map(|(key, buf)| {
            // SAFETY: the buffers outlive every batch of the test that uses them, and the test
            // reads a GET's buffers only after its batch completed.
            let buf = unsafe { RawBuf::new(buf.as_ptr() as *mut u8, buf.len()) };
            Item { key, memory: Memory::Buffer(buf) }
        })
        .collect()
}

fn key_items(keys: &[Vec<u8>]) -> Vec<Item<'_>> {
    keys.iter().map(|key| Item::key_only(key)).collect()
}

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{prefix}:{i}").into_bytes()).collect()
}

fn readable(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let mut fds = [libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) == 1 }
}

#[test]
fn ten_thousand_keys_of_mixed_sizes_round_trip_byte_exact() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    let sizes: Vec<usize> = (0..10_000).map(|i| [0, 1, 100, 4096, 65_537, 300_000][i % 6] + i % 7).collect();
    let keys = keys("mixed", sizes.len());
    let values: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u64)).collect();
    let stored = engine.run(Batch::new(Op::Set, &items(&keys, &values))).unwrap();
    assert_eq!(stored.outcomes.len(), 10_000);
    assert!(stored.outcomes.iter().all(|o| *o == Outcome::Done), "every SET stored");

    let mut dests: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n + 3]).collect();
    let got = engine.run(Batch::new(Op::Get, &items(&keys, &dests))).unwrap();
    for (i, outcome) in got.outcomes.iter().enumerate() {
        assert_eq!(*outcome, Outcome::Hit(sizes[i]), "key {i}");
        assert_eq!(&dests[i][..sizes[i]], &values[i][..], "bytes of key {i}");
        assert_eq!(&dests[i][sizes[i]..], &[0, 0, 0], "nothing written past key {i}'s value");
    }
    dests.clear();
    assert_eq!(server.raw_command(&[b"DBSIZE"]), b":10000\r\n");
    assert_eq!(server.raw_command(&[b"GET", b"mixed:2"]), [b"$102\r\n".as_slice(), &values[2], b"\r\n"].concat());
}

#[test]
fn values_around_the_receive_low_water_marks_round_trip_and_small_replies_after_them_are_not_held_back() {
    // While a large value arrives in place the worker sets SO_RCVLOWAT to the rest of it (at
    // least 128 KiB, at most 1 MiB) and back to 1 byte after: a mark left behind would hold a
    // small reply, a miss or the next header until the timeout. One worker, one connection, so
    // every reply follows a large one on the same socket; the batch must take nowhere near the
    // 20 s timeout.
    let server = RedisServer::start();
    let mut config = config(&server);
    config.settings.num_workers = 1;
    let engine = Engine::start(config).unwrap();
    const K: usize = 1 << 10;
    const M: usize = 1 << 20;
    let big = [128 * K - 1, 128 * K, 128 * K + 1, M - 1, M, M + 1, 3 * M + 7, 200 * K];
    let mut sizes = Vec::new();
    for &size in &big {
        sizes.extend([size, 1, 0]);
    }
    let keys = keys("lowat", sizes.len() + 1);
    let values: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u64)).collect();
    assert!(engine.run(Batch::new(Op::Set, &items(&keys[..sizes.len()], &values))).unwrap().all_succeeded());
    let mut dests: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n + 3]).collect();
    dests.push(vec![5u8; 16]); // the last key was never stored: a miss behind a 200 KiB value
    for round in 0..3 {
        let started = Instant::now();
        let got = engine.run(Batch::new(Op::Get, &items(&keys, &dests))).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "round {round} took {:?}", started.elapsed());
        for (i, &size) in sizes.iter().enumerate() {
            assert_eq!(got.outcomes[i], Outcome::Hit(size), "round {round}, key {i}");
            assert!(dests[i][..size] == values[i][..], "round {round}: bytes of key {i} ({size} bytes)");
            assert_eq!(&dests[i][size..], &[0, 0, 0], "nothing written past key {i}'s value");
        }
        assert_eq!(got.outcomes[sizes.len()], Outcome::Miss);
        assert!(dests[sizes.len()].iter().all(|&b| b == 5), "a miss leaves its buffer untouched");
        for dest in &mut dests[..sizes.len()] {
            dest.fill(0);
        }
    }
}

#[test]
fn arena_pages_set_get_exists_delete() {
    let server = RedisServer::start();
    let mut config = config(&server);
    config.page_size = 1 << 20;
    config.num_pages = 16;
    let engine = Engine::start(config).unwrap();
    let arena = engine.pages().unwrap().clone();
    let keys = keys("page", 16);
    let page_items = |lens: &dyn Fn(usize) -> u64| -> Vec<Item<'_>> {
        (0..16)
            .map(|i| Item { key: &keys[i], memory: Memory::Arena { offset: arena.page_offset(i), len: lens(i) } })
            .collect()
    };
    for i in 0..16 {
        let data = pattern(1 << 20, 100 + i as u64);
        // SAFETY: page i is 1 MiB inside the live arena and nothing else uses it now.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), arena.page_ptr(i), data.len()) };
    }
    let stored = engine.run(Batch::new(Op::Set, &page_items(&|i| (1 << 20) - i as u64))).unwrap();
    assert!(stored.all_succeeded());
    for i in 0..16 {
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(arena.page_ptr(i), 0, 1 << 20) };
    }
    let got = engine.run(Batch::new(Op::Get, &page_items(&|_| 1 << 20))).unwrap();
    for i in 0..16 {
        let len = (1 << 20) - i;
        assert_eq!(got.outcomes[i], Outcome::Hit(len), "a smaller value is a hit with its length");
        // SAFETY: page i is readable and the batch that wrote it has completed.
        let page = unsafe { std::slice::from_raw_parts(arena.page_ptr(i), 1 << 20) };
        assert_eq!(&page[..len], &pattern(1 << 20, 100 + i as u64)[..len], "page {i}");
    }
    let exists = engine.run(Batch::new(Op::Exists, &key_items(&keys))).unwrap();
    assert!(exists.outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    let deleted = engine.run(Batch::new(Op::Del, &key_items(&keys[..8]))).unwrap();
    assert!(deleted.outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    let exists = engine.run(Batch::new(Op::Exists, &key_items(&keys))).unwrap();
    let expected: Vec<Outcome> = (0..16).map(|i| Outcome::Bool(i >= 8)).collect();
    assert_eq!(exists.outcomes, expected);
}

#[test]
fn misses_wrong_sizes_and_odd_keys_in_one_batch() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    let keys: Vec<Vec<u8>> =
        vec![b"k".to_vec(), vec![b'm'; 200], pattern(65_536, 3), b"big".to_vec(), b"absent".to_vec()];
    let values = vec![pattern(10, 1), pattern(20, 2), pattern(30, 3), pattern(5000, 4)];
    assert!(engine.run(Batch::new(Op::Set, &items(&keys[..4], &values))).unwrap().all_succeeded());
    let dests = vec![vec![0u8; 64], vec![0u8; 64], vec![0u8; 64], vec![0u8; 4096], vec![9u8; 64]];
    let got = engine.run(Batch::new(Op::Get, &items(&keys, &dests))).unwrap();
    assert_eq!(got.outcomes[0], Outcome::Hit(10));
    assert_eq!(got.outcomes[1], Outcome::Hit(20));
    assert_eq!(got.outcomes[2], Outcome::Hit(30));
    let Outcome::Failed(err) = &got.outcomes[3] else { panic!("{:?}", got.outcomes[3]) };
    assert_eq!(err.kind(), ErrorKind::ValueTooLarge);
    assert!(err.message().contains("5000 bytes"), "{err}");
    assert_eq!(got.outcomes[4], Outcome::Miss);
    assert!(dests[4].iter().all(|&b| b == 9), "a miss leaves its buffer untouched");
    assert!(dests[3].iter().all(|&b| b == 0), "a too-large value is not written");
    for i in 0..3 {
        assert_eq!(&dests[i][..values[i].len()], &values[i][..]);
    }
    // The connections stayed in sync after draining the 5000-byte value.
    let again = engine.run(Batch::new(Op::Get, &items(&keys[..3], &dests[..3]))).unwrap();
    assert_eq!(again.outcomes, vec![Outcome::Hit(10), Outcome::Hit(20), Outcome::Hit(30)]);
}

#[test]
fn submitted_batches_complete_through_the_eventfd_and_drain() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    assert!(!readable(engine.event_fd()));
    let keys = keys("ev", 50);
    let values: Vec<Vec<u8>> = (0..50).map(|i| pattern(1000, i)).collect();
    let first = engine.submit(Batch::new(Op::Set, &items(&keys, &values))).unwrap();
    let second = engine.submit(Batch::new(Op::Exists, &key_items(&keys))).unwrap();
    let empty = engine.submit(Batch::new(Op::Get, &[])).unwrap();
    assert!(first < second && second < empty, "ids are unique and increasing");
    let mut results = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while results.len() < 3 {
        assert!(Instant::now() < deadline, "completions did not arrive");
        if readable(engine.event_fd()) {
            results.extend(engine.drain().unwrap());
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // A worker publishes a record, then signals; a drain that ran between the two took the
    // record and leaves one late signal behind. The next drain finds nothing and clears it.
    assert!(engine.drain().unwrap().is_empty(), "every completion was drained already");
    assert!(!readable(engine.event_fd()), "draining clears readiness");
    results.sort_by_key(|r| r.id);
    assert_eq!(results[0].id, first);
    assert!(results[0].outcomes.iter().all(|o| *o == Outcome::Done));
    assert_eq!(results[1].outcomes.len(), 50);
    assert!(results[2].outcomes.is_empty());
}

#[test]
fn tiny_rings_apply_backpressure_without_losing_anything() {
    let server = RedisServer::start();
    let mut config = config(&server);
    config.settings.num_workers = 2;
    config.submission_ring_bytes = 4096;
    config.completion_ring_bytes = 4096;
    config.batch_slots = 4;
    let engine = Arc::new(Engine::start(config).unwrap());
    let keys = keys("bp", 3000);
    let values: Vec<Vec<u8>> = (0..3000).map(|i| pattern(100, i)).collect();
    // Async submits from the only thread that drains: must not deadlock on full rings.
    let id = engine.submit(Batch::new(Op::Set, &items(&keys, &values))).unwrap();
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while done.is_empty() {
        assert!(Instant::now() < deadline);
        done.extend(engine.drain().unwrap());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(done[0].id, id);
    assert!(done[0].all_succeeded());
    let dests: Vec<Vec<u8>> = (0..3000).map(|_| vec![0u8; 100]).collect();
    let got = engine.run(Batch::new(Op::Get, &items(&keys, &dests))).unwrap();
    assert!(got.outcomes.iter().all(|o| *o == Outcome::Hit(100)));
    assert_eq!(dests, values);
}

#[test]
fn four_threads_submit_while_a_fifth_drains() {
    let server = RedisServer::start();
    let engine = Arc::new(Engine::start(config(&server)).unwrap());
    let submitters: Vec<_> = (0..4)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for round in 0..20 {
                    let keys = keys(&format!("t{t}r{round}"), 25);
                    let values: Vec<Vec<u8>> =
                        (0..25).map(|i| pattern(2000, (t * 1000 + round * 25 + i) as u64)).collect();
                    // Sync batches from these threads, async ones as well.
                    assert!(engine.run(Batch::new(Op::Set, &items(&keys, &values))).unwrap().all_succeeded());
                    ids.push(engine.submit(Batch::new(Op::Exists, &key_items(&keys))).unwrap());
                }
                ids
            })
        })
        .collect();
    let drainer = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while seen.len() < 80 && Instant::now() < deadline {
                for result in engine.drain().unwrap() {
                    assert!(result.outcomes.iter().all(|o| *o == Outcome::Bool(true)), "{result:?}");
                    seen.push(result.id);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        })
    };
    let mut submitted: Vec<u64> = submitters.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let mut drained = drainer.join().unwrap();
    submitted.sort_unstable();
    drained.sort_unstable();
    assert_eq!(drained, submitted, "every async batch drained exactly once");
}

#[test]
fn server_killed_and_restarted_mid_batch() {
    let mut server = RedisServer::start();
    let mut config = config(&server);
    config.settings.timeout = Duration::from_secs(5);
    let engine = Arc::new(Engine::start(config).unwrap());
    let keys = keys("restart", 400);
    let values: Vec<Vec<u8>> = (0..400).map(|i| pattern(256 * 1024, i)).collect();
    let started = Instant::now();
    let id = engine.submit(Batch::new(Op::Set, &items(&keys, &values))).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    server.restart();
    let mut results = Vec::new();
    while results.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "the batch hung");
        results.extend(engine.drain().unwrap());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(results[0].id, id);
    assert_eq!(results[0].outcomes.len(), 400);
    for outcome in &results[0].outcomes {
        if let Outcome::Failed(err) = outcome {
            assert!(matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout), "{err}");
        }
    }
    // The failed reconnects marked the server down: the background probe finds it back (its
    // first try is 50 ms after the outage began, then at most a second apart), with no batch
    // needed to notice.
    let back = Instant::now();
    while !engine.down_endpoints().is_empty() {
        assert!(back.elapsed() < Duration::from_secs(3), "the probe never found the restarted server");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The next operations reconnect and succeed.
    let after = engine.run(Batch::new(Op::Set, &items(&keys[..20], &values[..20]))).unwrap();
    assert!(after.all_succeeded(), "{:?}", after.outcomes);
    let dests: Vec<Vec<u8>> = (0..20).map(|_| vec![0u8; 256 * 1024]).collect();
    let got = engine.run(Batch::new(Op::Get, &items(&keys[..20], &dests))).unwrap();
    assert!(got.outcomes.iter().all(|o| *o == Outcome::Hit(256 * 1024)));
    assert_eq!(&dests[..], &values[..20]);
}

#[test]
fn a_stalled_server_fails_the_batch_at_its_deadline() {
    let server = RedisServer::start();
    let mut config = config(&server);
    config.settings.timeout = Duration::from_millis(600);
    let engine = Engine::start(config).unwrap();
    let keys = keys("stall", 40);
    let dests: Vec<Vec<u8>> = (0..40).map(|_| vec![0u8; 1 << 20]).collect();
    server.pause();
    let started = Instant::now();
    let result = engine.run(Batch::new(Op::Get, &items(&keys, &dests)));
    let took = started.elapsed();
    server.resume();
    let result = result.unwrap();
    assert!(took >= Duration::from_millis(600) && took < Duration::from_millis(1500), "took {took:?}");
    for outcome in &result.outcomes {
        let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
    // Recovered once the server answers again.
    let got = engine.run(Batch::new(Op::Get, &items(&keys, &dests))).unwrap();
    assert!(got.outcomes.iter().all(|o| *o == Outcome::Miss));
}

#[test]
fn close_completes_or_fails_everything_in_flight() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    let keys = keys("close", 200);
    let values: Vec<Vec<u8>> = (0..200).map(|i| pattern(512 * 1024, i)).collect();
    let ids: Vec<u64> = (0..5).map(|_| engine.submit(Batch::new(Op::Set, &items(&keys, &values))).unwrap()).collect();
    engine.close();
    let results = engine.drain().unwrap();
    let mut drained: Vec<u64> = results.iter().map(|r| r.id).collect();
    drained.sort_unstable();
    assert_eq!(drained, ids, "every batch submitted before close completes");
    for result in &results {
        for outcome in &result.outcomes {
            match outcome {
                Outcome::Done => {}
                Outcome::Failed(err) => assert_eq!(err.kind(), ErrorKind::Closed, "{err}"),
                other => panic!("{other:?}"),
            }
        }
    }
    let err = engine.submit(Batch::new(Op::Exists, &key_items(&keys))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(engine.drain().unwrap().is_empty());
    engine.close();
}

#[test]
fn start_fails_clearly_for_a_dead_server_or_wrong_password() {
    let port = dead_port();
    let settings = Settings::new(lmcache_resp_core::settings::Endpoint::Tcp { host: "127.0.0.1".into(), port });
    let err = Engine::start(EngineConfig::new(settings)).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(err.message().contains(&format!("127.0.0.1:{port}")), "{err}");

    let server = RedisServer::start_with(ServerConfig { password: Some("right-pw".into()), ..Default::default() });
    let mut settings = server.settings();
    settings.password = Some(Secret::new("wrong-pw"));
    let err = Engine::start(EngineConfig::new(settings)).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert!(!err.message().contains("wrong-pw"));
    assert!(Engine::start(EngineConfig::new(server.settings())).is_ok());
}

#[test]
fn keys_over_the_limit_are_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    let long = vec![b'k'; 256 * 1024 + 1];
    let err = engine.run(Batch::new(Op::Exists, &key_items(&[long]))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("longer than the limit"), "{err}");
}

#[test]
fn a_password_change_is_a_permanent_failure_that_is_not_retried() {
    let server = RedisServer::start();
    let engine = Engine::start(config(&server)).unwrap();
    let keys = keys("auth", 8);
    assert!(engine.run(Batch::new(Op::Exists, &key_items(&keys))).unwrap().all_succeeded());
    // The operator sets a password and drops every client: our reconnects meet NOAUTH.
    server.raw_command(&[b"CONFIG", b"SET", b"requirepass", b"new-secret"]);
    server.raw_command_as(Some("new-secret"), &[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    let connections = || server.stat_as(Some("new-secret"), "total_connections_received");
    let first = engine.run(Batch::new(Op::Exists, &key_items(&keys))).unwrap();
    for outcome in &first.outcomes {
        let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
        assert!(matches!(err.kind(), ErrorKind::Authentication | ErrorKind::Connection), "{err}");
    }
    // A small batch lands on one worker, and batches rotate over the workers. A worker's first
    // small batch meets the new password on its express connection; with that one failed for
    // good, its next goes to its other connection, which meets it too. After two rounds over
    // the workers, every connection has met it once.
    for _ in 0..2 * 4 {
        let _ = engine.run(Batch::new(Op::Exists, &key_items(&keys)));
    }
    // Now later batches fail at once without opening new connections: a permanent failure
    // is never retried.
    let before = connections();
    for _ in 0..8 {
        let started = Instant::now();
        let later = engine.run(Batch::new(Op::Exists, &key_items(&keys))).unwrap();
        assert!(started.elapsed() < Duration::from_millis(200), "failed at once");
        for outcome in &later.outcomes {
            let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
            assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
            assert!(!err.message().contains("new-secret"));
        }
    }
    // Reading the statistic opened one connection itself.
    assert_eq!(connections(), before + 1, "no reconnection attempts after the permanent failure");
}

#[test]
fn workers_run_where_the_placement_says_and_the_arena_is_on_its_node() {
    let server = RedisServer::start();
    let mut config = config(&server);
    config.settings.num_workers = 3;
    config.page_size = 64 * 1024;
    config.num_pages = 8;
    config.settings.cpu_affinity = "0".parse().unwrap();
    let engine = Engine::start(config).unwrap();
    assert_eq!(engine.placement().worker_cpus, vec![Some(0); 3]);
    assert_eq!(engine.placement().memory_node, Some(0));
    let threads = engine.worker_threads();
    assert_eq!(threads.len(), 3);
    for (tid, cpu) in threads {
        assert!(tid > 0, "the worker recorded its thread id");
        assert_eq!(lmcache_resp_numa::thread_cpus(tid).unwrap(), vec![cpu.unwrap()], "thread {tid}");
    }
    let explanation = engine.placement().explanation.join("\n");
    assert!(explanation.contains("pre-faulted"), "{explanation}");
    for page in 0..8 {
        let node = lmcache_resp_numa::memory_node_of(engine.pages().unwrap().page_ptr(page)).unwrap();
        assert!(matches!(node, Some(0) | None), "page {page} on node {node:?}");
    }
    // Still moves data correctly while pinned.
    let keys = keys("pinned", 8);
    let values: Vec<Vec<u8>> = (0..8).map(|i| pattern(1000, i)).collect();
    assert!(engine.run(Batch::new(Op::Set, &items(&keys, &values))).unwrap().all_succeeded());

    let mut bad = EngineConfig::new(server.settings());
    bad.settings.cpu_affinity = "0-4095".parse().unwrap();
    let err = Engine::start(bad).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("do not exist"), "{err}");
}

fn wait_for_dbsize(server: &RedisServer, expected: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = server.raw_command(&[b"DBSIZE"]);
        if reply == format!(":{expected}\r\n").into_bytes() {
            return;
        }
        assert!(Instant::now() < deadline, "DBSIZE stayed {:?}, expected {expected}", String::from_utf8_lossy(&reply));
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tracking_config(server: &RedisServer, capacity: u64) -> EngineConfig {
    let mut config = config(server);
    config.settings.max_capacity_gb = capacity as f64 / lmcache_resp_core::settings::BYTES_PER_GB;
    config
}

#[test]
fn eviction_starts_past_the_watermark_and_deletes_the_least_recently_used_keys() {
    let server = RedisServer::start();
    let engine = TrackedEngine::start(tracking_config(&server, 1_000_000)).unwrap();
    let keys = keys("lru", 9);
    let values: Vec<Vec<u8>> = (0..9).map(|i| pattern(100_000, i)).collect();
    // 8 x 100 kB = 800 kB: exactly at the 80% watermark, nothing is evicted.
    assert!(engine.run(Batch::new(Op::Set, &items(&keys[..8], &values[..8]))).unwrap().all_succeeded());
    let (_, stats) = engine.capacity().unwrap();
    assert_eq!((stats.stored_bytes, stats.keys, stats.evictions), (800_000, 8, 0));
    // Keys 0 and 1 are used again (GET hit, EXISTS), so 2 and 3 are now the oldest.
    let dests = vec![vec![0u8; 100_000]];
    assert_eq!(
        engine.run(Batch::new(Op::Get, &items(&keys[..1], &dests))).unwrap().outcomes,
        vec![Outcome::Hit(100_000)]
    );
    assert_eq!(
        engine.run(Batch::new(Op::Exists, &key_items(&keys[1..2]))).unwrap().outcomes,
        vec![Outcome::Bool(true)]
    );
    // The ninth key passes the watermark: ceil(9 * 0.2) = 2 keys go, in the background.
    assert!(engine.run(Batch::new(Op::Set, &items(&keys[8..], &values[8..]))).unwrap().all_succeeded());
    wait_for_dbsize(&server, 7);
    for (i, key) in keys.iter().enumerate() {
        let expected: &[u8] = if i == 2 || i == 3 { b":0\r\n" } else { b":1\r\n" };
        assert_eq!(server.raw_command(&[b"EXISTS", key]), expected, "key {i}");
    }
    let (_, stats) = engine.capacity().unwrap();
    assert_eq!((stats.stored_bytes, stats.keys, stats.evictions, stats.evicted_bytes), (700_000, 7, 2, 200_000));
}

#[test]
fn usage_stays_within_capacity_under_a_put_heavy_run() {
    let server = RedisServer::start();
    let capacity = 2_000_000;
    let engine = TrackedEngine::start(tracking_config(&server, capacity)).unwrap();
    let values: Vec<Vec<u8>> = (0..3).map(|i| pattern(100_000, i)).collect();
    for batch in 0..60 {
        let keys = keys(&format!("heavy{batch}"), 3);
        assert!(engine.run(Batch::new(Op::Set, &items(&keys, &values))).unwrap().all_succeeded());
        let (_, stats) = engine.capacity().unwrap();
        assert!(stats.stored_bytes + stats.reserved_bytes <= capacity, "batch {batch}: {stats:?}");
    }
    let (_, stats) = engine.capacity().unwrap();
    assert!(stats.evictions > 0 && stats.eviction_runs > 0, "{stats:?}");
    // Once the background DELs land, the server holds exactly what is tracked.
    wait_for_dbsize(&server, stats.keys as usize);
    assert!(stats.keys * 100_000 <= capacity);
}
