//! `_native.Bridge`: the bridge process's engine, page pool and socket, for
//! `python -m lmcache_resp.bridge`.

use super::errors::{invalid_input, to_py_err};
use super::facts::{capacity_dict, placement_dict};
use super::settings::settings_of;
use crate::bridge::BridgeServer;
use crate::engine::EngineConfig;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::time::Duration;

#[pyclass(module = "lmcache_resp._native", frozen)]
pub struct Bridge {
    server: BridgeServer,
    socket: PathBuf,
}

#[pymethods]
impl Bridge {
    /// Starts the engine (connecting to the servers of `settings`), creates the page pool
    /// and listens on `socket`.
    #[new]
    #[pyo3(signature = (settings, socket, *, page_size, num_pages))]
    fn new(
        py: Python<'_>,
        settings: &Bound<'_, PyAny>,
        socket: PathBuf,
        page_size: usize,
        num_pages: usize,
    ) -> PyResult<Self> {
        let mut config = EngineConfig::new(settings_of(settings)?);
        config.page_size = page_size;
        config.num_pages = num_pages;
        let server = py.detach(|| BridgeServer::start(config, &socket)).map_err(|e| to_py_err(&e))?;
        Ok(Bridge { server, socket })
    }

    /// Completes or fails what is in flight, drops the clients, removes the socket.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.server.stop());
    }

    #[getter]
    fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    #[getter]
    fn clients(&self) -> usize {
        self.server.clients()
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.server.pool().page_size()
    }

    #[getter]
    fn num_pages(&self) -> usize {
        self.server.pool().capacity()
    }

    #[getter]
    fn free_pages(&self) -> usize {
        self.server.pool().free_count()
    }

    #[getter]
    fn num_workers(&self) -> usize {
        self.server.engine().num_workers()
    }

    #[getter]
    fn endpoint(&self) -> String {
        self.server.engine().endpoint().to_owned()
    }

    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        placement_dict(py, self.server.engine().placement())
    }

    #[getter]
    fn capacity_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        capacity_dict(py, self.server.engine().capacity())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        Python::attach(|py| py.detach(|| self.server.stop()));
    }
}

/// How long an attaching client waits for the bridge's welcome.
pub fn attach_timeout(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| invalid_input(format!("timeout must be a positive number of seconds, got {seconds}")))
}
