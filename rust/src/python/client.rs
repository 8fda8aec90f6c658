//! `_native.RedisClient`: the blocking zero-copy client. Configuration (URL, environment) is
//! resolved in Python; this class takes the resolved values.

use super::buffers::{Access, HeldBuffer, key_bytes};
use super::errors::{invalid_input, to_py_err};
use crate::client::BlockingClient;
use crate::error::Error;
use crate::net::{ConnectOptions, Endpoint};
use crate::secret::Secret;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct RedisClient {
    /// `None` once closed. The mutex serializes callers from several Python threads; it is
    /// taken with the GIL released.
    inner: Mutex<Option<BlockingClient>>,
    description: String,
}

pub fn seconds(value: f64, name: &str) -> PyResult<Duration> {
    if !(value.is_finite() && value > 0.0) {
        return Err(invalid_input(format!("{name} must be a positive number of seconds, got {value}")));
    }
    Ok(Duration::from_secs_f64(value))
}

/// The server from the resolved settings: a Unix socket path wins over a host.
pub fn endpoint(host: Option<String>, port: u16, unix_path: Option<PathBuf>) -> PyResult<Endpoint> {
    match (unix_path, host) {
        (Some(path), _) => Ok(Endpoint::Unix { path }),
        (None, Some(host)) if !host.is_empty() => Ok(Endpoint::Tcp { host, port }),
        (None, _) => Err(invalid_input("a host or a unix socket path is required")),
    }
}

/// Endpoint and credentials from the resolved settings.
pub fn connect_options(
    host: Option<String>,
    port: u16,
    unix_path: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
    db: u32,
    connect_timeout: Duration,
) -> PyResult<ConnectOptions> {
    let mut options = ConnectOptions::new(endpoint(host, port, unix_path)?);
    options.username = username.filter(|u| !u.is_empty());
    options.password = password.filter(|p| !p.is_empty()).map(Secret::new);
    options.db = db;
    options.connect_timeout = connect_timeout;
    Ok(options)
}

impl RedisClient {
    /// Runs `call` on the client with the GIL released.
    fn with_client<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut BlockingClient) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match guard.as_mut() {
                Some(client) => call(client),
                None => Err(Error::closed("RedisClient")),
            }
        })
        .map_err(|err| to_py_err(&err))
    }
}

#[pymethods]
impl RedisClient {
    #[new]
    #[pyo3(signature = (host, port, *, unix_path=None, username=None, password=None, db=0, timeout=10.0, connect_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: Option<String>,
        port: u16,
        unix_path: Option<PathBuf>,
        username: Option<String>,
        password: Option<String>,
        db: u32,
        timeout: f64,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let timeout = seconds(timeout, "timeout")?;
        let connect_timeout = connect_timeout.map_or(Ok(timeout), |t| seconds(t, "connect_timeout"))?;
        let options = connect_options(host, port, unix_path, username, password, db, connect_timeout)?;
        let description = describe(&options, timeout);
        let client = py.detach(|| BlockingClient::connect(options, timeout)).map_err(|err| to_py_err(&err))?;
        Ok(RedisClient { inner: Mutex::new(Some(client)), description })
    }

    /// Stores the bytes of `buffer` under `key`.
    fn set(&self, py: Python<'_>, key: &Bound<'_, PyAny>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        let value = HeldBuffer::get(buffer, Access::Read)?;
        let raw = value.raw();
        self.with_client(py, |client| client.set(key, raw))
    }

    /// Receives the value of `key` into `buffer`; returns the bytes written, or None on a miss.
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyAny>, buffer: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let key = key_bytes(key)?;
        let dest = HeldBuffer::get(buffer, Access::Write)?;
        let raw = dest.raw();
        self.with_client(py, |client| client.get(key, raw))
    }

    fn exists(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.with_client(py, |client| client.exists(key))
    }

    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.with_client(py, |client| client.delete(key))
    }

    fn ping(&self, py: Python<'_>) -> PyResult<()> {
        self.with_client(py, |client| client.ping())
    }

    /// Closes the connection. Idempotent; later calls raise ClosedError.
    fn close(&self, py: Python<'_>) {
        let client = py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(client);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// True when the open connection has TCP_NODELAY set (None for Unix sockets or when closed).
    #[getter]
    fn tcp_nodelay(&self, py: Python<'_>) -> Option<bool> {
        py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(|c| c.socket_nodelay()))
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { ", closed" } else { "" };
        format!("<_native.RedisClient {}{state}>", self.description)
    }
}

/// A description for reprs: never the password.
pub fn describe(options: &ConnectOptions, timeout: Duration) -> String {
    let mut text = format!("endpoint={} db={} timeout={}s", options.endpoint, options.db, timeout.as_secs_f64());
    if let Some(user) = &options.username {
        text.push_str(&format!(" username={user:?}"));
    }
    if options.password.is_some() {
        text.push_str(" password=***");
    }
    text
}
