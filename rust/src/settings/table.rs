//! Every setting, declared once: one row each, in [`SETTINGS`] (and the `eviction` block's
//! fields in [`EVICTION_SETTINGS`]).
//!
//! A row says what a setting is called (the keyword, the `adapter_params` key, the URL query
//! key and the `to_dict` key are one name), what a caller gives it as, where a URL carries it,
//! the `LMCACHE_RESP_*` variable that fills it in, LMCache's `valkey`-adapter name for it, how it
//! is read and how it shows. The rest comes from the rows: the names accepted (and the "did you
//! mean" among them), a URL's query keys, the variables read, the resolver's loop over the
//! settings read one by one (`Resolver::resolve`), and the Python getters and `to_dict`
//! (`python/settings.rs`). Its default is its field's in [`Settings::new`] (from
//! [`defaults`](super::defaults)). docs/lmcache.md, `lmcache_resp/_typing.py` and
//! `lmcache_resp/_native.pyi` are checked against the rows (`table_tests.rs` here,
//! py-tests/test_stubs.py): a setting one of them lacks fails, named.
//!
//! Adding a setting: its row, its field in [`Settings`] with its default in [`Settings::new`],
//! and, for a setting resolved with others ([`Read::With`]), the resolver's code for it. The
//! checks then name the lines docs/lmcache.md, `_typing.py` and `_native.pyi` still need.
//!
//! A table of descriptors rather than a macro: each row is plain data a reader can scan, and
//! the code that reads a setting stays ordinary code (a function the row names).

use super::value::Given;
use super::{Eviction, GetPieces, Settings, defaults};
use crate::error::Result;
use crate::net::Endpoint;
use crate::secret::Secret;
use std::time::Duration;

/// One setting.
pub struct Setting {
    /// The keyword, `adapter_params` key, URL query key and `to_dict` key.
    pub name: &'static str,
    /// What a caller gives it as, in Python's terms (`SettingsKwargs` in `_typing.py` declares
    /// exactly this, with `| None`: "not set").
    pub accepts: &'static str,
    /// Where a URL carries it.
    pub url: InUrl,
    /// The environment variable that fills it in when no argument or URL sets it.
    pub env: Option<&'static str>,
    /// LMCache's `valkey` adapter's name for it (`valkey_l2_adapter.py`), accepted beside ours
    /// (translated in `valkey.rs`).
    pub lmcache: Option<&'static str>,
    /// How a given value becomes the field.
    pub read: Read,
    /// The resolved value, as the Python getter and `to_dict` show it.
    pub show: fn(&Settings) -> Shown,
    /// One line for the Python getter's docstring.
    pub doc: &'static str,
}

/// Where a URL carries a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InUrl {
    /// In its query, under its name: `?num_workers=16`.
    Query,
    /// In the URL itself, read by `url::parse` (the authority, the path, or a query key it
    /// takes out: `?db=`, redis-py's `?username=`/`?password=`); the text is the form, as the
    /// docs show it.
    Parsed(&'static str),
    /// Never: a URL shows in logs and errors.
    Never,
}

/// How a given value is read into [`Settings`].
pub enum Read {
    /// An integer in `min..=max`.
    Integer {
        /// The smallest accepted.
        min: u64,
        /// The largest accepted.
        max: u64,
        /// Stores it.
        set: fn(&mut Settings, u64),
    },
    /// A number of seconds > 0.
    Seconds(fn(&mut Settings, Duration)),
    /// True or false (also as text: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`).
    Flag(fn(&mut Settings, bool)),
    /// Checked by its own function, whose errors say what it accepts.
    Checked(fn(&Given<'_>, &mut Settings) -> Result<()>),
    /// Resolved together with the other settings of its group, by the resolver's code for the
    /// group.
    With(Group),
}

/// The settings resolved together, because one decides how the others read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// The servers: host and port, or a Unix socket (`Resolver::endpoints`).
    Server,
    /// What the handshake sends: the credentials and the database (`Resolver::resolve`).
    Login,
    /// The `eviction` block (`Resolver::resolve`, [`Eviction::from_values`]).
    Eviction,
    /// TLS: `ssl` turns it on, the `ssl_*` fields need it (`tls.rs`).
    Tls,
    /// Sentinels and the service they watch (`sentinel_resolve.rs`).
    Sentinel,
}

impl Read {
    /// Read alone: explicit, then the URL's query, then its variable (the resolver's loop).
    pub fn is_alone(&self) -> bool {
        !matches!(self, Read::With(_))
    }

