//! Whether each server is known to be unreachable, so that work bound for a dead server fails
//! in microseconds instead of waiting out connects and timeouts, and one background probe per
//! server (not the callers' requests) notices when it is back.
//!
//! The rules (docs/reliability.md, "A dead server fails fast"):
//! - a server goes **down** when an attempt to open a connection to it fails for want of the
//!   server: every address refused, unreachable or timed out, or the connection broke or timed
//!   out during the handshake. An established connection that breaks does not mark it down: the
//!   reconnect that follows decides. Server replies (`-LOADING`, a wrong password) never do;
//! - while a server is down, every request newly queued for it fails at once with a
//!   [`ErrorKind::Connection`] error that names it, since when, and the last failure. Requests
//!   already queued when it went down keep their retries within their deadline;
//! - a probe (connect, authenticate, PING: whatever the board was given) runs on one
//!   background thread per board: first [`ProbePolicy::first`] after the server went down,
//!   then with doubling delays up to [`ProbePolicy::max`]. When it succeeds, or when any
//!   connection completes its handshake, the server is **up** again, and connections that were
//!   backing off from it reconnect at once;
//! - the "is down" and "is up again" warnings: a few lines of their own per second, then one
//!   line per second that counts the rest and names a few.
//!
//! Nothing here does I/O: the probe is a closure the owner supplies (the engine's opens a real
//! connection; the tests' is a switch).

use crate::error::{Error, ErrorKind};
use crate::logging::{Digest, Held};
use crate::net::ServerIdentity;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

/// Logs go under this target (`lmcache_resp.health` in Python).
const TARGET: &str = "lmcache_resp::health";

/// "Is down" (and "is up again") lines of their own per [`LOG_WINDOW`]; past that, one line per
/// window counts the rest and names a few ([`Digest`]): a slot map of thousands of dead nodes
/// costs a few lines, not one per node.
const LINES_PER_WINDOW: usize = 3;
const LOG_WINDOW: Duration = Duration::from_secs(1);

/// What a probe found.
#[derive(Debug)]
pub enum ProbeVerdict {
    /// The server answered (even if only to refuse the credentials: it is there).
    Reachable,
    /// It could not be reached; why.
    Unreachable(Error),
}

/// A check that a server answers; it blocks for at most the owner's connect timeout.
pub type Probe = Box<dyn Fn() -> ProbeVerdict + Send + Sync>;

/// When a down server is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbePolicy {
    /// The delay before the first probe after the server went down.
    pub first: Duration,
    /// The longest delay between probes (the delay doubles per failed probe up to this).
    pub max: Duration,
}

impl Default for ProbePolicy {
    /// A restarted Redis is back within a second of listening; a probe costs one connect.
    fn default() -> Self {
        ProbePolicy { first: Duration::from_millis(50), max: Duration::from_secs(1) }
    }
}

impl ProbePolicy {
    /// The delay before the next probe after `failed` probes failed in a row.
    pub fn delay(&self, failed: u32) -> Duration {
        self.first.saturating_mul(1 << failed.min(16)).min(self.max)
    }
}

struct Down {
    since: Instant,
    since_wall: SystemTime,
    last_error: Error,
    /// Probes that failed since the server went down.
    failed_probes: u32,
    next_probe: Instant,
}

/// One server's health, shared by every connection to it (of every worker of an engine), and
/// what the server said it is in their handshakes.
pub struct EndpointHealth {
    name: String,
    /// The server's product and version, from the last handshake that told (`HELLO`).
    identity: Mutex<Option<ServerIdentity>>,
    /// The fast path: read by every push.
    down: AtomicBool,
    /// Incremented each time the server comes back: a connection backing off since an earlier
    /// value reconnects at once.
    recoveries: AtomicU64,
    state: Mutex<Option<Down>>,
    board: Weak<Board>,
}

impl EndpointHealth {
    /// What the server said it is, in the last handshake that told.
    pub fn identity(&self) -> Option<ServerIdentity> {
        lock(&self.identity).clone()
    }

    /// A handshake heard the server say what it is (an upgrade in place, or a failover to a
    /// server of another version, replaces what an earlier one said).
    pub fn learned(&self, identity: &ServerIdentity) {
        let mut known = lock(&self.identity);
        if known.as_ref() != Some(identity) {
            *known = Some(identity.clone());
        }
    }

