//! Ranged reads against a real redis-server: large values read as GETRANGE pieces between a
//! WATCH and an EXEC, byte-exact at every piece boundary, and never a hit made of two versions
//! when a writer strikes between pieces (a proxy in front of the server runs the writer just
//! before a chosen piece reaches the server), nor when a connection breaks mid-piece.

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::engine::{Batch, Engine, EngineConfig, Item, Memory};
use lmcache_resp_core::internals::blocking::BlockingClient;
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::settings::GetPieces;
use lmcache_resp_core::{ErrorKind, RawBuf};
use redis_harness::proxy::CuttingProxy;
use redis_harness::{RedisServer, pattern};
use std::sync::Arc;
use std::time::Duration;

const PIECE: usize = 4096;

fn engine(server: &RedisServer, port: u16, workers: usize) -> Engine {
    let mut settings = server.settings();
    settings.endpoints = vec![Endpoint::Tcp { host: "127.0.0.1".into(), port }];
    settings.num_workers = workers;
    settings.get_piece_bytes = GetPieces::Bytes(PIECE);
    // One piece on the wire at a time: each piece is its own write, so a proxy can strike
    // between two of them.
    settings.pipeline.max_inflight_bytes = PIECE;
    settings.timeout = Duration::from_secs(10);
    Engine::start(EngineConfig::new(settings)).unwrap()
}

fn item<'a>(key: &'a [u8], buf: &'a mut [u8]) -> Item<'a> {
    // SAFETY: the buffer outlives the batch, and the test reads it only after the batch ended.
    Item { key, memory: Memory::Buffer(unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }) }
}

fn set(engine: &Engine, key: &[u8], value: &mut [u8]) {
    let done = engine.run(Batch::new(Op::Set, &[item(key, value)])).unwrap();
    assert_eq!(done.outcomes, vec![Outcome::Done]);
}

fn get(engine: &Engine, key: &[u8], dest: &mut [u8], exact: bool) -> Outcome {
    let result = engine.run(Batch::new(Op::Get, &[item(key, dest)]).with_exact_length(exact)).unwrap();
    result.outcomes.into_iter().next().unwrap()
}

#[test]
fn values_round_trip_byte_for_byte_at_every_piece_boundary() {
    let server = RedisServer::start();
    let engine = engine(&server, server.port(), 2);
    let sizes = [0, 1, PIECE - 1, PIECE, PIECE + 1, 2 * PIECE - 1, 2 * PIECE, 2 * PIECE + 1, 7 * PIECE + 13];
    for (i, &size) in sizes.iter().enumerate() {
        let key = format!("boundary:{i}").into_bytes();
        let mut value = pattern(size, i as u64);
        set(&engine, &key, &mut value);
        // Into a page larger than the value (it may hold up to a page), and into a buffer of
        // exactly its size, as LMCache's chunks are.
        let mut page = vec![0x5au8; 8 * PIECE];
        assert_eq!(get(&engine, &key, &mut page, false), Outcome::Hit(size), "size {size}");
        assert!(page[..size] == value[..], "size {size}: bytes differ");
        assert!(page[size..].iter().all(|&b| b == 0x5a), "size {size}: written past the value");
        let mut exact = vec![0x5au8; size];
        assert_eq!(get(&engine, &key, &mut exact, true), Outcome::Hit(size), "size {size}");
        assert!(exact == value, "size {size}: exact bytes differ");
    }
    // The blocking client reads in pieces too.
    let mut client = BlockingClient::connect(server.options(), Duration::from_secs(10))
        .unwrap()
        .with_get_pieces(GetPieces::Bytes(PIECE));
    let mut value = pattern(5 * PIECE + 3, 99);
    set(&engine, b"blocking", &mut value);
    let mut dest = vec![0u8; 6 * PIECE];
    // SAFETY: `dest` outlives the call.
    let raw = unsafe { RawBuf::new(dest.as_mut_ptr(), dest.len()) };
    assert_eq!(client.get(b"blocking", raw).unwrap(), Some(value.len()));
    assert!(dest[..value.len()] == value[..]);
    assert_eq!(client.get(b"no such key", raw).unwrap(), None);
}

