//! The bridge's memory against clients that hold on to what it sends them, measured as this
//! process's RSS (the bridge's and its clients' only: each test here runs alone, one at a
//! time, in a test binary of its own).
//!
//! - Issue #18, finding 5: a client that submits without ever reading its completions used to
//!   take the bridge from 34 MiB to 1.7 GiB in 2 s.
//! - Issue #26, findings 7, 8 and 11: batches that fail their check skipped that bound (1 GiB
//!   in 1.1 s); control replies no one read were kept up to 64 MiB a client (+400 MiB for 8,
//!   and everyone's allocate+free slowed from 0.03 to 150 ms); batches taken from a 16 MiB
//!   ring cost 80 bytes a key (+515 MiB).

use lmcache_resp_core::ErrorKind;
use lmcache_resp_core::Op;
use lmcache_resp_core::bridge::BridgeLimits;
use lmcache_resp_core::engine::Outcome;
use lmcache_resp_core::front::PageStore;
use lmcache_resp_core::internals::bridge::channel;
use lmcache_resp_core::internals::bridge::wire::{Control, Submission};
use redis_harness::RedisServer;
use redis_harness::bridge_raw::{RawClient, RequestFlood, TestBridge, keys_batch, paged_batch};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The process's resident memory, after the allocator gave back what it holds free: what is
/// live, not what a transient peak left behind.
fn rss_bytes() -> usize {
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe { libc::malloc_trim(0) };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() << 10
}

/// One test at a time: the RSS is the process's.
fn alone() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads completions until batches `0..submitted` each completed once, each checked with
/// `check`.
fn read_all(client: &mut RawClient, submitted: u64, check: impl Fn(&[Outcome])) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut completed = BTreeSet::new();
    while (completed.len() as u64) < submitted {
        for (batch, outcomes) in client.completed() {
            assert!(completed.insert(batch), "batch {batch} completed twice");
            check(&outcomes);
        }
        assert!(Instant::now() < deadline, "{} of {submitted} batches completed once it read", completed.len());
        client.wait_signal(Duration::from_millis(5));
    }
    assert_eq!(completed.into_iter().collect::<Vec<_>>(), (0..submitted).collect::<Vec<_>>(), "each batch, once");
}

/// A client that never reads, keeping its ring full of `batch(id)` for `flood` while an
/// honest client runs one-key EXISTS beside it every `pause`.
struct DeafFlood {
    deaf: RawClient,
    /// Batches it submitted: ids `0..submitted`.
    submitted: u64,
    /// How much this process grew meanwhile.
    grew: usize,
    /// The honest client's slowest EXISTS.
    slowest: Duration,
    _bridge: TestBridge,
    _server: RedisServer,
}

fn deaf_flood<'k>(flood: Duration, pause: Duration, batch: impl Fn(u64) -> Submission<'k>) -> DeafFlood {
    let server = RedisServer::start();
    let bridge = TestBridge::start(server.settings(), BridgeLimits::default(), 64 << 10, 8);
    let honest = bridge.attach();
    let mut deaf = RawClient::attach(&bridge.path).unwrap();
    assert!(deaf.try_submit(&batch(0)));
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_bytes();
    let mut submitted = 1u64;
    let flood_until = Instant::now() + flood;
    let mut slowest = Duration::ZERO;
    while Instant::now() < flood_until {
        while deaf.try_submit(&batch(submitted)) {
            submitted += 1;
        }
        let started = Instant::now();
        let exists = honest.run(Op::Exists, &[b"anything"], &[], None).unwrap();
        assert_eq!(exists.outcomes, vec![Outcome::Bool(false)]);
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(pause);
    }
    let grew = rss_bytes().saturating_sub(before);
    drop(honest);
    DeafFlood { deaf, submitted, grew, slowest, _bridge: bridge, _server: server }
}

#[test]
fn a_client_that_never_reads_keeps_the_bridge_bounded_and_loses_nothing() {
    let _alone = alone();
    // Missing keys: every outcome a Bool(false), each record small, the keys long so that
    // the records add up fast.
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("{i:0>200}").into_bytes()).collect();
    // The bridge and the server stay bound (by name) until the end: `..` would drop them here.
    let DeafFlood { mut deaf, submitted, grew, slowest, _bridge, _server } =
        deaf_flood(Duration::from_secs(2), Duration::from_millis(20), |id| keys_batch(id, Op::Exists, &keys));
    eprintln!("{submitted} batches of 500 keys submitted, none read; RSS grew {} KiB", grew >> 10);
    assert!(slowest < Duration::from_secs(1), "the honest client waited {slowest:?}");
    assert!(grew < 48 * MIB, "the bridge grew {} MiB for a client that does not read", grew >> 20);
    read_all(&mut deaf, submitted, |outcomes| {
        assert!(outcomes.len() == 500 && outcomes.iter().all(|o| *o == Outcome::Bool(false)));
    });
}

/// Finding 7: every key of these batches fails the bridge's own check (they name pages the
/// client does not hold), and their failures used to go straight to its outbox, past the
/// bound that holds a never-reading client's results.
#[test]
fn a_client_that_never_reads_the_failures_of_its_batches_keeps_the_bridge_bounded() {
    let _alone = alone();
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("{i:0>200}").into_bytes()).collect();
    let pages: Vec<(u32, u32)> = (0..500).map(|i| (i % 8, 1)).collect();
    let failing = |id| paged_batch(id, Op::Set, &keys, &pages, 16);
    // The bridge and the server stay bound (by name) until the end: `..` would drop them here.
    let DeafFlood { mut deaf, submitted, grew, slowest, _bridge, _server } =
        deaf_flood(Duration::from_millis(1500), Duration::from_millis(5), failing);
    eprintln!("{submitted} failing batches of 500 keys submitted, none read; RSS grew {} KiB", grew >> 10);
    assert!(slowest < Duration::from_secs(1), "the honest client waited {slowest:?}");
    assert!(grew < 48 * MIB, "the bridge grew {} MiB for a client that does not read", grew >> 20);
    read_all(&mut deaf, submitted, |outcomes| {
        assert_eq!(outcomes.len(), 500);
        for outcome in outcomes {
            let Outcome::Failed(err) = outcome else { panic!("{outcome:?}") };
            assert_eq!(err.kind(), ErrorKind::Page, "{err}");
            assert!(err.message().contains("is not one this client allocated"), "{err}");
        }
    });
}

