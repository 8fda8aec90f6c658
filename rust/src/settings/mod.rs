//! Every setting of a client, store or connector: one type, its defaults, and the one place
//! values are checked. Each setting is declared once, as a row of [`SETTINGS`] (`table.rs`):
//! its names, where a URL and the environment carry it, and how it is read and shown.
//!
//! Settings come from four sources, resolved field by field: explicit values (keyword
//! arguments, LMCache's adapter params), then the URL (its authority, path and query), then
//! the `LMCACHE_RESP_*` environment variables (host, port, username and password, the TLS
//! files where TLS is on, and the I/O loop), then the defaults below. Callers gather the sources;
//! [`Settings::resolve`] decides. TLS (`rediss://`, `ssl=True`, the `ssl_*` fields) is
//! `tls`'s.

mod capacity;
mod io_backend;
mod lmcache;
mod names;
mod namespace;
mod pieces;
mod read_from;
mod resolver;
mod sentinel;
mod sentinel_resolve;
mod table;
pub(crate) mod tls;
pub(crate) mod url;
mod valkey;
mod value;

pub use capacity::{CapacityConfig, EvictionPolicy};
pub use io_backend::IoBackend;
pub use lmcache::AFFINITY_TAG_WARNING;
pub use namespace::{KEY_SEPARATOR, expiry_ms, wire_prefix};
pub use pieces::GetPieces;
pub use read_from::ReadFrom;
pub use sentinel::{DEFAULT_SENTINEL_PORT, SentinelSettings};
pub use table::{
    EVICTION_SETTINGS, Group, InUrl, Read, SETTINGS, Setting, Shown, env_vars, eviction_fields, fields,
    lmcache_aliases, query_keys,
};
pub use value::Value;
// What the settings' API names from the wire below.
pub use crate::conn::PipelineLimits;
pub use crate::net::tls::{KeyLimit, TlsOptions};
pub use crate::net::{Endpoint, TlsConfig};

use crate::error::{Error, Result};
use crate::net::ConnectOptions;
use crate::secret::Secret;
use lmcache_resp_numa::CpuAffinity;
use std::fmt;
use std::time::Duration;
use value::Given;

/// The defaults, in one place.
pub mod defaults {
    use std::time::Duration;

    /// Server host when neither the caller, the URL nor `LMCACHE_RESP_HOST` names one.
    pub const HOST: &str = "localhost";
    /// Server port when neither the caller, the URL nor `LMCACHE_RESP_PORT` names one.
    pub const PORT: u16 = 6379;
    /// [`Settings::timeout`](super::Settings::timeout) when not set.
    pub const TIMEOUT: Duration = Duration::from_secs(10);
    /// Connecting (TCP plus AUTH/SELECT/PING) takes at most this long by default, and never
    /// longer than `timeout`: a dead server is reported in seconds, not after a whole timeout.
    pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// I/O worker threads when not set.
    pub const NUM_WORKERS: usize = 8;
    /// Connections per worker to each server when not set.
    pub const CONNECTIONS_PER_WORKER: usize = 1;
    /// Pages are faulted in when the arena is created, so the first batch does not pay for it.
    pub const PREFAULT: bool = true;
    /// A store, connector or client whose server cannot be reached at start is an error (an
    /// engine's adapter params turn it off: see `Settings::from_adapter_params`).
    pub const REQUIRE_SERVER_AT_START: bool = true;
    /// [`Eviction::trigger_watermark`](super::Eviction::trigger_watermark) when not set.
    pub const TRIGGER_WATERMARK: f64 = 0.8;
    /// [`Eviction::eviction_ratio`](super::Eviction::eviction_ratio) when not set.
    pub const EVICTION_RATIO: f64 = 0.2;

    /// The largest `num_workers` accepted.
    pub const MAX_NUM_WORKERS: u64 = 1024;
    /// The largest `connections_per_worker` accepted.
    pub const MAX_CONNECTIONS_PER_WORKER: u64 = 64;
    /// The largest `max_inflight_bytes` accepted (1 TiB).
    pub const MAX_INFLIGHT_BYTES: u64 = 1 << 40;
    /// The largest `max_inflight_requests` accepted.
    pub const MAX_INFLIGHT_REQUESTS: u64 = 1 << 20;
    /// How GETs of large values are read: decided per server from what it is
    /// (`crate::ranged::shape`).
    pub const GET_PIECES: super::GetPieces = super::GetPieces::Auto;
    /// Smallest piece size accepted (other than 0, which turns pieces off).
    pub const MIN_GET_PIECE_BYTES: u64 = 4096;
    /// Largest piece size accepted.
    pub const MAX_GET_PIECE_BYTES: u64 = 1 << 30;
}

