//! `_native.Settings`, `_native.EvictionSettings` and `_native.Secret`: the one typed object
//! that crosses from Python to Rust. Python gathers the sources (keyword arguments, a URL, the
//! environment, LMCache's JSON); every check and every default is the core's
//! ([`crate::settings`]).

use super::errors::{invalid_input, to_py_err};
use crate::net::{Endpoint, TlsOptions};
use crate::secret::Secret;
use crate::settings::{ENV_VARS, EVICTION_FIELDS, Eviction, FIELDS, Settings, Sources, VALKEY_FIELDS, Value};
use crate::settings::{EvictionPolicy, GetPieces};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyMapping, PyString};

/// A password: shows as `***`, cannot be pickled; `reveal()` is the only way to the value.
#[pyclass(module = "lmcache_resp._native", name = "Secret", frozen)]
pub struct PySecret(pub Secret);

#[pymethods]
impl PySecret {
    #[new]
    fn new(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        match value.cast::<PyString>() {
            Ok(text) => Ok(PySecret(Secret::new(utf8("password", text)?))),
            Err(_) => Err(invalid_input(format!("password must be a str, not {}", type_name(value)))),
        }
    }

    fn reveal(&self) -> &str {
        self.0.expose()
    }

    fn __repr__(&self) -> &'static str {
        "Secret('***')"
    }

    fn __str__(&self) -> &'static str {
        "***"
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PySecret>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        ("Secret", self.0.expose()).hash(&mut hasher);
        hasher.finish()
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "Secret values are not picklable: pass credentials through the environment",
        ))
    }
}

/// Client-side eviction once `max_capacity_gb` is set.
#[pyclass(module = "lmcache_resp._native", name = "EvictionSettings", frozen)]
pub struct PyEviction(pub Eviction);

#[pymethods]
impl PyEviction {
    #[new]
    #[pyo3(signature = (eviction_policy=None, trigger_watermark=None, eviction_ratio=None))]
    fn new(
        eviction_policy: Option<&Bound<'_, PyAny>>,
        trigger_watermark: Option<&Bound<'_, PyAny>>,
        eviction_ratio: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let [policy, watermark, ratio] = [
            ("eviction_policy", eviction_policy),
            ("trigger_watermark", trigger_watermark),
            ("eviction_ratio", eviction_ratio),
        ]
        .map(|(name, v)| v.map(|v| to_value(name, v)).transpose());
        Eviction::from_values(policy?.flatten().as_ref(), watermark?.flatten().as_ref(), ratio?.flatten().as_ref())
            .map(PyEviction)
            .map_err(|e| to_py_err(&e))
    }

    #[getter]
    fn eviction_policy(&self) -> &'static str {
        policy_name(self.0.policy)
    }

    #[getter]
    fn trigger_watermark(&self) -> f64 {
        self.0.trigger_watermark
    }

    #[getter]
    fn eviction_ratio(&self) -> f64 {
        self.0.eviction_ratio
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        out.set_item("eviction_policy", self.eviction_policy())?;
        out.set_item("trigger_watermark", self.0.trigger_watermark)?;
        out.set_item("eviction_ratio", self.0.eviction_ratio)?;
        Ok(out)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyEviction>().is_ok_and(|o| o.get().0 == self.0)
    }

    fn __repr__(&self) -> String {
        format!(
            "EvictionSettings(eviction_policy={:?}, trigger_watermark={}, eviction_ratio={})",
            self.eviction_policy(),
            self.0.trigger_watermark,
            self.0.eviction_ratio
        )
    }
}

pub fn policy_name(policy: EvictionPolicy) -> &'static str {
    match policy {
        EvictionPolicy::Lru => "LRU",
        EvictionPolicy::Noop => "noop",
    }
}

/// Every setting, resolved and checked: `Settings(url=None, *, env=None, **explicit)`.
/// Explicit values win over the URL, the URL over `env` (a mapping such as `os.environ`; only
/// `LMCACHE_RESP_HOST/PORT/USERNAME/PASSWORD` and, where TLS is on,
/// `LMCACHE_RESP_SSL_CA_CERTS/CERTFILE/KEYFILE` are read), and those over the defaults. `None`
/// means "not set". Safe to print: the password shows as `***`, TLS as its file paths.
#[pyclass(module = "lmcache_resp._native", name = "Settings", frozen, subclass)]
pub struct PySettings(pub Settings);

