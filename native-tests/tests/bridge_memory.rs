//! Finding 5 of issue #18: a client that submits without ever reading its completions used to
//! take the bridge from 34 MiB to 1.7 GiB in 2 s. Now its completions wait in a bounded outbox,
//! then its batches wait in its own ring: the bridge's memory stays put, the other clients are
//! served, and once it reads, every batch it submitted completes. Alone in its test binary, so
//! that the process's RSS is the bridge's and this client's only.

use lmcache_resp_core::bridge::BridgeLimits;
use lmcache_resp_core::conn::Outcome;
use lmcache_resp_core::front::PageStore;
use lmcache_resp_core::op::Op;
use redis_harness::RedisServer;
use redis_harness::bridge_raw::{RawClient, TestBridge, keys_batch};
use std::time::{Duration, Instant};

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() << 10
}

#[test]
fn a_client_that_never_reads_keeps_the_bridge_bounded_and_loses_nothing() {
    let server = RedisServer::start();
    let bridge = TestBridge::start(server.settings(), BridgeLimits::default(), 64 << 10, 8);
    let honest = bridge.attach();
    let mut deaf = RawClient::attach(&bridge.path).unwrap();
    // Missing keys: every outcome a Bool(false), each record small, the keys long so that
    // the records add up fast.
    let keys: Vec<Vec<u8>> = (0..500).map(|i| format!("{i:0>200}").into_bytes()).collect();
    assert!(deaf.try_submit(&keys_batch(0, Op::Exists, &keys)));
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_bytes();

    let mut submitted = 1u64;
    let flood_until = Instant::now() + Duration::from_secs(2);
    let mut slowest = Duration::ZERO;
    while Instant::now() < flood_until {
        while deaf.try_submit(&keys_batch(submitted, Op::Exists, &keys)) {
            submitted += 1;
        }
        let started = Instant::now();
        let exists = honest.run(Op::Exists, &[b"anything"], &[], None).unwrap();
        assert_eq!(exists.outcomes, vec![Outcome::Bool(false)]);
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let grew = rss_bytes().saturating_sub(before);
    eprintln!("{submitted} batches of 500 keys submitted, none read; RSS grew {} KiB", grew >> 10);
    assert!(slowest < Duration::from_secs(1), "the honest client waited {slowest:?}");
    assert!(grew < 48 << 20, "the bridge grew {} MiB for a client that does not read", grew >> 20);

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut completed = std::collections::BTreeSet::new();
    while (completed.len() as u64) < submitted {
        for (batch, outcomes) in deaf.completed() {
            assert!(completed.insert(batch), "batch {batch} completed twice");
            assert!(outcomes.len() == 500 && outcomes.iter().all(|o| *o == Outcome::Bool(false)));
        }
        assert!(Instant::now() < deadline, "{} of {submitted} batches completed once it read", completed.len());
        deaf.wait_signal(Duration::from_millis(5));
    }
    assert_eq!(completed.into_iter().collect::<Vec<_>>(), (0..submitted).collect::<Vec<_>>(), "each batch, once");
}