#[test]
fn a_value_of_another_length_or_larger_than_its_page_or_missing_leaves_the_page_untouched() {
    let server = RedisServer::start();
    let engine = engine(&server, server.port(), 1);
    let expected = 3 * PIECE + 5;
    for (key, len) in [(&b"shorter"[..], expected - 1), (b"longer", expected + 1)] {
        let mut value = pattern(len, 1);
        set(&engine, key, &mut value);
        let mut chunk = vec![0x5au8; expected];
        assert_eq!(get(&engine, key, &mut chunk, true), Outcome::Miss, "{len} bytes where {expected} are expected");
        assert!(chunk.iter().all(|&b| b == 0x5a), "a miss writes nothing");
    }
    let mut page = vec![0x5au8; expected - 10];
    let Outcome::Failed(err) = get(&engine, b"longer", &mut page, false) else { panic!() };
    assert_eq!(err.kind(), ErrorKind::ValueTooLarge, "{err}");
    assert!(page.iter().all(|&b| b == 0x5a));
    let mut page = vec![0x5au8; 4 * PIECE];
    assert_eq!(get(&engine, b"missing", &mut page, false), Outcome::Miss);
    assert!(page.iter().all(|&b| b == 0x5a));
}

/// Stores `old` under `key`, arms the proxy to run `writer` before the `nth` piece reaches the
/// server, and reads the key through the proxy.
fn read_while_writing(
    nth: usize,
    every: bool,
    writer: impl Fn(&RedisServer) + Send + 'static,
) -> (Outcome, Vec<u8>, CuttingProxy) {
    let server = Arc::new(RedisServer::start());
    let proxy = CuttingProxy::start(server.port());
    let engine = engine(&server, proxy.port(), 1);
    let mut old = pattern(6 * PIECE, 1);
    set(&engine, b"chunk", &mut old);
    proxy.count_commands(b"WATCH");
    // Weak: the proxy keeps its callback for its whole life, and a strong reference there would
    // keep the server from ever being stopped (it outlived the test process).
    let inside = Arc::downgrade(&server);
    proxy.before_command(b"GETRANGE", nth, every, move || {
        if let Some(server) = inside.upgrade() {
            writer(&server);
        }
    });
    let mut dest = vec![0u8; 6 * PIECE];
    let outcome = get(&engine, b"chunk", &mut dest, true);
    (outcome, dest, proxy)
}

#[test]
fn a_value_overwritten_between_pieces_is_read_again_and_never_mixed() {
    let new = pattern(6 * PIECE, 2);
    let replacement = new.clone();
    let (outcome, dest, proxy) =
        read_while_writing(3, false, move |server| drop(server.raw_command(&[b"SET", b"chunk", &replacement])));
    assert_eq!(outcome, Outcome::Hit(6 * PIECE));
    assert!(dest == new, "the hit is the new version, whole");
    assert_eq!(proxy.count(b"WATCH"), 2, "the first read's EXEC failed and the read started over");
}

