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

    /// Resolves every field from the sources: explicit > URL > environment > default.
    /// LMCache's valkey-adapter names (`startup_nodes`, `cluster_mode`, ...) count as the
    /// explicit settings they mean.
    pub fn resolve(sources: &Sources<'_>) -> Result<Settings> {
        let translated = valkey::translate(sources.explicit, sources.url)?;
        let sources = Sources {
            explicit: &translated.explicit,
            url: translated.url.as_deref().or(sources.url),
            env: sources.env,
        };
        let mut settings = Resolver::new(&sources)?.resolve()?;
        settings.warnings.extend(translated.warnings);
        Ok(settings)
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

struct Resolver<'a> {
    explicit: &'a [(String, Value)],
    /// Eviction fields from an explicit `eviction` block.
    explicit_eviction: &'a [(String, Value)],
    url: url::ParsedUrl,
    query: Vec<(String, Value)>,
    /// The environment's values, which are read as text, with the variable each came from.
    env_values: Vec<(&'static str, &'static str, Value)>,
}

impl<'a> Resolver<'a> {
    fn new(sources: &Sources<'a>) -> Result<Resolver<'a>> {
        if sources.explicit.iter().any(|(k, _)| k == names::KEY_PASSPHRASE_FIELD) {
            return Err(names::key_passphrase_refused());
        }
        let fields = fields();
        let unknown: Vec<&str> =
            sources.explicit.iter().map(|(k, _)| k.as_str()).filter(|k| !fields.contains(k)).collect();
        if !unknown.is_empty() {
            let mut accepted = fields;
            accepted.extend(lmcache_aliases().iter().map(|(alias, _)| *alias));
            return Err(names::unknown(&unknown, &accepted, "setting(s)"));
        }
        let explicit_eviction = match sources.explicit.iter().rev().find(|(k, _)| k == "eviction") {
            Some((_, value)) => {
                let block = Given { name: "eviction", value }.map("{\"eviction_policy\": \"LRU\"}")?;
                let accepted = eviction_fields();
                let unknown: Vec<&str> =
                    block.iter().map(|(k, _)| k.as_str()).filter(|k| !accepted.contains(k)).collect();
                if !unknown.is_empty() {
                    return Err(names::unknown(&unknown, &accepted, "eviction setting(s)"));
                }
                block
            }
            None => &[],
        };
        let url = sources.url.map(url::parse).transpose()?.unwrap_or_default();
        if url.query.iter().any(|(k, _)| k == names::KEY_PASSPHRASE_FIELD) {
            return Err(names::key_passphrase_refused());
        }
        if url.query.iter().any(|(k, _)| k == "sentinel_password") {
            return Err(sentinel::password_in_url_refused());
        }
        let query_keys = query_keys();
        let unknown: Vec<&str> =
            url.query.iter().map(|(k, _)| k.as_str()).filter(|k| !query_keys.contains(k)).collect();
        if !unknown.is_empty() {
            let shown = url::redact(sources.url.unwrap_or_default());
            let mut accepted = query_keys;
            accepted.extend(table::PARSED_QUERY_KEYS);
            return Err(names::unknown(&unknown, &accepted, &format!("parameter(s) in URL {shown:?}")));
        }
        let query = url.query.iter().map(|(k, v)| (k.clone(), Value::Text(v.clone()))).collect();
        let env_values = env_vars()
            .into_iter()
            .filter_map(|(field, var)| {
                let value = sources.env.iter().rev().find(|(k, _)| k == var).map(|(_, v)| v)?;
                (!value.is_empty()).then(|| (field, var, Value::Text(value.clone())))
            })
            .collect();
        Ok(Resolver { explicit: sources.explicit, explicit_eviction, url, query, env_values })
    }

    fn explicit(&self, name: &str) -> Option<&'a Value> {
        self.explicit.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    fn query_value(&self, name: &str) -> Option<&Value> {
        self.query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Explicit, then query: what a setting read alone is given as, named for the message.
    fn tuning<'s>(&'s self, name: &'s str) -> Option<Given<'s>> {
        self.explicit(name).or_else(|| self.query_value(name)).map(|value| Given { name, value })
    }

    fn env_value(&self, field: &str) -> Option<Given<'_>> {
        self.env_values.iter().find(|(f, _, _)| *f == field).map(|(_, var, value)| Given { name: var, value })
    }

    fn resolve(self) -> Result<Settings> {
        let endpoints = self.endpoints()?;
        let mut settings = Settings::new(endpoints[0].clone());
        settings.endpoints = endpoints;
        settings.username = self.credential("username", self.url.username.clone())?;
        settings.password = match self.explicit("password") {
            Some(Value::Text(text)) if text.is_empty() => None,
            Some(value) => Some(Given { name: "password", value }.secret()?),
            None => match &self.url.password {
                Some(password) => Some(password.clone()),
                None => self.env_value("password").map(|g| g.secret()).transpose()?,
            },
        };
        settings.db = match self.explicit("db") {
            Some(value) => Given { name: "db", value }.integer(0, (1 << 31) - 1)? as u32,
            None => self.url.db.unwrap_or(0),
        };
        // Every setting read alone, as its row says: explicit, then the URL's query, then its
        // variable.
        for row in SETTINGS.iter().filter(|row| row.read.is_alone()) {
            let given = self.tuning(row.name).or_else(|| row.env.and_then(|_| self.env_value(row.name)));
            if let Some(given) = given {
                row.read.apply(&given, &mut settings)?;
            }
        }
        if self.tuning("connect_timeout").is_none() {
            // Never longer than `timeout`, for every user of the settings alike.
            settings.connect_timeout = defaults::MAX_CONNECT_TIMEOUT.min(settings.timeout);
        }
        let eviction_field = |name: &str| {
            self.explicit_eviction
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
                .or_else(|| self.query_value(name))
        };
        let [policy, watermark, ratio] = ["eviction_policy", "trigger_watermark", "eviction_ratio"].map(eviction_field);
        settings.eviction = Eviction::from_values(policy, watermark, ratio)?;
        if (policy.is_some() || watermark.is_some() || ratio.is_some()) && settings.capacity_bytes() == 0 {
            settings
                .warnings
                .push("eviction settings have no effect without max_capacity_gb > 0 (capacity tracking is off)".into());
        }
        namespace::check_single_evictor(settings.ttl, settings.capacity_bytes())?;
        // Last: it reads files, once everything else is known to be valid.
        self.tls(&mut settings)?;
        self.sentinel(&mut settings)?;
        if settings.read_from == ReadFrom::PreferReplica && !settings.reads_replicas() {
            settings.warnings.push(
                "read_from=\"prefer_replica\" has no effect without cluster=true or Sentinel: every read goes to \
                 the one server (or its shard)"
                    .into(),
            );
        }
        Ok(settings)
    }

    /// Username: explicit (empty = none, the environment is not consulted), URL, environment.
    fn credential(&self, field: &str, from_url: Option<String>) -> Result<Option<String>> {
        let text = match self.explicit(field) {
            Some(value) => Some(Given { name: field, value }.text()?.to_owned()),
            None => match from_url {
                Some(text) => Some(text),
                None => self.env_value(field).map(|g| g.text().map(str::to_owned)).transpose()?,
            },
        };
        Ok(text.filter(|t| !t.is_empty()))
    }

    /// One Unix socket, one TCP server, or several (seeds of a cluster, or shards).
    fn endpoints(&self) -> Result<Vec<Endpoint>> {
        // An empty explicit host means "not set", as LMCache's configs use it.
        let host = self.explicit("host").filter(|v| !matches!(v, Value::Text(t) if t.is_empty()));
        let port = self.explicit("port");
        let unix_path = self.explicit("unix_path");
        if unix_path.is_some() && (host.is_some() || port.is_some()) {
            return Err(Error::invalid("give either host/port or unix_path, not both"));
        }
        let explicit_tcp = host.is_some() || port.is_some();
        if let Some(value) = unix_path {
            return Ok(vec![Endpoint::Unix { path: Given { name: "unix_path", value }.text()?.into() }]);
        }
        if let (Some(path), false) = (&self.url.unix_path, explicit_tcp) {
            return Ok(vec![Endpoint::Unix { path: path.into() }]);
        }
        let default_port = || -> Result<u16> {
            match self.env_value("port") {
                Some(given) => Ok(given.integer(1, 65535)? as u16),
                None => Ok(defaults::PORT),
            }
        };
        if self.url.hosts.len() > 1 && !explicit_tcp {
            let port = default_port()?;
            return Ok(self
                .url
                .hosts
                .iter()
                .map(|(host, p)| Endpoint::Tcp { host: host.clone(), port: p.unwrap_or(port) })
                .collect());
        }
        let from_url = self.url.hosts.first();
        let host = match host {
            Some(value) => Given { name: "host", value }.text()?.to_owned(),
            None => match from_url {
                Some((host, _)) => host.clone(),
                None => match self.env_value("host") {
                    Some(given) => given.text()?.to_owned(),
                    None => defaults::HOST.to_owned(),
                },
            },
        };
        let port = match (port, from_url.and_then(|(_, p)| *p)) {
            (Some(value), _) => Given { name: "port", value }.integer(1, 65535)? as u16,
            (None, Some(port)) => port,
            (None, None) => default_port()?,
        };
        Ok(vec![Endpoint::Tcp { host, port }])
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
