//! A peer that never ends its reply: the reply cap stops it, quickly, without the process
//! growing past a bound, and the error names the cap, the command and the endpoint.
//!
//! The peer is a small TCP listener in this file: it is not a mock of Redis (no Redis sends an
//! endless reply), it is the broken or hostile server the cap exists for. This file holds one
//! test so that the process's peak memory is its own.

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::engine::{Engine, EngineConfig};
use lmcache_resp_core::internals::blocking::BlockingClient;
use lmcache_resp_core::internals::net::ConnectOptions;
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::settings::Settings;
use redis_harness::peer::{self, peak_rss};
use redis_harness::with_io_backend_from_env;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);
/// Past what the cap allows, and more than enough to grow the process by gigabytes without it.
const STREAM_LIMIT: u64 = 1 << 30;

/// A listener that answers PING with PONG, HELLO as a server before Redis 6 does, and anything
/// else with the start of an array that never ends: 64-byte bulk strings until the client hangs
/// up (or 1 GiB was sent).
fn endless_peer() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    peer::serve(listener, |stream, command| {
        if let Some(taken) = peer::answer_handshake(stream, command) {
            return taken;
        }
        let mut chunk = b"*4294967295\r\n".to_vec();
        let element = [b"$64\r\n".as_slice(), &[b'x'; 64], b"\r\n"].concat();
        let mut sent = 0u64;
        while sent < STREAM_LIMIT {
            while chunk.len() < 256 * 1024 {
                chunk.extend_from_slice(&element);
            }
            if stream.write_all(&chunk).is_err() {
                return false;
            }
            sent += chunk.len() as u64;
            chunk.clear();
        }
        // Hold the connection open, sending nothing more, until the client hangs up.
        let _ = stream.read(&mut [0u8; 1]);
        false
    });
    port
}

#[test]
fn an_endless_reply_to_cluster_shards_fails_at_the_cap_quickly_and_in_bounded_memory() {
    let port = endless_peer();
    let endpoint = Endpoint::Tcp { host: "127.0.0.1".into(), port };
    let expected =
        format!("the reply to CLUSTER SHARDS from 127.0.0.1:{port} exceeds 64 MiB, the cap on the size of one reply");
    let before = peak_rss();

    // The blocking client's CLUSTER call, as cluster discovery makes it.
    let started = Instant::now();
    let mut client = BlockingClient::connect(ConnectOptions::new(endpoint.clone()), TIMEOUT).unwrap();
    let err = client.cluster(b"SHARDS").unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.message().starts_with(&expected), "{err}");
    assert!(took < TIMEOUT / 2, "the cap stopped the reply only after {took:?}");

    // An engine whose only cluster seed is that peer: the start fails, naming the seed.
    let mut settings = with_io_backend_from_env(Settings::new(endpoint));
    settings.cluster = true;
    settings.timeout = TIMEOUT;
    settings.connect_timeout = TIMEOUT;
    settings.num_workers = 1;
    let started = Instant::now();
    let err = Engine::start(EngineConfig::new(settings)).err().expect("no cluster map from an endless reply");
    let took = started.elapsed();
    assert!(err.message().contains(&format!("127.0.0.1:{port}: {expected}")), "{err}");
    assert!(took < TIMEOUT / 2, "the cap stopped the reply only after {took:?}");

    let grew = peak_rss().saturating_sub(before);
    assert!(grew < 400 << 20, "the process grew by {} MiB on one reply", grew >> 20);
}
