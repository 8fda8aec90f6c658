//! What a caller reads is never silently wrong, and a broken engine says so at once: torn GETs,
//! fixed-size chunks of another size, dead workers, duplicate keys, arenas larger than memory.

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::engine::{Batch, Engine, EngineConfig, Item, Memory};
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::settings::GetPieces;
use lmcache_resp_core::{ErrorKind, RawBuf};
use redis_harness::proxy::CuttingProxy;
use redis_harness::{RedisServer, pattern};
use std::time::{Duration, Instant};

const VALUE: usize = 4 << 20;

fn engine_via(proxy: &CuttingProxy, server: &RedisServer) -> Engine {
    let mut settings = server.settings();
    settings.endpoints = vec![Endpoint::Tcp { host: "127.0.0.1".into(), port: proxy.port() }];
    settings.num_workers = 1;
    settings.timeout = Duration::from_secs(10);
    // Whole GETs: these tests are about one reply torn mid-payload (tests/ranged.rs has the
    // same faults for values read in pieces).
    settings.get_piece_bytes = GetPieces::Bytes(0);
    Engine::start(EngineConfig::new(settings)).unwrap()
}

fn buffer_item<'a>(key: &'a [u8], buf: &'a mut [u8]) -> Item<'a> {
    // SAFETY: the buffer outlives the batch, and the test reads it only after the batch ended.
    Item { key, memory: Memory::Buffer(unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }) }
}

/// Stores a 4 MiB value, then GETs it through a proxy that cuts the connection 1 MiB into the
/// reply and, before cutting, lets `meanwhile` change the key on the server.
fn torn_get(meanwhile: impl FnOnce(&RedisServer) + Send + 'static, exact: bool) -> (Outcome, Vec<u8>) {
    let server = std::sync::Arc::new(RedisServer::start());
    let proxy = CuttingProxy::start(server.port());
    let engine = engine_via(&proxy, &server);
    let mut value = pattern(VALUE, 7);
    let set = engine.run(Batch::new(Op::Set, &[buffer_item(b"torn", &mut value)])).unwrap();
    assert_eq!(set.outcomes, vec![Outcome::Done]);
    let inside = server.clone();
    proxy.cut_replies_after(1 << 20, move || meanwhile(&inside));
    let mut dest = vec![0u8; VALUE];
    let got = engine.run(Batch::new(Op::Get, &[buffer_item(b"torn", &mut dest)]).with_exact_length(exact)).unwrap();
    assert_eq!(proxy.cuts(), 1, "the reply was cut mid-payload");
    (got.outcomes.into_iter().next().unwrap(), dest)
}