    /// Whether the server is known to be unreachable.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// How many times the server came back; see [`EndpointHealth::recoveries`] uses in the
    /// connection.
    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Acquire)
    }

    /// The error a request newly bound for the server fails with, while it is down.
    pub fn refusal(&self, now: Instant) -> Option<Error> {
        if !self.is_down() {
            return None;
        }
        let state = lock(&self.state);
        let down = state.as_ref()?;
        let next = down.next_probe.saturating_duration_since(now);
        Some(Error::new(
            ErrorKind::Connection,
            format!(
                "{} is down since {} ({:.1} s ago; last error: {}): requests to it fail at once until a \
                 background probe reaches it (next in {} ms); check that the server is running and \
                 reachable from this host",
                self.name,
                utc_clock(down.since_wall),
                now.saturating_duration_since(down.since).as_secs_f64(),
                down.last_error.message(),
                next.as_millis()
            ),
        ))
    }

    /// An attempt to reach the server failed with `err`: it is down (from now, if it was up).
    pub fn mark_down(&self, now: Instant, err: &Error) {
        let mut state = lock(&self.state);
        match state.as_mut() {
            Some(down) => down.last_error = err.clone(),
            None => {
                let board = self.board.upgrade();
                let policy = board.as_ref().map(|b| b.policy).unwrap_or_default();
                *state = Some(Down {
                    since: now,
                    since_wall: SystemTime::now(),
                    last_error: err.clone(),
                    failed_probes: 0,
                    next_probe: now + policy.first,
                });
                self.down.store(true, Ordering::Release);
                drop(state);
                let shown = board.as_ref().is_none_or(|board| board.admit(&board.down_log, now, &self.name));
                if shown {
                    log::warn!(
                        target: TARGET,
                        "{} is down: {}; new requests to it fail at once, a background probe retries it",
                        self.name,
                        err.message()
                    );
                }
                if let Some(board) = board {
                    board.wake_prober(&board);
                }
            }
        }
    }

    /// The server answered (a handshake completed, or a probe succeeded).
    pub fn mark_up(&self) {
        if !self.is_down() {
            return;
        }
        let mut state = lock(&self.state);
        let Some(down) = state.take() else { return };
        self.recoveries.fetch_add(1, Ordering::AcqRel);
        self.down.store(false, Ordering::Release);
        drop(state);
        let board = self.board.upgrade();
        if board.is_none_or(|board| board.admit(&board.up_log, Instant::now(), &self.name)) {
            log::warn!(
                target: TARGET,
                "{} is up again after {:.1} s down ({} failed probes)",
                self.name,
                down.since.elapsed().as_secs_f64(),
                down.failed_probes
            );
        }
    }

    /// When the next probe is due, if the server is down.
    fn next_probe(&self) -> Option<Instant> {
        lock(&self.state).as_ref().map(|d| d.next_probe)
    }

    fn probe_failed(&self, now: Instant, err: Error, policy: ProbePolicy) {
        let mut state = lock(&self.state);
        if let Some(down) = state.as_mut() {
            down.failed_probes += 1;
            down.next_probe = now + policy.delay(down.failed_probes);
            down.last_error = err;
        }
    }
}

struct Entry {
    health: Arc<EndpointHealth>,
    probe: Arc<Probe>,
}

struct Board {
    policy: ProbePolicy,
    /// By server name.
    entries: Mutex<HashMap<String, Entry>>,
    /// Which "is down" and "is up again" lines are logged one by one (see [`LINES_PER_WINDOW`]).
    down_log: Mutex<Digest>,
    up_log: Mutex<Digest>,
    /// Set when a server goes down (or the board closes); the prober waits on it.
    wake: Mutex<bool>,
    woken: Condvar,
    prober_running: AtomicBool,
    closed: AtomicBool,
}

impl Board {
    /// Whether an event of `log` about `name` gets its own line; logs the summary of a window
    /// that ended first.
    fn admit(&self, log: &Mutex<Digest>, now: Instant, name: &str) -> bool {
        let (ended, shown) = lock(log).admit(now, name);
        if let Some(held) = ended {
            self.log_held(log, &held);
        }
        shown
    }

