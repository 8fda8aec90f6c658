//! Host names looked up off the I/O threads.
//!
//! Looking a name up (`getaddrinfo`) blocks, for as long as DNS takes, and cannot be
//! cancelled. An I/O worker must never wait for one: a cluster node named by its host name in a
//! `MOVED`, an `ASK` or the slot map would stall every key the worker carries. A [`Resolver`]
//! runs lookups on threads of its own (a few at once, started on demand, gone when idle) and
//! keeps their results for a while, so the workers of one engine look each name up once. A
//! worker asks with `Resolver::lookup`, which never blocks: the addresses, the failure, or
//! "pending", and once a pending lookup ends the resolver calls the [`Waker`] the worker gave.
//! IP literals need no lookup and are answered at once. `Resolver::resolve_now` waits for the
//! answer, for threads that may block (the engine's start, the slot map's refresher).
//!
//! The lookup function is injectable ([`Resolver::with_lookup`]): tests give one that is slow
//! or failing for a name of their choosing, without depending on real DNS.

use super::endpoint::{Address, Endpoint};
use crate::error::{Error, ErrorKind, Result};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Looks up `host` (a name, never an IP literal) for `port`: the function a [`Resolver`] runs
/// off the I/O threads.
pub type LookupFn = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// Called, from a lookup thread, when a lookup someone waits for has ended.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// Lookups running at once; more wait their turn.
pub const MAX_LOOKUP_THREADS: usize = 4;
/// How long a name's addresses are kept.
pub const ADDRESS_TTL: Duration = Duration::from_secs(60);
/// How long a failed lookup is kept: requests for that name fail at once meanwhile, and the
/// next one after it looks again.
pub const FAILURE_TTL: Duration = Duration::from_secs(1);
/// Results kept at most (the oldest finished ones go first).
pub const MAX_CACHED: usize = 1024;

/// What `Resolver::lookup` knows now.
#[derive(Debug)]
pub enum Lookup {
    /// The host's addresses (an IP literal's own, at once).
    Ready(Arc<[Address]>),
    /// The lookup is running (since `since`): the waker is called when it ends.
    Pending {
        /// When the lookup started.
        since: Instant,
    },
    /// The lookup failed; the error names the host and says why.
    Failed(Error),
}

/// Runs host name lookups off the calling threads and keeps their results (see the module
/// documentation). Shared by the workers of an engine.
pub struct Resolver {
    shared: Arc<Shared>,
}

struct Shared {
    lookup: Box<LookupFn>,
    state: Mutex<State>,
    /// Notified whenever a lookup ends (for [`Resolver::resolve_now`]).
    ended: Condvar,
}

#[derive(Default)]
struct State {
    entries: HashMap<(String, u16), Entry>,
    /// Lookups waiting for a thread.
    queue: VecDeque<(String, u16)>,
    threads: usize,
}

enum Entry {
    Running { since: Instant, wakers: Vec<Waker> },
    Done { result: std::result::Result<Arc<[Address]>, Error>, at: Instant },
}

impl Entry {
    fn is_fresh(&self, now: Instant) -> bool {
        match self {
            Entry::Running { .. } => true,
            Entry::Done { result, at } => fresh(result, *at, now),
        }
    }
}

/// Whether a lookup that ended at `at` with `result` still answers at `now`.
fn fresh(result: &std::result::Result<Arc<[Address]>, Error>, at: Instant, now: Instant) -> bool {
    let ttl = if result.is_ok() { ADDRESS_TTL } else { FAILURE_TTL };
    now.duration_since(at) < ttl
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Resolver").field("cached", &state.entries.len()).field("threads", &state.threads).finish()
    }
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver::system()
    }
}

impl Resolver {
    /// A resolver over the system's own lookup (`getaddrinfo`, through the standard library).
    pub fn system() -> Resolver {
        Resolver::with_lookup(|host, port| (host, port).to_socket_addrs().map(Iterator::collect))
    }

    /// A resolver over `lookup` (tests: a lookup that is slow, or fails, for chosen names).
    pub fn with_lookup(lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static) -> Resolver {
        Resolver {
            shared: Arc::new(Shared {
                lookup: Box::new(lookup),
                state: Mutex::new(State::default()),
                ended: Condvar::new(),
            }),
        }
    }

    /// Whether `host` must be looked up: it is not an IP literal (brackets allowed).
    #[cfg(test)]
    pub(crate) fn needs_lookup(host: &str) -> bool {
        literal(host).is_none()
    }

