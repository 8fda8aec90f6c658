//! A TLS server that fails every handshake, under a store that keeps sending batches: the
//! connections it costs per second, the engine's CPU and the log lines stay bounded, for each
//! way a handshake can fail: garbage where the ServerHello should be, a fatal alert, plaintext
//! bytes, and a real redis-server presenting an expired certificate or one for another host.
//!
//! The faults that no real Redis produces are made by a proxy in front of a real TLS
//! redis-server that rewrites the first record the server sends on every connection (the
//! server is real, its hellos fail). Connections are counted at the proxy (each TLS attempt and
//! each plaintext check is one). This file holds one test so that the process's threads, CPU
//! and log records are its own.
//!
//! The window: `LMCACHE_RESP_FAILING_WINDOW_S` (default 12 s; the measurement in
//! bench/results/2026-12-04/tls-failing-servers ran 60 s). After the first 2 s the backoff is
//! at its ceiling (probes 1 s apart, a permanent failure rechecked every 30 s per connection),
//! so a longer window adds seconds of the same rate: the bound is per second of that steady
//! state, plus the burst of the first attempts, which is counted apart.

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::Op;
use lmcache_resp_core::RawBuf;
use lmcache_resp_core::engine::{Batch, EngineConfig, Item, Memory, Outcome, ReconnectPolicy};
use lmcache_resp_core::front::TrackedEngine;
use lmcache_resp_core::internals::conn::RECHECK_PERMANENT_AFTER;
use lmcache_resp_core::settings::{Settings, Sources, Value};
use redis_harness::proxy::CuttingProxy;
use redis_harness::{RedisServer, ServerCert, ServerConfig, TlsServer, tls_or_skip};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first bytes of a ClientHello as rustls sends it: one per TLS attempt.
const CLIENT_HELLO: &[u8] = b"\x16\x03\x01";
/// A plaintext check's command: one per check, on a connection of its own.
const PING: &[u8] = b"PING\r\n";
/// Workers of the store (each with its express connection and one other).
const WORKERS: usize = 4;
/// The burst of the first attempts (each connection's bounded retries, and the checks they
/// start): counted apart from the steady rate.
const BURST: Duration = Duration::from_secs(2);

// -- every log record, counted by target and level ----------------------------------------------

struct Records(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Records {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.level() <= log::Level::Info {
            let line = (record.level(), record.target().to_owned(), record.args().to_string());
            self.0.lock().unwrap().push(line);
        }
    }

    fn flush(&self) {}
}

static RECORDS: Records = Records(Mutex::new(Vec::new()));

fn take_records() -> Vec<(log::Level, String, String)> {
    std::mem::take(&mut *RECORDS.0.lock().unwrap())
}

// -- what the engine's threads cost --------------------------------------------------------------

/// CPU seconds (user + system) of this process's threads whose name starts with
/// `lmcache-resp` (the I/O workers, the health probe, the lookups): the engine's own, not the
/// proxy's or the test's.
fn engine_cpu_seconds() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory is involved.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("lmcache-resp") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of stat (utime, stime), counted from the state (field 3).
        total += fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        total += fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    }
    total as f64 / ticks
}

// -- the faults ------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Bytes that are not TLS where the ServerHello should be.
    Garbage,
    /// A fatal `handshake_failure` alert instead of the ServerHello.
    Alert,
    /// A plaintext line instead of the ServerHello (a proxy's error page). The plaintext
    /// check on a second connection finds TLS behind the proxy, so it is taken for bytes
    /// injected on the path (a plaintext port itself is a `TlsError`, rechecked like a
    /// certificate: tls.rs).
    Plaintext,
    /// The real server presents its expired certificate.
    ExpiredCertificate,
    /// The real server presents a certificate for another host.
    WrongHostCertificate,
}

impl Fault {
    const ALL: [Fault; 5] =
        [Fault::Garbage, Fault::Alert, Fault::Plaintext, Fault::ExpiredCertificate, Fault::WrongHostCertificate];