    /// Logs the summaries of the windows that ended (all of them with `force`).
    fn flush_logs(&self, now: Instant, force: bool) {
        for log in [&self.down_log, &self.up_log] {
            let held = lock(log).flush(now, force);
            if let Some(held) = held {
                self.log_held(log, &held);
            }
        }
    }

    /// When the next summary is due, if one is.
    fn next_summary(&self) -> Option<Instant> {
        [&self.down_log, &self.up_log].into_iter().filter_map(|log| lock(log).due()).min()
    }

    fn log_held(&self, log: &Mutex<Digest>, held: &Held) {
        let servers = if held.count == 1 { "server" } else { "servers" };
        if std::ptr::eq(log, &self.down_log) {
            log::warn!(
                target: TARGET,
                "{} more {servers} went down within {} s (not logged one by one): {}; new requests to them \
                 fail at once, a background probe retries each",
                held.count,
                LOG_WINDOW.as_secs(),
                held.describe()
            );
        } else {
            log::warn!(
                target: TARGET,
                "{} more {servers} came up again within {} s (not logged one by one): {}",
                held.count,
                LOG_WINDOW.as_secs(),
                held.describe()
            );
        }
    }

    /// Starts the prober if it is not running, or wakes it.
    fn wake_prober(&self, this: &Arc<Board>) {
        *lock(&self.wake) = true;
        self.woken.notify_all();
        if self.closed.load(Ordering::Acquire) || self.prober_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let board = this.clone();
        let spawned = std::thread::Builder::new().name("lmcache-resp-probe".into()).spawn(move || board.run_prober());
        if let Err(err) = spawned {
            // Without a prober, a handshake of a later connection still brings servers back.
            self.prober_running.store(false, Ordering::Release);
            log::warn!(target: TARGET, "cannot start the health probe thread: {err}");
        }
    }

    /// Probes the servers that are down, each when its delay has passed, until none is down
    /// (then the thread ends; the next server to go down starts another) or the board closes.
    /// It also logs the summaries of held "is down" / "is up again" lines when their windows
    /// end (it runs whenever a server is down, which is when there are any).
    fn run_prober(&self) {
        loop {
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            self.flush_logs(now, false);
            let due: Vec<(Arc<EndpointHealth>, Arc<Probe>)> = lock(&self.entries)
                .values()
                .filter(|e| e.health.next_probe().is_some_and(|at| at <= now))
                .map(|e| (e.health.clone(), e.probe.clone()))
                .collect();
            for (health, probe) in due {
                if self.closed.load(Ordering::Acquire) {
                    break;
                }
                match probe() {
                    ProbeVerdict::Reachable => health.mark_up(),
                    ProbeVerdict::Unreachable(err) => health.probe_failed(Instant::now(), err, self.policy),
                }
                // Probes of many servers take a while: summaries stay on time meanwhile.
                self.flush_logs(Instant::now(), false);
            }
            let next_probe = lock(&self.entries).values().filter_map(|e| e.health.next_probe()).min();
            let mut woken = lock(&self.wake);
            if next_probe.is_none() && !*woken {
                // Nothing is down. Decided under the wake lock, so a server that goes down
                // now either sees the prober still running (and sets `wake`, seen above) or
                // finds it stopped and starts another.
                self.prober_running.store(false, Ordering::Release);
                drop(woken);
                self.flush_logs(Instant::now(), true);
                return;
            }
            if !*woken {
                let next = next_probe.into_iter().chain(self.next_summary()).min();
                let wait = next.map_or(self.policy.max, |at| at.saturating_duration_since(Instant::now()));
                woken = self.woken.wait_timeout(woken, wait).unwrap_or_else(|p| p.into_inner()).0;
            }
            *woken = false;
        }
        self.prober_running.store(false, Ordering::Release);
        self.flush_logs(Instant::now(), true);
    }
}

/// The health of the servers one engine (or one client) talks to, and the thread that probes
/// those that are down. Dropping it stops the prober (a probe under way finishes first).
pub struct HealthBoard {
    board: Arc<Board>,
}