/// `"auto"`, or 0, or a piece size in bytes.
fn get_pieces(given: &Given<'_>) -> Result<GetPieces> {
    if matches!(given.value, Value::Text(text) if text.trim().eq_ignore_ascii_case("auto")) {
        return Ok(GetPieces::Auto);
    }
    let refuse = || {
        Error::invalid(format!(
            "get_piece_bytes must be \"auto\" (decided per server), 0 (one GET per value) or a piece size of {}..{} \
             bytes, got {}",
            defaults::MIN_GET_PIECE_BYTES,
            defaults::MAX_GET_PIECE_BYTES,
            given.value
        ))
    };
    let bytes = given.integer(0, defaults::MAX_GET_PIECE_BYTES).map_err(|_| refuse())?;
    if bytes != 0 && bytes < defaults::MIN_GET_PIECE_BYTES {
        return Err(refuse());
    }
    Ok(GetPieces::Bytes(bytes as usize))
}

/// `max_capacity_gb`: a number >= 0.
fn capacity_gb(given: &Given<'_>) -> Result<f64> {
    let gb = given.number(">= 0")?;
    if gb < 0.0 {
        return Err(Error::invalid(format!("{} must be a number >= 0, got {}", given.name, given.value)));
    }
    Ok(gb)
}

/// `max_capacity_gb` counts GiB (2^30 bytes), as LMCache's own adapters do
/// (`native_connector_l2_adapter.py`: `max_capacity_gb * 1024**3`), so one figure means the
/// same to both.
pub const BYTES_PER_GB: f64 = (1u64 << 30) as f64;

/// Client-side eviction once `max_capacity_gb` is set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Eviction {
    /// Which tracked keys an eviction deletes.
    pub policy: EvictionPolicy,
    /// Evict once tracked bytes pass this share of the capacity.
    pub trigger_watermark: f64,
    /// Share of the tracked keys deleted per eviction.
    pub eviction_ratio: f64,
}

impl Default for Eviction {
    fn default() -> Self {
        Eviction {
            policy: EvictionPolicy::Lru,
            trigger_watermark: defaults::TRIGGER_WATERMARK,
            eviction_ratio: defaults::EVICTION_RATIO,
        }
    }
}

impl Eviction {
    /// Checks and builds a block from its three fields (each optional: defaults fill in).
    pub fn from_values(policy: Option<&Value>, watermark: Option<&Value>, ratio: Option<&Value>) -> Result<Eviction> {
        let mut eviction = Eviction::default();
        if let Some(value) = policy {
            eviction.policy = eviction_policy(&Given { name: "eviction.eviction_policy", value })?;
        }
        if let Some(value) = watermark {
            eviction.trigger_watermark = Given { name: "eviction.trigger_watermark", value }.fraction()?;
        }
        if let Some(value) = ratio {
            eviction.eviction_ratio = Given { name: "eviction.eviction_ratio", value }.fraction()?;
        }
        Ok(eviction)
    }
}

fn eviction_policy(given: &Given<'_>) -> Result<EvictionPolicy> {
    let refuse = || Error::invalid(format!("{} must be one of 'LRU', 'noop', got {}", given.name, given.value));
    match given.value {
        Value::Text(text) => text.trim().parse().map_err(|_| refuse()),
        _ => Err(refuse()),
    }
}

