//! The I/O of Sentinel discovery (`crate::sentinel` decides; this asks): a round of
//! `SENTINEL get-master-addr-by-name` and `ROLE` over blocking connections, and the thread that
//! listens for `+switch-master` on one Sentinel at a time.
//!
//! A Sentinel-watched primary is routed as a one-shard cluster (`ClusterView`): its
//! connections hand back what a broken connection or a `-READONLY` strands, the view re-runs
//! discovery, and the requests go to the primary found. While no primary is known the view
//! says why ([`SentinelWatch::unavailable`]) and keys fail at once with that error.
//!
//! With `read_from="prefer_replica"` the shard's replicas are those `SENTINEL replicas` lists
//! as up at each discovery (at start, after `+switch-master`, after a node failed), and reads
//! spread over them and the primary as in a cluster (`cluster::read_pick`), without
//! `READONLY`, which standalone replicas refuse and do not need.

use crate::blocking::BlockingClient;
use crate::cluster::{NodeAddr, SlotMap};
use crate::error::{Error, Result};
use crate::logging::{Digest, Held};
use crate::net::{ConnectOptions, Endpoint, Resolver};
use crate::resp::Reply;
use crate::sentinel::{self, Discovery, Next};
use crate::settings::{SentinelSettings, Settings};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// How long the subscription waits for a message before it looks whether it should stop.
const LISTEN_SLICE: Duration = Duration::from_millis(250);

/// Sentinel events of one kind (a `+switch-master` message; a round that passed Sentinels over
/// or kept the primary) get a line each, up to [`LINES_PER_WINDOW`] per [`LOG_WINDOW`]; the
/// rest are counted into one line when the window ends: a Sentinel that flaps hundreds of times
/// a second costs a few lines, not one per message.
const LOG_WINDOW: Duration = Duration::from_secs(10);
const LINES_PER_WINDOW: usize = 3;

const TARGET: &str = "lmcache_resp::sentinel";

/// What a Sentinel-watched view knows besides its map: how to find the primary, and whether
/// one is known now.
pub(super) struct SentinelWatch {
    settings: SentinelSettings,
    discovery: Mutex<Discovery>,
    /// Why no primary is known, while none is.
    unavailable: RwLock<Option<Error>>,
    /// Which `+switch-master` lines, and which lines about rounds, are logged one by one.
    switch_log: Mutex<Digest>,
    round_log: Mutex<Digest>,
}

impl SentinelWatch {
    pub(super) fn new(settings: &SentinelSettings) -> SentinelWatch {
        SentinelWatch {
            discovery: Mutex::new(Discovery::new(&settings.service, settings.nodes.clone())),
            settings: settings.clone(),
            unavailable: RwLock::new(None),
            switch_log: Mutex::new(Digest::new(LOG_WINDOW, LINES_PER_WINDOW)),
            round_log: Mutex::new(Digest::new(LOG_WINDOW, LINES_PER_WINDOW)),
        }
    }