    /// The first record the proxy sends instead of the server's, if it rewrites.
    fn first_record(self) -> Option<Vec<u8>> {
        match self {
            Fault::Garbage => Some((0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80).collect()),
            Fault::Alert => Some(vec![21, 3, 3, 0, 2, 2, 40]),
            Fault::Plaintext => Some(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n".to_vec()),
            Fault::ExpiredCertificate | Fault::WrongHostCertificate => None,
        }
    }

    /// Whether the failure is what the server decides (a `TlsError`, rechecked every 30 s) or
    /// a fault of the path (a `RespConnectionError`, the server marked down and probed).
    fn permanent(self) -> bool {
        matches!(self, Fault::ExpiredCertificate | Fault::WrongHostCertificate)
    }
}

// -- the store and its load ------------------------------------------------------------------------

fn settings(port: u16, server: &RedisServer) -> Settings {
    let explicit = vec![("ssl_ca_certs".to_owned(), Value::Text(server.certs().ca.display().to_string()))];
    let url = format!("rediss://127.0.0.1:{port}");
    let mut settings = Settings::resolve(&Sources { explicit: &explicit, url: Some(&url), env: &[] }).unwrap();
    settings.num_workers = WORKERS;
    settings.timeout = Duration::from_secs(2);
    settings
}

fn raw(buf: &mut [u8]) -> RawBuf {
    // SAFETY: every buffer outlives the batch that uses it, and nothing else touches it then.
    unsafe { RawBuf::new(buf.as_mut_ptr(), buf.len()) }
}

/// What one round of the load saw.
#[derive(Default)]
struct Seen {
    batches: usize,
    failed_keys: BTreeMap<String, usize>,
}

/// A SET of 4 values and an EXISTS of 16 keys every 10 ms, as a serving engine sends them,
/// for `window`.
fn load(engine: &TrackedEngine, window: Duration) -> Seen {
    let keys: Vec<Vec<u8>> = (0..16).map(|i| format!("failing:{i}").into_bytes()).collect();
    let mut values: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 4096]).collect();
    let mut seen = Seen::default();
    let started = Instant::now();
    while started.elapsed() < window {
        let sets: Vec<Item<'_>> =
            keys.iter().zip(values.iter_mut()).map(|(key, v)| Item { key, memory: Memory::Buffer(raw(v)) }).collect();
        let lookups: Vec<Item<'_>> = keys.iter().map(|key| Item::key_only(key)).collect();
        for (op, items) in [(Op::Set, &sets), (Op::Exists, &lookups)] {
            let result = engine.run(Batch::new(op, items)).unwrap();
            seen.batches += 1;
            for outcome in &result.outcomes {
                if let Outcome::Failed(err) = outcome {
                    *seen.failed_keys.entry(format!("{:?}", err.kind())).or_default() += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    seen
}

fn window() -> Duration {
    let seconds = std::env::var("LMCACHE_RESP_FAILING_WINDOW_S").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    Duration::from_secs(seconds)
}

fn presenting(server: &RedisServer, fault: Fault) -> Vec<Vec<u8>> {
    let certs = server.certs();
    let (cert, key) = match fault {
        Fault::ExpiredCertificate => (&certs.expired_cert, &certs.expired_key),
        Fault::WrongHostCertificate => (&certs.wrong_host_cert, &certs.wrong_host_key),
        _ => (&certs.server_cert, &certs.server_key),
    };
    let text = |p: &std::path::Path| p.display().to_string().into_bytes();
    vec![
        b"CONFIG".to_vec(),
        b"SET".to_vec(),
        b"tls-cert-file".to_vec(),
        text(cert),
        b"tls-key-file".to_vec(),
        text(key),
    ]
}

#[test]
fn a_server_failing_every_tls_handshake_costs_a_bounded_rate_of_connections_cpu_and_log_lines() {
    if !tls_or_skip("a_server_failing_every_tls_handshake_costs_a_bounded_rate_of_connections_cpu_and_log_lines") {
        return;
    }
    log::set_logger(&RECORDS).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let window = window();
    let mut report = Vec::new();
    for fault in Fault::ALL {
        // A server started presenting the bad certificate (the harness's own commands then do
        // not verify it) is switched to the good one for the store to start.
        let presents = match fault {
            Fault::ExpiredCertificate => ServerCert::Expired,
            Fault::WrongHostCertificate => ServerCert::WrongHost,
            _ => ServerCert::Valid,
        };
        let tls = TlsServer { presents, ..TlsServer::default() };
        let server = RedisServer::start_with(ServerConfig { tls: Some(tls), ..ServerConfig::default() });
        let good = presenting(&server, Fault::Garbage);
        assert_eq!(server.raw_command(&good.iter().map(Vec::as_slice).collect::<Vec<_>>()), b"+OK\r\n");
        let proxy = CuttingProxy::start(server.port());
        proxy.count_commands(CLIENT_HELLO);
        proxy.count_commands(PING);
        let engine = TrackedEngine::start(EngineConfig::new(settings(proxy.port(), &server))).unwrap();
        // Every connection made and working before the fault.
        load(&engine, Duration::from_millis(300));
        let slots = proxy.count(CLIENT_HELLO);
        // The fault, on every connection from now on; the open ones dropped.
        if let Some(first) = fault.first_record() {
            proxy.rewrite_server_records(usize::MAX, move |i, record| match i {
                0 => first.clone(),
                _ => record.to_vec(),
            });
        } else {
            let change = presenting(&server, fault);
            let change: Vec<&[u8]> = change.iter().map(Vec::as_slice).collect();
            assert_eq!(server.raw_command(&change), b"+OK\r\n");
        }
        take_records();
        let (connections, cpu) = (proxy.connections(), engine_cpu_seconds());
        server.raw_command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
        let burst = load(&engine, BURST);
        let after_burst = (proxy.connections(), engine_cpu_seconds(), take_records());
        let steady = load(&engine, window - BURST);
        let (end_connections, end_cpu, steady_records) = (proxy.connections(), engine_cpu_seconds(), take_records());
        let burst_connections = after_burst.0 - connections;
        let steady_connections = end_connections - after_burst.0;
        let steady_seconds = (window - BURST).as_secs_f64();
        let per_second = steady_connections as f64 / steady_seconds;
        let cpu_share = (end_cpu - after_burst.1) / steady_seconds;
        let lines = |records: &[(log::Level, String, String)]| -> BTreeMap<String, usize> {
            let mut by_target = BTreeMap::new();
            for (level, target, _) in records {
                *by_target.entry(format!("{level} {target}")).or_default() += 1;
            }
            by_target
        };
        let line = format!(
            "{fault:?}: {slots} connections before; burst {burst_connections} connections, {:.3} s CPU, log {:?}; \
             steady {steady_connections} connections in {steady_seconds:.0} s ({per_second:.2}/s), \
             CPU {:.2}% of a core, log {:?}; batches {} + {}, failed keys {:?} {:?}; hellos {}, plaintext checks {}",
            after_burst.1 - cpu,
            lines(&after_burst.2),
            cpu_share * 100.0,
            lines(&steady_records),
            burst.batches,
            steady.batches,
            burst.failed_keys,
            steady.failed_keys,
            proxy.count(CLIENT_HELLO),
            proxy.count(PING),
        );
        eprintln!("{line}");
        for (_, target, text) in after_burst.2.iter().chain(&steady_records).take(4) {
            eprintln!("    {target}: {text}");
        }
        report.push(line);
        drop(engine);
        // The first attempts: each connection's bounded attempts for the requests queued on
        // it, each a TLS attempt and at most one plaintext check, and the health probe's
        // first ones (50, 100, 200, 400, 800 ms apart).
        let attempts = 2 * (ReconnectPolicy::default().fail_after_attempts as usize * slots + 5);
        assert!(burst_connections <= attempts, "{fault:?}: {burst_connections} connections in the first 2 s");
        // Then: a fault of the path marks the server down, and only the probe connects, once
        // a second (ProbePolicy's ceiling), with a plaintext check where the bytes were not
        // TLS; a failure the server decides stands 30 s per connection.
        let steady_bound = match fault.permanent() {
            false => (2.0 * (steady_seconds + 1.0)) as usize,
            true => 2 * slots * (steady_seconds / RECHECK_PERMANENT_AFTER.as_secs_f64()).ceil() as usize,
        };
        assert!(
            steady_connections <= steady_bound,
            "{fault:?}: {steady_connections} connections, bound {steady_bound}"
        );
        assert!(cpu_share < 0.05, "{fault:?}: the engine used {:.1}% of a core", cpu_share * 100.0);
        // One batch summary a second (the rest counted into it), and no line per attempt.
        assert!(after_burst.2.len() <= 6, "{fault:?}: {} log lines in the first 2 s", after_burst.2.len());
        let line_bound = (1.5 * steady_seconds) as usize + 3;
        assert!(steady_records.len() <= line_bound, "{fault:?}: {} log lines", steady_records.len());
        // What the log says the server sent.
        let says = match fault {
            Fault::Garbage => "its first bytes were not TLS (\"\\x",
            Fault::Alert => "sent the alert HandshakeFailure",
            Fault::Plaintext => "its first bytes were plaintext (\"HTTP/1.1 400 Bad Request\\r\\n\")",
            Fault::ExpiredCertificate => "the server's certificate has expired",
            Fault::WrongHostCertificate => "the server's certificate is not valid for 127.0.0.1",
        };
        assert!(after_burst.2.iter().any(|(_, _, text)| text.contains(says)), "{fault:?}: {:#?}", after_burst.2);
        // What the callers saw: every key failed, with the error of its kind.
        let kind = if fault.permanent() { ErrorKind::Tls } else { ErrorKind::Connection };
        let failed: usize = steady.failed_keys.values().sum();
        assert_eq!(steady.failed_keys.get(&format!("{kind:?}")), Some(&failed), "{fault:?}: {:?}", steady.failed_keys);
        assert_eq!(failed, steady.batches / 2 * 20, "{fault:?}: every key of every batch failed");
    }
    eprintln!("{}", report.join("\n"));
}