#[test]
fn a_get_torn_mid_payload_whose_retry_misses_is_an_error_not_a_miss() {
    let (outcome, dest) = torn_get(|server| drop(server.raw_command(&[b"DEL", b"torn"])), false);
    let Outcome::Failed(err) = outcome else { panic!("a torn page reported as {outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
    assert!(err.message().contains("do not read it"), "{err}");
    assert!(dest.iter().any(|&b| b != 0), "the first attempt did write into the buffer");
}

#[test]
fn an_exact_length_get_torn_and_retried_into_a_shorter_value_is_an_error() {
    let shorter = |server: &RedisServer| drop(server.raw_command(&[b"SET", b"torn", &pattern(1000, 9)]));
    let (outcome, _) = torn_get(shorter, true);
    let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
}

#[test]
fn a_get_torn_and_retried_into_the_same_value_is_a_whole_hit() {
    let (outcome, dest) = torn_get(|_| {}, true);
    assert_eq!(outcome, Outcome::Hit(VALUE));
    assert_eq!(dest, pattern(VALUE, 7), "the retry delivered every byte");
}

/// Milliseconds the server says `key` has left to live (`PTTL`: -1 none, -2 no such key).
fn pttl(server: &RedisServer, key: &[u8]) -> i64 {
    let reply = server.raw_command(&[b"PTTL", key]);
    String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().unwrap()
}

/// With `ttl_seconds`, a SET whose connection breaks after the server stored it, before its
/// reply came back, is sent again on a new connection with its `PX`: a retry without it
/// would store the value again without an expiry (`PTTL` -1), for good.
#[test]
fn a_set_retried_after_a_broken_connection_carries_its_expiry_again() {
    let server = RedisServer::start();
    let proxy = CuttingProxy::start(server.port());
    let mut settings = server.settings();
    settings.endpoints = vec![Endpoint::Tcp { host: "127.0.0.1".into(), port: proxy.port() }];
    settings.num_workers = 1;
    settings.ttl = Some(Duration::from_secs(600));
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let mut warm = vec![0u8; 10];
    assert_eq!(engine.run(Batch::new(Op::Set, &[buffer_item(b"warm", &mut warm)])).unwrap().outcomes, [Outcome::Done]);
    proxy.count_commands(b"$2\r\nPX\r\n");
    // The SET reaches the server; its reply does not reach the engine.
    proxy.cut_replies_after(0, || {});
    let mut value = vec![b'v'; 100_000];
    let set = engine.run(Batch::new(Op::Set, &[buffer_item(b"expiring", &mut value)])).unwrap();
    assert_eq!(set.outcomes, [Outcome::Done]);
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(proxy.count(b"$2\r\nPX\r\n"), 2, "the SET was sent twice, each time with PX");
    let left = pttl(&server, b"expiring");
    assert!(0 < left && left <= 600_000, "PTTL {left}");
}

#[test]
fn an_exact_length_get_of_another_length_is_a_miss_that_leaves_the_buffer_untouched() {
    let server = RedisServer::start();
    let engine = Engine::start(EngineConfig::new(server.settings())).unwrap();
    server.raw_command(&[b"SET", b"short", &pattern(1000, 1)]);
    server.raw_command(&[b"SET", b"long", &pattern(3000, 2)]);
    server.raw_command(&[b"SET", b"exact", &pattern(2000, 3)]);
    let mut bufs = [vec![7u8; 2000], vec![7u8; 2000], vec![7u8; 2000]];
    let [a, b, c] = &mut bufs;
    let items = [buffer_item(b"short", a), buffer_item(b"long", b), buffer_item(b"exact", c)];
    let got = engine.run(Batch::new(Op::Get, &items).with_exact_length(true)).unwrap();
    assert_eq!(got.outcomes, vec![Outcome::Miss, Outcome::Miss, Outcome::Hit(2000)]);
    assert!(bufs[0].iter().chain(&bufs[1]).all(|&b| b == 7), "misses leave their buffers untouched");
    assert_eq!(bufs[2], pattern(2000, 3));
    // Without the flag, the shorter value is a hit with its length and the longer one an error.
    let mut bufs = [vec![0u8; 2000], vec![0u8; 2000]];
    let [a, b] = &mut bufs;
    let got = engine.run(Batch::new(Op::Get, &[buffer_item(b"short", a), buffer_item(b"long", b)])).unwrap();
    assert_eq!(got.outcomes[0], Outcome::Hit(1000));
    assert!(matches!(&got.outcomes[1], Outcome::Failed(e) if e.kind() == ErrorKind::ValueTooLarge));
}

#[test]
fn a_worker_that_stops_fails_the_engine_and_every_call_at_once() {
    let server = RedisServer::start();
    let mut settings = server.settings();
    settings.num_workers = 2;
    settings.timeout = Duration::from_secs(30);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    // A batch in flight against a frozen server: it would wait its whole 30 s timeout. It is
    // small, so one worker takes it; the other finds the garbage.
    let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("k{i}").into_bytes()).collect();
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 64 * 1024]).collect();
    let items: Vec<Item<'_>> = keys.iter().zip(bufs.iter_mut()).map(|(k, b)| buffer_item(k, b)).collect();
    server.pause();
    let id = engine.submit(Batch::new(Op::Get, &items)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    for worker in 0..2 {
        engine.corrupt_ring_for_test(worker).unwrap();
    }
    let mut results = Vec::new();
    while results.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(5), "the batch in flight was not failed at once");
        results.extend(engine.drain().unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    server.resume();
    assert_eq!(results[0].id, id);
    for outcome in &results[0].outcomes {
        let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
        assert_eq!(err.kind(), ErrorKind::EngineFailed, "{err}");
    }
    let failure = engine.failure().expect("the engine knows it failed");
    assert!(failure.message().contains("malformed submission record"), "{failure}");
    let started = Instant::now();
    let err = engine.run(Batch::new(Op::Exists, &[Item::key_only(b"k")])).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(100), "later calls fail at once");
    assert_eq!(err.kind(), ErrorKind::EngineFailed);
    assert!(err.message().contains("close it and create a new one"), "{err}");
    engine.close();
}

#[test]
fn duplicate_keys_in_one_set_or_delete_batch_are_refused() {
    let server = RedisServer::start();
    let engine = Engine::start(EngineConfig::new(server.settings())).unwrap();
    let mut a = vec![1u8; 10];
    let mut b = vec![2u8; 10];
    let items = [buffer_item(b"same", &mut a), buffer_item(b"other", &mut b)];
    let mut c = vec![3u8; 10];
    let twice = [items[0], items[1], buffer_item(b"same", &mut c)];
    let err = engine.run(Batch::new(Op::Set, &twice)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("keys 0 and 2 are the same key (\"same\") in one SET batch"), "{err}");
    assert_eq!(server.raw_command(&[b"EXISTS", b"same"]), b":0\r\n", "nothing was sent");
    let err = engine.run(Batch::new(Op::Del, &[Item::key_only(b"x"), Item::key_only(b"x")])).unwrap_err();
    assert!(err.message().contains("in one DEL batch"), "{err}");
    // Reading one key twice is well defined.
    let exists = engine.run(Batch::new(Op::Exists, &[Item::key_only(b"x"), Item::key_only(b"x")])).unwrap();
    assert_eq!(exists.outcomes, vec![Outcome::Bool(false), Outcome::Bool(false)]);
}

#[test]
fn an_arena_larger_than_memory_is_refused_with_the_figures() {
    let server = RedisServer::start();
    let mut config = EngineConfig::new(server.settings());
    config.page_size = 1 << 30;
    config.num_pages = 1 << 16;
    let err = Engine::start(config).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().starts_with("the page arena would take 70368744177664 bytes (65536.0 GiB)"), "{err}");
}