/// Finding 8: eight clients sending control requests and never reading the replies. Their
/// requests are read only as far as their replies are read, and answered a few per turn:
/// the bridge's memory stays put and the others' control calls keep their pace.
#[test]
fn clients_flooding_control_requests_without_reading_cost_the_bridge_nothing_and_slow_no_one() {
    let _alone = alone();
    let server = RedisServer::start();
    let bridge = TestBridge::start(server.settings(), BridgeLimits::default(), 64 << 10, 64);
    let honest = bridge.attach();
    let allocate_and_free = || {
        let started = Instant::now();
        let page = honest.allocate_many(1).unwrap()[0];
        honest.free(&page).unwrap();
        started.elapsed()
    };
    let quiet: Vec<Duration> = (0..50).map(|_| allocate_and_free()).collect();
    let mut flooders: Vec<(RawClient, RequestFlood)> =
        (0..8).map(|_| (RawClient::attach(&bridge.path).unwrap(), RequestFlood::new(&Control::Metrics))).collect();
    for (client, _) in &flooders {
        client.control.set_nonblocking(true).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let before = rss_bytes();
    let mut flooded = Vec::new();
    let flood_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < flood_until {
        for (client, flood) in &mut flooders {
            flood.push(&client.control);
        }
        flooded.push(allocate_and_free());
        std::thread::sleep(Duration::from_millis(2));
    }
    let grew = rss_bytes().saturating_sub(before);
    let sent: usize = flooders.iter().map(|(_, flood)| flood.sent()).sum();
    let median = |mut d: Vec<Duration>| {
        d.sort();
        d[d.len() / 2]
    };
    let (quiet, flooded) = (median(quiet), median(flooded));
    eprintln!(
        "{sent} Metrics requests unread; RSS grew {} KiB; allocate+free {quiet:?} quiet, {flooded:?} flooded",
        grew >> 10
    );
    assert!(sent > 10_000, "the flood sent only {sent} requests");
    assert!(grew < 32 * MIB, "the bridge grew {} MiB for replies no one reads", grew >> 20);
    assert!(flooded < Duration::from_millis(25), "allocate+free took {flooded:?} (median) beside the flood");
    // A flooder that reads at last gets its answers, in order, and is served as ever.
    let (client, flood) = &flooders[0];
    client.control.set_nonblocking(false).unwrap();
    client.control.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..flood.sent().min(2000) {
        let reply = channel::receive(&client.control).unwrap().unwrap().0;
        assert!(matches!(reply, Control::MetricsReply { .. }), "{reply:?}");
    }
}

/// Finding 11: batches waiting in the bridge cost what their records do. A client with a
/// 16 MiB ring that never reads keeps its ring full of batches of 600,000 short keys; the
/// bridge takes at most its ring's size of them (and one more record), kept as the records
/// themselves, where it used to take 8 at about 80 bytes a key.
#[test]
fn batches_a_client_leaves_waiting_cost_the_bridge_about_their_records() {
    let _alone = alone();
    let server = RedisServer::start();
    // Two workers: their engine rings (4 MiB each, touched as the slices go through) are the
    // engine's fixed cost, not the client's.
    let mut settings = server.settings();
    settings.num_workers = 2;
    let bridge = TestBridge::start(settings, BridgeLimits::default(), 64 << 10, 8);
    let mut deaf = RawClient::attach_asking(&bridge.path, 16 << 20).unwrap();
    let keys: Vec<Vec<u8>> = (0..600_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    // Encoded once, its batch id (bytes 8..16) set for each: the client side allocates nothing
    // while the bridge's memory is measured.
    let mut record = Vec::new();
    keys_batch(0, Op::Exists, &keys).encode(&mut record);
    drop(keys);
    std::thread::sleep(Duration::from_millis(100));
    let before = rss_bytes();
    let mut submitted = 0u64;
    let flood_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < flood_until {
        loop {
            record[8..16].copy_from_slice(&submitted.to_le_bytes());
            if !deaf.try_submit_record(&record) {
                break;
            }
            submitted += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let grew = rss_bytes().saturating_sub(before);
    eprintln!("{submitted} batches of 600k keys (14 MiB records) submitted, none read; RSS grew {} MiB", grew >> 20);
    assert!(submitted >= 3, "only {submitted} batches went in");
    // The docs' formula: the batches taken from the ring (at most the ring and one record:
    // 29 MiB here), the outbox's 4 MiB and a slice; while the relay checks a batch, about
    // 2.5 times its record more (35 MiB, once for all clients). This process holds the
    // client's side too: its ring, written (16 MiB, counted once per mapping: twice), and the
    // engine's two rings. Taken 8 at a time at 80 bytes a key, they used to cost 519 MiB.
    assert!(grew < 144 * MIB, "the bridge grew {} MiB for batches waiting", grew >> 20);
    read_all(&mut deaf, submitted, |outcomes| {
        assert!(outcomes.len() == 600_000 && outcomes.iter().all(|o| *o == Outcome::Bool(false)));
    });
}