/// Resolved settings: every field has a checked value.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The servers: one, several independent ones (static sharding), or a cluster's seeds.
    pub endpoints: Vec<Endpoint>,
    /// The endpoints are seeds of a Redis Cluster.
    pub cluster: bool,
    /// ACL user for AUTH (used only with a password); None authenticates the default user.
    pub username: Option<String>,
    /// Password for AUTH; None sends no AUTH.
    pub password: Option<Secret>,
    /// Database selected on every connection (no SELECT is sent for 0).
    pub db: u32,
    /// Every operation completes, with success or an error, within this time.
    pub timeout: Duration,
    /// Connecting (TCP plus AUTH/SELECT/PING) gives up after this long.
    pub connect_timeout: Duration,
    /// I/O worker threads of the engine.
    pub num_workers: usize,
    /// Connections each worker opens to every server it talks to for requests of any size; it
    /// opens one more, its express connection, for small ones (see `engine::route`).
    pub connections_per_worker: usize,
    /// How much each connection keeps on the wire at once.
    pub pipeline: PipelineLimits,
    /// Where the I/O workers run and their memory lives.
    pub cpu_affinity: CpuAffinity,
    /// Client-side capacity tracking; 0 tracks nothing.
    pub max_capacity_gb: f64,
    /// How capacity tracking evicts (used only when `max_capacity_gb` > 0).
    pub eviction: Eviction,
    /// How GETs of large values are read: per server (`auto`), or in pieces of a given size
    /// (0: every value with one GET).
    pub get_piece_bytes: GetPieces,
    /// Redis Cluster: where GET and EXISTS go (the primary, or spread over it and its replicas).
    pub read_from: ReadFrom,
    /// Which loop the I/O workers run (`auto`, `uring`, `poll`).
    pub io_backend: IoBackend,
    /// Fault the arena's pages in at creation.
    pub prefault: bool,
    /// Whether a server that cannot be reached at start (refused, timed out, down) fails the
    /// start; otherwise it starts without it, its keys failing fast until it answers. A wrong
    /// password, certificate or address fails the start either way.
    pub require_server_at_start: bool,
    /// TLS to every server (and every cluster node); `None` is plaintext. Built (its files
    /// read and checked) when the settings are resolved.
    pub tls: Option<std::sync::Arc<crate::net::TlsConfig>>,
    /// The namespace: every key goes on the wire as `<prefix>@<key>` (see `namespace`).
    pub key_prefix: Option<String>,
    /// Every SET carries this expiry (`PX`); None: keys never expire.
    pub ttl: Option<Duration>,
    /// The Sentinels that name the data server, when it is found through them; `endpoints`
    /// are then the Sentinels.
    pub sentinel: Option<SentinelSettings>,
    /// Settings accepted but without effect, for the caller to log.
    pub warnings: Vec<String>,
}

impl Settings {
    /// Defaults for one server.
    pub fn new(endpoint: Endpoint) -> Settings {
        Settings {
            endpoints: vec![endpoint],
            cluster: false,
            username: None,
            password: None,
            db: 0,
            timeout: defaults::TIMEOUT,
            connect_timeout: defaults::MAX_CONNECT_TIMEOUT.min(defaults::TIMEOUT),
            num_workers: defaults::NUM_WORKERS,
            connections_per_worker: defaults::CONNECTIONS_PER_WORKER,
            pipeline: PipelineLimits::default(),
            cpu_affinity: CpuAffinity::Auto,
            max_capacity_gb: 0.0,
            eviction: Eviction::default(),
            prefault: defaults::PREFAULT,
            require_server_at_start: defaults::REQUIRE_SERVER_AT_START,
            get_piece_bytes: defaults::GET_PIECES,
            read_from: ReadFrom::Primary,
            io_backend: IoBackend::default(),
            tls: None,
            key_prefix: None,
            ttl: None,
            sentinel: None,
            warnings: Vec::new(),
        }
    }

    /// The first (for one server, the only) endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoints[0]
    }

    /// How to reach and log in to `endpoint`.
    pub(crate) fn connect_options(&self, endpoint: &Endpoint) -> ConnectOptions {
        ConnectOptions {
            endpoint: endpoint.clone(),
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            connect_timeout: self.connect_timeout,
            tls: self.tls.clone(),
            readonly: self.cluster && self.reads_replicas(),
        }
    }

    /// Reads go to replicas too: a cluster's (every connection then sends `READONLY` in its
    /// handshake), or those the Sentinels list (standalone replicas serve reads as they are,
    /// and refuse `READONLY` outside cluster mode).
    pub(crate) fn reads_replicas(&self) -> bool {
        self.read_from == ReadFrom::PreferReplica && (self.cluster || self.sentinel.is_some())
    }

    /// `max_capacity_gb` in bytes (GiB, see [`BYTES_PER_GB`]); 0 when tracking is off.
    pub fn capacity_bytes(&self) -> u64 {
        (self.max_capacity_gb * BYTES_PER_GB) as u64
    }

    /// Capacity tracking, when `max_capacity_gb` > 0.
    pub fn capacity(&self) -> Option<CapacityConfig> {
        (self.capacity_bytes() > 0).then(|| CapacityConfig {
            capacity_bytes: self.capacity_bytes(),
            policy: self.eviction.policy,
            trigger_watermark: self.eviction.trigger_watermark,
            eviction_ratio: self.eviction.eviction_ratio,
        })
    }

    /// What goes before every key on the wire: `<key_prefix>@`, or nothing.
    pub fn wire_prefix(&self) -> Box<[u8]> {
        wire_prefix(self.key_prefix.as_deref())
    }
}