    /// Why no primary is known, while none is: keys fail with this at once.
    pub(super) fn unavailable(&self) -> Option<Error> {
        self.unavailable.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs a round of discovery, `known` being the primary in use (abandoned between two
    /// questions once `stopped` says so); records its outcome for
    /// [`SentinelWatch::unavailable`], and logs the Sentinels it passed over.
    pub(super) fn discover(
        &self,
        settings: &Settings,
        resolver: &Resolver,
        known: Option<&NodeAddr>,
        stopped: &dyn Fn() -> bool,
    ) -> Result<NodeAddr> {
        let mut discovery = lock(&self.discovery);
        let outcome = run_round(&mut discovery, settings, &self.settings, resolver, known, stopped);
        let found = match outcome {
            Ok((primary, None)) => {
                let passed: Vec<&str> = discovery.passed_over().collect();
                if !passed.is_empty() {
                    let leader = &discovery.sentinels()[0];
                    self.log_round(passed[0], || {
                        format!(
                            "Sentinel discovery of service {:?} passed over {}; the primary {primary} came from \
                             Sentinel {leader}",
                            self.settings.service,
                            passed.join("; ")
                        )
                    });
                }
                Ok(primary)
            }
            Ok((primary, Some(why))) => {
                self.log_round(&primary.to_string(), || {
                    format!("{why}; keeping {primary}, which still says it is the primary (asked with ROLE)")
                });
                Ok(primary)
            }
            Err(err) => Err(err),
        };
        *self.unavailable.write().unwrap_or_else(|p| p.into_inner()) = found.as_ref().err().cloned();
        found
    }

    /// A warning about a round (about `name`: a Sentinel, a node): logged if the window has
    /// room (see [`LOG_WINDOW`]), else counted.
    fn log_round(&self, name: &str, line: impl FnOnce() -> String) {
        let (ended, shown) = lock(&self.round_log).admit(Instant::now(), name);
        self.log_held(&self.round_log, ended);
        if shown {
            log::warn!(target: TARGET, "{}", line());
        }
    }

    /// Logs the summary of a window that ended, if it held events.
    fn log_held(&self, log: &Mutex<Digest>, held: Option<Held>) {
        let Some(held) = held else { return };
        let window = LOG_WINDOW.as_secs();
        if std::ptr::eq(log, &self.switch_log) {
            log::info!(
                target: TARGET,
                "{} more +switch-master messages for service {:?} within {window} s (not logged one by one), \
                 naming {}; each asked for a discovery, which runs at most every 0.1 s",
                held.count,
                self.settings.service,
                held.describe()
            );
        } else {
            log::warn!(
                target: TARGET,
                "{} more warnings about the Sentinel discovery of service {:?} within {window} s (a Sentinel passed \
                 over, the primary kept, the replicas not listed; not logged one by one), about {}",
                held.count,
                self.settings.service,
                held.describe()
            );
        }
    }

    /// Logs the summaries of the windows that ended (all of them with `force`).
    fn flush_logs(&self, force: bool) {
        for log in [&self.switch_log, &self.round_log] {
            let held = lock(log).flush(Instant::now(), force);
            self.log_held(log, held);
        }
    }

    /// A round of discovery (as [`SentinelWatch::discover`]) and the one-shard map it gives:
    /// the primary, and with reads from replicas (`read_from="prefer_replica"`) the replicas
    /// the Sentinels list as up. Replicas that cannot be listed are left out (reads go to the
    /// primary until the next discovery), never a reason to lose the primary.
    pub(super) fn discover_map(
        &self,
        settings: &Settings,
        resolver: &Resolver,
        known: Option<&NodeAddr>,
        stopped: &dyn Fn() -> bool,
    ) -> Result<SlotMap> {
        let primary = self.discover(settings, resolver, known, stopped)?;
        let replicas = if settings.reads_replicas() {
            let listed = self.replicas(settings, resolver).unwrap_or_else(|err| {
                self.log_round("the replicas", || {
                    format!(
                        "cannot list the replicas of service {:?}: {err}; reads go to the primary {primary} until \
                         the next discovery",
                        self.settings.service
                    )
                });
                Vec::new()
            });
            // Each confirmed with ROLE (the data server's credentials), as the primary is.
            listed
                .into_iter()
                .filter(|replica| {
                    let options = settings.connect_options(&replica.endpoint());
                    ask(settings, resolver, options, &[b"ROLE"])
                        .is_ok_and(|role| sentinel::replicates_from(&role, &primary))
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(SlotMap::single(primary, replicas))
    }

    /// `SENTINEL replicas <service>` from the first Sentinel that answers: the replicas that
    /// are up, where reads from replicas go.
    fn replicas(&self, settings: &Settings, resolver: &Resolver) -> Result<Vec<NodeAddr>> {
        let sentinels = lock(&self.discovery).sentinels().to_vec();
        let mut last = None;
        for node in &sentinels {
            let asked =
                ask(settings, resolver, self.options(settings, node), &[b"SENTINEL", b"replicas", self.service()]);
            match asked {
                Ok(reply) => return Ok(sentinel::replicas(&reply)),
                Err(err) => last = Some(err),
            }
        }
        Err(last.expect("settings always name a Sentinel"))
    }

    fn service(&self) -> &[u8] {
        self.settings.service.as_bytes()
    }

    fn options(&self, settings: &Settings, node: &Endpoint) -> ConnectOptions {
        sentinel_options(&self.settings, settings, node)
    }

    /// Listens for `+switch-master` on one Sentinel after another, calling `switched` on each
    /// (and after a lost subscription, which may have missed one), until `stopped` says so.
    /// A Sentinel that cannot be subscribed to is left for the next after a delay that
    /// doubles up to `sentinel::MAX_RESUBSCRIBE_DELAY`.
    pub(super) fn listen(
        &self,
        settings: &Settings,
        resolver: &Resolver,
        stopped: &dyn Fn() -> bool,
        switched: &dyn Fn(),
    ) {
        let mut failures = 0u32;
        let mut turn = 0usize;
        while !stopped() {
            let sentinels = lock(&self.discovery).sentinels().to_vec();
            let node = &sentinels[turn % sentinels.len()];
            turn += 1;
            let lost = self.subscribe_and_listen(settings, resolver, node, stopped, switched, &mut failures);
            if stopped() {
                break;
            }
            failures += 1;
            log::debug!(target: TARGET, "subscription to Sentinel {node} lost: {lost}");
            switched();
            let until = Instant::now() + sentinel::resubscribe_delay(failures);
            while Instant::now() < until && !stopped() {
                self.flush_logs(false);
                std::thread::sleep(LISTEN_SLICE.min(until.saturating_duration_since(Instant::now())));
            }
        }
        self.flush_logs(true);
    }

    /// One subscription, until it breaks (the error) or `stopped`.
    fn subscribe_and_listen(
        &self,
        settings: &Settings,
        resolver: &Resolver,
        node: &Endpoint,
        stopped: &dyn Fn() -> bool,
        switched: &dyn Fn(),
        failures: &mut u32,
    ) -> Error {
        let timeout = settings.connect_timeout.min(settings.timeout);
        let connected = resolver.resolve_now(node, timeout).and_then(|addresses| {
            BlockingClient::connect_capped(self.options(settings, node), addresses, timeout, sentinel::MAX_REPLY_BYTES)
        });
        let mut client = match connected {
            Ok(client) => client,
            Err(err) => return err,
        };
        if let Err(err) = client.subscribe(sentinel::SWITCH_MASTER) {
            return err;
        }
        *failures = 0;
        while !stopped() {
            match client.next_message(Instant::now() + LISTEN_SLICE) {
                Ok(Some(message)) => {
                    if let Some(primary) = sentinel::switch_master(&message, &self.settings.service) {
                        let (ended, shown) = lock(&self.switch_log).admit(Instant::now(), &primary.to_string());
                        self.log_held(&self.switch_log, ended);
                        if shown {
                            log::info!(
                                target: TARGET,
                                "Sentinel {node}: service {:?} switched to {primary}",
                                self.settings.service
                            );
                        }
                        switched();
                    }
                }
                Ok(None) => self.flush_logs(false),
                Err(err) => return err,
            }
        }
        Error::closed("the Sentinel subscription")
    }
}

/// One round: Sentinels in turn, each named primary confirmed with `ROLE` (with the data
/// server's credentials, so wrong ones fail here too). The primary, with why it was kept rather
/// than found through a Sentinel (`Next::Kept`).
fn run_round(
    discovery: &mut Discovery,
    settings: &Settings,
    sentinel: &SentinelSettings,
    resolver: &Resolver,
    known: Option<&NodeAddr>,
    stopped: &dyn Fn() -> bool,
) -> Result<(NodeAddr, Option<Error>)> {
    let mut next = discovery.begin(known);
    loop {
        if stopped() {
            return Err(Error::closed("Sentinel discovery"));
        }
        next = match next {
            Next::Ask(node) => {
                let args: [&[u8]; 3] = [b"SENTINEL", b"get-master-addr-by-name", sentinel.service.as_bytes()];
                discovery.on_master_addr(ask(settings, resolver, sentinel_options(sentinel, settings, &node), &args))
            }
            Next::Confirm(primary) => {
                let options = settings.connect_options(&primary.endpoint());
                let answer = ask(settings, resolver, options, &[b"ROLE"]);
                discovery.on_role(&primary, answer)
            }
            Next::Found(primary) => return Ok((primary, None)),
            Next::Kept(primary, why) => return Ok((primary, Some(why))),
            Next::Failed(err) => return Err(err),
        };
    }
}

/// How to reach and log in to Sentinel `node`: the Sentinels' own credentials and TLS.
fn sentinel_options(sentinel: &SentinelSettings, settings: &Settings, node: &Endpoint) -> ConnectOptions {
    ConnectOptions {
        endpoint: node.clone(),
        username: sentinel.username.clone(),
        password: sentinel.password.clone(),
        db: 0,
        connect_timeout: settings.connect_timeout,
        tls: sentinel.tls.clone(),
        // A Sentinel is asked SENTINEL and ROLE, never for keys.
        readonly: false,
    }
}

/// Connects to `options.endpoint` and sends one command, within the connect timeout (once to
/// connect and PING, once for the command), taking a reply of at most
/// `sentinel::MAX_REPLY_BYTES`.
fn ask(settings: &Settings, resolver: &Resolver, options: ConnectOptions, args: &[&[u8]]) -> Result<Reply> {
    let timeout = settings.connect_timeout.min(settings.timeout);
    let addresses = resolver.resolve_now(&options.endpoint, timeout)?;
    BlockingClient::connect_capped(options, addresses, timeout, sentinel::MAX_REPLY_BYTES)?.command(args)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