    /// Checks `given` and stores it; a setting read [`Read::With`] others is not read here.
    pub(super) fn apply(&self, given: &Given<'_>, settings: &mut Settings) -> Result<()> {
        match self {
            Read::Integer { min, max, set } => set(settings, given.integer(*min, *max)?),
            Read::Seconds(set) => set(settings, given.seconds()?),
            Read::Flag(set) => set(settings, given.flag()?),
            Read::Checked(read) => read(given, settings)?,
            Read::With(group) => unreachable!("{} is resolved with its group {group:?}", given.name),
        }
        Ok(())
    }
}

/// A resolved value as Python sees it. The bindings turn it into the object (`Secret` and
/// `EvictionSettings` into theirs; in `to_dict`, a secret into `"***"` and the block into a dict).
#[derive(Clone, Debug, PartialEq)]
pub enum Shown {
    /// Not set.
    None,
    /// A bool.
    Flag(bool),
    /// A whole number.
    Count(u64),
    /// A real number.
    Number(f64),
    /// Text.
    Text(String),
    /// A password.
    Secret(Secret),
    /// The eviction block.
    Eviction(Eviction),
}

impl Shown {
    fn text(text: Option<impl Into<String>>) -> Shown {
        text.map_or(Shown::None, |t| Shown::Text(t.into()))
    }
}

/// Every setting a caller may give by name, in the order `to_dict` shows them.
pub static SETTINGS: &[Setting] = &[
    Setting {
        name: "host",
        accepts: "str",
        url: InUrl::Parsed("resp://HOST:port"),
        env: Some("LMCACHE_RESP_HOST"),
        lmcache: Some("startup_nodes"),
        read: Read::With(Group::Server),
        show: |s| match s.endpoint() {
            Endpoint::Tcp { host, .. } => Shown::Text(host.clone()),
            Endpoint::Unix { .. } => Shown::None,
        },
        doc: "Host of the first server (None for a Unix socket).",
    },
    Setting {
        name: "port",
        accepts: "int | str",
        url: InUrl::Parsed("resp://host:PORT"),
        env: Some("LMCACHE_RESP_PORT"),
        lmcache: None,
        read: Read::With(Group::Server),
        show: |s| match s.endpoint() {
            Endpoint::Tcp { port, .. } => Shown::Count(u64::from(*port)),
            Endpoint::Unix { .. } => Shown::Count(u64::from(defaults::PORT)),
        },
        doc: "Port of the first server.",
    },
    Setting {
        name: "unix_path",
        accepts: "str",
        url: InUrl::Parsed("unix:///path/redis.sock"),
        env: None,
        lmcache: None,
        read: Read::With(Group::Server),
        show: |s| match s.endpoint() {
            Endpoint::Unix { path } => Shown::Text(path.display().to_string()),
            Endpoint::Tcp { .. } => Shown::None,
        },
        doc: "The Unix socket of the server (None for TCP).",
    },
    Setting {
        name: "cluster",
        accepts: "bool",
        url: InUrl::Query,
        env: None,
        lmcache: Some("cluster_mode"),
        read: Read::Flag(|s, on| s.cluster = on),
        show: |s| Shown::Flag(s.cluster),
        doc: "The servers are seeds of a Redis Cluster.",
    },
    Setting {
        name: "username",
        accepts: "str",
        url: InUrl::Parsed("redis://USER:pw@host"),
        env: Some("LMCACHE_RESP_USERNAME"),
        lmcache: None,
        read: Read::With(Group::Login),
        show: |s| Shown::text(s.username.clone()),
        doc: "ACL user for AUTH (None: the default user).",
    },
    Setting {
        name: "password",
        accepts: "str | Secret",
        url: InUrl::Parsed("redis://user:PW@host"),
        env: Some("LMCACHE_RESP_PASSWORD"),
        lmcache: None,
        read: Read::With(Group::Login),
        show: |s| s.password.clone().map_or(Shown::None, Shown::Secret),
        doc: "Password for AUTH, as a Secret (None: no AUTH).",
    },
    Setting {
        name: "db",
        accepts: "int",
        url: InUrl::Parsed("redis://host/DB"),
        env: None,
        lmcache: Some("database_id"),
        read: Read::With(Group::Login),
        show: |s| Shown::Count(u64::from(s.db)),
        doc: "Database selected on every connection.",
    },
    Setting {
        name: "timeout",
        accepts: "float",
        url: InUrl::Query,
        env: None,
        lmcache: Some("request_timeout"),
        read: Read::Seconds(|s, t| s.timeout = t),
        show: |s| Shown::Number(s.timeout.as_secs_f64()),
        doc: "Seconds within which every operation completes, with success or an error.",
    },
    Setting {
        name: "connect_timeout",
        accepts: "float",
        url: InUrl::Query,
        env: None,
        lmcache: Some("connection_timeout"),
        read: Read::Seconds(|s, t| s.connect_timeout = t),
        show: |s| Shown::Number(s.connect_timeout.as_secs_f64()),
        doc: "Seconds connecting (TCP plus AUTH/SELECT/PING) may take.",
    },
    Setting {
        name: "num_workers",
        accepts: "int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Integer { min: 1, max: defaults::MAX_NUM_WORKERS, set: |s, n| s.num_workers = n as usize },
        show: |s| Shown::Count(s.num_workers as u64),
        doc: "I/O worker threads.",
    },
    Setting {
        name: "connections_per_worker",
        accepts: "int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Integer {
            min: 1,
            max: defaults::MAX_CONNECTIONS_PER_WORKER,
            set: |s, n| s.connections_per_worker = n as usize,
        },
        show: |s| Shown::Count(s.connections_per_worker as u64),
        doc: "Connections each worker opens to every server (besides its express connection).",
    },
    Setting {
        name: "max_inflight_bytes",
        accepts: "int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Integer {
            min: 1,
            max: defaults::MAX_INFLIGHT_BYTES,
            set: |s, n| s.pipeline.max_inflight_bytes = n as usize,
        },
        show: |s| Shown::Count(s.pipeline.max_inflight_bytes as u64),
        doc: "Bytes each connection keeps on the wire at once.",
    },
    Setting {
        name: "max_inflight_requests",
        accepts: "int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Integer {
            min: 1,
            max: defaults::MAX_INFLIGHT_REQUESTS,
            set: |s, n| s.pipeline.max_inflight_requests = n as usize,
        },
        show: |s| Shown::Count(s.pipeline.max_inflight_requests as u64),
        doc: "Requests each connection keeps on the wire at once.",
    },
    Setting {
        name: "cpu_affinity",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.cpu_affinity = super::cpu_affinity(given)?;
            Ok(())
        }),
        show: |s| Shown::Text(s.cpu_affinity.to_string()),
        doc: "Where the I/O workers run: 'auto', 'none', 'numa:N' or a CPU list.",
    },
    Setting {
        name: "max_capacity_gb",
        accepts: "float",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.max_capacity_gb = super::capacity_gb(given)?;
            Ok(())
        }),
        show: |s| Shown::Number(s.max_capacity_gb),
        doc: "Client-side capacity tracking, in GiB; 0: off.",
    },
    Setting {
        name: "eviction",
        accepts: "Mapping[str, Any] | EvictionSettings",
        url: InUrl::Never,
        env: None,
        lmcache: None,
        read: Read::With(Group::Eviction),
        show: |s| Shown::Eviction(s.eviction),
        doc: "How capacity tracking evicts (its fields go flat in a URL's query).",
    },
    Setting {
        name: "prefault",
        accepts: "bool",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Flag(|s, on| s.prefault = on),
        show: |s| Shown::Flag(s.prefault),
        doc: "Fault the store's arena in at creation.",
    },
    Setting {
        name: "require_server_at_start",
        accepts: "bool",
        url: InUrl::Query,
        // An engine's deployment decides whether it may start while its cache tier is down.
        env: Some("LMCACHE_RESP_REQUIRE_SERVER_AT_START"),
        lmcache: None,
        read: Read::Flag(|s, on| s.require_server_at_start = on),
        show: |s| Shown::Flag(s.require_server_at_start),
        doc: "Whether a server that cannot be reached at start fails the start (else its keys fail fast until it answers).",
    },
    Setting {
        name: "get_piece_bytes",
        accepts: "int | str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.get_piece_bytes = super::get_pieces(given)?;
            Ok(())
        }),
        show: |s| match s.get_piece_bytes {
            GetPieces::Auto => Shown::Text("auto".into()),
            GetPieces::Bytes(bytes) => Shown::Count(bytes as u64),
        },
        doc: "How GETs of large values are read: 'auto' (per server), or a piece size in bytes (0: one GET).",
    },
    Setting {
        name: "key_prefix",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.key_prefix = super::namespace::key_prefix(given)?;
            Ok(())
        }),
        show: |s| Shown::text(s.key_prefix.clone()),
        doc: "The namespace: keys go on the wire as <key_prefix>@<key>; None: no prefix.",
    },
    Setting {
        name: "ttl_seconds",
        accepts: "int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.ttl = Some(super::namespace::ttl(given)?);
            Ok(())
        }),
        show: |s| s.ttl.map_or(Shown::None, |ttl| Shown::Count(ttl.as_secs())),
        doc: "Every SET expires its key after this many seconds; None: never.",
    },
    Setting {
        name: "read_from",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.read_from = super::read_from::read_from(given)?;
            Ok(())
        }),
        show: |s| Shown::Text(s.read_from.name().into()),
        doc: "Where GET and EXISTS go: 'primary', or 'prefer_replica' (its replicas too).",
    },
    Setting {
        name: "io_backend",
        accepts: "str",
        url: InUrl::Query,
        // Which I/O loop: a deployment's (a container that forbids io_uring) and the test
        // suites' (each pass of scripts/test.sh runs one loop).
        env: Some("LMCACHE_RESP_IO_BACKEND"),
        lmcache: None,
        read: Read::Checked(|given, s| {
            s.io_backend = super::io_backend::io_backend(given)?;
            Ok(())
        }),
        show: |s| Shown::Text(s.io_backend.name().into()),
        doc: "Which loop the I/O workers run: 'auto' (io_uring where allowed, else poll), 'uring' or 'poll'.",
    },
    Setting {
        name: "ssl",
        accepts: "bool",
        url: InUrl::Query,
        env: None,
        lmcache: Some("tls_enable"),
        read: Read::With(Group::Tls),
        show: |s| Shown::Flag(s.tls.is_some()),
        doc: "TLS is on (rediss:// or ssl=True).",
    },
    // The TLS files' variables apply only where TLS is on: set for a whole deployment, they are
    // not an error for a plaintext server.
    Setting {
        name: "ssl_ca_certs",
        accepts: "str | os.PathLike[str]",
        url: InUrl::Query,
        env: Some("LMCACHE_RESP_SSL_CA_CERTS"),
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(tls_path(s, |o| &o.ca_certs)),
        doc: "The CA bundle trusted; None: the system trust store (or ssl_ca_path), or no TLS.",
    },
    Setting {
        name: "ssl_ca_path",
        accepts: "str | os.PathLike[str]",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(tls_path(s, |o| &o.ca_path)),
        doc: "The directory of CA certificates trusted; None if not set or no TLS.",
    },
    Setting {
        name: "ssl_certfile",
        accepts: "str | os.PathLike[str]",
        url: InUrl::Query,
        env: Some("LMCACHE_RESP_SSL_CERTFILE"),
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(tls_path(s, |o| &o.certfile)),
        doc: "This client's certificate (mutual TLS); None if not set or no TLS.",
    },
    Setting {
        name: "ssl_keyfile",
        accepts: "str | os.PathLike[str]",
        url: InUrl::Query,
        env: Some("LMCACHE_RESP_SSL_KEYFILE"),
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(tls_path(s, |o| &o.keyfile)),
        doc: "The path of the client certificate's key (never its contents); None if not set.",
    },
    Setting {
        name: "ssl_check_hostname",
        accepts: "bool",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::Flag(s.tls.as_ref().is_some_and(|t| t.options().check_hostname)),
        doc: "The server's certificate must name the host (or ssl_server_name); False without TLS.",
    },
    Setting {
        name: "ssl_cert_reqs",
        accepts: "str | int",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(s.tls.as_ref().map(|t| if t.verification_off() { "none" } else { "required" })),
        doc: "'required' (the server's certificate is verified) or 'none'; None without TLS.",
    },
    Setting {
        name: "ssl_server_name",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Tls),
        show: |s| Shown::text(s.tls.as_ref().and_then(|t| t.options().server_name.clone())),
        doc: "The name sent as SNI and verified instead of the host; None if not set or no TLS.",
    },
    Setting {
        name: "sentinel_nodes",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Sentinel),
        show: |s| {
            let nodes = s.sentinel.as_ref().map(|t| t.nodes.iter().map(ToString::to_string).collect::<Vec<_>>());
            Shown::text(nodes.map(|nodes| nodes.join(",")))
        },
        doc: "The Sentinels asked for the primary ('host:port,host:port'); None without Sentinel.",
    },
    Setting {
        name: "sentinel_service_name",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Sentinel),
        show: |s| Shown::text(s.sentinel.as_ref().map(|t| t.service.clone())),
        doc: "The service the Sentinels watch; None without Sentinel.",
    },
    Setting {
        name: "sentinel_username",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Sentinel),
        show: |s| Shown::text(s.sentinel.as_ref().and_then(|t| t.username.clone())),
        doc: "The Sentinels' ACL user; None if not set.",
    },
    Setting {
        name: "sentinel_password",
        accepts: "str | Secret",
        url: InUrl::Never,
        env: None,
        lmcache: None,
        read: Read::With(Group::Sentinel),
        show: |s| s.sentinel.as_ref().and_then(|t| t.password.clone()).map_or(Shown::None, Shown::Secret),
        doc: "The Sentinels' password, as a Secret; None if not set.",
    },
    Setting {
        name: "sentinel_tls",
        accepts: "bool",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Sentinel),
        show: |s| s.sentinel.as_ref().map_or(Shown::None, |t| Shown::Flag(t.tls.is_some())),
        doc: "TLS to the Sentinels; None without Sentinel.",
    },
];