/// Where settings come from. `explicit` holds what the caller set (absent = not set); `env`
/// holds environment variables (only those of [`env_vars`] are read).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources<'a> {
    /// Settings the caller gave by name (the last of a name wins).
    pub explicit: &'a [(String, Value)],
    /// The connection URL, if any (`redis://`, `unix://`, ...; see `url::parse`).
    pub url: Option<&'a str>,
    /// The process environment as `(name, value)` pairs.
    pub env: &'a [(String, String)],
}

/// The password never shows, nor any key: TLS shows as its file paths and switches.
impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoints: Vec<String> = self.endpoints.iter().map(ToString::to_string).collect();
        write!(f, "endpoints=[{}]", endpoints.join(", "))?;
        if let Some(sentinel) = &self.sentinel {
            write!(f, " sentinel service {:?}", sentinel.service)?;
            if sentinel.password.is_some() {
                f.write_str(" sentinel_password=***")?;
            }
        }
        if self.cluster {
            f.write_str(" cluster")?;
        }
        write!(f, " db={} timeout={}s", self.db, self.timeout.as_secs_f64())?;
        if let Some(user) = &self.username {
            write!(f, " username={user:?}")?;
        }
        if self.password.is_some() {
            f.write_str(" password=***")?;
        }
        if let Some(tls) = &self.tls {
            write!(f, " {}", Describe(tls))?;
        }
        if let Some(prefix) = &self.key_prefix {
            write!(f, " key_prefix={prefix:?}")?;
        }
        if let Some(ttl) = self.ttl {
            write!(f, " ttl={}s", ttl.as_secs())?;
        }
        write!(f, " num_workers={}", self.num_workers)
    }
}

/// `tls=on (ca=/etc/ca.pem, client cert=/etc/client.pem, hostname checked)`: paths and
/// switches, never key material.
struct Describe<'a>(&'a TlsConfig);

impl fmt::Display for Describe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options = self.0.options();
        let mut parts = Vec::new();
        if !options.verify_certificate {
            parts.push("certificate NOT verified".to_owned());
        } else {
            if let Some(ca) = &options.ca_certs {
                parts.push(format!("ca={}", ca.display()));
            }
            if let Some(dir) = &options.ca_path {
                parts.push(format!("ca_path={}", dir.display()));
            }
            if options.ca_certs.is_none() && options.ca_path.is_none() {
                parts.push("system trust store".to_owned());
            }
        }
        if let Some(cert) = &options.certfile {
            parts.push(format!("client cert={}", cert.display()));
        }
        if options.verify_certificate {
            parts.push(if options.check_hostname { "hostname checked" } else { "hostname NOT checked" }.to_owned());
        }
        if let Some(name) = &options.server_name {
            parts.push(format!("server_name={name}"));
        }
        write!(f, "tls=on ({})", parts.join(", "))
    }
}

fn cpu_affinity(given: &Given<'_>) -> Result<CpuAffinity> {
    let text = given.text().map_err(|_| affinity_error(given, "it is not a str"))?;
    text.parse().map_err(|err: lmcache_resp_numa::NumaError| affinity_error(given, &err.to_string()))
}

fn affinity_error(given: &Given<'_>, why: &str) -> Error {
    Error::invalid(format!(
        "cpu_affinity must be 'auto', 'none', 'numa:N' or a CPU list like '0-3,8', got {} ({why})",
        given.value
    ))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod table_tests;