#[test]
fn a_value_that_keeps_changing_ends_in_a_partial_read() {
    let version = std::sync::atomic::AtomicU64::new(10);
    let (outcome, _, proxy) = read_while_writing(2, true, move |server| {
        let value = pattern(6 * PIECE, version.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        drop(server.raw_command(&[b"SET", b"chunk", &value]));
    });
    let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
    assert!(err.message().contains("replaced or deleted while it was read in pieces, 3 times"), "{err}");
    assert_eq!(proxy.count(b"WATCH"), 3);
}

#[test]
fn a_value_deleted_between_pieces_is_a_partial_read_not_a_miss() {
    let (outcome, _, _) = read_while_writing(2, false, |server| drop(server.raw_command(&[b"DEL", b"chunk"])));
    let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
}

/// Issue #29: a key stored with `ttl_seconds` that expires between two pieces is gone like a
/// deleted one: a `PartialReadError`, never a miss over the pieces already written.
#[test]
fn a_value_expiring_between_pieces_is_a_partial_read_not_a_miss() {
    let (outcome, _, _) = read_while_writing(2, false, |server| {
        drop(server.raw_command(&[b"PEXPIRE", b"chunk", b"1"]));
        std::thread::sleep(std::time::Duration::from_millis(20));
    });
    let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
}

#[test]
fn a_connection_cut_mid_piece_starts_the_read_over_and_it_is_a_whole_hit() {
    let server = RedisServer::start();
    let proxy = CuttingProxy::start(server.port());
    let engine = engine(&server, proxy.port(), 1);
    let mut value = pattern(6 * PIECE, 3);
    set(&engine, b"cut", &mut value);
    proxy.count_commands(b"WATCH");
    // Past the probe's replies and two pieces, into the third.
    proxy.cut_replies_after(2 * PIECE as u64 + 1000, || {});
    let mut dest = vec![0u8; 6 * PIECE];
    assert_eq!(get(&engine, b"cut", &mut dest, true), Outcome::Hit(6 * PIECE));
    assert!(dest == value);
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(proxy.count(b"WATCH"), 2, "the WATCH died with its connection: the read started over");
}

/// Issue #26: a read whose deadline passed with its `MULTI` sent and its `EXEC` not (a GET due
/// later held the pipeline's other place) left its connection inside `MULTI`: later commands
/// answered `+QUEUED`, a SET was queued instead of stored, GETs failed. Now the `MULTI` leaves
/// only with its `EXEC`, and an `EXEC` or `UNWATCH` that expires unsent drops the connection.
#[test]
fn a_read_that_times_out_before_its_exec_leaves_no_connection_in_a_transaction() {
    const BIG_PIECE: usize = 128 << 10;
    const SMALL: usize = 100 << 10;
    let server = Arc::new(RedisServer::start());
    let proxy = CuttingProxy::start(server.port());
    let mut settings = server.settings();
    settings.endpoints = vec![Endpoint::Tcp { host: "127.0.0.1".into(), port: proxy.port() }];
    settings.num_workers = 1;
    // One connection besides the express one: the read's home, where GETs into 100 KiB go too.
    settings.connections_per_worker = 1;
    settings.get_piece_bytes = GetPieces::Bytes(BIG_PIECE);
    // Two requests in flight: a GET and a MULTI fill it, and an EXEC sent apart would wait.
    settings.pipeline.max_inflight_requests = 2;
    settings.timeout = Duration::from_secs(3);
    let engine = Arc::new(Engine::start(EngineConfig::new(settings)).unwrap());
    let mut big = pattern(6 * BIG_PIECE, 1);
    set(&engine, b"big", &mut big);

    // Late in the read's time, before its last piece reaches the server, a GET of another key
    // is queued on the same connection (due 1.5 s after the read) ...
    let (late_tx, late_rx) = std::sync::mpsc::channel();
    let getter = engine.clone();
    proxy.before_command(b"GETRANGE", 6, false, move || {
        std::thread::sleep(Duration::from_millis(1500));
        let (getter, late_tx) = (getter.clone(), late_tx.clone());
        std::thread::spawn(move || late_tx.send(get(&getter, b"late-get", &mut vec![0u8; SMALL], false)).unwrap());
        std::thread::sleep(Duration::from_millis(300));
    });
    // ... and held on its way, with whatever follows it, until past the read's deadline: the
    // server then answers it (and, before the fix, the MULTI sent with it) in one reply.
    let held = proxy.hold_command(b"late-get");
    let started = std::time::Instant::now();
    let reader = {
        let engine = engine.clone();
        std::thread::spawn(move || get(&engine, b"big", &mut vec![0u8; 6 * BIG_PIECE], true))
    };
    std::thread::sleep(Duration::from_millis(3600).saturating_sub(started.elapsed()));
    held.release();
    let Outcome::Failed(err) = reader.join().unwrap() else { panic!("the read had no time to end otherwise") };
    assert!(matches!(err.kind(), ErrorKind::PartialRead | ErrorKind::Timeout), "{err}");
    assert_eq!(late_rx.recv_timeout(Duration::from_secs(10)).unwrap(), Outcome::Miss);

    // Every later command is itself: a SET is stored, a plain GET and a read in pieces are
    // whole hits.
    let mut value = pattern(SMALL, 3);
    set(&engine, b"after", &mut value);
    let mut stored = format!("${SMALL}\r\n").into_bytes();
    stored.extend_from_slice(&value);
    stored.extend_from_slice(b"\r\n");
    assert!(server.raw_command(&[b"GET", b"after"]) == stored, "the SET is stored, byte for byte");
    let mut dest = vec![0u8; SMALL];
    assert_eq!(get(&engine, b"after", &mut dest, true), Outcome::Hit(SMALL));
    assert!(dest == value);
    let mut dest = vec![0u8; 6 * BIG_PIECE];
    assert_eq!(get(&engine, b"big", &mut dest, true), Outcome::Hit(6 * BIG_PIECE));
    assert!(dest == big);
    // And the server holds no transaction and no WATCH for any connection. A connection the
    // engine dropped reaches the server's side of the proxy a moment later (its thread may have
    // been the one holding the late GET), so it is given a few seconds to go; a connection the
    // engine still uses would hold its state for good and fail the wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let list = String::from_utf8(server.raw_command(&[b"CLIENT", b"LIST"])).unwrap();
        let clients: Vec<&str> = list.lines().filter(|line| line.contains("addr=")).collect();
        assert!(clients.len() >= 3, "the engine's two connections and this one: {list}");
        let in_transaction = clients.iter().copied().find(|client| {
            let field = |name: &str| client.split(' ').find_map(|f| f.strip_prefix(name)).unwrap_or_default();
            // Outside MULTI Redis says multi=-1, Valkey 0: no command is queued either way.
            field("flags=").contains('x')
                || !matches!(field("multi="), "-1" | "0")
                || (client.contains(" watch=") && field("watch=") != "0")
        });
        let Some(client) = in_transaction else { break };
        assert!(std::time::Instant::now() < deadline, "a connection inside MULTI or left watching: {client}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A field of an `INFO` section, as the server wrote it.
fn info_field(info: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':').map(str::to_owned))
}

/// `get_piece_bytes = "auto"` (the default) reads by what the server is. Valkey 9 writes a big
/// reply straight from the stored value, so a large GET is one GET; Redis 7.0 and Valkey 8.1
/// copy it into fresh reply buffers first (the big-reply cliff), so it is 1 MiB GETRANGEs. The
/// server's own command counts say which it got, and the bytes are checked either way.
#[test]
fn auto_reads_whole_from_servers_without_the_reply_copy_and_in_pieces_from_the_others() {
    let server = RedisServer::start();
    let mut settings = server.settings();
    settings.num_workers = 1;
    assert_eq!(settings.get_piece_bytes, GetPieces::Auto, "auto is the default");
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    // What the server is, from INFO (not from the HELLO our handshake read).
    let info = server.raw_command(&[b"INFO", b"server"]);
    let valkey = info_field(&info, "server_name").as_deref() == Some("valkey");
    let version = info_field(&info, if valkey { "valkey_version" } else { "redis_version" }).unwrap();
    let major_minor: Vec<u32> = version.split('.').take(2).map(|p| p.parse().unwrap()).collect();
    let whole = if valkey { major_minor[0] >= 9 } else { major_minor >= vec![8, 6] };
    match std::env::var("REDIS_TEST_SERVER").as_deref() {
        Ok("valkey9") => assert!(whole, "Valkey {version} writes replies without copying them"),
        Ok("valkey") | Ok("redis") | Ok("") | Err(_) => assert!(!whole, "{version} copies big replies"),
        Ok(_) => {}
    }

    let size = 4 * 1024 * 1024 + 5;
    let mut value = pattern(size, 7);
    set(&engine, b"auto", &mut value);
    assert_eq!(server.raw_command(&[b"CONFIG", b"RESETSTAT"]), b"+OK\r\n");
    let mut dest = vec![0u8; size];
    assert_eq!(get(&engine, b"auto", &mut dest, true), Outcome::Hit(size));
    assert!(dest == value, "bytes differ");
    let stats = server.raw_command(&[b"INFO", b"commandstats"]);
    let calls = |command: &str| {
        info_field(&stats, &format!("cmdstat_{command}"))
            .and_then(|fields| fields.split(',').find_map(|f| f.strip_prefix("calls=")?.parse::<u64>().ok()))
            .unwrap_or(0)
    };
    let endpoint = &engine.stats().endpoints[0];
    let said = format!("{} {version}", if valkey { "valkey" } else { "redis" });
    assert_eq!(endpoint.server, said, "stats() names the server as it said it is");
    if whole {
        assert_eq!((calls("get"), calls("getrange")), (1, 0), "one whole GET from {version}");
        assert_eq!(endpoint.reads, "whole GETs");
    } else {
        assert_eq!((calls("getrange"), calls("get")), (5, 0), "five 1 MiB pieces (the last of 5 bytes) from {version}");
        assert_eq!(endpoint.reads, "pieces of 1 MiB");
    }
}