#[pymethods]
impl PySettings {
    #[new]
    #[pyo3(signature = (url=None, *, env=None, **explicit))]
    fn new(
        url: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        explicit: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let url = match url {
            None => None,
            Some(url) => Some(
                utf8(
                    "url",
                    url.cast::<PyString>()
                        .map_err(|_| invalid_input(format!("url must be a str, not {}", type_name(url))))?,
                )?
                .to_owned(),
            ),
        };
        let mut given = Vec::new();
        if let Some(explicit) = explicit {
            for (name, value) in explicit.iter() {
                let name = name.extract::<String>()?;
                if let Some(value) = to_value(&name, &value)? {
                    given.push((name, value));
                }
            }
        }
        let mut environment = Vec::new();
        if let Some(env) = env {
            let env = env.cast::<PyMapping>().map_err(|_| invalid_input("env must be a mapping such as os.environ"))?;
            for (_, var) in ENV_VARS {
                if let Ok(value) = env.get_item(var) {
                    if let Ok(text) = value.extract::<String>() {
                        environment.push((var.to_string(), text));
                    }
                }
            }
        }
        let sources = Sources { explicit: &given, url: url.as_deref(), env: &environment };
        Settings::resolve(&sources).map(PySettings).map_err(|e| to_py_err(&e))
    }

