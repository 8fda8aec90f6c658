//! `_native.RedisClient`: the blocking zero-copy client, built from a `Settings`.

use super::buffers::{Access, HeldBuffer, key_bytes};
use super::errors::to_py_err;
use super::settings::settings_of;
use crate::blocking::BlockingClient;
use crate::conn::Outcome;
use crate::error::Error;
use crate::metrics::ClientMetrics;
use crate::op::Op;
use pyo3::prelude::*;
use std::sync::Mutex;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct RedisClient {
    /// `None` once closed. The mutex serializes callers from several Python threads; it is
    /// taken with the GIL released.
    inner: Mutex<Option<BlockingClient>>,
    description: String,
    /// A forked child shares the socket with its parent: it must not use it.
    owner_pid: u32,
    /// Its counters (each call is a one-key batch).
    metrics: ClientMetrics,
}

impl RedisClient {
    /// Runs `call` on the client with the GIL released.
    fn with_client<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut BlockingClient) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        if std::process::id() != self.owner_pid {
            return Err(to_py_err(&Error::new(
                crate::ErrorKind::Forked,
                format!(
                    "this RedisClient was created by process {} and cannot be used in process {}, which inherited \
                     it through fork(): its connection belongs to the parent; create a new client",
                    self.owner_pid,
                    std::process::id()
                ),
            )));
        }
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match guard.as_mut() {
                Some(client) => call(client),
                None => Err(Error::closed("RedisClient")),
            }
        })
        .map_err(|err| to_py_err(&err))
    }

    /// [`RedisClient::with_client`], counted as one key of `op` (`sent` payload bytes).
    fn counted<T: Send>(
        &self,
        py: Python<'_>,
        op: Op,
        sent: u64,
        outcome: fn(&T) -> Outcome,
        call: impl FnOnce(&mut BlockingClient) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        self.with_client(py, |client| {
            let began = self.metrics.begin();
            let result = call(client);
            let counted = match &result {
                Ok(value) => outcome(value),
                Err(err) => Outcome::Failed(err.clone()),
            };
            self.metrics.record(op, began, sent, &counted);
            result
        })
    }
}

#[pymethods]
impl RedisClient {
    /// Connects to the first server of `settings`, authenticates and pings.
    #[new]
    fn new(py: Python<'_>, settings: &Bound<'_, PyAny>) -> PyResult<Self> {
        let settings = settings_of(settings)?;
        let description = settings.to_string();
        let client = py.detach(|| BlockingClient::for_settings(&settings)).map_err(|err| to_py_err(&err))?;
        let metrics = ClientMetrics::new(client.endpoint());
        Ok(RedisClient { inner: Mutex::new(Some(client)), description, owner_pid: std::process::id(), metrics })
    }

    /// Stores the bytes of `buffer` under `key`.
    fn set(&self, py: Python<'_>, key: &Bound<'_, PyAny>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        let value = HeldBuffer::get(buffer, Access::Read)?;
        let raw = value.raw();
        self.counted(py, Op::Set, raw.len() as u64, |_| Outcome::Done, |client| client.set(key, raw))
    }

    /// Receives the value of `key` into `buffer`; returns the bytes written, or None on a miss.
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyAny>, buffer: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let key = key_bytes(key)?;
        let dest = HeldBuffer::get(buffer, Access::Write)?;
        let raw = dest.raw();
        let hit = |n: &Option<usize>| n.map_or(Outcome::Miss, Outcome::Hit);
        self.counted(py, Op::Get, 0, hit, |client| client.get(key, raw))
    }

    fn exists(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.counted(py, Op::Exists, 0, |found| Outcome::Bool(*found), |client| client.exists(key))
    }

    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.counted(py, Op::Del, 0, |gone| Outcome::Bool(*gone), |client| client.delete(key))
    }

    fn ping(&self, py: Python<'_>) -> PyResult<()> {
        self.with_client(py, |client| client.ping())
    }

    /// Closes the connection. Idempotent; later calls raise ClosedError.
    fn close(&self, py: Python<'_>) {
        let client = py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(client);
    }

    /// The counters, as a dict (`lmcache_resp.stats.Stats` wraps it).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        super::stats::snapshot_dict(py, &self.metrics.snapshot())
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
