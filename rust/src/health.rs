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
//!   backing off from it reconnect at once.
//!
//! Nothing here does I/O: the probe is a closure the owner supplies (the engine's opens a real
//! connection; the tests' is a switch).

use crate::error::{Error, ErrorKind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

/// Logs go under this target (`lmcache_resp.health` in Python).
const TARGET: &str = "lmcache_resp::health";

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

/// One server's health, shared by every connection to it (of every worker of an engine).
pub struct EndpointHealth {
    name: String,
    /// The fast path: read by every push.
    down: AtomicBool,
    /// Incremented each time the server comes back: a connection backing off since an earlier
    /// value reconnects at once.
    recoveries: AtomicU64,
    state: Mutex<Option<Down>>,
    board: Weak<Board>,
}

impl EndpointHealth {
    /// The server's name, as errors and logs give it.
    pub fn name(&self) -> &str {
        &self.name
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
                log::warn!(
                    target: TARGET,
                    "{} is down: {}; new requests to it fail at once, a background probe retries it",
                    self.name,
                    err.message()
                );
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
        log::warn!(
            target: TARGET,
            "{} is up again after {:.1} s down ({} failed probes)",
            self.name,
            down.since.elapsed().as_secs_f64(),
            down.failed_probes
        );
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
    entries: Mutex<Vec<Entry>>,
    /// Set when a server goes down (or the board closes); the prober waits on it.
    wake: Mutex<bool>,
    woken: Condvar,
    prober_running: AtomicBool,
    closed: AtomicBool,
}

impl Board {
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
    fn run_prober(&self) {
        loop {
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            let due: Vec<(Arc<EndpointHealth>, Arc<Probe>)> = lock(&self.entries)
                .iter()
                .filter(|e| e.health.next_probe().is_some_and(|at| at <= now))
                .map(|e| (e.health.clone(), e.probe.clone()))
                .collect();
            for (health, probe) in due {
                match probe() {
                    ProbeVerdict::Reachable => health.mark_up(),
                    ProbeVerdict::Unreachable(err) => health.probe_failed(Instant::now(), err, self.policy),
                }
            }
            let next = lock(&self.entries).iter().filter_map(|e| e.health.next_probe()).min();
            let mut woken = lock(&self.wake);
            if next.is_none() && !*woken {
                // Nothing is down. Decided under the wake lock, so a server that goes down
                // now either sees the prober still running (and sets `wake`, seen above) or
                // finds it stopped and starts another.
                self.prober_running.store(false, Ordering::Release);
                return;
            }
            if !*woken {
                let wait = next.map_or(self.policy.max, |at| at.saturating_duration_since(Instant::now()));
                woken = self.woken.wait_timeout(woken, wait).unwrap_or_else(|p| p.into_inner()).0;
            }
            *woken = false;
        }
        self.prober_running.store(false, Ordering::Release);
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
                entries: Mutex::new(Vec::new()),
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
        if let Some(entry) = entries.iter().find(|e| e.health.name == name) {
            return entry.health.clone();
        }
        let health = Arc::new(EndpointHealth {
            name: name.to_string(),
            down: AtomicBool::new(false),
            recoveries: AtomicU64::new(0),
            state: Mutex::new(None),
            board: Arc::downgrade(&self.board),
        });
        entries.push(Entry { health: health.clone(), probe: Arc::new(probe()) });
        health
    }

    /// The servers that are down now, by name.
    pub fn down(&self) -> Vec<String> {
        lock(&self.board.entries).iter().filter(|e| e.health.is_down()).map(|e| e.health.name.clone()).collect()
    }

    /// How many servers the board tracks.
    pub fn tracked(&self) -> usize {
        lock(&self.board.entries).len()
    }

    /// Forgets servers nothing else refers to any more (cluster nodes dropped from the table).
    pub fn forget_unused(&self) {
        lock(&self.board.entries).retain(|e| Arc::strong_count(&e.health) > 1);
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
