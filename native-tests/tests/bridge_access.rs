//! Who may attach to the bridge, against peers of another user (issue #26, finding 9). The
//! peers are child processes switched to uid 65534 (the tests run as root, as the bridge's own
//! uid), speaking the wire format directly; the bridge logs into this process's logger, so its
//! lines can be counted.

use lmcache_resp_core::Op;
use lmcache_resp_core::bridge::BridgeLimits;
use lmcache_resp_core::engine::Outcome;
use redis_harness::RedisServer;
use redis_harness::bridge_raw::{ForeignPeer, PeerPlan, RawClient, TestBridge, keys_batch, root_or_skip};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

/// The bridge's log lines, kept.
struct Lines(Mutex<Vec<String>>);

impl log::Log for Lines {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target().starts_with("lmcache_resp::bridge")
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

static LINES: Lines = Lines(Mutex::new(Vec::new()));
/// One test at a time: the log is the process's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let _ = log::set_logger(&LINES);
    log::set_max_level(log::LevelFilter::Info);
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn lines() -> Vec<String> {
    LINES.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A bridge whose socket and directory let other users connect, so that only SO_PEERCRED
/// stands between them and an attach; None (saying so) where peers of another uid cannot be
/// run. Holds the log for the test.
fn open_bridge(test: &str, limits: BridgeLimits) -> Option<(MutexGuard<'static, ()>, TestBridge, RedisServer)> {
    if !root_or_skip(test) {
        return None;
    }
    let serial = serial();
    let server = RedisServer::start();
    let bridge = TestBridge::start(server.settings(), BridgeLimits { socket_mode: 0o666, ..limits }, 64 << 10, 8);
    let dir = bridge.path.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some((serial, bridge, server))
}

/// A refused uid's silent connections used to hold handshake slots until their deadline: 130
/// of them locked every allowed client out (22 of 22 refused). Now the peer's uid is checked
/// as the connection is accepted, before it takes a slot.
#[test]
fn a_refused_uids_silent_connections_do_not_lock_an_allowed_client_out() {
    let limits = BridgeLimits { handshake_timeout: Duration::from_secs(30), ..BridgeLimits::default() };
    let test = "a_refused_uids_silent_connections_do_not_lock_an_allowed_client_out";
    let Some((_serial, bridge, _server)) = open_bridge(test, limits) else { return };
    let _squatter = ForeignPeer::start(&bridge.path, NOBODY, NOBODY, PeerPlan::HoldSilent(130));
    // Let the bridge see all 130.
    std::thread::sleep(Duration::from_millis(300));
    for attempt in 0..5 {
        let started = Instant::now();
        let mut client = RawClient::attach(&bridge.path)
            .unwrap_or_else(|err| panic!("attach {attempt} behind 130 refused connections: {err}"));
        assert!(started.elapsed() < Duration::from_secs(2), "attach {attempt} took {:?}", started.elapsed());
        let keys = vec![b"allowed".to_vec()];
        assert_eq!(client.run(&keys_batch(1, Op::Exists, &keys)), vec![Outcome::Bool(false)]);
    }
    assert!(
        lines().iter().any(|l| l.contains(&format!("uid {NOBODY}")) && l.contains("may not attach")),
        "the refusal is logged with its reason: {:?}",
        lines()
    );
}

/// Refusals used to be logged one line each: 29.5k lines in 2 s from one peer reconnecting in
/// a loop. Now the first is logged with its reason, and the rest counted and told in one line
/// about once a second; and the churn does not keep the bridge from serving the others.
#[test]
fn refusals_are_logged_at_a_bounded_rate() {
    let Some((_serial, bridge, _server)) =
        open_bridge("refusals_are_logged_at_a_bounded_rate", BridgeLimits::default())
    else {
        return;
    };
    let before = lines().len();
    let churn = ForeignPeer::start(&bridge.path, NOBODY, NOBODY, PeerPlan::Churn);
    std::thread::sleep(Duration::from_millis(500));
    // Meanwhile an allowed client attaches and is served: the churn gets turns, not the thread.
    let started = Instant::now();
    let mut client = RawClient::attach(&bridge.path).unwrap();
    let keys = vec![b"allowed".to_vec()];
    assert_eq!(client.run(&keys_batch(1, Op::Exists, &keys)), vec![Outcome::Bool(false)]);
    assert_eq!(client.allocate(1).len(), 1);
    assert!(started.elapsed() < Duration::from_secs(1), "served after {:?} beside the churn", started.elapsed());
    std::thread::sleep(Duration::from_millis(1500));
    drop(churn);
    // The count of the last second comes at its end.
    std::thread::sleep(Duration::from_millis(1200));
    let logged: Vec<String> =
        lines()[before..].iter().filter(|l| l.contains(&format!("uid {NOBODY}"))).cloned().collect();
    let counted: u64 = logged
        .iter()
        .filter_map(|l| l.strip_prefix("bridge: ")?.split(" connections refused").next()?.parse::<u64>().ok())
        .sum();
    eprintln!("{} lines for {} refusals: {logged:#?}", logged.len(), counted + 1);
    assert!(logged.len() <= 5, "{} lines in 3 s", logged.len());
    assert!(logged[0].contains("may not attach"), "the first says why: {}", logged[0]);
    assert!(counted > 100, "the refusals are counted: {logged:?}");
    assert!(logged[1..].iter().all(|l| l.contains("(uid not allowed, last pid ")), "{logged:?}");
}