/// The fields of the `eviction` block (`"eviction": {"eviction_policy": "LRU", ...}`, or flat in
/// a URL's query: `?trigger_watermark=0.9`).
pub static EVICTION_SETTINGS: &[Setting] = &[
    Setting {
        name: "eviction_policy",
        accepts: "str",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Eviction),
        show: |s| Shown::Text(s.eviction.policy.name().into()),
        doc: "What eviction does: 'LRU' or 'noop'.",
    },
    Setting {
        name: "trigger_watermark",
        accepts: "float",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Eviction),
        show: |s| Shown::Number(s.eviction.trigger_watermark),
        doc: "Evict once tracked bytes pass this share of the capacity.",
    },
    Setting {
        name: "eviction_ratio",
        accepts: "float",
        url: InUrl::Query,
        env: None,
        lmcache: None,
        read: Read::With(Group::Eviction),
        show: |s| Shown::Number(s.eviction.eviction_ratio),
        doc: "Share of the tracked keys deleted per eviction.",
    },
];

fn tls_path(
    settings: &Settings,
    field: impl Fn(&crate::net::TlsOptions) -> &Option<std::path::PathBuf>,
) -> Option<String> {
    settings.tls.as_ref().and_then(|t| field(t.options()).as_ref().map(|p| p.display().to_string()))
}