impl HealthBoard {
    /// An empty board: every server is up until an attempt to reach it fails.
    pub fn new(policy: ProbePolicy) -> HealthBoard {
        HealthBoard {
            board: Arc::new(Board {
                policy,
                entries: Mutex::new(HashMap::new()),
                down_log: Mutex::new(Digest::new(LOG_WINDOW, LINES_PER_WINDOW)),
                up_log: Mutex::new(Digest::new(LOG_WINDOW, LINES_PER_WINDOW)),
                wake: Mutex::new(false),
                woken: Condvar::new(),
                prober_running: AtomicBool::new(false),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The health of the server called `name` (one per name: every connection to it shares
    /// it), checked by `probe` while it is down. A later call for the same name keeps the first
    /// probe.
    pub fn endpoint(&self, name: &str, probe: impl FnOnce() -> Probe) -> Arc<EndpointHealth> {
        let mut entries = lock(&self.board.entries);
        if let Some(entry) = entries.get(name) {
            return entry.health.clone();
        }
        let health = Arc::new(EndpointHealth {
            name: name.to_string(),
            identity: Mutex::new(None),
            down: AtomicBool::new(false),
            recoveries: AtomicU64::new(0),
            state: Mutex::new(None),
            board: Arc::downgrade(&self.board),
        });
        entries.insert(name.to_string(), Entry { health: health.clone(), probe: Arc::new(probe()) });
        health
    }

    /// The servers that are down now, by name.
    pub fn down(&self) -> Vec<String> {
        let mut down: Vec<String> =
            lock(&self.board.entries).values().filter(|e| e.health.is_down()).map(|e| e.health.name.clone()).collect();
        down.sort_unstable();
        down
    }

    /// What each server the board tracks said it is, by name (`None`: it has not said).
    pub fn identities(&self) -> HashMap<String, Option<ServerIdentity>> {
        lock(&self.board.entries).iter().map(|(name, e)| (name.clone(), e.health.identity())).collect()
    }

    /// How many servers the board tracks.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        lock(&self.board.entries).len()
    }

    /// Forgets servers nothing else refers to any more (cluster nodes dropped from the table).
    pub fn forget_unused(&self) {
        lock(&self.board.entries).retain(|_, e| Arc::strong_count(&e.health) > 1);
    }
}

impl Drop for HealthBoard {
    fn drop(&mut self) {
        self.board.closed.store(true, Ordering::Release);
        *lock(&self.board.wake) = true;
        self.board.woken.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `HH:MM:SS.mmm UTC` of a wall-clock instant.
fn utc_clock(at: SystemTime) -> String {
    let since_epoch = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}.{:03} UTC", secs / 3600, secs / 60 % 60, secs % 60, since_epoch.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::wait_until;

    fn refused() -> Error {
        Error::new(ErrorKind::Connection, "cannot connect to 127.0.0.1:1: Connection refused")
    }

    /// A board whose one server answers probes while `answering` is set, counting probes.
    fn board_with_switch(policy: ProbePolicy) -> (HealthBoard, Arc<EndpointHealth>, Arc<AtomicBool>, Arc<AtomicU64>) {
        let board = HealthBoard::new(policy);
        let answering = Arc::new(AtomicBool::new(false));
        let probes = Arc::new(AtomicU64::new(0));
        let (a, p) = (answering.clone(), probes.clone());
        let health = board.endpoint("127.0.0.1:1", move || {
            Box::new(move || {
                p.fetch_add(1, Ordering::SeqCst);
                match a.load(Ordering::SeqCst) {
                    true => ProbeVerdict::Reachable,
                    false => ProbeVerdict::Unreachable(refused()),
                }
            })
        });
        (board, health, answering, probes)
    }

    #[test]
    fn a_server_is_up_until_an_attempt_fails_and_then_refuses_naming_itself_and_the_cause() {
        let (_board, health, _, _) = board_with_switch(ProbePolicy::default());
        let now = Instant::now();
        assert!(!health.is_down());
        assert!(health.refusal(now).is_none());
        health.mark_down(now, &refused());
        assert!(health.is_down());
        let err = health.refusal(now + Duration::from_millis(1500)).expect("down");
        assert_eq!(err.kind(), ErrorKind::Connection);
        let text = err.message();
        assert!(text.starts_with("127.0.0.1:1 is down since "), "{text}");
        assert!(
            text.contains("UTC (1.5 s ago; last error: cannot connect to 127.0.0.1:1: Connection refused)"),
            "{text}"
        );
        assert!(text.contains("until a background probe reaches it"), "{text}");
        assert!(text.ends_with("check that the server is running and reachable from this host"), "{text}");
    }

    #[test]
    fn the_probe_brings_the_server_back_and_counts_the_recovery() {
        let policy = ProbePolicy { first: Duration::from_millis(5), max: Duration::from_millis(20) };
        let (_board, health, answering, probes) = board_with_switch(policy);
        health.mark_down(Instant::now(), &refused());
        wait_until("two probes failed", || probes.load(Ordering::SeqCst) >= 2);
        assert!(health.is_down(), "a failed probe leaves it down");
        assert_eq!(health.recoveries(), 0);
        answering.store(true, Ordering::SeqCst);
        wait_until("the probe found it back", || !health.is_down());
        assert_eq!(health.recoveries(), 1);
        assert!(health.refusal(Instant::now()).is_none());
        // The prober stops once nothing is down, and starts again for the next outage.
        let before = probes.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(probes.load(Ordering::SeqCst), before, "nothing is probed while every server is up");
        answering.store(false, Ordering::SeqCst);
        health.mark_down(Instant::now(), &refused());
        wait_until("probed again", || probes.load(Ordering::SeqCst) > before);
        answering.store(true, Ordering::SeqCst);
        wait_until("back again", || !health.is_down());
        assert_eq!(health.recoveries(), 2);
    }

    #[test]
    fn probes_back_off_doubling_up_to_the_bound() {
        let policy = ProbePolicy { first: Duration::from_millis(50), max: Duration::from_secs(1) };
        let delays: Vec<u128> = (0..8).map(|n| policy.delay(n).as_millis()).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(policy.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn a_handshake_brings_the_server_back_before_any_probe() {
        let policy = ProbePolicy { first: Duration::from_secs(60), max: Duration::from_secs(60) };
        let (_board, health, _, probes) = board_with_switch(policy);
        health.mark_down(Instant::now(), &refused());
        health.mark_up();
        assert!(!health.is_down());
        assert_eq!(health.recoveries(), 1);
        assert_eq!(probes.load(Ordering::SeqCst), 0);
        // Marking up a server that is up changes nothing.
        health.mark_up();
        assert_eq!(health.recoveries(), 1);
    }

    #[test]
    fn one_health_per_server_name_and_only_the_failed_one_is_down() {
        let board = HealthBoard::new(ProbePolicy { first: Duration::from_secs(60), max: Duration::from_secs(60) });
        let never = || -> Probe { Box::new(|| ProbeVerdict::Unreachable(refused())) };
        let a = board.endpoint("a:1", never);
        let a_again = board.endpoint("a:1", never);
        let b = board.endpoint("b:1", never);
        assert!(Arc::ptr_eq(&a, &a_again));
        a.mark_down(Instant::now(), &refused());
        assert!(a_again.is_down());
        assert!(!b.is_down());
        assert_eq!(board.down(), ["a:1"]);
        drop((a, a_again));
        board.forget_unused();
        assert!(board.down().is_empty());
    }

    #[test]
    fn a_later_failure_while_down_updates_the_cause_not_the_start() {
        let (_board, health, _, _) =
            board_with_switch(ProbePolicy { first: Duration::from_secs(60), ..Default::default() });
        let t0 = Instant::now();
        health.mark_down(t0, &refused());
        let later = Error::new(ErrorKind::Timeout, "connect to 127.0.0.1:1 timed out");
        health.mark_down(t0 + Duration::from_secs(2), &later);
        let text = health.refusal(t0 + Duration::from_secs(3)).expect("down").message().to_string();
        assert!(text.contains("(3.0 s ago; last error: connect to 127.0.0.1:1 timed out)"), "{text}");
    }

    #[test]
    fn utc_clock_formats_hours_minutes_seconds_and_millis() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(86_400_000 * 3 + 3_723_045);
        assert_eq!(utc_clock(at), "01:02:03.045 UTC");
    }
}
