//! A publisher that floods a subscription (a Sentinel sending `+switch-master` far faster than
//! it is read): the subscriber holds a bounded number of messages, whatever is on the wire,
//! and loses none of those it hands out.
//!
//! The publisher is a small TCP listener in this file: no Redis floods a subscriber on its own;
//! it is the hostile Sentinel the bound exists for.

use lmcache_resp_core::internals::blocking::BlockingClient;
use lmcache_resp_core::internals::net::ConnectOptions;
use lmcache_resp_core::settings::Endpoint;
use redis_harness::peer::{self, contains};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);
const MESSAGES: usize = 300_000;
/// Messages held at most: the connection reads no more past 1024 waiting ones, plus what one
/// receive of 64 KiB brings (about 1100 of these), with room to spare.
const HELD_AT_MOST: usize = 4096;

fn message(i: usize) -> Vec<u8> {
    let payload = format!("mymaster 127.0.0.1 1 127.0.0.1 {}", 1 + i % 60_000);
    format!("*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n${}\r\n{payload}\r\n", payload.len()).into_bytes()
}

/// Answers the handshake, confirms SUBSCRIBE, then writes MESSAGES messages as fast as the
/// socket takes them.
fn flooding_publisher() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    peer::serve(listener, |stream, command| {
        if let Some(taken) = peer::answer_handshake(stream, command) {
            return taken;
        }
        if !contains(command, b"SUBSCRIBE") {
            return stream.write_all(b"-ERR unknown command\r\n").is_ok();
        }
        if stream.write_all(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n").is_err() {
            return false;
        }
        let mut chunk = Vec::new();
        for i in 0..MESSAGES {
            chunk.extend_from_slice(&message(i));
            if chunk.len() >= 256 * 1024 || i + 1 == MESSAGES {
                if stream.write_all(&chunk).is_err() {
                    return false;
                }
                chunk.clear();
            }
        }
        let _ = stream.read(&mut [0u8; 1]);
        false
    });
    port
}

#[test]
fn a_subscription_flooded_faster_than_it_is_read_holds_few_messages_and_hands_out_each_in_order() {
    let port = flooding_publisher();
    let endpoint = Endpoint::Tcp { host: "127.0.0.1".into(), port };
    let mut client = BlockingClient::connect(ConnectOptions::new(endpoint), TIMEOUT).unwrap();
    client.subscribe(b"+switch-master").unwrap();
    // The publisher fills the socket's buffers while nobody reads.
    std::thread::sleep(Duration::from_millis(300));
    let mut held = 0;
    for i in 0..MESSAGES / 2 {
        let got = client.next_message(Instant::now() + TIMEOUT).unwrap().expect("a message within the timeout");
        assert_eq!(got.to_bytes(), message(i), "message {i}");
        held = held.max(client.buffered_messages());
    }
    assert!(held <= HELD_AT_MOST, "{held} messages were held at once");
}