/// Every setting a caller may give by name.
pub fn fields() -> Vec<&'static str> {
    SETTINGS.iter().map(|row| row.name).collect()
}

/// The names of the `eviction` block's fields.
pub fn eviction_fields() -> Vec<&'static str> {
    EVICTION_SETTINGS.iter().map(|row| row.name).collect()
}

/// The names of `group`'s settings.
pub fn group(group: Group) -> impl Iterator<Item = &'static str> {
    SETTINGS.iter().filter(move |row| matches!(row.read, Read::With(g) if g == group)).map(|row| row.name)
}

/// What a URL's query may set under its own name (the eviction fields flat); `url::parse` takes
/// `db`, `username` and `password` out of it first.
pub fn query_keys() -> Vec<&'static str> {
    SETTINGS.iter().chain(EVICTION_SETTINGS).filter(|row| row.url == InUrl::Query).map(|row| row.name).collect()
}

/// The keys `url::parse` reads out of a query itself.
pub const PARSED_QUERY_KEYS: [&str; 3] = ["db", "username", "password"];

/// The environment variables read, with the setting each fills in.
pub fn env_vars() -> Vec<(&'static str, &'static str)> {
    SETTINGS.iter().filter_map(|row| row.env.map(|var| (row.name, var))).collect()
}

/// LMCache's `valkey`-adapter names, each with the setting of ours it means.
pub fn lmcache_aliases() -> Vec<(&'static str, &'static str)> {
    SETTINGS.iter().filter_map(|row| row.lmcache.map(|alias| (alias, row.name))).collect()
}