    /// The names `Settings(**explicit)` accepts.
    #[classattr]
    fn fields() -> Vec<&'static str> {
        FIELDS.to_vec()
    }

    /// LMCache's `valkey`-adapter names accepted beside [`FIELDS`], each with the field it means.
    #[classattr]
    fn valkey_fields() -> Vec<(&'static str, &'static str)> {
        VALKEY_FIELDS.to_vec()
    }

    /// The names an `eviction` block accepts.
    #[classattr]
    fn eviction_fields() -> Vec<&'static str> {
        EVICTION_FIELDS.to_vec()
    }

    /// The environment variables read, by field.
    #[classattr]
    fn env_vars() -> Vec<(&'static str, &'static str)> {
        ENV_VARS.to_vec()
    }

    /// Host of the first server (None for a Unix socket).
    #[getter]
    fn host(&self) -> Option<&str> {
        match self.0.endpoint() {
            Endpoint::Tcp { host, .. } => Some(host),
            Endpoint::Unix { .. } => None,
        }
    }

    #[getter]
    fn port(&self) -> u16 {
        match self.0.endpoint() {
            Endpoint::Tcp { port, .. } => *port,
            Endpoint::Unix { .. } => crate::settings::defaults::PORT,
        }
    }

    #[getter]
    fn unix_path(&self) -> Option<String> {
        match self.0.endpoint() {
            Endpoint::Unix { path } => Some(path.display().to_string()),
            Endpoint::Tcp { .. } => None,
        }
    }

    /// `host:port` or `unix:/path` of the first server.
    #[getter]
    fn endpoint(&self) -> String {
        self.0.endpoint().to_string()
    }

    /// Every server named (cluster seeds, or shards).
    #[getter]
    fn endpoints(&self) -> Vec<String> {
        self.0.endpoints.iter().map(ToString::to_string).collect()
    }

    #[getter]
    fn cluster(&self) -> bool {
        self.0.cluster
    }

    #[getter]
    fn username(&self) -> Option<&str> {
        self.0.username.as_deref()
    }

    #[getter]
    fn password(&self) -> Option<PySecret> {
        self.0.password.clone().map(PySecret)
    }

    #[getter]
    fn db(&self) -> u32 {
        self.0.db
    }

    #[getter]
    fn timeout(&self) -> f64 {
        self.0.timeout.as_secs_f64()
    }

    #[getter]
    fn connect_timeout(&self) -> f64 {
        self.0.connect_timeout.as_secs_f64()
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.0.num_workers
    }

    #[getter]
    fn connections_per_worker(&self) -> usize {
        self.0.connections_per_worker
    }

    #[getter]
    fn max_inflight_bytes(&self) -> usize {
        self.0.pipeline.max_inflight_bytes
    }

    #[getter]
    fn max_inflight_requests(&self) -> usize {
        self.0.pipeline.max_inflight_requests
    }

    #[getter]
    fn cpu_affinity(&self) -> String {
        self.0.cpu_affinity.to_string()
    }

    #[getter]
    fn max_capacity_gb(&self) -> f64 {
        self.0.max_capacity_gb
    }

    /// `max_capacity_gb` in bytes (decimal GB); 0 = no capacity tracking.
    #[getter]
    fn capacity_bytes(&self) -> u64 {
        self.0.capacity_bytes()
    }

    #[getter]
    fn eviction(&self) -> PyEviction {
        PyEviction(self.0.eviction)
    }

    #[getter]
    fn prefault(&self) -> bool {
        self.0.prefault
    }

    /// How GETs of large values are read: `"auto"` (per server, from what it is), or a piece
    /// size in bytes (0: one GET per value). (Named explicitly: PyO3 would drop a getter's
    /// `get_` prefix.)
    #[getter(get_piece_bytes)]
    fn get_piece_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.0.get_piece_bytes {
            GetPieces::Auto => PyString::new(py, "auto").into_any(),
            GetPieces::Bytes(bytes) => bytes.into_pyobject(py)?.into_any(),
        })
    }

    /// The namespace: keys go on the wire as `<key_prefix>@<key>`; None: no prefix.
    #[getter]
    fn key_prefix(&self) -> Option<&str> {
        self.0.key_prefix.as_deref()
    }

    /// Every SET expires its key after this many seconds; None: never.
    #[getter]
    fn ttl_seconds(&self) -> Option<u64> {
        self.0.ttl.map(|ttl| ttl.as_secs())
    }

    /// Redis Cluster: where GET and EXISTS go, `"primary"` or `"prefer_replica"` (spread over
    /// the primary and its replicas).
    #[getter]
    fn read_from(&self) -> &'static str {
        self.0.read_from.name()
    }

    /// Which loop the I/O workers run: `"auto"` (io_uring where allowed, else poll), `"uring"`
    /// or `"poll"`.
    #[getter]
    fn io_backend(&self) -> &'static str {
        self.0.io_backend.name()
    }

    /// TLS is on (`rediss://` or `ssl=True`).
    #[getter]
    fn ssl(&self) -> bool {
        self.0.tls.is_some()
    }

    /// The CA bundle trusted; None: the system trust store (or `ssl_ca_path`), or no TLS.
    #[getter]
    fn ssl_ca_certs(&self) -> Option<String> {
        self.tls_path(|o| &o.ca_certs)
    }

    /// The directory of CA certificates trusted; None if not set or no TLS.
    #[getter]
    fn ssl_ca_path(&self) -> Option<String> {
        self.tls_path(|o| &o.ca_path)
    }

    /// This client's certificate (mutual TLS); None if not set or no TLS.
    #[getter]
    fn ssl_certfile(&self) -> Option<String> {
        self.tls_path(|o| &o.certfile)
    }

    /// The path of the client certificate's key (never its contents); None if not set.
    #[getter]
    fn ssl_keyfile(&self) -> Option<String> {
        self.tls_path(|o| &o.keyfile)
    }

    /// The server's certificate must name the host (or `ssl_server_name`); False without
    /// TLS or with `ssl_cert_reqs="none"`.
    #[getter]
    fn ssl_check_hostname(&self) -> bool {
        self.0.tls.as_ref().is_some_and(|t| t.options().check_hostname)
    }

    /// `"required"` (the server's certificate is verified) or `"none"`; None without TLS.
    #[getter]
    fn ssl_cert_reqs(&self) -> Option<&'static str> {
        self.0.tls.as_ref().map(|t| if t.verification_off() { "none" } else { "required" })
    }

    /// The name sent as SNI and verified instead of the host; None if not set or no TLS.
    #[getter]
    fn ssl_server_name(&self) -> Option<String> {
        self.0.tls.as_ref().and_then(|t| t.options().server_name.clone())
    }

    /// Settings accepted but without effect (the caller logs them).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.0.warnings.clone()
    }

    /// Every setting, for logs and reports: the password as `***`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.0;
        let out = PyDict::new(py);
        out.set_item("host", self.host())?;
        out.set_item("port", self.port())?;
        out.set_item("unix_path", self.unix_path())?;
        out.set_item("endpoints", self.endpoints())?;
        out.set_item("cluster", s.cluster)?;
        out.set_item("username", self.username())?;
        out.set_item("password", s.password.as_ref().map(|_| "***"))?;
        out.set_item("db", s.db)?;
        out.set_item("timeout", self.timeout())?;
        out.set_item("connect_timeout", self.connect_timeout())?;
        out.set_item("num_workers", s.num_workers)?;
        out.set_item("connections_per_worker", s.connections_per_worker)?;
        out.set_item("max_inflight_bytes", s.pipeline.max_inflight_bytes)?;
        out.set_item("max_inflight_requests", s.pipeline.max_inflight_requests)?;
        out.set_item("cpu_affinity", self.cpu_affinity())?;
        out.set_item("max_capacity_gb", s.max_capacity_gb)?;
        out.set_item("eviction", self.eviction().to_dict(py)?)?;
        out.set_item("prefault", s.prefault)?;
        out.set_item("get_piece_bytes", self.get_piece_bytes(py)?)?;
        out.set_item("key_prefix", self.key_prefix())?;
        out.set_item("ttl_seconds", self.ttl_seconds())?;
        out.set_item("read_from", self.read_from())?;
        out.set_item("io_backend", self.io_backend())?;
        out.set_item("ssl", self.ssl())?;
        out.set_item("ssl_ca_certs", self.ssl_ca_certs())?;
        out.set_item("ssl_ca_path", self.ssl_ca_path())?;
        out.set_item("ssl_certfile", self.ssl_certfile())?;
        out.set_item("ssl_keyfile", self.ssl_keyfile())?;
        out.set_item("ssl_check_hostname", self.ssl_check_hostname())?;
        out.set_item("ssl_cert_reqs", self.ssl_cert_reqs())?;
        out.set_item("ssl_server_name", self.ssl_server_name())?;
        let sentinel = s.sentinel.as_ref();
        let nodes = sentinel.map(|t| t.nodes.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
        out.set_item("sentinel_nodes", nodes)?;
        out.set_item("sentinel_service_name", sentinel.map(|t| t.service.clone()))?;
        out.set_item("sentinel_username", sentinel.and_then(|t| t.username.clone()))?;
        out.set_item("sentinel_password", sentinel.and_then(|t| t.password.as_ref()).map(|_| "***"))?;
        out.set_item("sentinel_tls", sentinel.map(|t| t.tls.is_some()))?;
        Ok(out)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        Ok(format!("{name}({})", slf.get().0))
    }
}