    /// What is known of `host` now, without blocking: the addresses (at once for an IP
    /// literal, or from a recent lookup), the failure of a recent lookup, or pending. Pending
    /// starts a lookup if none is running; `waker` is called when it ends.
    pub(crate) fn lookup(&self, host: &str, port: u16, waker: &Waker) -> Lookup {
        if let Some(ip) = literal(host) {
            return Lookup::Ready(Arc::new([Address::Tcp(SocketAddr::new(ip, port))]));
        }
        let now = Instant::now();
        let key = (host.to_owned(), port);
        let mut state = self.shared.lock();
        match state.entries.get_mut(&key) {
            Some(Entry::Done { result, at }) if fresh(result, *at, now) => {
                return match result {
                    Ok(addresses) => Lookup::Ready(addresses.clone()),
                    Err(err) => Lookup::Failed(err.clone()),
                };
            }
            Some(Entry::Running { since, wakers }) => {
                if !wakers.iter().any(|known| Arc::ptr_eq(known, waker)) {
                    wakers.push(waker.clone());
                }
                return Lookup::Pending { since: *since };
            }
            _ => {}
        }
        self.start(&mut state, key, now, Some(waker.clone()));
        Lookup::Pending { since: now }
    }

    /// The addresses of `endpoint`, waiting up to `timeout` for a lookup (on threads that may
    /// block: the engine's start, the slot map's refresher). A Unix socket or an IP literal is
    /// answered at once; a name looked up recently, from what was found then.
    pub(crate) fn resolve_now(&self, endpoint: &Endpoint, timeout: Duration) -> Result<Arc<[Address]>> {
        let (host, port) = match endpoint {
            Endpoint::Unix { path } => return Ok(Arc::new([Address::Unix(path.clone())])),
            Endpoint::Tcp { host, port } => (host.as_str(), *port),
        };
        let nobody: Waker = Arc::new(|| {});
        let deadline = Instant::now() + timeout;
        let key = (host.to_owned(), port);
        loop {
            let since = match self.lookup(host, port, &nobody) {
                Lookup::Ready(addresses) => return Ok(addresses),
                Lookup::Failed(err) => return Err(err),
                Lookup::Pending { since } => since,
            };
            let state = self.shared.lock();
            let now = Instant::now();
            if now >= deadline {
                return Err(lookup_timed_out(host, port, now.duration_since(since)));
            }
            // Looked at again under the lock: the lookup may have ended in between.
            if matches!(state.entries.get(&key), Some(Entry::Running { .. })) {
                drop(self.shared.ended.wait_timeout(state, deadline - now));
            }
        }
    }

    /// Starts looking `key` up: on a new thread while fewer than [`MAX_LOOKUP_THREADS`] run,
    /// else queued for the next one free.
    fn start(&self, state: &mut State, key: (String, u16), now: Instant, waker: Option<Waker>) {
        if state.entries.len() >= MAX_CACHED {
            prune(state, now);
        }
        state.entries.insert(key.clone(), Entry::Running { since: now, wakers: waker.into_iter().collect() });
        if state.threads >= MAX_LOOKUP_THREADS {
            state.queue.push_back(key);
            return;
        }
        let shared = self.shared.clone();
        let job = key.clone();
        let spawned =
            std::thread::Builder::new().name("lmcache-resp-dns".into()).spawn(move || shared.run_lookups(job));
        match spawned {
            Ok(_) => state.threads += 1,
            Err(err) => {
                let err = Error::os(format!("cannot start a thread to look up the host name {}", key.0), err);
                let wakers = finish(state, &key, Err(err));
                // Called under the lock here: a waker only signals (never takes this lock).
                wakers.iter().for_each(|wake| wake());
                self.shared.ended.notify_all();
            }
        }
    }

    /// Results and lookups kept (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.shared.lock().entries.len()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One lookup thread: `job`, then whatever waits in the queue, then it ends.
    fn run_lookups(&self, mut job: (String, u16)) {
        loop {
            let (host, port) = (&job.0, job.1);
            let found = catch_unwind(AssertUnwindSafe(|| (self.lookup)(host, port)))
                .unwrap_or_else(|_| Err(io::Error::other("the lookup function panicked")));
            let result = match found {
                Ok(addresses) if addresses.is_empty() => Err(lookup_failed(host, port, "the name has no addresses")),
                Ok(addresses) => Ok(addresses.into_iter().map(Address::Tcp).collect::<Arc<[Address]>>()),
                Err(err) => Err(lookup_failed(host, port, err)),
            };
            let (wakers, next) = {
                let mut state = self.lock();
                let wakers = finish(&mut state, &job, result);
                let next = state.queue.pop_front();
                if next.is_none() {
                    state.threads -= 1;
                }
                (wakers, next)
            };
            self.ended.notify_all();
            wakers.iter().for_each(|wake| wake());
            match next {
                Some(queued) => job = queued,
                None => return,
            }
        }
    }
}

