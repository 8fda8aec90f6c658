//! A Redis Cluster engine's view of the cluster: the slot map its workers route by, patched by
//! `MOVED` at once and re-read from the cluster by a background thread whenever a worker
//! asks (a redirect, a node that cannot be reached, `CLUSTERDOWN`).

use super::sentinel::SentinelWatch;
use crate::blocking::BlockingClient;
use crate::cluster::{NodeAddr, SlotMap};
use crate::error::{Error, ErrorKind, Result};
use crate::net::{Endpoint, Resolver};
use crate::settings::Settings;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Refreshes come no closer together than this: a burst of redirects costs one re-read.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// After a failure that will not go away by itself (Sentinel credentials, service name), the
/// next refresh waits this long.
const PERMANENT_RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// Sentinel with reads from replicas: the replicas are listed again this often, so that one
/// back up, newly added or done resyncing serves reads without waiting for a failure.
const SENTINEL_REPLICAS_INTERVAL: Duration = Duration::from_secs(5);

/// Primaries one refresh asks for the map before the seeds.
const REFRESH_ASKS: usize = 8;

/// The slot map a cluster engine's workers route by, and what keeps it fresh (see the module
/// documentation).
pub struct ClusterView {
    map: RwLock<SlotMap>,
    settings: Settings,
    /// Looks up the host names of the nodes it asks (the engine's, shared with its workers).
    resolver: Arc<Resolver>,
    refresh: Mutex<Refresh>,
    wake: Condvar,
    refreshes: AtomicU64,
    /// Refreshes begun: where the next one starts asking along the map.
    refreshes_tried: AtomicU64,
    /// Sentinel: the map is one shard, its primary the one the Sentinels name (see
    /// `engine::sentinel`).
    sentinel: Option<SentinelWatch>,
}

#[derive(Default)]
struct Refresh {
    wanted: bool,
    stop: bool,
    last_error: Option<String>,
}

impl ClusterView {
    /// Reads the slot map from the first seed that answers. A seed that is not a cluster node,
    /// no seed answering, and slots no node serves are clear errors here, at start. Host names
    /// are looked up through `resolver`, here and in every refresh.
    pub fn discover(settings: &Settings, resolver: Arc<Resolver>) -> Result<ClusterView> {
        if let Some(sentinel) = &settings.sentinel {
            let watch = SentinelWatch::new(sentinel);
            let map = watch.discover_map(settings, &resolver, None, &|| false)?;
            let mut view = ClusterView::over(map, settings, resolver);
            view.sentinel = Some(watch);
            return Ok(view);
        }
        if settings.db != 0 {
            return Err(Error::invalid("Redis Cluster has only database 0: drop db (or SELECT) with cluster=true"));
        }
        let mut failures = Vec::new();
        for seed in &settings.endpoints {
            match fetch_map(settings, &resolver, seed) {
                Ok(map) => {
                    let uncovered = map.uncovered_slots();
                    if !uncovered.is_empty() {
                        return Err(Error::invalid(format!(
                            "the cluster at {seed} leaves slots {} without an owner: keys there could be neither \
                             stored nor read (redis-cli --cluster fix assigns them)",
                            describe_ranges(&uncovered)
                        )));
                    }
                    return Ok(ClusterView::over(map, settings, resolver));
                }
                Err(err) if err.kind() == ErrorKind::InvalidInput || err.kind() == ErrorKind::Authentication => {
                    return Err(err);
                }
                Err(err) => failures.push(format!("{seed}: {err}")),
            }
        }
        Err(Error::new(ErrorKind::Connection, format!("no seed node of the cluster answered: {}", failures.join("; "))))
    }

    fn over(map: SlotMap, settings: &Settings, resolver: Arc<Resolver>) -> ClusterView {
        ClusterView {
            map: RwLock::new(map),
            settings: settings.clone(),
            resolver,
            refresh: Mutex::new(Refresh::default()),
            wake: Condvar::new(),
            refreshes: AtomicU64::new(0),
            refreshes_tried: AtomicU64::new(0),
            sentinel: None,
        }
    }