impl PySettings {
    fn tls_path(&self, field: impl Fn(&TlsOptions) -> &Option<std::path::PathBuf>) -> Option<String> {
        self.0.tls.as_ref().and_then(|t| field(t.options()).as_ref().map(|p| p.display().to_string()))
    }
}

/// The text of `text`, the value of setting `name`; a `str` UTF-8 cannot encode (a lone
/// surrogate, as `surrogateescape` leaves for bytes that are not UTF-8) is bad input, refused
/// as such, without showing it (it may be a password), not a `UnicodeEncodeError`.
fn utf8<'a>(name: &str, text: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    text.to_str().map_err(|_| {
        invalid_input(format!(
            "{name} holds a character UTF-8 cannot encode (a lone surrogate, as decoding bytes with \
             surrogateescape leaves): give valid text"
        ))
    })
}

/// A Python value as the value of setting `name`; `None` is "not set".
pub fn to_value(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    if obj.is_none() {
        return Ok(None);
    }
    let value = if let Ok(flag) = obj.cast::<PyBool>() {
        Value::Bool(flag.is_true())
    } else if obj.cast::<PyInt>().is_ok() {
        match obj.extract::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Float(obj.extract::<f64>().unwrap_or(f64::INFINITY)),
        }
    } else if let Ok(x) = obj.cast::<PyFloat>() {
        Value::Float(x.value())
    } else if let Ok(text) = obj.cast::<PyString>() {
        Value::Text(utf8(name, text)?.to_owned())
    } else if let Some(path) = fspath(name, obj)? {
        Value::Text(path)
    } else if let Ok(secret) = obj.cast::<PySecret>() {
        Value::Secret(secret.get().0.clone())
    } else if let Ok(eviction) = obj.cast::<PyEviction>() {
        let e = eviction.get().0;
        Value::Map(vec![
            ("eviction_policy".into(), Value::Text(policy_name(e.policy).into())),
            ("trigger_watermark".into(), Value::Float(e.trigger_watermark)),
            ("eviction_ratio".into(), Value::Float(e.eviction_ratio)),
        ])
    } else if let Ok(mapping) = obj.cast::<PyMapping>() {
        let mut entries = Vec::new();
        for item in mapping.items()?.iter() {
            let (key, value) = item.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()?;
            let key = key.str()?.to_str()?.to_owned();
            if let Some(value) = to_value(&format!("{name}.{key}"), &value)? {
                entries.push((key, value));
            }
        }
        Value::Map(entries)
    } else {
        Value::Other { type_name: type_name(obj), repr: obj.repr().map(|r| r.to_string()).unwrap_or_default() }
    };
    Ok(Some(value))
}

/// A `str` path of an `os.PathLike` (`pathlib.Path`), for the `ssl_*` files; None for
/// anything else (a bytes path is refused as its type, like any other non-str).
fn fspath(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if !obj.hasattr("__fspath__")? {
        return Ok(None);
    }
    let path = obj.call_method0("__fspath__")?;
    path.cast::<PyString>().ok().map(|text| utf8(name, text).map(str::to_owned)).transpose()
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}

/// `Settings` from a Python object that is one (or a subclass).
pub fn settings_of(obj: &Bound<'_, PyAny>) -> PyResult<Settings> {
    obj.cast::<PySettings>().map(|s| s.get().0.clone()).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!("expected lmcache_resp Settings, not {}", type_name(obj)))
    })
}