/// Records how the lookup of `key` ended; returns who waits for it.
fn finish(state: &mut State, key: &(String, u16), result: std::result::Result<Arc<[Address]>, Error>) -> Vec<Waker> {
    let done = Entry::Done { result, at: Instant::now() };
    match state.entries.insert(key.clone(), done) {
        Some(Entry::Running { wakers, .. }) => wakers,
        _ => Vec::new(),
    }
}

/// Makes room in a full cache: expired results go, then the oldest finished ones, down to
/// three quarters of [`MAX_CACHED`]. Running lookups stay.
fn prune(state: &mut State, now: Instant) {
    state.entries.retain(|_, entry| entry.is_fresh(now));
    let excess = state.entries.len().saturating_sub(MAX_CACHED * 3 / 4);
    if excess == 0 {
        return;
    }
    let mut finished: Vec<(Instant, (String, u16))> = state
        .entries
        .iter()
        .filter_map(|(key, entry)| match entry {
            Entry::Done { at, .. } => Some((*at, key.clone())),
            Entry::Running { .. } => None,
        })
        .collect();
    finished.sort();
    for (_, key) in finished.into_iter().take(excess) {
        state.entries.remove(&key);
    }
}

/// The IP address `host` spells, if it is a literal (an IPv6 one with or without brackets).
fn literal(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

fn lookup_failed(host: &str, port: u16, why: impl fmt::Display) -> Error {
    let endpoint = Endpoint::Tcp { host: host.to_owned(), port };
    Error::new(
        ErrorKind::Connection,
        format!("cannot connect to {endpoint}: looking up the host name {host} failed: {why}"),
    )
}

fn lookup_timed_out(host: &str, port: u16, after: Duration) -> Error {
    let endpoint = Endpoint::Tcp { host: host.to_owned(), port };
    Error::new(
        ErrorKind::Timeout,
        format!(
            "cannot connect to {endpoint}: the lookup of the host name {host} has not finished after {:.3} s",
            after.as_secs_f64()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::wait_until;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn local(port: u16) -> Vec<SocketAddr> {
        vec![SocketAddr::from(([127, 0, 0, 1], port))]
    }

    /// A lookup that takes `delay` for names starting with "slow", fails for names starting
    /// with "bad", and answers 127.0.0.1 at once otherwise; counts its calls.
    fn scripted(delay: Duration) -> (Resolver, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let resolver = Resolver::with_lookup(move |host, port| {
            counted.fetch_add(1, Ordering::SeqCst);
            if host.starts_with("slow") {
                std::thread::sleep(delay);
            }
            if host.starts_with("bad") {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such name (scripted)"));
            }
            Ok(local(port))
        });
        (resolver, calls)
    }

    fn counting_waker() -> (Waker, Arc<AtomicUsize>) {
        let woken = Arc::new(AtomicUsize::new(0));
        let count = woken.clone();
        let waker: Waker = Arc::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        });
        (waker, woken)
    }

    #[test]
    fn ip_literals_are_answered_at_once_without_a_lookup() {
        let (resolver, calls) = scripted(Duration::ZERO);
        let (waker, woken) = counting_waker();
        for (host, expected) in [("127.0.0.1", "127.0.0.1:7000"), ("::1", "[::1]:7000"), ("[::1]", "[::1]:7000")] {
            let Lookup::Ready(addresses) = resolver.lookup(host, 7000, &waker) else { panic!("{host}: not at once") };
            assert_eq!(addresses.iter().map(ToString::to_string).collect::<Vec<_>>(), [expected]);
        }
        assert_eq!((calls.load(Ordering::SeqCst), woken.load(Ordering::SeqCst), resolver.cached()), (0, 0, 0));
        assert!(!Resolver::needs_lookup("10.1.2.3") && Resolver::needs_lookup("redis-0.example"));
    }

    #[test]
    fn a_slow_lookup_never_blocks_the_caller_and_wakes_it_once_done() {
        let (resolver, calls) = scripted(Duration::from_millis(300));
        let (waker, woken) = counting_waker();
        let asked = Instant::now();
        assert!(matches!(resolver.lookup("slow.example", 7001, &waker), Lookup::Pending { .. }));
        // Asked again while it runs: the same lookup, the waker registered once.
        assert!(matches!(resolver.lookup("slow.example", 7001, &waker), Lookup::Pending { .. }));
        // Other names are not held up behind it.
        let (other, other_woken) = counting_waker();
        assert!(matches!(resolver.lookup("fast.example", 7002, &other), Lookup::Pending { .. }));
        wait_until("the fast lookup", || other_woken.load(Ordering::SeqCst) == 1);
        assert!(asked.elapsed() < Duration::from_millis(250), "the fast name waited for the slow one");
        assert!(matches!(resolver.lookup("fast.example", 7002, &other), Lookup::Ready(_)));
        assert!(asked.elapsed() < Duration::from_millis(250), "the caller was blocked");
        wait_until("the slow lookup", || woken.load(Ordering::SeqCst) == 1);
        assert!(asked.elapsed() >= Duration::from_millis(300));
        let Lookup::Ready(addresses) = resolver.lookup("slow.example", 7001, &waker) else { panic!("not cached") };
        assert_eq!(addresses[0].to_string(), "127.0.0.1:7001");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "each name looked up once");
        assert_eq!(woken.load(Ordering::SeqCst), 1, "woken once");
        wait_until("the lookup threads to end", || resolver.shared.lock().threads == 0);
    }

    #[test]
    fn a_failed_lookup_names_the_host_and_is_kept_briefly() {
        let (resolver, calls) = scripted(Duration::ZERO);
        let (waker, woken) = counting_waker();
        assert!(matches!(resolver.lookup("bad.example", 7003, &waker), Lookup::Pending { .. }));
        wait_until("the failed lookup", || woken.load(Ordering::SeqCst) == 1);
        let Lookup::Failed(err) = resolver.lookup("bad.example", 7003, &waker) else { panic!("not failed") };
        assert_eq!(err.kind(), ErrorKind::Connection);
        assert_eq!(
            err.message(),
            "cannot connect to bad.example:7003: looking up the host name bad.example failed: no such name (scripted)"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "asked again at once: the failure is kept");
        std::thread::sleep(FAILURE_TTL);
        assert!(matches!(resolver.lookup("bad.example", 7003, &waker), Lookup::Pending { .. }), "looked up again");
    }

    #[test]
    fn resolve_now_waits_for_the_running_lookup_up_to_its_timeout() {
        let (resolver, calls) = scripted(Duration::from_millis(200));
        let (waker, _) = counting_waker();
        let slow = Endpoint::Tcp { host: "slow.example".into(), port: 7004 };
        assert!(matches!(resolver.lookup("slow.example", 7004, &waker), Lookup::Pending { .. }));
        let err = resolver.resolve_now(&slow, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert!(
            err.message().starts_with(
                "cannot connect to slow.example:7004: the lookup of the host name slow.example has not finished"
            ),
            "{err}"
        );
        let addresses = resolver.resolve_now(&slow, Duration::from_secs(5)).unwrap();
        assert_eq!(addresses[0].to_string(), "127.0.0.1:7004");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one lookup for both");
        let unix = Endpoint::Unix { path: "/run/r.sock".into() };
        assert_eq!(resolver.resolve_now(&unix, Duration::ZERO).unwrap()[0].to_string(), "unix:/run/r.sock");
    }

    #[test]
    fn lookups_run_a_few_at_a_time_and_the_cache_stays_bounded() {
        let (resolver, calls) = scripted(Duration::from_millis(2));
        let (waker, woken) = counting_waker();
        let names = MAX_CACHED + 200;
        for i in 0..names {
            let _ = resolver.lookup(&format!("slow-{i}.example"), 7000, &waker);
            assert!(resolver.shared.lock().threads <= MAX_LOOKUP_THREADS);
            if i % 100 == 99 {
                wait_until("a hundred lookups", || woken.load(Ordering::SeqCst) == i + 1);
            }
        }
        wait_until("every lookup", || woken.load(Ordering::SeqCst) == names);
        assert_eq!(calls.load(Ordering::SeqCst), names);
        assert!(resolver.cached() <= MAX_CACHED, "{} results kept", resolver.cached());
    }
}