    /// Sentinel: why no primary is known, while none is (keys fail with this at once).
    pub fn unavailable(&self) -> Option<Error> {
        self.sentinel.as_ref().and_then(SentinelWatch::unavailable)
    }

    /// The map, for routing (a read lock: refreshes wait for it).
    pub fn map(&self) -> RwLockReadGuard<'_, SlotMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A node answered `MOVED`: route the slot there now, and re-read the whole map soon (a
    /// moved slot is rarely alone).
    pub fn moved(&self, slot: u16, node: &NodeAddr) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).apply_moved(slot, node);
        self.request_refresh();
    }

    /// Asks the refresher thread to re-read the map soon (re-reads come at least 100 ms apart).
    pub fn request_refresh(&self) {
        self.lock_refresh().wanted = true;
        self.wake.notify_all();
    }

    /// Maps re-read so far (for tests and diagnostics).
    #[cfg(feature = "internals")]
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Acquire)
    }

    /// Starts the thread that re-reads the map when asked, until [`ClusterView::stop`].
    pub fn spawn_refresher(self: &Arc<Self>) -> Result<JoinHandle<()>> {
        let view = self.clone();
        std::thread::Builder::new()
            .name("lmcache-resp-cluster".into())
            .spawn(move || view.refresh_loop())
            .map_err(|e| Error::os("cannot start the cluster map thread", e))
    }

    /// Ends the refresher thread (the caller joins it).
    pub fn stop(&self) {
        self.lock_refresh().stop = true;
        self.wake.notify_all();
    }

    fn lock_refresh(&self) -> std::sync::MutexGuard<'_, Refresh> {
        self.refresh.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refresh_loop(self: Arc<Self>) {
        // Sentinel: a thread listens for +switch-master and asks for a refresh on each.
        let listener = self.sentinel.as_ref().map(|_| {
            let view = self.clone();
            std::thread::Builder::new().name("lmcache-resp-sentinel".into()).spawn(move || {
                let watch = view.sentinel.as_ref().expect("a Sentinel view");
                watch.listen(&view.settings, &view.resolver, &|| view.lock_refresh().stop, &|| view.request_refresh());
            })
        });
        self.refresh_until_stopped();
        if let Some(Ok(listener)) = listener {
            let _ = listener.join();
        }
    }

    fn refresh_until_stopped(&self) {
        let mut last = Instant::now() - MIN_REFRESH_INTERVAL;
        let mut wait = MIN_REFRESH_INTERVAL;
        let relist_replicas = self.sentinel.is_some() && self.settings.reads_replicas();
        loop {
            {
                let mut state = self.lock_refresh();
                while !state.wanted && !state.stop {
                    if relist_replicas {
                        let (next, waited) = self
                            .wake
                            .wait_timeout(state, SENTINEL_REPLICAS_INTERVAL)
                            .unwrap_or_else(|p| p.into_inner());
                        state = next;
                        state.wanted |= waited.timed_out();
                    } else {
                        state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                }
                if state.stop {
                    return;
                }
                state.wanted = false;
            }
            let since = last.elapsed();
            if since < wait {
                std::thread::sleep(wait - since);
            }
            last = Instant::now();
            let outcome = self.refresh_once();
            // A permanent failure (the Sentinels refuse the credentials, or no longer know the
            // service) is asked about again only every few seconds.
            wait = match &outcome {
                Err(err) if self.sentinel.is_some() && crate::sentinel::is_permanent(err) => PERMANENT_RETRY_INTERVAL,
                _ => MIN_REFRESH_INTERVAL,
            };
            let mut state = self.lock_refresh();
            state.last_error = outcome.err().map(|e| e.to_string());
            if state.last_error.is_some() {
                // Nobody answered: the next request (or the next redirect) tries again.
                state.wanted = true;
            }
        }
    }

    /// Asks up to [`REFRESH_ASKS`] known primaries (each refresh starts one further along the
    /// map), then the seeds, for the map; takes the first good answer. Bounded so that a map
    /// of thousands of dead nodes costs one refresh a few connect timeouts, not thousands, and
    /// [`ClusterView::stop`] is heard between two nodes.
    fn refresh_once(&self) -> Result<()> {
        if let Some(watch) = &self.sentinel {
            let known = self.map().primary(0).cloned();
            let fresh =
                watch.discover_map(&self.settings, &self.resolver, known.as_ref(), &|| self.lock_refresh().stop)?;
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            if map.shard(0) != fresh.shard(0) {
                if let Some(primary) = fresh.primary(0).filter(|primary| map.primary(0) != Some(*primary)) {
                    log::info!(target: "lmcache_resp::sentinel", "the primary is now {primary}");
                }
                log::debug!(target: "lmcache_resp::sentinel", "reads now go to {:?}", fresh.shard(0));
                map.update_from(fresh);
            }
            self.refreshes.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let mut candidates: Vec<Endpoint> = {
            let map = self.map();
            let count = map.primaries().count();
            let start = self.refreshes_tried.fetch_add(1, Ordering::AcqRel) as usize % count.max(1);
            let asked = map.primaries().skip(start).chain(map.primaries().take(start));
            asked.take(REFRESH_ASKS).map(NodeAddr::endpoint).collect()
        };
        candidates.extend(self.settings.endpoints.iter().cloned());
        let mut last = None;
        for node in candidates {
            if self.lock_refresh().stop {
                return Err(Error::closed("the cluster map refresher"));
            }
            match fetch_map(&self.settings, &self.resolver, &node) {
                Ok(fresh) if fresh.is_fully_covered() => {
                    self.map.write().unwrap_or_else(|p| p.into_inner()).update_from(fresh);
                    self.refreshes.fetch_add(1, Ordering::AcqRel);
                    return Ok(());
                }
                Ok(fresh) => {
                    last = Some(Error::invalid(format!(
                        "{node} reports slots {} without an owner",
                        describe_ranges(&fresh.uncovered_slots())
                    )))
                }
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no node to ask for the cluster's slot map")))
    }
}

/// `CLUSTER SHARDS` (Redis 7), or `CLUSTER SLOTS` where the node predates it.
fn fetch_map(settings: &Settings, resolver: &Resolver, node: &Endpoint) -> Result<SlotMap> {
    let asked = match node {
        Endpoint::Tcp { host, port } => NodeAddr::new(host.clone(), *port),
        Endpoint::Unix { path } => {
            return Err(Error::invalid(format!(
                "cluster seed unix:{}: cluster nodes are reached over TCP (host:port)",
                path.display()
            )));
        }
    };
    let timeout = settings.connect_timeout.min(settings.timeout);
    let addresses = resolver.resolve_now(node, timeout)?;
    let mut client = BlockingClient::connect_to(settings.connect_options(node), addresses, timeout)?;
    let reply = match client.cluster(b"SHARDS") {
        Ok(reply) => {
            return SlotMap::from_shards_over(&reply, &asked, settings.tls.is_some())
                .map_err(|e| Error::new(ErrorKind::Protocol, e));
        }
        Err(err) if err.kind() == ErrorKind::Server && is_unknown_subcommand(err.message()) => client.cluster(b"SLOTS"),
        Err(err) => Err(err),
    };
    match reply {
        Ok(reply) => SlotMap::from_slots(&reply, &asked).map_err(|e| Error::new(ErrorKind::Protocol, e)),
        Err(err) if err.kind() == ErrorKind::Server && err.message().contains("cluster support disabled") => {
            Err(Error::invalid(format!(
                "cluster=true, but {node} is not a cluster node (its cluster support is disabled): drop \
                 cluster=true to use it as one server, or give the cluster's nodes"
            )))
        }
        Err(err) => Err(err),
    }
}

fn is_unknown_subcommand(message: &str) -> bool {
    message.to_ascii_lowercase().starts_with("err unknown subcommand")
}

fn describe_ranges(ranges: &[std::ops::RangeInclusive<u16>]) -> String {
    let shown: Vec<String> = ranges
        .iter()
        .take(4)
        .map(|r| if r.start() == r.end() { r.start().to_string() } else { format!("{}-{}", r.start(), r.end()) })
        .collect();
    let more = if ranges.len() > 4 { format!(" and {} more ranges", ranges.len() - 4) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}
